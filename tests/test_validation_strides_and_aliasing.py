"""Negative device strides and aliased buffers: each argument here was accepted (and
launched on) before its check existed.

* Device arrays with a negative stride where the call copies them to the host for its range
  or value checks (block_table, seq_lens, row_lengths, cu_seqlens, state_indices, the GDN
  states) or for its results (a device ``out``): numba's ``copy_to_host`` raises
  ``NotImplementedError`` for negative strides on a GPU (numba-cuda 0.30.4's
  ``DeviceNDArray.copy_to_host``; read, not yet run), so the check itself would crash there
  instead of naming the argument (the simulator copies them, so the call launched). They
  are refused by name, as q, k, v, g, beta and the caches already were (README: "Strided
  device arrays (non-negative strides)").
* A workspace's split records (or the output slot it lends) sharing device memory with an
  input: the split kernel overwrote the caller's input while reading it.
* A numpy GDN ``out`` sharing memory with a numpy ``state_cache``: ``results()`` wrote one
  over the other (the device form was already refused).
"""
import numpy as np
import pytest

import dflash2_numba as d2
import oracle
from dflash2_numba import _registry
from dflash2_numba._compat import SIMULATOR, cuda
from dflash2_numba.contract import SENTINEL
from dflash2_numba.gdn import gdn_prefill
from tests.attention_helpers import tiny_case

S = 2


def _reversed_on_device(a: np.ndarray, axis: int = 0):
    """``a`` as a device view with a negative stride on ``axis`` (same values), cut from a
    positive-stride device copy that :func:`_device_bytes` reads (numba cannot copy a
    negative-stride view to the host on a GPU)."""
    base = cuda.to_device(np.ascontiguousarray(np.flip(a, axis)))
    view = base[(slice(None),) * axis + (slice(None, None, -1),)]
    assert view.strides[axis] < 0
    view.test_base = base          # the positive-stride array the view was cut from
    return view


def _size1_negative(a: np.ndarray):
    """``a`` (first dim 1) as a device view whose size-1 first axis has a negative stride:
    C-contiguous by numpy's rule, but numba cannot copy it to the host on a GPU. Built from
    strides on a GPU (numba's slicing of a reversed view there gave a size-0 axis, session
    39), by slicing on the simulator."""
    two = np.concatenate([np.zeros_like(a), a])
    base = cuda.to_device(two)
    if SIMULATOR:
        view = base[::-1][:1]
    else:
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        row = two[0].nbytes                     # element [0] of the view: two[1], i.e. a
        view = DeviceNDArray(shape=a.shape, strides=(-row,) + two.strides[1:], dtype=a.dtype,
                             gpu_data=base.gpu_data.view(row))
    assert view.shape == a.shape and view.strides[0] < 0
    view.test_base = base
    return view


def _device_bytes(arr) -> bytes:
    """The bytes of ``arr`` (a negative-stride view: of the device array it was cut from)."""
    if not hasattr(arr, "copy_to_host"):
        return np.array(arr).tobytes()
    return getattr(arr, "test_base", arr).copy_to_host().tobytes()


def _ws():
    ws = d2.AttentionWorkspace(batch=1, q_len=2, heads=1, head_dim=64, splits=S)
    return ws.fill_sentinel()


def _ws_untouched(ws):
    return (ws.guards_intact() and (ws.partial.copy_to_host() == SENTINEL).all()
            and (ws.lse.copy_to_host() == SENTINEL).all()
            and (ws.out.copy_to_host() == SENTINEL).all())


def _attention_refused(name, **changes):
    args = dict(tiny_case(), splits=S, **changes)
    ws = args.setdefault("workspace", _ws())
    d2.route_counters(reset=True)
    with pytest.raises(ValueError) as info:
        d2.verify_attention(**args)
    assert str(info.value).startswith(f"{name}:"), str(info.value)
    assert d2.route_counters() == {}, "a kernel was launched"
    assert ws is None or _ws_untouched(ws)
    return str(info.value)


