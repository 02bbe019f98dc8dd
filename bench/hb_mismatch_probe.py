#!/usr/bin/env python3
"""The H200-only byte mismatch of ``gdn_chunk_out_pipe`` (GDN eighth round): the kernel with
its half-row offset ``hb`` spelt four ways, each checked byte for byte against ``chunked``.

``hb`` is V / 2 (64 at V = 128) in every spelling; the shipped kernel writes
``I32(4 * ncg)`` (``ncg = V // 8``). On the H200 (numba-cuda 0.30.4, CUDA 13) the spelling
``I32(V // 2)`` (a 64-bit floor division, then the cast) gives wrong columns V/2 .. V-1 in
part of the output; the simulator and the other spellings give chunked's bytes.

Modes (per-rank shape, B = 1, H = 4, HV = 12, K = V = 128, FP16; ``T`` tokens):
  ``check T``         every spelling: bytes against ``chunked`` and the pattern of wrong values;
  ``repeat T FORM``   ``FORM`` launched four times: are the wrong bytes the same each time?
  ``once T FORM``     one ``chunked_rec_pipe`` call with ``FORM``, for compute-sanitizer
                      (``compute-sanitizer --tool initcheck python3 bench/hb_mismatch_probe.py once 4096 floordiv64``).
  ``cubin DIR [CC]``  each spelling's PTX and cubin (FP16 output signature, the variant's launch
                      bounds, compute capability CC, default 9.0) into DIR with this machine's
                      toolchain, no launch: on the device, then ``nvdisasm`` both cubins and diff
                      the SASS around the uses of ``hb`` (the next step of the investigation).
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import dflash2_numba as d2  # noqa: E402  (numpy shim before numba)
from dflash2_numba._compat import jit_bounded  # noqa: E402
from dflash2_numba._dynshared import DynShared  # noqa: E402
from dflash2_numba.gdn import _chunk_output_pipe as P  # noqa: E402
from dflash2_numba.gdn import chunked_rec_pipe as RP  # noqa: E402
from numba import cuda  # noqa: E402
from _source_edit import edited_function  # noqa: E402
from profile_kernels import gdn_inputs, host  # noqa: E402

SHIPPED = "hb = I32(4 * ncg)"
FORMS = {"shipped": None, "floordiv64": "hb = I32(V // 2)",
         "floordiv32": "hb = I32(V) // I32(2)", "shift": "hb = I32(V >> 1)"}


def out_kernel(form: str):
    """``gdn_chunk_out_pipe``'s kernel with ``hb`` spelt as ``FORMS[form]``, compiled with the
    variant's launch bounds (the shipped spelling: the variant's own kernel)."""
    if FORMS[form] is None:
        return RP._out
    fn, _ = edited_function(P, "gdn_chunk_out_pipe_kernel",
                            [(SHIPPED, FORMS[form]),
                             ("def gdn_chunk_out_pipe_kernel", f"def out_{form}")],
                            f"out_{form}")
    return jit_bounded(fn, RP.OUT_LAUNCH_BOUNDS)


def write_cubins(out_dir: str, cc) -> None:
    """PTX and cubin of every spelling, compiled and linked by this machine's toolchain with
    the variant's launch bounds (no launch). Without a GPU (no driver to link with) PTX only."""
    from dflash2_numba._compat import compile_ptx_cc, exact_fp32, gpu_available
    from dflash2_numba.gdn import chunked_rec as RC

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    sig = RC._out_signatures()[0]                    # FP16 output, as the probe's calls
    for form in FORMS:
        stem = Path(out_dir, f"gdn_chunk_out_pipe.{form}.sm{cc[0]}{cc[1]}")
        kern = out_kernel(form)
        if not gpu_available():
            ptx, _ = compile_ptx_cc(kern.py_func, sig, cc, RP.OUT_LAUNCH_BOUNDS)
            Path(f"{stem}.ptx").write_text(ptx)
            print(f"wrote {stem}.ptx (no GPU: no cubin)", flush=True)
            continue
        with exact_fp32():
            lib = kern.compile(sig)._codelibrary     # (numba-cuda 0.30's compiled kernel)
            Path(f"{stem}.ptx").write_text(lib.get_asm_str(cc=cc))
            Path(f"{stem}.cubin").write_bytes(lib.get_cubin(cc=cc))
        print(f"wrote {stem}.ptx and .cubin", flush=True)


def planned_call(inputs, form: str):
    call = d2.plan_gdn(**inputs, variant="chunked_rec_pipe", check_values=False)
    call.plan.scratch.rec.out = DynShared(out_kernel(form),
                                          4 * P.pipe_floats(call.plan.K, call.plan.V))
    return call


def output_bits(call):
    call.launch()
    cuda.synchronize()
    return host(call.results()[0]).view(np.uint16).copy()


def reference_bits(inputs):
    return output_bits(d2.plan_gdn(**inputs, variant="chunked", check_values=False))


def describe(got, want) -> str:
    bad = got.reshape(-1, 12, 128) != want.reshape(-1, 12, 128)
    if not bad.any():
        return "same bytes as chunked"
    cols = np.nonzero(bad.any(axis=(0, 1)))[0]
    rows = np.nonzero(bad.any(axis=(1, 2)))[0]
    return (f"{int(bad.sum())} wrong values ({bad.mean():.3f}); columns {cols.min()}..{cols.max()}; "
            f"{len(rows)} of {bad.shape[0]} tokens")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    mode = argv[0]
    if mode == "cubin":
        cc = tuple(int(x) for x in (argv[2] if len(argv) > 2 else "9.0").split("."))
        write_cubins(argv[1], cc)
        return 0
    T = int(argv[1])
    inputs = gdn_inputs(T)
    if mode == "once":
        output_bits(planned_call(inputs, argv[2]))
        print(f"one call with hb form {argv[2]}")
        return 0
    want = reference_bits(inputs)
    if mode == "check":
        for form in FORMS:
            print(f"{form:11s} ({FORMS[form] or SHIPPED}): "
                  f"{describe(output_bits(planned_call(inputs, form)), want)}", flush=True)
    elif mode == "repeat":
        call = planned_call(inputs, argv[2])
        outs = [output_bits(call) for _ in range(4)]
        for i, x in enumerate(outs):
            print(f"launch {i}: {describe(x, want)}; bytes equal to launch 0: "
                  f"{np.array_equal(x, outs[0])}", flush=True)
    else:
        raise SystemExit(f"unknown mode {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
