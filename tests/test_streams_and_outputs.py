"""Streams, writable outputs and device-memory ranges (``dflash2_numba._arrays``):

* ``resolve_stream`` takes the simulator's own stream (it has no ``.handle``) and hands it
  back usable for launches, takes objects with the CUDA stream protocol
  (``__cuda_stream__() -> (version, handle)``), and refuses a bool by name;
* a device output marked read-only by its ``__cuda_array_interface__`` is refused by name;
* on the simulator a foreign ``__cuda_array_interface__`` / CUDA DLPack object gives a
  TypeError naming the argument (the simulator has no ``cuda.is_cuda_array``);
* ``device_span`` / ``check_disjoint``: the byte range a device array covers, and an
  overlap refused by name.
"""
from __future__ import annotations

import numpy as np
import pytest

import oracle
from dflash2_numba import _arrays as A
from dflash2_numba import _registry
from dflash2_numba._compat import SIMULATOR, cuda
from dflash2_numba.gdn import gdn_prefill

simulator_only = pytest.mark.skipif(not SIMULATOR, reason="the simulator's own objects")


def _gdn_case(seed=0):
    rng = np.random.default_rng(seed)
    return oracle.random_gdn_case(rng, B=1, T=3, H=1, HV=1, K=32, V=32, dtype=np.float32,
                                  with_state=True)


class _ExternalStreams:
    """Stands in for ``cuda.external_stream`` (which needs a GPU): records the handles."""

    def __init__(self):
        self.handles = []

    def __call__(self, handle):
        self.handles.append(handle)
        return ("external", handle)


@pytest.fixture
def external(monkeypatch):
    rec = _ExternalStreams()
    monkeypatch.setattr(A.cuda, "external_stream", rec, raising=False)
    return rec


# --- resolve_stream ------------------------------------------------------------------

@simulator_only
def test_the_simulators_stream_is_taken_and_launches():
    s = cuda.stream()
    assert A.resolve_stream(s) is s

    def add_one(a):
        i = cuda.grid(1)
        if i < a.shape[0]:
            a[i] += np.float32(1)

    d = cuda.to_device(np.arange(4, dtype=np.float32))
    cuda.jit(add_one)[1, 4, A.resolve_stream(s)](d)
    assert d.copy_to_host(stream=A.resolve_stream(s)).tolist() == [1, 2, 3, 4]


@simulator_only
def test_gdn_prefill_on_the_simulators_stream_gives_the_same_bits():
    case = _gdn_case()
    o0, s0 = gdn_prefill(**case, variant="serial")
    o1, s1 = gdn_prefill(**case, variant="serial", stream=cuda.stream())
    assert oracle.first_mismatch(o1, o0) is None and oracle.first_mismatch(s1, s0) is None


class _StreamProtocol:
    def __init__(self, handle, version=0):
        self._v = (version, handle)

    def __cuda_stream__(self):
        return self._v


def test_cuda_stream_protocol_objects_are_taken(external):
    assert A.resolve_stream(_StreamProtocol(0x1234)) == ("external", 0x1234)
    assert A.resolve_stream(_StreamProtocol(0)) == 0           # the default stream
    assert external.handles == [0x1234]


def test_a_broken_cuda_stream_protocol_is_refused_by_name(external):
    class Broken:
        def __cuda_stream__(self):
            return "not a pair"

    with pytest.raises(TypeError, match="stream"):
        A.resolve_stream(Broken())


@pytest.mark.parametrize("flag", [True, False, np.True_, np.False_])
def test_a_bool_is_not_a_stream(flag, external):
    with pytest.raises(TypeError, match="stream.*bool"):
        A.resolve_stream(flag)
    assert external.handles == []


def test_what_worked_before_still_works(external):
    assert A.resolve_stream(None) == 0
    assert A.resolve_stream(0) == 0 and A.resolve_stream(np.int64(0)) == 0

    class TorchLike:
        cuda_stream = 77

    class CupyLike:
        ptr = 88

    assert A.resolve_stream(TorchLike()) == ("external", 77)
    assert A.resolve_stream(CupyLike()) == ("external", 88)
    assert A.resolve_stream(99) == ("external", 99)
    assert A.resolve_stream(np.int32(5)) == ("external", 5)
    with pytest.raises(TypeError, match="stream"):
        A.resolve_stream("fast")


