"""How the patched CUDA simulator runs a thread block (:mod:`._simulator`, item 3).

numba's simulator starts one new OS thread per simulated CUDA thread for every block and
busy-polls them (holding the GIL they need); starting and constructing the threads cost
as much as the simulated kernels' own work in this package's tests. Here the threads of
a block are kept: a block size's simulated threads wait between blocks, and the next
block of that size (of any launch) runs on them. The block waits for its threads on a
condition variable.

The semantics are the simulator's: every thread of a block sees its own ``threadIdx``
and the block's ``blockIdx``; a barrier opens when every live thread of the block waits
at it (a thread that has returned counts as arrived); an exception in any thread aborts
the block (the others raise at their next barrier) and is re-raised with the thread's
indices in its message. Threads of a block that was aborted are not reused: each ends
once its aborted work does. ``debug`` launches keep the simulator's own thread per
simulated thread.
"""
from __future__ import annotations

import os
import threading
from typing import Dict, List, Tuple

import numpy as np

# idle simulated threads: for each block shape, the sets of one thread per ``threadIdx``
# that no block is using (a block takes a set out while it runs)
_idle: Dict[Tuple[int, ...], List[List]] = {}
_idle_lock = threading.Lock()


def _forget_idle_threads() -> None:
    """A forked child has none of the parent's threads: it starts with an empty pool."""
    global _idle_lock
    _idle.clear()
    _idle_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_idle_threads)


def install(sim_kernel) -> None:
    """Replace ``BlockManager.run`` of numba's simulator (``debug`` launches excepted)."""
    BlockThread = sim_kernel.BlockThread
    Dim3 = sim_kernel.Dim3
    simulator_thread_run = BlockThread.run        # runs _target, records its exception
    simulator_block_run = sim_kernel.BlockManager.run

    class KeptThread(BlockThread):
        """A simulated thread that runs one block's work after another (one per
        ``threadIdx`` of its block shape) until a block it runs is aborted."""

        def __init__(self, manager, threadIdx):
            super().__init__(None, manager, (0, 0, 0), threadIdx, False)
            self._go = threading.Event()
            self._work = None
            self._retire = False

        def give(self, manager, grid_point, target):
            """Start ``target`` as this thread's part of block ``grid_point`` (the thread
            is idle: its fields are set here, before it wakes)."""
            self._manager = manager
            self.blockIdx = Dim3(*grid_point)
            self.exception = None
            self.abort = False
            self.syncthreads_blocked = False
            self.syncthreads_event.clear()
            self._work = target
            self._go.set()

        def retire(self):
            """Abort this thread's block; the thread ends once its part of it does."""
            self._retire = True
            self.abort = True
            self.syncthreads_blocked = False
            self.syncthreads_event.set()
            self._go.set()              # one already idle again wakes to no work and ends

        def run(self):
            while True:
                self._go.wait()
                self._go.clear()
                target, self._work = self._work, None
                if target is None:
                    return
                manager = self._manager
                self._target, self._args, self._kwargs = target, (), {}
                try:
                    simulator_thread_run(self)
                finally:
                    with manager._dflash2_cv:
                        manager._dflash2_done += 1
                        if self.exception or (manager._dflash2_done + manager._dflash2_waiting
                                              >= manager._dflash2_n):
                            manager._dflash2_cv.notify()
                if self._retire:
                    return

        def syncthreads(self):
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            mgr = self._manager
            with mgr._dflash2_cv:
                self.syncthreads_blocked = True
                mgr._dflash2_waiting += 1
                if mgr._dflash2_done + mgr._dflash2_waiting >= mgr._dflash2_n:
                    mgr._dflash2_cv.notify()        # the last to arrive wakes the block
            self.syncthreads_event.wait()
            self.syncthreads_event.clear()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    def take_threads(mgr) -> List:
        shape = tuple(mgr._block_dim)
        with _idle_lock:
            sets = _idle.get(shape)
            if sets:
                return sets.pop()
        threads = [KeptThread(mgr, bp) for bp in np.ndindex(*shape)]
        for t in threads:
            t.start()
        return threads

    def put_back(mgr, threads) -> None:
        with _idle_lock:
            _idle.setdefault(tuple(mgr._block_dim), []).append(threads)

    def block_run(self, grid_point, *args):
        if self._debug:
            return simulator_block_run(self, grid_point, *args)
        self._dflash2_cv = cv = threading.Condition()
        self._dflash2_done = 0
        self._dflash2_waiting = 0
        f = self._f

        def target():
            f(*args)

        threads = take_threads(self)
        n = self._dflash2_n = len(threads)
        for t in threads:
            t.give(self, grid_point, target)
        while True:
            with cv:
                cv.wait_for(lambda: self._dflash2_done + self._dflash2_waiting >= n, timeout=1.0)
                failed = next((t for t in threads if t.exception), None)
                if failed is None and self._dflash2_done + self._dflash2_waiting < n:
                    continue
                waiting = [t for t in threads if t.syncthreads_blocked]
                self._dflash2_waiting = 0
                all_done = self._dflash2_done >= n
            if failed is not None and not all_done:
                for t in threads:
                    t.retire()
                raise failed.exception[0].with_traceback(failed.exception[1])
            if all_done:
                break
            for t in waiting:
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
        failed = next((t for t in threads if t.exception), None)
        exc = failed.exception if failed is not None else None
        for t in threads:
            t.exception = None          # (its traceback holds the block's frames)
        put_back(self, threads)
        if exc is not None:
            raise exc[0].with_traceback(exc[1])

    sim_kernel.BlockManager.run = block_run