ATT_NEGATIVE = [
    ("block_table", lambda c: dict(block_table=_reversed_on_device(c["block_table"], axis=1))),
    ("seq_lens", lambda c: dict(seq_lens=_size1_negative(c["seq_lens"]))),
    ("row_lengths", lambda c: dict(row_lengths=_reversed_on_device(
        np.array([[5, 6]], np.int32), axis=1))),
    ("out", lambda c: dict(out=_size1_negative(np.full((1, 2, 1, 64), 7, np.float16)),
                           workspace=None)),
]


@pytest.mark.parametrize("name,change", ATT_NEGATIVE, ids=[a[0] for a in ATT_NEGATIVE])
def test_attention_refuses_negative_stride_device_arrays(name, change):
    kw = change(tiny_case())
    arr = kw[name]
    assert any(s < 0 for s in arr.strides)
    before = _device_bytes(arr)
    msg = _attention_refused(name, **kw)
    assert "negative strides" in msg
    assert _device_bytes(arr) == before


def test_attention_positive_strided_index_arrays_still_run():
    """Positive-stride device index arrays are read in place, as before (no regression)."""
    c = tiny_case()
    want = d2.verify_attention(**c, splits=S).out
    wide = np.full((1, 2 * c["block_table"].shape[1]), 99, np.int32)
    wide[:, ::2] = c["block_table"]
    got = d2.verify_attention(**dict(c, block_table=cuda.to_device(wide)[:, ::2]), splits=S).out
    assert got.tobytes() == want.tobytes()
    # numpy index arrays of any layout are copied compactly: negative strides still run
    rev = np.ascontiguousarray(c["block_table"][:, ::-1])[:, ::-1]
    assert rev.strides[1] < 0
    got = d2.verify_attention(**dict(c, block_table=rev), splits=S).out
    assert got.tobytes() == want.tobytes()


def _gdn(T=4):
    return oracle.random_gdn_case(np.random.default_rng(0), B=1, T=T, H=1, HV=1, K=32, V=32,
                                  dtype=np.float32, with_state=False)


CU = np.array([0, 1, 4], np.int32)


def _gdn_refused(name, case, watch=()):
    before = [_device_bytes(a) for a in watch]
    _registry.route_counters(reset=True)
    with pytest.raises(ValueError) as info:
        gdn_prefill(**case)
    assert str(info.value).startswith(f"{name}:"), str(info.value)
    assert _registry.route_counters() == {}
    after = [_device_bytes(a) for a in watch]
    assert after == before
    return str(info.value)


def test_gdn_refuses_negative_stride_cu_seqlens():
    cu = _reversed_on_device(CU)
    msg = _gdn_refused("cu_seqlens", dict(_gdn(), cu_seqlens=cu))
    assert "negative strides" in msg


def test_gdn_refuses_negative_stride_state_indices():
    cache = np.full((3, 1, 32, 32), SENTINEL, np.float32)
    cache[[0, 1]] = 0.0
    idx = _reversed_on_device(np.array([0, 1], np.int32))
    msg = _gdn_refused("state_indices", dict(_gdn(), cu_seqlens=CU, state_cache=cache,
                                             state_indices=idx), watch=(cache,))
    assert "negative strides" in msg


def test_gdn_refuses_negative_stride_states():
    msg = _gdn_refused("initial_state",
                       dict(_gdn(), initial_state=_size1_negative(np.zeros((1, 1, 32, 32),
                                                                           np.float32))))
    assert "negative strides" in msg
    cache = _size1_negative(np.zeros((1, 1, 32, 32), np.float32))
    msg = _gdn_refused("state_cache", dict(_gdn(), state_cache=cache,
                                           state_indices=np.zeros(1, np.int32)), watch=(cache,))
    assert "negative strides" in msg


def test_gdn_refuses_negative_stride_device_out():
    out = _size1_negative(np.full((1, 4, 1, 32), SENTINEL, np.float32))
    msg = _gdn_refused("out", dict(_gdn(), out=out), watch=(out,))
    assert "negative strides" in msg


