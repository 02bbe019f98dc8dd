"""The two primitives of the host emulations (:mod:`.gdn.emulate`, :mod:`.attention.emulate`):
a correctly rounded FP32 fused multiply-add and ``E``, the simulator's exponential, both
vectorised over numpy arrays. No numba here."""
from __future__ import annotations

import math

import numpy as np

F32 = np.float32
F64 = np.float64
OVERFLOW_MIDPOINT = 2.0 ** 128 - 2.0 ** 103      # between FLT_MAX and 2**128: rounds to inf

__all__ = ["fma32", "exp32", "OVERFLOW_MIDPOINT"]


def fma32(a, b, c):
    """Correctly rounded FP32 ``a * b + c`` (elementwise, broadcasting), like ``fma.rn.f32``.

    The float64 product of two float32 values is exact; the float64 sum is rounded once,
    and rounding it again to float32 is wrong only when it lands exactly on a float32
    midpoint while the exact sum does not; the exact error of the sum (TwoSum) decides.
    The overflow threshold ``2**128 - 2**103`` is such a midpoint too: a sum rounded onto it
    from below gives FLT_MAX, not inf (as :func:`dflash2_numba._compat.fma32_exact`).
    """
    a = np.asarray(a, dtype=F32)
    b = np.asarray(b, dtype=F32)
    c = np.asarray(c, dtype=F32)
    scalar = a.ndim == 0 and b.ndim == 0 and c.ndim == 0
    a, b, c = np.atleast_1d(a), np.atleast_1d(b), np.atleast_1d(c)
    p = a.astype(F64) * b.astype(F64)
    c64 = c.astype(F64)
    with np.errstate(over="ignore", invalid="ignore"):
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)
        f = s.astype(F32)
    f = np.array(f, dtype=F32, copy=True)
    fin = np.isfinite(s)
    cand = fin & (err != 0) & (f.astype(F64) != s)
    if np.any(cand):
        idx = np.nonzero(cand)
        sv = s[idx]
        fv = f[idx]
        up = sv > fv.astype(F64)
        gv = np.where(up, np.nextafter(fv, F32(np.inf)), np.nextafter(fv, F32(-np.inf)))
        mid = (fv.astype(F64) + gv.astype(F64)) * 0.5
        tie = sv == mid
        if np.any(tie):
            ev = np.broadcast_to(err, s.shape)[idx]
            pick_g = (ev > 0) == (gv.astype(F64) > fv.astype(F64))
            fv = np.where(tie & pick_g, gv, fv)
            f[idx] = fv
        ev = np.broadcast_to(err, s.shape)
        below = cand & np.isinf(f) & (np.abs(s) == OVERFLOW_MIDPOINT) & ((ev > 0) != (s > 0))
        f[below] = np.copysign(np.finfo(F32).max, s[below]).astype(F32)
    return f[0] if scalar else f


def exp32(x):
    """``E(x)``: float32 of the float64 exponential of a float32 (the simulator's ``math.exp``)."""
    x = np.asarray(x, dtype=F32)
    flat = [F32(math.exp(float(e))) for e in x.ravel()]
    return np.array(flat, dtype=F32).reshape(x.shape)
