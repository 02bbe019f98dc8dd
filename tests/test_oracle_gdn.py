"""Oracle for contract part B (GDN prefill): recurrence vs mpmath, chunked vs recurrence,
hand cases, variable length, validation."""
import os
import time

import mpmath
import numpy as np
import pytest

import oracle
from oracle.selfcheck import random_gdn_case


def _rng(seed):
    return np.random.default_rng(seed)


def _close(a, b, tol=1e-12):
    return oracle.rel_l2(a[0], b[0]) <= tol and oracle.rel_l2(a[1], b[1]) <= tol


# ----------------------------------------------------------------------------- fp64 vs mp

@pytest.mark.parametrize("H,HV", [(2, 2), (1, 2), (2, 6)])        # GVA ratios 1, 2, 3
@pytest.mark.parametrize("l2", [True, False])
def test_recurrence_matches_mp(H, HV, l2):
    case = random_gdn_case(_rng(100 + 7 * HV + H), B=2, T=5, H=H, HV=HV, K=4, V=3)
    a = oracle.gdn_reference(**case, use_qk_l2norm=l2)
    b = oracle.gdn_reference(**case, use_qk_l2norm=l2, precision="mp")
    assert a[0].shape == (2, 5, HV, 3) and a[1].shape == (2, HV, 4, 3)
    assert a[0].dtype == np.float64 and a[1].dtype == np.float64
    assert _close(a, b)


def test_recurrence_matches_mp_fp16_no_state_custom_scale():
    case = random_gdn_case(_rng(110), B=1, T=6, H=1, HV=3, K=5, V=2, dtype=np.float16,
                           with_state=False)
    a = oracle.gdn_reference(**case, scale=0.3)
    b = oracle.gdn_reference(**case, scale=0.3, precision="mp")
    assert _close(a, b)


def test_recurrence_matches_mp_varlen():
    case = random_gdn_case(_rng(111), B=1, T=9, H=1, HV=2, K=3, V=4, cu_seqlens=[0, 4, 4, 9])
    a = oracle.gdn_reference(**case)
    b = oracle.gdn_reference(**case, precision="mp")
    assert _close(a, b)
    # the empty sequence keeps its initial state
    np.testing.assert_array_equal(a[1][1], case["initial_state"][1].astype(np.float64))


def test_mp_values_are_mpf():
    case = random_gdn_case(_rng(112), B=1, T=2, H=1, HV=1, K=2, V=2)
    o, h = oracle.gdn_reference_mp(**case)
    assert o.dtype == object and h.dtype == object
    assert isinstance(o[0, 1, 0, 1], mpmath.mpf) and isinstance(h[0, 0, 1, 1], mpmath.mpf)


# ----------------------------------------------------------------------------- hand cases

def test_beta0_g0_keeps_state_and_reads_it():
    case = random_gdn_case(_rng(120), B=2, T=4, H=1, HV=2, K=4, V=3)
    case["g"][:] = 0.0
    case["beta"][:] = 0.0
    for prec in ("fp64", "mp"):
        o, h = oracle.gdn_reference(**case, scale=0.5, use_qk_l2norm=False, precision=prec)
        h0 = case["initial_state"].astype(np.float64)
        np.testing.assert_array_equal(h, h0)
        q = case["q"].astype(np.float64)
        want = np.einsum("bkv,btk->btv", h0[:, 0], 0.5 * q[:, :, 0])
        np.testing.assert_allclose(o[:, :, 0], want, rtol=1e-14, atol=1e-15)
        want1 = np.einsum("bkv,btk->btv", h0[:, 1], 0.5 * q[:, :, 0])
        np.testing.assert_allclose(o[:, :, 1], want1, rtol=1e-14, atol=1e-15)


def test_beta0_g0_with_l2norm_reads_normalised_q():
    case = random_gdn_case(_rng(121), B=1, T=3, H=1, HV=1, K=4, V=2)
    case["g"][:] = 0.0
    case["beta"][:] = 0.0
    o, h = oracle.gdn_reference(**case)
    q = case["q"][0, :, 0].astype(np.float64)
    qn = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6)
    want = (4 ** -0.5) * qn @ case["initial_state"][0, 0].astype(np.float64)
    np.testing.assert_allclose(o[0, :, 0], want, rtol=1e-14, atol=1e-15)


