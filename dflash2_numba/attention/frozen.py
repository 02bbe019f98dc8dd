"""Frozen q8 verification attention: a straight reading of contract part A.

Keeps: contract A exactly (K16 compensated scores, N32 online softmax with the
pairwise tile sum, probability + residual PV in two 16-key halves, the FP32 split
workspace, the combine). Every later attention variant must reproduce this
variant's FP16 output, ``partial`` and ``lse`` byte for byte.

Split kernel: one CTA of 256 threads per (split s, request b, query head h); grid
``(S, B, Hq)``; CTAs with ``s >= A`` return at once. Thread ``tid`` plays two roles:
  * score role: row ``t = tid // 32`` (t < Q) and tile key ``jj = tid % 32``;
  * column role: output columns ``d = tid, tid + 256, ...`` (D <= 256 -> one column).
Per 32-key tile the CTA stages the raw E4M3 bytes of K and V in shared memory
(K rows padded to avoid bank conflicts; keys past T, or past the table, are zero
bytes and never visible), decodes them through a 256-entry shared table, computes
the scores (score role), the tile max and new running max (one thread per row),
the probabilities with their FP16 hi/lo split (score role), the pairwise tile sum
and the running (m, l) update (one thread per row, in the contract's tree order),
then the PV accumulation (column role, the contract's j order). The running
numerator O lives in shared memory, owned column-wise by one thread.

Combine kernel: one CTA of 256 threads per (b, t, h); each thread owns columns
``d = tid, tid + 256, ...`` and recomputes the (cheap) split weights itself, so no
cross-thread state exists; division is IEEE ``1/Dn``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import types

from .._compat import cuda
from .._registry import KernelSpec, Variant, launch, register
from ..contract import (EXP_CLAMP, HALF_TILE, K_SLICE, LIVE_M_THRESHOLD, MAX_Q, NEG_INF,
                        RESIDUAL_SCALE, RESIDUAL_UNSCALE, TILE_KEYS)
from ._device import (active_split_count, request_keys, row_length, split_first_tile,
                      split_tile_count)

THREADS = 256
MAX_D = 256
K_ROW_BYTES = 260        # K byte rows are MAX_D + 4 bytes apart in shared memory (no bank conflicts)

F32_ZERO = np.float32(0.0)
F32_ONE = np.float32(1.0)


@cuda.jit
def split_kernel(q, k_cache, v_cache, block_table, seq_lens, row_lengths, use_rows,
                 page_size, splits, qk_scale, v_scale, decode_table, partial, lse):
    """Split step of contract.md part A, the frozen reference (sections "Split schedule",
    "E4M3FN decode", "Score", "N32 online softmax and PV", "Workspace"): the CTA of (split
    s, request b, query head h) writes split s's ``partial`` and ``lse``. Every attention
    variant's split kernel must reproduce these bytes (module docstring)."""
    s = cuda.blockIdx.x
    b = cuda.blockIdx.y
    h = cuda.blockIdx.z
    tid = cuda.threadIdx.x
    Q = q.shape[1]
    Hq = q.shape[2]
    D = q.shape[3]
    num_pages = k_cache.shape[0]
    Hkv = k_cache.shape[2]
    W = block_table.shape[1]
    hk = h // (Hq // Hkv)

    T = request_keys(seq_lens, row_lengths, use_rows, b, Q)
    A = active_split_count(T, splits)
    if s >= A:
        return
    first = split_first_tile(T, A, s)
    count = split_tile_count(T, A, s)

    tab = cuda.shared.array(256, np.float32)
    q_s = cuda.shared.array((MAX_Q, MAX_D), np.float32)
    k_s = cuda.shared.array((TILE_KEYS, K_ROW_BYTES), np.uint8)
    v_s = cuda.shared.array((TILE_KEYS, MAX_D), np.uint8)
    x_s = cuda.shared.array((MAX_Q, TILE_KEYS), np.float32)     # scores, then tree scratch
    hi_s = cuda.shared.array((MAX_Q, TILE_KEYS), np.float32)
    lo_s = cuda.shared.array((MAX_Q, TILE_KEYS), np.float32)
    o_s = cuda.shared.array((MAX_Q, MAX_D), np.float32)
    m_s = cuda.shared.array(MAX_Q, np.float32)
    l_s = cuda.shared.array(MAX_Q, np.float32)
    mnew_s = cuda.shared.array(MAX_Q, np.float32)
    alpha_s = cuda.shared.array(MAX_Q, np.float32)
    len_s = cuda.shared.array(MAX_Q, np.int64)         # L[b, t] of every row

    for i in range(tid, 256, THREADS):
        tab[i] = decode_table[i]
    for idx in range(tid, Q * D, THREADS):
        t = idx // D
        i = idx - t * D
        q_s[t, i] = np.float32(q[b, t, h, i])
    for idx in range(tid, MAX_Q * MAX_D, THREADS):
        t = idx // MAX_D
        o_s[t, idx - t * MAX_D] = F32_ZERO
    if tid < MAX_Q:
        m_s[tid] = NEG_INF
        l_s[tid] = F32_ZERO
        len_s[tid] = 0
        if tid < Q:
            len_s[tid] = row_length(seq_lens, row_lengths, use_rows, b, tid, Q)

    row = tid // TILE_KEYS           # score role
    jj = tid - row * TILE_KEYS
    my_len = 0
    if row < Q:
        my_len = row_length(seq_lens, row_lengths, use_rows, b, row, Q)
    cuda.syncthreads()

    for tile in range(first, first + count):
        key0 = tile * TILE_KEYS
        # ---- stage the tile's K and V bytes (zero bytes for keys past T) ----
        for idx in range(tid, TILE_KEYS * D, THREADS):
            kj = idx // D
            i = idx - kj * D
            j = key0 + kj
            kb = np.uint8(0)
            vb = np.uint8(0)
            if j < T:
                col = j // page_size
                if col < W:
                    page = block_table[b, col]
                    if page >= 0 and page < num_pages:
                        slot = j - col * page_size
                        kb = k_cache[page, slot, hk, i]
                        vb = v_cache[page, slot, hk, i]
            k_s[kj, i] = kb
            v_s[kj, i] = vb
        cuda.syncthreads()

        # ---- scores: K16 slices, Kahan across slices ----
        if row < Q:
            x = NEG_INF
            if key0 + jj < my_len:
                acc = F32_ZERO
                comp = F32_ZERO
                for sl in range(D // K_SLICE):
                    u = F32_ZERO
                    for i in range(sl * K_SLICE, sl * K_SLICE + K_SLICE):
                        u = cuda.fma(q_s[row, i], tab[k_s[jj, i]], u)
                    y = u - comp
                    w = acc + y
                    comp = (w - acc) - y
                    acc = w
                x = acc * qk_scale
            x_s[row, jj] = x
        cuda.syncthreads()

        # ---- tile max and new running max, one thread per row ----
        if row < Q and jj == 0:
            tmax = x_s[row, 0]
            for c in range(1, TILE_KEYS):
                tmax = max(tmax, x_s[row, c])
            mnew_s[row] = max(m_s[row], tmax)
        cuda.syncthreads()

        # ---- probabilities and their FP16 hi / residual lo ----
        if row < Q:
            p = F32_ZERO
            if key0 + jj < my_len:
                p = np.float32(math.exp(max(x_s[row, jj] - mnew_s[row], EXP_CLAMP)))
            hi = np.float32(np.float16(p))
            lo = np.float32(np.float16((p - hi) * RESIDUAL_SCALE))
            hi_s[row, jj] = hi
            lo_s[row, jj] = lo
            x_s[row, jj] = p
        cuda.syncthreads()

        # ---- pairwise tile sum and (m, l) update, one thread per row ----
        if row < Q and jj == 0:
            width = TILE_KEYS // 2
            while width >= 1:
                for c in range(width):
                    x_s[row, c] = x_s[row, c] + x_s[row, c + width]
                width //= 2
            tsum = x_s[row, 0]
            alpha = F32_ONE
            if tsum > F32_ZERO:
                mnew = mnew_s[row]
                alpha = np.float32(math.exp(max(m_s[row] - mnew, EXP_CLAMP)))
                l_s[row] = cuda.fma(l_s[row], alpha, tsum)
                m_s[row] = mnew
            alpha_s[row] = alpha
        cuda.syncthreads()

        # ---- PV: probability then residual, two halves of 16 keys ----
        # A key the row does not see contributes V = 0 (its p is 0 anyway): the same bits
        # for finite V, and a NaN byte reaches only the rows that see its key.
        for d in range(tid, D, THREADS):
            for t in range(Q):
                seen = len_s[t] - key0
                acc = F32_ZERO
                for half in range(0, TILE_KEYS, HALF_TILE):
                    for j in range(half, half + HALF_TILE):
                        vv = tab[v_s[j, d]] if j < seen else F32_ZERO
                        acc = cuda.fma(hi_s[t, j], vv, acc)
                    for j in range(half, half + HALF_TILE):
                        vv = tab[v_s[j, d]] if j < seen else F32_ZERO
                        acc = cuda.fma(lo_s[t, j], vv * RESIDUAL_UNSCALE, acc)
                o_s[t, d] = cuda.fma(o_s[t, d], alpha_s[t], acc)
        cuda.syncthreads()

    # ---- the split's record: numerator * v_scale (0 when l == 0), (m, l) ----
    for d in range(tid, D, THREADS):
        for t in range(Q):
            f = v_scale if l_s[t] > F32_ZERO else F32_ZERO
            partial[b, s, t, h, d] = o_s[t, d] * f
    if tid < Q:
        live = l_s[tid] > F32_ZERO
        lse[b, s, tid, h, 0] = m_s[tid] if live else NEG_INF
        lse[b, s, tid, h, 1] = l_s[tid]


@cuda.jit
def combine_kernel(seq_lens, row_lengths, use_rows, splits, partial, lse, out):
    """Combine step of contract.md part A, the frozen reference (section "Combine"): the
    CTA of (b, t, h) reduces the splits' workspace into ``out``. ``combine_batched``'s
    kernel must reproduce these bytes; the tiled variants run this one for plans above
    ``combine_batched.MAX_SPLITS`` splits."""
    b = cuda.blockIdx.x
    t = cuda.blockIdx.y
    h = cuda.blockIdx.z
    tid = cuda.threadIdx.x
    Q = out.shape[1]
    D = out.shape[3]
    L = row_length(seq_lens, row_lengths, use_rows, b, t, Q)
    if L <= 0:
        for d in range(tid, D, THREADS):
            out[b, t, h, d] = F32_ZERO
        return
    T = request_keys(seq_lens, row_lengths, use_rows, b, Q)
    A = active_split_count(T, splits)
    M = NEG_INF
    for s in range(A):
        M = max(M, lse[b, s, t, h, 0])
    for d in range(tid, D, THREADS):
        den = F32_ZERO
        for s in range(A):
            ms = lse[b, s, t, h, 0]
            if ms > LIVE_M_THRESHOLD:
                ws = np.float32(math.exp(max(ms - M, EXP_CLAMP)))
                den = cuda.fma(ws, lse[b, s, t, h, 1], den)
        inv = F32_ZERO
        if den > F32_ZERO:
            inv = F32_ONE / den
        acc = F32_ZERO
        for s in range(A):
            ms = lse[b, s, t, h, 0]
            if ms > LIVE_M_THRESHOLD:
                ws = np.float32(math.exp(max(ms - M, EXP_CLAMP)))
                acc = cuda.fma(ws * inv, partial[b, s, t, h, d], acc)
        out[b, t, h, d] = acc


def run(plan, stream) -> None:
    """Launch split then combine for an :class:`AttentionPlan` on ``stream``."""
    B, _, Hq, _ = plan.q_shape
    launch("attention.frozen.split", split_kernel, (plan.splits, B, Hq), THREADS, stream,
           plan.q, plan.k_cache, plan.v_cache, plan.block_table, plan.seq_lens,
           plan.row_lengths, plan.use_rows, plan.page_size, plan.splits,
           plan.qk_scale, plan.v_scale, plan.decode_table, plan.partial, plan.lse)
    launch_combine(plan, stream, "attention.frozen.combine")


def launch_combine(plan, stream, name: str) -> None:
    """The combine step of ``plan`` (its workspace into its output) on ``stream``, counted
    under ``name``. The register-tiled variants launch ``combine_batched``'s (the same
    bits), and this one only for plans above its ``MAX_SPLITS`` splits."""
    B, Q, Hq, _ = plan.q_shape
    launch(name, combine_kernel, (B, Q, Hq), THREADS, stream,
           plan.seq_lens, plan.row_lengths, plan.use_rows, plan.splits,
           plan.partial, plan.lse, plan.out)


def _signatures():
    f16_4 = types.Array(types.float16, 4, "A")
    u8_4 = types.Array(types.uint8, 4, "A")
    i32_1 = types.Array(types.int32, 1, "A")
    i32_2 = types.Array(types.int32, 2, "A")
    f32_1 = types.Array(types.float32, 1, "C")
    f32_5 = types.Array(types.float32, 5, "C")
    split = ((f16_4, u8_4, u8_4, i32_2, i32_1, i32_2, types.int64, types.int64, types.int64,
              types.float32, types.float32, f32_1, f32_5, f32_5),)
    combine = tuple((i32_1, i32_2, types.int64, types.int64, f32_5, f32_5,
                     types.Array(dt, 4, "C")) for dt in (types.float16, types.float32))
    return split, combine


_split_sigs, _combine_sigs = _signatures()

VARIANT = register(Variant(
    name="frozen",
    family="attention",
    description="straight reading of the contract: one 256-thread CTA per (split, request, "
                "query head), K/V bytes staged per 32-key tile, O in shared memory",
    contract="A (q8 verification attention); the reference all attention variants match bitwise",
    kernels=(KernelSpec("attention.frozen.split", split_kernel.py_func, _split_sigs),
             KernelSpec("attention.frozen.combine", combine_kernel.py_func, _combine_sigs)),
    run=run,
))
