"""Reliability on a real GPU: caches past 2^31 bytes, caller streams (two at once), workspace
reuse and CUDA-graph replays through the five length states, zero-copy GDN. Marked ``gpu``."""
from __future__ import annotations

import numpy as np
import pytest

import oracle
from dflash2_numba.contract import active_splits
from dflash2_numba.screen.cases import LENGTH_STATES, row_lengths_for_state
from tests.array_helpers import device_copies
from tests.missing_tools import module

pytestmark = pytest.mark.gpu


def _d2():
    import dflash2_numba as d2

    return d2


def test_cache_larger_than_2_pow_31_bytes():
    """A K/V cache of 2.36 GB each (700 pages x 3296 x 4 KV heads x 256): pages read are the
    last ones, so every byte offset the kernel forms is past 2^31."""
    d2 = _d2()
    from numba import cuda

    pages, P, Hkv, D = 700, 3296, 4, 256
    assert pages * P * Hkv * D > 2 ** 31
    rng = np.random.default_rng(31)
    T, Q, Hq = 3 * P + 100, 8, 8
    used = np.array([699, 650, 698, 651], np.int32)   # 4 pages, all past the 2^31 byte mark
    small = oracle.random_attention_case(rng, B=1, Q=Q, Hq=Hq, Hkv=Hkv, D=D, page_size=P,
                                         seq_lens=[T], strided=False, extra_pages=0)
    # small["k_cache"] has pages in block_table order; place them at the high page numbers
    kc = cuda.device_array((pages, P, Hkv, D), np.uint8)
    vc = cuda.device_array((pages, P, Hkv, D), np.uint8)
    # pages the table does not name stay uninitialised: the kernel must never read them
    bt_small = small["block_table"][0]
    for col, page in enumerate(used):
        kc[int(page)].copy_to_device(np.ascontiguousarray(small["k_cache"][bt_small[col]]))
        vc[int(page)].copy_to_device(np.ascontiguousarray(small["v_cache"][bt_small[col]]))
    bt = used[None, :].copy()
    r = d2.verify_attention(small["q"], kc, vc, bt, small["seq_lens"], scale=small["scale"],
                            out_dtype="float32")
    ref = oracle.attention_reference(**{k: small[k] for k in ("q", "k_cache", "v_cache", "block_table",
                                                               "seq_lens", "scale")})
    assert oracle.rel_l2(r.out, ref) < 1e-5


def test_two_streams_at_once_match_sequential_calls():
    d2 = _d2()
    from numba import cuda

    rng = np.random.default_rng(2)
    cases = [oracle.random_attention_case(rng, B=1, Q=8, Hq=6, Hkv=1, D=256, page_size=3296,
                                          seq_lens=[T], strided=False) for T in (50000, 70001)]
    want = [d2.verify_attention(**c) for c in cases]
    streams = [cuda.stream(), cuda.stream()]
    wss = [d2.AttentionWorkspace(batch=1, q_len=8, heads=6, head_dim=256, splits=80).fill_sentinel()
           for _ in cases]
    plans = [d2.plan_attention(**device_copies(c), workspace=ws, stream=s)
             for c, ws, s in zip(cases, wss, streams)]
    for _ in range(3):
        for p in plans:
            p.launch()
    for s in streams:
        s.synchronize()
    for w, ws, c in zip(want, wss, cases):
        A = active_splits(int(c["seq_lens"][0]), 80)
        assert ws.out.copy_to_host().tobytes() == w.out.tobytes()
        assert ws.partial.copy_to_host()[:, :A].tobytes() == w.partial[:, :A].tobytes()
        assert ws.guards_intact()


def test_graph_replays_through_length_states_match_fresh_calls():
    """One CUDA graph (split + combine) replayed while the row lengths change in place."""
    torch = module("torch")
    d2 = _d2()
    from numba import cuda

    rng = np.random.default_rng(3)
    c = oracle.random_attention_case(rng, B=2, Q=8, Hq=6, Hkv=1, D=256, page_size=1648,
                                     seq_lens=[40000, 9000], strided=False)
    dev = device_copies(c)
    rows = cuda.to_device(row_lengths_for_state(c["seq_lens"], 8, "live"))
    ws = d2.AttentionWorkspace(batch=2, q_len=8, heads=6, head_dim=256, splits=80).fill_sentinel()
    plan = d2.plan_attention(**dev, row_lengths=rows, workspace=ws)
    plan.launch()
    cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            plan.launch(cuda.external_stream(s.cuda_stream))
    fresh_ws = d2.AttentionWorkspace(batch=2, q_len=8, heads=6, head_dim=256, splits=80).fill_sentinel()
    for state in LENGTH_STATES:
        rl = row_lengths_for_state(c["seq_lens"], 8, state)
        rows.copy_to_device(rl)
        g.replay()
        torch.cuda.synchronize()
        fresh = d2.verify_attention(**c, row_lengths=rl, workspace=fresh_ws)
        assert ws.out.copy_to_host().tobytes() == fresh.out.tobytes(), state
        part, lse = ws.partial.copy_to_host(), ws.lse.copy_to_host()
        for b in range(2):
            A = active_splits(int(rl[b].max()), 80)
            assert part[b, :A].tobytes() == fresh.partial[b, :A].tobytes(), state
            assert lse[b, :A].tobytes() == fresh.lse[b, :A].tobytes(), state
        assert ws.guards_intact()


def test_gdn_torch_zero_copy_on_a_caller_stream_matches_numpy():
    torch = module("torch")
    d2 = _d2()
    rng = np.random.default_rng(5)
    case = oracle.random_gdn_case(rng, B=1, T=700, H=2, HV=4, K=128, V=128, dtype=np.float16,
                                  with_state=True)
    want_o, want_h = d2.gdn_prefill(**case)
    tcase = {k: (torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v) for k, v in case.items()}
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        o, h = d2.gdn_prefill(**tcase, stream=s)
    s.synchronize()
    assert isinstance(o, torch.Tensor) and o.is_cuda
    assert o.cpu().numpy().tobytes() == want_o.tobytes()
    assert h.cpu().numpy().tobytes() == want_h.tobytes()
