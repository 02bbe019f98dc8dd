"""Exact reference for the gated delta rule prefill (contract part B).

Per token and value head (contract B, the definition)::

    if use_qk_l2norm: q = q / sqrt(sum(q^2) + 1e-6);  k = k / sqrt(sum(k^2) + 1e-6)
    h   = exp(g_t) * h                      # decay first
    u   = beta_t * (v_t - h^T k_t)
    h   = h + k_t u^T
    o_t = h^T (scale * q_t)                 # scale defaults to K ** -0.5

with the state ``h`` of shape ``[K, V]`` per sequence and value head.  Shapes follow
flash-linear-attention: ``q, k [B, T, H, K]``, ``v [B, T, HV, V]``, ``g, beta [B, T, HV]``,
value head ``i`` reads q/k head ``i // (HV // H)``; packed variable length uses ``B == 1`` and
``cu_seqlens [N + 1]``.

Three renderings, all of the same function:

* :func:`gdn_reference` ``precision="fp64"``: the token recurrence above in float64,
  vectorised over (sequence, value head) - loop over tokens only.
* :func:`gdn_reference` ``precision="mp"`` / :func:`gdn_reference_mp`: the recurrence in
  mpmath at 50 digits, element by element (tiny cases only).
* :func:`gdn_reference_chunked`: the FP64 chunked algebra (chunk C = 64 by default) with the
  unit lower-triangular solve; see its docstring for the derivation.

Inputs are converted exactly to float64 (fp16 / fp32 values are exact in float64); ``scale``
is used as given in float64.  This module is plain numpy / scipy / mpmath and never imports
numba or ``dflash2_numba``.
"""
from __future__ import annotations

import math
import numbers

import mpmath
import numpy as np
from scipy.linalg import solve_triangular

from ._args import as_array

__all__ = ["gdn_reference", "gdn_reference_mp", "gdn_reference_chunked"]

MP_DPS = 50
L2NORM_EPS = 1e-6


# --------------------------------------------------------------------------- validation

def _float_array(name, a, ndim, what):
    a = as_array(name, a)
    if a.dtype.kind != "f" or a.dtype.itemsize > 8:
        # (a longdouble would be rounded to float64, not converted exactly)
        raise TypeError(f"{name}: expected float16/float32/float64, got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {what}, got shape {a.shape}")
    return a


def _validate(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm, precision,
              precisions=("fp64", "mp")):
    """Check shapes/dtypes; return the sequence layout (contract B "Shapes")."""
    if not isinstance(precision, str) or precision not in precisions:
        raise ValueError(f"precision: expected one of {precisions}, got {precision!r}")
    if not isinstance(use_qk_l2norm, (bool, np.bool_)):
        raise TypeError(f"use_qk_l2norm: expected bool, got {type(use_qk_l2norm).__name__}")
    q = _float_array("q", q, 4, "[B, T, H, K]")
    k = _float_array("k", k, 4, "[B, T, H, K]")
    if k.shape != q.shape:
        raise ValueError(f"k: shape {k.shape} differs from q shape {q.shape}")
    B, T, H, K = q.shape
    v = _float_array("v", v, 4, "[B, T, HV, V]")
    if v.shape[:2] != (B, T):
        raise ValueError(f"v: expected [B={B}, T={T}, HV, V], got shape {v.shape}")
    HV, V = v.shape[2], v.shape[3]
    if H < 1 or HV < 1 or HV % H != 0:
        raise ValueError(f"v: value heads HV={HV} must be a positive multiple of q/k heads H={H}")
    g = _float_array("g", g, 3, "[B, T, HV]")
    if g.shape != (B, T, HV):
        raise ValueError(f"g: expected shape {(B, T, HV)}, got {g.shape}")
    bad = np.isnan(g) | (g > 0)
    if bad.any():
        # contract B: g is the log decay, <= 0 (-inf, a full reset, is taken); g > 0 would
        # grow the state and break the chunked form's non-positive exponents
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"g: the log decay must be <= 0 (and not NaN); found {g[idx]!r} at "
                         f"index {idx}")
    beta = _float_array("beta", beta, 3, "[B, T, HV]")
    if beta.shape != (B, T, HV):
        raise ValueError(f"beta: expected shape {(B, T, HV)}, got {beta.shape}")
    if scale is None:
        scale = float(K) ** -0.5 if K > 0 else 1.0
    else:
        if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
            raise TypeError(f"scale: expected a real number or None, got {type(scale).__name__}")
        try:
            scale = float(scale)
        except OverflowError:
            raise ValueError("scale: must be finite, got an int past float64's range") from None
        if not math.isfinite(scale):
            raise ValueError(f"scale: must be finite, got {scale}")
        with np.errstate(over="ignore"):
            if not np.isfinite(np.float32(scale)):
                # the kernels take scale as f32, as the API's check says
                raise ValueError(f"scale: {scale} overflows float32")
    if cu_seqlens is None:
        starts = np.arange(B, dtype=np.int64) * T      # offsets into the flat [B*T] tokens
        lens = np.full(B, T, dtype=np.int64)
    else:
        cu = as_array("cu_seqlens", cu_seqlens)
        if cu.dtype.kind not in "iu":
            raise TypeError(f"cu_seqlens: expected an integer array (int32), got dtype {cu.dtype}")
        if cu.ndim != 1 or cu.shape[0] < 1:
            raise ValueError(f"cu_seqlens: expected shape [N + 1] with N >= 0, got {cu.shape}")
        if B != 1:
            raise ValueError(f"cu_seqlens: packed variable-length input needs B == 1, q has B={B}")
        cu = cu.astype(np.int64)
        if cu[0] != 0 or cu[-1] != T:
            raise ValueError(f"cu_seqlens: must start at 0 and end at T={T}, got {cu[0]}..{cu[-1]}")
        if np.any(np.diff(cu) < 0):
            raise ValueError("cu_seqlens: must be non-decreasing")
        starts = cu[:-1].copy()
        lens = np.diff(cu)
    N = len(lens)
    if initial_state is not None:
        initial_state = _float_array("initial_state", initial_state, 4, "[N, HV, K, V]")
        if initial_state.shape != (N, HV, K, V):
            raise ValueError(f"initial_state: expected shape {(N, HV, K, V)}, got {initial_state.shape}")
    return dict(q=q, k=k, v=v, g=g, beta=beta, scale=scale, h0=initial_state, starts=starts,
                lens=lens, B=B, T=T, H=H, K=K, HV=HV, V=V, N=N, l2=bool(use_qk_l2norm))


