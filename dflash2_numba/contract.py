"""Every constant of the numerical contract (``shared/design/contract.md``) in one place,
and the host form of the attention split schedule.

Kernels import their constants from here as float32/int values so that no bare
Python float (float64) reaches device code.
"""
from __future__ import annotations

import numpy as np

# --- attention (part A) -------------------------------------------------------------
K_SLICE = 16                      # "K16": dot products in fresh FP32 slices of 16
TILE_KEYS = 32                    # "N32": keys per online-softmax tile
HALF_TILE = 16                    # PV runs over the tile in two halves of 16 keys
DEFAULT_SPLITS = 80               # logical splits S
MAX_LOGICAL_SPLITS = 1 << 16     # the most logical splits a call or workspace accepts
ATTENTION_OUT_DTYPES = (np.float16, np.float32)   # out_dtype: the FP16 output or the pre-cast FP32
MAX_GRID_YZ = 65535              # CUDA's limit on a launch's second and third grid dimensions
SINGLE_SPLIT_MAX_KEYS = 128       # T <= 128 -> one active split
KEYS_PER_SPLIT_TARGET = 64        # otherwise A = min(S, ceil(T / 64))
MAX_Q = 8                         # q8: at most 8 new tokens per request
MAX_GROUP = 8                     # query heads per KV head
HEAD_DIMS = (64, 128, 256)

NEG_INF = np.float32(-1e30)       # "minus infinity" of scores, m and lse
LIVE_M_THRESHOLD = np.float32(-1e20)  # combine reads splits with m > -1e20
EXP_CLAMP = np.float32(-80.0)     # exp arguments are clamped at -80
RESIDUAL_SCALE = np.float32(2048.0)       # lo = f16((p - hi) * 2^11)
RESIDUAL_UNSCALE = np.float32(2.0 ** -11)  # Vr = V * 2^-11 (exact)
SENTINEL = np.float32(-777.0)     # workspace poison value

# --- acceptance -----------------------------------------------------------------------
FP32_REL_L2_BOUND = 1e-5          # an FP32 result's relative L2 against the FP64 oracle, at most

# --- GDN (part B) ------------------------------------------------------------------
GDN_CHUNK = 64
GDN_L2NORM_EPS = np.float32(1e-6)
GDN_DIMS = (32, 64, 128)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def active_splits(T: int, S: int) -> int:
    """Number of active splits ``A`` for a request whose longest row sees ``T`` keys."""
    if T <= 0:
        return 0
    if T <= SINGLE_SPLIT_MAX_KEYS:
        return 1
    return min(S, ceil_div(T, KEYS_PER_SPLIT_TARGET))


def split_tiles(T: int, S: int):
    """``[(first_tile, n_tiles)]`` for each active split, in split order."""
    A = active_splits(T, S)
    if A == 0:
        return []
    n = ceil_div(T, TILE_KEYS)
    base, extra = divmod(n, A)
    return [(s * base + min(s, extra), base + (1 if s < extra else 0)) for s in range(A)]


def default_row_lengths(seq_lens, q_len: int) -> np.ndarray:
    """``L[b, t] = seq_lens[b] - Q + 1 + t`` (causal inside the block), as int64."""
    seq = np.asarray(seq_lens, dtype=np.int64)
    return seq[:, None] - q_len + 1 + np.arange(q_len, dtype=np.int64)[None, :]
