"""Property tests (hypothesis) on the simulator: the split schedule, the E4M3 codec, and
random attention shapes / lengths / pages / strides / tables against the FP64 oracle."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import dflash2_numba as d2
import oracle
from dflash2_numba import e4m3
from dflash2_numba._compat import cuda
from dflash2_numba.attention._device import active_split_count, split_first_tile, split_tile_count
from dflash2_numba.contract import active_splits, ceil_div, split_tiles
from tests.attention_helpers import check_against_oracle


@settings(max_examples=400, deadline=None)
@given(T=st.integers(-5, 300_000), S=st.integers(1, 160))
def test_split_schedule_covers_every_tile_once_balanced(T, S):
    tiles = split_tiles(T, S)
    A = active_splits(T, S)
    assert len(tiles) == A
    if T <= 0:
        assert tiles == []
        return
    n = ceil_div(T, 32)
    covered = [t for first, cnt in tiles for t in range(first, first + cnt)]
    assert covered == list(range(n))                      # [0, T) exactly once, in order
    counts = [cnt for _, cnt in tiles]
    assert max(counts) - min(counts) <= 1                 # balanced
    assert A == 1 if T <= 128 else A == min(S, ceil_div(T, 64))


@cuda.jit
def _schedule_kernel(Ts, S, out):
    i = cuda.grid(1)
    if i < Ts.shape[0]:
        T = Ts[i]
        A = active_split_count(T, S)
        out[i, 0] = A
        for s in range(min(A, out.shape[1] - 1)):
            out[i, 1 + s] = split_first_tile(T, A, s) * 1000 + split_tile_count(T, A, s)


def test_device_schedule_matches_host():
    Ts = np.array([-1, 0, 1, 31, 32, 33, 128, 129, 4095, 5000, 261888, 262144], np.int64)
    S = 5
    out = np.zeros((Ts.size, S + 1), np.int64)
    _schedule_kernel[1, 32](Ts, S, out)
    for i, T in enumerate(Ts):
        tiles = split_tiles(int(T), S)
        assert out[i, 0] == len(tiles)
        assert [int(x) for x in out[i, 1:1 + len(tiles)]] == [f * 1000 + c for f, c in tiles]


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e4, 1e4, allow_nan=False, width=32))
def test_e4m3_round_trip_is_nearest(x):
    code = e4m3.encode([x])
    y = float(e4m3.decode(code)[0])
    finite = e4m3.DECODE_TABLE[np.isfinite(e4m3.DECODE_TABLE)].astype(np.float64)
    clipped = min(max(x, -448.0), 448.0)
    assert abs(y - clipped) == np.min(np.abs(finite - clipped))   # no representable value is nearer
    assert e4m3.encode(e4m3.decode(code))[0] == code[0] or y == 0.0


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_attention_against_oracle(data):
    B = data.draw(st.integers(1, 2), label="B")
    Q = data.draw(st.integers(1, 8), label="Q")
    Hkv = data.draw(st.integers(1, 2), label="Hkv")
    G = data.draw(st.integers(1, 3), label="G")
    page = data.draw(st.sampled_from([1, 7, 16, 33]), label="page_size")
    seq = data.draw(st.lists(st.integers(0, 170), min_size=B, max_size=B), label="seq_lens")
    S = data.draw(st.integers(1, 6), label="splits")
    strided = data.draw(st.booleans(), label="strided")
    use_rows = data.draw(st.booleans(), label="row_lengths")
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31), label="seed"))
    rows = None
    if use_rows:
        rows = rng.integers(-2, 171, size=(B, Q)).astype(np.int32)
    c = oracle.random_attention_case(rng, B=B, Q=Q, Hq=G * Hkv, Hkv=Hkv, D=64, page_size=page,
                                     seq_lens=seq, strided=strided, row_lengths=rows)
    r32 = d2.verify_attention(**c, splits=S, out_dtype="float32")
    r16 = d2.verify_attention(**c, splits=S, out_dtype="float16")
    keys = ("q", "k_cache", "v_cache", "block_table", "seq_lens", "scale", "k_scale", "v_scale", "row_lengths")
    ref = oracle.attention_reference(**{k: c[k] for k in keys if k in c})
    check_against_oracle(r32.out, r16.out, ref)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lens=st.lists(st.integers(0, 70), min_size=2, max_size=4),
       family=st.sampled_from(["chunked", "serial"]), seed=st.integers(0, 2 ** 31))
def test_gdn_packed_sequences_are_independent_of_their_neighbours(lens, family, seed):
    """A sequence packed among others gives the same bytes (output and final state) as the
    same sequence run alone."""
    T = sum(lens)
    assume(T > 0)
    rng = np.random.default_rng(seed)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    case = oracle.random_gdn_case(rng, B=1, T=T, H=1, HV=2, K=32, V=32, dtype=np.float16,
                                  cu_seqlens=cu, with_state=True)
    o, h = d2.gdn_prefill(**case, variant=family, out_dtype="float32")
    for n, L in enumerate(lens):
        if L == 0:
            continue
        a, b = cu[n], cu[n + 1]
        alone = dict(case, q=case["q"][:, a:b], k=case["k"][:, a:b], v=case["v"][:, a:b],
                     g=case["g"][:, a:b], beta=case["beta"][:, a:b], cu_seqlens=None,
                     initial_state=case["initial_state"][n:n + 1])
        o1, h1 = d2.gdn_prefill(**alone, variant=family, out_dtype="float32")
        assert o1.tobytes() == np.ascontiguousarray(o[:, a:b]).tobytes()
        assert h1.tobytes() == h[n:n + 1].tobytes()
