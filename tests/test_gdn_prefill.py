"""GDN prefill (contract B) on the simulator: both families against the FP64 oracle (the
FP32 output and the final state within the pinned bound ``TOL``, below the screen's 1e-5;
the FP16 output within one FP16 rounding of that), bit-exactness against the written-down
operation order (``gdn.emulate``), and the semantics of the API (packed sequences, GVA,
state cache, output dtype, persistent grid, all-zero and tiny q / k rows)."""
import numpy as np
import pytest

import oracle
from dflash2_numba import _registry
from dflash2_numba._compat import SIMULATOR, cuda
from dflash2_numba.contract import FP32_REL_L2_BOUND
from dflash2_numba.gdn import gdn_prefill
from dflash2_numba.gdn.emulate import chunked_emulate, serial_emulate
from dflash2_numba.screen.variant_steps import fp16_oracle_problems

FAMILIES = ("serial", "chunked")
EMULATE = {"serial": serial_emulate, "chunked": chunked_emulate}
# The FP32 output's and the final state's relative L2 against the FP64 oracle, and the FP32
# output's max abs error over max|ref|, pinned to what these deterministic cases give (both
# families, every case of this file, on the simulator): output rel L2 1.1e-7 .. 3.3e-7,
# state 4.2e-8 .. 3.7e-7, max abs / max|ref| 8.9e-8 .. 5.1e-7 (g = 0, beta = 1, chunked);
# about ten times the largest rel L2, so a change of the operation order that loses a few
# bits fails here before it reaches the screen's bound. (FP16 outputs: rel L2 2.0e-4 ..
# 2.2e-4 against 2**-11 + TOL = 4.9e-4.)
TOL = 4e-6
assert TOL <= FP32_REL_L2_BOUND         # (1e-5: what the screen and the benches accept)
SENT = np.float32(-777.0)


def check_fp16_against_oracle(o16, ref, bound=TOL, what="FP16 output"):
    """The FP16 output finite and against the FP64 oracle within one FP16 rounding of a
    result inside the FP32 bound ``bound`` (``fp16_oracle_problems``, the screens' check:
    derived from the bound, never from the FP32 output)."""
    assert np.isfinite(np.asarray(o16)).all(), f"{what}: not finite"
    problems = fp16_oracle_problems(o16, ref, bound)
    assert not problems, (what, problems)


def make_case(seed, *, T, H=1, HV=1, K=32, V=32, B=1, dtype=np.float32, cu_seqlens=None,
              with_state=True, g=None, beta=None, g_low=-1.0, g_high=-0.01):
    rng = np.random.default_rng(seed)
    case = oracle.random_gdn_case(rng, B=B, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype,
                                  cu_seqlens=cu_seqlens, g_low=g_low, g_high=g_high,
                                  with_state=with_state)
    if g is not None:
        case["g"] = np.full_like(case["g"], g) if np.isscalar(g) else g.astype(np.float32)
    if beta is not None:
        case["beta"] = np.full_like(case["beta"], beta)
    return case


def check_against_oracle(case, families=FAMILIES, emulate=False, **kw):
    """Run every family with the FP32 output; assert the error bounds: relative L2 of the
    output and the state, max abs of the output (``TOL * max|ref|``); for FP16 inputs run the
    FP16 output too: the RNE rounding of the FP32 one, and against the oracle
    (``check_fp16_against_oracle``). With ``emulate``, bit-exactness against the emulation
    on the simulator."""
    ref_o, ref_s = oracle.gdn_reference(**case)
    out = {}
    for fam in families:
        o, s = gdn_prefill(**case, variant=fam, out_dtype="float32", **kw)
        assert o.dtype == np.float32 and s.dtype == np.float32
        assert np.isfinite(o).all() and np.isfinite(s).all(), fam
        eo, es = oracle.rel_l2(o, ref_o), oracle.rel_l2(s, ref_s)
        assert eo <= TOL and es <= TOL, f"{fam}: rel L2 output {eo:.3e}, state {es:.3e}"
        mo = oracle.max_abs(o, ref_o)
        assert mo <= oracle.max_abs_bound(ref_o, TOL), f"{fam}: max abs output {mo:.3e}"
        if case["v"].dtype == np.float16:
            o16, s16 = gdn_prefill(**case, variant=fam, **kw)
            assert o16.dtype == np.float16
            check_fp16_against_oracle(o16, ref_o, what=f"{fam}: FP16 output")
            assert oracle.first_mismatch(o16, o.astype(np.float16)) is None, fam
            assert oracle.first_mismatch(s16, s) is None, fam
        if emulate and SIMULATOR:
            xo, xs = EMULATE[fam](**case)
            assert oracle.first_mismatch(o, xo) is None, (fam, str(oracle.first_mismatch(o, xo)))
            assert oracle.first_mismatch(s, xs) is None, (fam, str(oracle.first_mismatch(s, xs)))
        out[fam] = (o, s)
    return out


