"""The sequential state pass of the GDN ``chunked`` variants: steps 6-8 of the frozen
:mod:`.chunked` order (vn = U - W h, the output, the state update), chunk after chunk, for
one (sequence, value head, block of <= 12 state columns).

Two forms of the same arithmetic:
* :func:`state_item` reads the chunk's scratch (W^T, qs^T, Kd, P^T, U, gamma) straight
  from global memory; ``chunked_pipe`` runs it (128 threads, static shared memory borrowed
  from the pre-pass);
* :func:`staged_state_item` (kernel ``gdn_split_state`` of ``chunked_split``) first copies
  the chunk's W^T / qs^T (and, where the device's shared memory allows, Kd / P^T) into
  dynamic shared memory one phase ahead of use, so the fma loops wait on shared memory
  instead of L2 round trips.
Which rounding produces each value, and why it is chunked's, is written in
:mod:`.chunked_split`'s docstring; both forms run every chain in that order.
"""
from __future__ import annotations

import numpy as np
from numba import types

from .._compat import cuda
from ._common import C, MAXD, ZERO
from ._split_ops import N_HS, N_VS, VS, _dev, fma4, ld1, ld2, ld4, pf1, st4

_F32 = types.float32        # (the dynamic shared array's dtype, as the simulator wants it)

@_dev
def dot_h(scr, p, stride, hs, ph, n, ncg):
    """``acc_c = 0; for t = 0 .. n-1: acc_c = fma(scr[p + t*stride], hs[ph + t*VS + c], acc_c)``
    for the ``4 * ncg`` columns c (ncg <= 3; one scr load feeds every column); three
    4-tuples."""
    z = (ZERO, ZERO, ZERO, ZERO)
    return upd_h(scr, p, stride, hs, ph, z, z, z, n, ncg)


@_dev
def upd_h(scr, p, stride, vn, pv, h0, h1, h2, n, ncg):
    """``h_c = fma(scr[p + j*stride], vn[pv + j*VS + c], h_c)`` for j = 0 .. n-1 ascending,
    for the ``4 * ncg`` columns (ncg <= 3; one scr load feeds every column)."""
    j = 0
    if ncg == 3:
        while j < n:
            x = ld1(scr, p)
            h0 = fma4(x, ld4(vn, pv), h0)
            h1 = fma4(x, ld4(vn, pv + 4), h1)
            h2 = fma4(x, ld4(vn, pv + 8), h2)
            p += stride
            pv += VS
            j += 1
    elif ncg == 2:
        while j < n:
            x = ld1(scr, p)
            h0 = fma4(x, ld4(vn, pv), h0)
            h1 = fma4(x, ld4(vn, pv + 4), h1)
            p += stride
            pv += VS
            j += 1
    else:
        while j < n:
            h0 = fma4(ld1(scr, p), ld4(vn, pv), h0)
            p += stride
            pv += VS
            j += 1
    return h0, h1, h2


@_dev
def scale4(x, s):
    """``x_c * s`` for the four values of ``x`` (one rounding each)."""
    return (x[0] * s, x[1] * s, x[2] * s, x[3] * s)


@_dev
def sub4(a, b):
    """``a_c - b_c`` for the four values (one rounding each)."""
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3])


@_dev
def item_layout(o, seqs, items, F, H, K, it):
    """Work item ``it`` of the state pass and where its chunk data lives: ``(n, hv, c0, w,
    batch row, first token, length, V, K*C, first float of the sequence's first slot, and
    the slot offsets of qs^T, W^T, Kd, U, P^T, gamma)`` (integers only)."""
    n = items[it, 0]
    hv = items[it, 1]
    HV = o.shape[2]
    V = o.shape[3]
    hq = hv // (HV // H)
    KC = K * C
    o_qs = hq * 2 * KC + KC
    o_w = H * 2 * KC + hv * (2 * KC + C * V + C * C + C)
    o_kd = o_w + KC
    o_u = o_w + 2 * KC
    o_p = o_u + C * V
    o_g = o_p + C * C
    return (n, hv, items[it, 2], items[it, 3], seqs[n, 0], seqs[n, 1], seqs[n, 2], V, KC,
            items[it, 4] * np.int64(F), o_qs, o_w, o_kd, o_u, o_p, o_g)


