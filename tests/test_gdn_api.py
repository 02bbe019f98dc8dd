"""gdn_prefill argument checks: every bad argument raises TypeError/ValueError naming it,
before any launch, and no caller buffer is written."""
import numpy as np
import pytest

import oracle
from dflash2_numba import _registry
from dflash2_numba._compat import cuda
from dflash2_numba.gdn import gdn_prefill, plan_gdn
from tests.array_helpers import device_copies

SENT = np.float32(-777.0)


def base_case(T=6, B=1, H=1, HV=2, K=32, V=32, dtype=np.float16, seed=0):
    rng = np.random.default_rng(seed)
    return oracle.random_gdn_case(rng, B=B, T=T, H=H, HV=HV, K=K, V=V, dtype=dtype,
                                  with_state=False)


def _mut(**changes):
    def f(case):
        case.update(changes)
        return case
    return f


def _arr(name, fn):
    def f(case):
        case[name] = fn(case[name])
        return case
    return f


CU_OK = np.array([0, 2, 6], dtype=np.int32)

BAD = [
    # (id, mutation of the case dict, expected exception, argument named)
    ("q-list", _arr("q", lambda a: a.tolist()), TypeError, "q"),
    ("q-float64", _arr("q", lambda a: a.astype(np.float64)), TypeError, "q"),
    ("q-ndim", _arr("q", lambda a: a[0]), ValueError, "q"),
    ("k-shape", _arr("k", lambda a: a[:, :-1]), ValueError, "k"),
    ("k-dtype", _arr("k", lambda a: a.astype(np.float32)), TypeError, "k"),
    ("v-dtype", _arr("v", lambda a: a.astype(np.float32)), TypeError, "v"),
    ("v-batch", _arr("v", lambda a: np.concatenate([a, a], axis=0)), ValueError, "v"),
    ("v-heads", lambda c: {**c, "q": c["q"].repeat(2, 2), "k": c["k"].repeat(2, 2),
                           "v": c["v"][:, :, [0, 1, 0]], "g": c["g"][:, :, [0, 1, 0]],
                           "beta": c["beta"][:, :, [0, 1, 0]]}, ValueError, "v"),
    ("K-48", lambda c: {**c, "q": c["q"][..., :16].repeat(3, -1), "k": c["k"][..., :16].repeat(3, -1)},
     ValueError, "q"),
    ("V-16", _arr("v", lambda a: a[..., :16]), ValueError, "v"),
    ("g-dtype", _arr("g", lambda a: a.astype(np.float16)), TypeError, "g"),
    ("g-shape", _arr("g", lambda a: a[..., :1]), ValueError, "g"),
    ("beta-shape", _arr("beta", lambda a: a[:, :-1]), ValueError, "beta"),
    ("beta-dtype", _arr("beta", lambda a: a.astype(np.float64)), TypeError, "beta"),
    ("g-positive", _arr("g", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 3, 0.5, a)
                        .astype(np.float32)), ValueError, "g"),
    ("g-nan", _arr("g", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 1, np.nan, a)
                   .astype(np.float32)), ValueError, "g"),
    ("beta-inf", _arr("beta", lambda a: np.full_like(a, np.inf)), ValueError, "beta"),
    ("q-nan", _arr("q", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 7, np.nan, a)
                   .astype(a.dtype)), ValueError, "q"),
    ("k-inf", _arr("k", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 2, np.inf, a)
                   .astype(a.dtype)), ValueError, "k"),
    ("v-nan", _arr("v", lambda a: np.full_like(a, np.nan)), ValueError, "v"),
    ("state-nan", _mut(initial_state=np.full((1, 2, 32, 32), np.nan, np.float32)), ValueError,
     "initial_state"),
    ("scale-nan", _mut(scale=float("nan")), ValueError, "scale"),
    ("scale-inf32", _mut(scale=1e39), ValueError, "scale"),
    ("scale-str", _mut(scale="1"), TypeError, "scale"),
    ("scale-huge-int", _mut(scale=10 ** 400), ValueError, "scale"),
    ("cu-B2", lambda c: {**{n: np.concatenate([a, a]) for n, a in c.items()}, "cu_seqlens": CU_OK},
     ValueError, "cu_seqlens"),
    ("cu-int64", _mut(cu_seqlens=CU_OK.astype(np.int64)), TypeError, "cu_seqlens"),
    ("cu-start", _mut(cu_seqlens=np.array([1, 2, 6], np.int32)), ValueError, "cu_seqlens"),
    ("cu-decreasing", _mut(cu_seqlens=np.array([0, 4, 3, 6], np.int32)), ValueError, "cu_seqlens"),
    ("cu-end", _mut(cu_seqlens=np.array([0, 2, 5], np.int32)), ValueError, "cu_seqlens"),
    ("cu-2d", _mut(cu_seqlens=CU_OK[None]), ValueError, "cu_seqlens"),
    ("state-shape", _mut(initial_state=np.zeros((2, 2, 32, 32), np.float32)), ValueError,
     "initial_state"),
    ("state-dtype", _mut(initial_state=np.zeros((1, 2, 32, 32), np.float16)), TypeError,
     "initial_state"),
    # a device state is read in place, so it must be C-contiguous (numpy ones are copied)
    ("state-strided-device", lambda c: {**c, "initial_state": cuda.to_device(
        np.zeros((1, 2, 32, 64), np.float32))[:, :, :, ::2]}, ValueError, "initial_state"),
    ("variant", _mut(variant="nope"), ValueError, "variant"),
    ("variant-type", _mut(variant=3), TypeError, "variant"),
    ("l2-int", _mut(use_qk_l2norm=1), TypeError, "use_qk_l2norm"),
    ("final-str", _mut(output_final_state="yes"), TypeError, "output_final_state"),
    ("out-dtype", _mut(out_dtype="int8"), ValueError, "out_dtype"),
    ("out-dtype-bogus", _mut(out_dtype="bogus"), TypeError, "out_dtype"),
    ("out-buffer-dtype", _mut(out=np.zeros((1, 6, 2, 32), np.float32)), TypeError, "out"),
    ("out-buffer-shape", _mut(out=np.zeros((1, 6, 2, 16), np.float16)), ValueError, "out"),
    ("out-buffer-strided", _mut(out=np.zeros((1, 6, 2, 64), np.float16)[..., ::2]), ValueError,
     "out"),
    ("out-buffer-list", _mut(out=[0.0]), TypeError, "out"),
]


