"""Side streams and ordering events for a variant whose kernels run concurrently (one
call forks from the caller's stream onto its own streams and joins back, so the call stays
one unit of work on the caller's stream and can be captured into a CUDA graph).

Streams are created non-blocking (no implicit ordering with the legacy default stream)
with the device's highest or lowest scheduling priority: when CTAs of both are waiting
for room on an SM, the block scheduler prefers the high-priority stream's (a hint; running
CTAs are never pre-empted). The simulator runs every launch at once, in program order, so
its plain streams keep every dependency.
"""
from __future__ import annotations

from ._compat import SIMULATOR, cuda


def priority_stream(high: bool):
    """A new non-blocking stream at the device's highest (``high``) or lowest priority;
    a plain ``cuda.stream()`` on the simulator."""
    if SIMULATOR:
        return cuda.stream()
    from numba.cuda.cudadrv.driver import Stream, _stream_finalizer, binding, driver

    ctx = cuda.current_context()
    least, greatest = driver.cuCtxGetStreamPriorityRange()
    flags = int(binding.CUstream_flags.CU_STREAM_NON_BLOCKING.value)
    handle = driver.cuStreamCreateWithPriority(flags, int(greatest if high else least))
    return Stream(handle, finalizer=_stream_finalizer(ctx.deallocations, handle))


def stream_priority(stream) -> int:
    """The scheduling priority of ``stream`` (lower is higher; 0 on the simulator)."""
    if SIMULATOR:
        return 0
    from numba.cuda.cudadrv.driver import driver

    return int(driver.cuStreamGetPriority(stream.handle))


def order_event():
    """An event for ordering only (no timing: cheaper to record and wait on; the simulator's
    events take no arguments)."""
    return cuda.event() if SIMULATOR else cuda.event(timing=False)
