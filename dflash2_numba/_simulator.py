"""Patches to numba's CUDA simulator, installed only when numba runs it (``_compat.SIMULATOR``:
NUMBA_ENABLE_CUDASIM as numba reads it).

1. ``cuda.fma`` becomes a correctly rounded FP32 fused multiply-add
   (:func:`._compat.fma32_exact`); the simulator's own is ``a*b + c``.
2. ``cuda.shared.array`` finds its allocating source line from the caller's frame
   instead of ``traceback.extract_stack`` (which reads source files on every call
   of every simulated thread), and the first threads of a block to reach it agree on
   one array: the simulator's own check-then-store let two threads that both found no
   array each make one, and the one whose array was overwritten computed alone on it
   (a rare, timing-dependent wrong result).
3. A thread block waits for its threads on a condition variable instead of
   busy-polling them (the poll loop holds the GIL the simulated threads need).
   Semantics are the simulator's: a barrier opens when every live thread of the
   block waits at it (exited threads count as arrived); an exception in any thread
   aborts the block and is re-raised.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    from numba.core import types as nb_types
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    from ._compat import fma32_exact

    f32 = np.float32

    def fma(self, a, b, c):
        if type(a) is f32 or type(b) is f32 or type(c) is f32:
            return fma32_exact(a, b, c)
        return a * b + c

    kernelapi.FakeCUDAModule.fma = fma

    original_array = kernelapi.FakeCUDAShared.array

    def shared_array(self, shape, dtype, alignment=None):
        if alignment is not None or shape == 0:
            return original_array(self, shape, dtype, alignment)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)
        res = self._allocations.get(caller)
        if res is None:
            if isinstance(dtype, nb_types.Type):
                dtype = numpy_support.as_dtype(dtype)
            # (setdefault is one step under the GIL: a thread that lost the race to
            # another block thread gets the array the others use, not its own)
            res = self._allocations.setdefault(caller, np.empty(shape, dtype))
        return res

    kernelapi.FakeCUDAShared.array = shared_array

    BlockThread = sim_kernel.BlockThread
    original_thread_run = BlockThread.run

    def thread_run(self):
        try:
            original_thread_run(self)
        finally:
            mgr = self._manager
            with mgr._dflash2_cv:
                mgr._dflash2_done += 1
                mgr._dflash2_cv.notify()

    def syncthreads(self):
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        mgr = self._manager
        with mgr._dflash2_cv:
            self.syncthreads_blocked = True
            mgr._dflash2_waiting += 1
            mgr._dflash2_cv.notify()
        self.syncthreads_event.wait()
        self.syncthreads_event.clear()
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads clear")

    def block_run(self, grid_point, *args):
        self._dflash2_cv = threading.Condition()
        self._dflash2_done = 0
        self._dflash2_waiting = 0
        f = self._f

        def target():
            f(*args)

        threads = [BlockThread(target, self, grid_point, bp, self._debug)
                   for bp in np.ndindex(*self._block_dim)]
        n = len(threads)
        for t in threads:
            t.start()
        cv = self._dflash2_cv
        while True:
            with cv:
                cv.wait_for(lambda: self._dflash2_done + self._dflash2_waiting >= n, timeout=1.0)
                failed = next((t for t in threads if t.exception), None)
                if failed is None and self._dflash2_done + self._dflash2_waiting < n:
                    continue
                waiting = [t for t in threads if t.syncthreads_blocked]
                self._dflash2_waiting = 0
            if failed is not None:
                for t in threads:
                    t.abort = True
                    t.syncthreads_blocked = False
                    t.syncthreads_event.set()
                raise failed.exception[0].with_traceback(failed.exception[1])
            if self._dflash2_done >= n:
                break
            for t in waiting:
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
        for t in threads:
            t.join()
            if t.exception:
                raise t.exception[0].with_traceback(t.exception[1])

    BlockThread.run = thread_run
    BlockThread.syncthreads = syncthreads
    sim_kernel.BlockManager.run = block_run
    _installed = True
