"""Host (numpy) emulation of the FP32 operation order of both GDN families.

This is the written-down operation order of :mod:`.serial` and :mod:`.chunked` made
executable: every rounding of the kernels is reproduced here, vectorised over the
independent elements, with a correctly rounded FP32 fused multiply-add (:func:`fma32`).
On the CUDA simulator (where ``cuda.fma`` is correctly rounded and ``E(x)`` is
``float32(exp(float64(x)))``) the kernels agree with this emulation bit for bit, which is
how the tests prove that the docstrings describe the code. On a GPU the only difference
is ``E``: the device ``expf`` is not always correctly rounded.

No numba here; plain numpy (usable by the screen and by authors of new variants).
"""
from __future__ import annotations

import math

import numpy as np

from .._emulate_ops import exp32, fma32  # noqa: F401  (the emulation's two primitives)
from ..contract import GDN_CHUNK, GDN_L2NORM_EPS

F32 = np.float32
F64 = np.float64


def l2_rows(x, use_l2norm):
    """Row normalisation of both families: ``ss = fma(x_m, x_m, ss)`` for m ascending from 0,
    ``r = 1 / sqrt(ss + eps)``; result ``x * r`` (``r = 1`` without normalisation)."""
    x = np.asarray(x, dtype=F32)
    if not use_l2norm:
        return x.copy()
    ss = np.zeros(x.shape[:-1], dtype=F32)
    for m in range(x.shape[-1]):
        ss = fma32(x[..., m], x[..., m], ss)
    r = F32(1.0) / np.sqrt(ss + GDN_L2NORM_EPS).astype(F32)
    return (x * r[..., None]).astype(F32)


def _sequences(B, T, cu_seqlens):
    if cu_seqlens is None:
        return [(b, 0, T) for b in range(B)]
    cu = np.asarray(cu_seqlens, dtype=np.int64)
    return [(0, int(cu[n]), int(cu[n + 1] - cu[n])) for n in range(len(cu) - 1)]


def _prep(q, k, v, g, beta, scale, use_l2norm):
    q = np.asarray(q).astype(F32)
    k = np.asarray(k).astype(F32)
    v = np.asarray(v).astype(F32)
    g = np.minimum(np.asarray(g, dtype=F32), F32(0))
    beta = np.asarray(beta, dtype=F32)
    K = q.shape[-1]
    scale = F32(K ** -0.5) if scale is None else F32(scale)
    kn = l2_rows(k, use_l2norm)
    qs = (l2_rows(q, use_l2norm) * scale).astype(F32)
    return qs, kn, v, g, beta


def _outputs(qs, v, cu_seqlens):
    """Zeroed FP32 output ``[B,T,HV,V]`` and final states ``[N,HV,K,V]``, and the sequences."""
    B, T, H, K = qs.shape
    HV, V = v.shape[2], v.shape[3]
    seqs = _sequences(B, T, cu_seqlens)
    return (np.zeros((B, T, HV, V), dtype=F32), np.zeros((len(seqs), HV, K, V), dtype=F32),
            seqs)


def _initial(initial_state, n, hv, K, V):
    """Sequence n's starting state for value head hv (FP32 copy; zeros without one)."""
    if initial_state is None:
        return np.zeros((K, V), F32)
    return np.array(initial_state[n, hv], dtype=F32)


def serial_emulate(q, k, v, g, beta, scale=None, initial_state=None, cu_seqlens=None,
                   use_qk_l2norm=True):
    """The serial family's FP32 result ``(o float32 [B,T,HV,V], state float32 [N,HV,K,V])``."""
    qs, kn, v, g, beta = _prep(q, k, v, g, beta, scale, use_qk_l2norm)
    o, state, seqs = _outputs(qs, v, cu_seqlens)
    K, V, G = qs.shape[3], v.shape[3], v.shape[2] // qs.shape[2]
    for n, (b, bos, L) in enumerate(seqs):
        for hv in range(v.shape[2]):
            hq = hv // G
            h = _initial(initial_state, n, hv, K, V)
            for t in range(bos, bos + L):
                a = F32(math.exp(float(g[b, t, hv])))
                km = kn[b, t, hq]
                qm = qs[b, t, hq]
                hk = np.zeros(V, F32)
                for m in range(K):
                    h[m] = h[m] * a
                    hk = fma32(h[m], km[m], hk)
                u = beta[b, t, hv] * (v[b, t, hv] - hk)
                acc = np.zeros(V, F32)
                for m in range(K):
                    h[m] = fma32(km[m], u, h[m])
                    acc = fma32(h[m], qm[m], acc)
                o[b, t, hv] = acc
            state[n, hv] = h
    return o, state


