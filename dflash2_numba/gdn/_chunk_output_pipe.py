"""The output of variant ``chunked_rec_pipe`` (chunked's step 7 for every chunk at once):
:mod:`._chunk_output`'s kernel with its operands streamed through two shared-memory
buffers, the next slab's global loads in flight while the current slab is computed.

One CTA per (chunk slot, value head), ``2 V`` threads, a 4 x 8 register tile a thread
like ``gdn_chunk_out``'s, placed row-group-major: ``(rg, cg) = (tid // (V / 8),
tid % (V / 8))``, rows ``4 rg .. 4 rg + 3`` x columns ``4 cg .. 4 cg + 3`` and
``V/2 + 4 cg .. V/2 + 4 cg + 3``. A warp spans ``32 / (V / 8)`` row groups (two at V =
128, four at V = 64, eight at V = 32), so the triangular P vn loop (``4 rg + 1`` steps)
costs a warp the longest of its own row groups' steps instead of the longest in the CTA,
and the lanes' h / vn loads cover consecutive 16-byte words (each row group of the warp
the same words: no bank conflicts). The operands come in slabs of ``sb`` rows (16 at
V = 128, else 8: :func:`slab_rows`), each a ``sb x C`` block of qs^T or P^T followed by the
``sb x V`` block of h or vn with the same rows (two contiguous stretches of the scratch):

* slabs ``0 .. K/sb - 1``: rows m of qs^T and of the chunk-start state h;
* slabs ``K/sb ..``: rows j of P^T and of vn, only as many as rows ``j < L`` need.

A thread loads its float4 of slab ``s + 1`` into registers (at most ``NLD``) before it
computes slab ``s`` from one buffer, then stores them into the other buffer; one barrier a
slab. Compared with ``gdn_chunk_out`` (stage 64 rows, barrier, compute, barrier), the
global loads overlap the arithmetic and the CTA needs 24 KB of buffers instead of 48 KB.
The step loops count in 32 bits, and each thread stores eight consecutive columns of a
row (one row view, two shared loads) where ``gdn_chunk_out`` stores one.

The arithmetic is ``gdn_chunk_out``'s, chain for chain: ``qh_ic = fma(qs_im, h_mc, qh_ic)``
for m = 0 .. K-1 ascending from 0; ``o = qh * gamma_i``; ``o = fma(P_ij, vn_jc, o)`` for
j = 0 .. i ascending (the four rows' common steps j <= 4 rg, then the tail steps of rows
4 rg + 1 .. 4 rg + 3 at j = 4 rg + 1 .. 4 rg + 3, all inside the slab that holds row
4 rg); rows ``i < L`` stored with the RNE cast of ``o``'s dtype through shared memory. The
slabs only cut the loops where the staging happens: every chain runs the same steps in the
same order on the same operands (exact copies), so the output is chunked's, byte for byte.

Dynamic shared memory: :func:`pipe_floats` (33.8 KB at K = V = 128: the output tile; the
two buffers take 24 KB).
"""
from __future__ import annotations

import numpy as np
from numba import types

from .._compat import cuda
from ._chunk_output import acc8
from ._common import C, ZERO
from ._split_ops import _dev, fma4, ld1, ld4, st4
from ._split_state import scale4, st4z

_F32 = types.float32
SB = 16                      # rows of m (or j) a slab at V = 128 (8 below)
NLD = 3                      # float4 a thread carries between slabs
_Z4 = (ZERO, ZERO, ZERO, ZERO)
I32 = np.int32
C32 = np.int32(C)


def slab_rows(V: int) -> int:
    """Rows of a slab: 16 at V = 128, else 8 (so that a slab is at most three float4 a
    thread at 2 V threads)."""
    return SB if V >= 128 else SB // 2


def pipe_floats(K: int, V: int) -> int:
    """Dynamic shared memory of :func:`gdn_chunk_out_pipe_kernel` in floats: two slab
    buffers, or the output tile (rows of V + 4) when that is larger."""
    return max(2 * slab_rows(V) * (C + V), C * (V + 4))


