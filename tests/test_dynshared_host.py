"""``DynShared``'s host-side bookkeeping (the GPU path, with the driver calls replaced): the
attributes are set before the first launch of every new overload, the arguments are typed
once per launch that needs it, a replayed launch with the same argument objects types
nothing, and an attribute changed by another instance invalidates what an instance
remembered. The driver call itself runs only on a GPU (bench scripts and gpu-marked tests)."""
from __future__ import annotations

import numpy as np
import pytest

from dflash2_numba import _dynshared as DS


class FakeKernel:
    """Records what a numba dispatcher would be asked: argument typing and launches."""

    def __init__(self):
        self.typed = 0
        self.launches = []

    def typeof_pyval(self, a):
        self.typed += 1
        return (type(a).__name__, getattr(a, "dtype", None), getattr(a, "ndim", None))

    def __getitem__(self, cfg):
        def launch(*args):
            self.launches.append((cfg, args))
        return launch


CURRENT_DEVICE = [0]     # what the fixture's "current device" answers (a test may change it)


@pytest.fixture
def gpu_path(monkeypatch):
    """DynShared as on a GPU, with the driver call (compile + cuKernelSetAttribute) replaced
    by a log of (kernel, argtypes, attribute, value), and a fresh attribute state."""
    calls = []
    state = DS._AttributeState()
    monkeypatch.setattr(DS, "SIMULATOR", False)
    monkeypatch.setattr(DS, "_attr_state", state)
    monkeypatch.setattr(DS, "_current_device_id", lambda: CURRENT_DEVICE[0])

    def fake_driver_set(kernel, argtypes, name, value):
        calls.append((kernel, argtypes, name.rsplit("_ATTRIBUTE_", 1)[1], value))

    monkeypatch.setattr(DS, "_driver_set", fake_driver_set)
    return calls


def test_attributes_before_first_launch_and_typed_once(gpu_path):
    k = FakeKernel()
    a, b = np.zeros(4, np.float32), np.zeros((2, 2), np.int32)
    dk = DS.DynShared(k, 80 * 1024, carveout=100)
    dk[1, 32, 0](a, b, 7)
    assert [c[2:] for c in gpu_path] == [("MAX_DYNAMIC_SHARED_SIZE_BYTES", 80 * 1024),
                                         ("PREFERRED_SHARED_MEMORY_CARVEOUT", 100)]
    assert k.typed == 3, "each argument typed once for both attributes"
    assert len(k.launches) == 1 and k.launches[0][0] == (1, 32, 0, 80 * 1024)
    # the same objects again (a plan's replay): nothing typed, nothing set, still launched
    for _ in range(5):
        dk[1, 32, 0](a, b, 7)
    assert k.typed == 3 and len(gpu_path) == 2 and len(k.launches) == 6


def test_new_objects_are_typed_and_a_new_overload_gets_its_attributes(gpu_path):
    k = FakeKernel()
    dk = DS.DynShared(k, 64 * 1024)
    x = np.zeros(4, np.float32)
    dk[1, 1, 0](x)
    assert len(gpu_path) == 1 and k.typed == 1
    # another object of the same type: typed, but the overload's attribute is already set
    dk[1, 1, 0](np.ones(4, np.float32))
    assert len(gpu_path) == 1 and k.typed == 2
    # a different type: a new overload, whose attribute is set before its launch
    dk[1, 1, 0](np.ones(4, np.float64))
    assert len(gpu_path) == 2 and k.typed == 3
    assert gpu_path[1][1] != gpu_path[0][1]
    assert len(k.launches) == 3


def test_no_attribute_needed_types_nothing(gpu_path):
    k = FakeKernel()
    dk = DS.DynShared(k, 16 * 1024)          # under 48 KB, no carveout
    dk[2, 64, 0](np.zeros(3), 5)
    assert k.typed == 0 and gpu_path == [] and len(k.launches) == 1


def test_another_instance_changing_the_attribute_invalidates_the_memory(gpu_path):
    k = FakeKernel()
    x = np.zeros(8, np.float32)
    a = DS.DynShared(k, 0, carveout=100)
    b = DS.DynShared(k, 0, carveout=50)
    a[1, 1, 0](x)
    b[1, 1, 0](x)
    a[1, 1, 0](x)                            # must put 100 back before launching
    assert [c[3] for c in gpu_path] == [100, 50, 100]
    a[1, 1, 0](x)                            # nothing changed since: remembered
    assert len(gpu_path) == 3 and k.typed == 3


