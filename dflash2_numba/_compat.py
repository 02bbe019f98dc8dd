"""Environment shims that must run before numba.cuda is imported, and the
FP32-exactness switches every kernel of this package is compiled and simulated with.

1. numpy >= 2.5 removed ``np.row_stack``; numba-cuda 0.30.4 registers an overload
   for it at import time and fails without it. We alias it to ``np.vstack``, and the
   alias stays on numpy for the whole process: numba-cuda looks the name up again when
   its typing registries are refreshed (at a first compile, at a later import), so
   removing it after the import would break a later compilation. Code that tests
   ``hasattr(np, "row_stack")`` after importing this package sees the alias.
2. NVVM contracts ``a*b + c`` into one FMA by default (``-fma=1``). The contract
   lists every fused step explicitly (``cuda.fma``) and every other step as its
   own rounding, so our kernels are compiled with ``-fma=0``; explicit
   ``cuda.fma`` calls still become ``fma.rn.f32``. The switch is scoped: only
   compilations inside :func:`exact_fp32` see it, other numba users are untouched.
   Inside it a kernel is also linked from that PTX rather than through nvJitLink's LTO,
   whose code generation fuses the pair again (:func:`_install_lto_patch`). Every kernel
   of this package is built inside the block wherever it is compiled
   (:func:`_install_exact_build_patch`).
3. Under the CUDA simulator, :mod:`._simulator` makes ``cuda.fma`` a correctly
   rounded FP32 fused multiply-add (the simulator's is ``a*b + c``, two roundings)
   and speeds up thread-block execution.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
import threading

import numpy as np

if not hasattr(np, "row_stack"):  # numpy >= 2.5
    np.row_stack = np.vstack  # type: ignore[attr-defined]

from numba import cuda  # noqa: E402  (after the shim on purpose)


def _numba_simulator_switch() -> bool:
    """``NUMBA_ENABLE_CUDASIM`` as numba-cuda itself read it when ``numba.cuda`` was imported
    (``int()`` of the text; a value it cannot parse warns and counts as 0), so ``01`` turns
    the simulator on and ``true`` leaves it off, here as in numba."""
    try:
        from numba.cuda.core import config as numba_config
    except ImportError:  # pragma: no cover - numba-cuda without its own config module
        from numba.core import config as numba_config
    return bool(getattr(numba_config, "ENABLE_CUDASIM", 0))


SIMULATOR = _numba_simulator_switch()

_state = threading.local()


def _contract_off() -> bool:
    return getattr(_state, "depth", 0) > 0


@contextlib.contextmanager
def _nested(switch: str):
    """Count this thread's entries into the block named ``switch`` (blocks nest)."""
    setattr(_state, switch, getattr(_state, switch, 0) + 1)
    try:
        yield
    finally:
        setattr(_state, switch, getattr(_state, switch) - 1)


def exact_fp32():
    """Compile numba.cuda kernels inside this block with FMA contraction off: NVVM's ``-fma=0``
    and a link from the PTX rather than through LTO (:func:`_install_lto_patch`)."""
    return _nested("depth")


def _install_nvvm_patch() -> None:
    if SIMULATOR:
        return
    from numba.cuda.cudadrv import nvvm

    if getattr(nvvm.compile_ir, "_dflash2_patched", False):
        return
    original = nvvm.compile_ir

    def compile_ir(llvmir, **options):
        if _contract_off() and not options.get("fastmath", False):
            options.setdefault("fma", False)
        return original(llvmir, **options)

    compile_ir._dflash2_patched = True  # type: ignore[attr-defined]
    nvvm.compile_ir = compile_ir
    # codegen imported the name directly in some versions
    from numba.cuda import codegen

    if getattr(codegen, "nvvm", None) is not None and hasattr(codegen.nvvm, "compile_ir"):
        codegen.nvvm.compile_ir = compile_ir


def _lto_allowed() -> bool:
    return getattr(_state, "allow_lto", 0) > 0