@_dev
def prefetch_kd_pt_l1(scr, sb, o_kd, o_p, KC, pt, npt):
    """``prefetch.global.L1`` of chunk slot ``sb``'s Kd (``KC`` floats at ``o_kd``) and P^T
    (C x C floats at ``o_p``), one instruction per 128-byte line, threads ``pt`` of
    ``npt``; no value is touched."""
    e = pt
    while e < KC // 32:
        pf1(scr, sb + o_kd + 32 * e)
        e += npt
    e = pt
    while e < (C * C) // 32:
        pf1(scr, sb + o_p + 32 * e)
        e += npt


@_dev
def state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, hbuf, F, H, K, it, ci_lo, ci_hi,
               hs, vn, oq):
    """Steps 6-8 of chunked for work item ``it`` over the chunks ``ci_lo <= ci < ci_hi`` of
    its sequence: the state slice comes from the initial state when ``ci_lo == 0``, else
    from ``hbuf``; it goes to the final state when the sequence ends in the range, else to
    ``hbuf``. A CTA-wide call (it has barriers); ``hs``, ``vn``, ``oq`` are shared arrays of
    at least N_HS, N_VS, N_VS floats (16-byte aligned)."""
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    n, hv, c0, w, bb, bos, ln, V, KC, sb, o_qs, o_w, o_kd, o_u, o_p, o_g = item_layout(
        o, seqs, items, F, H, K, it)
    ncg = w // 4
    nch = (ln + C - 1) // C
    lo = min(ci_lo, nch)
    hi = min(ci_hi, nch)
    if ci_lo > 0 and lo >= hi:      # nothing of this sequence in the range (uniform exit)
        return
    hb = it * (MAXD * VS)

    i0 = h0_idx[n]
    for e in range(tid, K * w, nthr):
        m = e // w
        c = e - m * w
        if ci_lo > 0:
            hs[m * VS + c] = hbuf[hb + m * VS + c]
        elif i0 >= 0:
            hs[m * VS + c] = h0[i0, hv, m, c0 + c]
        else:
            hs[m * VS + c] = ZERO
    cuda.syncthreads()

    nkc = KC // 32
    sb += lo * np.int64(F)
    for ci in range(lo, hi):
        cs = ci * C
        L = min(C, ln - cs)
        t0 = bos + cs

        # ---- L1 prefetch (values untouched): this chunk's Kd and P^T (read after the next
        # barrier) and, if there is one, the next chunk's W^T and qs^T
        prefetch_kd_pt_l1(scr, sb, o_kd, o_p, KC, tid, nthr)
        if ci + 1 < hi:                 # (never a chunk of a later pipeline stage)
            e = tid
            while e < nkc:
                pf1(scr, sb + F + o_w + 32 * e)
                pf1(scr, sb + F + o_qs + 32 * e)
                e += nthr

        # ---- chunked step 6 (vn = U - W h) and step 7's qh * gamma, m ascending. A unit is
        # one row of one of the two products: over one group of 4 columns when the CTA has
        # 128 threads per group (more warps, more loads in flight), else over all w columns
        # (one W / qs load feeds 4 * ncg fma)
        if nthr >= 128 * ncg:
            for u in range(tid, 2 * L * ncg, nthr):
                which = u // (L * ncg)
                u1 = u - which * (L * ncg)
                cg = u1 // L
                i = u1 - cg * L
                c4 = 4 * cg
                a0, a1, a2 = dot_h(scr, sb + i + (o_w if which == 0 else o_qs), C, hs, c4,
                                   K, 1)
                pr = i * VS + c4
                if which == 0:
                    st4(vn, pr, sub4(ld4(scr, sb + o_u + i * V + c0 + c4), a0))
                else:
                    st4(oq, pr, scale4(a0, ld1(scr, sb + o_g + i)))
        else:
            for u in range(tid, 2 * L, nthr):
                which = u // L
                i = u - which * L
                a0, a1, a2 = dot_h(scr, sb + i + (o_w if which == 0 else o_qs), C, hs, 0,
                                   K, ncg)
                pr = i * VS
                if which == 0:
                    pu = sb + o_u + i * V + c0
                    st4(vn, pr, sub4(ld4(scr, pu), a0))
                    if ncg > 1:
                        st4(vn, pr + 4, sub4(ld4(scr, pu + 4), a1))
                    if ncg > 2:
                        st4(vn, pr + 8, sub4(ld4(scr, pu + 8), a2))
                else:
                    gi = ld1(scr, sb + o_g + i)
                    st4(oq, pr, scale4(a0, gi))
                    if ncg > 1:
                        st4(oq, pr + 4, scale4(a1, gi))
                    if ncg > 2:
                        st4(oq, pr + 8, scale4(a2, gi))
        cuda.syncthreads()

        # ---- chunked step 8 (h' = h * gamma_{L-1}, then fma(Kd_jm, vn_j, h') for j = 0 ..
        # L-1; in place: one owner per row m, step 6 is behind the barrier) and step 7
        # (o = qh * gamma, then fma(P_ij, vn_j, o) for j = 0 .. i), as one pool of units:
        # state units (row m, all columns) first, then output units (rows p and L-1-p, one
        # group of 4 columns: L+1 fma steps in all)
        gl = ld1(scr, sb + o_g + L - 1)
        half = (L + 1) // 2
        for u in range(tid, K + half * ncg, nthr):
            if u < K:
                ph = u * VS
                x0 = scale4(ld4(hs, ph), gl)
                x1 = x0
                x2 = x0
                if ncg > 1:
                    x1 = scale4(ld4(hs, ph + 4), gl)
                if ncg > 2:
                    x2 = scale4(ld4(hs, ph + 8), gl)
                x0, x1, x2 = upd_h(scr, sb + o_kd + u, K, vn, 0, x0, x1, x2, L, ncg)
                st4(hs, ph, x0)
                if ncg > 1:
                    st4(hs, ph + 4, x1)
                if ncg > 2:
                    st4(hs, ph + 8, x2)
            else:
                u2 = u - K
                cg = u2 // half
                p = u2 - cg * half
                c4 = 4 * cg
                i = p
                for rep in range(2):
                    if rep == 1:
                        i = L - 1 - p
                    if rep == 0 or i != p:
                        acc = ld4(oq, i * VS + c4)
                        acc, d1, d2 = upd_h(scr, sb + o_p + i, C, vn, c4, acc, acc, acc,
                                            i + 1, 1)
                        ob = c0 + c4
                        o[bb, t0 + i, hv, ob] = acc[0]
                        o[bb, t0 + i, hv, ob + 1] = acc[1]
                        o[bb, t0 + i, hv, ob + 2] = acc[2]
                        o[bb, t0 + i, hv, ob + 3] = acc[3]
        cuda.syncthreads()
        sb += F

    if hi < nch:
        for e in range(tid, K * w, nthr):
            m = e // w
            c = e - m * w
            hbuf[hb + m * VS + c] = hs[m * VS + c]
    else:
        i1 = hT_idx[n]
        if i1 >= 0:
            for e in range(tid, K * w, nthr):
                m = e // w
                c = e - m * w
                hT[i1, hv, m, c0 + c] = hs[m * VS + c]
    cuda.syncthreads()



