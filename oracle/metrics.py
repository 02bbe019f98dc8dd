"""Comparison metrics (contract part C, "What a check compares").

* :func:`rel_l2` and :func:`max_abs`: the error of a kernel result against the FP64 oracle,
  computed in float64.
* :func:`first_mismatch`: the bitwise comparison between variants of one contract (raw
  bytes, so ``-0.0 != +0.0`` and NaNs compare by payload).

Plain numpy; never imports numba or ``dflash2_numba``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

__all__ = ["rel_l2", "max_abs", "first_mismatch", "Mismatch"]


def _pair(x, ref, name="x"):
    a = np.asarray(x)
    r = np.asarray(ref)
    if a.shape != r.shape:
        raise ValueError(f"{name}: shape {a.shape} differs from ref shape {r.shape}")
    for nm, arr in ((name, a), ("ref", r)):
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{nm}: expected a real numeric array, got dtype {arr.dtype}")
    return a.astype(np.float64), r.astype(np.float64)


def _norm2(x: np.ndarray) -> float:
    """Euclidean norm in float64 without overflow/underflow of the squares."""
    if x.size == 0:
        return 0.0
    m = float(np.max(np.abs(x)))
    if m == 0.0 or not np.isfinite(m):
        return m
    y = x / m
    return m * float(np.sqrt(np.dot(y.ravel(), y.ravel())))


def rel_l2(x, ref) -> float:
    """Contract C: relative L2 error ``||x - ref|| / ||ref||`` in float64.

    Conventions: a NaN anywhere in ``x`` or ``ref`` gives ``nan``; an infinity only in
    ``x`` gives ``inf``; an infinity in ``ref`` gives ``nan``; when ``||ref|| == 0`` (including empty arrays) the result is the *absolute*
    ``||x||`` (0.0 when ``x`` is zero too).  Shapes must match (ValueError).
    """
    a, r = _pair(x, ref)
    if np.isnan(a).any() or np.isnan(r).any():
        return float("nan")
    with np.errstate(invalid="ignore", over="ignore"):
        d = a - r
    if np.isnan(d).any():
        return float("nan")
    nr = _norm2(r)
    half = np.isinf(d).any() and np.isfinite(a).all() and np.isfinite(r).all()
    if nr == 0.0:
        return _norm2(a)
    if np.isinf(nr):
        return float("nan")
    if half:
        # finite inputs whose difference overflows (|x - ref| > 1.8e308): the halves'
        # difference (halving is exact) over ||ref||, doubled, so a finite ratio comes out
        return 2.0 * (_norm2(a * 0.5 - r * 0.5) / nr)
    return _norm2(d) / nr


def max_abs(x, ref) -> float:
    """Contract C: ``max |x - ref|`` in float64 (NaN anywhere -> nan; empty -> 0.0)."""
    a, r = _pair(x, ref)
    if a.size == 0:
        return 0.0
    if np.isnan(a).any() or np.isnan(r).any():
        return float("nan")
    with np.errstate(invalid="ignore"):
        d = np.abs(a - r)
    return float(np.max(d))  # inf - inf -> nan propagates through max


@dataclass(frozen=True)
class Mismatch:
    """Result of :func:`first_mismatch` when two arrays differ.

    ``reason`` is ``"value"`` (bytes differ at ``flat_index`` / ``index``), ``"shape"`` or
    ``"dtype"`` (then the index fields are None and ``a_value``/``b_value`` hold the
    shapes/dtypes).  ``count`` is the number of differing elements (value mismatches).
    """

    reason: str
    flat_index: Optional[int] = None
    index: Optional[Tuple[int, ...]] = None
    a_value: Any = None
    b_value: Any = None
    a_bytes: Optional[str] = None
    b_bytes: Optional[str] = None
    count: int = 0

    def __str__(self) -> str:
        if self.reason == "value":
            return (f"first mismatch at {self.index} (flat {self.flat_index}): "
                    f"{self.a_value!r} [{self.a_bytes}] vs {self.b_value!r} [{self.b_bytes}]; "
                    f"{self.count} element(s) differ")
        return f"{self.reason} mismatch: {self.a_value} vs {self.b_value}"


def first_mismatch(a, b) -> Optional[Mismatch]:
    """Contract C bitwise comparison: ``None`` when ``a`` and ``b`` have the same dtype,
    the same shape and identical bytes element by element, else a :class:`Mismatch`.

    Bytes are compared in logical (C) element order regardless of memory layout, so
    ``-0.0`` differs from ``+0.0`` and NaNs compare by their payload bits.
    """
    x = np.asarray(a)
    y = np.asarray(b)
    if x.dtype != y.dtype:
        return Mismatch("dtype", a_value=str(x.dtype), b_value=str(y.dtype))
    if x.shape != y.shape:
        return Mismatch("shape", a_value=tuple(x.shape), b_value=tuple(y.shape))
    if x.dtype.hasobject:
        raise TypeError(f"a: object arrays have no defined bytes (dtype {x.dtype})")
    n = x.size
    if n == 0:
        return None
    isz = x.dtype.itemsize
    xb = np.ascontiguousarray(x).reshape(-1).view(np.uint8).reshape(n, isz)
    yb = np.ascontiguousarray(y).reshape(-1).view(np.uint8).reshape(n, isz)
    diff = np.any(xb != yb, axis=1)
    if not diff.any():
        return None
    flat = int(np.argmax(diff))
    idx = tuple(int(i) for i in np.unravel_index(flat, x.shape))
    xv = x.reshape(-1)[flat]
    yv = y.reshape(-1)[flat]
    return Mismatch("value", flat_index=flat, index=idx,
                    a_value=xv.item() if hasattr(xv, "item") else xv,
                    b_value=yv.item() if hasattr(yv, "item") else yv,
                    a_bytes=xb[flat].tobytes().hex(), b_bytes=yb[flat].tobytes().hex(),
                    count=int(diff.sum()))