def allow_lto_link():
    """Let kernels built inside this block link through LTO even under :func:`exact_fp32`:
    numba's default, which contracts ``a*b + c`` (see :func:`_install_lto_patch`). Only
    for the probe and the tests that show the cause; the package never enters it."""
    return _nested("allow_lto")


def _install_lto_patch() -> None:
    """Under :func:`exact_fp32` a kernel's cubin is linked from its PTX, not through LTO.

    numba-cuda links every kernel through nvJitLink's LTO where nvJitLink is installed
    (``cuda.jit``'s ``lto=None``). The LTO-IR that NVVM emits under ``-fma=0`` does not keep
    the two roundings: nvJitLink's own code generation fuses ``a*b + c`` into one FFMA
    (CUDA 12.9 and 13.5 alike, found offline in session 40 after session 39 saw 256 of 256
    elements fused on an H100). The PTX route keeps them: NVVM writes ``mul.rn`` +
    ``add.rn`` and ptxas never contracts an operation with an explicit rounding. Our
    kernels link no other code, so nothing else changes."""
    if SIMULATOR:
        return
    from numba.cuda.cudadrv import driver

    linker = getattr(driver, "_Linker", None)
    original = getattr(linker, "__init__", None)
    if original is None or getattr(original, "_dflash2_patched", False):
        return
    signature = inspect.signature(original)
    if "lto" not in signature.parameters:
        raise ImportError("numba-cuda's _Linker takes no 'lto' argument: dflash2_numba cannot "
                          "keep FMA contraction off (see _compat._install_lto_patch)")

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        if _contract_off() and not _lto_allowed():
            bound.arguments["lto"] = False
        original(*bound.args, **bound.kwargs)

    __init__._dflash2_patched = True  # type: ignore[attr-defined]
    linker.__init__ = __init__


PACKAGE = __name__.rpartition(".")[0]


def builds_exact(py_func) -> bool:
    """Whether a kernel of ``py_func`` is always built with :func:`exact_fp32`'s switches:
    every kernel whose Python function lives in this package (``__module__`` is the package
    or one of its modules), wherever and however it is compiled."""
    module = getattr(py_func, "__module__", None) or ""
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def _install_exact_build_patch() -> None:
    """Every package kernel is built with :func:`exact_fp32`'s switches, inside the block or
    not.

    The block's switches are per thread, and numba keeps one build per signature: without
    this, the first compile of a package kernel outside the block (a user's direct launch of
    a module-level dispatcher, ``inspect_asm`` / ``inspect_sass`` of a signature not yet
    built) would cache a contracted build that every later launch, inside the block or not,
    would run. So ``CUDADispatcher.compile``, for a package kernel (:func:`builds_exact`):

    - sets the kernel's ``lto`` option (``cuda.jit``'s own) to False: its cubin is always
      linked from its PTX, and numba never asks for an LTO link of it (``inspect_lto_ptx``
      says LTO is off; ``NUMBA_DUMP_ASSEMBLY`` prints its PTX);
    - compiles inside the block (NVVM's ``-fma=0``) and marks the kernel's code library,
      whose later PTX for another capability (``inspect_asm`` asks for the device's
      capability without the ``a`` suffix a launch builds for) is compiled inside it again.

    Other numba users' kernels are untouched; :func:`allow_lto_link` does not apply to the
    package's kernels."""
    if SIMULATOR:
        return
    from numba.cuda import codegen, dispatcher

    compile_ = dispatcher.CUDADispatcher.compile
    if getattr(compile_, "_dflash2_patched", False):
        return
    ptx_step = codegen.CUDACodeLibrary.get_asm_strs

    @functools.wraps(compile_)
    def compile(self, sig):
        if not builds_exact(self.py_func):
            return compile_(self, sig)
        self.targetoptions["lto"] = False
        with exact_fp32():
            kernel = compile_(self, sig)
        library = getattr(kernel, "_codelibrary", None)
        if library is not None:
            library._dflash2_exact = True
        return kernel

    @functools.wraps(ptx_step)
    def get_asm_strs(self, *args, **kwargs):
        if not getattr(self, "_dflash2_exact", False):
            return ptx_step(self, *args, **kwargs)
        with exact_fp32():
            return ptx_step(self, *args, **kwargs)

    compile._dflash2_patched = True  # type: ignore[attr-defined]
    dispatcher.CUDADispatcher.compile = compile
    codegen.CUDACodeLibrary.get_asm_strs = get_asm_strs