@pytest.mark.parametrize("mutate,exc,name", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_argument_names_it(mutate, exc, name):
    case = mutate(base_case())
    _registry.route_counters(reset=True)
    with pytest.raises(exc) as info:
        gdn_prefill(**case)
    assert str(info.value).startswith(f"{name}:"), str(info.value)
    assert _registry.route_counters() == {}


def test_fp32_input_rejects_fp16_output():
    case = base_case(dtype=np.float32)
    with pytest.raises(ValueError, match=r"^out_dtype:"):
        gdn_prefill(**case, out_dtype="float16")


def _cache_case():
    case = base_case(T=6)
    case["cu_seqlens"] = CU_OK
    cache = np.full((4, 2, 32, 32), SENT, dtype=np.float32)
    return case, cache


CACHE_BAD = [
    ("no-indices", lambda c, s: dict(state_cache=s), ValueError, "state_indices"),
    ("no-cache", lambda c, s: dict(state_indices=np.array([0, 1], np.int32)), ValueError,
     "state_cache"),
    ("range", lambda c, s: dict(state_cache=s, state_indices=np.array([0, 4], np.int32)),
     ValueError, "state_indices"),
    ("negative", lambda c, s: dict(state_cache=s, state_indices=np.array([-1, 2], np.int32)),
     ValueError, "state_indices"),
    ("duplicate", lambda c, s: dict(state_cache=s, state_indices=np.array([2, 2], np.int32)),
     ValueError, "state_indices"),
    ("dtype", lambda c, s: dict(state_cache=s, state_indices=np.array([0, 1], np.int64)),
     TypeError, "state_indices"),
    ("count", lambda c, s: dict(state_cache=s, state_indices=np.array([0, 1, 2], np.int32)),
     ValueError, "state_indices"),
    ("with-initial", lambda c, s: dict(state_cache=s, state_indices=np.array([0, 1], np.int32),
                                       initial_state=np.zeros((2, 2, 32, 32), np.float32)),
     ValueError, "initial_state"),
    ("cache-shape", lambda c, s: dict(state_cache=np.full((4, 1, 32, 32), SENT, np.float32),
                                      state_indices=np.array([0, 1], np.int32)),
     ValueError, "state_cache"),
    # a numpy cache is written back slot by slot: slots that share memory would lose a state
    ("cache-shared-slots", lambda c, s: dict(
        state_cache=np.lib.stride_tricks.as_strided(s, s.shape, (0,) + s.strides[1:],
                                                    writeable=True),
        state_indices=np.array([0, 1], np.int32)), ValueError, "state_cache"),
    ("late-g", lambda c, s: dict(state_cache=s, state_indices=np.array([0, 1], np.int32),
                                 g=np.full_like(c["g"], 0.25)), ValueError, "g"),
]


@pytest.mark.parametrize("extra,exc,name", [b[1:] for b in CACHE_BAD], ids=[b[0] for b in CACHE_BAD])
def test_state_cache_errors_leave_cache_untouched(extra, exc, name):
    case, cache = _cache_case()
    kw = extra(case, cache)
    case.update(kw)
    with pytest.raises(exc) as info:
        gdn_prefill(**case)
    assert str(info.value).startswith(f"{name}:"), str(info.value)
    assert (cache == SENT).all()


def test_non_finite_named_cache_row_rejected():
    """The cache rows state_indices names are the initial states: a NaN there is refused
    naming state_cache, the slot and the index, and the cache is left as it was; a NaN in
    a slot no sequence names is never read; check_values=False lets the NaN through."""
    case, cache = _cache_case()
    cache[3, 1, 4, 5] = np.nan                      # slot 3: named below
    cache[2, 0, 0, 0] = np.inf                      # slot 2: never named
    before = cache.copy()
    with pytest.raises(ValueError, match=r"^state_cache: the initial state of sequence 1 "
                                         r"\(slot 3\).*index \(3, 1, 4, 5\)"):
        gdn_prefill(**case, state_cache=cache, state_indices=np.array([0, 3], np.int32))
    assert np.array_equal(cache, before, equal_nan=True)
    cache[[0, 1]] = 0.0
    o, st = gdn_prefill(**case, state_cache=cache, state_indices=np.array([0, 1], np.int32))
    assert st is cache and np.isfinite(o).all() and np.isfinite(cache[[0, 1]]).all()
    o, _ = gdn_prefill(**case, state_cache=cache, state_indices=np.array([0, 3], np.int32),
                       check_values=False)
    assert np.isnan(o[0, 2:]).any() and not np.isnan(o[0, :2]).any()   # sequence 1 only


def test_read_only_cache_rejected():
    case, cache = _cache_case()
    cache.setflags(write=False)
    with pytest.raises(ValueError, match=r"^state_cache:"):
        gdn_prefill(**case, state_cache=cache, state_indices=np.array([0, 1], np.int32))


def test_check_values_off_reads_min_g_zero():
    """With the value check off the kernels read min(g, 0): g > 0 acts as g = 0."""
    case = base_case(T=3, dtype=np.float32)
    g_pos = case["g"].copy()
    g_pos[0, 1, 0] = 3.0
    g_zero = g_pos.copy()
    g_zero[0, 1, 0] = 0.0
    for fam in ("serial", "chunked"):
        a = gdn_prefill(**{**case, "g": g_pos}, variant=fam, check_values=False)
        b = gdn_prefill(**{**case, "g": g_zero}, variant=fam)
        assert oracle.first_mismatch(a[0], b[0]) is None
        assert oracle.first_mismatch(a[1], b[1]) is None


def test_default_scale_and_explicit_scale_agree():
    case = base_case(T=3, dtype=np.float32)
    a = gdn_prefill(**case, variant="serial")
    b = gdn_prefill(**case, variant="serial", scale=np.float32(32 ** -0.5))
    assert oracle.first_mismatch(a[0], b[0]) is None


def test_caller_out_is_written_and_returned():
    """``out``: a numpy buffer is filled and returned as ``o``; a device one is written by
    the kernels and returned itself; the bytes are those of a call without ``out``."""
    from dflash2_numba._compat import cuda

    case = base_case(T=6)
    o_ref, s_ref = gdn_prefill(**case)
    out = np.full(o_ref.shape, SENT, o_ref.dtype)
    o, s = gdn_prefill(**case, out=out)
    assert o is out and oracle.first_mismatch(out, o_ref) is None
    assert oracle.first_mismatch(s, s_ref) is None
    dout = cuda.to_device(np.full(o_ref.shape, SENT, np.float32))
    o, _ = gdn_prefill(**case, out=dout, out_dtype="float32")
    o32_ref, _ = gdn_prefill(**case, out_dtype="float32")
    assert o is dout and oracle.first_mismatch(dout.copy_to_host(), o32_ref) is None


def test_read_only_out_rejected():
    case = base_case(T=6)
    out = np.zeros((1, 6, 2, 32), np.float16)
    out.setflags(write=False)
    with pytest.raises(ValueError, match=r"^out: the array is read-only"):
        gdn_prefill(**case, out=out)


def test_device_out_or_cache_sharing_memory_with_an_input_is_refused():
    """A device ``out`` (or ``state_cache``) that shares device memory with an input would be
    read after another CTA wrote it; it is refused naming both, before any launch, and
    nothing is written. Separate buffers of the same shapes are taken."""
    from dflash2_numba._compat import cuda

    case = base_case(T=6, H=2, HV=2, dtype=np.float32)       # q, k, v and o all [1, 6, 2, 32]
    dev = device_copies(case)
    for name in ("q", "k", "v"):
        before = dev[name].copy_to_host()
        with pytest.raises(ValueError, match=rf"^out: overlaps {name} in device memory"):
            gdn_prefill(**dev, out=dev[name], out_dtype="float32")
        assert before.tobytes() == dev[name].copy_to_host().tobytes()
    # a cache whose first slot is the same memory as the output
    both = cuda.to_device(np.full((2, 6, 2, 32, 32), SENT, np.float32))
    out_view = both.reshape(-1)[: 6 * 2 * 32].reshape(1, 6, 2, 32)
    cache = both[1:].reshape(6, 2, 32, 32)
    inter = both.reshape(-1)[:2 * 32 * 32 * 2].reshape(2, 2, 32, 32)     # overlaps out_view
    kw = dict(cu_seqlens=np.array([0, 6], np.int32), state_indices=np.array([0], np.int32))
    one = {k: v for k, v in dev.items() if k != "initial_state"}
    with pytest.raises(ValueError, match=r"^out: overlaps state_cache in device memory"):
        gdn_prefill(**one, out=out_view, out_dtype="float32", state_cache=inter, **kw)
    with pytest.raises(ValueError, match=r"^state_cache: overlaps q in device memory"):
        gdn_prefill(**dict(one, q=both.reshape(-1)[: 6 * 2 * 32].reshape(1, 6, 2, 32)),
                    state_cache=inter, **kw)
    o, _ = gdn_prefill(**one, out=out_view, out_dtype="float32", state_cache=cache, **kw)
    assert o is out_view
    # inputs that share memory are only read: q and k one device array, with a device out
    same = dict(dev, k=dev["q"])
    want, _ = gdn_prefill(**dict(case, k=case["q"]), out_dtype="float32")
    dout = cuda.device_array(want.shape, np.float32)
    o, _ = gdn_prefill(**same, out=dout, out_dtype="float32")
    assert o is dout and oracle.first_mismatch(dout.copy_to_host(), want) is None


def test_a_buffer_the_call_cannot_allocate_names_what_sizes_it():
    """The final states of 4 194 304 empty sequences (2 TiB of FP32) cannot be allocated: a
    ValueError naming the arguments that size them (cu_seqlens, v), not a bare MemoryError,
    and nothing launched."""
    case = base_case(T=0, HV=8, K=128, V=128)
    _registry.route_counters(reset=True)
    with pytest.raises(ValueError, match=r"^cu_seqlens, v: the call needs a 2199023255552-byte "
                                         r"buffer \(4194304, 8, 128, 128\)"):
        gdn_prefill(**case, cu_seqlens=np.zeros(2 ** 22 + 1, np.int32))
    assert _registry.route_counters() == {}


def test_host_memory_the_call_cannot_have_names_what_sizes_it():
    """Inputs of 2**30 tokens x 4096 heads (broadcast views: no memory of their own): the
    value check's temporaries, or with it off the compact host copies, cannot be allocated
    (512 TiB and more, past any x86-64 process's 128 TiB of address space, so whatever the
    host's overcommit policy). Each is a ValueError naming the arguments that size it, not
    a bare MemoryError, and nothing is launched."""
    T, H = 2 ** 30, 2 ** 12
    q = np.broadcast_to(np.float16(0.5), (1, T, H, 128))
    v = np.broadcast_to(np.float16(0.5), (1, T, H, 32))
    g = np.broadcast_to(np.float32(-0.1), (1, T, H))
    beta = np.broadcast_to(np.float32(0.5), (1, T, H))
    _registry.route_counters(reset=True)
    with pytest.raises(ValueError, match=r"^q, k, v, g, beta: not enough memory for the host "
                                         r"value check \(check_values=False skips it\)"):
        plan_gdn(q, q, v, g, beta)
    with pytest.raises(ValueError, match=r"^q, k, v: not enough memory for the call's device "
                                         r"copies and scratch \(MemoryError"):
        plan_gdn(q, q, v, g, beta, check_values=False)
    assert _registry.route_counters() == {}


def test_more_tokens_than_int32_offsets_hold_are_refused():
    """The launch schedule holds token offsets as int32: B * T past 2**31 - 1 is refused
    naming q, before any value is read (it wrapped before). (2**30 tokens pass this check:
    the test above reaches the value check with them.)"""
    q = np.broadcast_to(np.float16(0.5), (2, 2 ** 30, 1, 32))
    g = np.broadcast_to(np.float32(-0.1), (2, 2 ** 30, 1))
    _registry.route_counters(reset=True)
    with pytest.raises(ValueError, match=r"^q: B \* T = 2147483648 tokens; at most 2\*\*31 - 1"):
        plan_gdn(q, q, q, g, g)
    assert _registry.route_counters() == {}


@pytest.mark.parametrize("variant", ["chunked_split", "chunked_rec"])
def test_a_variants_scratch_the_call_cannot_have_names_what_sizes_it(variant, monkeypatch):
    """A pre-pass variant's plan-time scratch (``prepare``) that cannot be allocated is the
    same ValueError (it was a bare MemoryError from the variant's own allocation)."""
    from dflash2_numba.gdn import chunked_split

    def no_memory(*a, **k):
        raise MemoryError("Unable to allocate 177. MiB")

    monkeypatch.setattr(chunked_split, "device_zeros", no_memory)
    with pytest.raises(ValueError, match=r"^q, k, v: not enough memory for the call's device "
                                         r"copies and scratch \(MemoryError: Unable"):
        plan_gdn(**base_case(), variant=variant)


def test_out_of_memory_is_told_apart_from_other_errors():
    from dflash2_numba._arrays import is_out_of_memory, memory_named

    class CudaAPIError(Exception):
        pass

    assert is_out_of_memory(MemoryError())
    assert is_out_of_memory(CudaAPIError("[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY"))
    assert not is_out_of_memory(CudaAPIError("[1] CUDA_ERROR_INVALID_VALUE"))
    assert not is_out_of_memory(RuntimeError("out of memory"))
    with pytest.raises(RuntimeError, match="other"):
        with memory_named("q", "a test"):
            raise RuntimeError("other")


def _overflowing(name, size):
    case = base_case(dtype=np.float32)
    case[name] = case[name] * np.float32(size)
    return case


@pytest.mark.parametrize("name", ["q", "k"])
# (the simulator's FP32 fma overflows to inf on the unchecked run's sums of squares, as meant)
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_l2norm_rows_past_fp32_are_refused(name):
    """Finite float32 q / k rows whose sum of squares overflows FP32 are made zeros by the
    contract's own norm (``ss = fma(x, x, ss)``, ``x / sqrt(ss + 1e-6)``) where the FP64
    oracle normalises them: with use_qk_l2norm the value check refuses them by name (what
    check_values=False lets through is that zero row); rows below the limit, and the same
    rows without the norm, are taken."""
    case = _overflowing(name, 1e20)
    _registry.route_counters(reset=True)
    with pytest.raises(ValueError, match=rf"^{name}: with use_qk_l2norm, row \(0, 0, 0\) has a "
                                         r"sum of squares of .*past float32's range"):
        gdn_prefill(**case)
    assert _registry.route_counters() == {}
    o, _ = gdn_prefill(**case, check_values=False, variant="serial")
    assert not o.any()                                    # every row's q or k is zero
    ref, _ = oracle.gdn_reference(**case)
    assert np.abs(ref).max() > 1e-3                       # which the oracle does not give
    gdn_prefill(**_overflowing(name, 1e17), variant="serial")
    gdn_prefill(**case, use_qk_l2norm=False, variant="serial")


def test_fp16_rows_never_reach_the_norm_limit():
    """The largest finite FP16 q rows (65504 everywhere: a sum of squares of 1.4e11 at K = 32)
    are far below FP32's limit: the value check takes them, and the normalised result is the
    FP64 oracle's within test_gdn_prefill's bound."""
    from tests.test_gdn_prefill import TOL

    case = base_case()
    case["q"] = np.full_like(case["q"], 65504.0)
    o, s = gdn_prefill(**case, variant="serial", out_dtype="float32")
    ref_o, ref_s = oracle.gdn_reference(**case)
    assert np.isfinite(o).all() and np.isfinite(s).all()
    assert np.abs(ref_o).max() > 1e-3                     # a result to compare, not zeros
    assert oracle.rel_l2(o, ref_o) <= TOL and oracle.rel_l2(s, ref_s) <= TOL


def test_a_plan_keeps_the_sequences_and_slots_it_was_made_with():
    """What plan_gdn's docstring says: the schedule is built from the values of cu_seqlens
    and state_indices at plan time, so changing those device arrays in place afterwards
    changes nothing a launch does (the same bits into the same slot); q, k, v, g and beta
    are read as they are at each launch."""

    case = base_case(T=6)
    cu = cuda.to_device(CU_OK)
    slots = cuda.to_device(np.array([0, 1], np.int32))
    cache = cuda.to_device(np.zeros((4, 2, 32, 32), np.float32))
    dev = {n: cuda.to_device(case[n]) for n in ("q", "k", "v", "g", "beta")}
    call = plan_gdn(**dev, cu_seqlens=cu, state_cache=cache, state_indices=slots)
    call.launch()
    o_first = call.results()[0].copy_to_host()
    first = cache.copy_to_host()
    cu.copy_to_device(np.array([0, 4, 6], np.int32))
    slots.copy_to_device(np.array([2, 3], np.int32))
    cache.copy_to_device(np.zeros((4, 2, 32, 32), np.float32))
    call.launch()
    assert oracle.first_mismatch(call.results()[0].copy_to_host(), o_first) is None
    again = cache.copy_to_host()
    assert oracle.first_mismatch(again, first) is None and not again[2:].any()
    o_ref, s_ref = gdn_prefill(**case, cu_seqlens=CU_OK)
    assert oracle.first_mismatch(o_first, o_ref) is None
    assert oracle.first_mismatch(first[:2], s_ref) is None
    dev["v"].copy_to_device(np.zeros_like(case["v"]))        # the inputs are read at launch:
    cache.copy_to_device(np.zeros((4, 2, 32, 32), np.float32))    # v = 0 from zero states
    call.launch()
    assert not call.results()[0].copy_to_host().any()


def test_the_plain_final_state_can_be_redirected_only_to_its_own_shape():
    """GdnCall._write_final_state_to (the screen's hook): a buffer of the final state's shape
    and dtype becomes what launches write and results() returns; another shape or dtype, or
    a call whose state is a cache, is refused naming buffer."""
    case = base_case(T=6)
    call = plan_gdn(**{n: cuda.to_device(case[n]) for n in ("q", "k", "v", "g", "beta")})
    mine = cuda.to_device(np.full(call.results()[1].shape, -777.0, np.float32))
    with pytest.raises(ValueError, match=r"^buffer: float32\(1, 2, 32, 33\)"):
        call._write_final_state_to(cuda.to_device(np.zeros((1, 2, 32, 33), np.float32)))
    with pytest.raises(ValueError, match=r"^buffer: float64"):
        call._write_final_state_to(cuda.to_device(np.zeros(mine.shape, np.float64)))
    call._write_final_state_to(mine)
    call.launch()
    assert call.results()[1] is mine and call.plan.hT is mine
    _, want = gdn_prefill(**case, variant="chunked")
    assert oracle.first_mismatch(mine.copy_to_host(), want) is None
    cached = plan_gdn(**{n: cuda.to_device(case[n]) for n in ("q", "k", "v", "g", "beta")},
                      state_cache=cuda.to_device(np.zeros((2, 2, 32, 32), np.float32)),
                      state_indices=cuda.to_device(np.array([1], np.int32)))
    with pytest.raises(ValueError, match="^buffer: this call has no plain-form final state"):
        cached._write_final_state_to(mine)
