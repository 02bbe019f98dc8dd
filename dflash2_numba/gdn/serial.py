"""GDN prefill, the ``serial`` family: the token recurrence of contract B in FP32.

Design
------
One CTA per work item (sequence ``n``, value head ``hv``, block of ``VB = 32`` state
columns ``c0 .. c0+31``); 32 threads, thread ``c`` owns state column ``c0 + c``. The
columns of the state evolve independently (the key side ``k``, ``q``, ``g``, ``beta`` is
shared by every column), so a CTA needs only its ``[K, 32]`` slice of the state, kept in
shared memory. Grid: ``N * HV * V/32`` CTAs (1-D, one per row of the work table, longest
sequences first). Tokens are taken in groups of ``TG = 16``: the group's k and q rows are
staged in shared memory (coalesced), their norms computed in parallel (one thread per
row), the rows normalised in place, and then every thread runs the recurrence of its
column through the group's tokens with no further barrier. Shared: ``hs[128][32]`` (the
state slice), ``kg, qg [16][129]`` (padded rows), ``a, beta, r`` (33,152 B); four
barriers per group of 16 tokens.

FP32 operation order (frozen; ``fma`` = ``cuda.fma``, one rounding; ``E`` = ``expf``)
-------------------------------------------------------------------------------------
Per token ``t`` of the sequence, in order (q/k head ``hq = hv // (HV/H)``; inputs read as
FP32, fp16 converts exactly):

1. Row normalisation: ``ss = 0; for m = 0..K-1: ss = fma(k_m, k_m, ss)``;
   ``r_k = 1 / sqrt(ss + 1e-6)`` (add, IEEE sqrt, IEEE division; ``r_k = 1`` without
   ``use_qk_l2norm``); the same for q. ``kn_m = k_m * r_k``;  ``qs_m = (q_m * r_q) * scale``.
2. ``a = E(min(g_t, 0))``.
3. Per column c: ``hk = 0``; for m = 0..K-1 ascending: ``h[m,c] = h[m,c] * a``;
   ``hk = fma(h[m,c], kn_m, hk)``.
4. ``u = beta_t * (v_t[c] - hk)`` (subtract, then multiply).
5. ``o = 0``; for m = 0..K-1 ascending: ``h[m,c] = fma(kn_m, u, h[m,c])``;
   ``o = fma(h[m,c], qs_m, o)``.  ``o_t[c] = o`` (cast to the output dtype, RNE).

The state starts from the initial state (or zeros) and the final ``h`` is the final state.
The row normalisation is the same as the chunked family's (identical ``kn``, ``qs`` bits).
:func:`dflash2_numba.gdn.emulate.serial_emulate` is this order in numpy.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _registry
from .._compat import cuda
from ._common import EPS, F32, MAXD, ONE, VB, ZERO, GdnPlan, kernel_signatures

KERNEL_NAME = "gdn_serial_fwd"
THREADS = VB
TG = 16                  # tokens staged per group
MAXDP1 = MAXD + 1        # padded row length of the staged rows
TG2 = 2 * TG


def gdn_serial_kernel(q, k, v, g, beta, o, h0, h0_idx, hT, hT_idx, seqs, work, scale, use_l2):
    """The frozen kernel of contract.md part B's ``serial`` family: the token recurrence in
    the FP32 order of the module docstring (steps 1-5), for work item ``blockIdx.x``
    (sequence, value head, 32 state columns). The family's reference: a variant of it
    must reproduce this kernel's output and final state bit for bit."""
    hs = cuda.shared.array((MAXD, VB), dtype=np.float32)    # state slice h[:, c0:c0+VB]
    kg = cuda.shared.array((TG, MAXDP1), dtype=np.float32)  # k rows of the group -> kn
    qg = cuda.shared.array((TG, MAXDP1), dtype=np.float32)  # q rows of the group -> qs
    ag = cuda.shared.array(TG, dtype=np.float32)            # a = E(min(g, 0))
    bg = cuda.shared.array(TG, dtype=np.float32)            # beta
    rr = cuda.shared.array(TG2, dtype=np.float32)           # r_k (0..TG-1), r_q (TG..)

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

    for tb in range(bos, bos + ln, TG):
        nt = min(TG, bos + ln - tb)
        # stage the group's rows and scalars
        for e in range(tid, nt * K, nthr):
            j = e // K
            m = e - j * K
            kg[j, m] = F32(k[bb, tb + j, hq, m])
            qg[j, m] = F32(q[bb, tb + j, hq, m])
        for j in range(tid, nt, nthr):
            gt = F32(g[bb, tb + j, hv])
            if gt > ZERO:
                gt = ZERO
            ag[j] = F32(math.exp(gt))
            bg[j] = F32(beta[bb, tb + j, hv])
        cuda.syncthreads()
        # step 1: row norms (one thread per row)
        for r in range(tid, 2 * nt, nthr):
            rv = ONE
            if use_l2 != 0:
                ss = ZERO
                if r < nt:
                    for m in range(K):
                        x = kg[r, m]
                        ss = cuda.fma(x, x, ss)
                else:
                    for m in range(K):
                        x = qg[r - nt, m]
                        ss = cuda.fma(x, x, ss)
                rv = ONE / F32(math.sqrt(ss + EPS))
            if r < nt:
                rr[r] = rv
            else:
                rr[TG + r - nt] = rv
        cuda.syncthreads()
        for e in range(tid, nt * K, nthr):
            j = e // K
            m = e - j * K
            kg[j, m] = kg[j, m] * rr[j]
            qg[j, m] = (qg[j, m] * rr[TG + j]) * scale
        cuda.syncthreads()
        # steps 2-5: the recurrence, one thread per column, tokens in order
        if tid < VB:
            c = tid
            for j in range(nt):
                a = ag[j]
                hk = ZERO
                for m in range(K):
                    hm = hs[m, c] * a
                    hs[m, c] = hm
                    hk = cuda.fma(hm, kg[j, m], hk)
                u = bg[j] * (F32(v[bb, tb + j, hv, c0 + c]) - hk)
                acc = ZERO
                for m in range(K):
                    hm = cuda.fma(kg[j, m], u, hs[m, c])
                    hs[m, c] = hm
                    acc = cuda.fma(hm, qg[j, m], acc)
                o[bb, tb + j, hv, c0 + c] = acc
        cuda.syncthreads()

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
