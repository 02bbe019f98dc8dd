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
                         ld1, ld4)
from ._split_prep_io import i32, ld4x, ldx, st1, st4x, stx, view


@_dev
def tri_decode(u):
    """``u -> (I, J)`` with ``J <= I`` for ``u = I (I + 1) / 2 + J`` (integers only)."""
    ii = 0
    while (ii + 1) * (ii + 2) // 2 <= u:
        ii += 1
    return ii, u - ii * (ii + 1) // 2


@_dev
def store_gs_row(Ms, i0, r, j0, L, grow, srow):
    """Row ``i0 + r`` of the G / S tile at (i0, j0): ``S_ij`` at ``Ms[i, j]`` (j <= i) and
    ``G_ij`` at ``Ms[j, i]`` (j < i); rows ``>= L`` are dropped. An off-diagonal tile
    (``j0 < i0``) stores all four columns; a diagonal one (``j0 == i0``) columns ``c <= r``
    (S) and ``c < r`` (G)."""
    i = i0 + r
    if i < L:
        si = i * CP1 + j0
        gi = j0 * CP1 + i
        if j0 < i0:
            st1(Ms, si, srow[0])
            st1(Ms, si + 1, srow[1])
            st1(Ms, si + 2, srow[2])
            st1(Ms, si + 3, srow[3])
            st1(Ms, gi, grow[0])
            st1(Ms, gi + CP1, grow[1])
            st1(Ms, gi + 2 * CP1, grow[2])
            st1(Ms, gi + 3 * CP1, grow[3])
        else:
            for c in range(4):
                if c <= r:
                    st1(Ms, si + c, srow[c])
                if c < r:
                    st1(Ms, gi + c * CP1, grow[c])


@_dev
def store_col4(wv, r, w):
    """Row ``r`` of a W tile into W^T: ``w[c]`` to ``r + c * C`` (c = 0..3)."""
    stx(wv, r, w[0])
    stx(wv, r + C, w[1])
    stx(wv, r + 2 * C, w[2])
    stx(wv, r + 3 * C, w[3])


# --- kernel 1: the state-independent pre-pass (steps 1-5 of chunked) ---------------------
#
# Only where values live and which thread computes them differ from chunked; every value is
# the same operation on the same operands (see chunked_split). For the instruction count:
# thread loops are ``while`` loops (numba's ``range`` with a run-time step computes its trip
# count with a 64-bit division); shared-memory accesses go through ld1 / ld4 / st1 (no
# negative-index wraparound); global ones through the views of _split_prep_io (a per-thread
# 64-bit base, e.g. this thread's column of k, plus a 32-bit offset: one wide multiply-add
# per access). The element-wise loops over (row, column) are 2-D: a thread keeps one column
# and walks rows with a fixed step, fully unrolled for a full chunk; kn = k * r_k goes to
# kn^T / qs^T straight from global (one thread per column, 16-byte stores), and Kd is
# written while staging the k slabs of X (the same product kn, computed once there).

LOG_SW = 5                      # SW = 32 columns per staged block / slab
LOG_C = 6                       # C = 64 rows per chunk
RG = 4                          # row groups of the 32-column loops (4 x 32 "virtual threads")
NV = RG * SW
NR = C // RG                    # rows per virtual thread in a full chunk
assert SW == 1 << LOG_SW and C == 1 << LOG_C and SW4 == 8


@_dev
def stage_qk(kv, qv, rsk, mb, L, Xs, Ts, tid, nthr):
    """``F32(k)`` / ``F32(q)`` of columns ``mb .. mb + SW - 1`` of the chunk's rows into
    ``Xs`` / ``Ts`` (row stride XS). Virtual thread vt: column ``vt % SW``, rows
    ``vt // SW + RG n`` (a warp reads one coalesced row piece)."""
    vt = tid
    while vt < NV:
        c = i32(vt & (SW - 1))
        j0 = i32(vt >> LOG_SW)
        kc = view(kv, mb + c)                  # this thread's column
        qc = view(qv, mb + c)
        px = j0 * XS + c
        if L == C:
            for n in range(NR):
                o = (j0 + RG * n) * rsk
                st1(Xs, px + RG * XS * n, ldx(kc, o))
                st1(Ts, px + RG * XS * n, ldx(qc, o))
        else:
            j = j0
            while j < L:
                o = j * rsk
                st1(Xs, j * XS + c, ldx(kc, o))
                st1(Ts, j * XS + c, ldx(qc, o))
                j += RG
        vt += nthr


