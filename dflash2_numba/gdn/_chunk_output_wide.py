"""An output kernel for the ``chunked`` family's three-kernel variants (chunked's step 7 for
every chunk at once), with an 8 x 8 register tile a thread: ``gdn_chunk_out_wide``.

Why: ``gdn_chunk_out_pipe`` (4 x 8 tile, ``2 V`` threads) is issue-bound on the H200 (65 %
of issue slots busy, "not selected" its largest stall; bench/RESULTS.md, GDN eighth
round). Its step loop issues 32 fma, three 16-byte shared loads and the loop's integer work
a step. An 8 x 8 tile issues 64 fma, four shared loads and the same integer work, so more
of the issued instructions are fma and half as many threads carry the integer work.

Layout: one CTA per (chunk slot, value head), ``V`` threads (:func:`wide_threads`): thread
``(rg, cg) = (tid // (V / 8), tid % (V / 8))`` owns rows ``8 rg .. 8 rg + 7`` x columns
``4 cg .. 4 cg + 3`` and ``V/2 + 4 cg .. V/2 + 4 cg + 3`` (column groups half a row apart:
a warp's h / vn loads cover consecutive 16-byte words, as in ``gdn_chunk_out_pipe``). At
V = 128 a warp holds two row groups. The operands stream through two shared-memory
buffers in slabs of ``sb`` rows (:func:`wide_slab_rows`), each a ``sb x C`` block of qs^T
or P^T and the ``sb x V`` block of h or vn with the same rows; a thread holds its (at
most :data:`NLD`) float4 of slab ``s + 1`` in registers while it computes slab ``s``, one
barrier a slab (``gdn_chunk_out_pipe``'s scheme).

Arithmetic, chain for chain ``gdn_chunk_out``'s (and so chunked's step 7):
``qh_ic = fma(qs_im, h_mc, qh_ic)`` for m = 0 .. K-1 ascending from 0; ``o = qh * gamma_i``;
``o = fma(P_ij, vn_jc, o)`` for j = 0 .. i ascending: the eight rows' common steps
j <= 8 rg, then the tail steps j = 8 rg + t (t = 1 .. 7) of rows 8 rg + t .. 8 rg + 7, all
inside the slab that holds row 8 rg (``sb`` is a multiple of 8); rows ``i < L`` stored with
the RNE cast of ``o``'s dtype through shared memory (rows of V + 4 floats). Only which
thread runs a chain and where its operands are staged differ, so the output is chunked's,
byte for byte. Rows past ``L`` of a partial chunk compute on whatever the slot holds and
are never stored.

Dynamic shared memory: :func:`wide_floats` (33.8 KB at K = V = 128: the output tile; the
two buffers take 24 KB).
"""
from __future__ import annotations

import numpy as np
from numba import types

from .._compat import cuda
from ._chunk_output_pipe import ld_slab, slab_bases
from ._common import C, ZERO
from ._split_ops import _dev, fma4, ld1, ld4, st4
from ._split_state import scale4, st4z

_F32 = types.float32
I32 = np.int32
C32 = np.int32(C)
ROWS = 8                     # rows of a thread's tile
RGW = C // ROWS              # row groups of a chunk
NLD = 6                      # float4 a thread carries between slabs
_Z4 = (ZERO, ZERO, ZERO, ZERO)


