"""The output of variant ``chunked_rec`` (chunked's step 7) for every chunk at once, from the
chunk-start states and vn that the recurrence pass (:mod:`._split_state_rec`) wrote.

One CTA per (chunk slot, value head), ``2 V`` threads; thread ``(rg, cg) = (tid % 16,
tid // 16)`` owns rows ``4 rg .. 4 rg + 3`` x columns ``8 cg .. 8 cg + 7`` of the chunk's
``C x V`` output (32 accumulators, one per output scalar):

1. ``qh_ic = 0; qh_ic = fma(qs_im, h_mc, qh_ic)`` for m = 0 .. K-1 ascending, with
   ``qs^T`` from the slot and ``h`` the chunk-start state, both staged in shared memory
   ``SLAB`` rows of m at a time (the accumulators carry over the slabs); then
   ``o = qh * gamma_i``;
2. ``o = fma(P_ij, vn_jc, o)`` for j = 0 .. i ascending (P^T and vn staged): j = 0 .. 4 rg
   for the four rows together, then the three tail steps of rows 4 rg + 1 .. 4 rg + 3;
3. rows ``i < L`` stored with the RNE cast of ``o``'s dtype, through shared memory so
   that a warp stores consecutive columns of a row.

These are the chains and initial values of chunked's step 7 (and of every state pass of
the ``chunked`` variants: ``phase1_unit``'s qh, ``out_rows_seq``), on the same operands
(``h`` and ``vn`` are exact copies of the recurrence's values), so the output is
chunked's, byte for byte. Rows past ``L`` of a partial chunk compute on whatever the slot
holds and are never stored.

Dynamic shared memory: :func:`out_floats` (48 KB at K = V = 128).
"""
from __future__ import annotations

import numpy as np
from numba import types

from .._compat import cuda
from ._common import C, ZERO
from ._split_ops import _dev, fma4, ld1, ld4, pf2, st4
from ._split_state import ld4z, scale4, st4z

_F32 = types.float32
SLAB = 64                    # rows of m staged at a time (qs^T and h)
RG = C // 4                  # row groups of four rows


