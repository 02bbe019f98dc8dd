"""Optimised variants of the GDN ``chunked`` family on the simulator: every variant registered
with ``bitwise_reference="chunked"`` must give the frozen ``chunked`` kernel's bytes, for the
FP32 and the FP16 output, the final state, and the state-cache server form (contract C:
byte comparison; -0.0 != +0.0, NaNs by payload).

Coverage: T = 1, 63, 64, 65, 130; a packed batch with lengths 0 / 1 / 65 / 63 / 5; GVA
1 / 2 / 3, and two q/k heads of two value heads each; with and without l2norm and initial state; (K, V) = (32, 32), (64, 32), (128, 128);
decay edge cases (g = 0, beta = 0 / 1, strong decay); all-zero and ~1e-3-scaled q / k rows
(the l2norm's epsilon); non-finite inputs with the host checks off; the server form with
numpy and device caches; the variant's own launch knobs.
The frozen kernel's result of each case is computed once and shared by every variant."""
import functools

import numpy as np
import pytest

import oracle
from dflash2_numba import _registry
from dflash2_numba._compat import cuda
from dflash2_numba.gdn import gdn_prefill, plan_gdn

VARIANTS = sorted(n for n, v in _registry.variants("gdn").items()
                  if v.bitwise_reference == "chunked" and n != "chunked")
SENT = np.float32(-777.0)


def _case(seed, *, T, H=1, HV=1, K=32, V=32, B=1, dtype=np.float32, cu=None, state=True):
    rng = np.random.default_rng(seed)
    cu = None if cu is None else np.asarray(cu, dtype=np.int32)
    return oracle.random_gdn_case(rng, B=B, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype,
                                  cu_seqlens=cu, with_state=state)


def _edge_case():
    """g = 0 with beta = 1, beta = 0, strong decay (E underflows to 0) and a g = 0 token in
    it, across three chunks."""
    case = _case(7, T=150)
    g = case["g"]
    g[0, :40] = 0.0
    case["beta"][0, :40] = 1.0
    case["beta"][0, 40:70] = 0.0
    g[0, 70:150] = np.random.default_rng(8).uniform(-21.0, -19.0, g[0, 70:150].shape)
    g[0, 100] = 0.0
    return case


def _nonfinite_case():
    """NaN / inf in q, k, v (needs check_values=False): the NaNs must land on the same
    bytes."""
    case = _case(9, T=70, HV=2)
    case["v"][0, 3, 1, 5] = np.nan
    case["k"][0, 66, 0, 2] = np.inf
    case["q"][0, 10, 0, 0] = -np.inf
    return case


def _small_norm_case():
    """All-zero q / k rows (apart and in one token) and rows scaled by 1e-3, where the
    l2norm's ``+ 1e-6`` decides the result, read by two value heads."""
    case = _case(116, T=24, HV=2)
    for name, t, f in (("q", 1, 0.0), ("k", 4, 0.0), ("q", 7, 0.0), ("k", 7, 0.0),
                       ("q", 10, 1e-3), ("k", 13, 1e-3), ("q", 20, 1e-3), ("k", 20, 1e-3)):
        case[name][:, t] = case[name][:, t] * np.float32(f)
    return case


def _no_l2(case):
    k = case["k"].astype(np.float64)
    case["k"] = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(case["k"].dtype)
    return case


