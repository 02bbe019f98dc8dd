"""Array arguments in and out, and the argument checks every public entry point runs.

Accepted inputs: numpy arrays (copied to the device; results come back as numpy),
numba device arrays, and any object with ``__cuda_array_interface__`` (PyTorch, CuPy),
used zero-copy; objects that only offer ``__dlpack__`` are used zero-copy when they
live on a CUDA device and as numpy arrays when they live on the host.

Every check here runs on shapes, dtypes and strides alone (no transfer, no launch),
except :meth:`ArrayArg.host_values`, which copies the small integer index arrays to
the host so that every index read from user data can be range-checked before launch.
All failures raise ``TypeError`` (wrong kind or dtype) or ``ValueError`` (shape,
stride, range) and name the argument.
"""
from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Tuple

import numpy as np

from ._compat import SIMULATOR, cuda

KIND_NUMPY = "numpy"
KIND_DEVICE = "numba"
KIND_TORCH = "torch"
KIND_CUPY = "cupy"
KIND_CAI = "cuda_array_interface"


class _CAIWrapper:
    """Holds a ``__cuda_array_interface__`` dict (and the object owning the memory)."""

    def __init__(self, interface: dict, owner: Any):
        self.__cuda_array_interface__ = interface
        self._owner = owner


def _kind_of(x: Any) -> str:
    mod = type(x).__module__.split(".")[0]
    if isinstance(x, np.ndarray):
        return KIND_NUMPY
    if cuda.is_cuda_array(x):     # (never reached on the simulator, which has none)
        if mod == "torch":
            return KIND_TORCH
        if mod == "cupy":
            return KIND_CUPY
        return KIND_CAI           # (numba's own device arrays never get here: as_array_arg)
    return ""


@dataclass
class ArrayArg:
    """One array argument: its description, and how to reach it on the device."""

    name: str
    obj: Any               # what the caller passed (or the numpy view of a host DLPack object)
    kind: str
    shape: tuple
    dtype: np.dtype
    strides: tuple         # in bytes
    _device: Any = None
    ptr: Optional[int] = None   # device memory: the data pointer (read once, at parse time)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def device(self, stream=0):
        """A numba device array over the same memory (numpy: a copy on the device)."""
        if self._device is None:
            if self.kind == KIND_NUMPY:
                self._device = cuda.to_device(compact_host(self.obj), stream=stream)
            elif self.kind == KIND_DEVICE:
                self._device = self.obj
            else:
                self._device = cuda.as_cuda_array(self.obj, sync=False)
        return self._device

    def host_values(self, stream=0) -> np.ndarray:
        """The values on the host (a copy for device arrays); only for small index arrays.
        The copy is made on ``stream`` and waited for: on a GPU a copy on the legacy default
        stream is not ordered after work on a non-blocking stream (a torch or CuPy stream),
        such as a plan's own upload of a numpy input."""
        if self.kind == KIND_NUMPY:
            return np.asarray(self.obj)
        host = self.device(stream).copy_to_host(stream=stream)
        if stream != 0:
            stream.synchronize()
        return host


def compact_host(x: np.ndarray) -> np.ndarray:
    """``x`` as a C-contiguous array with the canonical strides of its shape (a copy where
    needed). ``np.ascontiguousarray`` keeps a zero stride on an axis of size 1 (``x[None]``,
    ``broadcast_to``): numpy calls that C-contiguous, but numba's device copy keeps the
    strides and types the device array as layout "A", which the flat-input kernels refuse."""
    x = np.ascontiguousarray(x)
    if x.size and tuple(x.strides) != _contiguous_strides(x.shape, x.itemsize):
        x = x.copy(order="C")
    return x


def _unreachable_on_simulator(name: str, x: Any, how: str) -> TypeError:
    return TypeError(f"{name}: {type(x).__name__} is CUDA device memory ({how}), which the "
                     f"CUDA simulator cannot reach; pass a numpy or numba device array")


