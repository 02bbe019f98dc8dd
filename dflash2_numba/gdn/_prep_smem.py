"""Kernel ``gdn_smem_prep``: steps 1-5 of the frozen :mod:`.chunked` order for one (chunk
slot, q/k head) into the slot's global scratch, like ``chunked_split``'s pre-pass
(:mod:`._split_prep`), with the chunk's q and k held in shared memory for the whole CTA.

Every value is produced by the same operation on the same operands as in
:mod:`._split_prep` (whose rounding argument :mod:`.chunked_split` writes down), hence as in
chunked. What moves is only where values live and which thread computes them:

* q and k of the chunk are read from global memory once (L1 prefetches first, then
  coalesced loads, four in flight a thread) and widened into shared memory *transposed*
  (``kt[m, j]`` / ``qt[m, j]``, row stride TS = C + 4): ``_split_prep`` reads them three
  times from global memory (norms, kn / qs, every k slab of every value head) and G / S
  from a global kn^T / qs^T.
* Row norms: ``ss = fma(x_m, x_m, ss)``, m ascending from 0, then ``1 / sqrt(ss + eps)``
  (one thread per row, all K columns in one chain: the same chain _split_prep splits into
  blocks of 32 through an exact shared-memory round trip).
* ``kn = k * r_k`` and ``qs = (q * r_q) * scale`` in place; qs^T is copied to the slot (the
  state pass reads it); kn^T is not (only this kernel reads it).
* G / S tiles (4 x 4, m ascending) from shared memory, one 16-byte load of each operand
  row piece a step, as _split_prep's from global memory.
* Step 5 in slabs of 64 columns of ``[X | Y]`` (X = kn * (beta * gamma) from kt, its Kd on
  the way; Y = v * beta from global memory), 4 x 4 W / U tiles (:func:`._split_prep.wu_tile`:
  the same chain, j ascending), stored by :func:`._split_prep.store_wu_tile`.
* Steps 1-3 of each value head are :func:`._split_prep.value_head_decay` itself; before them
  the head's v rows are prefetched into L1 (no value effect), for its Y slabs. Step 4 (the
  forward substitution) is one of :mod:`._tri_solve`'s forms, :data:`SOLVE` (``cols8``:
  the same chains as ``_split_prep``'s ``cols4``, eight rows a group, aligned to the
  bottom of each column); :func:`make_smem_prep_kernel` builds the kernel with another.

Shared memory (one dynamic array, floats; :func:`smem_floats`): kt ``[K][TS]``; region B
``[max(K, 2C)][TS]`` holding qt until G / S are done, then D -> A / T^T (``[C][TS]``) and the
slab (``[C][XWS]``); S | G^T ``[C][C+1]``; six ``[C]`` vectors. At K = 128: 87,808 bytes
(sm_70 allows 96 KB a block; two CTAs share an H200 SM).
"""
from __future__ import annotations

import math

from numba import types

from .._compat import SIMULATOR, cuda
from ._common import C, EPS, F32, ONE, ZERO
from ._split_ops import N_MS, TS, _dev, fma4, ld1, ld4
from ._split_prep import (store_gs_row, store_wu_tile, tri_decode, tri_solve_cols4,
                          value_head_decay, wu_tile)
from ._split_prep_io import i32, ldx, pfx1, st1, st4x, stx, view
from ._tri_solve import tri_solve_cols8

if SIMULATOR:
    # (device functions of other modules: the simulator binds a kernel's barrier and
    # intrinsics per module, so they run as simulated device functions; see chunked_pipe)
    value_head_decay = cuda.jit(device=True)(value_head_decay)
    tri_solve_cols4 = cuda.jit(device=True)(tri_solve_cols4)
    tri_solve_cols8 = cuda.jit(device=True)(tri_solve_cols8)

#: Forms of step 4 (the forward substitution) the pre-pass can be built with: the same
#: chains, so the same bits (:mod:`._tri_solve`); :data:`SOLVE` is the one it is built with.
SOLVES = {"cols4": tri_solve_cols4, "cols8": tri_solve_cols8}
SOLVE = "cols8"     # (H200, T = 65536: 1.867 ms against cols4's 1.891; bench/RESULTS.md)

XW = 64                 # columns of [X | Y] per slab
XWS = XW + 4            # slab row stride (16-byte rows), the same as TS
LOG_C = 6
assert XWS == TS and C == 1 << LOG_C


