"""Test set-up: without a GPU every test runs on numba's CUDA simulator.

``NUMBA_ENABLE_CUDASIM`` must be decided before numba is imported, so it is set
here at collection time. Set ``DFLASH2_GPU=1`` to run on a real GPU instead
(then the ``gpu``-marked tests run too).
"""
import os

if os.environ.get("DFLASH2_GPU", "0") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import pytest  # noqa: E402


def _on_gpu() -> bool:
    from dflash2_numba._compat import SIMULATOR, gpu_available

    if SIMULATOR:
        return False

    return gpu_available()


ON_GPU = _on_gpu()


def pytest_collection_modifyitems(config, items):
    if ON_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (DFLASH2_GPU=1 on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