@pytest.mark.parametrize("handle", [None, "abc", 1.5, True])
@pytest.mark.parametrize("attr", ["cuda_stream", "ptr"])
def test_a_stream_handle_attribute_that_is_no_int_is_refused_by_name(attr, handle, external):
    """A torch-like ``cuda_stream`` or cupy-like ``ptr`` must be an int handle: anything else
    is a TypeError naming ``stream`` and the attribute (it was int()'s own error)."""
    obj = type("Odd", (), {attr: handle})()
    with pytest.raises(TypeError, match=rf"^stream: Odd\.{attr} must give an int handle"):
        A.resolve_stream(obj)
    assert external.handles == []


def test_gdn_prefill_refuses_a_bool_stream_by_name():
    with pytest.raises(TypeError, match="stream"):
        gdn_prefill(**_gdn_case(), variant="serial", stream=True)


@pytest.mark.gpu
def test_numba_streams_and_protocol_streams_on_a_gpu():
    s = cuda.stream()
    assert A.resolve_stream(s) is s
    handle = int(s.handle.value if hasattr(s.handle, "value") else s.handle)
    ext = A.resolve_stream(_StreamProtocol(handle))
    assert int(ext.handle.value if hasattr(ext.handle, "value") else ext.handle) == handle


# --- read-only device outputs ----------------------------------------------------------

class _DeviceBuffer:
    """An object that only describes device memory (nothing is read or written here)."""

    def __init__(self, shape, read_only, ptr=0x7F0000000000, strides=None, typestr="<f4"):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, read_only), "strides": strides,
                                         "version": 3}


def _cai_arg(obj, name="out"):
    """The ArrayArg as_array_arg builds for a device-interface object on a GPU (built by hand:
    on the simulator as_array_arg refuses such objects)."""
    cai = obj.__cuda_array_interface__
    dt = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    return A.ArrayArg(name, obj, A.KIND_CAI, shape, dt, A._contiguous_strides(shape, dt.itemsize))


def test_a_read_only_device_output_is_refused_by_name():
    with pytest.raises(ValueError, match="out: the array is read-only"):
        A.check_writable_output(_cai_arg(_DeviceBuffer((2, 3), True)), (2, 3), np.float32, "[B, T]")
    A.check_writable_output(_cai_arg(_DeviceBuffer((2, 3), False)), (2, 3), np.float32, "[B, T]")


def test_a_read_only_dlpack_export_is_refused_by_name():
    """as_array_arg's DLPack path records the exporter's read-only flag in the interface it
    builds; the output check reads it."""
    cai = {"shape": (4,), "typestr": "<f4", "data": (0x7F0000001000, True), "strides": (4,),
           "version": 3}
    arg = A.ArrayArg("state_cache", A._CAIWrapper(cai, owner=None), A.KIND_CAI, (4,),
                     np.dtype(np.float32), (4,))
    assert A.is_read_only(arg)
    with pytest.raises(ValueError, match="state_cache: the array is read-only"):
        A.check_writable(arg)