def region_b_rows(K: int) -> int:
    """Rows (of TS floats) of region B: qt's K, or D -> A / T^T and the slab (2 C)."""
    return max(K, 2 * C)


def smem_floats(K: int) -> int:
    """Floats of dynamic shared memory a CTA uses (see the module docstring)."""
    return K * TS + region_b_rows(K) * TS + N_MS + 6 * C


@_dev
def log2_width(K):
    """``log2(K)`` for K in {32, 64, 128} (supports() admits no other)."""
    return 5 if K == 32 else (6 if K == 64 else 7)


@_dev
def stage_qk_t(kv, qv, rsk, K, L, kt, qt, tid, nthr):
    """``F32(k)`` / ``F32(q)`` of the chunk's rows ``j < L`` into ``kt`` / ``qt`` transposed
    (entry (j, m) at ``m * TS + j``); element e is row ``e >> log2 K``, column ``e & (K-1)``
    (a warp reads consecutive columns of one row). Four elements a trip, loads first. Rows
    ``L .. C-1`` get zeros (the partial 4-row G / S tiles read them and store nothing)."""
    lk = i32(log2_width(K))
    km = K - 1
    n = i32(L << lk)
    s = i32(nthr)
    e = i32(tid)
    while e + 3 * s < n:
        e1 = e + s
        e2 = e1 + s
        e3 = e2 + s
        o0 = (e >> lk) * rsk + (e & km)
        o1 = (e1 >> lk) * rsk + (e1 & km)
        o2 = (e2 >> lk) * rsk + (e2 & km)
        o3 = (e3 >> lk) * rsk + (e3 & km)
        a0 = ldx(kv, o0)
        a1 = ldx(kv, o1)
        a2 = ldx(kv, o2)
        a3 = ldx(kv, o3)
        b0 = ldx(qv, o0)
        b1 = ldx(qv, o1)
        b2 = ldx(qv, o2)
        b3 = ldx(qv, o3)
        p0 = (e & km) * TS + (e >> lk)
        p1 = (e1 & km) * TS + (e1 >> lk)
        p2 = (e2 & km) * TS + (e2 >> lk)
        p3 = (e3 & km) * TS + (e3 >> lk)
        st1(kt, p0, a0)
        st1(kt, p1, a1)
        st1(kt, p2, a2)
        st1(kt, p3, a3)
        st1(qt, p0, b0)
        st1(qt, p1, b1)
        st1(qt, p2, b2)
        st1(qt, p3, b3)
        e += 4 * s
    while e < n:
        o = (e >> lk) * rsk + (e & km)
        p = (e & km) * TS + (e >> lk)
        st1(kt, p, ldx(kv, o))
        st1(qt, p, ldx(qv, o))
        e += s
    e = i32(tid)
    while e < ((C - L) << lk):
        p = (e & km) * TS + L + (e >> lk)
        st1(kt, p, ZERO)
        st1(qt, p, ZERO)
        e += s


@_dev
def row_recip_t(xt, r, K, use_l2):
    """``1 / sqrt(ss + eps)`` of row ``r`` of a transposed staging array (``1`` when
    ``use_l2 == 0``), ``ss = fma(x_m, x_m, ss)`` over m ascending from 0."""
    if use_l2 == 0:
        return ONE
    ss = ZERO
    p = r
    m = 0
    while m < K:
        x = ld1(xt, p)
        ss = cuda.fma(x, x, ss)
        p += TS
        m += 1
    return ONE / F32(math.sqrt(ss + EPS))


@_dev
def row_norms(kt, qt, K, L, use_l2, rk, rq, tid, nthr):
    """``r_j`` of k's rows into ``rk`` and of q's into ``rq``: one thread a row (a warp
    reads consecutive rows of one column)."""
    r = i32(tid)
    while r < 2 * L:
        if r < L:
            st1(rk, r, row_recip_t(kt, r, K, use_l2))
        else:
            st1(rq, r - L, row_recip_t(qt, r - L, K, use_l2))
        r += nthr


@_dev
def scale_rows(kt, qt, K, L, rk, rq, scale, tid, nthr):
    """In place: ``kn_jm = k_jm * r_k[j]`` and ``qs_jm = (q_jm * r_q[j]) * scale``, rows
    ``j < L`` (element e: column ``e >> 6``, row ``e & 63``)."""
    e = i32(tid)
    while e < (K << LOG_C):
        j = e & (C - 1)
        if j < L:
            p = (e >> LOG_C) * TS + j
            st1(kt, p, ld1(kt, p) * ld1(rk, j))
            st1(qt, p, (ld1(qt, p) * ld1(rq, j)) * scale)
        e += nthr


