"""GDN prefill, the ``chunked`` family (frozen kernel): chunks of C = 64 tokens, the unit
lower-triangular solve, W and U, a sequential per-chunk state pass and the output, all in
FP32 with the operation order written down below. Every optimised variant of this family
must reproduce that order bit for bit (output and final state);
:func:`dflash2_numba.gdn.emulate.chunked_emulate` is the same order in numpy.

Notation
--------
``+ - *`` FP32 round-to-nearest-even; ``fma(a, b, c)`` one rounding (``cuda.fma``);
``E(x)`` the FP32 ``math.exp`` of an FP32 argument (device ``expf``). Per sequence ``n``
and value head ``hv`` (q/k head ``hq = hv // (HV/H)``), the sequence is cut into chunks of
``C = 64`` tokens from its first token; each chunk has ``L = min(64, tokens left)``
tokens (only the last one can be partial). Inside a chunk ``i, j`` are 0-based token indices and
``m`` runs over K, ``c`` over V. Inputs are read as FP32 (fp16 converts exactly).
``h`` is the FP32 ``[K, V]`` state at the chunk start (the initial state, or zeros,
for the first chunk). Every sum below starts from the value named and adds its terms in
the stated order, one rounding per step.

Operation order (per chunk)
---------------------------
1. Rows. ``r_j = 1 / sqrt(ss_j + 1e-6)`` with ``ss_j = 0; for m ascending:
   ss_j = fma(k_jm, k_jm, ss_j)`` (add, IEEE sqrt, IEEE division; ``r_j = 1`` without
   ``use_qk_l2norm``); the same for q, giving ``rq_j``. ``kn_jm = k_jm * r_j``;
   ``qs_jm = (q_jm * rq_j) * scale``. ``g_j = min(g_t, 0)``; ``a_j = E(g_j)``.
2. Decay (multiplicative cumulative decay; only ``E`` of ``g_j <= 0`` is ever formed).
   Row i, backwards from the diagonal: ``p = 1; D_ii = 1``; for ``j = i-1, ..., 0``:
   ``p = p * a_{j+1}; D_ij = p``; then ``gamma_i = p * a_0``.
   (``D_ij = prod_{l=j+1..i} a_l``, ``gamma_i = prod_{l<=i} a_l``.)
3. For ``j < i``: ``G_ij = 0; for m ascending: G_ij = fma(kn_im, kn_jm, G_ij)``;
   ``A_ij = (G_ij * beta_i) * D_ij``.
   For ``j <= i``: ``S_ij = 0; for m ascending: S_ij = fma(qs_im, kn_jm, S_ij)``;
   ``P_ij = S_ij * D_ij``.
   ``X_jm = kn_jm * (beta_j * gamma_j)``;  ``Kd_jm = kn_jm * D_{L-1,j}`` (``D_{L-1,L-1} = 1``).
4. ``T = (I + A)^-1`` (unit lower triangular; only its strictly lower part is stored) by
   forward substitution, rows ``i = 1 .. L-1`` in order, each entry ``m < i``:
   ``t = -A_im; for j = m+1 .. i-1 ascending: t = fma(-A_ij, T_jm, t)``; ``T_im = t``.
5. ``W_im = X_im; for j = 0 .. i-1 ascending: W_im = fma(T_ij, X_jm, W_im)``.
   ``Y_jc = v_jc * beta_j``; ``U_ic = Y_ic; for j = 0 .. i-1 ascending:
   U_ic = fma(T_ij, Y_jc, U_ic)``.
6. State pass (the only sequential dependence between chunks):
   ``wh = 0; for m ascending: wh = fma(W_im, h_mc, wh)``; ``vn_ic = U_ic - wh``.
7. Output: ``qh = 0; for m ascending: qh = fma(qs_im, h_mc, qh)``; ``o = qh * gamma_i``;
   ``for j = 0 .. i ascending: o = fma(P_ij, vn_jc, o)``; ``o_ic = o`` (cast to the output
   dtype, RNE, or kept in FP32 with ``out_dtype="float32"``).
8. State update: ``h'_mc = h_mc * gamma_{L-1}; for j = 0 .. L-1 ascending:
   h'_mc = fma(Kd_jm, vn_jc, h'_mc)``; ``h = h'``. The state after the last chunk is the
   final state (a sequence of length 0 returns its initial state unchanged).

Why products rather than sums of log-decays: ``E(sum g)`` carries an absolute exponent error
``~|sum g| * 2^-24`` (measured 7e-6 relative on beta = 0 cases, against the 1e-5 bound),
while the running product's relative error is ``~(i-j) * 2^-24`` whatever the decay; it is
also cheaper (C exponentials per chunk instead of C^2/2), never exponentiates a positive
number, and underflows gracefully to 0 under strong decay.

Design
------
One CTA per work item (sequence, value head, block of VB = 32 state columns), persistent:
``grid = min(items, SMs)`` CTAs walk the work table (longest sequences first) with a
grid stride; 256 threads on a GPU (64 on the simulator: the order does not depend on the
thread count, every scalar is computed by one thread with a fixed-order loop). The CTA
walks its sequence's chunks in order, recomputing the chunk-local quantities (steps 1-5)
itself; only its 32 columns of U, the state and the output are private to it.
Shared memory (41.5 KiB): ``hs[128][32]`` the state slice; ``Ts[64][65]``: D (lower
incl. diagonal) in steps 2-3, then A stored transposed in the upper triangle
(``Ts[j][i] = A_ij``) and T in the strictly lower triangle; ``Us[64][32]`` U then vn;
``a, beta, gamma, r_k, r_q [64]``. Global scratch per CTA (``scratch[blockIdx.x]``, L2
resident, visible inside the CTA across ``syncthreads``): ``Kn^T, Qs^T, X^T, Kd^T, W^T``
(``[K][64]`` each) and ``P[64][64]``. Barriers per chunk: ``L + 6``.

What an optimised variant may change without changing a bit: the thread mapping, register
tiling (e.g. 4x4 tiles of G, S, W, vn, o, h with the m- or j-loops kept in order), the
column block width, where the intermediates live (shared memory, registers, a separate
pre-pass kernel over all chunks for steps 1-5), the number of kernels. What it may not:
any step's summation order, the fused/unfused choice of any step, the association of the
products (``(G * beta) * D``, ``kn * (beta * gamma)``, ``(q * r) * scale``), or the use of
``E`` on anything but ``min(g, 0)``.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _registry
from .._compat import SIMULATOR, cuda, device_zeros
from ._common import (C, CP1, F32, MAXD, ONE, VB, ZERO, GdnPlan, default_max_ctas,
                      kernel_signatures, row_recip, scratch_floats)

KERNEL_NAME = "gdn_chunked_fwd"
THREADS = 64 if SIMULATOR else 256


def gdn_chunked_kernel(q, k, v, g, beta, o, h0, h0_idx, hT, hT_idx, seqs, work, scratch,
                       scale, use_l2):
    """The frozen kernel of contract.md part B's ``chunked`` family: steps 1-8 of the
    module docstring's FP32 order, persistent CTAs walking the work items (sequence, value
    head, 32 state columns). The family's reference: every ``chunked_*`` variant must
    reproduce this kernel's output and final state bit for bit."""
    hs = cuda.shared.array((MAXD, VB), dtype=np.float32)   # state slice h[:, c0:c0+VB]
    Ts = cuda.shared.array((C, CP1), dtype=np.float32)      # D | A^T (upper) and T (lower)
    Us = cuda.shared.array((C, VB), dtype=np.float32)       # U, then vn
    ga = cuda.shared.array(C, dtype=np.float32)             # a_j = E(g_j)
    bs = cuda.shared.array(C, dtype=np.float32)             # beta_j
    gm = cuda.shared.array(C, dtype=np.float32)             # gamma_j
    rk = cuda.shared.array(C, dtype=np.float32)             # 1 / |k_j|
    rq = cuda.shared.array(C, dtype=np.float32)             # 1 / |q_j|

    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    blk = cuda.blockIdx.x
    K = q.shape[3]
    G = v.shape[2] // q.shape[2]
    # scratch offsets (floats) inside scratch[blk]
    o_kn = 0
    o_qs = K * C
    o_x = 2 * K * C
    o_kd = 3 * K * C
    o_w = 4 * K * C
    o_p = 5 * K * C

    for item in range(blk, work.shape[0], cuda.gridDim.x):
        n = work[item, 0]
        hv = work[item, 1]
        c0 = work[item, 2]
        bb = seqs[n, 0]
        bos = seqs[n, 1]
        ln = seqs[n, 2]
        hq = hv // G

        i0 = h0_idx[n]
        for e in range(tid, K * VB, nthr):
            m = e // VB
            c = e - m * VB
            if i0 >= 0:
                hs[m, c] = h0[i0, hv, m, c0 + c]
            else:
                hs[m, c] = ZERO
        cuda.syncthreads()

        for cs in range(0, ln, C):
            L = min(C, ln - cs)
            t0 = bos + cs

            # ---- step 1a: per-token scalars and row norms
            for j in range(tid, L, nthr):
                gt = F32(g[bb, t0 + j, hv])
                if gt > ZERO:
                    gt = ZERO
                ga[j] = F32(math.exp(gt))
                bs[j] = F32(beta[bb, t0 + j, hv])
            for r in range(tid, 2 * L, nthr):
                if r < L:
                    rk[r] = row_recip(k, bb, t0 + r, hq, K, use_l2)
                else:
                    rq[r - L] = row_recip(q, bb, t0 + r - L, hq, K, use_l2)
            cuda.syncthreads()

            # ---- step 1b: normalised rows (transposed, to scratch); step 2: decay rows
            for e in range(tid, L * K, nthr):
                j = e // K
                m = e - j * K
                scratch[blk, o_kn + m * C + j] = F32(k[bb, t0 + j, hq, m]) * rk[j]
                scratch[blk, o_qs + m * C + j] = (F32(q[bb, t0 + j, hq, m]) * rq[j]) * scale
            for i in range(tid, L, nthr):
                p = ONE
                Ts[i, i] = ONE
                for j in range(i - 1, -1, -1):
                    p = p * ga[j + 1]
                    Ts[i, j] = p
                gm[i] = p * ga[0]
            cuda.syncthreads()

            # ---- step 3: A (to the upper triangle, transposed), P (scratch), X, Kd
            for e in range(tid, L * L, nthr):
                i = e // L
                j = e - i * L
                if j <= i:
                    gacc = ZERO
                    sacc = ZERO
                    for m in range(K):
                        knj = scratch[blk, o_kn + m * C + j]
                        gacc = cuda.fma(scratch[blk, o_kn + m * C + i], knj, gacc)
                        sacc = cuda.fma(scratch[blk, o_qs + m * C + i], knj, sacc)
                    dij = Ts[i, j]
                    scratch[blk, o_p + i * C + j] = sacc * dij
                    if j < i:
                        Ts[j, i] = (gacc * bs[i]) * dij
            for e in range(tid, L * K, nthr):
                m = e // L
                j = e - m * L
                knv = scratch[blk, o_kn + m * C + j]
                scratch[blk, o_x + m * C + j] = knv * (bs[j] * gm[j])
                scratch[blk, o_kd + m * C + j] = knv * Ts[L - 1, j]
            cuda.syncthreads()

            # ---- step 4: T = (I + A)^-1 by forward substitution, one row per barrier
            for i in range(1, L):
                for mm in range(tid, i, nthr):
                    t = -Ts[mm, i]
                    for j in range(mm + 1, i):
                        t = cuda.fma(-Ts[j, i], Ts[j, mm], t)
                    Ts[i, mm] = t
                cuda.syncthreads()

            # ---- step 5: W (scratch, transposed) and U (shared)
            for e in range(tid, L * K, nthr):
                m = e // L
                i = e - m * L
                w = scratch[blk, o_x + m * C + i]
                for j in range(i):
                    w = cuda.fma(Ts[i, j], scratch[blk, o_x + m * C + j], w)
                scratch[blk, o_w + m * C + i] = w
            for e in range(tid, L * VB, nthr):
                i = e // VB
                c = e - i * VB
                u = F32(v[bb, t0 + i, hv, c0 + c]) * bs[i]
                for j in range(i):
                    u = cuda.fma(Ts[i, j], F32(v[bb, t0 + j, hv, c0 + c]) * bs[j], u)
                Us[i, c] = u
            cuda.syncthreads()

            # ---- step 6: vn = U - W h
            for e in range(tid, L * VB, nthr):
                i = e // VB
                c = e - i * VB
                wh = ZERO
                for m in range(K):
                    wh = cuda.fma(scratch[blk, o_w + m * C + i], hs[m, c], wh)
                Us[i, c] = Us[i, c] - wh
            cuda.syncthreads()

            # ---- step 7: output
            for e in range(tid, L * VB, nthr):
                i = e // VB
                c = e - i * VB
                qh = ZERO
                for m in range(K):
                    qh = cuda.fma(scratch[blk, o_qs + m * C + i], hs[m, c], qh)
                acc = qh * gm[i]
                for j in range(i + 1):
                    acc = cuda.fma(scratch[blk, o_p + i * C + j], Us[j, c], acc)
                o[bb, t0 + i, hv, c0 + c] = acc
            cuda.syncthreads()

            # ---- step 8: state update
            gl = gm[L - 1]
            for e in range(tid, K * VB, nthr):
                m = e // VB
                c = e - m * VB
                hh = hs[m, c] * gl
                for j in range(L):
                    hh = cuda.fma(scratch[blk, o_kd + m * C + j], Us[j, c], hh)
                hs[m, c] = hh
            cuda.syncthreads()

        i1 = hT_idx[n]
        if i1 >= 0:
            for e in range(tid, K * VB, nthr):
                m = e // VB
                c = e - m * VB
                hT[i1, hv, m, c0 + c] = hs[m, c]
        cuda.syncthreads()


