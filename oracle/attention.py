"""Exact reference for the q8 verification attention (contract part A).

The reference computes the *mathematical* attention that every kernel variant of
contract part A approximates: the E4M3FN cache bytes are decoded exactly, the score of
query row ``(b, t, h)`` against key ``j`` is ``(q . K_j) * qk_scale`` with the FP32-rounded
``qk_scale = f32(f32(scale) * f32(k_scale))`` that the contract defines, the softmax runs over
the visible keys ``j < L[b, t]`` and the output is ``sum_j p_j V_j * f32(v_scale)``.  No split
schedule, no FP32 rounding and no FP16 cast is modelled: those are what the kernels are
measured against.

Two precisions:

* ``"fp64"``: vectorised numpy in float64 (fast: a 262144-token context at B=1, Q=8, Hq=6,
  Hkv=1, D=256 takes a few seconds).  Products ``q * K`` are exact in float64 (11 x 4
  significand bits), so the only roundings are the float64 sums, the exponentials and the
  final division.
* ``"mp"``: mpmath at 50 decimal digits, element by element (tiny cases only).
  :func:`attention_reference_mp` returns the mpmath values themselves.

This module is plain numpy / mpmath; it never imports numba or ``dflash2_numba``.
"""
from __future__ import annotations

import math
import numbers

import ml_dtypes
import mpmath
import numpy as np

from ._args import as_array

__all__ = [
    "E4M3_TABLE",
    "decode_e4m3",
    "decode_e4m3_bits",
    "qk_scale_f32",
    "row_lengths_of",
    "attention_reference",
    "attention_reference_mp",
]

MP_DPS = 50

# 256-entry float64 table of the E4M3FN codes (contract A, "E4M3FN decode").
E4M3_TABLE = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
E4M3_TABLE.setflags(write=False)


def decode_e4m3(codes) -> np.ndarray:
    """Contract A "E4M3FN decode": uint8 codes -> exact float64 values (0x7F/0xFF -> NaN)."""
    c = np.asarray(codes)
    if c.dtype != np.uint8:
        raise TypeError(f"codes: expected uint8 E4M3FN bytes, got dtype {c.dtype}")
    return E4M3_TABLE[c]


def decode_e4m3_bits(code: int) -> float:
    """Contract A "E4M3FN decode" read from the bit fields alone (independent of ml_dtypes).

    Sign bit 7, exponent bits 6..3 with bias 7, mantissa bits 2..0; exponent 0 is subnormal
    ``m * 2**-9``; 0x7F / 0xFF are NaN; there are no infinities.
    """
    if isinstance(code, (bool, np.bool_)) or not isinstance(code, numbers.Integral):
        raise TypeError(f"code: expected an integer 0..255, got {type(code).__name__}")
    code = int(code)
    if not 0 <= code <= 255:
        raise ValueError(f"code: expected 0..255, got {code}")
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 0x7
    if e == 0xF and m == 0x7:
        return math.nan
    if e == 0:
        return sign * math.ldexp(m, -9)
    return sign * math.ldexp(8 + m, e - 7 - 3)


def qk_scale_f32(scale, k_scale) -> float:
    """Contract A "Inputs": ``qk_scale = f32(f32(scale) * f32(k_scale))`` as a Python float
    (real numbers only: ``TypeError`` naming the argument otherwise)."""
    for name, x in (("scale", scale), ("k_scale", k_scale)):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
            raise TypeError(f"{name}: expected a real number, got {type(x).__name__}")
    with np.errstate(over="ignore"):
        return float(np.float32(np.float32(scale) * np.float32(k_scale)))


# --------------------------------------------------------------------------- validation

def _real_scalar(name, x, *, positive):
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {type(x).__name__}")
    try:
        x = float(x)
    except OverflowError:
        raise ValueError(f"{name}: must be finite, got an int past float64's range") from None
    if not math.isfinite(x):
        raise ValueError(f"{name}: must be finite, got {x}")
    if positive and not x > 0:
        raise ValueError(f"{name}: must be > 0, got {x}")
    with np.errstate(over="ignore", under="ignore"):
        x32 = float(np.float32(x))
    if not math.isfinite(x32):
        raise ValueError(f"{name}: {x} overflows float32")
    if positive and not x32 > 0:
        # the contract reads the scale as f32(x): one that rounds to 0 would be used as 0
        raise ValueError(f"{name}: must be > 0 in float32, got {x} (rounds to 0)")
    return x


