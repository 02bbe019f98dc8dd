"""The sequential state pass of variant ``chunked_wsr``: :mod:`._split_state_ws`'s warp-
specialised state pass with three changes, none of which touches a value:

* **Copies loaded a phase early, carried in registers.** A copy thread no longer loads and
  stores a region in the same phase. In phase 1 of chunk ``ci`` it stores chunk ``ci``'s
  Kd / P^T (loaded during the previous phase 2) and then issues the loads of chunk
  ``ci + 1``'s W^T / qs^T / U / gamma; in phase 2 it stores those and issues the loads of
  chunk ``ci + 1``'s Kd / P^T. The L2 round trip of each load overlaps the rest of its
  phase and the barrier, instead of being the phase's critical path (the H200's phase
  clock, ``bench/RESULTS.md``: copy warps were the last to reach phase 2's barrier).
  Each copy thread carries up to ``SLOTS`` float4 (elements ``ptid + k * ncopy``,
  ``k < SLOTS``); elements past them are copied directly in the phase the region is free.
* **Flat output chains.** An output unit (rows p and L-1-p of one column group) runs its
  two chains one after the other in *one* loop of (p + 1) + (L - p) = L + 1 steps, the
  same count for every lane of the warp, instead of an interleaved part of p + 1 steps
  and a tail of L - 2p - 1 steps (whose lengths differ per lane, so the warp ran the
  longest of each: about 1.5 x the steps at 8 or 4 fma).

* **Twelve-column tiles** (kernel ``gdn_wsr_state``, when Kd / P^T are staged and the
  items are twelve columns wide): a phase-1 unit is one row x twelve columns (one W^T /
  qs^T load feeds twelve fma), a state unit two rows x twelve columns, an output unit the
  row pair x twelve columns. Phase 1 then has 2 C units and phase 2 K / 2 + C / 2, so
  four compute warps cover both phases, one per SM sub-partition (six warps of the
  four-column tiles put two on each of two sub-partitions: the H200's phase clock showed
  those warps finishing last in both phases), and the other eight warps copy. A narrower
  item (the last of a value head when 12 does not divide V) runs the same tiles over the
  slice's twelve columns and stores only its own: columns never mix. The four-column
  tiles stay in kernel ``gdn_wsr_state_narrow`` (other widths, Kd / P^T in global memory).

Compute and copy warps run separate loops with the same barriers (two per chunk). Every
region is still written in the phase in which nobody reads it (the gamma buffers are
double-buffered as before), so the compute threads see exactly the values
``ws_state_item``'s compute threads see, and they run the same fma chains in the same
order: the result is chunked's, byte for byte. Every copy is an exact FP32 move.

Dynamic shared memory: :func:`._split_state_ws.ws_floats`'s layout.
"""
from __future__ import annotations

import numpy as np
from numba import types

from .._compat import cuda
from ._common import C, ZERO
from ._split_ops import VS, _dev, fma4, ld1, ld2, ld4, opaque, pf1, st4
from ._split_state import (OFF_OQ, OFF_VN, OFF_WQ, dot_h, item_layout, load_state_slice,
                           phase1_unit, scale4, store_row, store_state_slice, sub4)
from ._split_state_ws import _ug_addr, phase2_state_unit, prefetch_chunk_l2

_F32 = types.float32        # (the dynamic shared array's dtype, as the simulator wants it)
BATCH = 8                   # float4 per load batch (explicit variables: registers)
SLOTS = 2 * BATCH           # float4 a copy thread carries from one phase to the next
_Z4 = (ZERO, ZERO, ZERO, ZERO)
I32 = np.int32


@_dev
def _ld(scr, e, n, n1, s1, s2):
    """Float4 ``min(e, n - 1)`` of a region (``n >= 1``) whose first ``n1`` float4 come from
    ``scr[s1 ..]`` and the rest from ``scr[s2 ..]``: a load from a valid address for every
    lane, so the batch's loads need no branch (:func:`_st` stores only ``e < n``)."""
    ec = min(e, n - 1)
    s = s1 + 4 * ec
    if ec >= n1:
        s = s2 + 4 * (ec - n1)
    return ld4(scr, s)


