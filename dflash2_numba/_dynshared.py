"""Launch a numba.cuda kernel with dynamic shared memory, raising the kernel's dynamic
shared-memory limit first when the request exceeds the default 48 KB (Volta and later let
a kernel opt in to more: 96 KB on sm_70, 227 KB on sm_90), and optionally setting its
preferred shared-memory carveout (the share of the SM's L1 / shared storage given to
shared memory while its CTAs run: CTAs of different kernels share an SM only under one
carveout that holds all of them)."""
from __future__ import annotations

from ._compat import SIMULATOR, emulated_cc, exact_fp32
from ._registry import UnsupportedShape

# Shared memory by compute capability (CUDA programming guide, "Technical Specifications"):
# (bytes one block may opt in to, bytes one SM gives its blocks together). Used only when
# DFLASH2_EMULATE_CC names a capability (``_compat.emulated_cc``).
SHARED_LIMITS = {
    (7, 0): (96 * 1024, 96 * 1024),
    (7, 5): (64 * 1024, 64 * 1024),
    (8, 0): (163 * 1024, 164 * 1024),
    (8, 6): (99 * 1024, 100 * 1024),
    (8, 7): (163 * 1024, 164 * 1024),
    (8, 9): (99 * 1024, 100 * 1024),
    (9, 0): (227 * 1024, 228 * 1024),
}


def emulated_shared_limits():
    """(per block opt-in, per SM) of the capability ``DFLASH2_EMULATE_CC`` names, or None."""
    emu = emulated_cc()
    if emu is None:
        return None
    return SHARED_LIMITS[emu]     # emulated_cc refuses a capability not in the table


SMEM_LIMIT = "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"
CARVEOUT = "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT"


class DynShared:
    """``kernel[grid, block, stream]`` -> the same launch with ``nbytes`` of dynamic shared
    memory; on a GPU it first raises the kernel's dynamic shared-memory limit when ``nbytes``
    exceeds the default 48 KB, and sets the preferred carveout when one is given, once per
    compiled overload and attribute. The launch (and any compilation it causes) runs under
    :func:`._compat.exact_fp32`, as ``_registry.launch``'s do, so a script's own kernel
    launched through it (a benchmark's micro kernel) gets the package's arithmetic; the
    package's kernels get it wherever they are built (``_compat._install_exact_build_patch``).

    Host cost: finding the overload means typing every argument (numba's ``typeof``, about
    as much host time as the launch's own dispatch). An instance remembers the argument
    objects of its last prepared launch and skips that work when a launch passes the very
    same objects again, as a plan's replayed launches do (the same objects have the same
    numba types, so the same overload). Instances live with a plan, so the references they
    keep live no longer than the plan's own."""

    def __init__(self, kernel, nbytes, carveout=None):
        self.kernel = kernel
        self.nbytes = nbytes
        self.carveout = carveout        # percent of the maximum shared memory, or None
        self._prepared_args = None      # the last launch's arguments whose overload is set up
        self._prepared_at = -1          # _attr_state's generation when they were

    def _needs_attributes(self) -> bool:
        return not SIMULATOR and (self.nbytes > 48 * 1024 or self.carveout is not None)

    def prepare(self, args) -> None:
        """Set the overload's attributes for ``args`` (compiling it if need be) unless the
        last prepared launch passed the same objects."""
        last = self._prepared_args
        if (last is not None and self._prepared_at == _attr_state.generation
                and len(last) == len(args) and all(a is b for a, b in zip(args, last))):
            return
        argtypes = _argtypes(self.kernel, args)
        if self.nbytes > 48 * 1024:
            _set_attribute(self.kernel, argtypes, SMEM_LIMIT, self.nbytes)
        if self.carveout is not None:           # (percent; a hint the driver rounds)
            _set_attribute(self.kernel, argtypes, CARVEOUT, self.carveout)
        self._prepared_args = tuple(args)
        self._prepared_at = _attr_state.generation

    def __getitem__(self, cfg):
        grid, block, stream = cfg
        cfgd = self.kernel[grid, block, stream, self.nbytes]

        def go(*args):
            with exact_fp32():
                if self._needs_attributes():
                    self.prepare(args)
                cfgd(*args)
        return go


