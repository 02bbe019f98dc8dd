"""Oracle for contract part A (verification attention): fp64 vs mpmath, hand cases, validation."""
import time

import mpmath
import numpy as np
import pytest

import oracle
from oracle.attention import E4M3_TABLE, decode_e4m3, decode_e4m3_bits, qk_scale_f32, row_lengths_of
from oracle.selfcheck import encode_e4m3, random_attention_case


def _rng(seed):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------- E4M3 decode

def test_e4m3_table_matches_bit_fields():
    for c in range(256):
        want = decode_e4m3_bits(c)
        got = E4M3_TABLE[c]
        if c in (0x7F, 0xFF):
            assert np.isnan(want) and np.isnan(got)
        else:
            assert want == got and np.signbit(want) == np.signbit(got), hex(c)
    assert np.signbit(E4M3_TABLE[0x80]) and not np.signbit(E4M3_TABLE[0x00])
    assert np.nanmax(E4M3_TABLE) == 448.0 and np.nanmin(E4M3_TABLE) == -448.0
    assert E4M3_TABLE[0x01] == 2.0 ** -9 and E4M3_TABLE[0x08] == 2.0 ** -6
    assert E4M3_TABLE[0x38] == 1.0 and E4M3_TABLE[0xB8] == -1.0


def test_decode_e4m3_bits_refuses_what_is_not_a_code():
    for bad, exc in ((1.7, TypeError), (True, TypeError), (256, ValueError), (-1, ValueError)):
        with pytest.raises(exc, match="code"):
            decode_e4m3_bits(bad)


def test_row_lengths_of_refuses_bad_input():
    with pytest.raises(TypeError, match="seq_lens"):
        row_lengths_of([5.9], 2)
    with pytest.raises(ValueError, match="seq_lens"):
        row_lengths_of([[5, 6]], 2)
    with pytest.raises(ValueError, match="q_len"):
        row_lengths_of([5], 0)


def test_decode_e4m3_rejects_non_uint8():
    with pytest.raises(TypeError, match="codes"):
        decode_e4m3(np.zeros(3, np.int32))
    np.testing.assert_array_equal(decode_e4m3(np.array([0x38, 0x40], np.uint8)), [1.0, 2.0])


def test_qk_scale_is_float32_rounded():
    s, ks = 0.1, 0.3
    want = float(np.float32(np.float32(s) * np.float32(ks)))
    assert qk_scale_f32(s, ks) == want
    assert want != s * ks


# ----------------------------------------------------------------------------- fp64 vs mp

@pytest.mark.parametrize("Hq,Hkv", [(2, 2), (4, 2), (6, 2)])   # GVA ratios 1, 2, 3
def test_fp64_matches_mp(Hq, Hkv):
    case = random_attention_case(_rng(10 + Hq), B=2, Q=3, Hq=Hq, Hkv=Hkv, D=8, page_size=3,
                                 seq_lens=[4, 8], scale=0.7, k_scale=0.8, v_scale=1.3)
    a = oracle.attention_reference(**case)
    b = oracle.attention_reference(**case, precision="mp")
    assert a.dtype == np.float64 and a.shape == (2, 3, Hq, 8)
    assert oracle.rel_l2(a, b) <= 1e-12
    assert oracle.max_abs(a, b) <= 1e-12 * np.abs(b).max()


def test_fp64_matches_mp_row_lengths_with_empty_rows():
    rl = [[0, 2, 9, 5], [4, -3, 0, 10]]
    case = random_attention_case(_rng(20), B=2, Q=4, Hq=3, Hkv=1, D=8, page_size=4,
                                 seq_lens=[7, 9], row_lengths=rl, v_scale=2.0)
    a = oracle.attention_reference(**case)
    b = oracle.attention_reference(**case, precision="mp")
    assert oracle.rel_l2(a, b) <= 1e-12
    empty = np.array(rl) <= 0
    assert not a[empty].any() and not np.signbit(a[empty]).any()
    assert np.abs(a[~empty]).max() > 0


