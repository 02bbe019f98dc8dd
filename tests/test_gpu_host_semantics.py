"""Host-side behaviour where numba-cuda on a GPU differs from its simulator (an audit of
every numba.cuda host API the package calls, from numba-cuda 0.30.4's source; the GPU side
was read, not yet run):

* Layout typing. numba types a device array with a zero stride as layout "A" even when
  that axis has size 1 (``cudadrv/dummyarray.py`` ``_compute_layout``: "If this is a
  broadcast array then it is not contiguous"), while numpy (and the simulator's views)
  call it C-contiguous. ``x[None]`` and ``np.broadcast_to`` make such arrays, and
  ``np.ascontiguousarray`` keeps the zero stride, as does ``cuda.to_device`` (it copies
  the strides). The flat-input GDN variants' ``view`` intrinsic types only layout "C", so on
  a GPU ``gdn_prefill(q[None], ...)`` would fail at kernel typing (a numba TypingError after
  every check) where the simulator ran it. Numpy inputs are now copied with canonical
  strides; a device input with a zero stride is refused by name for those variants; the
  simulator's ``view`` applies numba's rule, so the simulator fails as the GPU would.
* Raw stream handles. On a GPU ``cuda.external_stream`` builds ``CUstream(handle)``, which
  raises ``OverflowError`` for a negative handle or one of 2**64 or more; the simulator
  raises its ``RuntimeError`` for every handle. Such handles are refused naming ``stream``.
* Stream ordering. On a GPU a copy on the legacy default stream is not ordered after work
  on a non-blocking stream (torch's and CuPy's streams are), unlike the simulator, where
  everything is synchronous. ``AttentionPlan.check_inputs`` copied the plan's own uploads
  (made on the plan's stream) on the default stream, and ``AttentionWorkspace.guards_intact``
  read the guards without waiting for launches on the caller's stream.
"""
import numpy as np
import pytest

import dflash2_numba as d2
from dflash2_numba import _arrays as A
from dflash2_numba import _registry
from dflash2_numba._compat import cuda
from tests.attention_helpers import tiny_case

FLAT = [n for n, v in _registry.variants("gdn").items() if v.flat_inputs]


