#!/usr/bin/env python3
"""The H200-only byte mismatch of ``gdn_chunk_out_pipe`` (GDN eighth round): the kernel with
its half-row offset ``hb`` spelt five ways, each checked byte for byte against ``chunked``.

``hb`` is V / 2 (64 at V = 128) in every spelling; the shipped kernel writes
``I32(I32(V) >> I32(1))`` (since 2026-12-03: narrowed to 32 bits before the shift; before,
``I32(4 * ncg)`` with ``ncg = V // 8``, kept here as form ``ncg4``). The form ``shift``,
``I32(V >> 1)``, gave chunked's bytes on the H200 but its PTX from NVVM 12.9 holds a 64-bit
shift left by 31, the idiom the PTX report rejects. On the H200 (numba-cuda 0.30.4, CUDA 13)
the spelling ``I32(V // 2)`` (a 64-bit floor division, then the cast) gives wrong columns V/2 .. V-1 in
part of the output; the simulator and the other spellings give chunked's bytes.

Modes (per-rank shape, B = 1, H = 4, HV = 12, K = V = 128, FP16; ``T`` tokens):
  ``check T``         every spelling: bytes against ``chunked`` and the pattern of wrong values;
  ``repeat T FORM``   ``FORM`` launched four times: are the wrong bytes the same each time?
  ``once T FORM``     one ``chunked_rec_pipe`` call with ``FORM``, for compute-sanitizer
                      (``compute-sanitizer --tool initcheck python3 bench/hb_mismatch_probe.py once 4096 floordiv64``).
  ``pattern T FORM``  where ``FORM``'s wrong values sit (rows in a chunk, heads, columns);
  ``bisect T``        the shipped kernel with ``I32(V // 2)`` at one group of ``hb``'s uses
                      (phase-1 steps, phase-2 steps, the tail, the row stores) or at all;
  ``fill T``          every spelling with the call's global scratch filled, before the call,
                      with each of ``FILLS`` (zero, NaN, -inf, a large finite word): the
                      pre-pass never writes P^T's upper part nor the rows past a partial
                      chunk's end, so a form whose bytes change with the fill reads them;
  ``cubin DIR [CC]``  each spelling's PTX and cubin (FP16 output signature, the variant's launch
                      bounds, compute capability CC, default 9.0) into DIR with this machine's
                      toolchain, no launch: on the device, then ``nvdisasm`` both cubins and diff
                      the SASS around the uses of ``hb`` (the next step of the investigation).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import dflash2_numba as d2  # noqa: E402  (numpy shim before numba)
from dflash2_numba._compat import jit_bounded  # noqa: E402
from dflash2_numba._dynshared import DynShared  # noqa: E402
from dflash2_numba._cli import compute_capability, output_folder, positive_int  # noqa: E402
from dflash2_numba.gdn import _chunk_output_pipe as P  # noqa: E402
from dflash2_numba.gdn import chunked_rec_pipe as RP  # noqa: E402
from numba import cuda  # noqa: E402
from _source_edit import edited_function  # noqa: E402
from profile_kernels import gdn_inputs, host  # noqa: E402

SHIPPED = "hb = I32(I32(V) >> I32(1))"
FORMS = {"shipped": None, "floordiv64": "hb = I32(V // 2)",
         "floordiv32": "hb = I32(V) // I32(2)", "ncg4": "hb = I32(4 * ncg)",
         "shift": "hb = I32(V >> 1)"}


def _block(src: str, first: str, last: str) -> str:
    """The text of ``src`` from the line holding ``first`` to the end of the line holding
    ``last``."""
    a = src.index(first)
    a = src.rindex("\n", 0, a) + 1
    b = src.index("\n", src.index(last, a))
    return src[a:b]


def bisect_forms():
    """The shipped kernel plus ``hb2 = I32(V // 2)``, with ``hb2`` in place of ``hb`` at one
    group of its uses (or all): which use does the failing spelling break?"""
    import inspect
    src = inspect.getsource(P.gdn_chunk_out_pipe_kernel)
    uses = {
        "p1": ["V32, hb, I32(sb),"],
        "p2": ["V32, hb, nst,"],
        "tail": [_block(src, "a1, b1 = tail_step(sm, pj, pv, hb, 1", "# j = i0 + 3: row 3")],
        "st": [_block(src, "st4(sm, p + hb, b0)", "st4(sm, p + 3 * vp + hb, b3)")],
    }
    uses["all"] = [t for v in uses.values() for t in v]
    forms = {}
    for name, olds in uses.items():
        edits = [(SHIPPED, SHIPPED + "\n    hb2 = I32(V // 2)")]
        edits += [(o, re.sub(r"\bhb\b", "hb2", o)) for o in olds]
        forms[f"hb2@{name}"] = edits
    # the SASS of the failing spelling forms phase 1's offset as IMAD.HI.U32 R, Vlo,
    # -0x80000000; IADD3 R, R, -Vlo, Vhi << 31: -V/2 or -3V/2 as the immediate is read
    # unsigned or sign-extended. The shipped kernel with phase 1's offset written as each
    # tells which (on the H200: -3V/2, the failing bytes to 0.15 %; bench/RESULTS.md)
    for name, expr in (("minus", "-hb"), ("minus3", "-3 * hb")):
        forms[f"p1={name}"] = [(SHIPPED, SHIPPED + f"\n    hb2 = I32({expr})"),
                               (uses["p1"][0], uses["p1"][0].replace("hb,", "hb2,"))]
    return forms


def out_kernel(form: str):
    """``gdn_chunk_out_pipe``'s kernel with ``hb`` spelt as ``FORMS[form]`` (or one of
    :func:`bisect_forms`), compiled with the variant's launch bounds (the shipped spelling:
    the variant's own kernel)."""
    if form in FORMS and FORMS[form] is None:
        return RP._out
    edits = [(SHIPPED, FORMS[form])] if form in FORMS else bisect_forms()[form]
    tag = re.sub(r"\W", "_", form)
    fn, _ = edited_function(P, "gdn_chunk_out_pipe_kernel",
                            edits + [("def gdn_chunk_out_pipe_kernel", f"def out_{tag}")],
                            f"out_{tag}")
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
            cubin = lib.get_cubin(cc=cc)                 # bytes, or a cuda.core ObjectCode
            Path(f"{stem}.cubin").write_bytes(bytes(getattr(cubin, "code", cubin)))
        print(f"wrote {stem}.ptx and .cubin", flush=True)