@_dev
def row_ss(st, acc, r, mb):
    """Row ``r`` of a staged block: ``ss = fma(x_m, x_m, ss)`` over its SW columns, m
    ascending, from ``acc[r]`` (0 for the first block); the sum back to ``acc[r]``."""
    ss = ZERO
    if mb > 0:
        ss = ld1(acc, r)
    p = r * XS
    for mm in range(SW // 4):
        x = ld4(st, p + 4 * mm)
        ss = cuda.fma(x[0], x[0], ss)
        ss = cuda.fma(x[1], x[1], ss)
        ss = cuda.fma(x[2], x[2], ss)
        ss = cuda.fma(x[3], x[3], ss)
    st1(acc, r, ss)


@_dev
def knqs4(kc, qc, o, rsk, rk, rq, i, scale, kd, qd):
    """Rows ``i .. i+3`` of column m (``kc`` / ``qc``: the column, ``o = i * rsk``):
    ``kn = k * r_k`` and ``qs = (q * r_q) * scale``, one 16-byte store each into the
    column's kn^T / qs^T row (``kd`` / ``qd``)."""
    st4x(kd, i, (ldx(kc, o) * ld1(rk, i),
                 ldx(kc, o + rsk) * ld1(rk, i + 1),
                 ldx(kc, o + 2 * rsk) * ld1(rk, i + 2),
                 ldx(kc, o + 3 * rsk) * ld1(rk, i + 3)))
    st4x(qd, i, ((ldx(qc, o) * ld1(rq, i)) * scale,
                 (ldx(qc, o + rsk) * ld1(rq, i + 1)) * scale,
                 (ldx(qc, o + 2 * rsk) * ld1(rq, i + 2)) * scale,
                 (ldx(qc, o + 3 * rsk) * ld1(rq, i + 3)) * scale))


@_dev
def gs_tile(sv, o_kn, o_qs, i0, j0, K, Ms, L):
    """A 4 x 4 tile (``j0 <= i0``): G_ij = sum_m kn_im kn_jm and S_ij = sum_m qs_im kn_jm,
    m ascending (kn^T / qs^T at ``o_kn`` / ``o_qs`` of the slot ``sv``); the entries on and
    below the diagonal are stored."""
    g0 = (ZERO, ZERO, ZERO, ZERO)
    g1 = g0
    g2 = g0
    g3 = g0
    s0 = g0
    s1 = g0
    s2 = g0
    s3 = g0
    ki_ = view(sv, o_kn + i0)
    kj_ = view(sv, o_kn + j0)
    qi_ = view(sv, o_qs + i0)
    o = 0
    while o < K * C:
        kj = ld4x(kj_, o)
        ki = ld4x(ki_, o)
        qi = ld4x(qi_, o)
        g0 = fma4(ki[0], kj, g0)
        g1 = fma4(ki[1], kj, g1)
        g2 = fma4(ki[2], kj, g2)
        g3 = fma4(ki[3], kj, g3)
        s0 = fma4(qi[0], kj, s0)
        s1 = fma4(qi[1], kj, s1)
        s2 = fma4(qi[2], kj, s2)
        s3 = fma4(qi[3], kj, s3)
        o += C
    store_gs_row(Ms, i0, 0, j0, L, g0, s0)
    store_gs_row(Ms, i0, 1, j0, L, g1, s1)
    store_gs_row(Ms, i0, 2, j0, L, g2, s2)
    store_gs_row(Ms, i0, 3, j0, L, g3, s3)


@_dev
def gs_row(sv, o_kn, o_qs, i0, r, j0, K, Ms, L):
    """Row ``r`` of the tile at (i0, j0) alone: the same four G and four S chains as in
    :func:`gs_tile` (a pass of leftover tiles costs a quarter of a tile pass)."""
    g = (ZERO, ZERO, ZERO, ZERO)
    s = g
    kj_ = view(sv, o_kn + j0)
    ki_ = view(sv, o_kn + i0 + r)
    qi_ = view(sv, o_qs + i0 + r)
    o = 0
    while o < K * C:
        kj = ld4x(kj_, o)
        g = fma4(ldx(ki_, o), kj, g)
        s = fma4(ldx(qi_, o), kj, s)
        o += C
    store_gs_row(Ms, i0, r, j0, L, g, s)


@_dev
def stage_slab(kv, vv, rsk, rsv, sl, nsk, K, L, sv, o_kd, Xs, rk, dl, ga, bs, tid, nthr):
    """Slab ``sl`` of X (k slabs: ``X_jc = kn_jc * ga_j``, ``ga_j = beta_j * gamma_j``; also
    ``Kd_jc = kn_jc * D_{L-1, j}`` to the slot) or of Y (``Y_jc = v_jc * beta_j``) into
    ``Xs``; ``kn_jc = k_jc * r_j`` recomputed (the same bits as the stored kn)."""
    vt = tid
    while vt < NV:
        c = i32(vt & (SW - 1))
        j0 = i32(vt >> LOG_SW)
        px = j0 * XS + c
        if sl < nsk:
            col = sl * SW + c
            kc = view(kv, col)                 # this thread's column of k and of Kd
            dc = view(sv, o_kd + col)
            if L == C:
                for n in range(NR):
                    j = j0 + RG * n
                    kn = ldx(kc, j * rsk) * ld1(rk, j)
                    stx(dc, j * K, kn * ld1(dl, j))
                    st1(Xs, px + RG * XS * n, kn * ld1(ga, j))
            else:
                j = j0
                while j < L:
                    kn = ldx(kc, j * rsk) * ld1(rk, j)
                    stx(dc, j * K, kn * ld1(dl, j))
                    st1(Xs, j * XS + c, kn * ld1(ga, j))
                    j += RG
        else:
            vc = view(vv, (sl - nsk) * SW + c)
            if L == C:
                for n in range(NR):
                    j = j0 + RG * n
                    st1(Xs, px + RG * XS * n, ldx(vc, j * rsv) * ld1(bs, j))
            else:
                j = j0
                while j < L:
                    st1(Xs, j * XS + c, ldx(vc, j * rsv) * ld1(bs, j))
                    j += RG
        vt += nthr


@_dev
def value_head_tri(gv, bv, HV, L, sv, o_p, o_g, Ms, Ts, ga, bs, gm, dl, tid, nthr):
    """Steps 1 (value-head part) to 4 of chunked for one value head of a chunk: a_j / beta_j
    into ``ga`` / ``bs`` (``gv`` / ``bv``: the head's g / beta from the chunk's first token,
    token stride ``HV``), the decay rows D, ``P^T`` and ``gamma`` to the slot (``sv`` at
    ``o_p`` / ``o_g``), A in place of D, ``ga_i = beta_i * gamma_i``, and ``T = (I + A)^-1``
    in ``Ts`` (A's lower triangle, T^T in the upper one), from ``S | G^T`` in ``Ms``. A
    CTA-wide call (it has barriers; the last one after the solve): :func:`value_head_decay`
    then :func:`tri_solve_cols4`."""
    value_head_decay(gv, bv, HV, L, sv, o_p, o_g, Ms, Ts, ga, bs, gm, dl, tid, nthr)
    tri_solve_cols4(Ts, L, tid, nthr)
    cuda.syncthreads()


@_dev
def value_head_decay(gv, bv, HV, L, sv, o_p, o_g, Ms, Ts, ga, bs, gm, dl, tid, nthr):
    """Steps 1 (value-head part) to 3 of :func:`value_head_tri`: everything but the solve,
    ending with a barrier after which ``Ts`` holds A (lower triangle) for step 4."""
    # ---- chunked step 1, value-head part: a_j = E(min(g, 0)), beta_j
    j = tid
    while j < L:
        gt = ldx(gv, j * HV)
        if gt > ZERO:
            gt = ZERO
        st1(ga, j, F32(math.exp(gt)))
        st1(bs, j, ldx(bv, j * HV))
        j += nthr
    cuda.syncthreads()

    # ---- chunked step 2: decay rows, backwards from the diagonal (D in Ts's lower
    # triangle); its last row again, the same chain, into dl by thread C % nthr (idle
    # in the row loop when there are more than C threads)
    i = tid
    while i < L:
        ri = i * TS
        st1(Ts, ri + i, ONE)
        p = ONE
        j = i - 1
        while j >= 0:
            p = p * ld1(ga, j + 1)
            st1(Ts, ri + j, p)
            j -= 1
        st1(gm, i, p * ld1(ga, 0))
        i += nthr
    if tid == C % nthr:
        p = ONE
        st1(dl, L - 1, ONE)
        j = L - 2
        while j >= 0:
            p = p * ld1(ga, j + 1)
            st1(dl, j, p)
            j -= 1
    cuda.syncthreads()

    # ---- chunked step 3: P = S * D (to the slot, transposed); A = (G * beta_i) * D in
    # place of D (lower triangle); gamma. One thread per (row i, parity of j); then
    # ga_i = beta_i * gamma_i, the factor of X (ga is not read again as a_j).
    u = tid
    while u < 2 * C:
        i = u & (C - 1)
        if i < L:
            ri = i * TS
            mi = i * CP1
            bi = ld1(bs, i)
            pc = view(sv, o_p + i)                  # column i of P^T
            j = u >> LOG_C
            while j < i:
                dij = ld1(Ts, ri + j)
                stx(pc, j * C, ld1(Ms, mi + j) * dij)
                st1(Ts, ri + j, (ld1(Ms, j * CP1 + i) * bi) * dij)
                j += 2
            if j == i:
                stx(pc, i * C, ld1(Ms, mi + i) * ld1(Ts, ri + i))
            if u < C:
                gmi = ld1(gm, i)
                stx(sv, o_g + i, gmi)
                st1(ga, i, bi * gmi)
        u += nthr
    cuda.syncthreads()


@_dev
def tri_solve_cols4(Ts, L, tid, nthr):
    """Chunked step 4, ``T = (I + A)^-1``, with A in ``Ts``'s lower triangle (rows i, stride
    TS) and T^T written to its upper triangle (row mm holds column mm of T). T_im's chain:
    ``t = -A_im``, then ``t = fma(-A_ij, T_jm, t)`` for j = mm + 1 .. i - 1 ascending. One
    thread per column mm; its rows in ascending order, four at a time (independent chains
    over the common j range, then the triangular tail). T_im needs only A (lower triangle,
    row i) and its own column's earlier entries T_jm. No barrier (the caller's follows)."""
    mm = tid
    while mm < L - 1:
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
            tail4(Ts, rm, i, a0, a1, a2, a3)
            i += 4
        while i < L:
            solve_row(Ts, rm, mm, i)
            i += 1
        mm += nthr


@_dev
def solve_row(Ts, rm, mm, i):
    """T_im alone (step 4): its whole chain, then the store to ``Ts[rm + i]``."""
    ri = i * TS
    t = -ld1(Ts, ri + mm)
    j = mm + 1
    while j < i:
        t = cuda.fma(-ld1(Ts, ri + j), ld1(Ts, rm + j), t)
        j += 1
    st1(Ts, rm + i, t)


@_dev
def tail4(Ts, rm, i, a0, a1, a2, a3):
    """Rows ``i .. i + 3`` of column ``rm / TS`` (step 4) after their common steps (j < i):
    each row's remaining steps j = i .. i + r - 1 ascending, on the group's own T entries as
    they become final, and the four stores; returns the four final entries."""
    r1 = (i + 1) * TS
    r2 = r1 + TS
    r3 = r2 + TS
    st1(Ts, rm + i, a0)
    a1 = cuda.fma(-ld1(Ts, r1 + i), a0, a1)
    st1(Ts, rm + i + 1, a1)
    a2 = cuda.fma(-ld1(Ts, r2 + i), a0, a2)
    a2 = cuda.fma(-ld1(Ts, r2 + i + 1), a1, a2)
    st1(Ts, rm + i + 2, a2)
    a3 = cuda.fma(-ld1(Ts, r3 + i), a0, a3)
    a3 = cuda.fma(-ld1(Ts, r3 + i + 1), a1, a3)
    a3 = cuda.fma(-ld1(Ts, r3 + i + 2), a2, a3)
    st1(Ts, rm + i + 3, a3)
    return a0, a1, a2, a3


@_dev
def wu_step(Xs, Ts, px, pt, w0, w1, w2, w3):
    """One j step of a W / U tile: row piece j of the slab (``Xs[px ..]``) times T^T's
    piece ``T_{i0 .. i0+3, j}`` (``Ts[pt ..]``), one fma per entry."""
    x = ld4(Xs, px)
    tc = ld4(Ts, pt)
    return (fma4(tc[0], x, w0), fma4(tc[1], x, w1), fma4(tc[2], x, w2), fma4(tc[3], x, w3))


@_dev
def wu_tile(Xs, xs, Ts, i0, c4):
    """The 4 x 4 W / U tile at rows ``i0 .. i0+3``, slab columns ``c4 .. c4+3`` (slab ``Xs``
    with row stride ``xs``; T^T in ``Ts``): entry (i, c) is ``X_ic`` then ``fma(T_ij, X_jc,
    .)`` for j = 0 .. i-1 ascending (chunked's chain). Returns the four rows."""
    px = i0 * xs + c4
    w0 = ld4(Xs, px)
    w1 = ld4(Xs, px + xs)
    w2 = ld4(Xs, px + 2 * xs)
    w3 = ld4(Xs, px + 3 * xs)
    px = c4
    pt = i0
    j = 0
    while j < i0:                    # i0 is a multiple of 4: 4 steps a trip
        w0, w1, w2, w3 = wu_step(Xs, Ts, px, pt, w0, w1, w2, w3)
        w0, w1, w2, w3 = wu_step(Xs, Ts, px + xs, pt + TS, w0, w1, w2, w3)
        w0, w1, w2, w3 = wu_step(Xs, Ts, px + 2 * xs, pt + 2 * TS, w0, w1, w2, w3)
        w0, w1, w2, w3 = wu_step(Xs, Ts, px + 3 * xs, pt + 3 * TS, w0, w1, w2, w3)
        px += 4 * xs
        pt += 4 * TS
        j += 4
    # the triangular tail: row i0 + r takes j < i0 + r
    x = ld4(Xs, px)
    tc = ld4(Ts, pt)
    w1 = fma4(tc[1], x, w1)
    w2 = fma4(tc[2], x, w2)
    w3 = fma4(tc[3], x, w3)
    x = ld4(Xs, px + xs)
    tc = ld4(Ts, pt + TS)
    w2 = fma4(tc[2], x, w2)
    w3 = fma4(tc[3], x, w3)
    x = ld4(Xs, px + 2 * xs)
    tc = ld4(Ts, pt + 2 * TS)
    w3 = fma4(tc[3], x, w3)
    return w0, w1, w2, w3


@_dev
def store_wu_tile(sv, is_w, o, V, L, i0, w0, w1, w2, w3):
    """A W / U tile (rows ``i0 .. i0+3``; rows ``>= L`` are dropped) into the slot ``sv`` at
    ``o``: ``is_w``: W^T (``o`` = its column's entry ``i0``, 16-byte stores of the tile's
    columns), else U (``o`` = entry ``(i0, c)``, row stride ``V``)."""
    if is_w:
        wv = view(sv, o)
        if i0 + 3 < L:
            st4x(wv, 0, (w0[0], w1[0], w2[0], w3[0]))
            st4x(wv, C, (w0[1], w1[1], w2[1], w3[1]))
            st4x(wv, 2 * C, (w0[2], w1[2], w2[2], w3[2]))
            st4x(wv, 3 * C, (w0[3], w1[3], w2[3], w3[3]))
        else:
            store_col4(wv, 0, w0)
            if i0 + 1 < L:
                store_col4(wv, 1, w1)
            if i0 + 2 < L:
                store_col4(wv, 2, w2)
    else:
        uv = view(sv, o)
        st4x(uv, 0, w0)
        if i0 + 1 < L:
            st4x(uv, V, w1)
        if i0 + 2 < L:
            st4x(uv, 2 * V, w2)
        if i0 + 3 < L:
            st4x(uv, 3 * V, w3)


@_dev
def prep_item(q, k, v, g, beta, chunks, scr, F, scale, use_l2, slot, hq,
              Ms, Ts, Xs, ga, bs, gm, dl, rk, rq):
    """Steps 1-5 of chunked for chunk slot ``slot`` and q/k head ``hq`` (every value head
    reading it), into the slot's scratch. A CTA-wide call (it has barriers)."""
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    T = q.shape[1]
    H = q.shape[2]
    K = q.shape[3]
    HV = v.shape[2]
    V = v.shape[3]
    G = HV // H
    bb = chunks[slot, 0]
    t0 = chunks[slot, 1]
    L = chunks[slot, 2]
    KC = K * C
    sb = slot * F                          # the slot's first float (64-bit); the offsets
    o_kn = hq * 2 * KC                     # below are inside the slot. kn^T [K][C]
    o_qs = o_kn + KC                       # qs^T [K][C]
    phv = 2 * KC + C * V + C * C + C
    nt = (L + 3) // 4
    qkb = ((bb * T + t0) * H + hq) * K     # q / k [bb, t0, hq, 0] (flat)
    qv = view(q, qkb)                      # 32-bit offsets from here: row j, column m
    kv = view(k, qkb)                      # at j * rsk + m
    sv = view(scr, sb)
    rsk = i32(H * K)                       # token stride of q / k (elements)
    rsv = i32(HV * V)                      # token stride of v
    K = i32(K)

    # ---- chunked step 1: ss = fma(x_m, x_m, ss), m ascending (the chain of row_recip), on
    # rows staged in shared memory SW columns at a time (k in Xs, q in Ts; coalesced
    # reads); the partial sums wait in rk / rq between blocks
    if use_l2 != 0:
        for mb in range(0, K, SW):
            stage_qk(kv, qv, rsk, mb, L, Xs, Ts, tid, nthr)
            cuda.syncthreads()
            r = tid
            while r < 2 * L:
                if r < L:
                    row_ss(Xs, rk, r, mb)
                else:
                    row_ss(Ts, rq, r - L, mb)
                r += nthr
            cuda.syncthreads()
    r = tid
    while r < 2 * L:                         # r = 1 / sqrt(ss + eps) (add, sqrt, division)
        if r < L:
            rk[r] = ONE / F32(math.sqrt(rk[r] + EPS)) if use_l2 != 0 else ONE
        else:
            rq[r - L] = ONE / F32(math.sqrt(rq[r - L] + EPS)) if use_l2 != 0 else ONE
        r += nthr
    cuda.syncthreads()

    # ---- kn = k * r_k and qs = (q * r_q) * scale, straight into the slot's kn^T / qs^T:
    # one thread per column m (coalesced reads), four rows per 16-byte store
    m = tid
    while m < K:
        kc = view(kv, m)                       # column m of k / q, row m of kn^T / qs^T
        qc = view(qv, m)
        kd = view(sv, o_kn + m * C)
        qd = view(sv, o_qs + m * C)
        i = 0
        while i + 3 < L:
            knqs4(kc, qc, i * rsk, rsk, rk, rq, i, scale, kd, qd)
            i += 4
        while i < L:
            o = i * rsk
            stx(kd, i, ldx(kc, o) * ld1(rk, i))
            stx(qd, i, (ldx(qc, o) * ld1(rq, i)) * scale)
            i += 1
        m += nthr
    cuda.syncthreads()

    # ---- chunked step 3, head-independent part: G_ij = sum_m kn_im kn_jm (j < i) and
    # S_ij = sum_m qs_im kn_jm (j <= i), m ascending, 4 x 4 tiles on and below the diagonal
    # (rows >= L of a tile compute on whatever the slot holds and are never stored)
    ntile = nt * (nt + 1) // 2
    nfull = ntile - ntile % nthr           # whole passes of tiles, then the rest by rows
    u = tid
    while u < nfull:
        ti, tj = tri_decode(u)
        gs_tile(sv, o_kn, o_qs, 4 * ti, 4 * tj, K, Ms, L)
        u += nthr
    u = tid
    while u < 4 * (ntile - nfull):
        ti, tj = tri_decode(nfull + (u >> 2))
        gs_row(sv, o_kn, o_qs, 4 * ti, u & 3, 4 * tj, K, Ms, L)
        u += nthr
    cuda.syncthreads()

    nsk = K // SW
    for rr in range(G):
        hv = hq * G + rr
        o_w = H * 2 * KC + hv * phv                 # W^T [K][C]
        o_kd = o_w + KC                             # Kd  [C][K]
        o_u = o_w + 2 * KC                          # U   [C][V]
        o_p = o_u + C * V                           # P^T [C][C]
        o_g = o_p + C * C                           # gamma [C]
        gb = (bb * T + t0) * HV + hv                # g / beta [bb, t0, hv] (flat)
        gv = view(g, gb)
        bv = view(beta, gb)
        vv = view(v, gb * V)                        # v [bb, t0, hv, 0]
        o_w = i32(o_w)                              # (in-slot offsets: 32-bit arithmetic)
        o_kd = i32(o_kd)
        o_u = i32(o_u)
        o_p = i32(o_p)
        o_g = i32(o_g)

        value_head_tri(gv, bv, HV, L, sv, o_p, o_g, Ms, Ts, ga, bs, gm, dl, tid, nthr)

        # ---- chunked step 5: W = X + T X (X = kn * (beta * gamma)) and U = Y + T Y
        # (Y = v * beta), j ascending, in slabs of SW columns; 4 x 4 tiles. T_{i0+r, j} for
        # r = 0..3 is one 16-byte row piece of T^T. Staging a k slab also writes its Kd.
        for sl in range(nsk + V // SW):
            stage_slab(kv, vv, rsk, rsv, sl, nsk, K, L, sv, o_kd, Xs, rk, dl, ga, bs, tid,
                       nthr)
            cuda.syncthreads()
            u = tid
            while u < nt * SW4:
                ti = u >> 3
                c4 = 4 * (u & 7)
                i0 = 4 * ti
                w0, w1, w2, w3 = wu_tile(Xs, XS, Ts, i0, c4)
                if sl < nsk:
                    store_wu_tile(sv, True, o_w + (sl * SW + c4) * C + i0, V, L, i0,
                                  w0, w1, w2, w3)
                else:
                    store_wu_tile(sv, False, o_u + i0 * V + (sl - nsk) * SW + c4, V, L, i0,
                                  w0, w1, w2, w3)
                u += nthr
            cuda.syncthreads()


def gdn_split_prep_kernel(q, k, v, g, beta, chunks, scr, F, scale, use_l2):
    """Pre-pass of contract.md part B, ``chunked`` family: steps 1-5 of :mod:`.chunked`'s
    FP32 order for chunk slot ``blockIdx.x // H`` and q/k head ``blockIdx.x % H`` (every
    value head reading it), into the slot's scratch. Each value is the one the frozen
    ``gdn_chunked_kernel`` forms, bit for bit (:mod:`.chunked_split`'s docstring)."""
    Ms = cuda.shared.array(N_MS, np.float32, SHARED_ALIGN)   # S | G^T
    Ts = cuda.shared.array(N_TS, np.float32, SHARED_ALIGN)   # staged q rows; D -> A (lower), T^T (upper)
    Xs = cuda.shared.array(N_XS, np.float32, SHARED_ALIGN)   # staged k rows; slab of X (W) or Y (U)
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

