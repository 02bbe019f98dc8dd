"""Test set-up: without a GPU every test runs on numba's CUDA simulator.

``NUMBA_ENABLE_CUDASIM`` must be decided before numba is imported, so it is set
here at collection time. Set ``DFLASH2_GPU=1`` to run on a real GPU instead
(then the ``gpu``-marked tests run too).
"""
import os

if os.environ.get("DFLASH2_GPU", "0") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402


def _on_gpu() -> bool:
    from dflash2_numba._compat import SIMULATOR, gpu_available

    if SIMULATOR:
        return False

    return gpu_available()


ON_GPU = _on_gpu()


def _runs_long(item) -> bool:
    """The session's sm_70 PTX report and the tests marked ``slow``: started first, so that
    under pytest-xdist (the README's command runs two processes) one process takes them
    while the other works through the rest, and the report's tests share one process."""
    return "sm70_ptx_report" in getattr(item, "fixturenames", ()) or \
        item.get_closest_marker("slow") is not None


def pytest_configure(config):
    """``DFLASH2_GPU=1`` asks for the GPU run: without a usable GPU (or with the simulator
    forced on) the run ends with an error, rather than skipping every gpu-marked test and
    exiting 0."""
    if os.environ.get("DFLASH2_GPU", "0") == "1" and not ON_GPU:
        from dflash2_numba._compat import SIMULATOR

        why = "NUMBA_ENABLE_CUDASIM=1 is set" if SIMULATOR else "numba finds no usable CUDA GPU"
        pytest.exit(f"DFLASH2_GPU=1 but {why}: the gpu-marked tests cannot run", returncode=4)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not _runs_long(item))     # stable: the rest keep their order
    if ON_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (DFLASH2_GPU=1 on a GPU machine)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ptxas_path():
    """The ptxas that targets sm_70 (the cuda12 extra's first); a test that needs it and finds
    none fails, or skips under ``DFLASH2_SKIP_MISSING=1`` (``tests/missing_tools.py``)."""
    from dflash2_numba.ptx import find_ptxas
    from tests.missing_tools import missing

    found = find_ptxas()
    if found is None:
        missing("needs a ptxas that targets sm_70 (the cuda12 extra's)")
    return found


@pytest.fixture
def poisoned_dynamic_shared_memory(monkeypatch):
    """The simulator's dynamic shared memory starts with all bits set (NaN), so a kernel that
    reads a shared value nothing wrote cannot pass a byte comparison."""
    from numba.cuda.simulator import kernelapi

    original = kernelapi.FakeCUDAShared.__init__

    def init(self, dynshared_size):
        original(self, dynshared_size)
        self._dynshared[:] = -1

    monkeypatch.setattr(kernelapi.FakeCUDAShared, "__init__", init)


@pytest.fixture(scope="session")
def sm70_ptx_report(request, tmp_path_factory):
    """``python -m dflash2_numba.ptx --cc 7.0 --jobs 2 --json ...`` run once for the session
    (the sm_70 compile and assembly of every kernel is the suite's costliest step; the tests
    that read its rows share them): ``(completed process, rows)``. Two jobs, whatever the
    machine's cores, so that the parallel path is the one whose rows are checked (the
    one-variant dump test compares a one-job run against them). Without a ptxas that targets
    sm_70 (the cuda12 extra) its tests fail, or skip, as ``ptxas_path`` says."""
    request.getfixturevalue("ptxas_path")
    out = tmp_path_factory.mktemp("sm70_ptx") / "rows.json"
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    proc = subprocess.run([sys.executable, "-m", "dflash2_numba.ptx", "--cc", "7.0", "--jobs", "2",
                           "--json", str(out)], capture_output=True, text=True, env=env, timeout=1800)
    rows = json.loads(out.read_text()) if out.exists() else None
    return proc, rows
