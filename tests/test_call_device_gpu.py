"""One device a call, on real GPUs (``dflash2_numba._devices``). Marked ``gpu``.

One GPU: the driver's answer for device memory, a pointer the driver does not know refused
by name before any launch, torch inputs planned on their device.

Two GPUs or more (skipped otherwise): torch tensors on ``cuda:1`` while device 0 is current
give the bits of the same call on ``cuda:0``, results on ``cuda:1`` (attention: frozen and
``tiled_perm``, whose kernels opt in to more than 48 KB of dynamic shared memory on each
device; GDN: ``chunked`` and ``chunked_ahead``), a CUDA graph captured there replays them;
arrays on two devices, a stream of the other device and a workspace built on the other
device are refused by name, nothing written.
"""
from __future__ import annotations

import numpy as np
import pytest

import oracle
from dflash2_numba.contract import SENTINEL, active_splits
from tests.missing_tools import module

pytestmark = pytest.mark.gpu


def _d2():
    import dflash2_numba as d2

    return d2


def _attention_case():
    rng = np.random.default_rng(11)
    return oracle.random_attention_case(rng, B=2, Q=8, Hq=6, Hkv=1, D=256, page_size=64,
                                        seq_lens=[3000, 700], strided=False)


def _gdn_case():
    rng = np.random.default_rng(12)
    return oracle.random_gdn_case(rng, B=1, T=300, H=2, HV=4, K=128, V=128, dtype=np.float16,
                                  with_state=True)


def _torch_on(case, index):
    torch = module("torch")
    return {k: (torch.from_numpy(np.ascontiguousarray(v)).to(f"cuda:{index}")
                if isinstance(v, np.ndarray) else v) for k, v in case.items()}


class _HostPointer:
    """A ``__cuda_array_interface__`` over host memory the driver was never told of."""

    def __init__(self, host: np.ndarray):
        self._host = host
        self.__cuda_array_interface__ = {
            "shape": host.shape, "typestr": host.dtype.str, "strides": None,
            "data": (host.ctypes.data, False), "version": 3}


# --- one GPU ----------------------------------------------------------------------------

def test_the_driver_names_the_device_of_device_memory():
    from numba import cuda

    from dflash2_numba import _devices

    a = cuda.to_device(np.zeros(16, np.float32))
    ptr = a.__cuda_array_interface__["data"][0]
    assert _devices.pointer_device(ptr, "a") == cuda.get_current_device().id
    assert _devices.call_device([("x", np.zeros(2)), ("a", a)]) == cuda.get_current_device().id


def test_a_pointer_the_driver_does_not_know_is_refused_by_name():
    d2 = _d2()
    c = _attention_case()
    ws = d2.AttentionWorkspace(batch=2, q_len=8, heads=6, head_dim=256, splits=80).fill_sentinel()
    d2.route_counters(reset=True)
    with pytest.raises(ValueError, match=r"^k_cache: its data pointer 0x[0-9a-f]+ is no memory "
                                         r"the CUDA driver knows"):
        d2.verify_attention(**dict(c, k_cache=_HostPointer(np.ascontiguousarray(c["k_cache"]))),
                            workspace=ws)
    assert d2.route_counters() == {}, "a kernel was launched"
    assert np.all(ws.partial.copy_to_host() == SENTINEL) and ws.guards_intact()


def test_torch_inputs_are_planned_on_their_device():
    torch = module("torch")
    d2 = _d2()
    c = _attention_case()
    plan = d2.plan_attention(**_torch_on(c, 0))
    assert plan.device == 0
    plan.launch()
    res = plan.results()
    assert res.out.device == torch.device("cuda", 0)
    assert res.out.cpu().numpy().tobytes() == d2.verify_attention(**c).out.tobytes()


# --- two GPUs ---------------------------------------------------------------------------