def _one_token(q, k, v, g, beta, h0, scale):
    f = lambda x: np.asarray(x, np.float32)[None, None, None]  # noqa: E731
    return oracle.gdn_reference(f(q), f(k), f(v), np.float32(g).reshape(1, 1, 1),
                                np.float32(beta).reshape(1, 1, 1), scale=scale,
                                initial_state=np.asarray(h0, np.float32)[None, None],
                                use_qk_l2norm=False)


def test_one_token_by_hand():
    # h = h0 (g = 0); h^T k = h0[1] = [3, 4]; u = 0.5 ([5, 8] - [3, 4]) = [1, 2]
    # h = h0 + k u^T = [[1, 2], [4, 6]];  o = h^T (0.5 q) = 0.5 [5, 8] = [2.5, 4]
    o, h = _one_token([1, 1], [0, 1], [5, 8], 0.0, 0.5, [[1, 2], [3, 4]], 0.5)
    np.testing.assert_array_equal(h[0, 0], [[1, 2], [4, 6]])
    np.testing.assert_array_equal(o[0, 0, 0], [2.5, 4.0])
    # with decay exp(g) ~ 0.5: h = [[.5, 1], [1.5, 2]], h^T k = [1.5, 2],
    # u = 0.5 ([3, 4] - [1.5, 2]) = [.75, 1], h = [[.5, 1], [2.25, 3]], o = h^T [1, 0] = [.5, 1]
    g = float(np.float32(np.log(0.5)))
    o, h = _one_token([1, 0], [0, 1], [3, 4], g, 0.5, [[1, 2], [3, 4]], 1.0)
    np.testing.assert_allclose(h[0, 0], [[0.5, 1], [2.25, 3]], rtol=1e-7)
    np.testing.assert_allclose(o[0, 0, 0], [0.5, 1.0], rtol=1e-7)


def test_default_scale_is_k_to_minus_half():
    case = random_gdn_case(_rng(122), B=1, T=4, H=1, HV=1, K=9, V=2)
    a = oracle.gdn_reference(**case)
    b = oracle.gdn_reference(**case, scale=1 / 3)
    np.testing.assert_array_equal(a[1], b[1])        # scale enters o only, never the state
    assert oracle.rel_l2(a[0], b[0]) <= 1e-15
    c = oracle.gdn_reference(**case, scale=0.5)      # so the default was not just ignored
    assert oracle.rel_l2(c[0], a[0]) > 1e-3


# ----------------------------------------------------------------------------- variable length

def test_packed_sequences_are_independent():
    cu = [0, 5, 6, 6, 70, 77]
    case = random_gdn_case(_rng(130), B=1, T=77, H=2, HV=4, K=6, V=5, cu_seqlens=cu)
    o, h = oracle.gdn_reference(**case)
    oc, hc = oracle.gdn_reference_chunked(**case, chunk=16)
    assert _close((oc, hc), (o, h))
    for n in range(len(cu) - 1):
        s, e = cu[n], cu[n + 1]
        sub = {x: case[x][:, s:e] for x in ("q", "k", "v", "g", "beta")}
        o1, h1 = oracle.gdn_reference(**sub, initial_state=case["initial_state"][n:n + 1])
        assert oracle.rel_l2(o1, o[:, s:e]) <= 1e-14
        assert oracle.rel_l2(h1[0], h[n]) <= 1e-14


def test_batch_rows_are_independent():
    case = random_gdn_case(_rng(131), B=3, T=10, H=1, HV=2, K=4, V=4)
    o, h = oracle.gdn_reference(**case)
    for b in range(3):
        sub = {x: case[x][b:b + 1] for x in ("q", "k", "v", "g", "beta", "initial_state")}
        o1, h1 = oracle.gdn_reference(**sub)
        assert oracle.rel_l2(o1[0], o[b]) <= 1e-14 and oracle.rel_l2(h1[0], h[b]) <= 1e-14


def test_packed_equals_batched_when_lengths_equal():
    case = random_gdn_case(_rng(132), B=2, T=7, H=1, HV=2, K=3, V=3)
    packed = {x: case[x].reshape(1, 14, *case[x].shape[2:]) for x in ("q", "k", "v", "g", "beta")}
    a = oracle.gdn_reference(**case)
    b = oracle.gdn_reference(**packed, initial_state=case["initial_state"],
                             cu_seqlens=np.array([0, 7, 14], np.int32))
    assert oracle.rel_l2(a[0].reshape(1, 14, 2, 3), b[0]) <= 1e-14
    assert oracle.rel_l2(a[1], b[1]) <= 1e-14


# ----------------------------------------------------------------------------- chunked

