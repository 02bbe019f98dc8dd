"""The sequential state pass of variant ``chunked_wsr_two_loop``: :mod:`._split_state_wsr`'s
state pass whose staged output unit runs its two chains in two plain loops.

:func:`._split_state_wsr.flat_out_unit` runs an output unit's chains (rows p and L-1-p of
one four-column group, chunked step 7) in one loop of ``L + 1`` steps, so every lane of a
warp has the same trip count; the row switch inside that loop costs eight FSEL a step (27
SASS instructions a step for 4 fma; ``bench/RESULTS.md``, GDN fifth round).
:func:`two_loop_out_unit` runs row p's chain in one loop and row ib's in a second, with no
select (:func:`._split_state.out_rows_seq`, the unit the unstaged state passes already
run, here reading the staged P^T); the lanes' trip counts differ (p + 1, then L - p), so the warp runs the longest of
each. Measured with the phase clock on the H200 (three calls): the chunk step 3.0 %
shorter than ``chunked_wsr``'s.

The chains are unchanged: the same initial values (``qh * gamma`` of the row), the same
operands in the same order (``fma(P_ij, vn_jc, o)`` for j = 0 .. i ascending), so the
output is chunked's, byte for byte. Nothing else in the state pass differs
(:func:`._split_state_wsr.make_state_item`).
"""
from __future__ import annotations

from .._compat import cuda
from ._split_ops import _dev
from ._split_state import out_rows_seq
from ._split_state_ws import out_unit_rows
from ._split_state_wsr import _F32, make_state_item


@_dev
def two_loop_out_unit(o, bb, t0, hv, c0, sm, off_pt, u2, half, L):
    """Output unit ``u2`` (:func:`._split_state_wsr.flat_out_unit`'s rows, chains and
    stores) as :func:`._split_state.out_rows_seq` runs it with P^T staged (the unstaged
    state passes' unit): row p's chain (``p + 1`` steps), stored, then, unless ``ib == p``
    (the middle row, already done), row ib's (``ib + 1`` steps), stored. ``sm`` stands in
    for the unread global scratch."""
    p, c4, ib, na = out_unit_rows(u2, half, L)
    out_rows_seq(o, bb, t0, hv, c0, c4, sm, sm, 1, off_pt, 0, p, L)


two_loop_state_item = make_state_item(two_loop_out_unit)


def gdn_wsr_two_loop_state_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K,
                                  stage_kp, ncomp):
    """State pass of contract.md part B, ``chunked`` family (variants ``chunked_wsr_two_loop``
    and ``chunked_smprep``): ``gdn_wsr_state`` with :func:`two_loop_out_unit` as its staged
    output unit. Output and final state must equal the frozen ``gdn_chunked_kernel``'s bit
    for bit."""
    sm = cuda.shared.array(0, _F32)
    two_loop_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K,
                        cuda.blockIdx.x, stage_kp, ncomp, sm)