def _two_gpus():
    from numba import cuda

    if len(cuda.gpus) < 2:
        pytest.skip("needs two GPUs")
    torch = module("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("torch sees fewer than two GPUs")
    torch.cuda.set_device(0)
    return torch


@pytest.mark.parametrize("variant", ["frozen", "tiled_perm"])
def test_attention_on_the_second_gpu_matches_the_first(variant):
    torch = _two_gpus()
    d2 = _d2()
    c = _attention_case()
    on0 = d2.verify_attention(**_torch_on(c, 0), variant=variant)
    on1 = d2.verify_attention(**_torch_on(c, 1), variant=variant)
    assert torch.cuda.current_device() == 0
    for got in (on1.out, on1.partial, on1.lse):
        assert got.device == torch.device("cuda", 1)
    assert on1.out.cpu().numpy().tobytes() == on0.out.cpu().numpy().tobytes()
    # the split records of the active splits (the others are fresh memory, never written)
    for b, T in enumerate(c["seq_lens"]):
        A = active_splits(int(T), 80)
        for got, want in ((on1.partial, on0.partial), (on1.lse, on0.lse)):
            assert got[b, :A].cpu().numpy().tobytes() == want[b, :A].cpu().numpy().tobytes()


@pytest.mark.parametrize("variant", ["chunked", "chunked_ahead"])
def test_gdn_on_the_second_gpu_matches_the_first(variant):
    torch = _two_gpus()
    d2 = _d2()
    c = _gdn_case()
    o0, h0 = d2.gdn_prefill(**_torch_on(c, 0), variant=variant)
    o1, h1 = d2.gdn_prefill(**_torch_on(c, 1), variant=variant)
    assert o1.device == h1.device == torch.device("cuda", 1)
    assert o1.cpu().numpy().tobytes() == o0.cpu().numpy().tobytes()
    assert h1.cpu().numpy().tobytes() == h0.cpu().numpy().tobytes()


def test_a_graph_captured_on_the_second_gpu_replays():
    torch = _two_gpus()
    d2 = _d2()
    from numba import cuda

    c = _attention_case()
    want = d2.verify_attention(**c).out
    t1 = _torch_on(c, 1)
    out = torch.full((2, 8, 6, 256), 7, dtype=torch.float16, device="cuda:1")
    plan = d2.plan_attention(**t1, out=out)
    with torch.cuda.device(1):
        s = torch.cuda.Stream()
        plan.launch(cuda.external_stream(s.cuda_stream))    # (warm-up outside the capture)
        torch.cuda.synchronize()
        out.fill_(7)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            with torch.cuda.graph(g, stream=s):
                plan.launch(cuda.external_stream(s.cuda_stream))
        g.replay()
        torch.cuda.synchronize()
    assert out.cpu().numpy().tobytes() == want.tobytes()


def test_arrays_streams_and_workspaces_of_the_other_gpu_are_refused_by_name():
    torch = _two_gpus()
    d2 = _d2()
    from numba import cuda

    c = _attention_case()
    t1 = _torch_on(c, 1)
    with cuda.gpus[1]:
        ws1 = d2.AttentionWorkspace(batch=2, q_len=8, heads=6, head_dim=256, splits=80)
    ws0 = d2.AttentionWorkspace(batch=2, q_len=8, heads=6, head_dim=256, splits=80)
    assert (ws0.device, ws1.device) == (0, 1)
    ws0.fill_sentinel()
    ws1.fill_sentinel()
    s0 = torch.cuda.Stream(device=0)
    d2.route_counters(reset=True)
    refused = [(dict(k_cache=_torch_on(c, 0)["k_cache"], workspace=ws1),
                "^k_cache: on CUDA device 0, while q is on device 1"),
               (dict(workspace=ws0), "^workspace: on CUDA device 0, while q is on device 1"),
               (dict(workspace=ws1, stream=s0), "^stream: not a stream of CUDA device 1")]
    for bad, match in refused:
        with pytest.raises(ValueError, match=match):
            d2.verify_attention(**dict(t1, **bad))
    assert d2.route_counters() == {}, "a kernel was launched"
    for ws in (ws0, ws1):
        assert np.all(ws.partial.copy_to_host() == SENTINEL) and ws.guards_intact()
    # the workspace of the arrays' device is taken, and its guards hold
    res = d2.verify_attention(**t1, workspace=ws1)
    assert res.out.cpu().numpy().tobytes() == d2.verify_attention(**c).out.tobytes()
    assert ws1.guards_intact()
    g = _gdn_case()
    g1 = _torch_on(g, 1)
    with pytest.raises(ValueError, match="^initial_state: on CUDA device 0, while q is on device 1"):
        d2.gdn_prefill(**dict(g1, initial_state=_torch_on(g, 0)["initial_state"]))
    with pytest.raises(ValueError, match="^stream: not a stream of CUDA device 1"):
        d2.gdn_prefill(**g1, stream=s0)