def _int_array(name, a, ndim):
    a = as_array(name, a)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array (int32), got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    if a.size and (int(a.min()) < -(2 ** 31) or int(a.max()) > 2 ** 31 - 1):
        # (before the cast: a uint64 past int64 would wrap to a negative length)
        raise ValueError(f"{name}: values must fit int32 (the contract's index type), "
                         f"got range [{int(a.min())}, {int(a.max())}]")
    return a.astype(np.int64)


def _validate(q, k_cache, v_cache, block_table, seq_lens, scale, k_scale, v_scale,
              row_lengths, precision):
    if not isinstance(precision, str) or precision not in ("fp64", "mp"):
        raise ValueError(f"precision: expected 'fp64' or 'mp', got {precision!r}")
    q = as_array("q", q)
    if q.dtype != np.float16:
        raise TypeError(f"q: expected float16, got dtype {q.dtype}")
    if q.ndim != 4:
        raise ValueError(f"q: expected [B, Q, Hq, D], got shape {q.shape}")
    B, Q, Hq, D = q.shape
    caches = []
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        c = as_array(name, c)
        if c.dtype != np.uint8:
            raise TypeError(f"{name}: expected uint8 E4M3FN bytes, got dtype {c.dtype}")
        if c.ndim != 4:
            raise ValueError(f"{name}: expected [num_pages, page_size, Hkv, D], got shape {c.shape}")
        caches.append(c)
    kc, vc = caches
    if vc.shape != kc.shape:
        raise ValueError(f"v_cache: shape {vc.shape} differs from k_cache shape {kc.shape}")
    P, ps, Hkv, Dk = kc.shape
    if Dk != D:
        raise ValueError(f"k_cache: head dim {Dk} differs from q head dim {D}")
    if ps < 1:
        raise ValueError(f"k_cache: page_size must be >= 1, got {ps}")
    if Hkv < 1:
        raise ValueError(f"k_cache: KV heads Hkv must be >= 1, got shape {kc.shape}")
    if Hq % Hkv != 0:
        raise ValueError(f"q: Hq={Hq} is not a multiple of the KV heads Hkv={Hkv} of k_cache")
    bt = _int_array("block_table", block_table, 2)
    if bt.shape[0] != B:
        raise ValueError(f"block_table: expected {B} rows (batch of q), got shape {bt.shape}")
    sl = _int_array("seq_lens", seq_lens, 1)
    if sl.shape != (B,):
        raise ValueError(f"seq_lens: expected shape ({B},), got {sl.shape}")
    if row_lengths is None:
        # Q = 0: no rows (as with an explicit [B, 0] row_lengths); row_lengths_of needs Q >= 1
        L = row_lengths_of(sl, Q) if Q else np.zeros((B, 0), dtype=np.int64)
        lname = "seq_lens"
    else:
        L = _int_array("row_lengths", row_lengths, 2)
        if L.shape != (B, Q):
            raise ValueError(f"row_lengths: expected shape ({B}, {Q}), got {L.shape}")
        lname = "row_lengths"
    scale = _real_scalar("scale", scale, positive=False)
    k_scale = _real_scalar("k_scale", k_scale, positive=True)
    v_scale = _real_scalar("v_scale", v_scale, positive=True)
    qk = qk_scale_f32(scale, k_scale)
    if not math.isfinite(qk):
        raise ValueError(f"scale: f32(scale) * f32(k_scale) overflows float32 ({scale} * {k_scale})")
    W = bt.shape[1]
    for b in range(B):
        T = int(L[b].max()) if Q else 0
        if T <= 0:
            continue
        npg = -(-T // ps)
        if npg > W:
            raise ValueError(
                f"{lname}: request {b} needs {T} keys = {npg} pages of {ps}, "
                f"but block_table has only {W} columns")
        pages = bt[b, :npg]
        bad = (pages < 0) | (pages >= P)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(
                f"block_table: entry [{b}, {i}] = {int(pages[i])} is outside 0..{P - 1} (num_pages)")
    return q, kc, vc, bt, L, qk, float(np.float32(v_scale))


def row_lengths_of(seq_lens, q_len: int) -> np.ndarray:
    """Contract A "Inputs": default visible lengths ``L[b, t] = seq_lens[b] - Q + 1 + t`` (int64).

    ``seq_lens`` is a 1-D integer array ``[B]``; ``q_len`` an integer >= 1.
    """
    sl = _int_array("seq_lens", seq_lens, 1).astype(np.int64)
    if isinstance(q_len, (bool, np.bool_)) or not isinstance(q_len, numbers.Integral) or q_len < 1:
        raise ValueError(f"q_len: expected an integer >= 1, got {q_len!r}")
    return sl[:, None] - int(q_len) + 1 + np.arange(int(q_len), dtype=np.int64)[None, :]


# --------------------------------------------------------------------------- fp64

_KEY_CHUNK_ELEMS = 1 << 22  # decoded float64 elements per chunk (32 MiB)


def _gather_tokens(cache, pages, T):
    """Bytes of tokens 0..T-1 of one request: [T, Hkv, D] (pages gathered by fancy indexing)."""
    ps = cache.shape[1]
    g = cache[pages]                       # [npg, ps, Hkv, D], contiguous copy
    return g.reshape(len(pages) * ps, cache.shape[2], cache.shape[3])[:T]


def _attention_fp64(q, kc, vc, bt, L, qk, vs):
    B, Q, Hq, D = q.shape
    ps, Hkv = kc.shape[1], kc.shape[2]
    G = Hq // Hkv
    out = np.zeros((B, Q, Hq, D), dtype=np.float64)
    for b in range(B):
        if Q == 0:
            break
        Lb = L[b]
        T = int(Lb.max())
        if T <= 0:
            continue
        npg = -(-T // ps)
        pages = bt[b, :npg].astype(np.intp)
        kb = _gather_tokens(kc, pages, T)
        vb = _gather_tokens(vc, pages, T)
        Lr = np.repeat(Lb, G)                  # row r = t * G + g
        live = Lr > 0
        chunk = max(1, _KEY_CHUNK_ELEMS // max(D, 1))
        for hk in range(Hkv):
            qq = q[b, :, hk * G:(hk + 1) * G, :].astype(np.float64).reshape(Q * G, D)
            S = np.empty((Q * G, T), dtype=np.float64)
            for c0 in range(0, T, chunk):
                c1 = min(T, c0 + chunk)
                Kc = E4M3_TABLE[kb[c0:c1, hk, :]]          # [c, D] exact
                np.matmul(qq, Kc.T, out=S[:, c0:c1])
            S *= qk
            for r in range(Q * G):
                S[r, max(int(Lr[r]), 0):] = -np.inf
            m = np.where(live, S.max(axis=1), 0.0)
            S -= m[:, None]
            np.exp(S, out=S)                   # invisible keys: exp(-inf) = 0
            S[~live] = 0.0
            den = S.sum(axis=1)
            acc = np.zeros((Q * G, D), dtype=np.float64)
            for c0 in range(0, T, chunk):
                c1 = min(T, c0 + chunk)
                Vc = E4M3_TABLE[vb[c0:c1, hk, :]]
                bad = np.isnan(Vc)
                if not bad.any():
                    acc += S[:, c0:c1] @ Vc
                    continue
                # a NaN code reaches exactly the rows that see its key: a key a row does not
                # see has probability 0 and is never multiplied (0 * NaN would be NaN)
                acc += S[:, c0:c1] @ np.where(bad, 0.0, Vc)
                sees = np.arange(c0, c1)[None, :] < Lr[:, None]        # [rows, c]
                acc[(sees.astype(np.float64) @ bad.astype(np.float64)) > 0] = np.nan
            with np.errstate(invalid="ignore", divide="ignore"):
                o = np.where(live[:, None], acc / np.where(live, den, 1.0)[:, None] * vs, 0.0)
            out[b, :, hk * G:(hk + 1) * G, :] = o.reshape(Q, G, D)
    return out


# --------------------------------------------------------------------------- mpmath

def _attention_mp(q, kc, vc, bt, L, qk, vs):
    B, Q, Hq, D = q.shape
    ps, Hkv = kc.shape[1], kc.shape[2]
    G = Hq // Hkv
    out = np.empty((B, Q, Hq, D), dtype=object)
    with mpmath.workdps(MP_DPS):
        zero = mpmath.mpf(0)
        mqk = mpmath.mpf(qk)
        mvs = mpmath.mpf(vs)
        for b in range(B):
            for t in range(Q):
                n = int(L[b, t])
                for h in range(Hq):
                    if n <= 0:
                        out[b, t, h, :] = [zero] * D
                        continue
                    hk = h // G
                    qv = [mpmath.mpf(float(x)) for x in q[b, t, h, :]]
                    scores, vals = [], []
                    for j in range(n):
                        page = int(bt[b, j // ps])
                        slot = j % ps
                        Kj = E4M3_TABLE[kc[page, slot, hk, :]]
                        Vj = E4M3_TABLE[vc[page, slot, hk, :]]
                        scores.append(mpmath.fdot(qv, [mpmath.mpf(float(x)) for x in Kj]) * mqk)
                        vals.append([mpmath.mpf(float(x)) for x in Vj])
                    m = max(scores)
                    p = [mpmath.exp(s - m) for s in scores]
                    den = mpmath.fsum(p)
                    for d in range(D):
                        out[b, t, h, d] = mpmath.fdot(p, [vv[d] for vv in vals]) / den * mvs
    return out


# --------------------------------------------------------------------------- public

def attention_reference(q, k_cache, v_cache, block_table, seq_lens, *, scale, k_scale=1.0,
                        v_scale=1.0, row_lengths=None, precision="fp64") -> np.ndarray:
    """Exact verification attention, contract part A ("Inputs", "E4M3FN decode", "Score").

    Parameters follow contract A / api.md: ``q`` float16 ``[B, Q, Hq, D]``; ``k_cache``,
    ``v_cache`` uint8 E4M3FN ``[num_pages, page_size, Hkv, D]`` (any strides); ``block_table``
    integer ``[B, W]``; ``seq_lens`` integer ``[B]``; optional ``row_lengths`` integer
    ``[B, Q]`` replacing the causal default ``L[b, t] = seq_lens[b] - Q + 1 + t``.

    Returns float64 ``[B, Q, Hq, D]``:
    ``out[b,t,h] = f32(v_scale) * sum_{j<L} softmax_j((q[b,t,h] . K_j) * qk_scale) V_j`` with
    ``qk_scale = f32(f32(scale) * f32(k_scale))`` and K/V the exactly decoded bytes of KV head
    ``h // (Hq // Hkv)``.  Rows with ``L <= 0`` are +0.  ``v_scale`` is used rounded to float32,
    as every kernel receives it (a no-op for values exact in float32).

    ``precision="fp64"`` is vectorised float64; ``"mp"`` evaluates in mpmath at 50 digits
    and rounds the result to float64 (see :func:`attention_reference_mp` for the mp values).
    Inputs are assumed NaN-free (a NaN code in a visible key propagates to that row).
    Bad arguments raise ``TypeError`` / ``ValueError`` naming the argument.
    """
    args = _validate(q, k_cache, v_cache, block_table, seq_lens, scale, k_scale, v_scale,
                     row_lengths, precision)
    if precision == "fp64":
        return _attention_fp64(*args)
    mp = _attention_mp(*args)
    return np.vectorize(float, otypes=[np.float64])(mp) if mp.size else np.zeros(mp.shape)


def attention_reference_mp(q, k_cache, v_cache, block_table, seq_lens, *, scale, k_scale=1.0,
                           v_scale=1.0, row_lengths=None) -> np.ndarray:
    """Contract part A in mpmath (50 digits): like :func:`attention_reference` with
    ``precision="mp"`` but returns an object array ``[B, Q, Hq, D]`` of ``mpmath.mpf``."""
    args = _validate(q, k_cache, v_cache, block_table, seq_lens, scale, k_scale, v_scale,
                     row_lengths, "mp")
    return _attention_mp(*args)