def test_writable_outputs_are_still_taken():
    A.check_writable_output(A.as_array_arg(np.zeros((2, 3), np.float32), "out"), (2, 3),
                            np.float32, "[B, T]")
    A.check_writable_output(A.as_array_arg(cuda.to_device(np.zeros((2, 3), np.float32)), "out"),
                            (2, 3), np.float32, "[B, T]")
    ro = np.zeros((2, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out: the array is read-only"):
        A.check_writable_output(A.as_array_arg(ro, "out"), (2, 3), np.float32, "[B, T]")


# --- foreign device memory on the simulator ----------------------------------------------

class _CudaDLPack:
    def __dlpack_device__(self):
        return (2, 0)                       # kDLCUDA, device 0

    def __dlpack__(self, stream=None):      # pragma: no cover - never reached
        raise AssertionError("the simulator must not import device memory")


class _HostDLPack:
    """A host DLPack exporter numpy cannot import (as a bfloat16 CPU tensor is for numpy),
    or whose ``__dlpack_device__`` itself fails."""

    def __init__(self, device_fails=False):
        self.device_fails = device_fails

    def __dlpack_device__(self):
        if self.device_fails:
            raise RuntimeError("no device")
        return (1, 0)                       # kDLCPU

    def __dlpack__(self, stream=None, **kw):
        return object()                     # no capsule: np.from_dlpack fails


@pytest.mark.parametrize("device_fails", [False, True])
def test_a_host_dlpack_object_numpy_cannot_read_is_a_type_error_naming_it(device_fails):
    with pytest.raises(TypeError, match="^q: "):
        A.as_array_arg(_HostDLPack(device_fails), "q")
    case = _gdn_case()
    _registry.route_counters(reset=True)
    with pytest.raises(TypeError, match="^k: "):
        gdn_prefill(**dict(case, k=_HostDLPack(device_fails)), variant="serial")
    assert _registry.route_counters() == {}


@simulator_only
@pytest.mark.parametrize("obj", [_DeviceBuffer((2, 3), False), _CudaDLPack()])
def test_foreign_device_memory_is_refused_by_name_on_the_simulator(obj):
    with pytest.raises(TypeError, match="^out: .*simulator"):
        A.as_array_arg(obj, "out")


@simulator_only
def test_gdn_prefill_names_a_foreign_device_output_on_the_simulator():
    case = _gdn_case()
    with pytest.raises(TypeError, match="^out: "):
        gdn_prefill(**case, variant="serial", out=_DeviceBuffer((1, 3, 1, 32), False))


# --- device_span / check_disjoint --------------------------------------------------------

def test_device_span_of_views_of_one_buffer():
    d = cuda.to_device(np.zeros((4, 6), np.float32))
    lo, hi = A.device_span(d)
    assert hi - lo == 96
    assert A.device_span(d[1:3]) == (lo + 24, lo + 72)
    assert A.device_span(d[:, 2:4]) == (lo + 8, lo + 16 + 3 * 24)
    assert A.device_span(d[::-1]) == (lo, hi)                     # negative strides
    assert A.device_span(d[::-1, ::-2]) == (lo + 4, hi)           # elements 5, 3, 1 of each row
    assert A.device_span(d[2, ::-1]) == (lo + 48, lo + 72)
    assert A.device_span(A.as_array_arg(d[1:], "x")) == (lo + 24, hi)


def test_device_span_is_none_for_host_and_empty_arrays():
    d = cuda.to_device(np.zeros((4, 6), np.float32))
    assert A.device_span(d[2:2]) is None and A.device_span(d[:, :0]) is None
    assert A.device_span(np.zeros(3, np.float32)) is None
    assert A.device_span(A.as_array_arg(np.zeros(3, np.float32), "x")) is None
    assert A.device_span(None) is None


def test_device_span_of_an_interface_with_negative_strides():
    buf = _DeviceBuffer((3, 4), False, ptr=0x10000, strides=(-16, 4))
    assert A.device_span(buf) == (0x10000 - 32, 0x10000 + 16)
    assert A.device_span(_DeviceBuffer((3, 4), False, ptr=0x10000)) == (0x10000, 0x10000 + 48)
    assert A.device_span(_DeviceBuffer((0, 4), False, ptr=0)) is None


def test_check_disjoint_refuses_overlapping_device_arrays_by_name():
    d = cuda.to_device(np.zeros((4, 6), np.float32))
    other = cuda.to_device(np.zeros((4, 6), np.float32))
    A.check_disjoint("out", d[:2], [("q", d[2:]), ("k", other), ("v", None),
                                    ("g", np.zeros(3)), ("h", d[3:3])])
    with pytest.raises(ValueError, match="^out: overlaps q in device memory"):
        A.check_disjoint("out", d[1:3], [("k", other), ("q", d[2:])])
    with pytest.raises(ValueError, match="^state: overlaps out in device memory"):
        A.check_disjoint("state", d[::-1], [("out", d[3])])
    # byte ranges are compared: interleaved columns of one buffer count as overlapping
    with pytest.raises(ValueError, match="^a: overlaps b"):
        A.check_disjoint("a", d[:, 0], [("b", d[:, 1])])
    # touching ends do not overlap
    A.check_disjoint("a", d[0], [("b", d[1])])
    A.check_disjoint("a", A.as_array_arg(d[:1], "a"), [("b", A.as_array_arg(d[1:], "b"))])
