"""Pieces shared by the GDN kernels: compile-time constants, the launch plan, the
kernel signatures the PTX report compiles, and the device helper the chunked kernel uses
to normalise a q/k row (serial runs the same chain inline).

Kernel argument list (both families, in this order)::

    q, k      fp16|fp32 [B, T, H, K]      read as FP32 (exact)
    v         fp16|fp32 [B, T, HV, V]
    g, beta   fp32 [B, T, HV]
    o         fp16|fp32 [B, T, HV, V]     written once per token (FP32 result, RNE cast)
    h0        fp32 [S0, HV, K, V]         initial states; row h0_idx[n] (-1: zeros)
    h0_idx    int32 [N]
    hT        fp32 [S1, HV, K, V]         final states; row hT_idx[n] (-1: not written)
    hT_idx    int32 [N]                   (h0 is hT for the in-place state cache)
    seqs      int32 [N, 3]                (batch row, first token, length) per sequence
    work      int32 [n_items, 3]          (sequence, value head, first V column) per item
    [scratch  fp32 [grid, SCRATCH_FLOATS(K)]   chunked family only]
    scale     fp32
    use_l2    int32 (0/1)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import types

from .._compat import SIMULATOR, cuda
from ..contract import GDN_CHUNK, GDN_L2NORM_EPS

# --- compile-time constants (module globals are frozen into the kernels) ----------------
C = GDN_CHUNK            # chunk length of the chunked family (64)
CP1 = C + 1              # padded row of the 64 x 64 shared matrix (no bank conflicts)
MAXD = 128               # largest K and V (shared arrays are sized for it)
VB = 32                  # V columns owned by one CTA (every V in {32, 64, 128} is a multiple)

F32 = np.float32
ZERO = np.float32(0.0)
ONE = np.float32(1.0)
EPS = np.float32(GDN_L2NORM_EPS)


def scratch_floats(K: int) -> int:
    """Global scratch per CTA of the chunked kernel: Kn^T, Qs^T, X^T, Kd^T, W^T ([K, C] each)
    and P ([C, C])."""
    return 5 * K * C + C * C


@cuda.jit(device=True)
def row_recip(x, b, t, h, K, use_l2):
    """``1 / sqrt(sum_m x_m^2 + eps)`` of row ``x[b, t, h, :]`` (``1`` when ``use_l2 == 0``).

    Order: ``ss = 0; for m = 0..K-1: ss = fma(x_m, x_m, ss)``; then ``ss + eps`` (add),
    ``sqrt`` (IEEE), ``1 / .`` (IEEE division)."""
    if use_l2 == 0:
        return ONE
    ss = ZERO
    for m in range(K):
        xm = F32(x[b, t, h, m])
        ss = cuda.fma(xm, xm, ss)
    return ONE / F32(math.sqrt(ss + EPS))


# --- signatures for the PTX report (C-contiguous production layouts) -------------------

def _arr(dt, nd, layout="C"):
    return types.Array(dt, nd, layout)


def kernel_signatures(with_scratch: bool):
    """``(fp16 in, fp16 out)``, ``(fp16 in, fp32 out)``, ``(fp32 in, fp32 out)``."""
    sigs = []
    for din, dout in ((types.float16, types.float16), (types.float16, types.float32),
                      (types.float32, types.float32)):
        args = [_arr(din, 4), _arr(din, 4), _arr(din, 4),
                _arr(types.float32, 3), _arr(types.float32, 3),
                _arr(dout, 4),
                _arr(types.float32, 4), _arr(types.int32, 1),
                _arr(types.float32, 4), _arr(types.int32, 1),
                _arr(types.int32, 2), _arr(types.int32, 2)]
        if with_scratch:
            args.append(_arr(types.float32, 2))
        args += [types.float32, types.int32]
        sigs.append(tuple(args))
    return tuple(sigs)


# --- the launch plan --------------------------------------------------------------------

@dataclass
class GdnPlan:
    """Everything a GDN variant needs to launch: device arrays and sizes (built and
    validated by :func:`dflash2_numba.gdn.api.gdn_prefill`)."""

    q: Any
    k: Any
    v: Any
    g: Any
    beta: Any
    o: Any
    h0: Any
    h0_idx: Any
    hT: Any
    hT_idx: Any
    seqs: Any                 # device int32 [N, 3]
    work: Any                 # device int32 [n_items, 3], longest sequences first
    n_items: int
    scale: np.float32
    use_l2: np.int32
    B: int
    T: int
    H: int
    HV: int
    K: int
    V: int
    N: int
    in_dtype: np.dtype
    out_dtype: np.dtype
    max_ctas: int = 0         # chunked: persistent grid size cap (0 = from the device)
    threads: int = 0          # chunked: threads per CTA (0 = default)
    scratch: Any = None       # per-CTA global scratch, allocated by the variant's prepare()


def default_max_ctas() -> int:
    """Persistent-grid cap of the chunked kernel: one CTA per SM (8 on the simulator).

    (sm_70 PTX of the frozen kernel uses ~136 registers x 256 threads: one CTA fits an SM.)"""
    if SIMULATOR:
        return 8
    try:
        return int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
    except Exception:  # pragma: no cover - driver problems
        return 132
