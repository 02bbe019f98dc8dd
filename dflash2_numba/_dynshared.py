"""Launch a numba.cuda kernel with dynamic shared memory, raising the kernel's dynamic
shared-memory limit first when the request exceeds the default 48 KB (Volta and later let
a kernel opt in to more: 96 KB on sm_70, 227 KB on sm_90), and optionally setting its
preferred shared-memory carveout (the share of the SM's L1 / shared storage given to
shared memory while its CTAs run: CTAs of different kernels share an SM only under one
carveout that holds all of them)."""
from __future__ import annotations

from ._compat import SIMULATOR


class DynShared:
    """``kernel[grid, block, stream]`` -> the same launch with ``nbytes`` of dynamic shared
    memory; on a GPU it first raises the kernel's dynamic shared-memory limit (once per
    compiled overload) when ``nbytes`` exceeds the default 48 KB."""

    def __init__(self, kernel, nbytes, carveout=None):
        self.kernel = kernel
        self.nbytes = nbytes
        self.carveout = carveout        # percent of the maximum shared memory, or None

    def __getitem__(self, cfg):
        grid, block, stream = cfg
        cfgd = self.kernel[grid, block, stream, self.nbytes]

        def go(*args):
            if not SIMULATOR and self.nbytes > 48 * 1024:
                raise_smem_limit(self.kernel, args, self.nbytes)
            if not SIMULATOR and self.carveout is not None:
                set_carveout(self.kernel, args, self.carveout)
            cfgd(*args)
        return go


_attr_done = set()


def _set_attribute(kernel, args, name: str, value: int) -> None:
    """``cuKernelSetAttribute(name, value)`` on ``kernel``'s overload for ``args`` (compiled
    here if it is not yet), once per overload and attribute."""
    argtypes = tuple(kernel.typeof_pyval(a) for a in args)
    key = (id(kernel), argtypes, name)
    if key in _attr_done:
        return
    from numba.cuda.cudadrv.driver import binding, driver

    compiled = kernel.compile(argtypes)
    cufunc = compiled._codelibrary.get_cufunc()
    attr = getattr(binding.CUfunction_attribute, name)
    driver.cuKernelSetAttribute(attr, int(value), cufunc.handle, cufunc.device.id)
    _attr_done.add(key)


def raise_smem_limit(kernel, args, nbytes):
    _set_attribute(kernel, args, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", nbytes)


def set_carveout(kernel, args, percent):
    """The preferred shared-memory carveout of ``kernel`` (for ``args``), in percent of the
    maximum; a hint the driver rounds to a supported split."""
    _set_attribute(kernel, args, "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT", percent)


def max_dynamic_shared() -> int:
    """Bytes of dynamic shared memory one block may opt in to on the current device (the
    simulator: 96 KB, the sm_70 figure)."""
    if SIMULATOR:
        return 96 * 1024
    from numba import cuda

    dev = cuda.get_current_device()
    try:
        return int(dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    except Exception:  # noqa: BLE001  (older drivers / bindings)
        return 48 * 1024