@_dev
def store_qs_t(qt, K, L, sv, o_qs, tid, nthr):
    """qs^T (rows ``j < L`` of each of its K rows) to the slot at ``o_qs`` (``[K][C]``),
    16-byte pieces (unit e: row ``e >> 4``, piece ``e & 15``; a warp writes two rows)."""
    e = i32(tid)
    while e < (K << 4):
        i = 4 * (e & 15)
        if i < L:
            src = (e >> 4) * TS + i
            dst = o_qs + (e >> 4) * C + i
            if i + 3 < L:
                st4x(sv, dst, ld4(qt, src))
            else:
                for c in range(3):
                    if i + c < L:
                        stx(sv, dst + c, ld1(qt, src + c))
        e += nthr


@_dev
def gs_tile_t(kt, qt, i0, j0, K, Ms, L):
    """_split_prep's 4 x 4 G / S tile (``j0 <= i0``; G_ij = sum_m kn_im kn_jm, S_ij =
    sum_m qs_im kn_jm, m ascending) with kn^T / qs^T in shared memory."""
    g0 = (ZERO, ZERO, ZERO, ZERO)
    g1 = g0
    g2 = g0
    g3 = g0
    s0 = g0
    s1 = g0
    s2 = g0
    s3 = g0
    p = 0
    pe = K * TS
    while p < pe:
        kj = ld4(kt, p + j0)
        ki = ld4(kt, p + i0)
        qi = ld4(qt, p + i0)
        g0 = fma4(ki[0], kj, g0)
        g1 = fma4(ki[1], kj, g1)
        g2 = fma4(ki[2], kj, g2)
        g3 = fma4(ki[3], kj, g3)
        s0 = fma4(qi[0], kj, s0)
        s1 = fma4(qi[1], kj, s1)
        s2 = fma4(qi[2], kj, s2)
        s3 = fma4(qi[3], kj, s3)
        p += TS
    store_gs_row(Ms, i0, 0, j0, L, g0, s0)
    store_gs_row(Ms, i0, 1, j0, L, g1, s1)
    store_gs_row(Ms, i0, 2, j0, L, g2, s2)
    store_gs_row(Ms, i0, 3, j0, L, g3, s3)


@_dev
def gs_row_t(kt, qt, i0, r, j0, K, Ms, L):
    """Row ``r`` of the tile at (i0, j0) alone (the same four G and four S chains)."""
    g = (ZERO, ZERO, ZERO, ZERO)
    s = g
    p = 0
    pe = K * TS
    while p < pe:
        kj = ld4(kt, p + j0)
        g = fma4(ld1(kt, p + i0 + r), kj, g)
        s = fma4(ld1(qt, p + i0 + r), kj, s)
        p += TS
    store_gs_row(Ms, i0, r, j0, L, g, s)


@_dev
def gs_all(kt, qt, K, L, Ms, tid, nthr):
    """Every tile on and below the diagonal: as whole tiles when one pass holds them all,
    else whole passes of tiles and the rest by rows (a row pass costs a quarter)."""
    nt = (L + 3) // 4
    ntile = nt * (nt + 1) // 2
    nfull = ntile if ntile <= nthr else ntile - ntile % nthr
    u = i32(tid)
    while u < nfull:
        ti, tj = tri_decode(u)
        gs_tile_t(kt, qt, 4 * ti, 4 * tj, K, Ms, L)
        u += nthr
    u = i32(tid)
    while u < 4 * (ntile - nfull):
        ti, tj = tri_decode(nfull + (u >> 2))
        gs_row_t(kt, qt, 4 * ti, u & 3, 4 * tj, K, Ms, L)
        u += nthr