def as_array_arg(x: Any, name: str) -> ArrayArg:
    if x is None:
        raise TypeError(f"{name}: expected an array, got None")
    if isinstance(x, np.ndarray):
        return ArrayArg(name, x, KIND_NUMPY, tuple(x.shape), x.dtype, tuple(x.strides))
    if getattr(x, "__cuda_ndarray__", False):
        # a numba device array; the simulator's has no __cuda_array_interface__, and its
        # __dlpack__ would pass it off as a host array (numpy results for device inputs)
        return ArrayArg(name, x, KIND_DEVICE, tuple(int(s) for s in x.shape), np.dtype(x.dtype),
                        tuple(int(s) for s in x.strides),
                        ptr=int(_device_interface(x)["data"][0]))
    if hasattr(x, "__cuda_array_interface__"):
        if SIMULATOR:
            raise _unreachable_on_simulator(name, x, "__cuda_array_interface__")
        cai = x.__cuda_array_interface__
        dtype = np.dtype(cai["typestr"])
        shape = tuple(int(s) for s in cai["shape"])
        strides = cai.get("strides")
        if strides is None:
            strides = _contiguous_strides(shape, dtype.itemsize)
        kind = _kind_of(x) or KIND_CAI
        return ArrayArg(name, x, kind, shape, dtype, tuple(int(s) for s in strides),
                        ptr=int(cai["data"][0]))
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        try:
            dev_type = int(x.__dlpack_device__()[0])
        except Exception as exc:   # noqa: BLE001  (whatever the object's own method raises)
            raise TypeError(f"{name}: {type(x).__name__}.__dlpack_device__() failed "
                            f"({type(exc).__name__}: {exc})") from None
        if dev_type == 1:  # kDLCPU
            try:
                a = np.from_dlpack(x)
            except Exception as exc:   # noqa: BLE001  (numpy: RuntimeError for a dtype it lacks)
                raise TypeError(f"{name}: a host DLPack array numpy cannot read "
                                f"({type(exc).__name__}: {exc})") from None
            return as_array_arg(a, name)
        if dev_type in (2, 13):  # kDLCUDA, kDLCUDAManaged
            if SIMULATOR:
                raise _unreachable_on_simulator(name, x, "DLPack")
            from cuda.core.utils import StridedMemoryView

            view = StridedMemoryView.from_dlpack(x, stream_ptr=-1)
            dtype = np.dtype(view.dtype)
            shape = tuple(view.shape)
            st = view.strides
            strides = (_contiguous_strides(shape, dtype.itemsize) if st is None
                       else tuple(int(s) * dtype.itemsize for s in st))
            cai = {"shape": shape, "typestr": dtype.str, "data": (int(view.ptr), view.readonly),
                   "strides": strides, "version": 3}
            return ArrayArg(name, _CAIWrapper(cai, x), KIND_CAI, shape, dtype, strides,
                            ptr=int(view.ptr))
        raise TypeError(f"{name}: DLPack device type {dev_type} is not supported")
    raise TypeError(
        f"{name}: expected a numpy array, a numba device array, or an object with "
        f"__cuda_array_interface__ / __dlpack__, got {type(x).__name__}")


def _contiguous_strides(shape: Sequence[int], itemsize: int) -> tuple:
    strides = []
    acc = itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


# --- checks -------------------------------------------------------------------------

def check_dtype(a: ArrayArg, allowed: Sequence) -> None:
    allowed_dt = [np.dtype(d) for d in allowed]
    if a.dtype not in allowed_dt:
        names = " or ".join(str(d) for d in allowed_dt)
        raise TypeError(f"{a.name}: expected dtype {names}, got {a.dtype}")


def check_ndim(a: ArrayArg, ndim: int, layout: str) -> None:
    if a.ndim != ndim:
        raise ValueError(f"{a.name}: expected {ndim} dimensions {layout}, got shape {a.shape}")


def check_shape(a: ArrayArg, expected: Sequence[Optional[int]], layout: str) -> None:
    check_ndim(a, len(expected), layout)
    for got, want in zip(a.shape, expected):
        if want is not None and got != want:
            raise ValueError(f"{a.name}: expected shape {layout} = {tuple(expected)}, got {a.shape}")


def check_unit_last_stride(a: ArrayArg) -> None:
    if a.shape[-1] > 1 and a.strides[-1] != a.itemsize:
        raise ValueError(f"{a.name}: the last dimension must have unit stride, got strides {a.strides}")


