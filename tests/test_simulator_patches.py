"""The package's patches to numba's CUDA simulator (``dflash2_numba._simulator``): every
thread of a block works on one shared array, even when two threads reach its allocation at
the same time; ``cuda.fma`` is a correctly rounded FP32 fused multiply-add
(``_compat.fma32_exact``), at the overflow boundary too."""
from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

import dflash2_numba  # noqa: F401  (installs the patches on the simulator)
from dflash2_numba._compat import SIMULATOR, cuda, fma32_exact

simulator_only = pytest.mark.skipif(not SIMULATOR, reason="simulator patches")


class _RaceWindow(dict):
    """An allocation table seen by a thread that looked before another thread stored its
    array: ``get`` finds nothing, but the other thread's array is already in the table."""

    def get(self, key, default=None):
        return default


def _allocate_here(shared):
    return shared.array(8, np.float32)


@simulator_only
def test_shared_array_from_one_line_is_one_array_inside_the_race_window():
    """A thread that found no array (another block thread stored one meanwhile) must get the
    stored array, not make its own: its writes would be lost to the others."""
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared(0)
    stored = _allocate_here(shared)
    shared._allocations = _RaceWindow(shared._allocations)
    assert _allocate_here(shared) is stored


def _sum_kernel(out):
    buf = cuda.shared.array(64, np.float32)
    tid = cuda.threadIdx.x
    buf[tid] = np.float32(tid)
    cuda.syncthreads()
    if tid == 0:
        acc = np.float32(0)
        for i in range(64):
            acc += buf[i]
        out[cuda.blockIdx.x] = acc


