"""GDN prefill, the ``serial`` family: the token recurrence of contract B in FP32.

Design
------
One CTA per work item (sequence ``n``, value head ``hv``, block of ``VB = 32`` state
columns ``c0 .. c0+31``); 32 threads, thread ``c`` owns state column ``c0 + c``. The
columns of the state evolve independently (the key side ``k``, ``q``, ``g``, ``beta`` is
shared by every column), so a CTA needs only its ``[K, 32]`` slice of the state, kept in
shared memory (``hs``, 16 KiB at K = 128). Grid: ``N * HV * V/32`` CTAs (1-D, one per row
of the work table, longest sequences first). Shared: ``hs[128][32]``, ``kn[128]``,
``qs[128]``, ``r[2]`` (17 KiB). Per token: three barriers.

FP32 operation order (frozen; ``fma`` = ``cuda.fma``, one rounding; ``E`` = ``expf``)
-------------------------------------------------------------------------------------
Per token ``t`` of the sequence, in order (q/k head ``hq = hv // (HV/H)``):

1. Row normalisation (thread 0 for k, thread 1 for q; :func:`._common.row_recip`):
   ``ss = 0; for m = 0..K-1: ss = fma(k_m, k_m, ss)``; ``r_k = 1 / sqrt(ss + 1e-6)``
   (add, IEEE sqrt, IEEE division; ``r_k = 1`` without ``use_qk_l2norm``); the same for q.
   ``kn_m = k_m * r_k``;  ``qs_m = (q_m * r_q) * scale``.
2. ``a = E(min(g_t, 0))``.
3. Per column c: ``hk = 0``; for m = 0..K-1 ascending: ``h[m,c] = h[m,c] * a``;
   ``hk = fma(h[m,c], kn_m, hk)``.
4. ``u = beta_t * (v_t[c] - hk)`` (subtract, then multiply).
5. ``o = 0``; for m = 0..K-1 ascending: ``h[m,c] = fma(kn_m, u, h[m,c])``;
   ``o = fma(h[m,c], qs_m, o)``.  ``o_t[c] = o`` (cast to the output dtype, RNE).

The state starts from the initial state (or zeros) and the final ``h`` is the final state.
:func:`dflash2_numba.gdn.emulate.serial_emulate` is this order in numpy.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _registry
from .._compat import cuda
from ._common import F32, MAXD, VB, ZERO, GdnPlan, kernel_signatures, row_recip

KERNEL_NAME = "gdn_serial_fwd"
THREADS = VB


def gdn_serial_kernel(q, k, v, g, beta, o, h0, h0_idx, hT, hT_idx, seqs, work, scale, use_l2):
    hs = cuda.shared.array((MAXD, VB), dtype=np.float32)   # state slice h[:, c0:c0+VB]
    kn = cuda.shared.array(MAXD, dtype=np.float32)         # normalised k_t
    qs = cuda.shared.array(MAXD, dtype=np.float32)         # normalised, scaled q_t
    rr = cuda.shared.array(2, dtype=np.float32)            # r_k, r_q

    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    item = cuda.blockIdx.x
    n = work[item, 0]
    hv = work[item, 1]
    c0 = work[item, 2]
    bb = seqs[n, 0]
    bos = seqs[n, 1]
    ln = seqs[n, 2]
    K = q.shape[3]
    hq = hv // (v.shape[2] // q.shape[2])

    i0 = h0_idx[n]
    for e in range(tid, K * VB, nthr):
        m = e // VB
        c = e - m * VB
        if i0 >= 0:
            hs[m, c] = h0[i0, hv, m, c0 + c]
        else:
            hs[m, c] = ZERO
    cuda.syncthreads()

    for t in range(bos, bos + ln):
        if tid == 0:
            rr[0] = row_recip(k, bb, t, hq, K, use_l2)
        if tid == 1:
            rr[1] = row_recip(q, bb, t, hq, K, use_l2)
        cuda.syncthreads()
        rk = rr[0]
        rq = rr[1]
        for m in range(tid, K, nthr):
            kn[m] = F32(k[bb, t, hq, m]) * rk
            qs[m] = (F32(q[bb, t, hq, m]) * rq) * scale
        cuda.syncthreads()
        if tid < VB:
            c = tid
            gt = F32(g[bb, t, hv])
            if gt > ZERO:
                gt = ZERO
            a = F32(math.exp(gt))
            hk = ZERO
            for m in range(K):
                hm = hs[m, c] * a
                hs[m, c] = hm
                hk = cuda.fma(hm, kn[m], hk)
            u = F32(beta[bb, t, hv]) * (F32(v[bb, t, hv, c0 + c]) - hk)
            acc = ZERO
            for m in range(K):
                hm = cuda.fma(kn[m], u, hs[m, c])
                hs[m, c] = hm
                acc = cuda.fma(hm, qs[m], acc)
            o[bb, t, hv, c0 + c] = acc
        cuda.syncthreads()

    i1 = hT_idx[n]
    if i1 >= 0:
        for e in range(tid, K * VB, nthr):
            m = e // VB
            c = e - m * VB
            hT[i1, hv, m, c0 + c] = hs[m, c]


_kernel = cuda.jit(gdn_serial_kernel)


def run(plan: GdnPlan, stream) -> None:
    if plan.n_items == 0:
        return
    _registry.launch(KERNEL_NAME, _kernel, plan.n_items, THREADS, stream,
                     plan.q, plan.k, plan.v, plan.g, plan.beta, plan.o,
                     plan.h0, plan.h0_idx, plan.hT, plan.hT_idx, plan.seqs, plan.work,
                     plan.scale, plan.use_l2)


def supports(plan: GdnPlan) -> None:
    if plan.K > MAXD or plan.V % VB != 0 or plan.V > MAXD:
        raise _registry.UnsupportedShape(f"serial: K={plan.K}, V={plan.V} not in {{32, 64, 128}}")


VARIANT = _registry.register(_registry.Variant(
    name="serial",
    family="gdn",
    description="token-by-token FP32 recurrence; CTA = (sequence, value head, 32 state columns), "
                "state slice in shared memory, thread = state column",
    contract="B (GDN prefill), serial family (frozen FP32 order in gdn/serial.py)",
    kernels=(_registry.KernelSpec(KERNEL_NAME, gdn_serial_kernel, kernel_signatures(False)),),
    run=run,
    supports=supports,
))
