"""Oracle metrics (contract part C) on hand cases, the self-check, and import hygiene."""
import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import oracle
from oracle import Mismatch, first_mismatch, max_abs, rel_l2

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- rel_l2

def test_rel_l2_hand():
    assert rel_l2([1.0, 1.0], [1.0, 2.0]) == pytest.approx(1 / math.sqrt(5), rel=1e-15)
    assert rel_l2([3.0, 4.0], [3.0, 4.0]) == 0.0
    assert rel_l2(np.array([[0.0, 2.0]]), np.array([[0.0, 1.0]])) == 1.0


def test_rel_l2_zero_reference():
    # relative to nothing: zero when x is zero too, else inf (fails every bound, however
    # small x is; an absolute norm would pass 1e-6 against the 1e-5 bound)
    assert math.isinf(rel_l2([3.0, 4.0], [0.0, 0.0]))
    assert math.isinf(rel_l2([1e-300, 0.0], [0.0, 0.0]))
    assert rel_l2([0.0, -0.0], [0.0, 0.0]) == 0.0
    assert rel_l2(np.zeros((0, 3)), np.zeros((0, 3))) == 0.0


def test_rel_l2_of_norms_past_float64():
    # ||ref|| = 2.1e308 overflows float64 though every element is finite
    x = np.array([1.5e308, 1.5e308])
    assert rel_l2(x, x) == 0.0
    assert rel_l2(0.5 * x, x) == pytest.approx(0.5, rel=1e-15)
    assert rel_l2(-x, x) == pytest.approx(2.0, rel=1e-15)       # the difference overflows too
    assert rel_l2(x, 1e-300 * x) == pytest.approx(1e300, rel=1e-12)


def test_metrics_refuse_what_float64_cannot_hold():
    with pytest.raises(ValueError, match="x: integers past 2..53"):
        max_abs(np.array([2 ** 53 + 1]), np.array([2 ** 53]))
    with pytest.raises(ValueError, match="ref: integers past 2..53"):
        rel_l2(np.array([1], np.uint64), np.array([2 ** 63], np.uint64))
    assert max_abs(np.array([2 ** 53]), np.array([-2 ** 53])) == 2.0 ** 54
    if np.dtype(np.longdouble).itemsize > 8:
        with pytest.raises(TypeError, match="x: dtype .* wider than float64"):
            rel_l2(np.ones(2, np.longdouble), np.ones(2))


def test_rel_l2_nan_and_inf():
    assert math.isnan(rel_l2([np.nan, 1.0], [1.0, 1.0]))
    assert math.isnan(rel_l2([1.0, 1.0], [1.0, np.nan]))
    assert math.isinf(rel_l2([np.inf, 1.0], [1.0, 1.0]))
    assert math.isnan(rel_l2([1.0, 1.0], [np.inf, 1.0]))


def test_rel_l2_computed_in_float64():
    ref = np.array([1.0, 1.0], np.float16)
    x = np.array([1.0, np.float16(1.0) + np.float16(2.0 ** -10)], np.float16)
    assert rel_l2(x, ref) == pytest.approx(2.0 ** -10 / math.sqrt(2), rel=1e-15)
    big = np.array([1e200, 1e200])
    assert rel_l2(big * 1.5, big) == pytest.approx(0.5, rel=1e-15)       # no overflow
    tiny = np.array([1e-200, 1e-200])
    assert rel_l2(tiny * 1.5, tiny) == pytest.approx(0.5, rel=1e-15)     # no underflow
    # finite inputs whose difference overflows float64: the finite ratio, not inf
    assert rel_l2([1e308], [-1e308]) == 2.0
    assert rel_l2([1e308, 3.0], [-1e308, 0.0]) == pytest.approx(2.0, rel=1e-15)
    assert math.isinf(rel_l2([np.inf], [1e308]))                          # still inf in x


def test_rel_l2_shape_mismatch():
    with pytest.raises(ValueError, match="shape"):
        rel_l2(np.zeros(3), np.zeros(4))


# ----------------------------------------------------------------------------- max_abs

