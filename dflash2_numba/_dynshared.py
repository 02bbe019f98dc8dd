"""Launch a numba.cuda kernel with dynamic shared memory, raising the kernel's dynamic
shared-memory limit first when the request exceeds the default 48 KB (Volta and later let
a kernel opt in to more: 96 KB on sm_70, 227 KB on sm_90)."""
from __future__ import annotations

from ._compat import SIMULATOR


class DynShared:
    """``kernel[grid, block, stream]`` -> the same launch with ``nbytes`` of dynamic shared
    memory; on a GPU it first raises the kernel's dynamic shared-memory limit (once per
    compiled overload) when ``nbytes`` exceeds the default 48 KB."""

    def __init__(self, kernel, nbytes):
        self.kernel = kernel
        self.nbytes = nbytes

    def __getitem__(self, cfg):
        grid, block, stream = cfg
        cfgd = self.kernel[grid, block, stream, self.nbytes]

        def go(*args):
            if not SIMULATOR and self.nbytes > 48 * 1024:
                raise_smem_limit(self.kernel, args, self.nbytes)
            cfgd(*args)
        return go


_limit_done = set()


def raise_smem_limit(kernel, args, nbytes):
    argtypes = tuple(kernel.typeof_pyval(a) for a in args)
    key = (id(kernel), argtypes)
    if key in _limit_done:
        return
    from numba.cuda.cudadrv.driver import binding, driver

    compiled = kernel.compile(argtypes)
    cufunc = compiled._codelibrary.get_cufunc()
    attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attr, int(nbytes), cufunc.handle, cufunc.device.id)
    _limit_done.add(key)


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