def pipe_fits(V: int) -> bool:
    """Whether a slab is at most ``NLD`` float4 a thread at ``2 V`` threads."""
    return slab_rows(V) * (C + V) // 4 <= NLD * 2 * V


@_dev
def ld_slab(src, b1, b2, nc, n, e):
    """Float4 ``e`` of a slab: ``src[b1 + 4e ..]`` for ``e < nc``, ``src[b2 + 4(e - nc) ..]``
    for ``nc <= e < n``, zeros past ``n``."""
    if e >= n:
        return _Z4
    if e < nc:
        return ld4(src, b1 + 4 * e)
    return ld4(src, b2 + 4 * (e - nc))


@_dev
def load_slab(src, b1, b2, nc, n, tid, nthr):
    """This thread's float4 ``tid + k nthr`` (k < ``NLD``) of a slab into registers (zeros
    past ``n``)."""
    return (ld_slab(src, b1, b2, nc, n, tid), ld_slab(src, b1, b2, nc, n, tid + nthr),
            ld_slab(src, b1, b2, nc, n, tid + 2 * nthr))


@_dev
def store_slab(sm, d, n, tid, nthr, x):
    """``sm[d + 4e ..] = `` this thread's float4 ``e`` of a slab (:func:`load_slab`'s)."""
    st4z(sm, d, tid, n, x[0])
    st4z(sm, d, tid + nthr, n, x[1])
    st4z(sm, d, tid + 2 * nthr, n, x[2])


@_dev
def acc_steps(sm, p, ph, V, hb, nb, a0, a1, a2, a3, b0, b1, b2, b3):
    """``nb`` steps of the 4 x 8 tile (``acc8`` on ``sm[p + t C ..]`` and
    ``sm[ph + t V ..]``, ``sm[ph + hb + t V ..]``, t ascending) with 32-bit counters and offsets (numba's ``range``
    counts in 64 bits: five integer instructions a step); returns the advanced offsets and
    the tile."""
    k = I32(0)
    while k < nb:
        a0, a1, a2, a3, b0, b1, b2, b3 = acc8(ld4(sm, p), ld4(sm, ph), ld4(sm, ph + hb),
                                              a0, a1, a2, a3, b0, b1, b2, b3)
        p += C32
        ph += V
        k += I32(1)
    return p, ph, a0, a1, a2, a3, b0, b1, b2, b3


@_dev
def tail_step(sm, pj, pv, hb, r, a, b):
    """Row ``r``'s (0 .. 3) step of the P vn tail: ``fma(P^T[j][i0 + r], vn_j, .)`` on its
    two float4 of columns (``sm[pv ..]`` and ``sm[pv + hb ..]``)."""
    x = ld1(sm, pj + r)
    return fma4(x, ld4(sm, pv), a), fma4(x, ld4(sm, pv + hb), b)


@_dev
def slab_bases(s, sb, nsm, o_qs, o_h, o_p, o_u, V):
    """Global float offsets of slab ``s``'s two stretches (``sb`` rows a slab; module
    docstring)."""
    if s < nsm:
        return o_qs + s * (sb * C), o_h + s * (sb * V)
    s2 = s - nsm
    return o_p + s2 * (sb * C), o_u + s2 * (sb * V)


