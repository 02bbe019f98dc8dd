"""GDN prefill, ``chunked`` family, optimised variant ``chunked_split``: bit-identical to the
frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input), split
into a parallel pre-pass and a narrow sequential state pass. (:mod:`.chunked_pipe` runs the
same device code software-pipelined; see there.)

What it changes (only the things chunked.py's docstring lists as free)
----------------------------------------------------------------------
* Two kernels instead of one. ``gdn_split_prep`` runs steps 1-5 of chunked's order (row
  norms, kn / qs, decay products D / gamma, G / S -> A / P, X / Kd, T = (I + A)^-1, W, U)
  once per (chunk, q/k head), in parallel over all chunks of all sequences, and stores what
  the state pass needs in a global scratch laid out per chunk *slot*: ``qs^T [K][64]`` per
  q/k head and ``W^T [K][64]``, ``Kd [64][K]``, ``U [64][V]``, ``P^T [64][64]``,
  ``gamma [64]`` per value head. ``gdn_split_state`` then runs only steps 6-8 (vn = U - W h,
  the output, the state update) sequentially over the chunks of a sequence, one CTA per
  (sequence, value head, block of ``w <= 12`` state columns; ``w`` chosen at plan time so
  that the CTAs fill the SMs once: 12 at the production shape on 132 SMs).
* G_ij and S_ij depend only on the q/k head, so one pre-pass CTA computes them once and
  reuses the bits for the ``HV / H`` value heads that read it (A and P, which involve beta
  and D, are formed per value head exactly as in chunked).
* Row norms: the same chain as ``row_recip`` (``ss = fma(x_m, x_m, ss)``, m ascending; add
  eps, IEEE sqrt, IEEE division), on rows staged through shared memory 64 columns at a time
  (the partial sum waits in shared memory between blocks). ``kn_jm = k_jm * r_j`` is
  recomputed where needed (X, Kd), giving the same bits as the stored one.
* Register tiling: G / S in 4 x 4 tiles; W / U in 4 x 4 tiles (T is kept transposed so
  that ``T[i0..i0+3, j]`` is one 16-byte load); step 6 one row x (4 or w) columns of one
  product; step 7 two rows (p, L-1-p) x 4 columns; step 8 one row m x w columns. Every tile
  keeps one accumulator per output scalar and runs that scalar's chain in chunked's order
  (m ascending; j ascending) from chunked's initial value, so tiling changes no bit.
* The forward substitution runs column by column (one thread per column m of T, rows in
  ascending order, four rows interleaved): entry (i, m) is still
  ``t = -A_im; for j = m+1 .. i-1 ascending: t = fma(-A_ij, T_jm, t)``; column m reads
  only A and its own earlier entries T_jm (j < i), so the solve needs no barrier
  (chunked: one per row). A is stored in place of D (lower triangle), T transposed in the
  upper triangle.
* Barriers per chunk in the state pass: 2 (chunked: L + 6). L1 prefetches (no value
  effect) bring the chunk's Kd / P^T and the next chunk's W^T / qs^T in ahead of use.

What it keeps
-------------
Every FP32 value is produced by the same sequence of roundings as in chunked.py: the same
fma chains in the same order starting from the same values, the same unfused products with
the same association (``(G * beta) * D``, ``kn * (beta * gamma)``, ``(q * r) * scale``,
``kn * D_{L-1,j}``, ``v * beta``, ``qh * gamma``, ``h * gamma_{L-1}``, ``U - wh``), the
same norm chain, ``E`` only on ``min(g, 0)``, the same backwards running product for D and
gamma, the same RNE cast of the output. Only where values live (global scratch, shared
memory, registers) and which thread computes them differ. The operands of each fma are
passed in chunked's order (this matters only for NaN payloads on the host). Rows past L of
a partial 4-row tile compute on whatever memory holds and are never stored.

Scratch (allocated by :func:`prepare`, sized from the plan; launches allocate nothing)
------------------------------------------------------------------------------------
``scr`` float32 ``[slots * F]``, one block of F floats per chunk of every sequence (slot =
first slot of the sequence + chunk index),
``F = H * 2*K*64 + HV * (2*K*64 + 64*V + 64*64 + 64)``: per q/k head ``kn^T`` and
``qs^T``; per value head ``W^T``, ``Kd``, ``U``, ``P^T``, ``gamma``. At the per-rank
production shape (T = 65536, H = 4, HV = 12, K = V = 128) this is 1024 x 1.64 MB =
1.68 GB. Tables: ``chunks [slots, 3]`` (batch row, first token, length) and
``items [n, 5]`` (sequence, value head, first column, width, first slot).

Knobs (plan time): ``DFLASH2_GDN_SPLIT_COLS`` (state columns per CTA: 4, 8 or 12; default
automatic) and ``DFLASH2_GDN_SPLIT_THREADS`` (state CTA threads, at most 384; default 128
per group of 4 columns).
"""
from __future__ import annotations