@simulator_only
def test_every_thread_of_every_block_writes_the_same_shared_array():
    out = np.zeros(8, np.float32)
    cuda.jit(_sum_kernel)[8, 64](out)
    assert (out == np.float32(64 * 63 // 2)).all()


# --- cuda.fma on the simulator: correctly rounded, overflow boundary included ------------

_FLT_MAX = Fraction(2) ** 128 - Fraction(2) ** 104


def _round_f32(x: Fraction) -> np.float32:
    """``x`` rounded to the nearest float32, ties to even, past the largest finite value to
    inf (IEEE 754 round-to-nearest-even, written out on exact rationals)."""
    if x == 0:
        return np.float32(0.0)
    sign = -1 if x < 0 else 1
    ax = abs(x)
    e = ax.numerator.bit_length() - ax.denominator.bit_length()   # 2**e <= ax < 2**(e+1)
    if Fraction(2) ** e > ax:
        e -= 1
    elif Fraction(2) ** (e + 1) <= ax:
        e += 1
    ulp = Fraction(2) ** (max(e, -126) - 23)             # subnormals share 2**-149
    q = ax / ulp
    n = q.numerator // q.denominator
    rest = q - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    v = n * ulp
    if v > _FLT_MAX:                                     # rounded past FLT_MAX: overflow
        return np.float32(sign * np.inf)
    return np.float32(sign * float(v))                   # v has <= 24 bits: exact in float32


def _exact_fma(a, b, c) -> np.float32:
    return _round_f32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def _same(got, want) -> bool:
    return got.dtype == np.float32 and (got == want and np.signbit(got) == np.signbit(want))


def test_reference_rounding_on_known_values():
    """The hand-written reference itself: the overflow threshold and a few exact cases."""
    mid = Fraction(2) ** 128 - Fraction(2) ** 103
    assert _round_f32(mid) == np.float32(np.inf)                          # a tie: to even (inf)
    assert _round_f32(mid - Fraction(1, 2 ** 149)) == np.finfo(np.float32).max
    assert _round_f32(Fraction(1) + Fraction(1, 2 ** 24)) == np.float32(1.0)   # tie to even
    assert _round_f32(Fraction(1) + Fraction(3, 2 ** 24)) == np.float32(1.0) + np.float32(2.0 ** -22)
    assert _round_f32(Fraction(1, 2 ** 150)) == np.float32(0.0)           # tie to even (0)
    assert _round_f32(Fraction(3, 2 ** 151)) == np.float32(2.0 ** -149)


def test_fma_just_below_the_overflow_midpoint_gives_flt_max():
    """a*b is exactly 2**128 - 2**103 (the midpoint between FLT_MAX and 2**128), c = -1: the
    exact result is below the midpoint and rounds to FLT_MAX; the float64 sum rounds onto
    the midpoint, whose float32 rounding is inf."""
    a, b = np.float32(18631 * 2.0 ** 51), np.float32(1801 * 2.0 ** 52)
    assert Fraction(float(a)) * Fraction(float(b)) == Fraction(2) ** 128 - Fraction(2) ** 103
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # float32 overflow in a cast
        for sa, sc in ((1, -1), (-1, 1)):                   # and the mirror image
            got = fma32_exact(np.float32(sa) * a, b, np.float32(sc))
            want = _exact_fma(np.float32(sa) * a, b, np.float32(sc))
            assert want == np.float32(sa) * np.finfo(np.float32).max
            assert _same(got, want), (sa, got, want)


def _near_overflow_cases():
    """(a, b, c) whose product is an odd multiple of 2**103 between 2**127 and 2**128 (a
    float32 midpoint, the overflow midpoint among them) and whose c nudges the sum off it by
    less than float64 can hold, or lands on it exactly."""
    cs = [0.0, 1.0, -1.0, 2.0 ** -149, -(2.0 ** -149), 2.0 ** 40, -(2.0 ** 40), 2.0 ** 102,
          -(2.0 ** 102), 2.0 ** 103, -(2.0 ** 103)]
    cases = []
    for m in range(2 ** 25 - 1, 2 ** 25 - 41, -2):          # odd: float32 midpoints near 2**128
        f = next((d for d in range(3, 4096, 2) if m % d == 0 and m // d < 2 ** 24), None)
        if f is None:
            continue                                         # not a product of two float32s
        a, b = np.float32(f * 2.0 ** 51), np.float32((m // f) * 2.0 ** 52)
        assert Fraction(float(a)) * Fraction(float(b)) == m * Fraction(2) ** 103
        for c in cs:
            for sign in (1, -1):
                cases.append((np.float32(sign) * a, b, np.float32(c)))
    return cases


def test_fma_near_overflow_ties_match_the_exact_rounding():
    cases = _near_overflow_cases()
    assert len(cases) > 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        bad = [(a, b, c, fma32_exact(a, b, c), _exact_fma(a, b, c)) for a, b, c in cases
               if not _same(fma32_exact(a, b, c), _exact_fma(a, b, c))]
    assert not bad, bad[:5]
    outcomes = {str(_exact_fma(a, b, c)) for a, b, c in cases}
    assert {"inf", "-inf", str(np.finfo(np.float32).max)} <= outcomes    # both sides reached


def test_host_emulations_fma32_matches_the_exact_rounding_near_overflow():
    """The numpy fma of the host emulations (``_emulate_ops.fma32``), over
    all the near-overflow cases at once: the overflow midpoint resolved as the simulator's."""
    from dflash2_numba._emulate_ops import fma32

    a, b, c = (np.array(x, dtype=np.float32) for x in zip(*_near_overflow_cases()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = fma32(a, b, c)
        want = [_exact_fma(*abc) for abc in zip(a, b, c)]
    bad = [(x, y, z, g, w) for x, y, z, g, w in zip(a, b, c, got, want) if not _same(g, w)]
    assert not bad, bad[:5]


def test_fma_stays_correctly_rounded_elsewhere():
    rng = np.random.default_rng(7)
    cases = []
    for _ in range(1500):                      # ordinary magnitudes, cancellation included
        a, b, c = (rng.standard_normal(3) * 2.0 ** rng.integers(-40, 40, 3)).astype(np.float32)
        cases.append((a, b, c))
        cases.append((a, b, np.float32(-(np.float64(a) * np.float64(b)))))
    for _ in range(500):                       # the subnormal range
        a = np.float32(rng.integers(1, 2 ** 24) * 2.0 ** (int(rng.integers(-100, -60)) - 23))
        b = np.float32(rng.integers(1, 2 ** 24) * 2.0 ** (int(rng.integers(-100, -60)) - 23))
        c = np.float32(rng.choice([-1, 1]) * rng.integers(0, 2 ** 24) * 2.0 ** -149)
        cases.append((a, b, c))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        bad = [(a, b, c) for a, b, c in cases if not _same(fma32_exact(a, b, c), _exact_fma(a, b, c))]
    assert not bad, bad[:5]


def _fma_kernel(a, b, c, out):
    out[0] = cuda.fma(a[0], b[0], c[0])


@simulator_only
def test_simulated_cuda_fma_at_the_overflow_midpoint():
    a = np.array([18631 * 2.0 ** 51], np.float32)
    b = np.array([1801 * 2.0 ** 52], np.float32)
    c = np.array([-1.0], np.float32)
    out = np.zeros(1, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cuda.jit(_fma_kernel)[1, 1](a, b, c, out)
    assert out[0] == np.finfo(np.float32).max


@simulator_only
def test_simulated_max_and_min_ignore_a_nan_as_the_gpu_does():
    """numba lowers max / min of two floats to fmaxf / fminf on a GPU (a NaN operand is
    ignored); the patched simulator does the same in kernels, whatever the argument order.
    Three arguments, or a float with an int, numba lowers to compare-and-select, which keeps
    Python's handling; ints and host Python's max are untouched."""
    import math

    @cuda.jit
    def k(out, a, b, c):
        out[0] = max(a[0], b[0])
        out[1] = max(b[0], a[0])
        out[2] = min(a[0], b[0])
        out[3] = min(b[0], a[0])
        out[4] = max(a[0], a[0])
        out[5] = max(a[0], b[0], c[0])           # compare-and-select: Python's nan
        out[6] = max(a[0], 0)

    nan, one, two = np.float32(np.nan), np.float32(1.0), np.float32(2.0)
    out = np.zeros(7, np.float32)
    k[1, 1](out, np.array([nan]), np.array([one]), np.array([two]))
    assert out[:4].tolist() == [1.0, 1.0, 1.0, 1.0]
    assert math.isnan(out[4]) and math.isnan(out[5]) and math.isnan(out[6])

    @cuda.jit
    def ki(out):
        out[0] = max(3, 5, 4)
        out[1] = min(3, -2)

    outi = np.zeros(2, np.int64)
    ki[1, 1](outi)
    assert outi.tolist() == [5, -2]
    assert math.isnan(max(float("nan"), 1.0))          # host Python's max is untouched


def test_max_min_zeros_and_nans_have_the_gpu_bits():
    """PTX ``max.f32`` / ``min.f32`` (numba's ``max`` / ``min`` of two floats) order -0.0
    below +0.0 whatever the argument order, and give the canonical NaN (0x7FFFFFFF) for two
    NaNs; ``fma.rn.f32`` gives the canonical NaN for any NaN result. Python's ``max`` returns
    its first argument for equal zeros and the host propagates the NaN operand's sign. On
    the simulator this checks its patches; on a GPU, the hardware they copy."""
    @cuda.jit
    def k(out, a, b):
        out[0] = max(a[0], b[0])
        out[1] = max(b[0], a[0])
        out[2] = min(a[0], b[0])
        out[3] = min(b[0], a[0])
        out[4] = max(a[1], b[1])
        out[5] = cuda.fma(a[1], b[0], a[0])
        out[6] = cuda.fma(a[2], b[2], a[0])

    u = lambda w: np.uint32(w).view(np.float32)   # noqa: E731
    a = np.array([-0.0, u(0xFFC00000), np.inf], np.float32)
    b = np.array([0.0, u(0xFFC00001), 0.0], np.float32)
    out = np.zeros(7, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        k[1, 1](out, a, b)
    assert [hex(w) for w in out.view(np.uint32)] == [
        "0x0", "0x0", "0x80000000", "0x80000000", "0x7fffffff", "0x7fffffff", "0x7fffffff"]


def test_attention_lse_with_zero_scale_keeps_the_positive_zero_max():
    """scale = 0 (accepted: finite) makes every score +-0 (the sign of q.k); the GPU's
    tile max is +0.0 when any score is +0.0, the record's m too (the simulator took the
    first key's zero)."""
    import dflash2_numba as d2
    import oracle

    c = oracle.random_attention_case(np.random.default_rng(5), B=1, Q=2, Hq=2, Hkv=1, D=64,
                                     page_size=16, seq_lens=[40], strided=False)
    for variant in ("frozen", "tiled"):
        r = d2.verify_attention(**dict(c, scale=0.0), splits=1, out_dtype="float32",
                                variant=variant)
        m = np.asarray(r.lse)[..., 0]
        assert (m.view(np.uint32) == 0).all(), variant


@simulator_only
def test_gdn_fma_groups_give_the_gpu_canonical_nan():
    """The simulator's ``fma2`` / ``fma4`` (gdn/_split_ops.py, used by chunked_split and its
    descendants) are ``cuda.fma``: a NaN result is 0x7FFFFFFF (``fma.rn.f32``), also where
    the host makes its own (inf - inf, 0 * inf: 0xFFC00000) or a NaN operand has other bits."""
    from numba.cuda.simulator import kernelapi

    from dflash2_numba.gdn._split_ops import fma2, fma4

    f = np.float32
    inf, nan_neg = f(np.inf), np.uint32(0xFFC00001).view(np.float32)
    b4 = (f(0.0), f(1.0), f(2.0), f(1.0))
    c4 = (f(0.0), -inf, -inf, nan_neg)
    res = fma4(inf, b4, c4) + fma2(f(0.0), (inf, f(1.0)), (f(1.0), nan_neg))
    sim_fma = kernelapi.FakeCUDAModule.fma        # the patched cuda.fma of a kernel
    want = [sim_fma(None, inf, b, c) for b, c in zip(b4, c4)] + [
        sim_fma(None, f(0.0), inf, f(1.0)), sim_fma(None, f(0.0), f(1.0), nan_neg)]
    assert [int(np.float32(r).view(np.uint32)) for r in res] == [0x7FFFFFFF, 0x7FFFFFFF,
                                                                  0x7FFFFFFF, 0x7FFFFFFF,
                                                                  0x7FFFFFFF, 0x7FFFFFFF]
    assert [np.float32(r).tobytes() for r in res] == [np.float32(w).tobytes() for w in want]


def test_gdn_split_state_nan_from_finite_inputs_matches_chunked():
    """Finite inputs that pass the host checks (g = 0, beta = 1, |v| = 3e38) overflow the
    state to +-inf and inf - inf inside an fma: chunked_split's final state must hold the
    frozen chunked kernel's bytes (canonical NaN), as both run fma.rn.f32 on a GPU."""
    from dflash2_numba.gdn import gdn_prefill

    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 4, 1, 32)).astype(np.float32)
    k = rng.standard_normal((1, 4, 1, 32)).astype(np.float32)
    v = (np.sign(rng.standard_normal((1, 4, 1, 32))) * 3e38).astype(np.float32)
    g = np.zeros((1, 4, 1), np.float32)
    beta = np.ones((1, 4, 1), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        o0, s0 = gdn_prefill(q, k, v, g, beta, variant="chunked", out_dtype="float32")
        o1, s1 = gdn_prefill(q, k, v, g, beta, variant="chunked_split", out_dtype="float32")
    s0, s1 = np.asarray(s0), np.asarray(s1)
    assert np.isnan(s0).any()
    assert np.asarray(o1).tobytes() == np.asarray(o0).tobytes()
    assert s1.tobytes() == s0.tobytes()