def out_threads(V: int) -> int:
    """Threads of an output CTA: 16 row groups x ``V / 8`` column groups."""
    return RG * (V // 8)


def out_floats(K: int, V: int) -> int:
    """Dynamic shared memory of :func:`gdn_chunk_out_kernel` in floats: the largest of one
    slab of qs^T | h, of P^T | vn and of the output tile (rows of V + 4)."""
    return max(min(SLAB, K) * (C + V), C * C + C * V, C * (V + 4))


@_dev
def stage8(dst, d, src, b, n, tid, nthr):
    """``dst[d + 4e ..] = src[b + 4e ..]`` for the float4 ``e < n`` (exact copies), eight
    16-byte loads a thread in flight before their stores."""
    e = tid
    while e < n:
        x0 = ld4z(src, b, e, n)
        x1 = ld4z(src, b, e + nthr, n)
        x2 = ld4z(src, b, e + 2 * nthr, n)
        x3 = ld4z(src, b, e + 3 * nthr, n)
        x4 = ld4z(src, b, e + 4 * nthr, n)
        x5 = ld4z(src, b, e + 5 * nthr, n)
        x6 = ld4z(src, b, e + 6 * nthr, n)
        x7 = ld4z(src, b, e + 7 * nthr, n)
        st4z(dst, d, e, n, x0)
        st4z(dst, d, e + nthr, n, x1)
        st4z(dst, d, e + 2 * nthr, n, x2)
        st4z(dst, d, e + 3 * nthr, n, x3)
        st4z(dst, d, e + 4 * nthr, n, x4)
        st4z(dst, d, e + 5 * nthr, n, x5)
        st4z(dst, d, e + 6 * nthr, n, x6)
        st4z(dst, d, e + 7 * nthr, n, x7)
        e += 8 * nthr


@_dev
def prefetch_l2(src, b, n, tid, nthr):
    """``prefetch.global.L2`` of the ``n`` floats from ``src[b]`` (one instruction per
    128-byte line; no value is touched)."""
    e = tid
    while e < (n + 31) // 32:
        pf2(src, b + 32 * e)
        e += nthr


@_dev
def acc8(x, h0, h1, a0, a1, a2, a3, b0, b1, b2, b3):
    """One step of the 4 x 8 tile: ``a_r = fma(x_r, h0, a_r)``, ``b_r = fma(x_r, h1, b_r)``."""
    return (fma4(x[0], h0, a0), fma4(x[1], h0, a1), fma4(x[2], h0, a2), fma4(x[3], h0, a3),
            fma4(x[0], h1, b0), fma4(x[1], h1, b1), fma4(x[2], h1, b2), fma4(x[3], h1, b3))


@_dev
def tail_step(sm, pj, pv, r, a, b):
    """Row ``r``'s (0 .. 3) step of the P vn tail: ``fma(P^T[j][i0 + r], vn_j, .)`` on its
    two float4 of columns."""
    x = ld1(sm, pj + r)
    return fma4(x, ld4(sm, pv), a), fma4(x, ld4(sm, pv + 4), b)


def gdn_chunk_out_kernel(o, scr, chunks, F, H, K, snap0):
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
    sb = np.int64(slot) * F
    o_qs = sb + (hv // (HV // H)) * 2 * KC + KC        # qs^T [K][C]
    o_w = sb + H * 2 * KC + hv * (2 * KC + C * V + C * C + C)
    o_u = o_w + 2 * KC                                 # vn (over U) [C][V]
    o_p = o_u + C * V                                  # P^T [C][C]
    o_g = o_p + C * C                                  # gamma [C]
    o_h = snap0 + (np.int64(slot) * HV + hv) * (K * V)  # chunk-start state [K][V]
    rg = tid % RG
    c8 = 8 * (tid // RG)
    i0 = 4 * rg
    z = (ZERO, ZERO, ZERO, ZERO)
    a0, a1, a2, a3, b0, b1, b2, b3 = z, z, z, z, z, z, z, z

    # (everything the CTA reads, on its way into L2 while the first slab is staged)
    prefetch_l2(scr, o_h, K * V, tid, nthr)
    prefetch_l2(scr, o_qs, KC, tid, nthr)
    prefetch_l2(scr, o_u, C * V + C * C + C, tid, nthr)

    # 1. qh = qs h over slabs of m (qs^T rows at sm[0 ..], h rows at sm[ms * C ..])
    ms = min(SLAB, K)
    hs = ms * C
    for m0 in range(0, K, ms):
        cuda.syncthreads()
        stage8(sm, 0, scr, o_qs + m0 * C, hs // 4, tid, nthr)
        stage8(sm, hs, scr, o_h + m0 * V, (ms * V) // 4, tid, nthr)
        cuda.syncthreads()
        pq = i0
        ph = hs + c8
        for t in range(ms):
            a0, a1, a2, a3, b0, b1, b2, b3 = acc8(ld4(sm, pq), ld4(sm, ph), ld4(sm, ph + 4),
                                                  a0, a1, a2, a3, b0, b1, b2, b3)
            pq += C
            ph += V
    gm = ld4(scr, o_g + i0)
    a0 = scale4(a0, gm[0])
    a1 = scale4(a1, gm[1])
    a2 = scale4(a2, gm[2])
    a3 = scale4(a3, gm[3])
    b0 = scale4(b0, gm[0])
    b1 = scale4(b1, gm[1])
    b2 = scale4(b2, gm[2])
    b3 = scale4(b3, gm[3])

    # 2. o += P vn, j ascending (P^T at sm[0 ..], vn at sm[C * C ..])
    cuda.syncthreads()
    stage8(sm, 0, scr, o_p, (C * C) // 4, tid, nthr)
    stage8(sm, C * C, scr, o_u, (C * V) // 4, tid, nthr)
    cuda.syncthreads()
    pj = i0
    pv = C * C + c8
    for j in range(i0 + 1):
        a0, a1, a2, a3, b0, b1, b2, b3 = acc8(ld4(sm, pj), ld4(sm, pv), ld4(sm, pv + 4),
                                              a0, a1, a2, a3, b0, b1, b2, b3)
        pj += C
        pv += V
    a1, b1 = tail_step(sm, pj, pv, 1, a1, b1)          # j = i0 + 1: rows 1 .. 3
    a2, b2 = tail_step(sm, pj, pv, 2, a2, b2)
    a3, b3 = tail_step(sm, pj, pv, 3, a3, b3)
    pj += C
    pv += V
    a2, b2 = tail_step(sm, pj, pv, 2, a2, b2)          # j = i0 + 2: rows 2, 3
    a3, b3 = tail_step(sm, pj, pv, 3, a3, b3)
    pj += C
    pv += V
    a3, b3 = tail_step(sm, pj, pv, 3, a3, b3)          # j = i0 + 3: row 3

    # 3. the rows i < L of the chunk, through shared memory (rows of V + 4 floats) so that
    # a warp's global stores cover consecutive columns of a row (coalesced)
    vp = V + 4
    cuda.syncthreads()
    p = i0 * vp + c8
    st4(sm, p, a0)
    st4(sm, p + 4, b0)
    st4(sm, p + vp, a1)
    st4(sm, p + vp + 4, b1)
    st4(sm, p + 2 * vp, a2)
    st4(sm, p + 2 * vp + 4, b2)
    st4(sm, p + 3 * vp, a3)
    st4(sm, p + 3 * vp + 4, b3)
    cuda.syncthreads()
    rstep = nthr // V
    i = tid // V
    c = tid - i * V
    while i < L:
        o[bb, t0 + i, hv, c] = sm[i * vp + c]      # (RNE cast to o's dtype, as chunked)
        i += rstep