import math
import os
from types import SimpleNamespace

import numpy as np
from numba import types

from .. import _registry
from .._compat import SIMULATOR, cuda, exact_fp32
from ._common import C, EPS, F32, MAXD, ONE, ZERO, GdnPlan, default_max_ctas

PREP_NAME = "gdn_split_prep"
STATE_NAME = "gdn_split_state"

CP1 = C + 1      # row stride of Ms (S | G^T) and of the staging buffers
TS = C + 4       # row stride of Ts (D -> A, T^T): 16-byte rows
SW = 32          # columns of X (for W) or Y (for U) staged per slab
SW4 = SW // 4
XS = SW + 4      # row stride of the slab (16-byte rows, 4-way instead of 32-way conflicts)
VS = 12          # most state columns one state CTA owns (w in {4, 8, 12})
N_MS = C * CP1   # shared array sizes (compile-time constants)
N_TS = C * TS
N_XS = C * XS
N_HS = MAXD * VS
N_VS = C * VS
BIG_CHUNK = 1 << 30          # "every chunk" for state_item
PREP_THREADS = 32 if SIMULATOR else 128
MAX_STATE_THREADS = 384          # 384 threads x <= 168 registers fit an SM's 64 K
SIM_STATE_THREADS = 32

# Tuning knobs for the lead (read at plan time): state columns per CTA (0 = automatic) and
# threads per state CTA (0 = 128 per group of 4 columns).
COLS = int(os.environ.get("DFLASH2_GDN_SPLIT_COLS", "0") or 0)
STATE_THREADS = int(os.environ.get("DFLASH2_GDN_SPLIT_THREADS", "0") or 0)


def slot_floats(H: int, HV: int, K: int, V: int) -> int:
    """Scratch floats per chunk slot (a multiple of 64, so every block is 256-byte aligned)."""
    return H * 2 * K * C + HV * (2 * K * C + C * V + C * C + C)


# --- device helpers ---------------------------------------------------------------------
# On a GPU: numba device functions and intrinsics (one ld/st instruction each, no negative-
# index wraparound, 16-byte vector accesses where the caller guarantees the alignment).
# On the simulator: plain Python with the same arithmetic (the simulator's per-call module
# swap of device functions would dominate its run time); its fma4 calls the correctly
# rounded host fma that the simulator's own ``cuda.fma`` uses for float32 operands.

if SIMULATOR:
    from .._compat import fma32_exact as _fma

    SHARED_ALIGN = None          # the simulator refuses an explicit alignment

    def _dev(fn):
        return fn

    def fma4(a, b, c):
        """``(fma(a, b0, c0), .., fma(a, b3, c3))``: four independent chains, one step each."""
        return (_fma(a, b[0], c[0]), _fma(a, b[1], c[1]), _fma(a, b[2], c[2]),
                _fma(a, b[3], c[3]))

    def ld1(a, i):
        return a[i]

    def ld4(a, i):
        return (a[i], a[i + 1], a[i + 2], a[i + 3])

    def st4(a, i, x):
        a[i] = x[0]
        a[i + 1] = x[1]
        a[i + 2] = x[2]
        a[i + 3] = x[3]

    def pf1(a, i):
        pass