@pytest.mark.parametrize("record,numpy_out", [("partial", False), ("lse", False), ("out", False),
                                              ("out", True)])
def test_workspace_sharing_memory_with_q_is_refused(record, numpy_out):
    """q read from the workspace's own memory: the kernels would write over the caller's q
    while reading it (before: launched, q overwritten). Refused naming the workspace buffer
    and q; nothing is written. The out slot is the combine's output with a numpy ``out``
    too (the numpy array receives a copy of it)."""
    c = tiny_case()
    splits = 16                                                # lse: 64 words, q's size
    ws = d2.AttentionWorkspace(batch=1, q_len=2, heads=1, head_dim=64, splits=splits,
                               out_dtype="float32")
    ws.fill_sentinel()
    buf = getattr(ws, record).reshape(-1)
    n32 = c["q"].size // 2                                     # q's bytes in float32 words
    buf[:n32].copy_to_device(np.ascontiguousarray(c["q"]).reshape(-1).view(np.float32))
    q_view = buf[:n32].view(np.float16).reshape(c["q"].shape)
    before = ws.partial.copy_to_host(), ws.lse.copy_to_host(), ws.out.copy_to_host()
    d2.route_counters(reset=True)
    host_out = np.full(c["q"].shape, SENTINEL, np.float32) if numpy_out else None
    with pytest.raises(ValueError, match=rf"^workspace\.{record}: overlaps q in device memory"):
        d2.verify_attention(**dict(c, q=q_view), splits=splits, workspace=ws, out_dtype="float32",
                            out=host_out)
    assert d2.route_counters() == {}
    assert host_out is None or (host_out == SENTINEL).all()
    after = ws.partial.copy_to_host(), ws.lse.copy_to_host(), ws.out.copy_to_host()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(after, before)) and ws.guards_intact()


def test_workspace_out_slot_not_used_is_not_checked():
    """The workspace's out slot is only the output when no device ``out`` is given and its
    dtype matches: q held there with a float16 call into a float32 workspace is read only,
    and runs."""
    c = tiny_case()
    ws = d2.AttentionWorkspace(batch=1, q_len=2, heads=1, head_dim=64, splits=S,
                               out_dtype="float32")
    ws.fill_sentinel()
    buf = ws.out.reshape(-1)
    n32 = c["q"].size // 2
    buf[:n32].copy_to_device(np.ascontiguousarray(c["q"]).reshape(-1).view(np.float32))
    q_view = buf[:n32].view(np.float16).reshape(c["q"].shape)
    want = d2.verify_attention(**c, splits=S).out
    got = d2.verify_attention(**dict(c, q=q_view), splits=S, workspace=ws).out
    assert got.copy_to_host().tobytes() == want.tobytes()


def test_gdn_numpy_out_sharing_memory_with_numpy_state_cache_is_refused():
    """Before: accepted, and results() wrote the cache rows over ``out`` (a wrong ``o``)."""
    buf = np.zeros((3, 1, 32, 32), np.float32)
    out = buf.reshape(-1)[:128].reshape(1, 4, 1, 32)          # inside slot 0
    before = buf.copy()
    with pytest.raises(ValueError, match=r"^out: overlaps state_cache in memory"):
        gdn_prefill(**_gdn(), cu_seqlens=CU, state_cache=buf,
                    state_indices=np.array([0, 1], np.int32), out=out)
    assert buf.tobytes() == before.tobytes()
    # separate buffers still run, and give the bytes of a call without ``out``
    cache = np.zeros((3, 1, 32, 32), np.float32)
    o_ref, _ = gdn_prefill(**_gdn(), cu_seqlens=CU, state_cache=cache.copy(),
                           state_indices=np.array([0, 1], np.int32))
    out = np.full((1, 4, 1, 32), SENTINEL, np.float32)
    o, _ = gdn_prefill(**_gdn(), cu_seqlens=CU, state_cache=cache,
                       state_indices=np.array([0, 1], np.int32), out=out)
    assert o is out and out.tobytes() == o_ref.tobytes()


