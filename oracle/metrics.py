"""Comparison metrics (contract part C, "What a check compares").

* :func:`rel_l2` and :func:`max_abs`: the error of a kernel result against the FP64 oracle,
  computed in float64.
* :func:`first_mismatch`: the bitwise comparison between variants of one contract (raw
  bytes, so ``-0.0 != +0.0`` and NaNs compare by payload).
* :func:`fp16_rel_l2_bound` and :func:`fp16_excess`: what an FP16 output, one rounding of
  an FP32 result within a bound of the reference, may be off by, in relative L2 and per
  element, derived from the FP32 bound (never from the FP32 result itself).

Plain numpy; never imports numba or ``dflash2_numba``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

from ._args import as_array

__all__ = ["rel_l2", "max_abs", "first_mismatch", "Mismatch", "ulp16", "max_abs_bound",
           "fp16_rel_l2_bound", "fp16_excess"]


_EXACT_INT = 2 ** 53  # integers up to this magnitude convert to float64 exactly


def _real_array(name, x) -> np.ndarray:
    """``x`` as a float64 array, exactly: real numbers only (not complex, object, strings,
    None), no float wider than float64 and no integer past 2**53 (``TypeError`` /
    ``ValueError`` naming the argument)."""
    arr = as_array(name, x)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected a real numeric array, got dtype {arr.dtype}")
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        raise TypeError(f"{name}: dtype {arr.dtype} is wider than float64, in which the "
                        "metrics are computed")
    if arr.dtype.kind in "iu" and arr.size and (int(arr.max()) > _EXACT_INT
                                                or int(arr.min()) < -_EXACT_INT):
        raise ValueError(f"{name}: integers past 2**53 have no exact float64 value, in "
                         "which the metrics are computed")
    return arr.astype(np.float64)


def _bound(name, b, derived: bool = False) -> float:
    """A bound: a real number, finite and >= 0 (``TypeError`` / ``ValueError`` naming it).
    A ``derived`` one (computed from a reference, as :func:`max_abs_bound` gives it) may
    also be inf or NaN, what an infinite or NaN reference makes of it."""
    if isinstance(b, (bool, np.bool_)) or not isinstance(b, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a real number, got {type(b).__name__}")
    value = float(b)
    if derived and np.isnan(value):
        return value
    if value < 0 or (not derived and not np.isfinite(value)) or np.isnan(value):
        raise ValueError(f"{name}: must be {'' if derived else 'finite and '}>= 0, got {b!r}")
    return value


def _pair(x, ref, name="x"):
    a, r = as_array(name, x), as_array("ref", ref)
    if a.shape != r.shape:
        raise ValueError(f"{name}: shape {a.shape} differs from ref shape {r.shape}")
    return _real_array(name, a), _real_array("ref", r)


def _norm_parts(x: np.ndarray) -> Tuple[float, float]:
    """``(m, t)`` with ``||x|| = m * t``: ``m = max|x|`` and ``t = ||x / m||`` in
    ``[1, sqrt(n)]``, so neither the squares nor the norm itself overflow.  ``(0, 0)``
    for an empty or zero ``x``; ``(inf, 1)`` when ``x`` holds an infinity."""
    if x.size == 0:
        return 0.0, 0.0
    m = float(np.max(np.abs(x)))
    if m == 0.0:
        return 0.0, 0.0
    if not np.isfinite(m):
        return m, 1.0
    y = x / m
    return m, float(np.sqrt(np.dot(y.ravel(), y.ravel())))


def _norm_ratio(d: np.ndarray, r: np.ndarray) -> float:
    """``||d|| / ||r||`` for finite ``d`` and a finite, nonzero ``r``, formed from
    :func:`_norm_parts` so that norms past float64's range still give their ratio."""
    md, td = _norm_parts(d)
    mr, tr = _norm_parts(r)
    with np.errstate(over="ignore"):
        return float((md / mr) * (td / tr))


def rel_l2(x, ref) -> float:
    """Contract C: relative L2 error ``||x - ref|| / ||ref||`` in float64.

    Conventions: a NaN anywhere in ``x`` or ``ref`` gives ``nan``; an infinity only in
    ``x`` gives ``inf``; an infinity in ``ref`` gives ``nan``.  When ``||ref|| == 0``
    (empty arrays included) the error is relative to nothing: ``0.0`` when ``x`` is zero
    too, else ``inf`` (any nonzero ``x`` fails every relative bound).  Shapes must match
    (ValueError); integer inputs must be exact in float64 (ValueError past 2**53).
    """
    a, r = _pair(x, ref)
    if np.isnan(a).any() or np.isnan(r).any():
        return float("nan")
    if np.isinf(r).any():
        return float("nan")
    if not np.isfinite(a).all():
        return float("inf")
    if _norm_parts(r)[0] == 0.0:
        return 0.0 if _norm_parts(a)[0] == 0.0 else float("inf")
    with np.errstate(over="ignore"):
        d = a - r
    if np.isinf(d).any():
        # finite inputs whose difference overflows (|x - ref| > 1.8e308): the halves'
        # difference (halving is exact here) over the halved ref gives the same ratio
        return _norm_ratio(a * 0.5 - r * 0.5, r * 0.5)
    return _norm_ratio(d, r)