def wide_threads(V: int) -> int:
    """Threads of a CTA: 8 row groups x ``V / 8`` column groups (``V``)."""
    return RGW * (V // 8)


def wide_slab_rows(V: int) -> int:
    """Rows of a slab: 16 at V = 128, else 8 (a multiple of :data:`ROWS`, and at most
    :data:`NLD` float4 a thread: 6 at V = 128 and V = 32, 4 at V = 64)."""
    return 16 if V >= 128 else 8


def wide_fits(V: int) -> bool:
    """Whether a slab is at most :data:`NLD` float4 a thread."""
    return wide_slab_rows(V) * (C + V) // 4 <= NLD * wide_threads(V)


def wide_floats(K: int, V: int) -> int:
    """Dynamic shared memory in floats: two slab buffers, or the output tile (rows of
    V + 4) when that is larger."""
    return max(2 * wide_slab_rows(V) * (C + V), C * (V + 4))


@_dev
def load_slab(src, b1, b2, nc, n, tid, nthr):
    """This thread's float4 ``tid + k nthr`` (k < :data:`NLD`) of a slab (zeros past ``n``)."""
    return (ld_slab(src, b1, b2, nc, n, tid), ld_slab(src, b1, b2, nc, n, tid + nthr),
            ld_slab(src, b1, b2, nc, n, tid + 2 * nthr),
            ld_slab(src, b1, b2, nc, n, tid + 3 * nthr),
            ld_slab(src, b1, b2, nc, n, tid + 4 * nthr),
            ld_slab(src, b1, b2, nc, n, tid + 5 * nthr))


@_dev
def load_slab_exact(src, b1, b2, tid, nthr):
    """:func:`load_slab` when the slab's C-part is exactly two float4 a thread and the
    whole slab :data:`NLD` (V = 128 at 128 threads: 256 + 512 float4): the same float4,
    with no per-float4 test."""
    e = 4 * tid
    s = 4 * nthr
    return (ld4(src, b1 + e), ld4(src, b1 + e + s), ld4(src, b2 + e), ld4(src, b2 + e + s),
            ld4(src, b2 + e + 2 * s), ld4(src, b2 + e + 3 * s))


@_dev
def store_slab_exact(sm, d, tid, nthr, x):
    """:func:`store_slab` of a whole slab of :data:`NLD` float4 a thread."""
    e = d + 4 * tid
    s = 4 * nthr
    st4(sm, e, x[0])
    st4(sm, e + s, x[1])
    st4(sm, e + 2 * s, x[2])
    st4(sm, e + 3 * s, x[3])
    st4(sm, e + 4 * s, x[4])
    st4(sm, e + 5 * s, x[5])


@_dev
def store_slab(sm, d, n, tid, nthr, x):
    """``sm[d + 4e ..] = `` this thread's float4 ``e`` of a slab (:func:`load_slab`'s)."""
    st4z(sm, d, tid, n, x[0])
    st4z(sm, d, tid + nthr, n, x[1])
    st4z(sm, d, tid + 2 * nthr, n, x[2])
    st4z(sm, d, tid + 3 * nthr, n, x[3])
    st4z(sm, d, tid + 4 * nthr, n, x[4])
    st4z(sm, d, tid + 5 * nthr, n, x[5])


@_dev
def acc16(x0, x1, h0, h1, A, B):
    """One step of the 8 x 8 tile: ``A_r = fma(x_r, h0, A_r)``, ``B_r = fma(x_r, h1, B_r)``
    for the rows r = 0 .. 7 (``x0`` rows 0 .. 3, ``x1`` rows 4 .. 7)."""
    return ((fma4(x0[0], h0, A[0]), fma4(x0[1], h0, A[1]), fma4(x0[2], h0, A[2]),
             fma4(x0[3], h0, A[3]), fma4(x1[0], h0, A[4]), fma4(x1[1], h0, A[5]),
             fma4(x1[2], h0, A[6]), fma4(x1[3], h0, A[7])),
            (fma4(x0[0], h1, B[0]), fma4(x0[1], h1, B[1]), fma4(x0[2], h1, B[2]),
             fma4(x0[3], h1, B[3]), fma4(x1[0], h1, B[4]), fma4(x1[1], h1, B[5]),
             fma4(x1[2], h1, B[6]), fma4(x1[3], h1, B[7])))


@_dev
def acc_steps(sm, p, ph, V, hb, nb, A, B):
    """``nb`` steps of the tile on ``sm[p + t C ..]`` (eight rows) and ``sm[ph + t V ..]``,
    ``sm[ph + hb + t V ..]``, t ascending (the loop ends on ``p``, no counter); returns
    the advanced offsets and the tile."""
    pend = p + nb * C32
    while p < pend:
        A, B = acc16(ld4(sm, p), ld4(sm, p + 4), ld4(sm, ph), ld4(sm, ph + hb), A, B)
        p += C32
        ph += V
    return p, ph, A, B


@_dev
def tail_row(sm, pj, r, t, h0, h1, a, b):
    """Row ``r``'s step of tail step ``t``: ``fma(P^T[j][i0 + r], vn_j, .)`` when
    ``r >= t`` (rows below ``t`` are done: their chains end at j = i0 + r)."""
    if r >= t:
        x = ld1(sm, pj + r)
        return fma4(x, h0, a), fma4(x, h1, b)
    return a, b


@_dev
def tail8(sm, pj, pv, V, hb, A, B):
    """The tail steps j = i0 + 1 .. i0 + 7 (``sm[pj ..]``: P^T row i0 + 1, ``sm[pv ..]``: vn
    row i0 + 1), rows t .. 7 at step t."""
    t = I32(1)
    while t < ROWS:
        h0 = ld4(sm, pv)
        h1 = ld4(sm, pv + hb)
        a1, b1 = tail_row(sm, pj, 1, t, h0, h1, A[1], B[1])
        a2, b2 = tail_row(sm, pj, 2, t, h0, h1, A[2], B[2])
        a3, b3 = tail_row(sm, pj, 3, t, h0, h1, A[3], B[3])
        a4, b4 = tail_row(sm, pj, 4, t, h0, h1, A[4], B[4])
        a5, b5 = tail_row(sm, pj, 5, t, h0, h1, A[5], B[5])
        a6, b6 = tail_row(sm, pj, 6, t, h0, h1, A[6], B[6])
        a7, b7 = tail_row(sm, pj, 7, t, h0, h1, A[7], B[7])
        A = (A[0], a1, a2, a3, a4, a5, a6, a7)
        B = (B[0], b1, b2, b3, b4, b5, b6, b7)
        pj += C32
        pv += V
        t += I32(1)
    return A, B


@_dev
def scale8(A, g0, g1):
    """``A_r * gamma_r`` for the eight rows (``g0`` rows 0 .. 3, ``g1`` rows 4 .. 7)."""
    return (scale4(A[0], g0[0]), scale4(A[1], g0[1]), scale4(A[2], g0[2]),
            scale4(A[3], g0[3]), scale4(A[4], g1[0]), scale4(A[5], g1[1]),
            scale4(A[6], g1[2]), scale4(A[7], g1[3]))


def gdn_chunk_out_wide_kernel(o, scr, chunks, F, H, K, snap0):
    """Chunked step 7 for chunk slot ``blockIdx.x // HV`` and value head
    ``blockIdx.x % HV`` (module docstring): contract.md part B, ``chunked`` family. The
    output must equal the frozen ``gdn_chunked_kernel``'s bit for bit."""
    sm = cuda.shared.array(0, _F32)
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    HV = o.shape[2]
    V = o.shape[3]
    slot = cuda.blockIdx.x // HV
    hv = cuda.blockIdx.x - slot * HV
    bb = chunks[slot, 0]
    t0 = chunks[slot, 1]
    L = chunks[slot, 2]
    KC = K * C
    base = np.int64(slot) * F
    o_qs = base + (hv // (HV // H)) * 2 * KC + KC      # qs^T [K][C]
    o_w = base + H * 2 * KC + hv * (2 * KC + C * V + C * C + C)
    o_u = o_w + 2 * KC                                 # vn (over U) [C][V]
    o_p = o_u + C * V                                  # P^T [C][C]
    o_g = o_p + C * C                                  # gamma [C]
    o_h = snap0 + (np.int64(slot) * HV + hv) * (K * V)  # chunk-start state [K][V]
    V32 = I32(V)
    ncg = I32(V32 >> I32(3))                           # column groups (V / 8, 32-bit)
    rg = I32(tid) // ncg
    c4 = I32(4) * (I32(tid) - rg * ncg)                # columns c4 .. + 3, hb + c4 .. + 3
    hb = I32(V32 >> I32(1))                            # V / 2 (narrowed first: no 64-bit shift)
    i0 = I32(ROWS) * rg
    sb = 16 if V >= 128 else 8                         # rows a slab (wide_slab_rows)
    nc = (sb * C) // 4                                 # float4 of a slab's C-part
    n = nc + (sb * V) // 4                             # float4 of a slab
    sbuf = I32(sb * (C + V))                           # floats of one buffer
    nsm = K // sb                                      # qs^T | h slabs
    ns = nsm + (L + sb - 1) // sb                      # + the P^T | vn slabs rows < L need
    z = _Z4
    A = (z, z, z, z, z, z, z, z)
    B = (z, z, z, z, z, z, z, z)

    b1s, b2s = slab_bases(0, sb, nsm, o_qs, o_h, o_p, o_u, V)
    store_slab(sm, 0, n, tid, nthr, load_slab(scr, b1s, b2s, nc, n, tid, nthr))
    cuda.syncthreads()
    # 1. qh = qs h, m ascending, one slab of sb rows of m after the other
    cur = I32(0)
    exact = nc == 2 * nthr and n == NLD * nthr        # (V = 128: load_slab_exact)
    for s in range(nsm):
        b1s, b2s = slab_bases(s + 1, sb, nsm, o_qs, o_h, o_p, o_u, V)
        if exact:                                      # (s + 1 < ns: L >= 1)
            x = load_slab_exact(scr, b1s, b2s, tid, nthr)
        else:
            x = load_slab(scr, b1s, b2s, nc, n, tid, nthr)
        pq, ph, A, B = acc_steps(sm, cur + i0, cur + I32(sb * C) + c4, V32, hb, I32(sb),
                                 A, B)
        cur = sbuf - cur
        if exact:
            store_slab_exact(sm, cur, tid, nthr, x)
        else:
            store_slab(sm, cur, n, tid, nthr, x)
        cuda.syncthreads()
    g0 = ld4(scr, o_g + i0)
    g1 = ld4(scr, o_g + i0 + 4)
    A = scale8(A, g0, g1)
    B = scale8(B, g0, g1)

    # 2. o += P vn, j ascending: j0 .. j0 + sb - 1 of slab s; every row's steps j <= i0,
    # then (in the slab that holds i0) the tail steps of rows 1 .. 7
    for s in range(nsm, ns):
        nn = n
        if s + 1 >= ns:
            nn = 0
        b1s, b2s = slab_bases(s + 1, sb, nsm, o_qs, o_h, o_p, o_u, V)
        if exact and nn > 0:
            x = load_slab_exact(scr, b1s, b2s, tid, nthr)
        else:
            x = load_slab(scr, b1s, b2s, nc, nn, tid, nthr)
        j0 = I32((s - nsm) * sb)
        nst = min(j0 + I32(sb), i0 + I32(1)) - j0       # this slab's common steps
        if nst < 0:
            nst = I32(0)
        pj, pv, A, B = acc_steps(sm, cur + i0, cur + I32(sb * C) + c4, V32, hb, nst, A, B)
        if j0 <= i0 and i0 < j0 + sb:                  # (then i0 + 7 < j0 + sb)
            A, B = tail8(sm, pj, pv, V32, hb, A, B)
        cur = sbuf - cur
        if exact and nn > 0:
            store_slab_exact(sm, cur, tid, nthr, x)
        else:
            store_slab(sm, cur, nn, tid, nthr, x)
        cuda.syncthreads()

    # 3. the rows i < L of the chunk, through shared memory (rows of V + 4 floats) so that
    # a warp's global stores cover consecutive columns of a row; the last barrier above
    # ends every read of the buffers
    vp = V32 + I32(4)
    p = i0 * vp + c4
    st4(sm, p, A[0])
    st4(sm, p + hb, B[0])
    st4(sm, p + vp, A[1])
    st4(sm, p + vp + hb, B[1])
    st4(sm, p + 2 * vp, A[2])
    st4(sm, p + 2 * vp + hb, B[2])
    st4(sm, p + 3 * vp, A[3])
    st4(sm, p + 3 * vp + hb, B[3])
    st4(sm, p + 4 * vp, A[4])
    st4(sm, p + 4 * vp + hb, B[4])
    st4(sm, p + 5 * vp, A[5])
    st4(sm, p + 5 * vp + hb, B[5])
    st4(sm, p + 6 * vp, A[6])
    st4(sm, p + 6 * vp + hb, B[6])
    st4(sm, p + 7 * vp, A[7])
    st4(sm, p + 7 * vp + hb, B[7])
    cuda.syncthreads()
    n8 = V // 8                                        # eight columns a thread a row
    i = tid // n8
    cc = 8 * (tid - i * n8)
    rstep = nthr // n8
    while i < L:
        q = i * vp + cc
        x0 = ld4(sm, q)
        x1 = ld4(sm, q + 4)
        orow = o[bb, t0 + i, hv]
        orow[cc] = x0[0]                           # (RNE cast to o's dtype, as chunked)
        orow[cc + 1] = x0[1]
        orow[cc + 2] = x0[2]
        orow[cc + 3] = x0[3]
        orow[cc + 4] = x1[0]
        orow[cc + 5] = x1[1]
        orow[cc + 6] = x1[2]
        orow[cc + 7] = x1[3]
        i += rstep
