"""Running test code in a child process with numba's real typing and NVVM (no simulator),
for the tests that inspect PTX on a machine without a GPU."""
import json
import os
import subprocess
import sys
import textwrap

from tests.missing_tools import missing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# every child first proves that numba finds libNVVM (exit 77: tests/missing_tools.missing)
NVVM_PREAMBLE = textwrap.dedent(r"""
    import json, re, sys
    from numba.cuda.cudadrv.error import NvvmSupportError
    from numba.cuda.cudadrv.nvvm import NVVM
    try:
        NVVM()
    except NvvmSupportError as e:
        print("NO_NVVM", e)
        sys.exit(77)
""")


def child_json(code: str, tag: str, timeout: int = 900):
    """Run ``NVVM_PREAMBLE + code`` in a child without the simulator (real typing and NVVM)
    and return the JSON it printed after ``tag``; without a libNVVM there the test ends as
    ``tests/missing_tools.missing`` says."""
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", NVVM_PREAMBLE + textwrap.dedent(code)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode == 77:
        missing("numba.cuda cannot find libNVVM (the cuda12 extra's): " + proc.stdout.strip()[-200:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith(tag)][-1]
    return json.loads(line[len(tag):])


# For a child that builds kernels as a launch does (the dispatcher's own compile and link)
# without a GPU: numba's device lookups answer with CC (9, 0) and the cubin is not loaded
# (nothing to load it onto). ``links`` records every link (LTO or not, the object kinds, the
# PTX's operation counts); ``sass_ops(cubin)`` counts SASS operations (None without nvdisasm).
OFFLINE_BUILD_PREAMBLE = textwrap.dedent(r"""
    import subprocess, tempfile, types as pytypes
    from cuda import pathfinder
    from numba.cuda import codegen, dispatcher
    from numba.cuda.cudadrv import driver
    from bench.fma_contraction_probe import OPS, SASS_OPS

    CC = (9, 0)
    device = pytypes.SimpleNamespace(compute_capability=CC)
    codegen.devices.get_context = lambda *a: pytypes.SimpleNamespace(device=device)
    dispatcher._Kernel.bind = lambda self: None
    links = []
    _complete = driver._Linker.complete

    def _recording_complete(self):
        ptx = [o.code.decode() for o in self._object_codes if o.code_type == "ptx"]
        links.append({"lto": bool(self.lto),
                      "objects": sorted(o.code_type for o in self._object_codes),
                      "ptx": {op: sum(p.count(op) for p in ptx) for op in OPS}})
        return _complete(self)

    driver._Linker.complete = _recording_complete
    nvdisasm = pathfinder.find_nvidia_binary_utility("nvdisasm")

    def sass_ops(cubin):
        if not nvdisasm:
            return None
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(bytes(cubin.code))
            f.flush()
            sass = subprocess.run([nvdisasm, f.name], capture_output=True, text=True,
                                  check=True).stdout
        return {op: sass.count(op) for op in SASS_OPS}
""")
