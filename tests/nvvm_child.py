"""Running test code in a child process with numba's real typing and NVVM (no simulator),
for the tests that inspect PTX on a machine without a GPU."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# every child first proves that numba finds libNVVM (exit 77: the test skips)
NVVM_PREAMBLE = textwrap.dedent(r"""
    import json, re, sys
    try:
        from numba.cuda.cudadrv.nvvm import NVVM
        NVVM()
    except Exception as e:
        print("NO_NVVM", e)
        sys.exit(77)
""")


def child_json(code: str, tag: str, timeout: int = 900):
    """Run ``NVVM_PREAMBLE + code`` in a child without the simulator (real typing and NVVM)
    and return the JSON it printed after ``tag``; skip when numba finds no libNVVM there."""
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", NVVM_PREAMBLE + textwrap.dedent(code)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode == 77:
        pytest.skip("numba.cuda cannot find libNVVM: " + proc.stdout.strip()[-200:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith(tag)][-1]
    return json.loads(line[len(tag):])