@pytest.mark.parametrize("T", [1, 63, 64, 65, 130])
def test_lengths_fp32(T):
    check_against_oracle(make_case(T, T=T), emulate=T in (1, 65, 130))


def test_packed_mixed_lengths_fp16_gva2():
    cu = np.array([0, 0, 1, 66, 129, 134], dtype=np.int32)        # 0, 1, 65, 63, 5 tokens
    case = make_case(11, T=134, H=1, HV=2, dtype=np.float16, cu_seqlens=cu)
    res = check_against_oracle(case, emulate=True)
    # the zero-length sequence returns its initial state unchanged
    for fam in FAMILIES:
        assert oracle.first_mismatch(res[fam][1][0], case["initial_state"][0]) is None


def test_batched_no_cu_seqlens():
    check_against_oracle(make_case(12, T=40, B=2, HV=2))


def test_g_zero_beta_one():
    check_against_oracle(make_case(13, T=70, g=0.0, beta=1.0))


def test_beta_zero_is_pure_decay():
    check_against_oracle(make_case(14, T=70, beta=0.0))


def test_strong_decay():
    rng = np.random.default_rng(15)
    g = rng.uniform(-21.0, -19.0, (1, 70, 1)).astype(np.float32)
    g[0, 3, 0] = 0.0
    case = make_case(15, T=70, g=g)
    res = check_against_oracle(case)
    for fam in FAMILIES:
        assert np.isfinite(res[fam][0]).all()


@pytest.mark.parametrize("H,HV", [(2, 2), (1, 3)])
def test_gva_ratio(H, HV):
    check_against_oracle(make_case(20 + HV, T=40, H=H, HV=HV, dtype=np.float16), emulate=HV == 3)


def test_without_l2norm_and_without_state():
    case = make_case(16, T=65, with_state=False, dtype=np.float16)
    k = case["k"].astype(np.float64)
    case["k"] = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float16)
    case["use_qk_l2norm"] = False
    case["scale"] = 0.3
    check_against_oracle(case, emulate=True)


def small_norm_rows(case):
    """All-zero and ~1e-3-scaled q / k rows (the l2norm's ``+ 1e-6`` decides them: a zero
    row normalises to zero, not NaN, and a row of norm ~6e-3 (sum of squares ~3e-5 at
    K = 32) loses ~1.5 % to it), in the first and the second chunk, q and k apart and in the
    same token."""
    for name, t, f in (("q", 2, 0.0), ("k", 5, 0.0), ("q", 9, 0.0), ("k", 9, 0.0),
                       ("q", 12, 1e-3), ("k", 17, 1e-3), ("q", 66, 1e-3), ("k", 66, 1e-3),
                       ("k", 67, 0.0)):
        a = case[name]
        a[:, t] = (a[:, t].astype(np.float64) * f).astype(a.dtype)
    return case


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_zero_and_tiny_qk_rows(dtype):
    """A zero q / k row and rows ~1e-3: finite, within the bound of the oracle (which adds
    1e-6 to the sum of squares; 1e-4 or 0 instead fail here) and the emulation's bits."""
    case = small_norm_rows(make_case(24, T=70, dtype=dtype))
    assert not case["q"][0, 2].any() and not case["k"][0, 9].any()
    check_against_oracle(case, emulate=True)


def test_fp16_oracle_check_fails_a_wrong_fp16_output():
    """The FP16 check against the oracle is no tautology: the kernel's FP16 output passes,
    the same output 1 % off fails on relative L2, and one element 0.2 % off (relative L2 still
    within 2**-11 + TOL) fails on the per-element bound."""
    case = make_case(25, T=40, dtype=np.float16)
    ref_o, _ = oracle.gdn_reference(**case)
    o16, _ = gdn_prefill(**case)
    check_fp16_against_oracle(o16, ref_o)
    with pytest.raises(AssertionError, match="FP16 output rel L2"):
        check_fp16_against_oracle((o16.astype(np.float32) * 1.01).astype(np.float16), ref_o)
    one = o16.copy()
    i = np.unravel_index(np.argmax(np.abs(ref_o)), ref_o.shape)
    one[i] = np.float16(np.float32(one[i]) * np.float32(1.002))
    assert oracle.rel_l2(one, ref_o) <= 2.0 ** -11 + TOL
    with pytest.raises(AssertionError, match="farther from the oracle than one FP16 rounding"):
        check_fp16_against_oracle(one, ref_o)