def max_abs(x, ref) -> float:
    """Contract C: ``max |x - ref|`` in float64 (NaN anywhere -> nan; empty -> 0.0)."""
    a, r = _pair(x, ref)
    if a.size == 0:
        return 0.0
    if np.isnan(a).any() or np.isnan(r).any():
        return float("nan")
    # over: finite inputs whose difference passes float64's range give inf (the true
    # |x - ref| > 1.8e308), as rel_l2 handles them, without a floating-point warning
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(a - r)
    return float(np.max(d))  # inf - inf -> nan propagates through max


def ulp16(x) -> np.ndarray:
    """Spacing of float16 just above ``|f16(x)|`` (2**-24 among the subnormals), as float64:
    at least the spacing of the binade ``x`` lies in, so a float16 rounding of ``x`` is
    within half of it. At the largest finite value, 65504, that is its binade's spacing,
    32 (the next float16 up is inf); where ``f16(x)`` itself overflows, inf."""
    x = _real_array("x", x)
    with np.errstate(over="ignore", invalid="ignore"):
        a = np.abs(x).astype(np.float16)
        up = np.nextafter(a, np.float16(np.inf)).astype(np.float64)
        below = np.nextafter(a, np.float16(0)).astype(np.float64)
        a64 = a.astype(np.float64)
        top = np.isinf(up) & np.isfinite(a64)      # 65504: the spacing below it is its binade's
        return np.where(np.isinf(a64), np.inf, np.where(top, a64 - below, up - a64))


def max_abs_bound(ref, rel_bound: float) -> float:
    """The per-element (max abs) error a result may have under a relative bound: ``rel_bound
    * max|ref|`` (0.0 for an empty ``ref``), the bound applied to the largest reference value."""
    b = _bound("rel_bound", rel_bound)
    return b * float(np.max(np.abs(_real_array("ref", ref)), initial=0.0))


def fp16_rel_l2_bound(ref, fp32_rel_bound: float) -> float:
    """The relative L2 error an FP16 output may have when it is the round-to-nearest of an
    FP32 result ``y`` with ``||y - ref|| <= b ||ref||`` (``b = fp32_rel_bound``): each
    rounding moves an element by at most ``2**-11 |y|`` (normal) or ``2**-25`` (subnormal),
    so ``||f16(y) - ref|| <= 2**-11 (1 + b) ||ref|| + 2**-25 sqrt(n) + b ||ref||``.
    ``inf`` when ``||ref|| == 0`` (no relative bound; the per-element check applies)."""
    b = _bound("fp32_rel_bound", fp32_rel_bound)
    r = _real_array("ref", ref)
    m, t = _norm_parts(r)
    norm = m * t
    if norm == 0.0:
        return float("inf")
    return 2.0 ** -11 * (1.0 + b) + b + 2.0 ** -25 * np.sqrt(r.size) / norm


def fp16_excess(out16, ref, fp32_abs_bound: float) -> float:
    """How far the worst element of an FP16 output lies past what one rounding of an FP32
    result within ``fp32_abs_bound`` of ``ref`` allows: ``max(|out16 - ref| - (ulp16(out16) / 2
    + fp32_abs_bound))``; ``<= 0`` means every element is within. (For ``y`` in a binade,
    ``f16(y)`` is at least that binade's lower end, so ``ulp16(out16) / 2`` covers the
    rounding of ``y``.) NaN anywhere gives ``nan``, an infinity ``inf``; empty arrays ``-inf``."""
    bound = _bound("fp32_abs_bound", fp32_abs_bound, derived=True)
    a, r = _pair(out16, ref, "out16")
    if a.size == 0:
        return float("-inf")
    if np.isnan(a).any() or np.isnan(r).any() or np.isnan(bound):
        return float("nan")
    if np.isinf(a).any() or np.isinf(r).any():
        return float("inf")      # an FP16 overflow (or an infinite reference): out of bounds
    with np.errstate(invalid="ignore", over="ignore"):
        excess = np.abs(a - r) - (0.5 * ulp16(a) + bound)
    return float(np.max(excess))


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
    x = as_array("a", a)
    y = as_array("b", b)
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