else:
    from llvmlite import ir
    from numba.cuda import cgutils
    from numba.cuda import types as ntypes
    from numba.cuda.extending import intrinsic
    from numba.cuda.typing import signature

    SHARED_ALIGN = 16

    def _dev(fn):
        return cuda.jit(device=True)(fn)

    @cuda.jit(device=True)
    def fma4(a, b, c):
        """``(fma(a, b0, c0), .., fma(a, b3, c3))``: four independent chains, one step each."""
        return (cuda.fma(a, b[0], c[0]), cuda.fma(a, b[1], c[1]), cuda.fma(a, b[2], c[2]),
                cuda.fma(a, b[3], c[3]))

    def _ok(a, i):
        return (isinstance(a, ntypes.Array) and a.ndim == 1 and a.dtype == ntypes.float32
                and isinstance(i, ntypes.Integer))

    def _ptr(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = context.cast(builder, args[1], sig.args[1], ntypes.intp)
        return cgutils.get_item_pointer(context, builder, aryty, ary, [idx], wraparound=False)

    _V4 = ir.VectorType(ir.FloatType(), 4)

    @intrinsic
    def ld1(typingctx, a, i):
        """``a[i]`` of a 1-D float32 array (one load, no wraparound)."""
        if not _ok(a, i):
            return None

        def codegen(context, builder, sig, args):
            return builder.load(_ptr(context, builder, sig, args), align=4)

        return signature(ntypes.float32, a, i), codegen

    @intrinsic
    def ld4(typingctx, a, i):
        """``a[i .. i+3]`` of a 1-D float32 array as one 16-byte load (``i`` a multiple of 4,
        the array 16-byte aligned)."""
        if not _ok(a, i):
            return None
        rty = ntypes.UniTuple(ntypes.float32, 4)

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig, args)
            vec = builder.load(builder.bitcast(p, _V4.as_pointer(p.type.addrspace)), align=16)
            vals = [builder.extract_element(vec, ir.Constant(ir.IntType(32), t)) for t in range(4)]
            return context.make_tuple(builder, rty, vals)

        return signature(rty, a, i), codegen

    @intrinsic
    def st4(typingctx, a, i, x):
        """``a[i .. i+3] = x`` (a 4-tuple of float32) as one 16-byte store."""
        if not _ok(a, i):
            return None

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig, args)
            vec = ir.Constant(_V4, ir.Undefined)
            for t in range(4):
                vec = builder.insert_element(vec, builder.extract_value(args[2], t),
                                             ir.Constant(ir.IntType(32), t))
            builder.store(vec, builder.bitcast(p, _V4.as_pointer(p.type.addrspace)), align=16)
            return context.get_dummy_value()

        return signature(ntypes.none, a, i, x), codegen

    @intrinsic
    def pf1(typingctx, a, i):
        """``prefetch.global.L1`` of the line holding ``a[i]`` (no register result, no
        effect on any value)."""
        if not _ok(a, i):
            return None

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig, args)
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [p.type]),
                               "prefetch.global.L1 [$0];", "l", side_effect=True)
            builder.call(asm, [p])
            return context.get_dummy_value()

        return signature(ntypes.none, a, i), codegen


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


# --- kernel 2: the sequential state pass (steps 6-8 of chunked) --------------------------