@pytest.mark.parametrize("K,V,T", [(64, 32, 40), (32, 64, 40), (128, 128, 20)])
def test_head_dims(K, V, T):
    check_against_oracle(make_case(30 + K + V, T=T, K=K, V=V), emulate=(K, V) == (32, 64))


def test_fp16_output_is_the_rounded_fp32_output():
    case = make_case(17, T=40, HV=1, dtype=np.float16)
    for fam in FAMILIES:
        o16, s16 = gdn_prefill(**case, variant=fam)
        o32, s32 = gdn_prefill(**case, variant=fam, out_dtype="float32")
        assert o16.dtype == np.float16
        assert oracle.first_mismatch(o16, o32.astype(np.float16)) is None
        assert oracle.first_mismatch(s16, s32) is None


def test_chunked_grid_and_threads_do_not_change_bits():
    """The order is independent of the grid (persistent loop) and the block size."""
    cu = np.array([0, 20, 86], dtype=np.int32)
    case = make_case(18, T=86, H=1, HV=1, V=64, cu_seqlens=cu)
    base = gdn_prefill(**case, out_dtype="float32")
    for kw in ({"_max_ctas": 1}, {"_max_ctas": 3, "_threads": 96}, {"_threads": 128}):
        o, s = gdn_prefill(**case, out_dtype="float32", **kw)
        assert oracle.first_mismatch(o, base[0]) is None, kw
        assert oracle.first_mismatch(s, base[1]) is None, kw


@pytest.mark.parametrize("kind", ["numpy", "device"])
@pytest.mark.parametrize("fam", FAMILIES)
def test_state_cache_in_place(fam, kind):
    cu = np.array([0, 20, 20, 45], dtype=np.int32)                # 20, 0, 25 tokens
    case = make_case(19, T=45, H=1, HV=2, cu_seqlens=cu)
    h0 = case.pop("initial_state")
    slots = 6
    idx = np.array([4, 1, 2], dtype=np.int32)
    cache = np.full((slots, 2, 32, 32), SENT, dtype=np.float32)
    cache[idx] = h0
    o_ref, s_ref = gdn_prefill(**case, initial_state=h0, variant=fam)
    if kind == "numpy":
        o, s = gdn_prefill(**case, state_cache=cache, state_indices=idx, variant=fam)
        assert s is cache
    else:                                   # zero-copy: the kernel writes the cache itself
        dcache = cuda.to_device(cache)
        o, s = gdn_prefill(**case, state_cache=dcache, state_indices=cuda.to_device(idx),
                           variant=fam)
        assert s is dcache
        cache = np.asarray(dcache.copy_to_host())
    assert oracle.first_mismatch(o, o_ref) is None
    assert oracle.first_mismatch(cache[idx], s_ref) is None
    untouched = np.setdiff1d(np.arange(slots), idx)
    assert (cache[untouched] == SENT).all()


def test_output_final_state_false_and_route_audit():
    case = make_case(21, T=5)
    _registry.route_counters(reset=True)
    for fam in FAMILIES:
        o, s = gdn_prefill(**case, variant=fam, output_final_state=False)
        assert s is None and o.shape == (1, 5, 1, 32)
    counts = _registry.route_counters(reset=True)
    assert counts == {"gdn_serial_fwd": 1, "gdn_chunked_fwd": 1}


def test_variants_listed():
    import dflash2_numba as d2

    names = set(_registry.variants("gdn"))
    assert {"serial", "chunked"} <= names
    if hasattr(d2, "gdn_prefill"):
        assert set(d2.gdn_variants()) == names


def test_empty_sequences_only():
    cu = np.array([0, 0, 0], dtype=np.int32)
    case = make_case(22, T=0, cu_seqlens=cu)
    for fam in FAMILIES:
        o, s = gdn_prefill(**case, variant=fam)
        assert o.shape == (1, 0, 1, 32)
        assert oracle.first_mismatch(s, case["initial_state"]) is None


def test_device_arrays_and_stream():
    """Device inputs come back as device arrays; an explicit stream (the simulator's own
    on the simulator) gives the same bits."""
    case = make_case(23, T=9, HV=2, dtype=np.float16)
    o_np, s_np = gdn_prefill(**case)
    stream = cuda.stream()
    dev = {n: cuda.to_device(a) for n, a in case.items()}
    o_d, s_d = gdn_prefill(**dev, stream=stream)
    cuda.synchronize()
    for r in (o_d, s_d):                     # numba device arrays, the simulator's included
        assert not isinstance(r, np.ndarray) and getattr(r, "__cuda_ndarray__", False)
    assert oracle.first_mismatch(o_d.copy_to_host(), o_np) is None
    assert oracle.first_mismatch(s_d.copy_to_host(), s_np) is None