@pytest.mark.parametrize("T", [1, 63, 64, 65, 130])
@pytest.mark.parametrize("decay", ["strong", "mild", "none"])
def test_chunked_matches_recurrence(T, decay):
    lo, hi = {"strong": (-21.0, -19.0), "mild": (-0.3, -0.001), "none": (0.0, 0.0)}[decay]
    case = random_gdn_case(_rng(140 + T), B=1, T=T, H=1, HV=2, K=8, V=6, g_low=lo, g_high=hi)
    with np.errstate(over="raise", invalid="raise", divide="raise"):   # underflow is fine
        c = oracle.gdn_reference_chunked(**case)
    a = oracle.gdn_reference(**case)
    assert np.isfinite(c[0]).all() and np.isfinite(c[1]).all()
    assert _close(c, a)


@pytest.mark.parametrize("H,HV", [(3, 3), (2, 4), (1, 3)])
def test_chunked_matches_recurrence_gva_varlen(H, HV):
    case = random_gdn_case(_rng(150 + HV), B=1, T=150, H=H, HV=HV, K=16, V=8,
                           cu_seqlens=[0, 64, 65, 150], dtype=np.float16)
    for chunk in (64, 7):
        assert _close(oracle.gdn_reference_chunked(**case, chunk=chunk), oracle.gdn_reference(**case))


@pytest.mark.parametrize("at", [0, 10, 63, 64, 69])
def test_chunked_matches_recurrence_with_minus_inf_decay(at):
    """g = -inf (a full reset) at a chunk's first, middle or last token: the chunked algebra
    sums g over each (j, i] segment instead of differencing prefix sums (-inf - -inf)."""
    case = random_gdn_case(_rng(145 + at), B=1, T=70, H=1, HV=2, K=4, V=4)
    case["g"][0, at, 1] = -np.inf
    c = oracle.gdn_reference_chunked(**case)
    a = oracle.gdn_reference(**case)
    assert np.isfinite(c[0]).all() and np.isfinite(c[1]).all()
    assert _close(c, a)


def test_no_sequences():
    """cu_seqlens = [0] (N = 0, T = 0), as the kernels' API accepts it: empty results."""
    case = random_gdn_case(_rng(146), B=1, T=0, H=1, HV=2, K=4, V=3, with_state=False)
    cu = np.array([0], np.int32)
    for f in (oracle.gdn_reference, oracle.gdn_reference_mp, oracle.gdn_reference_chunked):
        o, st = f(**case, cu_seqlens=cu)
        assert o.shape == (1, 0, 2, 3) and st.shape == (0, 2, 4, 3)


def test_chunked_without_l2norm():
    rng = _rng(160)
    case = random_gdn_case(rng, B=2, T=70, H=1, HV=2, K=16, V=8)
    for x in ("q", "k"):
        case[x] = case[x] / np.float32(4.0)   # ||k|| ~ 1: the delta rule stays contractive
    assert _close(oracle.gdn_reference_chunked(**case, use_qk_l2norm=False),
                  oracle.gdn_reference(**case, use_qk_l2norm=False))


def test_moderate_size_speed():
    case = random_gdn_case(_rng(161), B=1, T=512, H=4, HV=8, K=64, V=64, dtype=np.float16)
    t0 = time.perf_counter()
    a = oracle.gdn_reference(**case)
    t1 = time.perf_counter()
    c = oracle.gdn_reference_chunked(**case)
    assert _close(a, c)
    assert t1 - t0 < 20.0


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("DFLASH2_ORACLE_PERF") != "1",
                    reason="full-size oracle timing; set DFLASH2_ORACLE_PERF=1")
def test_full_size_recurrence_speed():
    case = random_gdn_case(_rng(162), B=1, T=65536, H=12, HV=12, K=128, V=128, dtype=np.float16)
    t0 = time.perf_counter()
    o, h = oracle.gdn_reference(**case)
    assert time.perf_counter() - t0 < 120.0
    assert np.isfinite(o).all() and np.isfinite(h).all()


# ----------------------------------------------------------------------------- validation

def _base():
    return random_gdn_case(_rng(170), B=1, T=6, H=2, HV=4, K=4, V=3)