def test_max_abs_hand():
    assert max_abs([1.0, 5.0], [2.0, 2.0]) == 3.0
    assert max_abs(np.float32([0.5]), np.float64([0.25])) == 0.25
    assert max_abs(np.zeros(0), np.zeros(0)) == 0.0
    assert math.isnan(max_abs([1.0, np.nan], [1.0, 1.0]))
    with pytest.raises(ValueError, match="shape"):
        max_abs(np.zeros(2), np.zeros(3))


# ----------------------------------------------------------------------------- first_mismatch

def test_first_mismatch_identical_is_none():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert first_mismatch(a, a.copy()) is None
    assert first_mismatch(np.zeros((0, 5), np.float16), np.zeros((0, 5), np.float16)) is None


def test_first_mismatch_finds_first_index():
    a = np.zeros((2, 3, 4), np.float16)
    b = a.copy()
    b[1, 2, 0] = 1.0
    b[1, 2, 3] = 2.0
    m = first_mismatch(a, b)
    assert isinstance(m, Mismatch) and m.reason == "value"
    assert m.index == (1, 2, 0) and m.flat_index == 1 * 12 + 2 * 4 + 0
    assert m.a_value == 0.0 and m.b_value == 1.0 and m.count == 2
    assert m.a_bytes == "0000" and m.b_bytes == "003c"
    assert "(1, 2, 0)" in str(m)


def test_first_mismatch_signed_zero_differs():
    m = first_mismatch(np.array([1.0, 0.0], np.float32), np.array([1.0, -0.0], np.float32))
    assert m is not None and m.index == (1,)


def test_first_mismatch_nan_payloads_compare_by_bytes():
    n1 = np.array([0x7FC00000], np.uint32).view(np.float32)
    n2 = np.array([0x7FC00001], np.uint32).view(np.float32)
    assert first_mismatch(n1, n1.copy()) is None            # same NaN bits: equal
    m = first_mismatch(n1, n2)                              # different payload: differ
    assert m is not None and m.index == (0,)
    h1 = np.array([0x7E00, 0xFE00], np.uint16).view(np.float16)
    assert first_mismatch(h1, h1.copy()) is None
    assert first_mismatch(h1, h1[::-1].copy()).index == (0,)  # +NaN vs -NaN


def test_first_mismatch_layout_independent():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert first_mismatch(a, np.asfortranarray(a)) is None
    t = a.T                                                 # non-contiguous view
    m = first_mismatch(t, np.ascontiguousarray(t) * 1)
    assert m is None
    c = np.ascontiguousarray(t)
    c[3, 1] = -1
    assert first_mismatch(t, c).index == (3, 1)


def test_first_mismatch_shape_and_dtype():
    m = first_mismatch(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    assert m.reason == "shape" and m.a_value == (2, 3) and m.b_value == (3, 2)
    assert "shape" in str(m)
    m = first_mismatch(np.zeros(3, np.float32), np.zeros(3, np.float16))
    assert m.reason == "dtype" and m.a_value == "float32" and m.b_value == "float16"


def test_first_mismatch_scalar_arrays():
    assert first_mismatch(np.float32(1.5), np.float32(1.5)) is None
    m = first_mismatch(np.array(1.5, np.float32), np.array(2.5, np.float32))
    assert m.index == () and m.flat_index == 0


# ----------------------------------------------------------------------------- selfcheck, hygiene

def test_selfcheck_passes(capsys):
    assert oracle.run_selfcheck(verbose=True) is True
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("oracle ")]
    assert len(lines) >= 9 and all("FAIL" not in ln for ln in lines)
    assert oracle.run_selfcheck(verbose=False) is True
    assert capsys.readouterr().out == ""