def chunk_decay(gc):
    """Decay factors of one chunk (``gc`` float32 ``[L]``, already ``min(g, 0)``).

    ``a_j = E(g_j)``; row ``i`` runs backwards from the diagonal: ``p = 1; D[i,i] = 1``; for
    ``j = i-1 .. 0``: ``p = p * a[j+1]; D[i,j] = p``; then ``gamma_i = p * a[0]``.
    Returns ``D`` (lower triangle incl. diagonal, zeros above) and ``gamma``.
    """
    L = gc.shape[0]
    a = exp32(gc)
    D = np.zeros((L, L), dtype=F32)
    gam = np.zeros(L, dtype=F32)
    for i in range(L):
        p = F32(1)
        D[i, i] = F32(1)
        for j in range(i - 1, -1, -1):
            p = F32(p * a[j + 1])
            D[i, j] = p
        gam[i] = F32(p * a[0])
    return D, gam


def chunked_emulate(q, k, v, g, beta, scale=None, initial_state=None, cu_seqlens=None,
                    use_qk_l2norm=True, chunk=GDN_CHUNK):
    """The chunked family's FP32 result ``(o float32 [B,T,HV,V], state float32 [N,HV,K,V])``,
    following the operation order written down in :mod:`dflash2_numba.gdn.chunked`."""
    qs_all, kn_all, v_all, g_all, b_all = _prep(q, k, v, g, beta, scale, use_qk_l2norm)
    o, state, seqs = _outputs(qs_all, v_all, cu_seqlens)
    K, V, G = qs_all.shape[3], v_all.shape[3], v_all.shape[2] // qs_all.shape[2]
    for n, (b, bos, Ln) in enumerate(seqs):
        for hv in range(v_all.shape[2]):
            hq = hv // G
            h = _initial(initial_state, n, hv, K, V)
            for c0 in range(0, Ln, chunk):
                L = min(chunk, Ln - c0)
                sl = slice(bos + c0, bos + c0 + L)
                kn = kn_all[b, sl, hq]          # [L, K]
                qs = qs_all[b, sl, hq]          # [L, K]
                vc = v_all[b, sl, hv]           # [L, V]
                gc = g_all[b, sl, hv]
                bc = b_all[b, sl, hv]
                D, gam = chunk_decay(gc)
                # (3) Gram / A, scores / P, X, Kd
                Gm = np.zeros((L, L), F32)
                S = np.zeros((L, L), F32)
                for m in range(K):
                    Gm = fma32(kn[:, None, m], kn[None, :, m], Gm)
                    S = fma32(qs[:, None, m], kn[None, :, m], S)
                low = np.tril(np.ones((L, L), bool), -1)
                A = np.where(low, (Gm * bc[:, None]).astype(F32) * D, F32(0)).astype(F32)
                P = np.where(np.tril(np.ones((L, L), bool)), S * D, F32(0)).astype(F32)
                X = (kn * (bc * gam)[:, None]).astype(F32)
                Kd = (kn * D[L - 1][:, None]).astype(F32)
                # (4) T = (I + A)^-1, strictly lower part, rows in order
                Tm = np.zeros((L, L), F32)
                for i in range(1, L):
                    t = -A[i, :i]                      # one accumulator per column mm < i
                    for j in range(1, i):              # j = mm+1 .. i-1 ascending for each mm
                        t[:j] = fma32(-A[i, j], Tm[j, :j], t[:j])
                    Tm[i, :i] = t
                # (5) W, U
                W = X.copy()
                Y = (vc * bc[:, None]).astype(F32)
                U = Y.copy()
                for i in range(L):
                    for j in range(i):
                        W[i] = fma32(Tm[i, j], X[j], W[i])
                        U[i] = fma32(Tm[i, j], Y[j], U[i])
                # (6) state pass
                wh = np.zeros((L, V), F32)
                qh = np.zeros((L, V), F32)
                for m in range(K):
                    wh = fma32(W[:, m:m + 1], h[m][None, :], wh)
                    qh = fma32(qs[:, m:m + 1], h[m][None, :], qh)
                vn = (U - wh).astype(F32)
                oc = (qh * gam[:, None]).astype(F32)
                for j in range(L):
                    # o_i += P_ij vn_j for every i >= j (ascending j per row)
                    oc[j:] = fma32(P[j:, j:j + 1], vn[j][None, :], oc[j:])
                o[b, sl, hv] = oc
                hn = (h * gam[L - 1]).astype(F32)
                for j in range(L):
                    hn = fma32(Kd[j][:, None], vn[j][None, :], hn)
                h = hn
            state[n, hv] = h
    return o, state