def fma32_exact(a, b, c):
    """Correctly rounded float32 fma(a, b, c) on the host (used by the simulator).

    The float64 product of two float32 values is exact; the float64 sum is rounded
    once, and the final float32 rounding can then only go wrong when that sum lands
    exactly on a float32 midpoint (at most 25 significant bits), which we resolve
    with the exact error term of the sum (TwoSum). The overflow threshold is such a
    midpoint too (2**128 - 2**103, between FLT_MAX and 2**128): a sum rounded onto it from
    below gives FLT_MAX, not inf. Plain Python floats keep it fast.
    """
    p = float(a) * float(b)
    cf = float(c)
    s = p + cf
    f = _f32(s)
    r = float(f)
    if r == s or s != s or abs(s) == _INF:
        return f
    if abs(s) >= _F32_MIN_NORMAL:
        m, _ = math.frexp(s)
        m25 = m * 33554432.0  # 2**25
        if m25 != int(m25):
            return f           # more than 25 significant bits: no tie possible
    bb = s - p
    err = (p - (s - bb)) + (cf - bb)
    if err == 0.0:
        return f
    if abs(r) == _INF:
        # a finite s rounds to inf only from the overflow midpoint 2**128 - 2**103 up; above
        # it the exact value is above too (rounding is monotonic) and inf is right; on it,
        # the exact value lies below, and rounds to FLT_MAX, when the error points to zero
        if abs(s) == _F32_OVERFLOW_MID and (err > 0) != (s > 0):
            return _f32(math.copysign(_F32_MAX, s))
        return f
    g = np.nextafter(f, np.float32(np.inf) if s > r else np.float32(-np.inf))
    mid = (r + float(g)) * 0.5
    if s == mid:  # a tie in float64 that the exact value breaks
        return g if (err > 0) == (float(g) > r) else f
    return f


_f32 = np.float32
_INF = float("inf")
_F32_MIN_NORMAL = 2.0 ** -125
_F32_MAX = float(np.finfo(np.float32).max)          # 2**128 - 2**104
_F32_OVERFLOW_MID = 2.0 ** 128 - 2.0 ** 103         # rounds to inf (ties to even)


_install_nvvm_patch()
_install_lto_patch()
_install_exact_build_patch()
if SIMULATOR:
    from . import _simulator

    _simulator.install()


def gpu_available() -> bool:
    """True when a real CUDA device is usable (never under the simulator)."""
    if SIMULATOR:
        return False
    try:
        return bool(cuda.is_available())
    except Exception:  # pragma: no cover - driver problems
        return False


def device_zeros(shape, dtype=np.float32, stream=0):
    """A device array of zeros, set on the device (``cuMemsetD8``; no host copy): plan-time
    scratch that a kernel may read before it writes (a float4 load that spans words it
    never uses) then holds initialised bytes, so compute-sanitizer's initcheck stays quiet.
    No result may depend on them: ``tests/test_gdn_scratch_fill.py`` refills the scratch
    with NaN and other words and checks the bytes. On the simulator: a copied host array."""
    if SIMULATOR:
        return cuda.to_device(np.zeros(shape, dtype=dtype), stream=stream)
    from numba.cuda.cudadrv.driver import device_memset

    arr = cuda.device_array(shape, dtype=dtype, stream=stream)
    if arr.nbytes:
        device_memset(arr, 0, arr.nbytes, stream)
    return arr


