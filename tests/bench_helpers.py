"""The ``bench/`` scripts under test: importable in this process (:func:`bench_importable`)
or run as their own process, the way their users run them (:func:`run_bench_script`)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_bench_script(script, args, cwd, simulator=True, timeout=600):
    """``python3 bench/<script> <args>`` in ``cwd``, output captured, ``$OUT`` unset (so a
    script's default output folder is not the caller's); on numba's CUDA simulator unless
    ``simulator`` is False (then without ``NUMBA_ENABLE_CUDASIM``, to find a GPU or none)."""
    env = dict(os.environ)
    env.pop("OUT", None)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, str(REPO / "bench" / script), *args], cwd=str(cwd),
                          env=env, capture_output=True, text=True, timeout=timeout)


def bench_importable(monkeypatch) -> None:
    """``import bench.<script>`` works in this test (the repository root on ``sys.path`` for
    the test's duration, where it is not already)."""
    if str(REPO) not in sys.path:
        monkeypatch.syspath_prepend(str(REPO))