# --- the staged form (kernel ``gdn_split_state`` of chunked_split) -------------------------
# Dynamic shared memory, float32 offsets: the state slice, vn, qh * gamma, then the chunk's
# W^T and qs^T ([2][K][C]), then (``stage_kp``) its Kd [C][K] and P^T [C][C].
OFF_VN = N_HS
OFF_OQ = N_HS + N_VS
OFF_WQ = N_HS + 2 * N_VS


def staged_floats(K: int, stage_kp: bool) -> int:
    """Dynamic shared memory of :func:`gdn_split_state_kernel` in floats."""
    return OFF_WQ + 2 * K * C + ((C * K + C * C) if stage_kp else 0)


def staged_threads(K: int, w: int) -> int:
    """Threads of the staged state CTA that give every phase-2 unit its own thread."""
    return (K // 2 + C // 2) * (w // 4)


@_dev
def ld4z(src, b, e, n):
    """Float4 number ``e`` from ``src[b ..]``, or zeros when ``e >= n``."""
    if e < n:
        return ld4(src, b + 4 * e)
    return (ZERO, ZERO, ZERO, ZERO)


@_dev
def st4z(dst, d, e, n, x):
    """``dst[d + 4e ..] = x`` (16-byte store) when ``e < n``; nothing otherwise."""
    if e < n:
        st4(dst, d + 4 * e, x)


@_dev
def stage_two(dst, d1, d2, src, b1, n1, b2, n2, tid, nthr):
    """``dst[d1 + 4e ..] = src[b1 + 4e ..]`` for the float4 ``e < n1`` and likewise from ``b2``
    to ``d2`` for ``e < n2`` (exact copies), eight 16-byte loads per region and thread in
    flight before their stores."""
    e = tid
    s = nthr
    n = max(n1, n2)
    while e < n:
        a0 = ld4z(src, b1, e, n1)
        a1 = ld4z(src, b1, e + s, n1)
        a2 = ld4z(src, b1, e + 2 * s, n1)
        a3 = ld4z(src, b1, e + 3 * s, n1)
        a4 = ld4z(src, b1, e + 4 * s, n1)
        a5 = ld4z(src, b1, e + 5 * s, n1)
        a6 = ld4z(src, b1, e + 6 * s, n1)
        a7 = ld4z(src, b1, e + 7 * s, n1)
        c0 = ld4z(src, b2, e, n2)
        c1 = ld4z(src, b2, e + s, n2)
        c2 = ld4z(src, b2, e + 2 * s, n2)
        c3 = ld4z(src, b2, e + 3 * s, n2)
        c4 = ld4z(src, b2, e + 4 * s, n2)
        c5 = ld4z(src, b2, e + 5 * s, n2)
        c6 = ld4z(src, b2, e + 6 * s, n2)
        c7 = ld4z(src, b2, e + 7 * s, n2)
        st4z(dst, d1, e, n1, a0)
        st4z(dst, d1, e + s, n1, a1)
        st4z(dst, d1, e + 2 * s, n1, a2)
        st4z(dst, d1, e + 3 * s, n1, a3)
        st4z(dst, d1, e + 4 * s, n1, a4)
        st4z(dst, d1, e + 5 * s, n1, a5)
        st4z(dst, d1, e + 6 * s, n1, a6)
        st4z(dst, d1, e + 7 * s, n1, a7)
        st4z(dst, d2, e, n2, c0)
        st4z(dst, d2, e + s, n2, c1)
        st4z(dst, d2, e + 2 * s, n2, c2)
        st4z(dst, d2, e + 3 * s, n2, c3)
        st4z(dst, d2, e + 4 * s, n2, c4)
        st4z(dst, d2, e + 5 * s, n2, c5)
        st4z(dst, d2, e + 6 * s, n2, c6)
        st4z(dst, d2, e + 7 * s, n2, c7)
        e += 8 * s


@_dev
def rows2(src, p, stride, x, px, a0, a1, n):
    """Two chains per column over four columns:
    ``a_r[c] = fma(src[p + t*stride + r], x[px + t*VS + c], a_r[c])`` for t = 0 .. n-1
    ascending (r = 0, 1): one 8-byte and one 16-byte shared load per eight fma."""
    t = 0
    while t < n:
        f = ld2(src, p)
        hh = ld4(x, px)
        a0 = fma4(f[0], hh, a0)
        a1 = fma4(f[1], hh, a1)
        p += stride
        px += VS
        t += 1
    return a0, a1


@_dev
def load_state_slice(sm, h0, i0, hv, c0, K, w, tid, nthr):
    """``sm[m * VS + c] = h0[i0, hv, m, c0 + c]`` (zeros when ``i0 < 0``), m < K, c < w."""
    for e in range(tid, K * w, nthr):
        m = e // w
        c = e - m * w
        if i0 >= 0:
            sm[m * VS + c] = h0[i0, hv, m, c0 + c]
        else:
            sm[m * VS + c] = ZERO


@_dev
def store_state_slice(hT, i1, hv, c0, sm, K, w, tid, nthr):
    """``hT[i1, hv, m, c0 + c] = sm[m * VS + c]`` when ``i1 >= 0``, m < K, c < w."""
    if i1 >= 0:
        for e in range(tid, K * w, nthr):
            m = e // w
            c = e - m * w
            hT[i1, hv, m, c0 + c] = sm[m * VS + c]


@_dev
def store_row(o, bb, t, hv, c, x):
    """``o[bb, t, hv, c .. c + 3] = x`` (RNE cast to o's dtype, as chunked's store)."""
    o[bb, t, hv, c] = x[0]
    o[bb, t, hv, c + 1] = x[1]
    o[bb, t, hv, c + 2] = x[2]
    o[bb, t, hv, c + 3] = x[3]


@_dev
def phase1_unit(sm, u, ncg, KC, K, usrc, ubase, ustride, gsrc, gbase):
    """Phase-1 unit ``u`` of the staged state passes (two rows r0, r0 + 1 x four columns of
    one product, W^T / qs^T staged at OFF_WQ): chunked step 6 (``wh = sum_m W_im h_mc``, m
    ascending; ``vn = U - wh`` with U at ``usrc[ubase + i * ustride + c ..]``) or step 7's
    ``qh = sum_m qs_im h_mc``, m ascending, then ``qh * gamma_i`` (gamma at
    ``gsrc[gbase + i]``)."""
    r0 = 2 * (u % (C // 2))
    g = u // (C // 2)
    which = 0
    if g >= ncg:
        which = 1
        g = g - ncg
    c4 = 4 * g
    z4 = (ZERO, ZERO, ZERO, ZERO)
    a0, a1 = rows2(sm, OFF_WQ + which * KC + r0, C, sm, c4, z4, z4, K)
    pr = r0 * VS + c4
    if which == 0:
        pu = ubase + r0 * ustride + c4
        st4(sm, OFF_VN + pr, sub4(ld4(usrc, pu), a0))
        st4(sm, OFF_VN + pr + VS, sub4(ld4(usrc, pu + ustride), a1))
    else:
        g2 = ld2(gsrc, gbase + r0)
        st4(sm, OFF_OQ + pr, scale4(a0, g2[0]))
        st4(sm, OFF_OQ + pr + VS, scale4(a1, g2[1]))


@_dev
def state_rows2(sm, scr, stage_kp, kp_base, kd_base, K, m0, c4, gl, L):
    """Phase-2 state unit of two rows m0, m0 + 1 x four columns, in place: chunked step 8
    (``h' = h * gamma_{L-1}``, then ``fma(Kd_jm, vn_jc, h')`` for j = 0 .. L-1; Kd at
    ``sm[kp_base + j * K + m]`` when ``stage_kp``, else at ``scr[kd_base + j * K + m]``)."""
    ph = m0 * VS + c4
    a0 = scale4(ld4(sm, ph), gl)
    a1 = scale4(ld4(sm, ph + VS), gl)
    if stage_kp != 0:
        a0, a1 = rows2(sm, kp_base + m0, K, sm, OFF_VN + c4, a0, a1, L)
    else:
        a0, a1 = rows2(scr, kd_base + m0, K, sm, OFF_VN + c4, a0, a1, L)
    st4(sm, ph, a0)
    st4(sm, ph + VS, a1)


@_dev
def out_rows_seq(o, bb, t0, hv, c0, c4, sm, scr, stage_kp, pt_base, p_base, p, L):
    """Phase-2 output unit: rows p and L-1-p (once when equal) x four columns, one after the
    other: chunked step 7 (``o = qh * gamma``, then ``fma(P_ij, vn_jc, o)`` for j = 0 .. i;
    P^T at ``sm[pt_base + j * C + i]`` when ``stage_kp``, else at ``scr[p_base + ..]``),
    stored."""
    i = p
    for rep in range(2):
        if rep == 1:
            i = L - 1 - p
        if rep == 0 or i != p:
            acc = ld4(sm, OFF_OQ + i * VS + c4)
            if stage_kp != 0:
                acc, d1, d2 = upd_h(sm, pt_base + i, C, sm, OFF_VN + c4, acc, acc, acc,
                                    i + 1, 1)
            else:
                acc, d1, d2 = upd_h(scr, p_base + i, C, sm, OFF_VN + c4, acc, acc, acc,
                                    i + 1, 1)
            store_row(o, bb, t0 + i, hv, c0 + c4, acc)


@_dev
def staged_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp, sm):
    """Steps 6-8 of chunked for work item ``it`` over every chunk of its sequence, with the
    chunk's W^T / qs^T (and, if ``stage_kp``, Kd / P^T) read from ``sm`` (dynamic shared
    memory laid out as :func:`staged_floats`). Chunk ``ci``'s W^T / qs^T are copied in at the
    start of phase 2 of chunk ``ci - 1`` (L1-prefetched one phase earlier) and its Kd / P^T
    at the start of its own phase 1, each copy one burst of 16-byte loads, so the fma loops
    read shared memory instead of paying an L2 round trip per batch of loads. The copies
    are exact; every fma chain is :func:`state_item`'s (chunked's order), only where its
    operands are read from changes.

    Register tiles of two rows x four columns (eight chains, one 8-byte and one broadcast
    16-byte shared load per eight fma). Units: phase 1 = (product, rows 2p and 2p+1, four
    columns), ``64 (w/4)`` units over all C rows (rows past L compute on whatever the slot
    holds and are never read); phase 2 = ``(K/2) (w/4)`` state units (rows 2p and 2p+1, four
    columns) then ``ceil(L/2) (w/4)`` output units (rows p and L-1-p, four columns):
    :func:`staged_threads` threads give every phase-2 unit its own thread."""
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    n, hv, c0, w, bb, bos, ln, V, KC, sb, o_qs, o_w, o_kd, o_u, o_p, o_g = item_layout(
        o, seqs, items, F, H, K, it)
    off_kp = OFF_WQ + 2 * KC
    ncg = w // 4
    nh = K // 2
    nch = (ln + C - 1) // C
    n4 = KC // 4                             # float4 of W^T (= of qs^T, = of Kd)

    load_state_slice(sm, h0, h0_idx[n], hv, c0, K, w, tid, nthr)
    if nch > 0:
        stage_two(sm, OFF_WQ, OFF_WQ + KC, scr, sb + o_w, n4, sb + o_qs, n4, tid, nthr)
    cuda.syncthreads()

    for ci in range(nch):
        cs = ci * C
        L = min(C, ln - cs)
        t0 = bos + cs

        # ---- phase 1: chunked step 6 (wh = sum_m W_im h_mc, m ascending; vn = U - wh) and
        # step 7's qh = sum_m qs_im h_mc, m ascending, then qh * gamma_i. First this chunk's
        # Kd / P^T come in (unstaged: an L1 prefetch of them), and an L1 prefetch of the
        # next chunk's W^T / qs^T goes out.
        if stage_kp != 0:
            stage_two(sm, off_kp, off_kp + KC, scr, sb + o_kd, n4, sb + o_p, (C * C) // 4,
                      tid, nthr)
        else:
            prefetch_kd_pt_l1(scr, sb, o_kd, o_p, KC, tid, nthr)
        if ci + 1 < nch:
            e = tid
            while e < KC // 32:
                pf1(scr, sb + F + o_w + 32 * e)
                pf1(scr, sb + F + o_qs + 32 * e)
                e += nthr
        for u in range(tid, (C // 2) * 2 * ncg, nthr):
            phase1_unit(sm, u, ncg, KC, K, scr, sb + o_u + c0, V, scr, sb + o_g)
        cuda.syncthreads()

        # ---- phase 2: chunked step 8 (h' = h * gamma_{L-1}, then fma(Kd_jm, vn_jc, h') for
        # j = 0 .. L-1, in place, one owner per (two rows, four columns)) and step 7 (o =
        # qh * gamma, then fma(P_ij, vn_jc, o) for j = 0 .. i). First the next chunk's W^T /
        # qs^T come in (nothing in this phase reads them).
        if ci + 1 < nch:
            stage_two(sm, OFF_WQ, OFF_WQ + KC, scr, sb + F + o_w, n4, sb + F + o_qs, n4,
                      tid, nthr)
        gl = ld1(scr, sb + o_g + L - 1)
        half = (L + 1) // 2
        n2 = nh * ncg
        for u in range(tid, n2 + half * ncg, nthr):
            if u < n2:
                g = u // nh
                state_rows2(sm, scr, stage_kp, off_kp, sb + o_kd, K, 2 * (u - g * nh), 4 * g,
                            gl, L)
            else:
                u2 = u - n2
                g = u2 // half
                out_rows_seq(o, bb, t0, hv, c0, 4 * g, sm, scr, stage_kp, off_kp + KC,
                             sb + o_p, u2 - g * half, L)
        cuda.syncthreads()
        sb += F

    store_state_slice(hT, hT_idx[n], hv, c0, sm, K, w, tid, nthr)


def gdn_split_state_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, stage_kp):
    """State pass of contract.md part B, ``chunked`` family (kernel 2 of ``chunked_split``):
    steps 6-8 of :mod:`.chunked`'s FP32 order for work item ``blockIdx.x``, every chunk of its
    sequence (:func:`staged_state_item`). Output and final state must equal the frozen
    ``gdn_chunked_kernel``'s bit for bit."""
    sm = cuda.shared.array(0, _F32)
    staged_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, cuda.blockIdx.x,
                      stage_kp, sm)