@_dev
def stage_xy(kt, vv, rsv, sl, K, V, L, sv, o_kd, Xs, dl, ga, bs, tid, nthr):
    """Slab ``sl`` of ``[X | Y]`` (columns ``64 sl ..``) into ``Xs`` (row stride XWS): k
    columns ``X_jc = kn_jc * ga_j`` from kt (and ``Kd_jc = kn_jc * D_{L-1, j}`` to the slot),
    v columns ``Y_jc = v_jc * beta_j`` from global memory (four loads in flight)."""
    c0 = i32(sl * XW)
    nk = i32(min(max(K - c0, 0), XW))                # k columns of this slab (0, 32 or 64)
    nv = i32(min(max(K + V - c0, 0), XW)) - nk       # then v columns
    s = i32(nthr)
    if nk > 0:
        lg = i32(6 if nk == XW else 5)
        e = i32(tid)
        while e < (L << lg):
            c = e & (nk - 1)
            j = e >> lg
            kn = ld1(kt, (c0 + c) * TS + j)
            stx(sv, o_kd + j * K + c0 + c, kn * ld1(dl, j))
            st1(Xs, j * XWS + c, kn * ld1(ga, j))
            e += s
    if nv > 0:
        lg = i32(6 if nv == XW else 5)
        vm = nv - 1
        v0 = c0 + nk - K                            # first v column of the slab
        n = i32(L << lg)
        e = i32(tid)
        while e + 3 * s < n:
            e1 = e + s
            e2 = e1 + s
            e3 = e2 + s
            y0 = ldx(vv, (e >> lg) * rsv + v0 + (e & vm))
            y1 = ldx(vv, (e1 >> lg) * rsv + v0 + (e1 & vm))
            y2 = ldx(vv, (e2 >> lg) * rsv + v0 + (e2 & vm))
            y3 = ldx(vv, (e3 >> lg) * rsv + v0 + (e3 & vm))
            st1(Xs, (e >> lg) * XWS + nk + (e & vm), y0 * ld1(bs, e >> lg))
            st1(Xs, (e1 >> lg) * XWS + nk + (e1 & vm), y1 * ld1(bs, e1 >> lg))
            st1(Xs, (e2 >> lg) * XWS + nk + (e2 & vm), y2 * ld1(bs, e2 >> lg))
            st1(Xs, (e3 >> lg) * XWS + nk + (e3 & vm), y3 * ld1(bs, e3 >> lg))
            e += 4 * s
        while e < n:
            j = e >> lg
            st1(Xs, j * XWS + nk + (e & vm), ldx(vv, j * rsv + v0 + (e & vm)) * ld1(bs, j))
            e += s


@_dev
def prefetch_rows(xv, rs, W, L, tid, nthr):
    """L1 prefetches of rows ``j < L`` (``W`` elements from ``xv + j * rs``; one per 32
    elements: every line of an FP32 row, every line twice of an FP16 one), so that the
    loads that follow find L1 instead of one DRAM round trip per trip of their loop (no
    value is touched)."""
    lp = i32(log2_width(W) - 5)                      # pieces of 32 a row: 1, 2 or 4
    e = i32(tid)
    while e < (L << lp):
        pfx1(xv, (e >> lp) * rs + ((e & ((1 << lp) - 1)) << 5))
        e += nthr


@_dev
def wu_slab(Xs, Ts, sl, K, V, L, sv, o_w, o_u, tid, nthr):
    """The W / U tiles of slab ``sl``: unit u is rows ``4 (u >> 4) ..``, slab columns
    ``4 (u & 15) ..``; W^T for k columns, U for v columns."""
    nt = (L + 3) // 4
    u = i32(tid)
    while u < (nt << 4):
        c4 = 4 * (u & 15)
        gc = i32(sl * XW) + c4
        if gc < K + V:
            i0 = 4 * (u >> 4)
            w0, w1, w2, w3 = wu_tile(Xs, XWS, Ts, i0, c4)
            if gc < K:
                store_wu_tile(sv, True, o_w + gc * C + i0, V, L, i0, w0, w1, w2, w3)
            else:
                store_wu_tile(sv, False, o_u + i0 * V + gc - K, V, L, i0, w0, w1, w2, w3)
        u += nthr


#: Forms of step 5's W / U tiles (each the same chains, so the same bits): ``tile4``
#: (:func:`wu_slab`). The balanced ``pair2`` form (row tiles p and nt - 1 - p x two
#: columns) measured slower on the H200 and was removed (bench/RESULTS.md, GDN eleventh round).
WUS = {"tile4": wu_slab}


