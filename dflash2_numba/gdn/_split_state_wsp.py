"""The sequential state pass of variant ``chunked_wsp``: :mod:`._split_state_wsr`'s state
pass with one change, in how a staged output unit schedules its loads.

:func:`._split_state_wsr.flat_out_unit` runs an output unit's two chains (rows p and
L-1-p of one four-column group, chunked step 7) in one loop of ``L + 1`` steps. The row
switch inside the loop keeps ptxas from unrolling it or moving loads across iterations,
so every step waits for its own two shared loads (one P^T word, one vn float4) before its
four fma: the H200's phase clock (``bench/RESULTS.md``, GDN fourth round) had the output
warps at about 6.9 k cycles of phase 2 for 65 steps, against 4.9 k for the state warps'
four times as many fma.

:func:`pipelined_out_unit` issues each step's loads two steps ahead (operands rotated
through registers, pointers advanced by one add each, reset at the row switch, held at
the last step past the end so every load reads a word the unit reads anyway). The chains
are unchanged: the same initial values, the same operands in the same order
(``fma(P_ij, vn_jc, o)`` for j = 0 .. i ascending), so the output is chunked's, byte for
byte. Nothing else in the state pass differs (:func:`._split_state_wsr.make_state_item`).
"""
from __future__ import annotations

from .._compat import cuda
from ._common import C
from ._split_ops import VS, _dev, fma4, ld1, ld4
from ._split_state import OFF_OQ, OFF_VN, store_row
from ._split_state_ws import out_unit_rows
from ._split_state_wsr import _F32, make_state_item


@_dev
def next_ptrs(s, qp, qv, na, tot, rp, rv):
    """The (P^T, vn) load offsets of step ``s + 1`` of an output unit from those of step
    ``s``: one row further down both; row ib's first (``rp``, ``rv``) where row p's chain
    ends (``s + 1 == na``); unchanged past the unit's last step (``s + 1 >= tot``)."""
    np_ = qp + C
    nv = qv + VS
    if s + 1 == na:
        np_ = rp
        nv = rv
    if s + 1 >= tot:
        np_ = qp
        nv = qv
    return np_, nv


@_dev
def pipelined_out_unit(o, bb, t0, hv, c0, sm, off_pt, u2, half, L):
    """Output unit ``u2`` (:func:`._split_state_wsr.flat_out_unit`'s rows, chains and
    stores) with each step's P^T word and vn float4 loaded two steps before its fma."""
    p, c4, ib, na = out_unit_rows(u2, half, L)
    tot = na + ib + 1
    rp = off_pt + ib                     # row ib's chain: P^T[0, ib], vn row 0
    rv = OFF_VN + c4
    qp = off_pt + p                      # step 0: row p's chain (row ib's when na == 0)
    if na == 0:
        qp = rp
    qv = rv
    x0 = ld1(sm, qp)
    v0 = ld4(sm, qv)
    qp, qv = next_ptrs(0, qp, qv, na, tot, rp, rv)
    x1 = ld1(sm, qp)
    v1 = ld4(sm, qv)
    acc = ld4(sm, OFF_OQ + p * VS + c4)
    ob = ld4(sm, OFF_OQ + ib * VS + c4)
    oa = acc
    t = 0
    while t < tot:
        qp, qv = next_ptrs(t + 1, qp, qv, na, tot, rp, rv)     # step t + 2's operands
        x2 = ld1(sm, qp)
        v2 = ld4(sm, qv)
        if t == na:                      # row p done: row ib's chain starts
            oa = acc
            acc = ob
        acc = fma4(x0, v0, acc)
        x0 = x1
        v0 = v1
        x1 = x2
        v1 = v2
        t += 1
    if na > 0:
        store_row(o, bb, t0 + p, hv, c0 + c4, oa)
    store_row(o, bb, t0 + ib, hv, c0 + c4, acc)


wsp_state_item = make_state_item(pipelined_out_unit)


def gdn_wsp_state_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, stage_kp,
                         ncomp):
    sm = cuda.shared.array(0, _F32)
    wsp_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, cuda.blockIdx.x,
                   stage_kp, ncomp, sm)
