"""E4M3FN codec (contract part A, "E4M3FN decode").

Host encode/decode go through ``ml_dtypes.float8_e4m3fn`` (round to nearest even;
NaN stays NaN). ``encode`` saturates finite values beyond +-448 to +-448 first, as
a KV-cache writer does. ``DECODE_TABLE`` is the 256-entry float32 table that every
kernel uses; :func:`decode_exact` derives the same values from the bit fields alone
so the table can be checked against an independent rendering.
"""
from __future__ import annotations

import numbers

import ml_dtypes
import numpy as np

E4M3 = ml_dtypes.float8_e4m3fn
E4M3_MAX = 448.0


def _wide_float(x) -> np.ndarray:
    """``x`` as float64 when it is float64 (or wider), else float32: each is rounded to
    E4M3 once, from its own value (float64 -> float32 -> E4M3 would round twice)."""
    a = np.asarray(x)
    wide = a.dtype.kind == "f" and a.dtype.itemsize >= 8
    return a.astype(np.float64 if wide else np.float32)


def encode(x) -> np.ndarray:
    """float array -> uint8 E4M3FN codes (RNE, saturating at +-448, NaN -> NaN code).

    float64 input is rounded once, from its float64 value; wider floats go through float64.
    """
    a = _wide_float(x)
    a = np.where(np.isnan(a), a, np.clip(a, -E4M3_MAX, E4M3_MAX))
    return a.astype(E4M3).view(np.uint8)


def decode(codes) -> np.ndarray:
    """uint8 E4M3FN codes -> float32 values (0x7F / 0xFF decode to NaN)."""
    c = np.asarray(codes)
    if c.dtype != np.uint8:
        raise TypeError(f"codes: expected uint8 E4M3FN bytes, got {c.dtype}")
    return c.view(E4M3).astype(np.float32)


def decode_exact(code: int) -> float:
    """The contract's bit-field reading of one code (0..255), independent of ml_dtypes."""
    if isinstance(code, (bool, np.bool_)) or not isinstance(code, numbers.Integral):
        raise TypeError(f"code: expected an integer 0..255, got {type(code).__name__}")
    code = int(code)
    if not 0 <= code <= 255:
        raise ValueError(f"code: expected 0..255, got {code}")
    sign = -1.0 if code & 0x80 else 1.0
    exp = (code >> 3) & 0xF
    man = code & 0x7
    if exp == 0xF and man == 0x7:
        return float("nan")
    if exp == 0:
        return sign * man * 2.0 ** -9
    return sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7)


DECODE_TABLE = decode(np.arange(256, dtype=np.uint8))
DECODE_TABLE.setflags(write=False)