OVERLAP_LAYOUTS = [
    # (id, shape, byte strides, itemsize, elements share memory)
    ("contiguous", (3, 2, 4), (32, 16, 4), 4, False),
    ("transposed", (4, 2, 3), (4, 16, 32), 4, False),
    ("sliced-step", (3, 2), (64, 8), 4, False),
    ("reversed", (3, 4), (-16, 4), 4, False),
    ("broadcast", (3, 2, 4), (0, 16, 4), 4, True),
    ("size-one-zero-stride", (1, 2, 4), (0, 16, 4), 4, False),
    ("folded", (3, 2), (4, 8), 4, True),                 # offsets 0 8 4 12 8 16: 8 twice
    ("nested-with-gaps", (2, 2), (12, 8), 4, False),      # offsets 0 8 12 20
    ("interleaved-disjoint", (3, 2), (8, 12), 4, False),  # 0 8 16 and 12 20 28: not nested
    ("partial-overlap", (2, 3), (8, 4), 4, True),         # rows [0, 12) and [8, 20)
    ("empty", (0, 3), (0, 0), 4, False),
]


@pytest.mark.parametrize("shape,strides,itemsize,want", [o[1:] for o in OVERLAP_LAYOUTS],
                         ids=[o[0] for o in OVERLAP_LAYOUTS])
def test_elements_overlap_of_layouts(shape, strides, itemsize, want):
    from dflash2_numba._arrays import elements_overlap

    assert elements_overlap(shape, strides, itemsize) is want


def test_elements_overlap_past_the_exact_limit_is_taken_as_overlap(monkeypatch):
    """A layout that is not nested is decided from its offsets only up to a size; past it
    the check refuses rather than read a huge offset table."""
    from dflash2_numba import _arrays

    monkeypatch.setattr(_arrays, "_OVERLAP_EXACT_LIMIT", 3)
    assert _arrays.elements_overlap((3, 2), (8, 12), 4)
    assert not _arrays.elements_overlap((3, 2, 4), (32, 16, 4), 4)     # nested: no limit


def test_gdn_numpy_state_cache_with_shared_elements_is_refused():
    """Before: a numpy cache whose slots were one memory (``as_strided`` with a zero slot
    stride) was taken, and the write-back left slot 0 holding sequence 1's state. Now
    refused by name, nothing written; an interleaved cache whose elements are disjoint (not
    a nested layout) still runs and gives the bytes of a plain one."""
    buf = np.zeros((1, 32, 32), np.float32)
    shared = np.lib.stride_tricks.as_strided(buf, (2, 1, 32, 32), (0,) + buf.strides,
                                             writeable=True)
    with pytest.raises(ValueError, match=r"^state_cache: elements share memory"):
        gdn_prefill(**_gdn(), cu_seqlens=CU, state_cache=shared,
                    state_indices=np.array([0, 1], np.int32))
    assert not buf.any()
    plain = np.zeros((2, 1, 32, 32), np.float32)
    _, want = gdn_prefill(**_gdn(), cu_seqlens=CU, state_cache=plain,
                          state_indices=np.array([0, 1], np.int32))
    # slots interleaved with V: V stride 8 bytes, slot stride 12 (inside a row's span, so
    # not nested; the slots' offsets differ mod 8, so disjoint)
    store = np.zeros(32 * 66, np.float32)
    inter = np.lib.stride_tricks.as_strided(store, (2, 1, 32, 32), (12, 0, 264, 8),
                                            writeable=True)
    from dflash2_numba._arrays import elements_overlap

    assert not elements_overlap(inter.shape, inter.strides, 4)
    _, got = gdn_prefill(**_gdn(), cu_seqlens=CU, state_cache=inter,
                         state_indices=np.array([0, 1], np.int32))
    assert got is inter and np.ascontiguousarray(inter).tobytes() == want.tobytes()