FILLS = {"zero": 0x00000000, "nan": 0x7FC00000, "-inf": 0xFF800000, "5a5a5a5a": 0x5A5A5A5A}


def planned_call(inputs, form: str, fill=None, kern=None):
    """A planned ``chunked_rec_pipe`` call with ``hb`` spelt as ``FORMS[form]`` (``kern``:
    that form's kernel, already built by :func:`out_kernel`); ``fill``: a 32-bit word
    written over the whole global scratch after planning (None: as planned)."""
    call = d2.plan_gdn(**inputs, variant="chunked_rec_pipe", check_values=False)
    if fill is not None:
        scr = call.plan.scratch.scr
        scr.copy_to_device(np.full(scr.shape, fill, np.uint32).view(np.float32))
    call.plan.scratch.rec.out = DynShared(out_kernel(form) if kern is None else kern,
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


def pattern(got, want) -> str:
    """Where the wrong values sit: rows within a 64-token chunk, value heads, columns, and
    how far off they are."""
    g = got.reshape(-1, 12, 128).view(np.float16).astype(np.float64)
    w = want.reshape(-1, 12, 128).view(np.float16).astype(np.float64)
    bad = got.reshape(-1, 12, 128) != want.reshape(-1, 12, 128)
    t, h, c = np.nonzero(bad)
    rows = np.bincount(t % 64, minlength=64)
    rel = np.abs(g - w)[bad] / np.maximum(np.abs(w[bad]), 1e-3)
    return (f"rows in chunk with wrong values (count per row 0..63): {rows.tolist()}\n"
            f"value heads: {np.bincount(h, minlength=12).tolist()}\n"
            f"columns: {np.bincount(c, minlength=128)[60:].tolist()} (from 60)\n"
            f"chunks: {np.bincount(t // 64).tolist()}\n"
            f"relative error: median {np.median(rel):.3g}, max {rel.max():.3g}, "
            f"share > 1e-2: {(rel > 1e-2).mean():.3f}")


def _form(text: str) -> str:
    """argparse type: an ``hb`` spelling of ``FORMS`` or of :func:`bisect_forms`."""
    known = [*FORMS, *bisect_forms()]
    if text in known:
        return text
    raise argparse.ArgumentTypeError(f"unknown form {text!r}; one of {', '.join(known)}")


def _parse(argv):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Modes:\n" + __doc__.split("Modes", 1)[1].split("\n", 1)[1])
    modes = ap.add_subparsers(dest="mode", required=True)
    for mode in ("check", "bisect", "fill"):
        modes.add_parser(mode).add_argument("T", type=positive_int, help="tokens")
    for mode in ("once", "pattern", "repeat"):
        sub = modes.add_parser(mode)
        sub.add_argument("T", type=positive_int, help="tokens")
        sub.add_argument("FORM", type=_form, help="an hb spelling (FORMS or a bisect form)")
    sub = modes.add_parser("cubin")
    sub.add_argument("DIR", type=output_folder, help="output folder")
    sub.add_argument("CC", nargs="?", default=(9, 0), type=compute_capability,
                     help="compute capability MAJOR.MINOR (default 9.0)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    mode = args.mode
    if mode == "cubin":
        write_cubins(args.DIR, args.CC)
        return 0
    T = args.T
    form_arg = getattr(args, "FORM", None)
    inputs = gdn_inputs(T)
    if mode == "once":
        output_bits(planned_call(inputs, form_arg))
        print(f"one call with hb form {form_arg}")
        return 0
    want = reference_bits(inputs)
    if mode == "check":
        for form in FORMS:
            print(f"{form:11s} ({FORMS[form] or SHIPPED}): "
                  f"{describe(output_bits(planned_call(inputs, form)), want)}", flush=True)
    elif mode == "pattern":
        got = output_bits(planned_call(inputs, form_arg))
        print(f"{form_arg}: {describe(got, want)}")
        print(pattern(got, want))
    elif mode == "bisect":
        bad = output_bits(planned_call(inputs, "floordiv64"))
        for form in bisect_forms():
            got = output_bits(planned_call(inputs, form))
            print(f"{form:11s}: {describe(got, want)}; the same bytes as floordiv64: "
                  f"{np.array_equal(got, bad)}", flush=True)
    elif mode == "fill":
        for form in FORMS:
            for name, word in FILLS.items():
                got = output_bits(planned_call(inputs, form, word))
                print(f"{form:11s} scratch {name:9s}: {describe(got, want)}", flush=True)
    elif mode == "repeat":
        call = planned_call(inputs, form_arg)
        outs = [output_bits(call) for _ in range(4)]
        for i, x in enumerate(outs):
            print(f"launch {i}: {describe(x, want)}; bytes equal to launch 0: "
                  f"{np.array_equal(x, outs[0])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
