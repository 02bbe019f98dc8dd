"""Timing experiment only (never used for results): the state pass of ``chunked_split``
(``staged_state_item``) or of ``chunked_ws`` (``ws_state_item``) with parts switched off, to
see what each part costs. Built from the package's own device-function source, so it
follows the kernel as it is today; a ``skip`` bit mask removes the copies (1), the phase-1
fma loops (2) and the phase-2 fma loops (4). With any bit set the results are wrong and are
not looked at. Used by ``bench/profile_kernels.py leave-out`` on a GPU.
"""
from __future__ import annotations

from dflash2_numba._compat import cuda, jit_bounded
from dflash2_numba.gdn import _split_state, _split_state_ws

from ._source_edit import edited_device_function

# (original text, replacement) pairs; each must occur exactly once in the device function
_SPLIT_EDITS = (
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
_WS_EDITS = (
    ("def ws_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp,\n"
     "                  ncomp, sm):",
     "def leave_out_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp,\n"
     "                   ncomp, sm, skip):"),
    ("            if stage_kp != 0:\n                stage_",
     "            if stage_kp != 0 and (skip & 1) == 0:\n                stage_"),
    ("            for u in range(tid, (C // 2) * 2 * ncg, ncomp):",
     "            for u in range(tid, (C // 2) * 2 * ncg if (skip & 2) == 0 else 0, ncomp):"),
    ("            if ci + 1 < nch:\n                sn = sb + F",
     "            if ci + 1 < nch and (skip & 1) == 0:\n                sn = sb + F"),
    ("            for u in range(tid, ns + half * ncg, n2):",
     "            for u in range(tid, ns + half * ncg if (skip & 4) == 0 else 0, n2):"),
)


def _build(module, fn_name, edits, launch_bounds, extra):
    item, namespace = edited_device_function(module, fn_name, edits, "leave_out_item")
    f32 = namespace["_F32"]

    if extra:
        def leave_out_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, stage_kp,
                             ncomp, skip):
            sm = cuda.shared.array(0, f32)
            item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, cuda.blockIdx.x,
                 stage_kp, ncomp, sm, skip)
    else:
        def leave_out_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, stage_kp,
                             skip):
            sm = cuda.shared.array(0, f32)
            item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, cuda.blockIdx.x,
                 stage_kp, sm, skip)

    return jit_bounded(leave_out_kernel, launch_bounds)


def _bounds(which):
    if which == "split":
        from dflash2_numba.gdn.chunked_split import STATE_LAUNCH_BOUNDS
        return STATE_LAUNCH_BOUNDS
    from dflash2_numba.gdn.chunked_ws import WS_LAUNCH_BOUNDS
    return WS_LAUNCH_BOUNDS


#: chunked_split's state pass (arguments: the state kernel's, then ``skip``)
kernel = _build(_split_state, "staged_state_item", _SPLIT_EDITS, _bounds("split"), False)
#: chunked_ws's state pass (arguments: the state kernel's incl. ``ncomp``, then ``skip``)
ws_kernel = _build(_split_state_ws, "ws_state_item", _WS_EDITS, _bounds("ws"), True)