def _numba_gpu_dummyarray():
    """numba-cuda's own (GPU-side) ``cudadrv/dummyarray.py``, which decides the layout numba
    types a device array with; the simulator replaces that module, so it is loaded by path."""
    import importlib.util
    import os

    import numba_cuda

    path = os.path.join(os.path.dirname(numba_cuda.__file__), "numba", "cuda", "cudadrv",
                        "dummyarray.py")
    spec = importlib.util.spec_from_file_location("_numba_gpu_dummyarray", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _numba_layout_is_c(arr) -> bool:
    """numba's own verdict: would a device array of this shape and strides be layout "C"."""
    dummy = _numba_gpu_dummyarray().Array
    return dummy.from_desc(0, tuple(arr.shape), tuple(arr.strides), arr.dtype.itemsize).is_c_contig


def _gdn3(T=8, H=1, K=32):
    rng = np.random.default_rng(3)
    q = rng.standard_normal((T, H, K)).astype(np.float32)
    k = rng.standard_normal((T, H, K)).astype(np.float32)
    v = rng.standard_normal((T, H, K)).astype(np.float32)
    g = -np.abs(rng.standard_normal((T, H))).astype(np.float32)
    beta = rng.random((T, H)).astype(np.float32)
    return dict(q=q, k=k, v=v, g=g, beta=beta)


def test_zero_stride_size1_axis_is_not_numba_c_layout():
    a = np.zeros((3, 2, 4), np.float32)
    assert a[None].strides[0] == 0 and a[None].flags.c_contiguous
    assert np.ascontiguousarray(a[None]).strides[0] == 0     # numpy keeps it
    assert not _numba_layout_is_c(a[None]) and _numba_layout_is_c(a)
    assert cuda.to_device(a[None]).strides[0] == 0            # so does the device copy
    # the package's rule is numba's, on the cases that matter here
    d = cuda.to_device(a)
    # (a numba device array takes no None index on a GPU: the new axis comes from numpy's
    # strides, which the device copy keeps, as asserted above)
    cases = (d, cuda.to_device(a[None]), d[:, :1], d[:, ::2],
             cuda.to_device(np.zeros((0, 3), np.float32)[None]))
    verdicts = []
    for dev in cases:
        arg = A.as_array_arg(dev, "x")
        verdicts.append(_numba_layout_is_c(arg))
        assert A.is_numba_c_layout(arg) == verdicts[-1], (arg.shape, arg.strides)
    assert verdicts == [True, False, False, False, True]    # d[:, :1] keeps gaps between rows


@pytest.mark.parametrize("variant", FLAT)
def test_flat_variants_take_numpy_inputs_with_a_new_axis(variant):
    """``q[None]`` (stride 0 on the batch axis) and so on: what the GPU typed as layout "A"."""
    c = _gdn3()
    seen = []
    orig = _registry.launch

    def spy(name, kernel, grid, block, stream, *args):
        seen.extend(a for a in args if hasattr(a, "strides") and len(a.shape) >= 3)
        return orig(name, kernel, grid, block, stream, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_registry, "launch", spy)
        o, h = d2.gdn_prefill(**{k: x[None] for k, x in c.items()}, variant=variant)
    assert seen and all(_numba_layout_is_c(a) for a in seen), [a.strides for a in seen]
    o_ref, h_ref = d2.gdn_prefill(**{k: np.ascontiguousarray(x[None]).copy() for k, x in c.items()},
                                  variant=variant)
    assert o.tobytes() == o_ref.tobytes() and h.tobytes() == h_ref.tobytes()


@pytest.mark.parametrize("name", ["q", "g"])
def test_flat_variant_refuses_zero_stride_device_input_by_name(name):
    c = {k: cuda.to_device(x[None].copy()) for k, x in _gdn3().items()}
    c[name] = cuda.to_device(_gdn3()[name][None])             # numpy's stride 0 kept
    assert c[name].strides[0] == 0
    with pytest.raises(ValueError, match=rf"^{name}: variant 'chunked_split'"):
        d2.gdn_prefill(**c, variant="chunked_split")


def test_chunked_still_reads_zero_stride_device_inputs():
    """``chunked`` reads strided device arrays (layout "A" is fine for it)."""
    c = _gdn3()
    dev = {k: cuda.to_device(x[None]) for k, x in c.items()}
    o, h = d2.gdn_prefill(**dev, variant="chunked")
    o_ref, h_ref = d2.gdn_prefill(**{k: x[None].copy() for k, x in c.items()}, variant="chunked")
    assert o.copy_to_host().tobytes() == o_ref.tobytes()
    assert h.copy_to_host().tobytes() == h_ref.tobytes()


def test_check_inputs_copies_on_the_plan_stream_and_waits(monkeypatch):
    """The plan uploads its numpy inputs on its stream; the re-check must read them there
    (a default-stream copy would not wait for a non-blocking stream's upload on a GPU)."""
    s = cuda.stream()
    plan = d2.plan_attention(**tiny_case(), splits=2, stream=s)
    fake = type(plan.q)
    copies, syncs = [], []
    orig_copy = fake.copy_to_host

    def copy_to_host(self, ary=None, stream=0):
        copies.append(stream)
        return orig_copy(self, ary, stream=stream)

    monkeypatch.setattr(fake, "copy_to_host", copy_to_host)
    monkeypatch.setattr(type(s), "synchronize", lambda self: syncs.append(self))
    plan.check_inputs()
    assert copies and all(st is s for st in copies), copies
    assert len(syncs) == len(copies)


def test_guards_intact_waits_for_every_stream(monkeypatch):
    """``plan.launch(stream); ws.guards_intact()`` (README): the launches may be on a
    non-blocking stream, which a default-stream copy would not wait for on a GPU."""
    ws = d2.AttentionWorkspace(batch=1, q_len=2, heads=1, head_dim=64, splits=2).fill_sentinel()
    events = []
    fake = type(ws.out)
    orig_copy = fake.copy_to_host
    monkeypatch.setattr(cuda, "synchronize", lambda: events.append("sync"))
    monkeypatch.setattr(fake, "copy_to_host",
                        lambda self, ary=None, stream=0: events.append("copy") or orig_copy(self, ary, stream))
    assert ws.guards_intact()
    assert events and events[0] == "sync"
    assert all(events[i - 1] == "sync" for i, e in enumerate(events) if e == "copy")


@pytest.mark.parametrize("handle", [-1, 2 ** 64])
def test_out_of_range_raw_stream_handle_is_refused_by_name(handle, monkeypatch):
    def gpu_like(ptr):            # what cuda.bindings' CUstream(ptr) does on a GPU
        if ptr < 0 or ptr >= 2 ** 64:
            raise OverflowError("can't convert to unsigned PY_LONG_LONG")
        return object()

    monkeypatch.setattr(cuda, "external_stream", gpu_like)
    with pytest.raises(ValueError, match=r"^stream: "):
        d2.verify_attention(**tiny_case(), splits=2, stream=handle)
