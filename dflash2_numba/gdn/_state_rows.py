"""Exact FP32 copies of whole recurrent states between the caller's state arrays and a
variant's own rows of states (``[rows][HV][K][V]``), for a variant that runs the recurrence
of one sequence in several launches (:mod:`.chunked_overlap`): each launch reads its
starting states from rows and writes its last states to other rows, and these two kernels
move the caller's initial states in and the final states out.

No arithmetic: every element is a load and a store of the same FP32 word (or a stored
zero where the caller gave no initial state, as the recurrence kernels' own
``load_state_slice`` does), so the bits are the caller's. The indices are the plan's
(``h0_idx`` / ``hT_idx``), already range-checked on the host by the API; a negative one
means none.
"""
from __future__ import annotations

from numba import types

from .._compat import cuda
from ._common import ZERO

COPY_THREADS = 256


def copy_blocks(n_rows: int, HV: int, K: int, V: int) -> int:
    """Grid of one copy launch: about one element a thread for ``n_rows`` states, at most
    4096 blocks (the kernels stride over the rest)."""
    return max(1, min(4096, -(-n_rows * HV * K * V // COPY_THREADS)))


@cuda.jit(device=True, inline=True)
def state_element(r, KV, V):
    """``(value head, row, column)`` of element ``r`` of one ``[HV][K][V]`` state
    (``KV = K * V``)."""
    hv = r // KV
    r -= hv * KV
    m = r // V
    return hv, m, r - m * V


def gdn_state_gather_kernel(h0, h0_idx, rows):
    """``rows[n] = h0[h0_idx[n]]`` (zeros when ``h0_idx[n] < 0``) for n < len(h0_idx).
    Keeps contract.md part B's initial states (zeros where none) as exact FP32 copies, no
    arithmetic, for the ``chunked`` family's variants (frozen ``gdn_chunked_kernel``'s bits)."""
    HV = rows.shape[1]
    K = rows.shape[2]
    V = rows.shape[3]
    per = HV * K * V
    total = h0_idx.shape[0] * per
    e = cuda.grid(1)
    step = cuda.gridsize(1)
    while e < total:
        n = e // per
        hv, m, c = state_element(e - n * per, K * V, V)
        i = h0_idx[n]
        if i >= 0:
            rows[n, hv, m, c] = h0[i, hv, m, c]
        else:
            rows[n, hv, m, c] = ZERO
        e += step


def gdn_state_scatter_kernel(rows, src_row, hT, hT_idx):
    """``hT[hT_idx[n]] = rows[src_row[n]]`` for n < len(hT_idx) with ``hT_idx[n] >= 0``.
    Keeps contract.md part B's final states as exact FP32 copies, no arithmetic, for the
    ``chunked`` family's variants (frozen ``gdn_chunked_kernel``'s bits)."""
    HV = rows.shape[1]
    K = rows.shape[2]
    V = rows.shape[3]
    per = HV * K * V
    total = hT_idx.shape[0] * per
    e = cuda.grid(1)
    step = cuda.gridsize(1)
    while e < total:
        n = e // per
        i = hT_idx[n]
        if i >= 0:
            hv, m, c = state_element(e - n * per, K * V, V)
            hT[i, hv, m, c] = rows[src_row[n], hv, m, c]
        e += step


def _arr(dt, nd):
    return types.Array(dt, nd, "C")


GATHER_SIGNATURES = ((_arr(types.float32, 4), _arr(types.int32, 1), _arr(types.float32, 4)),)
SCATTER_SIGNATURES = ((_arr(types.float32, 4), _arr(types.int32, 1), _arr(types.float32, 4),
                       _arr(types.int32, 1)),)