def test_oracle_never_imports_numba():
    code = ("import sys, oracle, oracle.selfcheck; oracle.run_selfcheck(False); "
            "bad = [m for m in sys.modules if m == 'numba' or m.startswith('numba.') "
            "or m.startswith('dflash2_numba')]; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_public_names():
    for name in ("attention_reference", "gdn_reference", "gdn_reference_chunked", "rel_l2",
                 "max_abs", "first_mismatch", "run_selfcheck", "attention_reference_mp",
                 "gdn_reference_mp"):
        assert callable(getattr(oracle, name)), name


def test_max_abs_overflowing_difference_is_inf_without_warning():
    # finite inputs whose difference passes float64's range: the true |x - ref| is
    # 2e308 > DBL_MAX, so inf, with no floating-point warning (rel_l2 handles the same pair
    # silently); under warnings-as-errors max_abs used to raise instead of returning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isinf(oracle.max_abs([1e308], [-1e308]))
        assert math.isinf(oracle.max_abs(np.array([1e308, 1.0]), np.array([-1e308, 1.0])))
        assert oracle.rel_l2([1e308], [-1e308]) == 2.0
    with np.errstate(all="raise"):
        assert math.isinf(oracle.max_abs([-1e308], [1e308]))
    # NaN conventions unchanged
    assert math.isnan(oracle.max_abs([np.inf], [np.inf]))
    assert math.isnan(oracle.max_abs([1.0, np.nan], [1.0, 1.0]))


def test_ulp16_hand():
    """float16 spacing just above |f16(x)|: 2**-10 at 1 (and just below it, rounding to 1),
    2**-24 among the subnormals and at 0, 2**-9 at 3."""
    got = oracle.ulp16(np.array([1.0, -1.0, 0.99999, 0.0, 1e-7, 3.0]))
    assert got.tolist() == [2.0 ** -10, 2.0 ** -10, 2.0 ** -10, 2.0 ** -24, 2.0 ** -24, 2.0 ** -9]


def test_ulp16_at_the_top_of_float16():
    """At 65504, the largest finite float16, the next one up is inf: the spacing is its
    binade's, 32 (it was inf, so fp16_excess let any output of +-65504 pass); past float16's
    range (f16(x) = inf) it is inf; no warning either way."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = oracle.ulp16(np.array([65504.0, -65504.0, 65000.0, 32768.0, 1e6]))
    assert got.tolist() == [32.0, 32.0, 32.0, 32.0, math.inf]
    # a saturated output is judged like any other: 65504 against 60000 is far out of bounds
    out = np.array([65504.0, 1.0], np.float16)
    assert oracle.fp16_excess(out, np.array([60000.0, 1.0]), 0.0) == 5504.0 - 16.0
    assert oracle.fp16_excess(np.array([-65504.0], np.float16), np.array([0.0]), 1e-3) == \
        pytest.approx(65504.0 - 16.0 - 1e-3)
    # and one within its rounding passes: 65504 is f16 of anything in [65488, 65520)
    assert oracle.fp16_excess(out, np.array([65500.0, 1.0]), 0.0) <= 0


def test_fp16_bounds_follow_one_rounding_of_a_bounded_result():
    """An FP32 result within the bound, rounded to FP16, passes both FP16 checks; one FP16
    step past that, or a 1 % scale, fails; the bounds never look at the FP32 result."""
    rng = np.random.default_rng(4)
    ref = rng.standard_normal(4096) * 3.0
    b = 1e-5
    abs_b = b * np.max(np.abs(ref))
    rms = np.sqrt(np.mean(ref * ref))
    y = (ref + rng.uniform(-1, 1, ref.size) * 0.9 * b * rms).astype(np.float32)
    out16 = y.astype(np.float16)
    assert rel_l2(y, ref) <= b
    assert rel_l2(out16, ref) <= oracle.fp16_rel_l2_bound(ref, b)
    assert oracle.fp16_excess(out16, ref, abs_b) <= 0
    bad = out16.copy()
    i = int(np.argmax(np.abs(ref)))
    bad[i] = np.nextafter(np.nextafter(bad[i], np.float16(np.inf)), np.float16(np.inf))
    assert oracle.fp16_excess(bad, ref, abs_b) > 0
    scaled = (out16.astype(np.float32) * np.float32(1.01)).astype(np.float16)
    assert rel_l2(scaled, ref) > oracle.fp16_rel_l2_bound(ref, b)
    assert oracle.fp16_excess(scaled, ref, abs_b) > 0
    # the bound's terms: 2**-11 (1 + b) + b, and the subnormal term for a tiny reference
    assert oracle.fp16_rel_l2_bound(np.ones(4), b) == pytest.approx(
        2.0 ** -11 * (1 + b) + b + 2.0 ** -25 * 2 / 2, rel=1e-15)
    assert oracle.fp16_rel_l2_bound(np.zeros(3), b) == math.inf


def test_fp16_excess_special_values():
    ref = np.array([1.0, 2.0])
    assert math.isnan(oracle.fp16_excess(np.array([np.nan, 2.0], np.float16), ref, 0.0))
    assert oracle.fp16_excess(np.array([np.inf, 2.0], np.float16), ref, 0.0) == math.inf
    assert oracle.fp16_excess(np.zeros(0, np.float16), np.zeros(0), 0.0) == -math.inf
    assert oracle.fp16_excess(np.array([1.0, 2.0], np.float16), ref, 0.0) <= 0


@pytest.mark.parametrize("call,exc,name", [
    (lambda: oracle.max_abs_bound(None, 1e-3), TypeError, "ref"),
    (lambda: oracle.max_abs_bound(np.array([3 + 4j]), 1e-3), TypeError, "ref"),  # was 0.003
    (lambda: oracle.max_abs_bound(np.ones(2), None), TypeError, "rel_bound"),
    (lambda: oracle.max_abs_bound(np.ones(2), "x"), TypeError, "rel_bound"),
    (lambda: oracle.max_abs_bound(np.ones(2), -1.0), ValueError, "rel_bound"),   # was -1.0
    (lambda: oracle.max_abs_bound(np.ones(2), float("nan")), ValueError, "rel_bound"),
    (lambda: oracle.fp16_rel_l2_bound(None, 1e-3), TypeError, "ref"),
    (lambda: oracle.fp16_rel_l2_bound(np.ones(2), float("inf")), ValueError, "fp32_rel_bound"),
    (lambda: oracle.fp16_excess(np.ones(2, np.float16), np.ones(2), -1.0), ValueError,
     "fp32_abs_bound"),
    (lambda: oracle.fp16_excess(np.ones(2, np.float16), np.ones(2), "x"), TypeError,
     "fp32_abs_bound"),
    (lambda: oracle.ulp16(None), TypeError, "x"),
    (lambda: oracle.ulp16(np.array([1j])), TypeError, "x"),
    (lambda: oracle.rel_l2([[1.0], [1.0, 2.0]], [1.0, 2.0]), TypeError, "x"),       # ragged
    (lambda: oracle.max_abs([1.0, 2.0], [[1.0], [1.0, 2.0]]), TypeError, "ref"),
    (lambda: oracle.first_mismatch([[1], [1, 2]], [1]), TypeError, "a"),
    (lambda: oracle.qk_scale_f32(None, 1.0), TypeError, "scale"),
    (lambda: oracle.qk_scale_f32(1.0, "x"), TypeError, "k_scale"),
])
def test_metric_helpers_name_a_bad_argument(call, exc, name):
    """Before: None / complex references gave nan or dropped the imaginary part, a negative
    or NaN bound was used as given, a ragged list gave numpy's error naming nothing."""
    with pytest.raises(exc, match=f"^{name}: "):
        call()


def test_a_bound_derived_from_a_reference_may_be_nan_or_inf():
    """What max_abs_bound gives for a NaN / infinite reference reaches fp16_excess as its
    bound: NaN makes the excess NaN (never within), inf puts every finite element within."""
    out = np.array([1.0, 2.0], np.float16)
    assert math.isnan(oracle.fp16_excess(out, np.array([1.0, 2.0]), float("nan")))
    assert oracle.fp16_excess(out, np.array([1.0, 3.0]), float("inf")) == -math.inf
    assert math.isnan(oracle.max_abs_bound(np.array([np.nan, 1.0]), 1e-3))