def test_mp_values_are_mpf():
    case = random_attention_case(_rng(21), B=1, Q=2, Hq=2, Hkv=1, D=4, page_size=2, seq_lens=[3])
    m = oracle.attention_reference_mp(**case)
    assert m.dtype == object and m.shape == (1, 2, 2, 4)
    assert isinstance(m[0, 0, 0, 0], mpmath.mpf)
    f = oracle.attention_reference(**case, precision="mp")
    assert f[0, 1, 1, 3] == float(m[0, 1, 1, 3])


# ----------------------------------------------------------------------------- hand cases

def _single_page_case(rng, D=16, ps=4, Hkv=1, npages=3):
    k = encode_e4m3(rng.standard_normal((npages, ps, Hkv, D)))
    v = encode_e4m3(rng.standard_normal((npages, ps, Hkv, D)) * 4)
    return k, v


def test_one_visible_key_gives_v_times_v_scale():
    rng = _rng(30)
    k, v = _single_page_case(rng)
    q = rng.standard_normal((1, 1, 2, 16)).astype(np.float16)
    bt = np.array([[2, 0, 1]], np.int32)                  # token 0 -> page 2, slot 0
    for prec in ("fp64", "mp"):
        out = oracle.attention_reference(q, k, v, bt, np.array([1], np.int32), scale=0.37,
                                         k_scale=3.0, v_scale=0.75, precision=prec)
        want = E4M3_TABLE[v[2, 0, 0]] * 0.75
        np.testing.assert_array_equal(out[0, 0, 0], want)
        np.testing.assert_array_equal(out[0, 0, 1], want)


def test_equal_scores_give_mean_of_v():
    rng = _rng(31)
    k, v = _single_page_case(rng)
    bt = np.array([[1, 2, 0]], np.int32)
    n = 7                                                 # tokens 0..6: page 1 (4) + page 2 (3)
    vis = np.concatenate([v[1, :, 0], v[2, :3, 0]])
    mean = E4M3_TABLE[vis].mean(axis=0)
    # zero query: every score is 0
    q0 = np.zeros((1, 1, 1, 16), np.float16)
    out = oracle.attention_reference(q0, k, v, bt, np.array([n], np.int32), scale=1.0)
    np.testing.assert_allclose(out[0, 0, 0], mean, rtol=0, atol=1e-14)
    # equal keys: a nonzero query, all keys identical
    k_eq = np.broadcast_to(k[:1, :1], k.shape).copy()
    q = rng.standard_normal((1, 1, 1, 16)).astype(np.float16)
    out = oracle.attention_reference(q, k_eq, v, bt, np.array([n], np.int32), scale=0.5,
                                     v_scale=2.0)
    np.testing.assert_allclose(out[0, 0, 0], 2.0 * mean, rtol=0, atol=1e-13)


def test_row_without_visible_key_is_zero():
    rng = _rng(32)
    k, v = _single_page_case(rng)
    q = rng.standard_normal((2, 3, 1, 16)).astype(np.float16)
    bt = np.array([[0, 1, 2], [1, 2, 0]], np.int32)
    # request 0: seq_len 1 < Q -> rows 0, 1 see nothing (L = -1, 0), row 2 sees one key
    # request 1: seq_len 0 -> nothing at all
    seq = np.array([1, 0], np.int32)
    out = oracle.attention_reference(q, k, v, bt, seq, scale=1.0)
    assert not out[0, :2].any() and not out[1].any()
    assert not np.signbit(out[0, :2]).any()
    np.testing.assert_array_equal(out[0, 2, 0], E4M3_TABLE[v[0, 0, 0]])


def test_default_lengths_equal_explicit_row_lengths():
    case = random_attention_case(_rng(33), B=3, Q=4, Hq=2, Hkv=1, D=16, page_size=5,
                                 seq_lens=[4, 11, 17])
    L = row_lengths_of(case["seq_lens"], 4)
    np.testing.assert_array_equal(L, [[1, 2, 3, 4], [8, 9, 10, 11], [14, 15, 16, 17]])
    a = oracle.attention_reference(**case)
    b = oracle.attention_reference(**case, row_lengths=L.astype(np.int32))
    np.testing.assert_array_equal(a, b)
    # explicit row_lengths override: every row sees the full context
    full = np.repeat(case["seq_lens"][:, None], 4, axis=1)
    c = oracle.attention_reference(**case, row_lengths=full)
    np.testing.assert_array_equal(c[:, 3], a[:, 3])
    assert not np.array_equal(c[:, 0], a[:, 0])