def make_smem_prep_kernel(solve_name: str = SOLVE, wu_name: str = "tile4"):
    """The kernel function with step 4 in form ``solve_name`` (a key of :data:`SOLVES`) and
    step 5's W / U tiles in form ``wu_name`` (a key of :data:`WUS`); every form writes the
    same bits."""
    tri_solve = SOLVES[solve_name]
    wu_tiles = WUS[wu_name]

    def gdn_smem_prep_kernel(q, k, v, g, beta, chunks, scr, F, scale, use_l2):
        """Steps 1-5 of chunked for chunk slot ``blockIdx.x // H`` and q/k head
        ``blockIdx.x % H`` (every value head reading it), into the slot's scratch (the
        layout of :func:`.chunked_split.slot_floats`; kn^T is left unwritten): contract.md
        part B, ``chunked`` family. Each value is the one the frozen ``gdn_chunked_kernel``
        forms, bit for bit."""
        sm = cuda.shared.array(0, types.float32)      # (the dtype as the simulator wants it)
        tid = i32(cuda.threadIdx.x)
        nthr = i32(cuda.blockDim.x)
        T = q.shape[1]
        H = q.shape[2]
        K = q.shape[3]
        HV = v.shape[2]
        V = v.shape[3]
        G = HV // H
        slot = cuda.blockIdx.x // H
        hq = cuda.blockIdx.x - slot * H
        bb = chunks[slot, 0]
        t0 = chunks[slot, 1]
        L = i32(chunks[slot, 2])
        KC = K * C
        oB = K * TS
        oM = oB + max(K, 2 * C) * TS                # region B: see region_b_rows
        oS = oM + N_MS
        kt = sm[0:oB]
        qt = sm[oB:oB + oB]
        Ts = sm[oB:oB + C * TS]
        Xs = sm[oB + C * TS:oB + 2 * C * TS]
        Ms = sm[oM:oS]
        ga = sm[oS:oS + C]
        bs = sm[oS + C:oS + 2 * C]
        gm = sm[oS + 2 * C:oS + 3 * C]
        dl = sm[oS + 3 * C:oS + 4 * C]
        rk = sm[oS + 4 * C:oS + 5 * C]
        rq = sm[oS + 5 * C:oS + 6 * C]
        phv = 2 * KC + C * V + C * C + C
        qkb = ((bb * T + t0) * H + hq) * K
        qv = view(q, qkb)
        kv = view(k, qkb)
        sv = view(scr, slot * F)
        rsk = i32(H * K)
        rsv = i32(HV * V)
        Ki = i32(K)
        Vi = i32(V)

        prefetch_rows(kv, rsk, Ki, L, tid, nthr)
        prefetch_rows(qv, rsk, Ki, L, tid, nthr)
        stage_qk_t(kv, qv, rsk, Ki, L, kt, qt, tid, nthr)
        cuda.syncthreads()
        row_norms(kt, qt, Ki, L, use_l2, rk, rq, tid, nthr)
        cuda.syncthreads()
        scale_rows(kt, qt, Ki, L, rk, rq, scale, tid, nthr)
        cuda.syncthreads()
        store_qs_t(qt, Ki, L, sv, i32(hq * 2 * KC + KC), tid, nthr)
        gs_all(kt, qt, Ki, L, Ms, tid, nthr)
        cuda.syncthreads()

        nsl = (Ki + Vi + XW - 1) // XW
        for rr in range(G):
            hv = hq * G + rr
            o_w = H * 2 * KC + hv * phv                 # W^T [K][C]
            gb = (bb * T + t0) * HV + hv                # g / beta [bb, t0, hv] (flat)
            gv = view(g, gb)
            bv = view(beta, gb)
            vv = view(v, gb * V)                        # v [bb, t0, hv, 0]
            o_kd = i32(o_w + KC)                        # Kd  [C][K]
            o_u = i32(o_w + 2 * KC)                     # U   [C][V]
            o_p = i32(o_w + 2 * KC + C * V)             # P^T [C][C]
            o_g = i32(o_w + 2 * KC + C * V + C * C)     # gamma [C]
            o_w = i32(o_w)
            prefetch_rows(vv, rsv, Vi, L, tid, nthr)
            value_head_decay(gv, bv, HV, L, sv, o_p, o_g, Ms, Ts, ga, bs, gm, dl, tid, nthr)
            tri_solve(Ts, L, tid, nthr)
            cuda.syncthreads()
            for sl in range(nsl):
                stage_xy(kt, vv, rsv, sl, Ki, Vi, L, sv, o_kd, Xs, dl, ga, bs, tid, nthr)
                cuda.syncthreads()
                wu_tiles(Xs, Ts, sl, Ki, Vi, L, sv, o_w, o_u, tid, nthr)
                cuda.syncthreads()

    if (solve_name, wu_name) != (SOLVE, "tile4"):
        gdn_smem_prep_kernel.__qualname__ = f"gdn_smem_prep_kernel_{solve_name}_{wu_name}"
    return gdn_smem_prep_kernel


gdn_smem_prep_kernel = make_smem_prep_kernel()
