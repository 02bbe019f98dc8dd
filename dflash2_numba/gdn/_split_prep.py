"""Kernel 1 of ``chunked_split`` (and the pre-pass CTAs of ``chunked_pipe``): steps 1-5 of
the frozen :mod:`.chunked` order for one (chunk slot, q/k head), into the slot's global
scratch. Which rounding produces each value, and why it is chunked's, is written in
:mod:`.chunked_split`'s docstring; this file only holds the device code.
"""
from __future__ import annotations

import math

import numpy as np

from .._compat import cuda
from ._common import C, EPS, F32, ONE, ZERO
from ._split_ops import (CP1, N_MS, N_TS, N_XS, SHARED_ALIGN, SW, SW4, TS, XS, _dev, fma4,
                         ld1, ld4, st4)

@_dev
def tri_decode(u):
    """``u -> (I, J)`` with ``J <= I`` for ``u = I (I + 1) / 2 + J`` (integers only)."""
    ii = 0
    while (ii + 1) * (ii + 2) // 2 <= u:
        ii += 1
    return ii, u - ii * (ii + 1) // 2


@_dev
def store_gs(Ms, i, j, gv, sv):
    """``S_ij`` at ``Ms[i, j]`` (j <= i) and ``G_ij`` at ``Ms[j, i]`` (j < i)."""
    if j <= i:
        Ms[i * CP1 + j] = sv
        if j < i:
            Ms[j * CP1 + i] = gv


@_dev
def store_gs_row(Ms, i, j0, L, grow, srow):
    """Row ``i`` of a G / S tile (columns ``j0 .. j0+3``); rows ``i >= L`` are dropped."""
    if i < L:
        store_gs(Ms, i, j0, grow[0], srow[0])
        store_gs(Ms, i, j0 + 1, grow[1], srow[1])
        store_gs(Ms, i, j0 + 2, grow[2], srow[2])
        store_gs(Ms, i, j0 + 3, grow[3], srow[3])


@_dev
def pick4(r, w0, w1, w2, w3):
    if r == 0:
        return w0
    if r == 1:
        return w1
    if r == 2:
        return w2
    return w3


# --- kernel 1: the state-independent pre-pass (steps 1-5 of chunked) ---------------------