def _l2norm(x):
    """Contract B: ``x / sqrt(sum(x^2) + 1e-6)`` over the last axis, float64."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2NORM_EPS)


# --------------------------------------------------------------------------- fp64 recurrence

_STEP_BLOCK = 256  # tokens whose inputs are converted / normalised together


def _flat_inputs(p):
    """``(value head -> q/k head map, q, k, v, g, beta)`` with (B, T) flattened to rows."""
    B, T, H, K, HV, V = (p[x] for x in ("B", "T", "H", "K", "HV", "V"))
    return (np.arange(HV) // (HV // H), p["q"].reshape(B * T, H, K), p["k"].reshape(B * T, H, K),
            p["v"].reshape(B * T, HV, V), p["g"].reshape(B * T, HV), p["beta"].reshape(B * T, HV))


def _gdn_fp64(p):
    """Contract B token recurrence in float64, vectorised over (sequence, value head).

    Only numpy element-wise ufuncs and ``einsum`` (no BLAS) act on the state, so the run
    time does not collapse when a multi-threaded BLAS competes for busy cores.
    """
    B, T, H, K, HV, V, N = (p[x] for x in ("B", "T", "H", "K", "HV", "V", "N"))
    hmap, qf, kf, vf, gf, bf = _flat_inputs(p)
    scale = p["scale"]
    order = np.argsort(-p["lens"], kind="stable")   # longest first: active set is a prefix
    lens_s = p["lens"][order]
    starts_s = p["starts"][order]
    # state h^T per (sequence, value head): hT[n, i] = h^T, [V, K] (K contiguous)
    hT = np.zeros((N, HV, V, K), dtype=np.float64)
    if p["h0"] is not None:
        hT[...] = p["h0"].astype(np.float64)[order].transpose(0, 1, 3, 2)
    o = np.zeros((B * T, HV, V), dtype=np.float64)
    Tmax = int(lens_s[0]) if N else 0
    t0 = 0
    while t0 < Tmax:
        n0 = int(np.count_nonzero(lens_s > t0))          # sequences active at t0
        # about 8 MiB per converted input block
        tb = max(1, min(_STEP_BLOCK, (1 << 20) // max(1, n0 * HV * max(K, V))))
        t1 = min(Tmax, t0 + tb)
        steps = np.arange(t0, t1)
        # rows [tb, n]: token t of sequence n (clipped past its end; those rows are unused)
        rows = starts_s[None, :n0] + np.minimum(steps[:, None], lens_s[None, :n0] - 1)
        qb = qf[rows].astype(np.float64)                  # [tb, n, H, K]
        kb = kf[rows].astype(np.float64)
        if p["l2"]:
            qb = _l2norm(qb)
            kb = _l2norm(kb)
        qb = qb[:, :, hmap] * scale                      # scale * q_t, [tb, n, HV, K]
        kb = np.ascontiguousarray(kb[:, :, hmap])
        vb = vf[rows].astype(np.float64)                  # [tb, n, HV, V]
        egb = np.exp(gf[rows].astype(np.float64))         # [tb, n, HV]
        bb = bf[rows].astype(np.float64)
        ob = np.empty((t1 - t0, n0, HV, V), dtype=np.float64)
        for s, t in enumerate(range(t0, t1)):
            n = int(np.count_nonzero(lens_s[:n0] > t))
            hs = hT[:n]
            kt = kb[s, :n]
            flat = hs.reshape(n * HV, V * K)                               # view (prefix)
            np.multiply(flat, egb[s, :n].reshape(n * HV, 1), out=flat)     # h = exp(g) h
            hk = np.einsum("nivk,nik->niv", hs, kt)                        # h^T k
            u = bb[s, :n, :, None] * (vb[s, :n] - hk)                      # beta (v - h^T k)
            hs += np.einsum("niv,nik->nivk", u, kt)                        # h += k u^T
            ob[s, :n] = np.einsum("nivk,nik->niv", hs, qb[s, :n])          # h^T (scale q)
        for n in range(n0):
            e = min(t1, int(lens_s[n]))
            if e > t0:
                r0 = int(starts_s[n])
                o[r0 + t0:r0 + e] = ob[:e - t0, n]
        t0 = t1
    state = np.empty((N, HV, K, V), dtype=np.float64)
    state[order] = hT.transpose(0, 1, 3, 2)
    return o.reshape(B, T, HV, V), state


# --------------------------------------------------------------------------- mpmath recurrence

def _gdn_mp(p):
    B, T, H, K, HV, V, N = (p[x] for x in ("B", "T", "H", "K", "HV", "V", "N"))
    G = HV // H
    o = np.empty((B, T, HV, V), dtype=object)
    state = np.empty((N, HV, K, V), dtype=object)
    qf = p["q"].reshape(B * T, H, K)
    kf = p["k"].reshape(B * T, H, K)
    vf = p["v"].reshape(B * T, HV, V)
    gf = p["g"].reshape(B * T, HV)
    bf = p["beta"].reshape(B * T, HV)
    of = o.reshape(B * T, HV, V)
    mpf = mpmath.mpf

    def vec(x):
        return [mpf(float(e)) for e in x]

    with mpmath.workdps(MP_DPS):
        scale = mpf(p["scale"])
        eps = mpf(L2NORM_EPS)
        for n in range(N):
            s0, ln = int(p["starts"][n]), int(p["lens"][n])
            for i in range(HV):
                if p["h0"] is None:
                    h = [[mpf(0)] * V for _ in range(K)]
                else:
                    h = [vec(p["h0"][n, i, a]) for a in range(K)]
                for r in range(s0, s0 + ln):
                    qv, kv = vec(qf[r, i // G]), vec(kf[r, i // G])
                    if p["l2"]:
                        nq = mpmath.sqrt(mpmath.fsum(x * x for x in qv) + eps)
                        nk = mpmath.sqrt(mpmath.fsum(x * x for x in kv) + eps)
                        qv = [x / nq for x in qv]
                        kv = [x / nk for x in kv]
                    vv = vec(vf[r, i])
                    eg = mpmath.exp(mpf(float(gf[r, i])))
                    bt = mpf(float(bf[r, i]))
                    h = [[eg * x for x in row] for row in h]                       # decay
                    hk = [mpmath.fsum(h[a][c] * kv[a] for a in range(K)) for c in range(V)]
                    u = [bt * (vv[c] - hk[c]) for c in range(V)]
                    h = [[h[a][c] + kv[a] * u[c] for c in range(V)] for a in range(K)]
                    sq = [scale * x for x in qv]
                    of[r, i, :] = [mpmath.fsum(h[a][c] * sq[a] for a in range(K)) for c in range(V)]
                for a in range(K):
                    state[n, i, a, :] = h[a]
    return o, state


# --------------------------------------------------------------------------- fp64 chunked

def _chunk_step(qc, kc, vc, gc, bc, h, scale):
    """One chunk of the chunked algebra, batched over value heads.

    qc, kc: [HV, C, K]; vc: [HV, C, V]; gc, bc: [HV, C]; h: [HV, K, V] (state before the chunk).
    Returns (o [HV, C, V], h_next [HV, K, V]).
    """
    C = qc.shape[1]
    gam = np.cumsum(gc, axis=1)                                   # gamma_i = sum_{r<=i} g_r
    causal = np.tril(np.ones((C, C), dtype=bool))                 # i >= j
    strict = np.tril(np.ones((C, C), dtype=bool), -1)             # i > j
    # gamma_i - gamma_j as the sum of g_r over j < r <= i, not as a difference of prefix
    # sums: with a g = -inf in the chunk the difference would be -inf - -inf = NaN.
    # seg[j, i] = sum_{j < r <= i} g_r (0 for i <= j), per value head.
    seg = np.cumsum(np.where(np.arange(C)[None, :, None] < np.arange(C)[None, None, :],
                             gc[:, None, :], 0.0), axis=2)
    diff = seg.transpose(0, 2, 1)                                 # [HV, i, j]
    # exp only of non-positive arguments: the anti-causal entries become exp(-inf) = 0.
    Dc = np.exp(np.where(causal, diff, -np.inf))                  # exp(gamma_i - gamma_j), i >= j
    eg = np.exp(gam)                                              # exp(gamma_i), gamma_i <= 0
    egl = np.exp(seg[:, :, -1])                                   # exp(gamma_last - gamma_i)
    kk = np.matmul(kc, kc.transpose(0, 2, 1))                     # k_i . k_j
    A = np.where(strict, bc[:, :, None] * Dc * kk, 0.0)           # strictly lower
    M = A + np.eye(C)
    # (check_finite=False: a NaN / inf input propagates, as in gdn_reference, instead of
    # scipy's error that names no argument)
    W = solve_triangular(M, (bc * eg)[:, :, None] * kc, lower=True, unit_diagonal=True,
                         check_finite=False)
    U = solve_triangular(M, bc[:, :, None] * vc, lower=True, unit_diagonal=True,
                         check_finite=False)
    vnew = U - np.matmul(W, h)                                    # u_i for every token
    sq = scale * qc
    qk = np.where(causal, np.matmul(sq, kc.transpose(0, 2, 1)) * Dc, 0.0)
    o = eg[:, :, None] * np.matmul(sq, h) + np.matmul(qk, vnew)
    h_next = np.exp(gam[:, -1])[:, None, None] * h + np.matmul(
        (kc * egl[:, :, None]).transpose(0, 2, 1), vnew)
    return o, h_next


def _gdn_chunked(p, chunk):
    B, T, H, K, HV, V, N = (p[x] for x in ("B", "T", "H", "K", "HV", "V", "N"))
    hmap, qf, kf, vf, gf, bf = _flat_inputs(p)
    o = np.zeros((B * T, HV, V), dtype=np.float64)
    state = np.zeros((N, HV, K, V), dtype=np.float64)
    for n in range(N):
        s0, ln = int(p["starts"][n]), int(p["lens"][n])
        h = (np.zeros((HV, K, V)) if p["h0"] is None else p["h0"][n].astype(np.float64))
        for c0 in range(s0, s0 + ln, chunk):
            c1 = min(s0 + ln, c0 + chunk)
            qc = qf[c0:c1].astype(np.float64)
            kc = kf[c0:c1].astype(np.float64)
            if p["l2"]:
                qc = _l2norm(qc)
                kc = _l2norm(kc)
            # contiguous [HV, C, *] so that numpy's batched matmul goes to BLAS
            qc = np.ascontiguousarray(qc[:, hmap].transpose(1, 0, 2))       # [HV, C, K]
            kc = np.ascontiguousarray(kc[:, hmap].transpose(1, 0, 2))
            vc = np.ascontiguousarray(vf[c0:c1].astype(np.float64).transpose(1, 0, 2))
            gc = np.ascontiguousarray(gf[c0:c1].astype(np.float64).T)       # [HV, C]
            bc = np.ascontiguousarray(bf[c0:c1].astype(np.float64).T)
            oc, h = _chunk_step(qc, kc, vc, gc, bc, h, p["scale"])
            o[c0:c1] = oc.transpose(1, 0, 2)
        state[n] = h
    return o.reshape(B, T, HV, V), state


# --------------------------------------------------------------------------- public

def gdn_reference(q, k, v, g, beta, scale=None, initial_state=None, cu_seqlens=None,
                  use_qk_l2norm=True, precision="fp64"):
    """Gated delta rule prefill, contract part B ("Per token", the definition).

    ``q, k`` ``[B, T, H, K]``, ``v`` ``[B, T, HV, V]``, ``g, beta`` ``[B, T, HV]`` (float16,
    float32 or float64, converted exactly; ``g <= 0``, ``-inf`` included, never NaN; NaN /
    inf in the others propagate), ``initial_state`` ``[N, HV, K, V]`` or None (zeros),
    ``cu_seqlens`` integer ``[N + 1]`` with ``B == 1`` for packed variable length (each
    sequence starts from its own initial state); ``scale`` defaults to ``K ** -0.5``.

    Returns ``(o, final_state)``: float64 ``[B, T, HV, V]`` and float64 ``[N, HV, K, V]``
    (``N = B`` without ``cu_seqlens``).  ``precision="fp64"`` runs the token recurrence in
    float64 vectorised over (sequence, head); ``"mp"`` runs it in mpmath at 50 digits (tiny
    cases) and rounds to float64 (:func:`gdn_reference_mp` returns the mp values).
    Bad arguments raise ``TypeError`` / ``ValueError`` naming the argument.
    """
    p = _validate(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm, precision)
    if precision == "fp64":
        return _gdn_fp64(p)
    o, s = _gdn_mp(p)
    tof = np.vectorize(float, otypes=[np.float64])
    return (tof(o) if o.size else np.zeros(o.shape)), (tof(s) if s.size else np.zeros(s.shape))


def gdn_reference_mp(q, k, v, g, beta, scale=None, initial_state=None, cu_seqlens=None,
                     use_qk_l2norm=True):
    """Contract part B recurrence in mpmath (50 digits): object arrays ``(o, final_state)``
    of ``mpmath.mpf`` with the shapes of :func:`gdn_reference`."""
    p = _validate(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm, "mp")
    return _gdn_mp(p)


def gdn_reference_chunked(q, k, v, g, beta, scale=None, initial_state=None, cu_seqlens=None,
                          use_qk_l2norm=True, chunk=64):
    """Contract part B, the chunked form ("the same function"), in float64.

    Within a chunk of C tokens (relative index i, state S at the chunk start) let
    ``gamma_i = sum_{r<=i} g_r``.  Unrolling the recurrence gives

        h_i = e^{gamma_i} S + sum_{j<=i} e^{gamma_i - gamma_j} k_j u_j^T
        u_i = beta_i (v_i - e^{gamma_i} S^T k_i - sum_{j<i} e^{gamma_i - gamma_j} (k_i.k_j) u_j)

    so with ``A_ij = beta_i e^{gamma_i - gamma_j} k_i.k_j`` (i > j, else 0) the u's solve
    ``(I + A) u = beta v - (beta e^{gamma} k) S``.  With the unit lower-triangular solve
    ``T = (I + A)^-1``: ``U = T (beta v)``, ``W = T (beta e^{gamma} k)`` and
    ``v_new = U - W S``.  Then

        o     = e^{gamma} (scale q) S + [causal incl. diagonal](scale q k^T * e^{gamma_i - gamma_j}) v_new
        h_end = e^{gamma_last} S + (k * e^{gamma_last - gamma})^T v_new

    Every exponential has a non-positive argument for ``g <= 0`` (``gamma_i``,
    ``gamma_i - gamma_j`` for ``i >= j``, ``gamma_last - gamma_i``); anti-causal differences
    are replaced by ``-inf`` before ``exp``, and ``exp(-cumsum)`` is never formed, so strong
    decay underflows to 0 instead of overflowing.  Chunks restart at every sequence start.
    Arguments and results as :func:`gdn_reference`; ``chunk`` >= 1. A NaN / inf input
    propagates as in :func:`gdn_reference`, and within its chunk it may make the earlier
    tokens' outputs NaN too (``NaN * 0`` in the chunk's matrix products).
    """
    if isinstance(chunk, (bool, np.bool_)) or not isinstance(chunk, numbers.Integral):
        raise TypeError(f"chunk: expected a positive int, got {type(chunk).__name__}")
    if chunk < 1:
        raise ValueError(f"chunk: must be >= 1, got {chunk}")
    p = _validate(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm, "fp64")
    return _gdn_chunked(p, int(chunk))