@_dev
def _st(sm, e, n, d, x):
    if e < n:
        st4(sm, d + 4 * e, x)


@_dev
def load_batch(scr, e, step, n, n1, s1, s2):
    """Float4 ``e, e + step, .., e + 7 step`` of a two-part region (:func:`_ld`): eight
    16-byte loads in flight."""
    return (_ld(scr, e, n, n1, s1, s2), _ld(scr, e + step, n, n1, s1, s2),
            _ld(scr, e + 2 * step, n, n1, s1, s2), _ld(scr, e + 3 * step, n, n1, s1, s2),
            _ld(scr, e + 4 * step, n, n1, s1, s2), _ld(scr, e + 5 * step, n, n1, s1, s2),
            _ld(scr, e + 6 * step, n, n1, s1, s2), _ld(scr, e + 7 * step, n, n1, s1, s2))


@_dev
def store_batch(sm, e, step, n, d, x):
    """:func:`load_batch`'s eight float4 to ``sm[d + 4 e ..]`` (the region is contiguous in
    shared memory)."""
    _st(sm, e, n, d, x[0])
    _st(sm, e + step, n, d, x[1])
    _st(sm, e + 2 * step, n, d, x[2])
    _st(sm, e + 3 * step, n, d, x[3])
    _st(sm, e + 4 * step, n, d, x[4])
    _st(sm, e + 5 * step, n, d, x[5])
    _st(sm, e + 6 * step, n, d, x[6])
    _st(sm, e + 7 * step, n, d, x[7])


@_dev
def load_slots(scr, ptid, nprod, n, n1, s1, s2):
    """The ``SLOTS`` float4 of a region a copy thread carries: ``ptid + k * nprod``."""
    b = BATCH * nprod
    return (load_batch(scr, ptid, nprod, n, n1, s1, s2),
            load_batch(scr, ptid + b, nprod, n, n1, s1, s2))


@_dev
def store_region(sm, scr, ptid, nprod, n, n1, s1, s2, d, x):
    """A two-part region into ``sm[d ..]``: the carried slots ``x``, then (loaded and
    stored here) the elements past them."""
    b = BATCH * nprod
    store_batch(sm, ptid, nprod, n, d, x[0])
    store_batch(sm, ptid + b, nprod, n, d, x[1])
    e = ptid + SLOTS * nprod
    while e < n:
        store_batch(sm, e, nprod, n, d, load_batch(scr, e, nprod, n, n1, s1, s2))
        e += b


@_dev
def ug_slot(e, ncg, cu, V, off_u, o_g, off_g):
    """Where float4 number ``e`` of the U slice | gamma (:func:`._split_state_ws._ug_addr`'s
    order) lives: ``(valid, source offset in a slot, shared destination, gamma?)``; a
    gamma element's destination is in gamma buffer 0 (buffer 1 is ``C`` floats on)."""
    nu = C * ncg
    n = nu + C // 4
    ec = min(e, n - 1)
    s, d = _ug_addr(ec, nu, ncg, cu, V, off_u, o_g, off_g)
    return e < n, s, d, ec >= nu


@_dev
def load_ug(scr, sbc, a0, a1):
    """The two float4 of the U slice | gamma a copy thread carries (slots ``a0``, ``a1`` of
    :func:`ug_slot`) from chunk slot ``sbc``."""
    return ld4(scr, sbc + a0[1]), ld4(scr, sbc + a1[1])


@_dev
def store_ug(sm, a0, a1, par, x):
    """Store :func:`load_ug`'s pair; gamma elements go to gamma buffer ``par``."""
    if a0[0]:
        st4(sm, a0[2] + (par * C if a0[3] else 0), x[0])
    if a1[0]:
        st4(sm, a1[2] + (par * C if a1[3] else 0), x[1])


@_dev
def copy_ug_rest(sm, scr, sbc, e, nprod, ncg, cu, V, off_u, o_g, off_g, par):
    """The U slice | gamma elements from ``e`` on (step ``nprod``), loaded and stored here
    (only when fewer than half as many copy threads as elements)."""
    n = C * ncg + C // 4
    while e < n:
        a = ug_slot(e, ncg, cu, V, off_u, o_g, off_g)
        st4(sm, a[2] + (par * C if a[3] else 0), ld4(scr, sbc + a[1]))
        e += nprod


