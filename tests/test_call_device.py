"""One device a call (``dflash2_numba._devices``), on the simulator with the driver's answer
replaced: which device each argument's memory is on is what ``pointer_device`` says.

* arrays of one call on two devices: ``ValueError`` naming the first argument on another
  device than the first one's, before any launch, caller buffers untouched (attention:
  an input, ``out``, the workspace; GDN: an input, ``state_cache``, ``out``);
* every array on one device: the plan runs on it (its construction, launch and results
  under ``on_device`` of that device) and gives the bits of a plain call;
* numpy, None, empty and unreadable arguments are skipped (the argument checks name the
  unreadable ones in their own words).

The real driver query, real streams of another device and two real devices are covered by
``tests/test_call_device_gpu.py``.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import dflash2_numba as d2
import oracle
from dflash2_numba import _devices
from dflash2_numba._arrays import device_span
from dflash2_numba._compat import SIMULATOR, cuda
from dflash2_numba.contract import SENTINEL
from tests.array_helpers import device_copies
from tests.attention_helpers import tiny_case

pytestmark = pytest.mark.skipif(not SIMULATOR, reason="the driver's answer is replaced here")


class FakeDevices:
    """``pointer_device`` answering from a table of device arrays -> ordinal (every other
    device pointer: device 0), and ``on_device`` recording the devices it is entered with."""

    def __init__(self):
        self.placed = []         # (device array, ordinal)
        self.entered = []

    def place(self, arr, ordinal):
        self.placed.append((device_span(arr), ordinal))
        return arr

    def pointer_device(self, ptr, name):
        for (lo, hi), ordinal in self.placed:
            if lo <= ptr < hi:
                return ordinal
        return 0

    @contextlib.contextmanager
    def on_device(self, dev):
        self.entered.append(dev)
        yield


@pytest.fixture
def fake(monkeypatch):
    f = FakeDevices()
    monkeypatch.setattr(_devices, "SIMULATOR", False)
    monkeypatch.setattr(_devices, "pointer_device", f.pointer_device)
    monkeypatch.setattr(_devices, "on_device", f.on_device)
    monkeypatch.setattr(_devices, "current_device", lambda: 0)
    monkeypatch.setattr(_devices, "check_stream", lambda strm, dev: None)
    return f


# --- call_device itself -----------------------------------------------------------------

def test_call_device_is_the_first_device_argument_s(fake):
    a, b = cuda.to_device(np.zeros(4, np.float32)), cuda.to_device(np.zeros(3, np.int32))
    fake.place(a, 2)
    fake.place(b, 2)
    named = [("x", np.zeros(2)), ("y", None), ("a", a), ("b", b),
             ("empty", cuda.device_array(0, np.float32)), ("junk", object())]
    assert _devices.call_device(named) == 2
    assert _devices.call_device([("x", np.zeros(2)), ("y", None)]) is None


def test_call_device_names_the_argument_on_another_device(fake):
    a, b, c = (cuda.to_device(np.zeros(4, np.float32)) for _ in range(3))
    fake.place(b, 1)
    with pytest.raises(ValueError, match=r"^b: on CUDA device 1, while a is on device 0; "
                                         r"every array of one call must be on one device"):
        _devices.call_device([("a", a), ("b", b), ("c", c)])


def test_the_simulator_checks_nothing():
    a = cuda.to_device(np.zeros(4, np.float32))
    assert _devices.call_device([("a", a)]) is None
    assert _devices.current_device() is None
    with _devices.on_device(3):          # (no device 3 exists: nothing is switched)
        pass
    _devices.check_stream(cuda.stream(), 3)


# --- attention ------------------------------------------------------------------------

def _workspace():
    ws = d2.AttentionWorkspace(batch=1, q_len=2, heads=1, head_dim=64, splits=4)
    return ws.fill_sentinel()


def _untouched(ws):
    for buf in (ws.partial, ws.lse, ws.out):
        assert np.all(buf.copy_to_host() == SENTINEL)
    assert ws.guards_intact()


@pytest.mark.parametrize("moved", ["k_cache", "seq_lens", "out", "workspace"])
def test_attention_arrays_on_two_devices_are_refused_naming_one(fake, moved):
    args = device_copies(tiny_case())
    ws = _workspace()
    out = cuda.to_device(np.full((1, 2, 1, 64), 7, np.float16))
    fake.place({"out": out, "workspace": ws.partial}.get(moved, args.get(moved)), 1)
    d2.route_counters(reset=True)
    with pytest.raises(ValueError, match=rf"^{moved}: on CUDA device 1, while q is on device 0"):
        d2.verify_attention(**args, splits=4, out=out, workspace=ws)
    assert d2.route_counters() == {}, "a kernel was launched"
    _untouched(ws)
    assert np.all(out.copy_to_host() == 7)


def test_attention_runs_on_the_arrays_device(fake):
    """Every array on device 1: the plan is made, launched and read there, with the bits
    of the same call where no device is switched."""
    host = tiny_case()
    want = d2.verify_attention(**host, splits=4)
    fake.entered.clear()         # (numpy only: run on the current device)
    args = device_copies(host)
    for v in args.values():
        if hasattr(v, "copy_to_host"):
            fake.place(v, 1)
    plan = d2.plan_attention(**args, splits=4)
    assert plan.device == 1 and fake.entered == [1]
    plan.launch()
    res = plan.results()
    assert fake.entered == [1, 1, 1]
    assert res.out.copy_to_host().tobytes() == want.out.tobytes()
    # (six keys: one active split; the others are never written)
    for got, ref in ((res.partial, want.partial), (res.lse, want.lse)):
        assert got.copy_to_host()[:, :1].tobytes() == ref[:, :1].tobytes()


def test_numpy_only_attention_runs_on_the_current_device(fake):
    plan = d2.plan_attention(**tiny_case(), splits=4)
    assert plan.device == 0 and fake.entered == [None]


# --- GDN ------------------------------------------------------------------------------

def _gdn_case():
    rng = np.random.default_rng(5)
    c = oracle.random_gdn_case(rng, B=1, T=3, H=1, HV=1, K=32, V=32, with_state=False)
    return {k: v for k, v in c.items() if k in ("q", "k", "v", "g", "beta")}


@pytest.mark.parametrize("moved", ["beta", "state_cache", "state_indices", "out"])
def test_gdn_arrays_on_two_devices_are_refused_naming_one(fake, moved):
    args = device_copies(_gdn_case())
    cache = cuda.to_device(np.full((2, 1, 32, 32), 3.0, np.float32))
    idx = cuda.to_device(np.array([1], np.int32))
    out = cuda.to_device(np.full((1, 3, 1, 32), 7, np.float32))
    fake.place({"state_cache": cache, "state_indices": idx, "out": out}.get(moved, args.get(moved)), 1)
    d2.route_counters(reset=True)
    with pytest.raises(ValueError, match=rf"^{moved}: on CUDA device 1, while q is on device 0"):
        d2.gdn_prefill(**args, state_cache=cache, state_indices=idx, out=out)
    assert d2.route_counters() == {}, "a kernel was launched"
    assert np.all(cache.copy_to_host() == 3.0) and np.all(out.copy_to_host() == 7)


def test_gdn_runs_on_the_arrays_device(fake):
    host = _gdn_case()
    want_o, want_h = d2.gdn_prefill(**host)
    fake.entered.clear()         # (numpy only: run on the current device)
    args = device_copies(host)
    for v in args.values():
        fake.place(v, 1)
    call = d2.plan_gdn(**args)
    assert call.device == 1 and fake.entered == [1]
    call.launch()
    o, h = call.results()
    assert fake.entered == [1, 1, 1]
    assert o.copy_to_host().tobytes() == want_o.tobytes()
    assert h.copy_to_host().tobytes() == want_h.tobytes()


def test_a_workspace_keeps_its_device_for_its_own_copies(fake):
    ws = _workspace()                    # built with device 0 current (the fake's answer)
    assert ws.device == 0
    fake.entered.clear()
    ws.fill_sentinel()
    assert ws.guards_intact()
    assert fake.entered and set(fake.entered) == {0}


def test_a_launch_stream_is_checked_once_per_stream_object(fake, monkeypatch):
    """``launch(stream)`` checks that the stream is one of the plan's device (a refused one
    launches nothing), once per stream object: a replayed launch pays it once."""
    seen = []

    def check_stream(strm, dev):
        seen.append((strm, dev))
        if getattr(strm, "foreign", False):
            raise ValueError("stream: not a stream of CUDA device 0")

    monkeypatch.setattr(_devices, "check_stream", check_stream)

    for plan in (d2.plan_attention(**tiny_case(), splits=4), d2.plan_gdn(**_gdn_case())):
        seen.clear()
        s1, s2 = cuda.stream(), cuda.stream()
        for s in (s1, s1, s1, s2, s2):
            plan.launch(s)
        assert [x[0] for x in seen] == [s1, s2] and {x[1] for x in seen} == {0}
        d2.route_counters(reset=True)
        with pytest.raises(ValueError, match="^stream: not a stream of CUDA device 0"):
            foreign = cuda.stream()
            foreign.foreign = True
            plan.launch(foreign)
        assert d2.route_counters() == {}, "a kernel was launched"