def test_simulator_sets_nothing(monkeypatch):
    monkeypatch.setattr(DS, "SIMULATOR", True)
    k = FakeKernel()
    DS.DynShared(k, 200 * 1024, carveout=100)[1, 1, 0](np.zeros(1))
    assert k.typed == 0 and len(k.launches) == 1


def _set(kernel, args, name, value):
    DS._set_attribute(kernel, DS._argtypes(kernel, args), name, value)


def test_attributes_are_set_once_per_value(gpu_path):
    k = FakeKernel()
    args = (np.zeros(2, np.float32),)
    DS.set_carveout(k, args, 100)
    _set(k, args, DS.CARVEOUT, 100)
    _set(k, args, DS.SMEM_LIMIT, 100 * 1024)
    _set(k, args, DS.CARVEOUT, 0)
    assert [c[2:] for c in gpu_path] == [("PREFERRED_SHARED_MEMORY_CARVEOUT", 100),
                                         ("MAX_DYNAMIC_SHARED_SIZE_BYTES", 100 * 1024),
                                         ("PREFERRED_SHARED_MEMORY_CARVEOUT", 0)]


def test_attribute_memory_is_per_kernel_object(gpu_path):
    """Two kernels, each asked for the same value with the same argument types: each gets
    its own driver call, and the memory holds the kernel objects themselves (not their
    addresses, which a dropped kernel could pass on to a new one)."""
    args = (np.zeros(2, np.float32),)
    k1, k2 = FakeKernel(), FakeKernel()
    _set(k1, args, DS.CARVEOUT, 100)
    _set(k2, args, DS.CARVEOUT, 100)
    assert [c[0] for c in gpu_path] == [k1, k2]
    kernels = [key[0] for key in DS._attr_state.values]
    assert any(k is k1 for k in kernels) and any(k is k2 for k in kernels)


def test_attributes_are_set_on_each_device(gpu_path):
    """Each device loads its own copy of a kernel: a value set on device 0 is set again
    when the same overload is prepared with device 1 current, and only once there."""
    args = (np.zeros(2, np.float32),)
    k = FakeKernel()
    try:
        _set(k, args, DS.SMEM_LIMIT, 100 * 1024)
        CURRENT_DEVICE[0] = 1
        _set(k, args, DS.SMEM_LIMIT, 100 * 1024)
        _set(k, args, DS.SMEM_LIMIT, 100 * 1024)
    finally:
        CURRENT_DEVICE[0] = 0
    _set(k, args, DS.SMEM_LIMIT, 100 * 1024)
    assert [c[2:] for c in gpu_path] == [("MAX_DYNAMIC_SHARED_SIZE_BYTES", 100 * 1024)] * 2
    assert sorted(key[3] for key in DS._attr_state.values) == [0, 1]


def test_launch_and_attribute_compile_run_under_exact_fp32(monkeypatch):
    """DynShared's launch, and the overload compile ``_driver_set`` makes (also for a probe's
    ``set_carveout`` outside any launch), run under ``exact_fp32``: numba keeps one build per
    signature, so a build made without it would be what every later launch runs."""
    from dflash2_numba import _compat

    seen = []

    class Stop(Exception):
        pass

    class RecordingKernel(FakeKernel):
        def __getitem__(self, cfg):
            def launch(*args):
                seen.append(("launch", _compat._contract_off()))
            return launch

        def compile(self, argtypes):
            seen.append(("compile", _compat._contract_off()))
            raise Stop     # (no driver here: the test ends at the compile)

    monkeypatch.setattr(DS, "SIMULATOR", False)
    monkeypatch.setattr(DS, "_attr_state", DS._AttributeState())
    monkeypatch.setattr(DS, "_current_device_id", lambda: 0)
    k = RecordingKernel()
    with pytest.raises(Stop):
        DS.set_carveout(k, (np.zeros(2, np.float32),), 100)
    with pytest.raises(Stop):
        DS.DynShared(k, 64 * 1024)[1, 32, 0](np.zeros(2, np.float32))
    monkeypatch.setattr(DS, "SIMULATOR", True)      # no attributes: straight to the launch
    DS.DynShared(k, 64 * 1024)[1, 32, 0](np.zeros(2, np.float32))
    assert seen == [("compile", True), ("compile", True), ("launch", True)], seen
    assert not _compat._contract_off()
