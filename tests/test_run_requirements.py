"""What a run needs and says when it lacks it: ``DFLASH2_GPU=1`` without a usable GPU ends
the run with an error (not 48 quiet skips and exit 0), and a tool of the cuda12 extra that
is missing fails the test that needs it unless ``DFLASH2_SKIP_MISSING=1``."""
import os
import subprocess
import sys

import pytest

from dflash2_numba._compat import SIMULATOR
from tests import missing_tools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pytest_with(env_changes, drop=()):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_changes)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "tests/test_public_api.py", "-k", "docstring"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_gpu_run_with_the_simulator_forced_on_ends_with_an_error():
    proc = _pytest_with({"DFLASH2_GPU": "1", "NUMBA_ENABLE_CUDASIM": "1"})
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "DFLASH2_GPU=1 but NUMBA_ENABLE_CUDASIM=1 is set" in proc.stdout + proc.stderr
    assert " passed" not in proc.stdout


@pytest.mark.skipif(not SIMULATOR, reason="a GPU is present here: the run would be a GPU run")
def test_gpu_run_without_a_gpu_ends_with_an_error():
    proc = _pytest_with({"DFLASH2_GPU": "1"}, drop=("NUMBA_ENABLE_CUDASIM",))
    if "numba finds no usable CUDA GPU" not in proc.stdout + proc.stderr:
        pytest.skip("this machine's driver answers: " + proc.stdout[-300:])
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_missing_tool_fails_unless_skipping_is_asked_for(monkeypatch):
    monkeypatch.setattr(missing_tools, "SKIP_MISSING", False)
    with pytest.raises(pytest.fail.Exception, match="needs ptxas .*DFLASH2_SKIP_MISSING=1"):
        missing_tools.missing("needs ptxas")
    with pytest.raises(pytest.fail.Exception, match="needs no_such_module_here"):
        missing_tools.module("no_such_module_here")
    assert missing_tools.module("numpy") is sys.modules["numpy"]
    monkeypatch.setattr(missing_tools, "SKIP_MISSING", True)
    with pytest.raises(pytest.skip.Exception, match="needs ptxas"):
        missing_tools.missing("needs ptxas")
