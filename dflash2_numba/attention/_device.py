"""Device helpers shared by every attention variant: row lengths and the split schedule
(contract part A, "Inputs" and "Split schedule"). Integer arithmetic only, so every
variant computes identical schedules."""
from __future__ import annotations

from .._compat import cuda
from ..contract import KEYS_PER_SPLIT_TARGET, SINGLE_SPLIT_MAX_KEYS, TILE_KEYS


@cuda.jit(device=True, inline="always")
def row_length(seq_lens, row_lengths, use_rows, b, t, q_len):
    """L[b, t]: explicit row_lengths when use_rows != 0, else seq_lens[b] - Q + 1 + t."""
    if use_rows != 0:
        return row_lengths[b, t] + 0
    return seq_lens[b] - q_len + 1 + t


@cuda.jit(device=True, inline="always")
def request_keys(seq_lens, row_lengths, use_rows, b, q_len):
    """T = max_t L[b, t] (may be <= 0)."""
    T = row_length(seq_lens, row_lengths, use_rows, b, 0, q_len)
    for t in range(1, q_len):
        L = row_length(seq_lens, row_lengths, use_rows, b, t, q_len)
        if L > T:
            T = L
    return T


@cuda.jit(device=True, inline="always")
def active_split_count(T, splits):
    """A = 0 if T <= 0; 1 if T <= 128; else min(S, ceil(T / 64))."""
    if T <= 0:
        return 0
    if T <= SINGLE_SPLIT_MAX_KEYS:
        return 1
    A = (T + KEYS_PER_SPLIT_TARGET - 1) // KEYS_PER_SPLIT_TARGET
    if A > splits:
        A = splits
    return A


@cuda.jit(device=True, inline="always")
def split_first_tile(T, A, s):
    """First 32-key tile owned by split s < A."""
    n = (T + TILE_KEYS - 1) // TILE_KEYS
    base = n // A
    extra = n % A
    return s * base + min(s, extra)


@cuda.jit(device=True, inline="always")
def split_tile_count(T, A, s):
    """Number of 32-key tiles owned by split s < A."""
    n = (T + TILE_KEYS - 1) // TILE_KEYS
    base = n // A
    extra = n % A
    if s < extra:
        return base + 1
    return base
