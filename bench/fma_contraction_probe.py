"""Where ``a*b + c`` gets fused on this GPU: the NVVM version, the PTX and (where nvdisasm
runs) the SASS of one kernel built three ways, and what each returns against the
two-rounding and the fused host results:

- ``package``: as ``_registry.launch`` builds it (``exact_fp32``: NVVM ``-fma=0``, and the
  cubin linked from that PTX);
- ``package_lto``: the same flags but linked through nvJitLink's LTO, numba's default where
  nvJitLink is installed (the build session 39 found fused: 256 of 256 on an H100);
- ``numba_default``: numba's own flags (contracts in NVVM).

Session 40 found the cause offline (CUDA 12.9 and 13.5 nvJitLink): the LTO link fuses the
pair NVVM kept apart; ``_compat._install_lto_patch`` links the package's kernels from PTX.
Expect ``package`` all two-rounding and the other two all fused.

Usage: ``python3 bench/fma_contraction_probe.py [--out DIR]`` (writes ``fma_probe.json``).
Exit status 0 when it ran (whatever it found), 2 for usage errors. On the simulator it
says there is no PTX and only compares results (the simulator never fuses).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from dflash2_numba import _registry  # noqa: E402  (numpy shim before numba)
from dflash2_numba._compat import (  # noqa: E402
    SIMULATOR, allow_lto_link, cuda, exact_fp32, fma32_exact)

OPS = ("fma.rn.f32", "mul.rn.f32", "add.rn.f32", "fma.f32", "mul.f32", "add.f32")
SASS_OPS = ("FFMA", "FMUL", "FADD")
FORMS = ("package", "package_lto", "numba_default")


def a_times_b_plus_c(a, b, c, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] * b[i] + c[i]


def fusing_inputs(n=256, seed=7):
    """float32 a, b, c (``n`` each) where the fused and the two-rounding results differ
    everywhere, and both host results: ``(a, b, c, two_roundings, fused)``."""
    rng = np.random.default_rng(seed)
    a, b, c = (rng.uniform(lo, hi, 8 * n).astype(np.float32)
               for lo, hi in ((0.5, 2.0), (0.5, 2.0), (-2.0, 2.0)))
    two = a * b + c
    one = np.array([fma32_exact(x, y, z) for x, y, z in zip(a, b, c)], dtype=np.float32)
    keep = np.flatnonzero(two.view(np.uint32) != one.view(np.uint32))[:n]
    assert keep.size == n
    return a[keep], b[keep], c[keep], two[keep], one[keep]


@contextlib.contextmanager
def build_switches(how):
    """The compile and link switches of build ``how`` (one of :data:`FORMS`)."""
    if how == "numba_default":
        yield
    elif how == "package_lto":
        with exact_fp32(), allow_lto_link():
            yield
    else:
        with exact_fp32():
            yield


def listing(kernel, what, how="package"):
    """``{op: count}`` of a dispatcher's PTX (``what="asm"``) or SASS (``"sass"``), or the
    reason it could not be had. Under ``how``'s switches: numba's ``inspect_asm`` asks for
    the device's capability without the ``a`` suffix a launch builds for, so it compiles
    the PTX again, and outside them that PTX would be numba's default one."""
    try:
        with build_switches(how):
            found = kernel.inspect_asm() if what == "asm" else kernel.inspect_sass()
        text = "\n".join(found.values())
    except Exception as exc:  # noqa: BLE001  (simulator; no nvdisasm)
        return {"unavailable": f"{type(exc).__name__}: {exc}"[:200]}
    return {op: text.count(op) for op in (OPS if what == "asm" else SASS_OPS)}


def probe() -> dict:
    a, b, c, two, one = fusing_inputs()
    found = {"simulator": SIMULATOR}
    if not SIMULATOR:
        from numba.cuda.cudadrv import nvvm

        found["nvvm_version"] = list(nvvm.NVVM().get_version())
        found["device"] = str(cuda.get_current_device().name)
    for how in FORMS:
        kernel = cuda.jit(a_times_b_plus_c)
        out = cuda.to_device(np.zeros_like(a))
        args = (cuda.to_device(a), cuda.to_device(b), cuda.to_device(c), out)
        with build_switches(how):
            if how == "numba_default":
                kernel[2, 128](*args)
            else:
                _registry.launch("probe.a_times_b_plus_c", kernel, 2, 128, 0, *args)
        got = out.copy_to_host().view(np.uint32)
        found[how] = {"two_roundings": int(np.sum(got == two.view(np.uint32))),
                      "fused": int(np.sum(got == one.view(np.uint32))), "of": int(got.size),
                      "ptx": listing(kernel, "asm", how), "sass": listing(kernel, "sass", how)}
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for fma_probe.json")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.out):
        ap.error(f"--out {args.out!r} is not a folder")
    found = probe()
    print(json.dumps(found, indent=1))
    with open(os.path.join(args.out, "fma_probe.json"), "w") as f:
        json.dump(found, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
