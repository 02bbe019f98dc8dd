"""The patched simulator's thread blocks (:mod:`dflash2_numba._sim_blocks`): simulated
threads kept from block to block give every thread its own indices in every block, keep
the simulator's barrier and abort semantics, and a forked child starts without the
parent's."""
import multiprocessing
import threading

import numpy as np
import pytest

from dflash2_numba._compat import SIMULATOR, cuda

pytestmark = pytest.mark.skipif(not SIMULATOR, reason="the simulator's thread blocks")


@cuda.jit
def _indices(out):
    """out[block, thread] = (blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y, id of the
    Python thread that ran it)."""
    b = cuda.blockIdx.x + cuda.gridDim.x * cuda.blockIdx.y
    t = cuda.threadIdx.x + cuda.blockDim.x * cuda.threadIdx.y
    out[b, t, 0] = cuda.blockIdx.x
    out[b, t, 1] = cuda.blockIdx.y
    out[b, t, 2] = cuda.threadIdx.x
    out[b, t, 3] = cuda.threadIdx.y
    out[b, t, 4] = threading.get_ident()


def _launch_indices(grid, block):
    nb, nt = grid[0] * grid[1], block[0] * block[1]
    out = np.zeros((nb, nt, 5), np.int64)
    _indices[grid, block](out)
    return out


def test_every_thread_of_every_block_sees_its_own_indices_on_kept_threads():
    for _ in range(2):                                  # the second launch reuses the threads
        out = _launch_indices((3, 2), (4, 2))
        for by in range(2):
            for bx in range(3):
                for ty in range(2):
                    for tx in range(4):
                        assert tuple(out[bx + 3 * by, tx + 4 * ty, :4]) == (bx, by, tx, ty)
    # one Python thread per threadIdx, the same one in every block and launch
    again = _launch_indices((3, 2), (4, 2))
    per_thread = again[:, :, 4]
    assert len(set(per_thread[0])) == 8
    assert (per_thread == per_thread[0]).all() and (per_thread == out[:, :, 4]).all()


@cuda.jit
def _partial_barrier(out):
    """Threads 0..7 leave at once; the others meet at two barriers around a shared
    exchange (the simulator counts a thread that has returned as arrived)."""
    sm = cuda.shared.array(32, np.int32)
    t = cuda.threadIdx.x
    if t < 8:
        return
    sm[t] = t * 10 + cuda.blockIdx.x
    cuda.syncthreads()
    v = sm[8 + (t + 1 - 8) % 24]
    cuda.syncthreads()
    out[cuda.blockIdx.x, t] = v


def test_a_barrier_opens_when_every_live_thread_waits_and_threads_that_left_count():
    out = np.full((3, 32), -1, np.int32)
    _partial_barrier[3, 32](out)
    for b in range(3):
        assert (out[b, :8] == -1).all()
        want = [(8 + (t + 1 - 8) % 24) * 10 + b for t in range(8, 32)]
        assert out[b, 8:].tolist() == want


@cuda.jit
def _fails_in_one_thread(out, bad_block):
    t = cuda.threadIdx.x
    cuda.syncthreads()
    if cuda.blockIdx.x == bad_block[0] and t == 5:
        raise ValueError("thread five fails")
    cuda.syncthreads()
    out[cuda.blockIdx.x, t] = t + 1


def test_an_exception_aborts_the_block_names_the_thread_and_spares_later_launches():
    before = threading.active_count()
    d_out = cuda.to_device(np.zeros((2, 16), np.int32))
    with pytest.raises(ValueError, match=r"tid=\[5, 0, 0\] ctaid=\[1, 0, 0\]: thread five fails"):
        _fails_in_one_thread[2, 16](d_out, np.array([1], np.int32))
    out = d_out.copy_to_host()
    assert (out[0] == np.arange(1, 17)).all()          # block 0 ran before block 1 failed
    assert (out[1] == 0).all()                         # block 1 stopped at its second barrier
    # the aborted block's threads end; the next launch of that shape gets working threads
    out = np.zeros((2, 16), np.int32)
    _fails_in_one_thread[2, 16](out, np.array([-1], np.int32))
    assert (out == np.arange(1, 17)).all()
    def retired():
        return [t for t in threading.enumerate() if getattr(t, "_retire", False)]

    for _ in range(500):
        if not retired():
            break
        threading.Event().wait(0.01)
    assert not retired()                               # the aborted block's threads ended
    assert threading.active_count() <= before + 16     # at most one new idle set


def _child_launch(queue):
    out = _launch_indices((2, 1), (4, 1))
    queue.put(out[:, :, :4].tolist())


def test_a_forked_child_runs_blocks_on_its_own_threads():
    _launch_indices((2, 1), (4, 1))                     # the parent holds idle threads now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_launch, args=(queue,))
    child.start()
    got = queue.get(timeout=120)
    child.join(timeout=120)
    assert child.exitcode == 0
    assert got == [[[b, 0, t, 0] for t in range(4)] for b in range(2)]


def test_a_debug_launch_keeps_the_simulators_own_threads():
    k = cuda.jit(debug=True, opt=False)(_partial_barrier.py_func)
    out = np.full((2, 32), -1, np.int32)
    k[2, 32](out)
    assert out[1, 8:].tolist() == [(8 + (t + 1 - 8) % 24) * 10 + 1 for t in range(8, 32)]
