"""Timing experiment only: the warp-specialised state passes (``chunked_ws``'s
``ws_state_item``, ``chunked_wsr``'s ``wsr_state_item``, and ``chunked_rec``'s recurrence
``rec_state_item``, which ``chunked_rec_pipe`` runs too) with per-warp cycle stamps
around their two phases, to see where a chunk step's cycles go (which warps are busy for
how long in each phase, and how long each waits at the barrier that ends it).

The kernel is built from the package's own device-function source, so it follows the
kernel as it is today. Five stamps per warp and chunk, read by lane 0 of every warp with
``%clock64`` (the SM's cycle counter; the simulator uses ``time.perf_counter_ns``):

  a  start of phase 1 (the chunk's loop body begins)
  b  the warp's phase-1 work is issued (just before the barrier)
  c  after that barrier
  d  the warp's phase-2 work is issued
  e  after the barrier that ends the chunk

They are written to ``stamps[item, ci - c_lo, warp, 0..4]`` for the chunks
``c_lo <= ci < c_hi`` only. The clock reads change no value: the results are the state
pass's own, byte for byte (``tests/test_profile_tools.py`` checks it on the simulator).
Used by ``bench/profile_kernels.py phase-clock`` on a GPU.
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from dflash2_numba._compat import SIMULATOR, cuda, jit_bounded
from dflash2_numba.gdn import _split_state_rec, _split_state_ws, _split_state_wsr
from dflash2_numba.gdn.chunked_ws import WS_LAUNCH_BOUNDS

from ._source_edit import edited_device_function

N_STAMPS = 5

if SIMULATOR:
    def clk():
        return time.perf_counter_ns()
else:
    from llvmlite import ir
    from numba.cuda import types as ntypes
    from numba.cuda.extending import intrinsic
    from numba.cuda.typing import signature

    @intrinsic
    def clk(typingctx):
        """``%clock64`` (one ``mov.u64``; volatile, so it is not moved across the code)."""
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []),
                               "mov.u64 $0, %clock64;", "=l", side_effect=True)
            return builder.call(asm, [])

        return signature(ntypes.int64), codegen


def _rec(stamps, it, ci, c_lo, c_hi, ta, tb, tc, td, te):
    tid = cuda.threadIdx.x
    if (tid & 31) == 0 and c_lo <= ci < c_hi:
        r = ci - c_lo
        w = tid >> 5
        stamps[it, r, w, 0] = ta
        stamps[it, r, w, 1] = tb
        stamps[it, r, w, 2] = tc
        stamps[it, r, w, 3] = td
        stamps[it, r, w, 4] = te


rec = _rec if SIMULATOR else cuda.jit(device=True)(_rec)

# (original text, replacement) pairs; each must occur exactly once in the item function
_WS_EDITS = (
    ("def ws_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp,\n"
     "                  ncomp, sm):",
     "def clocked_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp,\n"
     "                 ncomp, sm, stamps, c_lo, c_hi):"),
    ("        gb = off_g + (ci & 1) * C            # this chunk's gamma buffer\n",
     "        gb = off_g + (ci & 1) * C            # this chunk's gamma buffer\n"
     "        t_a = clk()\n"),
    ("        cuda.syncthreads()\n\n        # ---- phase 2",
     "        t_b = clk()\n        cuda.syncthreads()\n        t_c = clk()\n\n        # ---- phase 2"),
    ("        cuda.syncthreads()\n        sb += F",
     "        t_d = clk()\n        cuda.syncthreads()\n        t_e = clk()\n"
     "        rec(stamps, it, ci, c_lo, c_hi, t_a, t_b, t_c, t_d, t_e)\n        sb += F"),
)

# the end of a stamped chunk step: d, the barrier, e, and the record of the five stamps
_REC_END = ("            t_d = clk()\n            block_sync()\n            t_e = clk()\n"
            "            rec(stamps, it, ci, c_lo, c_hi, t_a, t_b, t_c, t_d, t_e)\n")
_REC = _REC_END + "            sb += F\n"

# the stamps both warp-specialised loops of chunked_wsr and chunked_rec share: a / b / c in
# the copy warps' loop, then in the compute warps' loop
_COPY_STAMPS = (
    ("            sn = sb + F\n", "            sn = sb + F\n            t_a = clk()\n"),
    ("            block_sync()\n            # phase 2: the next chunk's",
     "            t_b = clk()\n            block_sync()\n            t_c = clk()\n"
     "            # phase 2: the next chunk's"),
)
_COMPUTE_STAMPS = (
    ("            gb = off_g + (ci & 1) * C            # this chunk's gamma buffer\n",
     "            gb = off_g + (ci & 1) * C            # this chunk's gamma buffer\n"
     "            t_a = clk()\n"),
    ("            block_sync()\n            # phase 2: chunked step 8",
     "            t_b = clk()\n            block_sync()\n            t_c = clk()\n"
     "            # phase 2: chunked step 8"),
)

# chunked_wsr: the copy warps' loop and the compute warps' loop, each stamped
_WSR_EDITS = (
    ("def wsr_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp,\n"
     "                   ncomp, sm):",
     "def clocked_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp,\n"
     "                 ncomp, sm, stamps, c_lo, c_hi):"),
    *_COPY_STAMPS,
    ("            block_sync()\n            sb += F\n    else:",
     _REC + "    else:"),
    *_COMPUTE_STAMPS,
    ("            block_sync()\n            sb += F\n\n    store_state_slice",
     _REC + "\n    store_state_slice"),
)

# chunked_rec's recurrence (rec_state_item): the same five stamps in both warp roles
_RECURRENCE_EDITS = (
    ("def rec_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, snap0, it, ncomp,\n"
     "                   n1, nq, sm):",
     "def clocked_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, snap0, it, ncomp,\n"
     "                 n1, nq, sm, stamps, c_lo, c_hi):"),
    *_COPY_STAMPS,
    ("            block_sync()\n            sb += F\n            sh += shs\n",
     _REC_END + "            sb += F\n            sh += shs\n"),
    *_COMPUTE_STAMPS,
    ("            block_sync()\n\n    store_state_slice", _REC_END + "\n    store_state_slice"),
)


def _build_recurrence(launch_bounds, module=_split_state_rec, fn_name="rec_state_item"):
    """``gdn_rec_state`` (or another item of ``make_rec_forms``: ``module.fn_name``; its
    source is ``rec_state_item``'s) with stamps: its arguments, then ``stamps``, ``c_lo``,
    ``c_hi``."""
    item, namespace = edited_device_function(module, fn_name, _RECURRENCE_EDITS,
                                             "clocked_item", {"clk": clk, "rec": rec})
    f32 = namespace["_F32"]

    def clocked_rec_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, snap0, ncomp,
                           n1, nq, stamps, c_lo, c_hi):
        sm = cuda.shared.array(0, f32)
        item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, snap0, cuda.blockIdx.x,
             ncomp, n1, nq, sm, stamps, c_lo, c_hi)

    return jit_bounded(clocked_rec_kernel, launch_bounds)


def _build(module, fn_name, edits):
    item, namespace = edited_device_function(module, fn_name, edits, "clocked_item",
                                             {"clk": clk, "rec": rec})
    f32 = namespace["_F32"]

    def clocked_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, stage_kp, ncomp,
                       stamps, c_lo, c_hi):
        sm = cuda.shared.array(0, f32)
        item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, cuda.blockIdx.x, stage_kp,
             ncomp, sm, stamps, c_lo, c_hi)

    return jit_bounded(clocked_kernel, WS_LAUNCH_BOUNDS)


_KERNELS = {}


def clocked_kernel(variant: str = "chunked_ws"):
    """The state pass of ``variant`` (``chunked_ws``, ``chunked_wsr``, ``chunked_wsr_two_loop``,
    or ``chunked_wsr:FORM`` with an output unit of :mod:`bench._out_unit_forms`; or
    ``chunked_rec`` / ``chunked_rec_pipe`` / ``chunked_ahead``, whose recurrences have their
    own arguments: ``snap0, ncomp, n1, nq``) with cycle stamps: the state kernel's
    arguments, then ``stamps`` int64 [items, c_hi - c_lo, warps, 5], ``c_lo``, ``c_hi``
    (built once per variant)."""
    if variant in ("chunked_rec", "chunked_rec_pipe"):
        from dflash2_numba.gdn import chunked_rec as RC

        if "chunked_rec" not in _KERNELS:
            _KERNELS["chunked_rec"] = _build_recurrence(RC.STATE_LAUNCH_BOUNDS)
        return _KERNELS["chunked_rec"]
    if variant == "chunked_ahead":                 # (gdn_rec_ahead_state's item)
        from types import SimpleNamespace

        from dflash2_numba.gdn import chunked_rec as RC
        from dflash2_numba.gdn._split_state_ahead import gdn_rec_ahead_state_kernel as AK

        if variant not in _KERNELS:
            _KERNELS[variant] = _build_recurrence(RC.STATE_LAUNCH_BOUNDS,
                                                  SimpleNamespace(item=AK.item), "item")
        return _KERNELS[variant]
    if variant not in _KERNELS:
        if variant == "chunked_ws":
            _KERNELS[variant] = _build(_split_state_ws, "ws_state_item", _WS_EDITS)
        elif variant == "chunked_wsr":
            _KERNELS[variant] = _build(_split_state_wsr, "wsr_state_item", _WSR_EDITS)
        elif variant == "chunked_wsr_two_loop":    # (wsr_state_item's source, its own unit)
            from dflash2_numba.gdn import _split_state_two_loop

            _KERNELS[variant] = _build(_split_state_two_loop, "two_loop_state_item", _WSR_EDITS)
        elif variant.startswith("chunked_wsr:"):  # an experimental output unit of bench's
            from types import SimpleNamespace

            from bench._out_unit_forms import FORMS

            item = _split_state_wsr.make_state_item(FORMS[variant.split(":", 1)[1]])
            _KERNELS[variant] = _build(SimpleNamespace(item=item), "item", _WSR_EDITS)
        else:
            raise ValueError(f"variant: no clocked form of {variant!r}")
    return _KERNELS[variant]


def stamp_buffer(call, nchunks: int):
    """A device array for the stamps of a planned warp-specialised call: [items, nchunks,
    warps, 5] int64, -1 (never written) everywhere."""
    s = call.plan.scratch
    nthreads = s.rec.threads if hasattr(s, "rec") else int(s.ws.ncomp) + s.ws.ncopy
    nwarps = -(-nthreads // 32)
    return cuda.to_device(np.full((s.n_items, nchunks, nwarps, N_STAMPS), -1, np.int64))


def summarise(stamps: np.ndarray, ncomp: int) -> dict:
    """Cycle figures from the stamps (entries never written are negative and skipped).

    Only the stamps taken *before* a barrier (a, b, d) time anything: on sm_70 and later
    ptxas emits ``BAR.SYNC.DEFER_BLOCKING``, which lets the warp issue on until an
    instruction that must wait, so the clock read right after a barrier (c, e) runs a
    couple of cycles after the one before it (measured on the H200: c - b = 2) and the
    wait shows up later. So, per (item, chunk): phase 1 ends when its last warp reaches
    the barrier (``max_w b``), phase 2 when its last warp does (``max_w d``), and the next
    chunk starts at its earliest ``a``. Per warp role (``compute`` warps ``< ncomp / 32``,
    ``copy`` warps after them), medians over items and sampled chunks of: ``phase1_busy``
    (b - chunk start), ``phase1_wait`` (max b - b), ``phase2_busy`` (d - max b),
    ``phase2_wait`` (next chunk start - d, the loop's own top included); and per warp
    number ``warp_phase1_busy`` / ``warp_phase2_busy``. Spans: ``phase1_span``,
    ``phase2_span``, ``tail`` (next start - max d) and ``chunk_period``."""
    s = np.asarray(stamps, dtype=np.int64)
    ok = (s >= 0).all(axis=3)                              # (item, chunk, warp) written
    a, b, d = (np.where(ok, s[..., k], np.nan).astype(np.float64) for k in (0, 1, 3))
    seen = ok.any(axis=2)                                  # (item, chunk) with any stamp
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)    # (all-NaN rows of unseen chunks)
        start = np.nanmin(a, axis=2)                       # (item, chunk)
        end1 = np.nanmax(b, axis=2)
        end2 = np.nanmax(d, axis=2)
    nxt = np.concatenate([start[:, 1:], np.full_like(start[:, :1], np.nan)], axis=1)
    per_warp = {"phase1_busy": b - start[..., None], "phase1_wait": end1[..., None] - b,
                "phase2_busy": d - end1[..., None], "phase2_wait": nxt[..., None] - d}
    nw = s.shape[2]
    ncw = min(-(-int(ncomp) // 32), nw)
    out = {}

    def med(x, m):
        x = x[m & np.isfinite(x)]
        return float(np.median(x)) if x.size else float("nan")

    for role, sl in (("compute", slice(0, ncw)), ("copy", slice(ncw, nw))):
        m = ok[:, :, sl]
        if m.any():
            out[role] = {k: med(x[:, :, sl], m) for k, x in per_warp.items()}
            out[role]["warps"] = sl.stop - sl.start
    for k in ("phase1_busy", "phase2_busy"):
        out["warp_" + k] = [med(per_warp[k][:, :, w], ok[:, :, w]) for w in range(nw)]
    spans = {"phase1_span": end1 - start, "phase2_span": end2 - end1, "tail": nxt - end2,
             "chunk_period": nxt - start}
    for k, x in spans.items():
        out[k] = med(x, seen)
    return out
