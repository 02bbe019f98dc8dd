"""Which CUDA device a call runs on.

Every device-memory argument of one call (inputs, ``out``, a workspace, a state cache) must
live on one CUDA device: a kernel launched on one device cannot read another's memory (no
peer access is set up), and reading it anyway is an illegal-address error that ends the
process's CUDA context. :func:`call_device` finds that device from the arguments' pointers
(the driver's ``CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL``) and refuses a call whose arrays are
on two devices with a ``ValueError`` naming the argument, before anything is copied or
launched. The call then runs under :func:`on_device`: that device's primary context is
current for its copies, scratch, launches and results, whatever device is current for the
caller (a torch tensor on ``cuda:1`` works while numba's current device is 0). A call with
no device-memory argument (numpy only) runs on the current device. :func:`check_stream`
refuses a stream of another device's context.

The CUDA simulator has one device and no pointers: nothing here checks anything there.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Iterable, Optional, Tuple

import numpy as np

from ._compat import SIMULATOR, cuda


_drv = None


def _driver():
    """``cuda.bindings.driver``, initialised (``cuInit``) the first time it is asked for."""
    global _drv
    if _drv is None:
        from cuda.bindings import driver as drv

        drv.cuInit(0)
        _drv = drv
    return _drv


def _error_name(drv, err) -> str:
    got = drv.cuGetErrorName(err)
    return got[1].decode() if got[0] == drv.CUresult.CUDA_SUCCESS else str(err)


def pointer_device(ptr: int, name: str) -> int:
    """The ordinal of the device whose memory ``ptr`` points into (device, managed or
    registered host memory); ``ValueError`` naming ``name`` for a pointer the CUDA driver
    does not know (host memory, freed memory, a made-up address)."""
    drv = _driver()
    attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, ordinal = drv.cuPointerGetAttribute(attr, drv.CUdeviceptr(int(ptr)))
    if err != drv.CUresult.CUDA_SUCCESS:
        raise ValueError(f"{name}: its data pointer {int(ptr):#x} is no memory the CUDA driver "
                         f"knows ({_error_name(drv, err)}); pass device, managed or "
                         f"registered host memory, or a numpy array")
    return int(ordinal)


def _device_pointer(name: str, obj: Any) -> Optional[int]:
    """An address inside the memory of ``obj`` (an array argument, or an
    :class:`._arrays.ArrayArg` of one: the lowest byte it covers) when it is CUDA device
    memory with elements, else None (numpy, None, empty arrays, and anything the argument
    checks will refuse: those checks name it in their own words)."""
    from ._arrays import KIND_NUMPY, ArrayArg, as_array_arg, device_span

    if obj is None or isinstance(obj, np.ndarray):
        return None
    if isinstance(obj, ArrayArg):
        arg = obj
    else:
        try:
            arg = as_array_arg(obj, name)
        except (TypeError, ValueError):
            return None
    span = None if arg.kind == KIND_NUMPY else device_span(arg)
    return None if span is None else int(span[0])


_primary_handles = {}    # device ordinal -> its primary context's handle (an int)


def _primary_handle(dev: int) -> int:
    handle = _primary_handles.get(dev)
    if handle is None:
        handle = _primary_handles[dev] = int(cuda.gpus[dev].get_primary_context().handle)
    return handle


def current_device() -> Optional[int]:
    """The ordinal of the current device (numba's current context); None on the simulator."""
    if SIMULATOR:
        return None
    return int(cuda.get_current_device().id)


def call_device(named: Iterable[Tuple[str, Any]]) -> Optional[int]:
    """The device every device-memory argument in ``named`` (``(name, array)`` pairs, the
    call's own order) lives on, or None when none is device memory (or on the simulator).
    ``ValueError`` naming the first argument on another device than the first one's."""
    if SIMULATOR:
        return None
    first = None
    for name, obj in named:
        ptr = _device_pointer(name, obj)
        if ptr is None:
            continue
        dev = pointer_device(ptr, name)
        if first is None:
            first = (name, dev)
        elif dev != first[1]:
            raise ValueError(f"{name}: on CUDA device {dev}, while {first[0]} is on device "
                             f"{first[1]}; every array of one call must be on one device")
    return None if first is None else first[1]


@contextmanager
def on_device(dev: Optional[int]):
    """Run the block with device ``dev``'s primary context current (nothing is switched when
    it already is, when ``dev`` is None, or on the simulator)."""
    if dev is None or SIMULATOR:
        yield
        return
    drv = _driver()
    err, cur = drv.cuCtxGetCurrent()
    if err == drv.CUresult.CUDA_SUCCESS and int(cur) == _primary_handle(dev):
        yield
        return
    with cuda.gpus[dev]:
        yield


def check_stream(strm, dev: Optional[int]) -> None:
    """``ValueError`` naming ``stream`` when ``strm`` (a resolved numba stream; 0 is the
    default stream) belongs to another context than device ``dev``'s primary one (a torch
    stream of another device). Nothing to check for the default stream, for ``dev`` None
    or on the simulator."""
    if SIMULATOR or dev is None or (isinstance(strm, int) and strm == 0):
        return
    handle = int(strm.handle)
    if handle in (0, 1, 2):        # the legacy and per-thread default streams: any context's
        return
    drv = _driver()
    err, ctx = drv.cuStreamGetCtx(drv.CUstream(handle))
    if err != drv.CUresult.CUDA_SUCCESS:
        raise ValueError(f"stream: handle {handle:#x} is no stream the CUDA driver knows "
                         f"({_error_name(drv, err)})")
    if int(ctx) != _primary_handle(dev):
        raise ValueError(f"stream: not a stream of CUDA device {dev}'s primary context, where "
                         f"the call's arrays are; pass a stream of that device")


class CallDevice:
    """The device one call runs on, entered once it is known: ``with CallDevice() as cd``
    around a plan's construction, ``cd.enter(call_device(...))`` once its arguments are read
    (before any copy or allocation); the device's context is left at the end of the block.
    ``cd.device`` is then the call's device (the current one when no argument is device
    memory), which the plan keeps for its launches and results."""

    def __init__(self):
        self._stack = ExitStack()
        self.device: Optional[int] = None

    def __enter__(self) -> "CallDevice":
        return self

    def __exit__(self, *exc) -> bool:
        return self._stack.__exit__(*exc)

    def enter(self, dev: Optional[int]) -> None:
        self._stack.enter_context(on_device(dev))
        self.device = dev if dev is not None else current_device()


class LaunchStreams:
    """A plan's launch streams: its own (checked at plan time), or one a launch passes,
    resolved (:func:`._arrays.resolve_stream`) and checked to be of the plan's device
    (:func:`check_stream`) once per stream object: the last one checked is kept (at first
    the plan's own), so a replayed launch on the same object pays the resolve, not the
    driver query."""

    def __init__(self, own, dev: Optional[int]):
        self.own, self.device = own, dev
        self._checked = own

    def resolve(self, stream):
        if stream is None:
            return self.own
        from ._arrays import resolve_stream

        strm = resolve_stream(stream)
        if strm is not self._checked:
            check_stream(strm, self.device)
            self._checked = strm
        return strm