@_dev
def dot_h(scr, p, stride, hs, ph, n, ncg):
    """``acc_c = 0; for t = 0 .. n-1: acc_c = fma(scr[p + t*stride], hs[ph + t*VS + c], acc_c)``
    for the ``4 * ncg`` columns c (ncg <= 3; one scr load feeds every column); three
    4-tuples."""
    a0 = (ZERO, ZERO, ZERO, ZERO)
    a1 = a0
    a2 = a0
    t = 0
    if ncg == 3:
        while t < n:
            x = ld1(scr, p)
            a0 = fma4(x, ld4(hs, ph), a0)
            a1 = fma4(x, ld4(hs, ph + 4), a1)
            a2 = fma4(x, ld4(hs, ph + 8), a2)
            p += stride
            ph += VS
            t += 1
    elif ncg == 2:
        while t < n:
            x = ld1(scr, p)
            a0 = fma4(x, ld4(hs, ph), a0)
            a1 = fma4(x, ld4(hs, ph + 4), a1)
            p += stride
            ph += VS
            t += 1
    else:
        while t < n:
            a0 = fma4(ld1(scr, p), ld4(hs, ph), a0)
            p += stride
            ph += VS
            t += 1
    return a0, a1, a2


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
    return (x[0] * s, x[1] * s, x[2] * s, x[3] * s)


@_dev
def sub4(a, b):
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3])


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
    n = items[it, 0]
    hv = items[it, 1]
    c0 = items[it, 2]
    w = items[it, 3]
    bb = seqs[n, 0]
    bos = seqs[n, 1]
    ln = seqs[n, 2]
    HV = o.shape[2]
    V = o.shape[3]
    hq = hv // (HV // H)
    KC = K * C
    sb = items[it, 4] * np.int64(F)          # first float of the sequence's first slot
    o_qs = hq * 2 * KC + KC
    o_w = H * 2 * KC + hv * (2 * KC + C * V + C * C + C)
    o_kd = o_w + KC
    o_u = o_w + 2 * KC
    o_p = o_u + C * V
    o_g = o_p + C * C
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
        e = tid
        while e < nkc:
            pf1(scr, sb + o_kd + 32 * e)
            e += nthr
        e = tid
        while e < (C * C) // 32:
            pf1(scr, sb + o_p + 32 * e)
            e += nthr
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


def gdn_split_state_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K):
    hs = cuda.shared.array(N_HS, np.float32, SHARED_ALIGN)   # h[:, c0 : c0 + w]
    vn = cuda.shared.array(N_VS, np.float32, SHARED_ALIGN)   # vn of the chunk
    oq = cuda.shared.array(N_VS, np.float32, SHARED_ALIGN)   # qh * gamma
    state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, scr, F, H, K, cuda.blockIdx.x,
               0, BIG_CHUNK, hs, vn, oq)


def gdn_split_pipe_kernel(q, k, v, g, beta, o, h0, h0_idx, hT, hT_idx, seqs, items, chunks,
                          pitems, scr, hbuf, F, scale, use_l2, n_state, p0, ci_lo, ci_hi):
    """The pipelined form (variant ``chunked_pipe``): CTAs ``b < n_state`` run the state pass
    of item ``b`` over chunks ``ci_lo <= ci < ci_hi``; the others run the pre-pass of items
    ``pitems[p0 + b - n_state]`` (slot, q/k head) of the next group of chunks. Nothing in one
    launch reads what another CTA of the same launch writes."""
    Ms = cuda.shared.array(N_MS, np.float32, SHARED_ALIGN)   # prep: staging, S | G^T; state: h
    Ts = cuda.shared.array(N_TS, np.float32, SHARED_ALIGN)   # prep: D -> A, T^T;   state: vn
    Xs = cuda.shared.array(N_XS, np.float32, SHARED_ALIGN)   # prep: X / Y slab;    state: qh*gamma
    ga = cuda.shared.array(C, np.float32)
    bs = cuda.shared.array(C, np.float32)
    gm = cuda.shared.array(C, np.float32)
    dl = cuda.shared.array(C, np.float32)
    rk = cuda.shared.array(C, np.float32)
    rq = cuda.shared.array(C, np.float32)
    b = cuda.blockIdx.x
    if b < n_state:
        state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, hbuf, F, q.shape[2], q.shape[3],
                   b, ci_lo, ci_hi, Ms, Ts, Xs)
    else:
        e = p0 + b - n_state
        prep_item(q, k, v, g, beta, chunks, scr, F, scale, use_l2, pitems[e, 0], pitems[e, 1],
                  Ms, Ts, Xs, ga, bs, gm, dl, rk, rq)