def check_nonnegative_strides(a: ArrayArg) -> None:
    """Device arrays must not have negative strides (numpy inputs are copied compactly): the
    kernels' layouts, and numba's device-to-host copy (which the value and range checks of
    index arrays make), take non-negative strides only."""
    if a.kind != KIND_NUMPY and any(s < 0 for s in a.strides):
        raise ValueError(f"{a.name}: negative strides are not supported, got {a.strides}")


_OVERLAP_EXACT_LIMIT = 1 << 22   # elements: above it an interleaved layout is refused unread


def elements_overlap(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bool:
    """Whether two elements of an array of this shape and (byte) strides share memory: a
    zero stride (``broadcast_to``) or strides that fold one dimension onto another
    (``as_strided``). Nested layouts (any permutation or slicing of a contiguous array: each
    stride, by size, past the span of the smaller ones) are decided from the strides alone;
    any other layout of up to ``_OVERLAP_EXACT_LIMIT`` elements by its elements' offsets,
    and a larger one counts as overlapping."""
    dims = sorted((abs(int(st)), int(n)) for n, st in zip(shape, strides) if int(n) > 1)
    if any(int(n) == 0 for n in shape):
        return False
    span = itemsize
    for st, n in dims:
        if st < span:
            break
        span += st * (n - 1)
    else:
        return False
    size = math.prod(n for _, n in dims)        # (Python ints: np.prod wraps past int64)
    if size > _OVERLAP_EXACT_LIMIT:
        return True
    offsets = np.zeros(1, dtype=np.int64)
    for st, n in dims:
        offsets = (offsets[:, None] + st * np.arange(n, dtype=np.int64)).ravel()
    offsets.sort()
    return bool(np.any(np.diff(offsets) < itemsize))


def check_elements_disjoint(a: ArrayArg) -> None:
    """``ValueError`` naming ``a`` when two of its elements share memory
    (:func:`elements_overlap`): for a host array the call writes element by element (a
    numpy ``state_cache``), where one final state would overwrite another."""
    if elements_overlap(a.shape, a.strides, a.itemsize):
        raise ValueError(f"{a.name}: elements share memory (strides {a.strides} for shape "
                         f"{a.shape}); the call writes into it, so pass an array whose "
                         f"elements are separate memory")


def is_c_contiguous(a: ArrayArg) -> bool:
    """C-contiguous as numpy and numba decide it: the stride of a dimension of size 1 is
    never read, and an empty array is contiguous."""
    if any(n == 0 for n in a.shape):
        return True
    want = _contiguous_strides(a.shape, a.itemsize)
    return all(n == 1 or st == w for n, st, w in zip(a.shape, a.strides, want))


def is_numba_c_layout(a: ArrayArg) -> bool:
    """Whether numba types ``a`` (a device array) as layout "C": C-contiguous, and no zero
    stride on a non-empty array, even on an axis of size 1 (numba's rule, stricter than
    numpy's: ``numba.cuda.cudadrv.dummyarray.Array._compute_layout``)."""
    if not is_c_contiguous(a):
        return False
    return any(n == 0 for n in a.shape) or 0 not in a.strides


def check_contiguous(a: ArrayArg) -> None:
    if not is_c_contiguous(a):
        raise ValueError(f"{a.name}: expected a C-contiguous array, got strides {a.strides}")


def is_read_only(a: ArrayArg) -> bool:
    """Whether the owner of ``a``'s memory marked it read-only: a numpy array that is not
    writeable, or a device array whose ``__cuda_array_interface__`` says ``data: (ptr, True)``
    (an immutable buffer, a read-only DLPack export: :func:`as_array_arg` carries DLPack's
    flag into the interface it builds)."""
    if a.kind == KIND_NUMPY:
        return not a.obj.flags.writeable
    try:
        cai = a.obj.__cuda_array_interface__
    except AttributeError:          # the simulator's device arrays have no interface
        return False
    data = cai.get("data") if isinstance(cai, dict) else None
    return bool(data is not None and len(data) > 1 and data[1])


def check_writable(a: ArrayArg) -> None:
    """``ValueError`` naming ``a`` when its memory is marked read-only (:func:`is_read_only`):
    for every argument a kernel writes into (``out``, a state cache)."""
    if is_read_only(a):
        raise ValueError(f"{a.name}: the array is read-only")


def check_writable_output(a: ArrayArg, shape: Sequence[int], dtype, layout: str) -> None:
    check_dtype(a, [dtype])
    if a.ndim != len(shape) or any(g < w for g, w in zip(a.shape, shape)):
        raise ValueError(f"{a.name}: too small; expected {layout} = {tuple(shape)}, got {a.shape}")
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{a.name}: expected shape {layout} = {tuple(shape)}, got {a.shape}")
    # a negative stride on a size-1 dimension is C-contiguous by numpy's rule, but numba
    # cannot copy such a device array to the host on a GPU (results() copies a device out)
    check_nonnegative_strides(a)
    check_contiguous(a)
    check_writable(a)


# --- device memory ranges -----------------------------------------------------------

def _device_interface(arr: Any) -> Optional[dict]:
    """The array interface that describes ``arr``'s device memory, or None for host memory.
    Under the simulator a numba device array wraps a host numpy array: its interface (whose
    pointer is that host buffer's, shared by every view of one device allocation) stands for
    the device memory."""
    if isinstance(arr, ArrayArg):
        if arr.kind == KIND_NUMPY:
            return None
        arr = arr.obj
    if arr is None or isinstance(arr, np.ndarray):
        return None
    if getattr(arr, "__cuda_ndarray__", False) and not hasattr(arr, "__cuda_array_interface__"):
        return arr.__array_interface__            # the simulator's FakeCUDAArray
    cai = getattr(arr, "__cuda_array_interface__", None)
    return cai if isinstance(cai, dict) else None


def device_span(arr: Any) -> Optional[Tuple[int, int]]:
    """The bytes ``[start, stop)`` of device memory that ``arr`` covers (a numba device array,
    an object with ``__cuda_array_interface__``, or an :class:`ArrayArg` of either), from its
    pointer, shape and strides (negative strides included); None for a host (numpy) array
    and for an array with no elements."""
    if isinstance(arr, ArrayArg) and arr.ptr is not None:   # (parsed: no interface to read)
        shape, itemsize, strides, ptr = arr.shape, arr.itemsize, arr.strides, arr.ptr
    else:
        cai = _device_interface(arr)
        if cai is None:
            return None
        shape = tuple(int(n) for n in cai["shape"])
        itemsize = np.dtype(cai["typestr"]).itemsize
        strides = cai.get("strides")
        if strides is None:
            strides = _contiguous_strides(shape, itemsize)
        ptr = int(cai["data"][0])
    if any(n == 0 for n in shape):
        return None
    lo = ptr + sum((n - 1) * int(st) for n, st in zip(shape, strides) if int(st) < 0)
    hi = ptr + sum((n - 1) * int(st) for n, st in zip(shape, strides) if int(st) > 0) + itemsize
    return lo, hi


def check_disjoint(name: str, arr: Any, others: Iterable[Tuple[str, Any]]) -> None:
    """``ValueError`` naming ``name`` and the other argument when the device bytes of ``arr``
    (:func:`device_span`) intersect those of any ``(other_name, other_arr)`` in ``others``
    (an output that aliases an input, or another output). Byte ranges are compared, so two
    interleaved strided views of one buffer count as overlapping. Host arrays, empty arrays
    and None never overlap."""
    span = device_span(arr)
    if span is None:
        return
    for other_name, other in others:
        o = device_span(other)
        if o is not None and span[0] < o[1] and o[0] < span[1]:
            raise ValueError(
                f"{name}: overlaps {other_name} in device memory (bytes [{span[0]:#x}, {span[1]:#x}) "
                f"and [{o[0]:#x}, {o[1]:#x})); pass separate buffers")


def int_text(n: int) -> str:
    """``n`` as text for a message: its digits, or ``about 2**k`` past 30 digits (Python
    refuses ``str`` of an int past 4300 digits, and such digits say nothing)."""
    n = int(n)
    if abs(n) < 10 ** 30:
        return str(n)
    return f"about {'-' if n < 0 else ''}2**{abs(n).bit_length() - 1}"


def _not_a_number(value) -> bool:
    """What is no real number here: bool, and ``np.timedelta64`` (numpy makes it an integer
    subclass, so it would pass an ``np.integer`` check)."""
    return isinstance(value, (bool, np.bool_, np.timedelta64))


def check_finite_scalar(value, name: str, positive: bool = False) -> np.float32:
    if _not_a_number(value) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    try:
        v = float(value)
    except OverflowError:            # an int past float64's range (10 ** 400)
        raise ValueError(f"{name}: must be finite in float32, got {int_text(value)}") from None
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # 1e39 -> inf is what we test for
        v32 = np.float32(v)
    if not np.isfinite(v) or not np.isfinite(v32):
        raise ValueError(f"{name}: must be finite in float32, got {value!r}")
    if positive and not v32 > 0:
        raise ValueError(f"{name}: must be > 0, got {value!r}")
    return v32


def check_int_range(values: np.ndarray, name: str, lo: int, hi: int) -> None:
    """Every value in [lo, hi]; names the first offender."""
    if values.size == 0:
        return
    bad = np.flatnonzero((values < lo) | (values > hi))
    if bad.size:
        idx = np.unravel_index(int(bad[0]), values.shape)
        raise ValueError(f"{name}: value {int(values[idx])} at index {tuple(int(i) for i in idx)} "
                         f"is outside [{lo}, {hi}]")


def first_offender(values: np.ndarray, ok: np.ndarray):
    """``(index tuple, value)`` of the first element where ``ok`` is False, or None."""
    bad = np.flatnonzero(~ok)
    if not bad.size:
        return None
    idx = tuple(int(i) for i in np.unravel_index(int(bad[0]), values.shape))
    return idx, values[idx]


def check_all_finite(a: ArrayArg, hint: str = "", stream=0) -> np.ndarray:
    """Every value finite (copies device arrays to the host on ``stream``); names the first
    offender. Returns the values read (for further checks without a second copy)."""
    values = np.asarray(a.host_values(stream))
    found = first_offender(values, np.isfinite(values))
    if found is not None:
        raise ValueError(f"{a.name}: must be finite; found {found[1]!r} at index {found[0]}{hint}")
    return values


def check_positive_int(value, name: str, lo: int = 1, hi: Optional[int] = None) -> int:
    """``value`` as an int in ``lo .. hi`` (``hi`` None: no upper bound); bool is not an int."""
    if _not_a_number(value) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if int(value) < lo:
        raise ValueError(f"{name}: must be >= {lo}, got {int_text(value)}")
    if hi is not None and int(value) > hi:
        raise ValueError(f"{name}: must be <= {hi}, got {int_text(value)}")
    return int(value)


def check_dtype_choice(value, name: str, allowed: Sequence) -> np.dtype:
    """``value`` read as a dtype that must be one of ``allowed``; ``TypeError`` naming the
    argument otherwise (what numpy cannot read included)."""
    choices = [np.dtype(d) for d in allowed]
    expected = " or ".join(str(d) for d in choices)
    odt = parse_dtype(value, name, expected)
    if odt not in choices:
        raise TypeError(f"{name}: expected {expected}, got {value!r}")
    return odt


def parse_dtype(value, name: str, expected: str) -> np.dtype:
    """``np.dtype(value)``, with numpy's own error for what it cannot read (``"bogus"``, ``5``)
    replaced by a ``TypeError`` naming the argument; ``expected`` says what is accepted."""
    if isinstance(value, np.dtype):
        return value
    try:
        return np.dtype(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected {expected}, got {value!r}") from None


# --- results in the caller's kind ------------------------------------------------------

def allocate(shape, dtype, stream, sized_by: str):
    """A device buffer of the call's own, or a ``ValueError`` naming ``sized_by`` (the
    arguments whose shapes size it) when it cannot be allocated (the driver's or the
    simulator's out-of-memory error), never a bare ``MemoryError`` / ``CudaAPIError``."""
    try:
        return cuda.device_array(shape, dtype, stream=stream)
    except Exception as exc:   # noqa: BLE001  (CudaAPIError / MemoryError: out of memory)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        raise ValueError(f"{sized_by}: the call needs a {nbytes}-byte buffer {tuple(shape)}, "
                         f"which cannot be allocated ({type(exc).__name__})") from None


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says memory ran out: numpy's / Python's ``MemoryError`` (host), or
    the driver's ``CUDA_ERROR_OUT_OF_MEMORY`` (numba's ``CudaAPIError``)."""
    if isinstance(exc, MemoryError):
        return True
    return type(exc).__name__ == "CudaAPIError" and "OUT_OF_MEMORY" in str(exc).upper()


@contextmanager
def memory_named(sized_by: str, what: str):
    """Turn running out of memory inside the block (a host copy, a value check's temporary,
    a variant's scratch; :func:`is_out_of_memory`) into a ``ValueError`` naming
    ``sized_by``, the arguments whose sizes set how much ``what`` needs; every other error
    passes unchanged."""
    try:
        yield
    except Exception as exc:   # noqa: BLE001  (re-raised unless it is out of memory)
        if not is_out_of_memory(exc):
            raise
        raise ValueError(f"{sized_by}: not enough memory for {what} "
                         f"({type(exc).__name__}: {exc})") from None


def result_like(kind: str, dev_array, stream=0):
    """Return ``dev_array`` as the kind of array the caller passed in (a torch tensor on
    the current device, the call's: see :mod:`._devices`)."""
    if kind == KIND_NUMPY:
        return dev_array.copy_to_host(stream=stream)
    if kind == KIND_TORCH:
        import torch

        from ._devices import current_device

        return torch.as_tensor(dev_array, device=torch.device("cuda", current_device()))
    if kind == KIND_CUPY:
        import cupy

        return cupy.asarray(dev_array)
    return dev_array


def _simulator_stream_type():
    from numba.cuda.simulator.api import stream as sim_stream

    return sim_stream


def _external(handle: int):
    """numba's stream for a raw handle. A handle that is no unsigned 64-bit value is refused
    naming ``stream`` (on a GPU numba's ``external_stream`` raises ``OverflowError`` from
    ``CUstream(handle)`` for it; the simulator has no external streams at all)."""
    if not 0 <= handle < 2 ** 64:
        raise ValueError(f"stream: a raw stream handle must be in [0, 2**64), got {handle}")
    return cuda.external_stream(handle)


def _handle_stream(handle, what: str, zero_is_default: bool):
    """The stream of a raw handle that ``what`` (a stream object's attribute or protocol
    method) gave: an int (not a bool, not a float that ``int()`` would truncate); handle 0
    is numba's default stream where ``zero_is_default``, else an external stream of it."""
    if isinstance(handle, (bool, np.bool_)) or not isinstance(handle, (int, np.integer)):
        raise TypeError(f"stream: {what} must give an int handle, got {type(handle).__name__}")
    if zero_is_default and int(handle) == 0:
        return 0
    return _external(int(handle))


def resolve_stream(stream):
    """numba stream (the simulator's included), torch/cupy stream, an object with the CUDA
    stream protocol (``__cuda_stream__() -> (version, handle)``, e.g. ``cuda.core.Stream``),
    raw handle (int) or None -> a numba stream (0 = default). A bool is refused."""
    if stream is None:
        return 0
    if isinstance(stream, (bool, np.bool_)):
        raise TypeError("stream: expected a numba, torch or cupy stream, an object with "
                        "__cuda_stream__, an int handle or None, got bool")
    if isinstance(stream, (int, np.integer)) and stream == 0:
        return 0
    if SIMULATOR and isinstance(stream, _simulator_stream_type()):
        return stream
    if hasattr(stream, "handle") and type(stream).__module__.startswith("numba"):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        what = f"{type(stream).__name__}.__cuda_stream__()"
        try:
            version, handle = stream.__cuda_stream__()
        except Exception as e:   # noqa: BLE001  (whatever the object's own method raises)
            raise TypeError(f"stream: {what} must return (version, handle), failed with "
                            f"{type(e).__name__}: {e}") from None
        return _handle_stream(handle, what, True)
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return _handle_stream(getattr(stream, attr), f"{type(stream).__name__}.{attr}",
                                  False)
    if isinstance(stream, (int, np.integer)):
        return _external(int(stream))
    raise TypeError(f"stream: expected a numba, torch or cupy stream, an object with __cuda_stream__, "
                    f"an int handle or None, got {type(stream).__name__}")