@_dev
def zero_slots():
    z = (_Z4, _Z4, _Z4, _Z4, _Z4, _Z4, _Z4, _Z4)
    return (z, z)


@_dev
def phase1_row(sm, u, KC, K, off_u, gb, ncg):
    """Wide phase-1 unit ``u < 2 C``: one row r x the twelve columns of one product (one
    W^T / qs^T load feeds twelve fma): chunked step 6 (``wh = sum_m W_rm h_mc``, m
    ascending from zero; ``vn = U - wh``) or step 7's ``qh = sum_m qs_rm h_mc``, then
    ``qh * gamma_r``; :func:`._split_state.phase1_unit`'s chains, tiled differently. The
    first ``ncg`` column groups are the item's; the others (an item narrower than twelve
    columns) compute on whatever the slice holds there and are not stored (columns never
    mix)."""
    which = u // C
    r = u - which * C
    a0, a1, a2 = dot_h(sm, OFF_WQ + which * KC + r, C, sm, 0, K, 3)
    pr = r * VS
    if which == 0:
        pu = off_u + pr
        st4(sm, OFF_VN + pr, sub4(ld4(sm, pu), a0))
        if ncg > 1:
            st4(sm, OFF_VN + pr + 4, sub4(ld4(sm, pu + 4), a1))
        if ncg > 2:
            st4(sm, OFF_VN + pr + 8, sub4(ld4(sm, pu + 8), a2))
    else:
        g = ld1(sm, gb + r)
        st4(sm, OFF_OQ + pr, scale4(a0, g))
        if ncg > 1:
            st4(sm, OFF_OQ + pr + 4, scale4(a1, g))
        if ncg > 2:
            st4(sm, OFF_OQ + pr + 8, scale4(a2, g))


@_dev
def state_rows2_wide(sm, off_kd, K, u, gl, L, ncg):
    """Wide phase-2 state unit ``u < K / 2``: rows m0 = 2u, m0 + 1 x the twelve columns
    (the first ``ncg`` groups stored, as in :func:`phase1_row`),
    in place: chunked step 8 (``h' = h * gamma_{L-1}``, then ``fma(Kd_jm, vn_jc, h')`` for
    j = 0 .. L-1 ascending; Kd staged at ``sm[off_kd + j * K + m]``): one 8-byte Kd load
    and three vn loads per 24 fma."""
    m0 = 2 * u
    ph = m0 * VS
    a0 = scale4(ld4(sm, ph), gl)
    a1 = scale4(ld4(sm, ph + 4), gl)
    a2 = scale4(ld4(sm, ph + 8), gl)
    b0 = scale4(ld4(sm, ph + VS), gl)
    b1 = scale4(ld4(sm, ph + VS + 4), gl)
    b2 = scale4(ld4(sm, ph + VS + 8), gl)
    pk = off_kd + m0
    pv = OFF_VN
    j = 0
    while j < L:
        f = ld2(sm, pk)
        v0 = ld4(sm, pv)
        v1 = ld4(sm, pv + 4)
        v2 = ld4(sm, pv + 8)
        a0 = fma4(f[0], v0, a0)
        a1 = fma4(f[0], v1, a1)
        a2 = fma4(f[0], v2, a2)
        b0 = fma4(f[1], v0, b0)
        b1 = fma4(f[1], v1, b1)
        b2 = fma4(f[1], v2, b2)
        pk += K
        pv += VS
        j += 1
    st4(sm, ph, a0)
    st4(sm, ph + VS, b0)
    if ncg > 1:
        st4(sm, ph + 4, a1)
        st4(sm, ph + VS + 4, b1)
    if ncg > 2:
        st4(sm, ph + 8, a2)
        st4(sm, ph + VS + 8, b2)