_kernel = cuda.jit(gdn_chunked_kernel)


def _grid(plan: GdnPlan) -> int:
    cap = plan.max_ctas or default_max_ctas()
    return max(1, min(plan.n_items, cap))


def prepare(plan: GdnPlan, stream) -> None:
    """Allocate the per-CTA scratch once, at plan time (launches then allocate nothing,
    so they can be captured in a CUDA graph)."""
    plan.scratch = device_zeros((_grid(plan), scratch_floats(plan.K)), np.float32, stream)


def run(plan: GdnPlan, stream) -> None:
    if plan.n_items == 0:
        return
    if plan.scratch is None:
        prepare(plan, stream)
    threads = plan.threads or THREADS
    _registry.launch(KERNEL_NAME, _kernel, _grid(plan), threads, stream,
                     plan.q, plan.k, plan.v, plan.g, plan.beta, plan.o,
                     plan.h0, plan.h0_idx, plan.hT, plan.hT_idx, plan.seqs, plan.work,
                     plan.scratch, plan.scale, plan.use_l2)


def supports(plan: GdnPlan) -> None:
    if plan.K > MAXD or plan.V % VB != 0 or plan.V > MAXD:
        raise _registry.UnsupportedShape(f"chunked: K={plan.K}, V={plan.V} not in {{32, 64, 128}}")


VARIANT = _registry.register(_registry.Variant(
    name="chunked",
    family="gdn",
    description="frozen chunked form (C = 64): decay products, (I + A)^-1 by forward "
                "substitution, W/U, per-chunk state pass; persistent CTAs = (sequence, value "
                "head, 32 state columns), 256 threads, FP32 throughout",
    contract="B (GDN prefill), chunked family (frozen FP32 order in gdn/chunked.py)",
    kernels=(_registry.KernelSpec(KERNEL_NAME, gdn_chunked_kernel, kernel_signatures(True)),),
    run=run,
    supports=supports,
    prepare=prepare,
))