# name -> (builder, gdn_prefill keyword arguments)
CASES = {
    "T1": (lambda: _case(101, T=1), {}),
    "T63": (lambda: _case(102, T=63), {}),
    "T64": (lambda: _case(103, T=64, state=False), {}),
    "T65": (lambda: _case(104, T=65), {}),
    "T130": (lambda: _case(105, T=130), {}),
    "packed_0_1_65_63_5_gva3_fp16": (
        lambda: _case(106, T=134, H=1, HV=3, dtype=np.float16, cu=[0, 0, 1, 66, 129, 134]), {}),
    "gva2_K64_V32_nol2_nostate_fp16": (
        lambda: _no_l2(_case(107, T=65, H=1, HV=2, K=64, V=32, dtype=np.float16, state=False)),
        {"use_qk_l2norm": False, "scale": 0.3}),
    "K128_V128_T20": (lambda: _case(108, T=20, K=128, V=128), {}),
    # two q/k heads of two value heads each: a head map that mixes them up shows only
    # with H > 1 and HV / H > 1
    "H2_HV4_packed_3_67": (lambda: _case(110, T=70, H=2, HV=4, cu=[0, 3, 70]), {}),
    "decay_edges": (_edge_case, {}),
    "zero_and_tiny_qk_rows": (_small_norm_case, {}),
    "nonfinite_nocheck": (_nonfinite_case, {"check_values": False}),
}
KNOB_CASE = "knobs_5_65_gva2"
KNOBS = {KNOB_CASE: (lambda: _case(109, T=70, H=1, HV=2, cu=[0, 5, 70]), {})}
FP16_CASES = ("gva2_K64_V32_nol2_nostate_fp16",)
CASE_PARAMS = [pytest.param(n, marks=pytest.mark.filterwarnings("ignore::RuntimeWarning"))
               if n == "nonfinite_nocheck" else n for n in CASES]


@functools.lru_cache(maxsize=None)
def _inputs(name):
    return {**CASES, **KNOBS}[name][0]()


@functools.lru_cache(maxsize=None)
def _reference(name, out_dtype):
    return gdn_prefill(**_inputs(name), variant="chunked", out_dtype=out_dtype,
                       **{**CASES, **KNOBS}[name][1])


def _assert_same(got, ref, what):
    mm = oracle.first_mismatch(got, ref)
    assert mm is None, f"{what}: {mm}"