@_dev
def flat_out_row_wide(o, bb, t0, hv, c0, sm, off_pt, p, L, ncg):
    """Wide output unit ``p < (L + 1) / 2``: rows p and ib = L-1-p (once when equal) x the
    twelve columns (the first ``ncg`` groups stored), chunked step 7 (``o = qh * gamma``, then ``fma(P_ij, vn_jc, o)`` for
    j = 0 .. i ascending; P^T staged at ``sm[off_pt + j * C + i]``): row p's chains, then
    row ib's, in one loop of the same length for every lane but the middle row's."""
    ib = L - 1 - p
    na = p + 1
    if ib == p:
        na = 0
    tot = na + ib + 1
    a0 = ld4(sm, OFF_OQ + p * VS)
    a1 = ld4(sm, OFF_OQ + p * VS + 4)
    a2 = ld4(sm, OFF_OQ + p * VS + 8)
    b0 = ld4(sm, OFF_OQ + ib * VS)
    b1 = ld4(sm, OFF_OQ + ib * VS + 4)
    b2 = ld4(sm, OFF_OQ + ib * VS + 8)
    r0 = a0
    r1 = a1
    r2 = a2
    i = p
    j = 0
    t = 0
    while t < tot:
        if t == na:                          # row p done: row ib's chains start
            r0 = a0
            r1 = a1
            r2 = a2
            a0 = b0
            a1 = b1
            a2 = b2
            i = ib
            j = 0
        x = ld1(sm, off_pt + j * C + i)
        pv = OFF_VN + j * VS
        a0 = fma4(x, ld4(sm, pv), a0)
        a1 = fma4(x, ld4(sm, pv + 4), a1)
        a2 = fma4(x, ld4(sm, pv + 8), a2)
        j += 1
        t += 1
    if na > 0:
        store_row(o, bb, t0 + p, hv, c0, r0)
        if ncg > 1:
            store_row(o, bb, t0 + p, hv, c0 + 4, r1)
        if ncg > 2:
            store_row(o, bb, t0 + p, hv, c0 + 8, r2)
    store_row(o, bb, t0 + ib, hv, c0, a0)
    if ncg > 1:
        store_row(o, bb, t0 + ib, hv, c0 + 4, a1)
    if ncg > 2:
        store_row(o, bb, t0 + ib, hv, c0 + 8, a2)


@_dev
def flat_out_unit(o, bb, t0, hv, c0, sm, off_pt, u2, half, L):
    """Output unit ``u2``: rows p and ib = L-1-p (once when equal) x four columns of
    column group g, chunked step 7 (``o = qh * gamma``, then ``fma(P_ij, vn_jc, o)`` for
    j = 0 .. i ascending; P^T at ``sm[off_pt + j * C + i]``): row p's chain, then row ib's,
    in one loop of (p + 1) + (ib + 1) steps (``L + 1`` for every lane but the middle
    row's), stored."""
    g = u2 // half
    p = u2 - g * half
    c4 = 4 * g
    ib = L - 1 - p                           # >= p; == p only for the middle row
    na = p + 1
    if ib == p:
        na = 0
    tot = na + ib + 1
    acc = ld4(sm, OFF_OQ + p * VS + c4)
    ob = ld4(sm, OFF_OQ + ib * VS + c4)
    oa = acc
    i = p
    j = 0
    t = 0
    while t < tot:
        if t == na:                          # row p done: row ib's chain starts
            oa = acc
            acc = ob
            i = ib
            j = 0
        acc = fma4(ld1(sm, off_pt + j * C + i), ld4(sm, OFF_VN + j * VS + c4), acc)
        j += 1
        t += 1
    if na > 0:
        store_row(o, bb, t0 + p, hv, c0 + c4, oa)
    store_row(o, bb, t0 + ib, hv, c0 + c4, acc)


@_dev
def pair_out_global(o, bb, t0, hv, c0, sm, scr, p_base, u2, half, L):
    """Output unit ``u2`` with P^T in global memory (no Kd / P^T staging): rows p and
    L-1-p one after the other, as ``ws_state_item`` does in that form."""
    g = u2 // half
    p = u2 - g * half
    c4 = 4 * g
    ib = L - 1 - p
    for rep in range(2):
        i = p if rep == 0 else ib
        if rep == 0 or i != p:
            acc = ld4(sm, OFF_OQ + i * VS + c4)
            pp = p_base + i
            pv = OFF_VN + c4
            j = 0
            while j <= i:
                acc = fma4(ld1(scr, pp), ld4(sm, pv), acc)
                pp += C
                pv += VS
                j += 1
            store_row(o, bb, t0 + i, hv, c0 + c4, acc)