@_dev
def prep_item(q, k, v, g, beta, chunks, scr, F, scale, use_l2, slot, hq,
              Ms, Ts, Xs, ga, bs, gm, dl, rk, rq):
    """Steps 1-5 of chunked for chunk slot ``slot`` and q/k head ``hq`` (every value head
    reading it), into the slot's scratch. A CTA-wide call (it has barriers)."""
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    H = q.shape[2]
    K = q.shape[3]
    HV = v.shape[2]
    V = v.shape[3]
    G = HV // H
    bb = chunks[slot, 0]
    t0 = chunks[slot, 1]
    L = chunks[slot, 2]
    KC = K * C
    o_kn = slot * F + hq * 2 * KC          # kn^T [K][C]
    o_qs = o_kn + KC                       # qs^T [K][C]
    phv = 2 * KC + C * V + C * C + C
    nt = (L + 3) // 4
    KB = min(K, C)                         # columns of k / q staged per block

    # ---- chunked step 1: ss = fma(x_m, x_m, ss), m ascending (the chain of row_recip), on
    # rows staged in shared memory KB columns at a time (coalesced reads); the partial sums
    # wait in rk / rq between blocks
    if use_l2 != 0:
        for mb in range(0, K, KB):
            for e in range(tid, L * KB, nthr):
                i = e // KB
                mm = e - i * KB
                Ms[i * CP1 + mm] = F32(k[bb, t0 + i, hq, mb + mm])
                Ts[i * CP1 + mm] = F32(q[bb, t0 + i, hq, mb + mm])
            cuda.syncthreads()
            for r in range(tid, 2 * L, nthr):
                ss = ZERO
                if r < L:
                    if mb > 0:
                        ss = rk[r]
                    for mm in range(KB):
                        x = Ms[r * CP1 + mm]
                        ss = cuda.fma(x, x, ss)
                    rk[r] = ss
                else:
                    if mb > 0:
                        ss = rq[r - L]
                    for mm in range(KB):
                        x = Ts[(r - L) * CP1 + mm]
                        ss = cuda.fma(x, x, ss)
                    rq[r - L] = ss
            cuda.syncthreads()
    for r in range(tid, 2 * L, nthr):        # r = 1 / sqrt(ss + eps) (add, sqrt, division)
        if r < L:
            rk[r] = ONE / F32(math.sqrt(rk[r] + EPS)) if use_l2 != 0 else ONE
        else:
            rq[r - L] = ONE / F32(math.sqrt(rq[r - L] + EPS)) if use_l2 != 0 else ONE
    cuda.syncthreads()

    # ---- kn = k * r_k and qs = (q * r_q) * scale, transposed into the slot through shared
    # memory (coalesced on both sides)
    for mb in range(0, K, KB):
        for e in range(tid, L * KB, nthr):
            i = e // KB
            mm = e - i * KB
            Ms[i * CP1 + mm] = F32(k[bb, t0 + i, hq, mb + mm]) * rk[i]
            Ts[i * CP1 + mm] = (F32(q[bb, t0 + i, hq, mb + mm]) * rq[i]) * scale
        cuda.syncthreads()
        for e in range(tid, L * KB, nthr):
            mm = e // L
            i = e - mm * L
            scr[o_kn + (mb + mm) * C + i] = Ms[i * CP1 + mm]
            scr[o_qs + (mb + mm) * C + i] = Ts[i * CP1 + mm]
        cuda.syncthreads()

    # ---- chunked step 3, head-independent part: G_ij = sum_m kn_im kn_jm (j < i) and
    # S_ij = sum_m qs_im kn_jm (j <= i), m ascending, 4 x 4 tiles on and below the diagonal
    # (rows >= L of a tile compute on whatever the slot holds and are never stored)
    for u in range(tid, nt * (nt + 1) // 2, nthr):
        ti, tj = tri_decode(u)
        i0 = 4 * ti
        j0 = 4 * tj
        g0 = (ZERO, ZERO, ZERO, ZERO)
        g1 = g0
        g2 = g0
        g3 = g0
        s0 = g0
        s1 = g0
        s2 = g0
        s3 = g0
        pi = o_kn + i0
        pj = o_kn + j0
        pq = o_qs + i0
        m = 0
        while m < K:
            kj = ld4(scr, pj)
            ki = ld4(scr, pi)
            qi = ld4(scr, pq)
            g0 = fma4(ki[0], kj, g0)
            g1 = fma4(ki[1], kj, g1)
            g2 = fma4(ki[2], kj, g2)
            g3 = fma4(ki[3], kj, g3)
            s0 = fma4(qi[0], kj, s0)
            s1 = fma4(qi[1], kj, s1)
            s2 = fma4(qi[2], kj, s2)
            s3 = fma4(qi[3], kj, s3)
            pi += C
            pj += C
            pq += C
            m += 1
        store_gs_row(Ms, i0, j0, L, g0, s0)
        store_gs_row(Ms, i0 + 1, j0, L, g1, s1)
        store_gs_row(Ms, i0 + 2, j0, L, g2, s2)
        store_gs_row(Ms, i0 + 3, j0, L, g3, s3)
    cuda.syncthreads()

    for rr in range(G):
        hv = hq * G + rr
        o_w = slot * F + H * 2 * KC + hv * phv     # W^T [K][C]
        o_kd = o_w + KC                             # Kd  [C][K]
        o_u = o_w + 2 * KC                          # U   [C][V]
        o_p = o_u + C * V                           # P^T [C][C]
        o_g = o_p + C * C                           # gamma [C]

        # ---- chunked step 1, value-head part: a_j = E(min(g, 0)), beta_j
        for j in range(tid, L, nthr):
            gt = F32(g[bb, t0 + j, hv])
            if gt > ZERO:
                gt = ZERO
            ga[j] = F32(math.exp(gt))
            bs[j] = F32(beta[bb, t0 + j, hv])
        cuda.syncthreads()

        # ---- chunked step 2: decay rows, backwards from the diagonal (D in Ts's lower
        # triangle; its last row also in dl)
        for i in range(tid, L, nthr):
            p = ONE
            Ts[i * TS + i] = ONE
            if i == L - 1:
                dl[i] = ONE
            for j in range(i - 1, -1, -1):
                p = p * ga[j + 1]
                Ts[i * TS + j] = p
                if i == L - 1:
                    dl[j] = p
            gm[i] = p * ga[0]
        cuda.syncthreads()

        # ---- chunked step 3: P = S * D (to the slot, transposed); A = (G * beta_i) * D in
        # place of D (lower triangle); gamma
        for e in range(tid, L * L, nthr):
            j = e // L
            i = e - j * L
            if j <= i:
                dij = Ts[i * TS + j]
                scr[o_p + j * C + i] = Ms[i * CP1 + j] * dij
                if j < i:
                    Ts[i * TS + j] = (Ms[j * CP1 + i] * bs[i]) * dij
        for j in range(tid, L, nthr):
            scr[o_g + j] = gm[j]
        # ---- Kd_jm = kn_jm * D_{L-1, j}, with kn_jm = k_jm * r_k recomputed (same bits)
        for e in range(tid, L * K, nthr):
            j = e // K
            m = e - j * K
            scr[o_kd + j * K + m] = (F32(k[bb, t0 + j, hq, m]) * rk[j]) * dl[j]
        cuda.syncthreads()

        # ---- chunked step 4: T = (I + A)^-1. One thread per column mm; its rows in
        # ascending order, four at a time (independent chains over the common j range, then
        # the triangular tail). T_im needs only A (lower triangle, row i) and its own
        # column's earlier entries T_jm, kept transposed in the upper triangle (row mm).
        for mm in range(tid, L - 1, nthr):
            rm = mm * TS
            i = mm + 1
            while i + 3 < L:
                r0 = i * TS
                r1 = r0 + TS
                r2 = r1 + TS
                r3 = r2 + TS
                a0 = -ld1(Ts, r0 + mm)
                a1 = -ld1(Ts, r1 + mm)
                a2 = -ld1(Ts, r2 + mm)
                a3 = -ld1(Ts, r3 + mm)
                j = mm + 1
                while j < i:
                    tj = ld1(Ts, rm + j)
                    a0 = cuda.fma(-ld1(Ts, r0 + j), tj, a0)
                    a1 = cuda.fma(-ld1(Ts, r1 + j), tj, a1)
                    a2 = cuda.fma(-ld1(Ts, r2 + j), tj, a2)
                    a3 = cuda.fma(-ld1(Ts, r3 + j), tj, a3)
                    j += 1
                Ts[rm + i] = a0
                a1 = cuda.fma(-ld1(Ts, r1 + i), a0, a1)
                Ts[rm + i + 1] = a1
                a2 = cuda.fma(-ld1(Ts, r2 + i), a0, a2)
                a2 = cuda.fma(-ld1(Ts, r2 + i + 1), a1, a2)
                Ts[rm + i + 2] = a2
                a3 = cuda.fma(-ld1(Ts, r3 + i), a0, a3)
                a3 = cuda.fma(-ld1(Ts, r3 + i + 1), a1, a3)
                a3 = cuda.fma(-ld1(Ts, r3 + i + 2), a2, a3)
                Ts[rm + i + 3] = a3
                i += 4
            while i < L:
                ri = i * TS
                t = -ld1(Ts, ri + mm)
                j = mm + 1
                while j < i:
                    t = cuda.fma(-ld1(Ts, ri + j), ld1(Ts, rm + j), t)
                    j += 1
                Ts[rm + i] = t
                i += 1
        cuda.syncthreads()

        # ---- chunked step 5: W = X + T X (X = kn * (beta * gamma)) and U = Y + T Y
        # (Y = v * beta), j ascending, in slabs of SW columns; 4 x 4 tiles. T_{i0+r, j} for
        # r = 0..3 is one 16-byte row piece of T^T.
        nsk = K // SW
        for sl in range(nsk + V // SW):
            for e in range(tid, L * SW, nthr):
                j = e // SW
                cc = e - j * SW
                if sl < nsk:
                    Xs[j * XS + cc] = ((F32(k[bb, t0 + j, hq, sl * SW + cc]) * rk[j])
                                       * (bs[j] * gm[j]))
                else:
                    Xs[j * XS + cc] = F32(v[bb, t0 + j, hv, (sl - nsk) * SW + cc]) * bs[j]
            cuda.syncthreads()
            for u in range(tid, nt * SW4, nthr):
                ti = u // SW4
                c4 = 4 * (u - ti * SW4)
                i0 = 4 * ti
                px = i0 * XS + c4
                w0 = ld4(Xs, px)
                w1 = ld4(Xs, px + XS)
                w2 = ld4(Xs, px + 2 * XS)
                w3 = ld4(Xs, px + 3 * XS)
                px = c4
                pt = i0
                j = 0
                while j < i0:
                    x = ld4(Xs, px)
                    tc = ld4(Ts, pt)
                    w0 = fma4(tc[0], x, w0)
                    w1 = fma4(tc[1], x, w1)
                    w2 = fma4(tc[2], x, w2)
                    w3 = fma4(tc[3], x, w3)
                    px += XS
                    pt += TS
                    j += 1
                # the triangular tail: row i0 + r takes j < i0 + r
                x = ld4(Xs, px)
                tc = ld4(Ts, pt)
                w1 = fma4(tc[1], x, w1)
                w2 = fma4(tc[2], x, w2)
                w3 = fma4(tc[3], x, w3)
                x = ld4(Xs, px + XS)
                tc = ld4(Ts, pt + TS)
                w2 = fma4(tc[2], x, w2)
                w3 = fma4(tc[3], x, w3)
                x = ld4(Xs, px + 2 * XS)
                tc = ld4(Ts, pt + 2 * TS)
                w3 = fma4(tc[3], x, w3)
                if sl < nsk:
                    pw = o_w + (sl * SW + c4) * C + i0
                    if i0 + 3 < L:
                        st4(scr, pw, (w0[0], w1[0], w2[0], w3[0]))
                        st4(scr, pw + C, (w0[1], w1[1], w2[1], w3[1]))
                        st4(scr, pw + 2 * C, (w0[2], w1[2], w2[2], w3[2]))
                        st4(scr, pw + 3 * C, (w0[3], w1[3], w2[3], w3[3]))
                    else:
                        for r in range(L - i0):
                            wr = pick4(r, w0, w1, w2, w3)
                            scr[pw + r] = wr[0]
                            scr[pw + C + r] = wr[1]
                            scr[pw + 2 * C + r] = wr[2]
                            scr[pw + 3 * C + r] = wr[3]
                else:
                    pu = o_u + i0 * V + (sl - nsk) * SW + c4
                    for r in range(min(4, L - i0)):
                        st4(scr, pu + r * V, pick4(r, w0, w1, w2, w3))
            cuda.syncthreads()


def gdn_split_prep_kernel(q, k, v, g, beta, chunks, scr, F, scale, use_l2):
    Ms = cuda.shared.array(N_MS, np.float32, SHARED_ALIGN)   # staging; then S | G^T
    Ts = cuda.shared.array(N_TS, np.float32, SHARED_ALIGN)   # staging; D -> A (lower), T^T (upper)
    Xs = cuda.shared.array(N_XS, np.float32, SHARED_ALIGN)   # slab of X (W) or Y (U)
    ga = cuda.shared.array(C, np.float32)                    # a_j = E(g_j)
    bs = cuda.shared.array(C, np.float32)                    # beta_j
    gm = cuda.shared.array(C, np.float32)                    # gamma_j
    dl = cuda.shared.array(C, np.float32)                    # D_{L-1, j}
    rk = cuda.shared.array(C, np.float32)                    # sum k^2, then 1 / |k_j|
    rq = cuda.shared.array(C, np.float32)                    # sum q^2, then 1 / |q_j|
    H = q.shape[2]
    slot = cuda.blockIdx.x // H
    prep_item(q, k, v, g, beta, chunks, scr, F, scale, use_l2, slot, cuda.blockIdx.x - slot * H,
              Ms, Ts, Xs, ga, bs, gm, dl, rk, rq)

