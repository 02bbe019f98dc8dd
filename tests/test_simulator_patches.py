"""The package's patches to numba's CUDA simulator (``dflash2_numba._simulator``): every
thread of a block works on one shared array, even when two threads reach its allocation at
the same time."""
from __future__ import annotations

import os

import numpy as np
import pytest

import dflash2_numba  # noqa: F401  (installs the patches on the simulator)
from dflash2_numba._compat import cuda

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM", "0") != "1",
                                reason="simulator patches")


class _RaceWindow(dict):
    """An allocation table seen by a thread that looked before another thread stored its
    array: ``get`` finds nothing, but the other thread's array is already in the table."""

    def get(self, key, default=None):
        return default


def _allocate_here(shared):
    return shared.array(8, np.float32)


def test_shared_array_from_one_line_is_one_array_inside_the_race_window():
    """A thread that found no array (another block thread stored one meanwhile) must get the
    stored array, not make its own: its writes would be lost to the others."""
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared(0)
    stored = _allocate_here(shared)
    shared._allocations = _RaceWindow(shared._allocations)
    assert _allocate_here(shared) is stored


def _sum_kernel(out):
    buf = cuda.shared.array(64, np.float32)
    tid = cuda.threadIdx.x
    buf[tid] = np.float32(tid)
    cuda.syncthreads()
    if tid == 0:
        acc = np.float32(0)
        for i in range(64):
            acc += buf[i]
        out[cuda.blockIdx.x] = acc


def test_every_thread_of_every_block_writes_the_same_shared_array():
    out = np.zeros(8, np.float32)
    cuda.jit(_sum_kernel)[8, 64](out)
    assert (out == np.float32(64 * 63 // 2)).all()