def _make_state_pass(WIDE):
    """The state item and kernel with the twelve-column tiles (``WIDE``: every item runs
    them; only for Kd / P^T staged) or the four-column tiles of ``ws_state_item`` (every
    staging form). One kernel per tiling keeps each within the launch bound's registers;
    the plan picks one."""
    @_dev
    def wsr_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp,
                       ncomp, sm):
        """Steps 6-8 of chunked for work item ``it`` over every chunk of its sequence: threads
        ``tid < ncomp`` compute (twelve-column tiles where ``WIDE`` and the item allows,
        ``ws_state_item``'s otherwise; flat output chains), the others copy a phase ahead
        (module docstring). A CTA-wide call: every thread passes the same number of
        barriers."""
        tid = cuda.threadIdx.x
        nthr = cuda.blockDim.x
        n, hv, c0, w, bb, bos, ln, V, KC, sb, o_qs, o_w, o_kd, o_u, o_p, o_g = item_layout(
            o, seqs, items, F, H, K, it)
        off_kp = OFF_WQ + 2 * KC
        off_u = off_kp + ((KC + C * C) if stage_kp != 0 else 0)
        off_g = off_u + C * VS
        ncg = w // 4
        nch = (ln + C - 1) // C
        n4 = KC // 4
        nq = K // 4 if stage_kp != 0 else K // 2  # phase-2 state units per column group
        ns = nq * ncg
        wide = WIDE                          # twelve-column tiles (module docstring)
        load_state_slice(sm, h0, h0_idx[n], hv, c0, K, w, tid, nthr)

        if tid >= ncomp:
            # (32-bit offsets inside a slot, 64-bit slot bases: fewer registers to carry)
            ptid = I32(tid - ncomp)
            nprod = I32(nthr - ncomp)
            n4 = I32(n4)
            na_ = I32(2 * n4)                        # float4 of W^T | qs^T (then U, gamma)
            nb_ = I32((n4 + (C * C) // 4) if stage_kp != 0 else 0)   # of Kd | P^T
            cu = I32(c0 + o_u)                       # the U slice's first column in the slot
            nvh = I32(2 * KC + C * V + C * C + C)
            o_w = I32(o_w)
            o_qs = I32(o_qs)
            o_kd = I32(o_kd)
            o_p = I32(o_p)
            o_g = I32(o_g)
            V = I32(V)
            ncg = I32(ncg)
            KC = I32(KC)
            pf_l2 = c0 == 0                          # one CTA per value head prefetches into L2
            u0 = ug_slot(ptid, ncg, cu, V, off_u, o_g, off_g)      # (per thread, every chunk)
            u1 = ug_slot(ptid + nprod, ncg, cu, V, off_u, o_g, off_g)
            x = zero_slots()
            xu = (_Z4, _Z4)
            if nch > 0:
                if pf_l2 and nch > 1:
                    prefetch_chunk_l2(scr, sb + F, o_w, o_qs, nvh, KC, ptid, nprod)
                store_ug(sm, u0, u1, 0, load_ug(scr, sb, u0, u1))
                copy_ug_rest(sm, scr, sb, ptid + 2 * nprod, nprod, ncg, cu, V, off_u, o_g, off_g, 0)
                store_region(sm, scr, ptid, nprod, na_, n4, sb + o_w, sb + o_qs, OFF_WQ,
                             load_slots(scr, ptid, nprod, na_, n4, sb + o_w, sb + o_qs))
                if stage_kp != 0:
                    x = load_slots(scr, ptid, nprod, nb_, n4, sb + o_kd, sb + o_p)
            cuda.syncthreads()
            for ci in range(nch):
                # phase 1: this chunk's Kd / P^T (carried) into shared memory, then the loads
                # of the next chunk's W^T / qs^T / U / gamma (an L2 prefetch two chunks ahead)
                sn = sb + F
                ptid = opaque(ptid)                  # (slot addresses: recomputed, not held)
                if pf_l2 and ci + 2 < nch:
                    prefetch_chunk_l2(scr, sb + 2 * F, o_w, o_qs, nvh, KC, ptid, nprod)
                if stage_kp != 0:
                    store_region(sm, scr, ptid, nprod, nb_, n4, sb + o_kd, sb + o_p, off_kp, x)
                else:
                    e = ptid
                    while e < KC // 32:
                        pf1(scr, sb + o_kd + 32 * e)
                        e += nprod
                    e = ptid
                    while e < (C * C) // 32:
                        pf1(scr, sb + o_p + 32 * e)
                        e += nprod
                x = zero_slots()                     # (every path redefines the carried
                xu = (_Z4, _Z4)                      # values: the old ones die at their stores)
                if ci + 1 < nch:
                    xu = load_ug(scr, sn, u0, u1)
                    x = load_slots(scr, ptid, nprod, na_, n4, sn + o_w, sn + o_qs)
                cuda.syncthreads()
                # phase 2: the next chunk's W^T / qs^T / U / gamma (into the other gamma
                # buffer) into shared memory, then the loads of its Kd / P^T
                ptid = opaque(ptid)
                if ci + 1 < nch:
                    store_ug(sm, u0, u1, (ci + 1) & 1, xu)
                    copy_ug_rest(sm, scr, sn, ptid + 2 * nprod, nprod, ncg, cu, V, off_u, o_g,
                                 off_g, (ci + 1) & 1)
                    store_region(sm, scr, ptid, nprod, na_, n4, sn + o_w, sn + o_qs, OFF_WQ, x)
                x = zero_slots()
                if ci + 1 < nch and stage_kp != 0:
                    x = load_slots(scr, ptid, nprod, nb_, n4, sn + o_kd, sn + o_p)
                cuda.syncthreads()
                sb += F
        else:
            cuda.syncthreads()
            for ci in range(nch):
                cs = ci * C
                L = min(C, ln - cs)
                t0 = bos + cs
                gb = off_g + (ci & 1) * C            # this chunk's gamma buffer
                # phase 1: chunked step 6 (vn = U - W h) and step 7's qh * gamma
                if wide:
                    for u in range(tid, 2 * C, ncomp):
                        phase1_row(sm, u, KC, K, off_u, gb, ncg)
                else:
                    for u in range(tid, C * ncg, ncomp):
                        phase1_unit(sm, u, ncg, KC, K, sm, off_u, VS, sm, gb)
                cuda.syncthreads()
                # phase 2: chunked step 8 (the state update) and step 7 (the output)
                gl = ld1(sm, gb + L - 1)
                half = (L + 1) // 2
                if wide:
                    for u in range(tid, K // 2 + half, ncomp):
                        if u < K // 2:
                            state_rows2_wide(sm, off_kp, K, u, gl, L, ncg)
                        else:
                            flat_out_row_wide(o, bb, t0, hv, c0, sm, off_kp + KC, u - K // 2,
                                              L, ncg)
                else:
                    for u in range(tid, ns + half * ncg, ncomp):
                        if u < ns:
                            phase2_state_unit(sm, scr, u, nq, stage_kp, off_kp, sb + o_kd, K,
                                              gl, L)
                        elif stage_kp != 0:
                            flat_out_unit(o, bb, t0, hv, c0, sm, off_kp + KC, u - ns, half, L)
                        else:
                            pair_out_global(o, bb, t0, hv, c0, sm, scr, sb + o_p, u - ns, half,
                                            L)
                cuda.syncthreads()
                sb += F

        store_state_slice(hT, hT_idx[n], hv, c0, sm, K, w, tid, nthr)

    def gdn_wsr_state_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, stage_kp,
                             ncomp):
        sm = cuda.shared.array(0, _F32)
        wsr_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, cuda.blockIdx.x,
                       stage_kp, ncomp, sm)

    return wsr_state_item, gdn_wsr_state_kernel


#: twelve-column tiles (a plan with Kd / P^T staged and 12-column items)
wsr_state_item, gdn_wsr_state_kernel = _make_state_pass(True)
#: four-column tiles (narrower items, or Kd / P^T read from global memory)
wsr_state_item_narrow, gdn_wsr_state_kernel_narrow = _make_state_pass(False)
