"""Timing experiment only (never used for results): ``chunked_split``'s staged state pass
with parts switched off, to see what each part costs. Built from the package's own
``staged_state_item`` source, so it follows the kernel as it is today; a ``skip`` bit mask
removes the copies (1), the phase-1 fma loops (2) and the phase-2 fma loops (4). With any
bit set the results are wrong and are not looked at. Used by ``bench/profile_kernels.py
leave-out`` on a GPU.
"""
from __future__ import annotations

import inspect
import textwrap

from dflash2_numba._compat import SIMULATOR, cuda
from dflash2_numba.gdn import _split_state

# (original text, replacement) pairs; each must occur exactly once in staged_state_item
_EDITS = (
    ("def staged_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp, sm):",
     "def leave_out_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp, sm, skip):"),
    ("        if stage_kp != 0:\n            stage_two(sm, off_kp,",
     "        if stage_kp != 0 and (skip & 1) == 0:\n            stage_two(sm, off_kp,"),
    ("        for u in range(tid, (C // 2) * 2 * ncg, nthr):",
     "        for u in range(tid, (C // 2) * 2 * ncg if (skip & 2) == 0 else 0, nthr):"),
    ("        if ci + 1 < nch:\n            stage_two(sm, OFF_WQ,",
     "        if ci + 1 < nch and (skip & 1) == 0:\n            stage_two(sm, OFF_WQ,"),
    ("        for u in range(tid, n2 + half * ncg, nthr):",
     "        for u in range(tid, n2 + half * ncg if (skip & 4) == 0 else 0, nthr):"),
)


def _build():
    src = textwrap.dedent(inspect.getsource(_split_state.staged_state_item.py_func
                                            if hasattr(_split_state.staged_state_item, "py_func")
                                            else _split_state.staged_state_item))
    src = "\n".join(line for line in src.split("\n") if not line.startswith("@"))
    for old, new in _EDITS:
        if src.count(old) != 1:
            raise RuntimeError(f"staged_state_item changed; cannot apply: {old[:60]!r}")
        src = src.replace(old, new)
    namespace = dict(vars(_split_state))
    exec(compile(src, "<leave_out_item>", "exec"), namespace)
    item = cuda.jit(device=True)(namespace["leave_out_item"])
    f32 = namespace["_F32"]

    def leave_out_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, stage_kp, skip):
        sm = cuda.shared.array(0, f32)
        item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, cuda.blockIdx.x, stage_kp,
             sm, skip)

    if SIMULATOR:       # (the simulator's jit has no launch bounds)
        return cuda.jit(leave_out_kernel)
    from dflash2_numba.gdn.chunked_split import STATE_LAUNCH_BOUNDS
    return cuda.jit(leave_out_kernel, launch_bounds=STATE_LAUNCH_BOUNDS)


kernel = _build()
