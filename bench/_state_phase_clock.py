"""Timing experiment only: ``chunked_ws``'s state pass (``ws_state_item``) with per-warp
cycle stamps around its two phases, to see where a chunk step's cycles go (which warps
are busy for how long in each phase, and how long each waits at the barrier that ends it).

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

from dflash2_numba._compat import SIMULATOR, cuda
from dflash2_numba.gdn import _split_state_ws
from dflash2_numba.gdn.chunked_ws import WS_LAUNCH_BOUNDS

from ._source_edit import edited_device_function, state_kernel

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

# (original text, replacement) pairs; each must occur exactly once in ws_state_item
_EDITS = (
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


def _build():
    item, namespace = edited_device_function(_split_state_ws, "ws_state_item", _EDITS,
                                             "clocked_item", {"clk": clk, "rec": rec})
    f32 = namespace["_F32"]

    def clocked_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, stage_kp, ncomp,
                       stamps, c_lo, c_hi):
        sm = cuda.shared.array(0, f32)
        item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, cuda.blockIdx.x, stage_kp,
             ncomp, sm, stamps, c_lo, c_hi)

    return state_kernel(clocked_kernel, WS_LAUNCH_BOUNDS)


#: chunked_ws's state pass with cycle stamps (the state kernel's arguments, then
#: ``stamps`` int64 [items, c_hi - c_lo, warps, 5], ``c_lo``, ``c_hi``)
kernel = _build()


def summarise(stamps: np.ndarray, ncomp: int) -> dict:
    """Cycle figures from the stamps (entries never written are negative and skipped):
    per warp role (``compute`` warps ``< ncomp / 32``, ``copy`` warps after them), the
    median over items and sampled chunks of each warp's busy and waiting cycles in each
    phase, and the median chunk-step period (one warp's phase-1 start to the next)."""
    s = np.asarray(stamps, dtype=np.int64)
    ok = (s >= 0).all(axis=3)                              # (item, chunk, warp) written
    a, b, c, d, e = (np.where(ok, s[..., k], np.nan).astype(np.float64)
                     for k in range(N_STAMPS))
    seen = ok.any(axis=2)                                  # (item, chunk) with any stamp
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)    # (all-NaN rows of unseen chunks)
        first = np.nanmin(a, axis=2, keepdims=True)        # earliest phase-1 start per chunk
        spans = {"phase1_span": np.nanmax(c, axis=2) - first[..., 0],
                 "phase2_span": np.nanmax(e, axis=2) - np.nanmin(c, axis=2)}
        per = np.diff(first[..., 0], axis=1)               # chunk-step period
    busy = {"phase1_busy": b - first, "phase1_barrier_wait": c - b,
            "phase2_busy": d - c, "phase2_barrier_wait": e - d}
    nw = s.shape[2]
    ncw = min(-(-int(ncomp) // 32), nw)
    out = {}
    for role, sl in (("compute", slice(0, ncw)), ("copy", slice(ncw, nw))):
        m = ok[:, :, sl]
        if m.any():
            out[role] = {k: float(np.median(x[:, :, sl][m])) for k, x in busy.items()}
            out[role]["warps"] = sl.stop - sl.start
    per = per[np.isfinite(per)]
    out["chunk_period"] = float(np.median(per)) if per.size else float("nan")
    for k, x in spans.items():
        out[k] = float(np.median(x[seen])) if seen.any() else float("nan")
    return out