BAD = [
    (dict(q=np.zeros((1, 6, 2, 4), np.int32)), TypeError, "q"),
    (dict(q=np.zeros((6, 2, 4), np.float32)), ValueError, "q"),
    (dict(k=np.zeros((1, 6, 2, 5), np.float32)), ValueError, "k"),
    (dict(v=np.zeros((1, 5, 4, 3), np.float32)), ValueError, "v"),
    (dict(v=np.zeros((1, 6, 3, 3), np.float32)), ValueError, "HV"),
    (dict(g=np.zeros((1, 6, 2), np.float32)), ValueError, "g"),
    (dict(g=np.zeros((1, 6, 4), np.int64)), TypeError, "g"),
    (dict(beta=np.zeros((1, 6), np.float32)), ValueError, "beta"),
    (dict(scale=float("inf")), ValueError, "scale"),
    (dict(scale="x"), TypeError, "scale"),
    (dict(scale=10 ** 400), ValueError, "scale"),
    (dict(scale=1e300), ValueError, "scale"),                 # finite, but not in float32
    (dict(cu_seqlens=[[0, 2], [6]], initial_state=None), TypeError, "cu_seqlens"),  # ragged
    (dict(initial_state=np.zeros((2, 4, 4, 3), np.float32)), ValueError, "initial_state"),
    (dict(cu_seqlens=np.array([0, 2, 6], np.float32)), TypeError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([1, 6], np.int32), initial_state=None), ValueError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([0, 5], np.int32), initial_state=None), ValueError, "cu_seqlens"),
    (dict(cu_seqlens=np.array([0, 4, 2, 6], np.int32), initial_state=None), ValueError,
     "cu_seqlens"),
    (dict(cu_seqlens=np.array([6], np.int32), initial_state=None), ValueError, "cu_seqlens"),
    (dict(use_qk_l2norm=1), TypeError, "use_qk_l2norm"),
    (dict(precision="fp32"), ValueError, "precision"),
    # contract B: g <= 0 (-inf taken); g > 0 grew the state, NaN gave NaN, silently
    (dict(g=np.full((1, 6, 4), 0.5, np.float32)), ValueError, "^g: the log decay must be <= 0"),
    (dict(g=np.full((1, 6, 4), np.nan, np.float32)), ValueError, "^g: the log decay"),
    (dict(g=np.full((1, 6, 4), np.inf, np.float32)), ValueError, "^g: the log decay"),
    (dict(q=[[0.0], [0.0, 1.0]]), TypeError, "^q: cannot be read as an array"),     # ragged
    (dict(q=np.zeros((1, 6, 2, 4), np.longdouble)), TypeError, "^q: expected float16"),
    (dict(precision=np.array(["fp64", "mp"])), ValueError, "^precision"),
]


@pytest.mark.parametrize("kw,exc,name", BAD)
def test_bad_arguments_raise_naming_the_argument(kw, exc, name):
    case = _base()
    case.update(kw)
    with pytest.raises(exc, match=name):
        oracle.gdn_reference(**case)


def test_cu_seqlens_needs_batch_one():
    case = random_gdn_case(_rng(171), B=2, T=4, H=1, HV=1, K=2, V=2, with_state=False)
    with pytest.raises(ValueError, match="cu_seqlens"):
        oracle.gdn_reference(**case, cu_seqlens=np.array([0, 4], np.int32))


def test_chunked_form_propagates_non_finite_inputs_as_the_recurrence_does():
    """A NaN or inf in v, k, or beta gave scipy's "array must not contain infs or NaNs" from
    the chunked form's triangular solve (naming nothing, mid-computation); it now propagates:
    every output the token recurrence makes NaN is NaN, and so may be the earlier tokens of
    the same chunk (NaN * 0 in its matrix products); every other output agrees."""
    for name, bad in (("v", np.nan), ("k", np.inf), ("beta", np.nan)):
        case = _base()
        arr = np.array(case[name], dtype=np.float64, copy=True)
        arr[(0, 3) + (0,) * (arr.ndim - 2)] = bad
        case[name] = arr
        o_rec, _ = oracle.gdn_reference(**case)
        o_chk, _ = oracle.gdn_reference_chunked(**case, chunk=4)
        assert np.isnan(o_rec).any()
        assert np.isnan(o_chk[np.isnan(o_rec)]).all()
        assert not np.isnan(o_chk[:, 4:][~np.isnan(o_rec[:, 4:])]).any()   # (after the chunk)
        ok = ~np.isnan(o_chk)
        assert ok.any()
        np.testing.assert_allclose(o_chk[ok], o_rec[ok], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("chunk,exc", [(0, ValueError), (2.5, TypeError), (True, TypeError)])
def test_chunked_bad_chunk(chunk, exc):
    with pytest.raises(exc, match="chunk"):
        oracle.gdn_reference_chunked(**_base(), chunk=chunk)