_prep = cuda.jit(gdn_split_prep_kernel)
_state = cuda.jit(gdn_split_state_kernel)
_pipe = cuda.jit(gdn_split_pipe_kernel)


# --- host side --------------------------------------------------------------------------

def _arr(dt, nd):
    return types.Array(dt, nd, "C")


def _prep_signatures():
    return tuple((_arr(din, 4), _arr(din, 4), _arr(din, 4), _arr(types.float32, 3),
                  _arr(types.float32, 3), _arr(types.int32, 2), _arr(types.float32, 1),
                  types.int32, types.float32, types.int32)
                 for din in (types.float16, types.float32))


def _state_signatures():
    return tuple((_arr(dout, 4), _arr(types.float32, 4), _arr(types.int32, 1),
                  _arr(types.float32, 4), _arr(types.int32, 1), _arr(types.int32, 2),
                  _arr(types.int32, 2), _arr(types.float32, 1), types.int32, types.int32,
                  types.int32)
                 for dout in (types.float16, types.float32))


def _pipe_signatures():
    i32, f32 = types.int32, types.float32
    return tuple((_arr(din, 4), _arr(din, 4), _arr(din, 4), _arr(f32, 3), _arr(f32, 3),
                  _arr(dout, 4), _arr(f32, 4), _arr(i32, 1), _arr(f32, 4), _arr(i32, 1),
                  _arr(i32, 2), _arr(i32, 2), _arr(i32, 2), _arr(i32, 2), _arr(f32, 1),
                  _arr(f32, 1), i32, f32, i32, i32, i32, i32, i32)
                 for din, dout in ((types.float16, types.float16), (types.float16, types.float32),
                                   (types.float32, types.float32)))