@pytest.mark.parametrize("name", CASE_PARAMS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_fp32_output_and_state(variant, name):
    ref_o, ref_s = _reference(name, "float32")
    o, s = gdn_prefill(**_inputs(name), variant=variant, out_dtype="float32", **CASES[name][1])
    _assert_same(o, ref_o, f"{variant}/{name}: output (FP32)")
    _assert_same(s, ref_s, f"{variant}/{name}: final state")


@pytest.mark.parametrize("name", CASE_PARAMS)
@pytest.mark.parametrize("variant", ["chunked_wsr", "chunked_wsr_two_loop", "chunked_smprep",
                                     "chunked_rec", "chunked_rec_pipe", "chunked_ahead"])
def test_twelve_column_plan(monkeypatch, variant, name):
    """chunked_wsr / chunked_wsr_two_loop / chunked_smprep with the H200's plan (twelve-
    column items, Kd / P^T staged, so the staged output units run; the simulator's default
    plan takes four-column items), and chunked_rec's and chunked_ahead's recurrences with
    twelve-column items (their half-row phase-2 units: chunked_ahead's issue their loads a
    step ahead), on every case: the frozen kernel's bytes, including the narrower last item
    of each value head when 12 does not divide V (here V = 32: items of 12, 12 and 8
    columns)."""
    assert variant in VARIANTS
    from dflash2_numba.gdn import chunked_split

    monkeypatch.setattr(chunked_split, "COLS", 12)
    monkeypatch.setattr(chunked_split, "STAGE_KP", "1")
    call = plan_gdn(**_inputs(name), variant=variant, out_dtype="float32",
                    **CASES[name][1])
    assert call.plan.scratch.cols == 12
    if variant in ("chunked_wsr", "chunked_wsr_two_loop", "chunked_smprep"):   # (the
        # recurrences of chunked_rec and chunked_ahead always stage Kd; no P^T)
        assert int(call.plan.scratch.ws.stage_kp) == 1
    call.launch()
    o, s = (np.asarray(x.copy_to_host()) if hasattr(x, "copy_to_host") else x
            for x in call.results())
    ref_o, ref_s = _reference(name, "float32")
    _assert_same(o, ref_o, f"{variant} 12-column plan/{name}: output (FP32)")
    _assert_same(s, ref_s, f"{variant} 12-column plan/{name}: final state")


@pytest.mark.parametrize("name", FP16_CASES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_fp16_output_and_state(variant, name):
    ref_o, ref_s = _reference(name, None)
    o, s = gdn_prefill(**_inputs(name), variant=variant, **CASES[name][1])
    assert o.dtype == np.float16
    _assert_same(o, ref_o, f"{variant}/{name}: output (FP16)")
    _assert_same(s, ref_s, f"{variant}/{name}: final state")


@functools.lru_cache(maxsize=None)
def _cache_case():
    case = _case(110, T=45, H=1, HV=2, cu=[0, 20, 20, 45])          # 20, 0, 25 tokens
    h0 = case.pop("initial_state")
    idx = np.array([4, 1, 2], dtype=np.int32)
    cache = np.full((6, 2, 32, 32), SENT, dtype=np.float32)
    cache[idx] = h0
    ref_cache = cache.copy()
    ref_o, s = gdn_prefill(**case, state_cache=ref_cache, state_indices=idx, variant="chunked")
    assert s is ref_cache
    return case, idx, cache, ref_o, ref_cache


@pytest.mark.parametrize("kind", ["numpy", "device"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_state_cache_server_form(variant, kind):
    case, idx, cache0, ref_o, ref_cache = _cache_case()
    cache = cache0.copy()
    if kind == "numpy":
        o, s = gdn_prefill(**case, state_cache=cache, state_indices=idx, variant=variant)
        assert s is cache
    else:
        dcache = cuda.to_device(cache)
        o, s = gdn_prefill(**case, state_cache=dcache, state_indices=cuda.to_device(idx),
                           variant=variant)
        assert s is dcache
        cache = np.asarray(dcache.copy_to_host())
    _assert_same(o, ref_o, f"{variant}: output (server form)")
    _assert_same(cache, ref_cache, f"{variant}: whole state cache (slots not named keep -777)")


KNOB_RUNS = [("chunked_split", 12, 7), ("chunked_split", 4, 128), ("chunked_pipe", 4, 128),
             # chunked_ws: 100 compute threads (36 of them copy in phase 1: w = 4 has 64
             # phase-1 units) + 32 copy threads; 7 compute threads (phase 1 takes turns)
             ("chunked_ws", 4, 100), ("chunked_ws", 12, 7),
             # chunked_wsr: 7 compute threads (units take turns) + 32 copy threads, each
             # carrying 18 float4 and copying the rest directly; 100 + 32 at w = 4
             ("chunked_wsr", 12, 7), ("chunked_wsr", 4, 100),
             ("chunked_wsr_two_loop", 12, 7), ("chunked_wsr_two_loop", 4, 100),
             ("chunked_smprep", 12, 7),
             # chunked_rec: 7 compute threads (units take turns) + 32 copy threads
             ("chunked_rec", 12, 7), ("chunked_rec", 4, 100), ("chunked_rec_pipe", 4, 100)]


@pytest.mark.parametrize("variant,cols,threads", KNOB_RUNS)
def test_launch_knobs_do_not_change_bits(monkeypatch, variant, cols, threads):
    """chunked_split / chunked_pipe: the state CTA's thread count and column width only move
    work between threads (128 threads per group of 4 columns switch step 6 to one product
    and one column group per unit); the bits stay the frozen kernel's."""
    assert variant in VARIANTS
    from dflash2_numba.gdn import chunked_split

    ref_o, ref_s = _reference(KNOB_CASE, "float32")
    monkeypatch.setattr(chunked_split, "COLS", cols)
    o, s = gdn_prefill(**_inputs(KNOB_CASE), variant=variant, out_dtype="float32",
                       _threads=threads)
    _assert_same(o, ref_o, f"{variant} cols={cols} threads={threads}: output")
    _assert_same(s, ref_s, f"{variant} cols={cols} threads={threads}: final state")


@pytest.mark.parametrize("stage_kp", ["0", "1"])
@pytest.mark.parametrize("variant", ["chunked_split", "chunked_ws", "chunked_wsr",
                                     "chunked_wsr_two_loop", "chunked_smprep"])
def test_state_staging_does_not_change_bits(monkeypatch, variant, stage_kp):
    """The staged state passes (chunked_split, chunked_ws, chunked_wsr) with and without
    Kd / P^T staged in shared memory (the device's shared-memory size picks one at plan
    time): same bits as the frozen kernel."""
    assert variant in VARIANTS
    from dflash2_numba.gdn import chunked_split

    ref_o, ref_s = _reference(KNOB_CASE, "float32")
    monkeypatch.setattr(chunked_split, "STAGE_KP", stage_kp)
    o, s = gdn_prefill(**_inputs(KNOB_CASE), variant=variant, out_dtype="float32")
    _assert_same(o, ref_o, f"{variant} stage_kp={stage_kp}: output")
    _assert_same(s, ref_s, f"{variant} stage_kp={stage_kp}: final state")


@pytest.mark.parametrize("rows", ["1,2", "2,4", "1,4", "2,2", "0,0", "2,0", "0,4", "2p,0", "2s,0",
                                  "2s,4"])
def test_rec_unit_rows_do_not_change_bits(monkeypatch, rows):
    """chunked_rec's phase-1 units of one or two rows and phase-2 state units of two or
    four rows (``DFLASH2_GDN_REC_ROWS``), or either phase's half-row units (0: six of a
    twelve-column item's columns a thread; the last item of each value head, 8 columns
    wide here, takes two- / four-row units), and the two-row phase-1 units placed two
    column groups a warp (``2p``) or over four warps (``2s``), run the same chains: the
    frozen kernel's bytes."""
    assert "chunked_rec" in VARIANTS
    monkeypatch.setenv("DFLASH2_GDN_REC_ROWS", rows)
    f1, f2 = rows.split(",")
    placed = {"2p": -1, "2s": -2}.get(f1)
    r1, r2 = (2 if placed else int(f1)), int(f2)
    if 0 in (r1, r2) or placed:         # (twelve-column items: V = 32 is 12 + 12 + 8)
        from dflash2_numba.gdn import chunked_split

        monkeypatch.setattr(chunked_split, "COLS", 12)
    ref_o, ref_s = _reference(KNOB_CASE, "float32")
    call = plan_gdn(**_inputs(KNOB_CASE), variant="chunked_rec", out_dtype="float32")
    want = (placed or (64 // r1 if r1 else 0), 32 // r2 if r2 else 0)
    assert (int(call.plan.scratch.rec.n1), int(call.plan.scratch.rec.nq)) == want
    call.launch()
    o, s = (np.asarray(x.copy_to_host()) if hasattr(x, "copy_to_host") else x
            for x in call.results())
    _assert_same(o, ref_o, f"chunked_rec rows={rows}: output")
    _assert_same(s, ref_s, f"chunked_rec rows={rows}: final state")


@pytest.mark.parametrize("rows", ["2,0", "0,4", "2s,0", "1,2"])
def test_ahead_unit_rows_do_not_change_bits(monkeypatch, rows):
    """chunked_ahead's recurrence under the unit forms of ``DFLASH2_GDN_REC_ROWS``: its own
    two-row phase-1 units (loads two passes ahead; also placed over four warps, ``2s``) and
    half-row phase-2 units (loads a step ahead) in twelve-column items, and the forms it
    takes from ``gdn_rec_state`` unchanged (half-row phase-1, one-row phase-1, two- and
    four-row phase-2 units): the frozen kernel's bytes, and ``gdn_rec_ahead_state`` is the
    recurrence launched."""
    assert "chunked_ahead" in VARIANTS
    from dflash2_numba.gdn import chunked_split

    monkeypatch.setenv("DFLASH2_GDN_REC_ROWS", rows)
    monkeypatch.setattr(chunked_split, "COLS", 12)
    ref_o, ref_s = _reference(KNOB_CASE, "float32")
    _registry.route_counters(reset=True)
    o, s = gdn_prefill(**_inputs(KNOB_CASE), variant="chunked_ahead", out_dtype="float32")
    counts = _registry.route_counters(reset=True)
    assert counts.get("gdn_rec_ahead_state", 0) >= 1 and "gdn_rec_state" not in counts
    _assert_same(o, ref_o, f"chunked_ahead rows={rows}: output")
    _assert_same(s, ref_s, f"chunked_ahead rows={rows}: final state")


@pytest.mark.parametrize("raw", ["2", "2q,0", "3,0", "2,3", "2,0,1", "2p"])
def test_rec_rows_knob_is_checked(monkeypatch, raw):
    """A ``DFLASH2_GDN_REC_ROWS`` that names no unit form is refused, naming the knob."""
    from dflash2_numba.gdn import chunked_rec

    monkeypatch.setenv("DFLASH2_GDN_REC_ROWS", raw)
    with pytest.raises(ValueError, match="DFLASH2_GDN_REC_ROWS"):
        chunked_rec.knob_units(128)


def test_rec_chunk_start_states_are_chunked_states():
    """What chunked_rec's recurrence hands its output kernel: the state at the start of
    chunk ci (the chunk-start region of the scratch) is, byte for byte, the frozen kernel's
    final state after the first ci chunks of the same sequence (the initial state for
    ci = 0), for every value head."""
    assert "chunked_rec" in VARIANTS
    case = _case(113, T=150, H=1, HV=2)                 # chunks of 64, 64, 22 tokens
    call = plan_gdn(**case, variant="chunked_rec", out_dtype="float32")
    call.launch()
    s = call.plan.scratch
    HV, K, V = 2, 32, 32
    scr = np.asarray(s.scr.copy_to_host())
    for ci in range(3):
        got = scr[int(s.rec.snap0) + ci * HV * K * V:][:HV * K * V].reshape(HV, K, V)
        if ci == 0:
            want = case["initial_state"][0]
        else:
            head = {k: (v[:, :64 * ci] if k in ("q", "k", "v", "g", "beta") else v)
                    for k, v in case.items()}
            want = gdn_prefill(**head, variant="chunked", out_dtype="float32")[1][0]
        _assert_same(got, want, f"chunked_rec: state at the start of chunk {ci}")


ROUTES = {"chunked_split": ({"gdn_split_prep": 1, "gdn_split_state": 1}, {"gdn_split_state": 1}),
          "chunked_ws": ({"gdn_split_prep": 1, "gdn_ws_state": 1}, {"gdn_ws_state": 1}),
          "chunked_wsr": ({"gdn_split_prep": 1, "gdn_wsr_state": 1}, {"gdn_wsr_state": 1}),
          "chunked_wsr_two_loop": ({"gdn_split_prep": 1, "gdn_wsr_two_loop_state": 1},
                                   {"gdn_wsr_two_loop_state": 1}),
          "chunked_smprep": ({"gdn_smem_prep": 1, "gdn_wsr_two_loop_state": 1},
                             {"gdn_wsr_two_loop_state": 1}),
          "chunked_rec": ({"gdn_smem_prep": 1, "gdn_rec_state": 1, "gdn_chunk_out": 1},
                          {"gdn_rec_state": 1}),
          "chunked_rec_pipe": ({"gdn_smem_prep": 1, "gdn_rec_state": 1,
                                "gdn_chunk_out_wide": 1}, {"gdn_rec_state": 1}),
          "chunked_overlap": ({"gdn_state_gather": 1, "gdn_smem_prep": 1, "gdn_rec_state": 1,
                               "gdn_chunk_out_wide": 1, "gdn_state_scatter": 1},
                              {"gdn_state_gather": 1, "gdn_state_scatter": 1}),
          "chunked_ahead": ({"gdn_state_gather": 1, "gdn_smem_prep": 1, "gdn_rec_ahead_state": 1,
                             "gdn_chunk_out_wide": 1, "gdn_state_scatter": 1},
                            {"gdn_state_gather": 1, "gdn_state_scatter": 1}),
          # one chunk per group on the simulator: groups 0 .. 1, launches 0 .. 2 (the first
          # pre-pass only, the last state only); empty sequences: one state launch
          "chunked_pipe": ({"gdn_split_pipe": 2}, {"gdn_split_pipe": 1})}


@pytest.mark.parametrize("variant", sorted(ROUTES))
def test_route_and_empty(variant):
    """The variant's kernels run as many times as its schedule says; a batch of empty
    sequences runs no pre-pass and returns the initial states."""
    assert variant in VARIANTS
    case = _case(111, T=5)
    _registry.route_counters(reset=True)
    o, s = gdn_prefill(**case, variant=variant, output_final_state=False)
    assert s is None
    assert _registry.route_counters(reset=True) == ROUTES[variant][0]
    empty = _case(112, T=0, HV=2, cu=[0, 0, 0])
    o, s = gdn_prefill(**empty, variant=variant)
    assert o.shape == (1, 0, 2, 32)
    _assert_same(s, empty["initial_state"], "empty sequences: final state")
    assert _registry.route_counters(reset=True) == ROUTES[variant][1]


@pytest.mark.parametrize("dtype,out_dtype", [(np.float32, "float32"), (np.float16, None)])
def test_rec_pipe_output_slabs_of_sixteen_rows(monkeypatch, dtype, out_dtype):
    """chunked_rec_pipe's 4 x 8 output kernel (``DFLASH2_GDN_OUT_TILE=4x8``) at V = 128
    (slabs of 16 rows, three float4 a thread, as on the production shape): whole chunks
    (every P^T | vn slab, every row's tail steps) and a partial one (only the slabs its rows
    need), two value heads: the frozen kernel's bytes, and the 4 x 8 kernel is the one
    launched."""
    assert "chunked_rec_pipe" in VARIANTS
    from dflash2_numba.gdn._chunk_output_pipe import slab_rows

    assert slab_rows(128) == 16 and slab_rows(64) == slab_rows(32) == 8
    case = _case(114, T=150, H=1, HV=2, K=32, V=128, dtype=dtype)  # chunks of 64, 64, 22
    ref_o, ref_s = gdn_prefill(**case, variant="chunked", out_dtype=out_dtype)
    monkeypatch.setenv("DFLASH2_GDN_OUT_TILE", "4x8")
    _registry.route_counters(reset=True)
    o, s = gdn_prefill(**case, variant="chunked_rec_pipe", out_dtype=out_dtype)
    assert _registry.route_counters(reset=True).get("gdn_chunk_out_pipe", 0) == 1
    assert o.dtype == (np.float32 if out_dtype else dtype)
    _assert_same(o, ref_o, f"chunked_rec_pipe V=128 ({o.dtype}): output")
    _assert_same(s, ref_s, f"chunked_rec_pipe V=128 ({o.dtype}): final state")


@pytest.mark.parametrize("variant", ["chunked_rec_pipe", "chunked_overlap"])
@pytest.mark.parametrize("K,V,T,dtype,out_dtype", [
    (32, 128, 150, np.float32, "float32"),     # slabs of 16 rows, six float4 a thread
    (32, 128, 150, np.float16, None),
    (64, 64, 130, np.float32, "float32"),      # slabs of 8 rows, four float4 a thread
    (32, 32, 70, np.float16, None)])           # one warp: all eight row groups
def test_wide_output_tile_gives_chunked_bytes(monkeypatch, variant, K, V, T, dtype, out_dtype):
    """``DFLASH2_GDN_OUT_TILE=8x8`` (``gdn_chunk_out_wide``: 8 x 8 tiles, ``V`` threads):
    whole chunks (every P^T | vn slab, each row group's seven tail steps) and a partial one,
    two value heads, FP32 and FP16 outputs: the frozen kernel's bytes, and the wide kernel is
    the one launched."""
    assert variant in VARIANTS
    from dflash2_numba.gdn._chunk_output_wide import wide_fits, wide_slab_rows, wide_threads

    assert wide_slab_rows(V) % 8 == 0 and wide_fits(V) and wide_threads(V) == V
    case = _case(115, T=T, H=1, HV=2, K=K, V=V, dtype=dtype)
    ref_o, ref_s = gdn_prefill(**case, variant="chunked", out_dtype=out_dtype)
    monkeypatch.setenv("DFLASH2_GDN_OUT_TILE", "8x8")
    _registry.route_counters(reset=True)
    o, s = gdn_prefill(**case, variant=variant, out_dtype=out_dtype)
    assert _registry.route_counters(reset=True).get("gdn_chunk_out_wide", 0) >= 1
    assert o.dtype == (np.float32 if out_dtype else dtype)
    _assert_same(o, ref_o, f"{variant} 8x8 K={K} V={V} ({o.dtype}): output")
    _assert_same(s, ref_s, f"{variant} 8x8 K={K} V={V} ({o.dtype}): final state")


@pytest.mark.parametrize("raw", ["8", "8x4", "wide"])
def test_out_tile_knob_is_checked(monkeypatch, raw):
    """A ``DFLASH2_GDN_OUT_TILE`` that names no tile is refused at plan time, with the
    knob's name."""
    assert "chunked_rec_pipe" in VARIANTS
    monkeypatch.setenv("DFLASH2_GDN_OUT_TILE", raw)
    with pytest.raises(ValueError, match="DFLASH2_GDN_OUT_TILE"):
        gdn_prefill(**_inputs(KNOB_CASE), variant="chunked_rec_pipe")


def test_rec_pipe_below_cc8_runs_the_staged_output_kernel(monkeypatch):
    """Below compute capability 8.0 chunked_rec_pipe launches ``gdn_chunk_out`` (the sm_70
    form without spills) instead of a streamed output kernel, whatever the tile knob says;
    the simulator runs the streamed one. Both plans give the frozen kernel's bytes."""
    assert "chunked_rec_pipe" in VARIANTS
    from dflash2_numba.gdn import chunked_rec_pipe

    assert chunked_rec_pipe.pipe_here()
    monkeypatch.setattr(chunked_rec_pipe, "pipe_here", lambda: False)
    ref_o, ref_s = _reference(KNOB_CASE, "float32")
    _registry.route_counters(reset=True)
    o, s = gdn_prefill(**_inputs(KNOB_CASE), variant="chunked_rec_pipe", out_dtype="float32")
    routes = _registry.route_counters(reset=True)
    assert routes.get("gdn_chunk_out", 0) == 1
    assert "gdn_chunk_out_pipe" not in routes and "gdn_chunk_out_wide" not in routes
    _assert_same(o, ref_o, "chunked_rec_pipe, sm_70 plan: output")
    _assert_same(s, ref_s, "chunked_rec_pipe, sm_70 plan: final state")


def test_device_cc_at_least_picks_the_newest_schedule_on_the_simulator():
    """The plan-time capability test that chunked_rec_pipe and tiled_compact share: the
    simulator runs the newest (H200) schedules."""
    from dflash2_numba._compat import device_cc_at_least

    assert device_cc_at_least((8, 0)) and device_cc_at_least((9, 0))
