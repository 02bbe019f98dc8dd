"""Host (numpy) emulation of the FP32 operation order of the frozen q8 verification attention.

This is contract part A ("Inputs", "E4M3FN decode", "Split schedule", "Score",
"N32 online softmax and PV", "Workspace", "Combine"), as :mod:`.frozen` performs it, made
executable: every FP32 rounding of the split kernel and of the combine kernel is reproduced,
vectorised over the independent elements (query rows, heads, keys, columns), with a correctly
rounded FP32 fused multiply-add (:func:`dflash2_numba._emulate_ops.fma32`) wherever the kernels
call ``cuda.fma`` and plain FP32 numpy arithmetic wherever they round each step:

* the split schedule of :func:`dflash2_numba.contract.split_tiles` (``A`` active splits of
  whole 32-key tiles; splits ``s >= A`` and requests with ``T <= 0`` write nothing);
* K16 scores: ``u = fma(q_i, K_i, u)`` over 16 columns from a fresh 0, Kahan-compensated
  FP32 sums across the slices (no FMA), then ``* qk_scale``; invisible keys ``-1e30``;
* N32 online softmax: tile max, ``mnew = max(m, tmax)``, ``p = E(max(x - mnew, -80))``,
  the pairwise tile sum (``+16, +8, +4, +2, +1``), ``alpha`` and ``l = fma(l, alpha, tsum)``
  only when the sum is positive;
* probability + residual PV: ``hi = f16(p)``, ``lo = f16((p - hi) * 2^11)``, per 16-key half
  first the ``hi`` FMAs then the ``lo`` FMAs against ``V * 2^-11``, keys a row does not see
  read as ``V = 0``; ``O = fma(O, alpha, T)``;
* the workspace record ``partial = O * (v_scale if l > 0 else 0)``,
  ``lse = (m if l > 0 else -1e30, l)``;
* the combine: ``M`` over the active splits, weights ``E(max(m_s - M, -80))`` of the live
  splits (``m_s > -1e20``) in ascending order, ``Dn = fma(w, l, Dn)``, IEEE ``1 / Dn``,
  ``acc = fma(w * inv, partial_s, acc)``, ``out = f16(acc)`` (or ``acc`` for FP32 output);
  rows with ``L <= 0`` are ``+0`` and read nothing.

``max`` is ``np.fmax`` (a NaN operand is ignored, as the GPU's ``fmaxf`` and the simulator
patch do). ``E(x)`` is ``float32(exp(float64(x)))`` with the host's ``math.exp``, which is what
``math.exp`` of a float32 is on numba's CUDA simulator, so there the frozen kernels equal this
emulation bit for bit (FP16/FP32 ``out``, the whole ``partial`` and ``lse``, entries the
kernels leave unwritten holding the workspace sentinel). On a GPU the only difference is
``E``: the device ``expf`` is not always correctly rounded, and every bit downstream of a
probability or a weight may then differ.

No numba here; plain numpy (usable by the screen and by authors of new variants).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..contract import (ATTENTION_OUT_DTYPES, DEFAULT_SPLITS, EXP_CLAMP, HALF_TILE, K_SLICE,
                        LIVE_M_THRESHOLD, NEG_INF, RESIDUAL_SCALE, RESIDUAL_UNSCALE, SENTINEL,
                        TILE_KEYS, active_splits, ceil_div, default_row_lengths, split_tiles)
from ..e4m3 import DECODE_TABLE
from .._emulate_ops import exp32, fma32

F32 = np.float32
F16 = np.float16
F64 = np.float64

__all__ = ["AttentionEmulation", "emulate_attention", "emulate_split", "emulate_combine",
           "exp32"]


class AttentionEmulation(NamedTuple):
    out: np.ndarray       # [B, Q, Hq, D], float16 or float32
    partial: np.ndarray   # float32 [B, S, Q, Hq, D]
    lse: np.ndarray       # float32 [B, S, Q, Hq, 2]


def _gather_bytes(cache, table_row, T: int, n_keys: int) -> np.ndarray:
    """Bytes of keys ``0 .. n_keys-1`` of one request, ``[n_keys, Hkv, D]``, as the split
    kernel stages them: zero bytes for keys ``j >= T``, past the table or naming no page."""
    P, ps, Hkv, D = cache.shape
    W = table_row.shape[0]
    j = np.arange(n_keys, dtype=np.int64)
    col = j // ps
    ok = (j < T) & (col < W)
    page = np.where(ok, table_row[np.minimum(col, W - 1)].astype(np.int64), -1)
    ok &= (page >= 0) & (page < P)
    out = np.zeros((n_keys, Hkv, D), dtype=np.uint8)
    if ok.any():
        out[ok] = cache[page[ok], (j - col * ps)[ok]]
    return out


def _scores(qf, Kt, qk_scale):
    """K16 compensated scores ``[Q, Hq, n_keys]`` (every key; the caller masks).

    ``qf`` float32 ``[Q, Hq, D]``; ``Kt`` float32 ``[Hq, n_keys, D]`` (the KV head of each
    query head)."""
    Q, Hq, D = qf.shape
    n = Kt.shape[1]
    s = np.zeros((Q, Hq, n), F32)
    c = np.zeros((Q, Hq, n), F32)
    for sl in range(D // K_SLICE):
        u = np.zeros((Q, Hq, n), F32)
        for i in range(sl * K_SLICE, (sl + 1) * K_SLICE):
            u = fma32(qf[:, :, None, i], Kt[None, :, :, i], u)
        y = (u - c).astype(F32)
        w = (s + y).astype(F32)
        c = ((w - s) - y).astype(F32)
        s = w
    return (s * qk_scale).astype(F32)


def _tree_sum(p):
    """Pairwise tile sum over the last axis (32): ``+16``, ``+8``, ``+4``, ``+2``, ``+1``."""
    t = p
    width = TILE_KEYS // 2
    while width >= 1:
        t = (t[..., :width] + t[..., width:2 * width]).astype(F32)
        width //= 2
    return t[..., 0]


def emulate_split(q, k_cache, v_cache, block_table, L, *, qk_scale, v_scale, splits,
                  partial=None, lse=None):
    """The split kernel: ``(partial [B,S,Q,Hq,D], lse [B,S,Q,Hq,2])`` float32.

    ``L`` is the int ``[B, Q]`` row lengths; ``qk_scale`` and ``v_scale`` the float32 scalars
    the kernel receives. ``partial`` / ``lse`` given are written in place (entries the kernel
    does not write keep their values); otherwise they start filled with the sentinel."""
    q = np.asarray(q)
    B, Q, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    G = Hq // Hkv
    S = int(splits)
    qk_scale, v_scale = F32(qk_scale), F32(v_scale)
    if partial is None:
        partial = np.full((B, S, Q, Hq, D), SENTINEL, F32)
    if lse is None:
        lse = np.full((B, S, Q, Hq, 2), SENTINEL, F32)
    bt = np.asarray(block_table)
    heads = np.arange(Hq) // G
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for b in range(B):
            Lb = np.asarray(L[b], dtype=np.int64)
            T = int(Lb.max())
            sched = split_tiles(T, S)
            if not sched:
                continue
            n_keys = ceil_div(T, TILE_KEYS) * TILE_KEYS
            Kd = DECODE_TABLE[_gather_bytes(k_cache, bt[b], T, n_keys)]     # [n, Hkv, D]
            Vd = DECODE_TABLE[_gather_bytes(v_cache, bt[b], T, n_keys)]
            Kt = np.transpose(Kd[:, heads, :], (1, 0, 2))                  # [Hq, n, D]
            Vt = np.transpose(Vd[:, heads, :], (1, 0, 2))
            qf = q[b].astype(F32)
            keys = np.arange(n_keys, dtype=np.int64)
            visible = keys[None, :] < Lb[:, None]                         # [Q, n]
            x_all = np.where(visible[:, None, :], _scores(qf, Kt, qk_scale), NEG_INF)
            for s, (first, count) in enumerate(sched):
                m = np.full((Q, Hq), NEG_INF, F32)
                l = np.zeros((Q, Hq), F32)
                O = np.zeros((Q, Hq, D), F32)
                for tile in range(first, first + count):
                    k0 = tile * TILE_KEYS
                    ks = slice(k0, k0 + TILE_KEYS)
                    x = x_all[:, :, ks]                                   # [Q, Hq, 32]
                    vis = visible[:, None, ks]                            # [Q, 1, 32]
                    mnew = np.fmax(m, np.fmax.reduce(x, axis=-1))
                    arg = np.fmax((x - mnew[..., None]).astype(F32), EXP_CLAMP)
                    p = np.where(vis, exp32(arg), F32(0)).astype(F32)
                    hi = p.astype(F16).astype(F32)
                    lo = ((p - hi) * RESIDUAL_SCALE).astype(F32).astype(F16).astype(F32)
                    tsum = _tree_sum(p)
                    pos = tsum > 0
                    alpha = np.where(pos, exp32(np.fmax((m - mnew).astype(F32), EXP_CLAMP)),
                                     F32(1)).astype(F32)
                    l = np.where(pos, fma32(l, alpha, tsum), l).astype(F32)
                    m = np.where(pos, mnew, m).astype(F32)
                    # V of the keys each row sees, 0 elsewhere: [Q, Hq, 32, D]
                    Vm = np.where(vis[..., None], Vt[None, :, ks, :], F32(0)).astype(F32)
                    Vr = (Vm * RESIDUAL_UNSCALE).astype(F32)
                    acc = np.zeros((Q, Hq, D), F32)
                    for half in range(0, TILE_KEYS, HALF_TILE):
                        for j in range(half, half + HALF_TILE):
                            acc = fma32(hi[:, :, j, None], Vm[:, :, j, :], acc)
                        for j in range(half, half + HALF_TILE):
                            acc = fma32(lo[:, :, j, None], Vr[:, :, j, :], acc)
                    O = fma32(O, alpha[..., None], acc)
                live = l > 0
                f = np.where(live, v_scale, F32(0)).astype(F32)
                partial[b, s] = (O * f[..., None]).astype(F32)
                lse[b, s, ..., 0] = np.where(live, m, NEG_INF)
                lse[b, s, ..., 1] = l
    return partial, lse


def emulate_combine(partial, lse, L, *, splits, out_dtype=np.float16):
    """The combine kernel: ``out [B, Q, Hq, D]`` in ``out_dtype`` from the workspace.

    Reads only the active splits ``s < A`` of requests and rows with ``L > 0``."""
    partial = np.asarray(partial, F32)
    lse = np.asarray(lse, F32)
    B, _, Q, Hq, D = partial.shape
    odt = np.dtype(out_dtype)
    if odt not in [np.dtype(d) for d in ATTENTION_OUT_DTYPES]:
        raise ValueError(f"out_dtype: expected float16 or float32, got {odt}")
    acc_all = np.zeros((B, Q, Hq, D), F32)
    with np.errstate(over="ignore", invalid="ignore", under="ignore", divide="ignore"):
        for b in range(B):
            Lb = np.asarray(L[b], dtype=np.int64)
            A = active_splits(int(Lb.max()), int(splits))
            if A == 0:
                continue
            ms = lse[b, :A, ..., 0]                                       # [A, Q, Hq]
            ls = lse[b, :A, ..., 1]
            M = np.full((Q, Hq), NEG_INF, F32)
            for s in range(A):
                M = np.fmax(M, ms[s])
            live = ms > LIVE_M_THRESHOLD
            w = exp32(np.fmax((ms - M[None]).astype(F32), EXP_CLAMP))
            den = np.zeros((Q, Hq), F32)
            for s in range(A):
                den = np.where(live[s], fma32(w[s], ls[s], den), den).astype(F32)
            pos = den > 0
            inv = np.where(pos, F32(1) / np.where(pos, den, F32(1)), F32(0)).astype(F32)
            acc = np.zeros((Q, Hq, D), F32)
            for s in range(A):
                ws = (w[s] * inv).astype(F32)
                acc = np.where(live[s][..., None], fma32(ws[..., None], partial[b, s], acc),
                               acc).astype(F32)
            acc_all[b] = np.where((Lb > 0)[:, None, None], acc, F32(0))
    return acc_all.astype(odt)


def emulate_attention(q, k_cache, v_cache, block_table, seq_lens, *, scale, k_scale=1.0,
                      v_scale=1.0, splits=DEFAULT_SPLITS, row_lengths=None,
                      out_dtype="float16") -> AttentionEmulation:
    """The frozen kernel's ``AttentionResult`` bits: ``(out, partial, lse)``.

    Arguments as for ``verify_attention`` (numpy arrays; no validation beyond what the
    arithmetic needs: pass what ``verify_attention`` accepts). ``partial`` / ``lse`` start as
    a workspace filled with the sentinel -777.0 (``AttentionWorkspace.fill_sentinel``): the
    entries frozen does not write (splits ``s >= A``, requests with ``T <= 0``) keep it.
    """
    q = np.asarray(q)
    if q.dtype != np.float16 or q.ndim != 4:
        raise TypeError(f"q: expected float16 [B, Q, Hq, D], got {q.dtype} {q.shape}")
    k_cache = np.asarray(k_cache)
    v_cache = np.asarray(v_cache)
    Q = q.shape[1]
    L = (default_row_lengths(seq_lens, Q) if row_lengths is None      # L [B, Q], int64
         else np.asarray(row_lengths).astype(np.int64))
    with np.errstate(over="ignore"):
        qk_scale = F32(F32(scale) * F32(k_scale))
    partial, lse = emulate_split(q, k_cache, v_cache, block_table, L, qk_scale=qk_scale,
                                 v_scale=F32(v_scale), splits=splits)
    out = emulate_combine(partial, lse, L, splits=splits, out_dtype=out_dtype)
    return AttentionEmulation(out, partial, lse)