def test_row_lengths_against_naive_loop():
    """Independent per-row computation with per-token page lookup, float64."""
    rng = _rng(34)
    rl = np.array([[3, 0, 6], [1, 5, 2]], np.int32)
    case = random_attention_case(rng, B=2, Q=3, Hq=6, Hkv=2, D=16, page_size=2,
                                 seq_lens=[6, 6], row_lengths=rl, scale=0.3, k_scale=0.9,
                                 v_scale=1.5)
    out = oracle.attention_reference(**case)
    qk = float(np.float32(np.float32(0.3) * np.float32(0.9)))
    for b in range(2):
        for t in range(3):
            for h in range(6):
                n = rl[b, t]
                if n <= 0:
                    assert not out[b, t, h].any()
                    continue
                ks, vs = [], []
                for j in range(n):
                    page = case["block_table"][b, j // 2]
                    ks.append(E4M3_TABLE[case["k_cache"][page, j % 2, h // 3]])
                    vs.append(E4M3_TABLE[case["v_cache"][page, j % 2, h // 3]])
                s = np.array(ks) @ case["q"][b, t, h].astype(np.float64) * qk
                p = np.exp(s - s.max())
                want = (p @ np.array(vs)) / p.sum() * 1.5
                np.testing.assert_allclose(out[b, t, h], want, rtol=1e-13, atol=1e-13)


def test_gva_head_mapping():
    """With one visible key, query head h returns V of KV head h // G."""
    rng = _rng(35)
    Hkv, G = 3, 2
    k, v = _single_page_case(rng, Hkv=Hkv)
    q = rng.standard_normal((1, 1, Hkv * G, 16)).astype(np.float16)
    out = oracle.attention_reference(q, k, v, np.array([[1]], np.int32), np.array([1], np.int32),
                                     scale=1.0)
    for h in range(Hkv * G):
        np.testing.assert_array_equal(out[0, 0, h], E4M3_TABLE[v[1, 0, h // G]])


def test_qk_scale_rounding_is_used():
    rng = _rng(36)
    case = random_attention_case(rng, B=1, Q=1, Hq=1, Hkv=1, D=16, page_size=8, seq_lens=[8],
                                 scale=0.1, k_scale=0.3, kv_std=40.0, q_std=8.0, strided=False)
    out = oracle.attention_reference(**case)[0, 0, 0]
    K = E4M3_TABLE[case["k_cache"][case["block_table"][0, 0], :, 0]]
    V = E4M3_TABLE[case["v_cache"][case["block_table"][0, 0], :, 0]]
    s0 = K @ case["q"][0, 0, 0].astype(np.float64)

    def attn(qk):
        s = s0 * qk
        p = np.exp(s - s.max())
        return p @ V / p.sum()

    assert oracle.rel_l2(out, attn(qk_scale_f32(0.1, 0.3))) <= 1e-14
    assert oracle.rel_l2(out, attn(0.1 * 0.3)) > 1e-11


def test_strided_cache_equals_contiguous():
    rng = _rng(37)
    case = random_attention_case(rng, B=2, Q=2, Hq=4, Hkv=2, D=16, page_size=4, seq_lens=[5, 9])
    assert not case["k_cache"].flags.c_contiguous
    a = oracle.attention_reference(**case)
    case2 = dict(case, k_cache=np.ascontiguousarray(case["k_cache"]),
                 v_cache=np.asfortranarray(case["v_cache"]))
    np.testing.assert_array_equal(a, oracle.attention_reference(**case2))


def test_large_context_is_fast():
    """262144 tokens, B=1, Q=8, Hq=6, Hkv=1, D=256, page 3296: a few seconds."""
    rng = _rng(38)
    ps, T, D = 3296, 262144, 256
    npg = -(-T // ps)
    P = npg + 2

    def cache():
        c = rng.integers(0, 0x7F, size=(P, ps, 1, D), dtype=np.uint8)   # 0x00..0x7E: no NaN
        return c | (rng.integers(0, 2, size=c.shape, dtype=np.uint8) << 7)

    k, v = cache(), cache()
    bt = rng.permutation(P)[:npg][None].astype(np.int32)
    q = (rng.standard_normal((1, 8, 6, D)) * 0.05).astype(np.float16)
    t0 = time.perf_counter()
    out = oracle.attention_reference(q, k, v, bt, np.array([T], np.int32), scale=D ** -0.5,
                                     k_scale=0.02, v_scale=0.5)
    dt = time.perf_counter() - t0
    assert out.shape == (1, 8, 6, D) and np.isfinite(out).all()
    assert np.abs(out).max() <= 448 * 0.5
    assert dt < 30.0, dt
    # the last row equals a run that sees the same context through row_lengths
    rl = np.full((1, 1), T, np.int32)
    last = oracle.attention_reference(q[:, 7:], k, v, bt, np.array([T], np.int32),
                                      scale=D ** -0.5, k_scale=0.02, v_scale=0.5, row_lengths=rl)
    assert oracle.rel_l2(last[0, 0], out[0, 7]) <= 1e-14


# ----------------------------------------------------------------------------- validation

def _base():
    return random_attention_case(_rng(40), B=2, Q=2, Hq=4, Hkv=2, D=8, page_size=4,
                                 seq_lens=[5, 7], strided=False)


def _mut(**kw):
    c = _base()
    c.update(kw)
    return c


BAD = [
    (lambda c: _mut(q=c["q"].astype(np.float32)), TypeError, "q"),
    (lambda c: _mut(q=c["q"][0]), ValueError, "q"),
    (lambda c: _mut(q=np.zeros((2, 2, 3, 8), np.float16)), ValueError, "Hq"),
    (lambda c: _mut(k_cache=c["k_cache"].astype(np.int8)), TypeError, "k_cache"),
    (lambda c: _mut(v_cache=c["v_cache"][:, :2]), ValueError, "v_cache"),
    (lambda c: _mut(k_cache=c["k_cache"][..., :4], v_cache=c["v_cache"][..., :4]), ValueError,
     "k_cache"),
    (lambda c: _mut(block_table=c["block_table"].astype(np.float32)), TypeError, "block_table"),
    (lambda c: _mut(block_table=c["block_table"][:1]), ValueError, "block_table"),
    (lambda c: _mut(block_table=c["block_table"] + 100), ValueError, "block_table"),
    (lambda c: _mut(block_table=-c["block_table"] - 1), ValueError, "block_table"),
    (lambda c: _mut(block_table=c["block_table"][:, :1]), ValueError, "block_table"),
    (lambda c: _mut(seq_lens=c["seq_lens"].astype(np.float64)), TypeError, "seq_lens"),
    (lambda c: _mut(seq_lens=c["seq_lens"][:1]), ValueError, "seq_lens"),
    (lambda c: _mut(row_lengths=np.ones((2, 3), np.int32)), ValueError, "row_lengths"),
    (lambda c: _mut(row_lengths=np.ones((2, 2), np.float32)), TypeError, "row_lengths"),
    (lambda c: _mut(row_lengths=np.full((2, 2), 1000, np.int32)), ValueError, "row_lengths"),
    (lambda c: _mut(scale=float("nan")), ValueError, "scale"),
    (lambda c: _mut(scale="1"), TypeError, "scale"),
    (lambda c: _mut(k_scale=0.0), ValueError, "k_scale"),
    (lambda c: _mut(v_scale=float("inf")), ValueError, "v_scale"),
    (lambda c: _mut(v_scale=-1.0), ValueError, "v_scale"),
    (lambda c: dict(_base(), precision="fp32"), ValueError, "precision"),
    (lambda c: _mut(scale=10 ** 400), ValueError, "scale"),          # past float64: no traceback
    (lambda c: _mut(k_scale=10 ** 400), ValueError, "k_scale"),
    # positive in float64 but 0 in float32, the type the contract reads them in
    (lambda c: _mut(k_scale=1e-50), ValueError, "k_scale"),
    (lambda c: _mut(v_scale=1e-50), ValueError, "v_scale"),
    # lengths past int32 are refused, not wrapped (2**64 - 1 as int64 is -1: an empty row)
    (lambda c: _mut(row_lengths=np.full((2, 2), 2 ** 64 - 1, np.uint64)), ValueError,
     "row_lengths"),
    (lambda c: _mut(seq_lens=np.full(2, 2 ** 63 + 5, np.uint64)), ValueError, "seq_lens"),
    (lambda c: _mut(seq_lens=np.full(2, 2 ** 31, np.int64)), ValueError, "seq_lens"),
    (lambda c: _mut(q=[[0.0], [0.0, 1.0]]), TypeError, "^q: cannot be read as an array"),
    (lambda c: _mut(k_cache=[[0], [0, 1]]), TypeError, "^k_cache: cannot be read"),
    # no KV head: named on the cache (it blamed q)
    (lambda c: _mut(k_cache=c["k_cache"][:, :, :0], v_cache=c["v_cache"][:, :, :0]),
     ValueError, "^k_cache: KV heads Hkv must be >= 1"),
    (lambda c: dict(_base(), precision=np.array(["fp64", "mp"])), ValueError, "^precision"),
]


@pytest.mark.parametrize("make,exc,name", BAD)
def test_bad_arguments_raise_naming_the_argument(make, exc, name):
    case = make(_base())
    with pytest.raises(exc, match=name):
        oracle.attention_reference(**case)


def test_unused_block_table_entries_are_not_checked():
    c = _base()
    bt = np.concatenate([c["block_table"], np.full((2, 3), -1, np.int32)], axis=1)
    a = oracle.attention_reference(**dict(c, block_table=bt))
    np.testing.assert_array_equal(a, oracle.attention_reference(**c))


@pytest.mark.parametrize("rows", [None, [[1, 2]]])
def test_nan_v_code_reaches_only_the_rows_that_see_its_key(rows):
    """A NaN V byte at key 1, column 5: row 0 (L = 1) does not see it and stays finite (its
    probability there is exactly 0, never multiplied by the NaN); row 1 sees it and is NaN
    in column 5 only. fp64 and mp agree, NaN for NaN."""
    c = random_attention_case(_rng(50), B=1, Q=2, Hq=2, Hkv=1, D=8, page_size=4,
                              seq_lens=[2], row_lengths=rows, strided=False)
    tok = 1
    page = c["block_table"][0, tok // 4]
    c["v_cache"][page, tok % 4, 0, 5] = 0x7F
    for precision in ("fp64", "mp"):
        out = oracle.attention_reference(**c, precision=precision)
        out = np.asarray(out, dtype=np.float64)
        assert np.isfinite(out[0, 0]).all(), precision
        assert np.isnan(out[0, 1, :, 5]).all(), precision
        assert np.isfinite(np.delete(out[0, 1], 5, axis=-1)).all(), precision
    a = oracle.attention_reference(**c)
    b = np.asarray(oracle.attention_reference(**c, precision="mp"), dtype=np.float64)
    assert oracle.first_mismatch(np.isnan(a), np.isnan(b)) is None
    fin = np.isfinite(b)
    assert oracle.max_abs(a[fin], b[fin]) <= 1e-12 * np.abs(b[fin]).max()


def test_attention_reference_q_len_zero_default_lengths():
    # Q = 0 has no rows: the causal default must give the same empty result as an explicit
    # [B, 0] row_lengths (not a ValueError naming 'q_len', which is no argument here)
    c = random_attention_case(np.random.default_rng(0), B=2, Q=2, Hq=2, Hkv=1, D=4,
                              page_size=2, seq_lens=[3, 4])
    c0 = dict(c, q=c["q"][:, :0])
    for precision in ("fp64", "mp"):
        a = oracle.attention_reference(**c0, precision=precision)
        b = oracle.attention_reference(**c0, row_lengths=np.zeros((2, 0), np.int32),
                                       precision=precision)
        assert a.shape == b.shape == (2, 0, 2, 4) and a.dtype == np.float64
