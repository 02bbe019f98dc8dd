"""The sequential state pass of variant ``chunked_wsr``: :mod:`._split_state_ws`'s warp-
specialised state pass with two changes, neither of which touches a value:

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

Compute and copy warps run separate loops with the same barriers (two per chunk), so the
barrier is :func:`._split_ops.block_sync` (``barrier.sync 0``, which threads may reach at
different instructions), not ``cuda.syncthreads()`` (``bar.sync 0``, aligned: every thread
at the same instruction; compute-sanitizer's synccheck flags the separate loops with it). Every
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
from ._split_ops import VS, _dev, block_sync, fma4, ld1, ld4, opaque, pf1, st4
from ._split_state import (OFF_OQ, OFF_VN, OFF_WQ, item_layout, load_state_slice,
                           prefetch_kd_pt_l1,
                           out_rows_seq, phase1_unit, store_row, store_state_slice)
from ._split_state_ws import (_ug_addr, out_unit_rows, phase2_state_unit, prefetch_chunk_l2,
                              ws_regions)

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
    """``sm[d + 4e ..] = x`` (16-byte store) when ``e < n``: the store of :func:`_ld`'s load."""
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
def _ug_dst(a, par):
    """The shared destination of :func:`ug_slot` ``a`` with gamma in buffer ``par``."""
    return a[2] + (par * C if a[3] else 0)


@_dev
def load_ug(scr, sbc, a0, a1):
    """The two float4 of the U slice | gamma a copy thread carries (slots ``a0``, ``a1`` of
    :func:`ug_slot`) from chunk slot ``sbc``."""
    return ld4(scr, sbc + a0[1]), ld4(scr, sbc + a1[1])


@_dev
def store_ug(sm, a0, a1, par, x):
    """Store :func:`load_ug`'s pair; gamma elements go to gamma buffer ``par``."""
    if a0[0]:
        st4(sm, _ug_dst(a0, par), x[0])
    if a1[0]:
        st4(sm, _ug_dst(a1, par), x[1])


@_dev
def copy_ug_rest(sm, scr, sbc, e, nprod, ncg, cu, V, off_u, o_g, off_g, par):
    """The U slice | gamma elements from ``e`` on (step ``nprod``), loaded and stored here
    (only when fewer than half as many copy threads as elements)."""
    n = C * ncg + C // 4
    while e < n:
        a = ug_slot(e, ncg, cu, V, off_u, o_g, off_g)
        st4(sm, _ug_dst(a, par), ld4(scr, sbc + a[1]))
        e += nprod


@_dev
def zero_slots():
    """The ``SLOTS`` float4 a copy thread carries, all zeros (two batches of ``BATCH``)."""
    z = (_Z4, _Z4, _Z4, _Z4, _Z4, _Z4, _Z4, _Z4)
    return (z, z)


@_dev
def flat_out_unit(o, bb, t0, hv, c0, sm, off_pt, u2, half, L):
    """Output unit ``u2``: rows p and ib = L-1-p (once when equal) x four columns of
    column group g, chunked step 7 (``o = qh * gamma``, then ``fma(P_ij, vn_jc, o)`` for
    j = 0 .. i ascending; P^T at ``sm[off_pt + j * C + i]``): row p's chain, then row ib's,
    in one loop of (p + 1) + (ib + 1) steps (``L + 1`` for every lane but the middle
    row's), stored."""
    p, c4, ib, na = out_unit_rows(u2, half, L)
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


def make_state_item(out_unit):
    """:func:`wsr_state_item` with ``out_unit`` (same arguments as :func:`flat_out_unit`) as
    the staged output unit of phase 2. Every other line is shared, so variants that differ
    only in how an output unit schedules its (unchanged) chains share the rest of the
    state pass; the device function's name stays ``wsr_state_item`` (the timing tools edit
    its source). ``cuda.jit(device=True)``, not ``_dev``: on the simulator a device
    function swaps its own module's ``cuda`` for the simulated one when called, so the
    item works from a kernel defined in another module."""

    @cuda.jit(device=True)
    def wsr_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp,
                       ncomp, sm):
        """Steps 6-8 of chunked for work item ``it`` over every chunk of its sequence:
        threads ``tid < ncomp`` compute (``ws_state_item``'s tiles, ``out_unit``'s output
        chains), the others copy a phase ahead (module docstring). A CTA-wide call: every
        thread passes the same number of barriers."""
        tid = cuda.threadIdx.x
        nthr = cuda.blockDim.x
        n, hv, c0, w, bb, bos, ln, V, KC, sb, o_qs, o_w, o_kd, o_u, o_p, o_g = item_layout(
            o, seqs, items, F, H, K, it)
        off_kp, off_u, off_g, ncg, nch = ws_regions(KC, w, ln, stage_kp)
        n4 = KC // 4
        nq = K // 4 if stage_kp != 0 else K // 2  # phase-2 state units per column group
        ns = nq * ncg
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
            block_sync()
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
                    prefetch_kd_pt_l1(scr, sb, o_kd, o_p, KC, ptid, nprod)
                x = zero_slots()                     # (every path redefines the carried
                xu = (_Z4, _Z4)                      # values: the old ones die at their stores)
                if ci + 1 < nch:
                    xu = load_ug(scr, sn, u0, u1)
                    x = load_slots(scr, ptid, nprod, na_, n4, sn + o_w, sn + o_qs)
                block_sync()
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
                block_sync()
                sb += F
        else:
            block_sync()
            for ci in range(nch):
                cs = ci * C
                L = min(C, ln - cs)
                t0 = bos + cs
                gb = off_g + (ci & 1) * C            # this chunk's gamma buffer
                # phase 1: chunked step 6 (vn = U - W h) and step 7's qh * gamma
                for u in range(tid, C * ncg, ncomp):
                    phase1_unit(sm, u, ncg, KC, K, sm, off_u, VS, sm, gb)
                block_sync()
                # phase 2: chunked step 8 (the state update) and step 7 (the output)
                gl = ld1(sm, gb + L - 1)
                half = (L + 1) // 2
                for u in range(tid, ns + half * ncg, ncomp):
                    if u < ns:
                        phase2_state_unit(sm, scr, u, nq, stage_kp, off_kp, sb + o_kd, K, gl, L)
                    elif stage_kp != 0:
                        out_unit(o, bb, t0, hv, c0, sm, off_kp + KC, u - ns, half, L)
                    else:                            # (P^T in global memory)
                        p, c4, ib, na = out_unit_rows(u - ns, half, L)
                        out_rows_seq(o, bb, t0, hv, c0, c4, sm, scr, 0, 0, sb + o_p, p, L)
                block_sync()
                sb += F

        store_state_slice(hT, hT_idx[n], hv, c0, sm, K, w, tid, nthr)

    return wsr_state_item


wsr_state_item = make_state_item(flat_out_unit)


def gdn_wsr_state_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, stage_kp,
                         ncomp):
    """State pass of contract.md part B, ``chunked`` family (variant ``chunked_wsr``): steps
    6-8 of :mod:`.chunked`'s FP32 order for work item ``blockIdx.x`` (:func:`wsr_state_item`,
    copies carried a phase ahead). Output and final state must equal the frozen
    ``gdn_chunked_kernel``'s bit for bit."""
    sm = cuda.shared.array(0, _F32)
    wsr_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, cuda.blockIdx.x,
                   stage_kp, ncomp, sm)
