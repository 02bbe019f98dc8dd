"""The batched combine (``combine_batched``) against frozen's combine, byte for byte, on the
CUDA simulator, on workspaces built to reach its edges: active split counts that are not a
multiple of its 16-load batch and one (80, production's) above its 64 threads, splits that
are not live (m = -1e30) first, last and between, a NaN in m and in partial, rows that see
nothing, head dims 64 / 128 / 256 (one to four 64-column CTAs a row), FP16 and FP32 output; and the register-tiled variants' use of it: the
batched kernel up to its shared arrays' ``MAX_SPLITS`` splits, frozen's combine above, the
same bytes either way."""
from __future__ import annotations

import numpy as np
import pytest

import dflash2_numba as d2
from dflash2_numba._compat import cuda
from dflash2_numba.attention import combine_batched, frozen
from dflash2_numba.contract import NEG_INF, active_splits


def _workspace(rng, B, S, Q, Hq, D, A, dead=(), nan_m=None, nan_p=None):
    """(partial, lse) for A active splits of S: m in [-1.5, 1.5] (so every live split weighs
    in the sums and a change of order or rounding shows), l in [0.5, 40], partial normal;
    the splits in ``dead`` not live (m = -1e30, l = 0, partial 0); the rest of the
    workspace (splits >= A) NaN, which neither combine may read."""
    partial = np.full((B, S, Q, Hq, D), np.nan, np.float32)
    lse = np.full((B, S, Q, Hq, 2), np.nan, np.float32)
    partial[:, :A] = rng.standard_normal((B, A, Q, Hq, D)).astype(np.float32)
    lse[:, :A, ..., 0] = rng.uniform(-1.5, 1.5, (B, A, Q, Hq)).astype(np.float32)
    lse[:, :A, ..., 1] = rng.uniform(0.5, 40, (B, A, Q, Hq)).astype(np.float32)
    for s in dead:
        lse[:, s, ..., 0] = NEG_INF
        lse[:, s, ..., 1] = 0
        partial[:, s] = 0
    if nan_m is not None:
        lse[(0, nan_m, 0, 0, 0)] = np.nan
    if nan_p is not None:
        partial[(0, nan_p, 0, 0, 0)] = np.nan
    return partial, lse


def _combine(kernel, grid, block, seq_lens, rows, S, partial, lse, out_dtype):
    B, _, Q, Hq, D = partial.shape
    out = np.full((B, Q, Hq, D), -777.0, out_dtype)
    d_out = cuda.to_device(out)
    use_rows = 1 if rows is not None else 0
    rows = rows if rows is not None else np.zeros((B, Q), np.int32)
    kernel[grid, block](cuda.to_device(np.asarray(seq_lens, np.int32)), cuda.to_device(rows),
                        use_rows, S, cuda.to_device(partial), cuda.to_device(lse), d_out)
    return d_out.copy_to_host()


def _both(seq_lens, rows, S, partial, lse, out_dtype):
    B, _, Q, Hq, D = partial.shape
    ref = _combine(frozen.combine_kernel, (B, Q, Hq), frozen.THREADS, seq_lens, rows, S,
                   partial, lse, out_dtype)
    got = _combine(combine_batched.combine_kernel,
                   (B, Q, Hq * (D // combine_batched.COLS)), combine_batched.COLS,
                   seq_lens, rows, S, partial, lse, out_dtype)
    return ref, got


# (name, T (keys of the request's longest row), S, dead splits, NaN m split, NaN partial split)
EDGES = [
    ("A1", 100, 4, (), None, None),
    ("A17_dead_first_last", 17 * 64, 20, (0, 16), None, None),
    ("A33_dead_between_nan_m", 2100, 40, (5, 16, 17), 20, None),
    ("A16_nan_partial", 16 * 64, 16, (15,), None, 3),
    # production's 80 splits: more active splits than the kernel's 64 threads, so each thread
    # stages and weighs a second split (s = tid + 64); dead splits before and past 64, a NaN
    # partial past 64, and S = 100 > A (splits 80..99 NaN, unread)
    ("A80_dead_past_64_nan_partial", 80 * 64, 100, (3, 64, 79), None, 70),
]


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("edge", EDGES, ids=[e[0] for e in EDGES])
def test_batched_combine_bytes_equal_frozen(edge, D):
    name, T, S, dead, nan_m, nan_p = edge
    A = active_splits(T, S)
    rng = np.random.default_rng(D + T)
    B, Q, Hq = 1, 3, 2
    partial, lse = _workspace(rng, B, S, Q, Hq, D, A, dead, nan_m, nan_p)
    for out_dtype in (np.float16, np.float32):
        ref, got = _both([T], None, S, partial, lse, out_dtype)
        assert got.tobytes() == ref.tobytes(), f"{name}, D={D}, {np.dtype(out_dtype).name}"
        assert not np.any(ref == -777.0), "a column was not written"


def test_rows_that_see_nothing_write_zero_and_read_no_workspace():
    """Rows with L <= 0 write +0 in both; the workspace of such a request is all NaN, so a
    read of it would show."""
    B, S, Q, Hq, D = 2, 8, 3, 2, 64
    rng = np.random.default_rng(7)
    partial, lse = _workspace(rng, B, S, Q, Hq, D, active_splits(300, S))
    partial[1] = np.nan
    lse[1] = np.nan
    rows = np.array([[0, 300, -5], [0, 0, 0]], np.int32)
    ref, got = _both([300, 3], rows, S, partial, lse, np.float16)
    assert got.tobytes() == ref.tobytes()
    assert np.all(got[0, 0] == 0) and np.all(got[1] == 0) and not np.signbit(got[1]).any()
    assert np.isfinite(got[0, 1]).all()


@pytest.mark.parametrize("variant", ["tiled_perm", "tiled_compact"])
@pytest.mark.parametrize("S, combine", [(3, "combine"), (4, "combine.unbatched")])
def test_variants_run_the_batched_combine_up_to_its_shared_arrays_then_frozens(
        variant, S, combine, monkeypatch):
    """A register-tiled variant launches the batched combine up to ``MAX_SPLITS`` splits and
    frozen's above it; its output is frozen's, byte for byte, either way. (The bound is
    lowered to 3 here so the simulator need not run 513 split CTAs; the kernel's shared
    arrays keep their 512 entries.)"""
    from tests.attention_helpers import case, sentinel_run

    monkeypatch.setattr(combine_batched, "MAX_SPLITS", 3)
    assert active_splits(200, S) == S    # every split live: each combine reads all S
    c = case(np.random.default_rng(8), B=1, Q=2, Hq=2, Hkv=1, D=64, page_size=8,
             seq_lens=[200], row_lengths=None, strided=False)
    ref, ref_guards = sentinel_run(d2, c, "frozen", S)
    d2.route_counters(reset=True)
    got, got_guards = sentinel_run(d2, c, variant, S)
    launched = [n for n in d2.route_counters() if ".combine" in n]
    assert launched == [f"attention.{variant}.{combine}"], launched
    assert ref_guards and got_guards, "a guard element was written"
    assert got.out.tobytes() == ref.out.tobytes()
    assert got.partial.tobytes() == ref.partial.tobytes()
    assert got.lse.tobytes() == ref.lse.tobytes()


def test_the_bound_is_the_size_of_the_kernels_shared_arrays():
    src = combine_batched._source()
    assert src.count(f"cuda.shared.array({combine_batched.MAX_SPLITS}, np.float32)") == 3