class _AttributeState:
    """The attribute values this process has set, per (kernel, overload, attribute, device),
    and a generation counted up at every change (an instance's remembered launch is stale
    once any attribute changed after it: another instance may share its kernel). Keyed by the
    kernel object (identity hash), which the entry keeps alive, not by its ``id``: a kernel
    a script builds and drops cannot pass its entry to a new one at the same address."""

    def __init__(self):
        self.values = {}
        self.generation = 0


_attr_state = _AttributeState()


def _set_attribute(kernel, argtypes, name: str, value: int) -> None:
    """``name`` = ``value`` on ``kernel``'s overload for the numba types ``argtypes`` on the
    current device (each device loads its own copy of the kernel), unless this process
    already set that value there."""
    key = (kernel, argtypes, name, _current_device_id())
    if _attr_state.values.get(key) == int(value):
        return
    _driver_set(kernel, argtypes, name, int(value))
    _attr_state.values[key] = int(value)
    _attr_state.generation += 1


def _current_device_id() -> int:
    """The ordinal of the current device (a GPU only: the simulator sets no attributes)."""
    from numba import cuda

    return int(cuda.get_current_device().id)


def _driver_set(kernel, argtypes, name: str, value: int) -> None:
    """``cuKernelSetAttribute(name, value)`` on the overload (compiled here if it is not
    yet, under :func:`._compat.exact_fp32`: numba keeps one build per signature, so a build
    of a script's own kernel made here without it would be what every later launch of that
    signature runs, e.g. after :func:`set_carveout` in a probe)."""
    with exact_fp32():
        compiled = kernel.compile(argtypes)
        cufunc = compiled._codelibrary.get_cufunc()
    from numba.cuda.cudadrv.driver import binding, driver

    attr = getattr(binding.CUfunction_attribute, name)
    driver.cuKernelSetAttribute(attr, value, cufunc.handle, cufunc.device.id)


def _argtypes(kernel, args):
    """The numba types of ``args`` as ``kernel``'s dispatcher would type them."""
    return tuple(kernel.typeof_pyval(a) for a in args)


def set_carveout(kernel, args, percent):
    """The preferred shared-memory carveout of ``kernel`` (for ``args``), in percent of the
    maximum; a hint the driver rounds to a supported split (for launches that do not go
    through a :class:`DynShared`, such as a probe's own)."""
    _set_attribute(kernel, _argtypes(kernel, args), CARVEOUT, percent)


def max_dynamic_shared() -> int:
    """Bytes of dynamic shared memory one block may opt in to on the current device (the
    simulator: 96 KB, the sm_70 figure; under ``DFLASH2_EMULATE_CC`` the emulated
    capability's figure, never above the device's own)."""
    emu = emulated_shared_limits()
    if SIMULATOR:
        return emu[0] if emu else 96 * 1024
    from numba import cuda

    dev = cuda.get_current_device()
    try:
        real = int(dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    except Exception:  # noqa: BLE001  (older drivers / bindings)
        real = 48 * 1024
    return min(real, emu[0]) if emu else real


def require_shared(who: str, need: int) -> None:
    """Plan-time refusal (``UnsupportedShape``, before any launch) when ``need`` bytes of
    dynamic shared memory a block exceed the device's opt-in limit
    (:func:`max_dynamic_shared`); the message names ``who`` and both sizes."""
    limit = max_dynamic_shared()
    if need > limit:
        raise UnsupportedShape(f"{who} needs {need} B of shared memory a block; the device "
                               f"allows {limit} B")


def shared_per_sm() -> int:
    """Bytes of shared memory one SM can give its CTAs together (the simulator: sm_70's
    96 KB; under ``DFLASH2_EMULATE_CC`` the emulated capability's, never above the
    device's)."""
    emu = emulated_shared_limits()
    if SIMULATOR:
        return emu[1] if emu else 96 * 1024
    from numba import cuda

    real = int(cuda.get_current_device().MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
    return min(real, emu[1]) if emu else real