def choose_cols(n_active: int, HV: int, V: int, sms: int) -> int:
    """State columns per CTA: the width (multiple of 4, at most 12) that minimises the
    per-SM column load ``ceil(ctas / sms) * w`` with one CTA per SM (ties: the wider)."""
    if COLS:
        return max(4, min(VS, V, (COLS // 4) * 4))
    best, best_cost = VS, None
    for w in (12, 8, 4):
        ctas = n_active * HV * (-(-V // w))
        cost = (-(-ctas // max(1, sms))) * w
        if best_cost is None or cost < best_cost:
            best, best_cost = w, cost
    return best


def _tables(plan: GdnPlan, stream):
    seqs = plan.seqs.copy_to_host(stream=stream)
    if stream != 0:
        stream.synchronize()
    seqs = np.asarray(seqs).reshape(-1, 3).astype(np.int64)
    N = seqs.shape[0]
    nch = (seqs[:, 2] + C - 1) // C
    slot0 = np.zeros(N, dtype=np.int64)
    if N:
        slot0[1:] = np.cumsum(nch)[:-1]
    nslots = int(nch.sum())
    chunks = np.zeros((max(nslots, 1), 3), dtype=np.int32)
    for n in range(N):
        ci = np.arange(int(nch[n]))
        s = slot0[n] + ci
        chunks[s, 0] = seqs[n, 0]
        chunks[s, 1] = seqs[n, 1] + ci * C
        chunks[s, 2] = np.minimum(C, seqs[n, 2] - ci * C)
    w = choose_cols(int(np.count_nonzero(seqs[:, 2] > 0)) or N, plan.HV, plan.V,
                    default_max_ctas())
    order = np.argsort(-seqs[:, 2], kind="stable")
    rows = [(n, hv, c0, min(w, plan.V - c0), slot0[n])
            for n in order for hv in range(plan.HV) for c0 in range(0, plan.V, w)]
    items = np.array(rows, dtype=np.int64).reshape(-1, 5).astype(np.int32)
    return chunks, nslots, items, w


def fit_threads(kernel, args, want: int) -> int:
    """``want`` threads, or fewer (whole warps) if the kernel compiled for ``args`` (with the
    package's exact-FP32 flags, as the launch will) uses too many registers for ``want``
    threads on one SM; compiling here also keeps compilation out of the first launch."""
    if SIMULATOR:
        return want
    try:
        argtypes = tuple(kernel.typeof_pyval(a) for a in args)
        with exact_fp32():
            regs = int(kernel.compile(argtypes).regs_per_thread)
    except Exception:        # pragma: no cover - leave the launch to report it
        return want
    per_warp = -(-regs * 32 // 256) * 256
    return max(32, min(want, (65536 // per_warp) * 32))


def prepare(plan: GdnPlan, stream) -> None:
    """Plan time: the chunk and item tables and the global scratch (every launch after
    this allocates nothing, so it can be captured in a CUDA graph)."""
    chunks, nslots, items, w = _tables(plan, stream)
    F = slot_floats(plan.H, plan.HV, plan.K, plan.V)
    if SIMULATOR:
        sthreads = SIM_STATE_THREADS
        # (the simulator's uninitialised memory could hold anything; the partial 4-row
        # tiles read rows past L that are never stored, so give them zeros there)
        scr = cuda.to_device(np.zeros(max(nslots, 1) * F, dtype=np.float32), stream=stream)
    else:
        sthreads = STATE_THREADS or 128 * (w // 4)
        scr = cuda.device_array(max(nslots, 1) * F, dtype=np.float32, stream=stream)
    if plan.threads:
        sthreads = plan.threads
    sthreads = max(1, min(MAX_STATE_THREADS, sthreads))
    d_items = cuda.to_device(items, stream=stream)
    sthreads = fit_threads(_state, (plan.o, plan.h0, plan.h0_idx, plan.hT, plan.hT_idx,
                                    plan.seqs, d_items, scr, np.int32(F), np.int32(plan.H),
                                    np.int32(plan.K)), sthreads)
    plan.scratch = SimpleNamespace(
        chunks=cuda.to_device(chunks, stream=stream), items=d_items,
        scr=scr, F=np.int32(F), nslots=nslots, n_items=int(items.shape[0]), cols=w,
        state_threads=sthreads, prep_threads=PREP_THREADS)


def run(plan: GdnPlan, stream) -> None:
    if plan.n_items == 0:
        return
    if plan.scratch is None:
        prepare(plan, stream)
    s = plan.scratch
    if s.nslots:
        _registry.launch(PREP_NAME, _prep, s.nslots * plan.H, s.prep_threads, stream,
                         plan.q, plan.k, plan.v, plan.g, plan.beta, s.chunks, s.scr, s.F,
                         plan.scale, plan.use_l2)
    _registry.launch(STATE_NAME, _state, s.n_items, s.state_threads, stream,
                     plan.o, plan.h0, plan.h0_idx, plan.hT, plan.hT_idx, plan.seqs, s.items,
                     s.scr, s.F, np.int32(plan.H), np.int32(plan.K))


def supports(plan: GdnPlan) -> None:
    if plan.K > MAXD or plan.V > MAXD or plan.K % SW or plan.V % SW:
        raise _registry.UnsupportedShape(
            f"chunked_split: K={plan.K}, V={plan.V} not in {{32, 64, 128}}")


VARIANT = _registry.register(_registry.Variant(
    name="chunked_split",
    family="gdn",
    description="chunked (C = 64), bit-identical: parallel pre-pass over (chunk, q/k head) "
                "for steps 1-5 (G/S shared by the value heads, column-wise forward "
                "substitution, 4x4 register tiles) into global scratch, then a sequential "
                "state pass per (sequence, value head, <= 12 columns), 2 barriers per chunk",
    contract="B (GDN prefill), chunked family: bit-identical to chunked",
    kernels=(_registry.KernelSpec(PREP_NAME, gdn_split_prep_kernel, _prep_signatures()),
             _registry.KernelSpec(STATE_NAME, gdn_split_state_kernel, _state_signatures())),
    run=run,
    supports=supports,
    bitwise_reference="chunked",
    prepare=prepare,
))