EMULATE_CC_ENV = "DFLASH2_EMULATE_CC"


def emulated_cc():
    """The compute capability named by ``DFLASH2_EMULATE_CC`` (e.g. ``7.0``), or None.

    Set, every plan-time choice that depends on the device answers as on a device of that
    capability: the forms a variant launches (``device_cc_at_least``) and the shared-memory
    limits it checks (``_dynshared.max_dynamic_shared``, ``shared_per_sm``, never above the
    real device's). The kernels still compile for the device in hand, so on an H200
    ``DFLASH2_EMULATE_CC=7.0`` runs the sm_70 forms' code (their bytes, their races, their
    memory accesses under the sanitizers) as sm_90 machine code: it checks their logic on a
    GPU, not sm_70's machine code (the PTX report does that).

    Only capabilities whose shared-memory limits the package knows
    (``_dynshared.SHARED_LIMITS``) can be emulated: any other is refused here, naming the
    variable and the known ones, so that no plan answers for part of a device."""
    raw = os.environ.get(EMULATE_CC_ENV, "").strip()
    if not raw:
        return None
    try:
        major, minor = (int(x) for x in raw.split("."))
    except ValueError:
        raise ValueError(f"{EMULATE_CC_ENV}={raw!r}: expected MAJOR.MINOR, e.g. 7.0") from None
    from ._dynshared import SHARED_LIMITS

    if (major, minor) not in SHARED_LIMITS:
        known = ", ".join(f"{a}.{b}" for a, b in SHARED_LIMITS)
        raise ValueError(f"{EMULATE_CC_ENV}={raw!r}: no shared-memory limits known for "
                         f"compute capability {major}.{minor} (known: {known})")
    return (major, minor)


def device_cc_at_least(cc) -> bool:
    """Whether the current device has compute capability ``cc`` or newer: the test that
    picks a variant's schedule for the device at plan time (the simulator runs the newest
    schedules, the H200's; ``DFLASH2_EMULATE_CC`` overrides both, see :func:`emulated_cc`)."""
    emu = emulated_cc()
    if emu is not None:
        return emu >= tuple(cc)
    if SIMULATOR:
        return True
    return tuple(cuda.get_current_device().compute_capability) >= tuple(cc)


class _FakeDevice:
    def __init__(self, cc):
        self.compute_capability = tuple(cc)


@contextlib.contextmanager
def target_cc(cc=(7, 0)):
    """Make numba answer "the current device" with compute capability ``cc``.

    Compiling kernels that call device functions asks for the current device even
    in ``cuda.compile_ptx(..., cc=...)``; on a machine without a GPU (or to build
    sm_70 PTX on a newer GPU) this context answers that lookup.
    """
    from numba.cuda import compiler, dispatcher

    saved = (dispatcher.get_current_device, compiler.get_current_device)
    fake = _FakeDevice(cc)
    dispatcher.get_current_device = lambda: fake
    compiler.get_current_device = lambda: fake
    try:
        yield
    finally:
        dispatcher.get_current_device, compiler.get_current_device = saved


def jit_bounded(pyfunc, launch_bounds):
    """``pyfunc`` as a kernel compiled with ``launch_bounds`` (ptxas keeps it within the
    registers that many threads may hold on one SM); the simulator takes no such option."""
    return cuda.jit(pyfunc) if SIMULATOR else cuda.jit(pyfunc, launch_bounds=launch_bounds)


def compile_ptx_cc(pyfunc, signature, cc=(7, 0), launch_bounds=None):
    """PTX for ``pyfunc`` at ``cc`` with the package's exact-FP32 flags (no GPU needed)."""
    with exact_fp32(), target_cc(cc):
        if launch_bounds is None:
            return cuda.compile_ptx(pyfunc, signature, cc=cc)
        return cuda.compile_ptx(pyfunc, signature, cc=cc, launch_bounds=launch_bounds)
