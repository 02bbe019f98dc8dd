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
3. A thread block runs on simulated threads kept from earlier blocks of its shape
   instead of new ones, and waits for them on a condition variable instead of
   busy-polling them (the poll loop holds the GIL the simulated threads need); see
   :mod:`._sim_blocks`. Semantics are the simulator's: a barrier opens when every live
   thread of the block waits at it (exited threads count as arrived); an exception in
   any thread aborts the block and is re-raised.
4. ``max`` / ``min`` of two floats inside simulated kernels and device functions ignore a
   NaN operand, as numba's GPU lowering (``fmaxf`` / ``fminf``, PTX ``max.f32`` /
   ``min.f32``) does, instead of Python's order-dependent NaN handling; for two float32
   operands they also order the zeros as the PTX documentation gives for ``max.f32`` /
   ``min.f32`` (``max(-0.0, +0.0)`` is +0.0, ``min`` -0.0, in either order; Python returns
   the first argument) and give its canonical NaN for two NaNs (:func:`_install_gpu_minmax`).
5. A NaN result of the simulated FP32 ``cuda.fma`` is the canonical NaN the documentation
   gives for ``fma.rn.f32`` (``0x7FFFFFFF``, no payload or sign), not the host's propagated
   one (:func:`fma32_gpu`).

Items 4 and 5 follow NVIDIA's documentation (PTX ISA; the CUDA programming guide's NaN
pattern); the tests in ``tests/test_simulator_patches.py`` that check them run on a GPU too
(``DFLASH2_GPU=1``), and passed there on an H100 in session 39 (``bench/RESULTS.md``).
"""
from __future__ import annotations

import builtins
import contextlib
import math
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

    global _fma32_exact
    from ._compat import fma32_exact as _fma32_exact

    f32 = np.float32

    def fma(self, a, b, c):
        if type(a) is f32 or type(b) is f32 or type(c) is f32:
            return fma32_gpu(a, b, c)
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

    from . import _sim_blocks

    _sim_blocks.install(sim_kernel)
    _install_gpu_minmax(sim_kernel, kernelapi)
    _installed = True


# --------------------------------------------------------------------------- max / min

def _is_nan(x) -> bool:
    return isinstance(x, (float, np.floating)) and x != x


# the NaN the PTX documentation gives for a NaN result of fma.rn.f32 and of max.f32 /
# min.f32 with two NaN operands (no payload, sign clear)
GPU_NAN32 = np.uint32(0x7FFFFFFF).view(np.float32)


def fma32_gpu(a, b, c):
    """``fma.rn.f32`` on the host: correctly rounded (:func:`._compat.fma32_exact`), and a
    NaN result is :data:`GPU_NAN32`, not the host's (x86 gives 0xFFC00000 for inf - inf or
    0 * inf, and passes a NaN operand's payload on)."""
    r = _fma32_exact(a, b, c)
    return GPU_NAN32 if r != r else r


def _fma32_exact(a, b, c):
    # bound to _compat.fma32_exact by install() (_compat imports this module while it loads)
    raise RuntimeError("dflash2_numba._simulator.install() has not run")


def _gpu_minmax(pick):
    """``max`` / ``min`` as numba lowers them on a GPU: two floats go to ``__nv_fmaxf`` /
    ``__nv_fminf`` (``fmax`` / ``fmin`` for float64), which ignore a NaN operand (NaN only
    when both are NaN). Every other call (three or more arguments, a float with an int,
    ints, one iterable, keywords) numba lowers to compares and selects, whose NaN handling
    is Python's builtin's: those go to the builtin unchanged."""
    def minmax(*args, **kwargs):
        if (kwargs or len(args) != 2
                or not all(isinstance(a, (float, np.floating)) for a in args)):
            return pick(*args, **kwargs)
        a, b = args
        if _is_nan(a):
            if _is_nan(b) and type(a) is np.float32 and type(b) is np.float32:
                return GPU_NAN32
            return b
        if _is_nan(b):
            return a
        if a == 0 and b == 0 and type(a) is np.float32 and type(b) is np.float32:
            # PTX max.f32 / min.f32 order -0.0 below +0.0 (Python returns the first)
            neg_a = math.copysign(1.0, a) < 0
            want_neg = pick is builtins.min
            return a if neg_a == want_neg else b
        return pick(a, b)
    minmax.__name__ = pick.__name__
    return minmax


GPU_MAX = _gpu_minmax(builtins.max)
GPU_MIN = _gpu_minmax(builtins.min)


def _install_gpu_minmax(sim_kernel, kernelapi) -> None:
    """Kernels and device functions see :data:`GPU_MAX` / :data:`GPU_MIN` as ``max`` /
    ``min`` while the simulator runs them: the simulator's own are Python's, whose NaN
    handling depends on the argument order (``max(nan, 1.0)`` is nan, ``max(1.0, nan)`` is
    1.0), where a GPU ignores the NaN. The names are put into the function's module globals
    (only where the module defines no ``max`` / ``min`` of its own) for as long as a
    simulated function of that module runs, as the simulator swaps in its fake ``cuda``.
    So host code of that module sees them too while one of its kernels runs, and a plain
    Python helper (not a simulated device function) sees them only while a simulated
    function of its own module runs: none of the package's helpers takes a float max."""
    original = kernelapi.swapped_cuda_module
    lock = threading.Lock()
    refs: dict = {}
    added: dict = {}

    @contextlib.contextmanager
    def swapped(fn, fake_cuda_module):
        globs = fn.__globals__
        gid = id(globs)
        with lock:
            if refs.get(gid, 0) == 0:
                names = [n for n in ("max", "min") if n not in globs]
                for n, f in (("max", GPU_MAX), ("min", GPU_MIN)):
                    if n in names:
                        globs[n] = f
                added[gid] = names
            refs[gid] = refs.get(gid, 0) + 1
        try:
            with original(fn, fake_cuda_module):
                yield
        finally:
            with lock:
                refs[gid] -= 1
                if refs[gid] == 0:
                    for n in added.pop(gid):
                        globs.pop(n, None)

    sim_kernel.swapped_cuda_module = swapped