def gdn_chunk_out_pipe_kernel(o, scr, chunks, F, H, K, snap0):
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
    ncg = V // 8                                       # column groups
    rg = tid // ncg                                    # (a warp: 32 / ncg row groups)
    c4 = 4 * (tid - rg * ncg)                          # columns c4 .. + 3, hb + c4 .. + 3
    hb = I32(I32(V) >> I32(1))                         # V / 2 (narrowed first: no 64-bit shift)
    i0 = I32(4 * rg)
    V32 = I32(V)
    sb = SB if V >= 128 else SB // 2                   # rows a slab (slab_rows)
    nc = (sb * C) // 4                                 # float4 of a slab's C-part
    n = nc + (sb * V) // 4                             # float4 of a slab
    sbuf = I32(sb * (C + V))                           # floats of one buffer
    nsm = K // sb                                      # qs^T | h slabs
    ns = nsm + (L + sb - 1) // sb                      # + the P^T | vn slabs rows < L need
    z = _Z4
    a0, a1, a2, a3, b0, b1, b2, b3 = z, z, z, z, z, z, z, z

    b1s, b2s = slab_bases(0, sb, nsm, o_qs, o_h, o_p, o_u, V)
    store_slab(sm, 0, n, tid, nthr, load_slab(scr, b1s, b2s, nc, n, tid, nthr))
    cuda.syncthreads()
    # 1. qh = qs h, m ascending, one slab of sb rows of m after the other
    cur = I32(0)
    for s in range(nsm):
        b1s, b2s = slab_bases(s + 1, sb, nsm, o_qs, o_h, o_p, o_u, V)
        x = load_slab(scr, b1s, b2s, nc, n, tid, nthr)     # (s + 1 < ns: L >= 1)
        pq, ph, a0, a1, a2, a3, b0, b1, b2, b3 = acc_steps(
            sm, cur + i0, cur + I32(sb * C + c4), V32, hb, I32(sb),
            a0, a1, a2, a3, b0, b1, b2, b3)
        cur = sbuf - cur
        store_slab(sm, cur, n, tid, nthr, x)
        cuda.syncthreads()
    gm = ld4(scr, o_g + i0)
    a0 = scale4(a0, gm[0])
    a1 = scale4(a1, gm[1])
    a2 = scale4(a2, gm[2])
    a3 = scale4(a3, gm[3])
    b0 = scale4(b0, gm[0])
    b1 = scale4(b1, gm[1])
    b2 = scale4(b2, gm[2])
    b3 = scale4(b3, gm[3])

    # 2. o += P vn, j ascending: j0 .. j0 + sb - 1 of slab s; every row's steps j <= i0
    # then (in the slab that holds i0) the tail steps
    # of rows 1 .. 3
    for s in range(nsm, ns):
        nn = n
        if s + 1 >= ns:
            nn = 0
        b1s, b2s = slab_bases(s + 1, sb, nsm, o_qs, o_h, o_p, o_u, V)
        x = load_slab(scr, b1s, b2s, nc, nn, tid, nthr)
        j0 = I32((s - nsm) * sb)
        nst = min(j0 + I32(sb), i0 + I32(1)) - j0       # this slab's common steps
        if nst < 0:
            nst = I32(0)
        pj, pv, a0, a1, a2, a3, b0, b1, b2, b3 = acc_steps(
            sm, cur + i0, cur + I32(sb * C + c4), V32, hb, nst,
            a0, a1, a2, a3, b0, b1, b2, b3)
        if j0 <= i0 and i0 < j0 + sb:                  # (then i0 + 3 < j0 + sb)
            a1, b1 = tail_step(sm, pj, pv, hb, 1, a1, b1)  # j = i0 + 1: rows 1 .. 3
            a2, b2 = tail_step(sm, pj, pv, hb, 2, a2, b2)
            a3, b3 = tail_step(sm, pj, pv, hb, 3, a3, b3)
            pj += C32
            pv += V32
            a2, b2 = tail_step(sm, pj, pv, hb, 2, a2, b2)  # j = i0 + 2: rows 2, 3
            a3, b3 = tail_step(sm, pj, pv, hb, 3, a3, b3)
            pj += C32
            pv += V32
            a3, b3 = tail_step(sm, pj, pv, hb, 3, a3, b3)  # j = i0 + 3: row 3
        cur = sbuf - cur
        store_slab(sm, cur, nn, tid, nthr, x)
        cuda.syncthreads()

    # 3. the rows i < L of the chunk, through shared memory (rows of V + 4 floats) so that
    # a warp's global stores cover consecutive columns of a row (coalesced); the last
    # barrier above ends every read of the buffers
    vp = V + 4
    p = i0 * vp + c4
    st4(sm, p, a0)
    st4(sm, p + hb, b0)
    st4(sm, p + vp, a1)
    st4(sm, p + vp + hb, b1)
    st4(sm, p + 2 * vp, a2)
    st4(sm, p + 2 * vp + hb, b2)
    st4(sm, p + 3 * vp, a3)
    st4(sm, p + 3 * vp + hb, b3)
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
