"""The frozen q8 verification attention against its numpy emulation (``attention.emulate``),
byte for byte, on the CUDA simulator: FP32 and FP16 ``out``, the whole ``partial`` and the
whole ``lse`` of a workspace filled with the sentinel first (so the entries frozen leaves
unwritten are compared too). This pins frozen's exact bits (contract part A's operation
order: the split schedule, K16 Kahan scores, N32 online softmax, probability + residual PV,
the combine), so a change of rounding or order anywhere fails here.

Simulator only: on a GPU ``E`` (the device ``expf``) is not correctly rounded and the bits
legitimately differ. The emulation's own sanity against the FP64 oracle runs everywhere.
Shapes are small: the simulator runs one OS thread per CUDA thread."""
from __future__ import annotations

import numpy as np
import pytest

import dflash2_numba as d2
import oracle
from dflash2_numba._compat import SIMULATOR, cuda
from dflash2_numba.attention import frozen
from dflash2_numba.attention.emulate import emulate_attention, emulate_combine
from dflash2_numba.contract import NEG_INF, SENTINEL, active_splits, default_row_lengths

simulator_only = pytest.mark.skipif(
    not SIMULATOR, reason="bit-exact only on the simulator (a GPU's expf is not correctly rounded)")

ORACLE_KEYS = ("q", "k_cache", "v_cache", "block_table", "seq_lens", "scale", "k_scale",
               "v_scale", "row_lengths")


def _case(seed, **kw):
    return oracle.random_attention_case(np.random.default_rng(seed), **kw)


def _kernel(c, splits, out_dtype):
    B, Q, Hq, D = c["q"].shape
    ws = d2.AttentionWorkspace(batch=B, q_len=Q, heads=Hq, head_dim=D, splits=splits,
                               out_dtype=out_dtype)
    ws.fill_sentinel()
    r = d2.verify_attention(**c, splits=splits, variant="frozen", workspace=ws,
                            out_dtype=out_dtype)
    assert ws.guards_intact()
    return r


def _assert_same(got, want, what):
    mm = oracle.first_mismatch(got, want)
    assert mm is None, f"{what}: {mm}"


def check_bits(c, splits, out_dtypes=("float32", "float16")):
    """Frozen's out / partial / lse equal the emulation's, byte for byte, for each out dtype."""
    emu = None
    for odt in out_dtypes:
        r = _kernel(c, splits, odt)
        emu = emulate_attention(**c, splits=splits, out_dtype=odt)
        assert emu.out.dtype == np.dtype(odt)
        _assert_same(r.out, emu.out, f"out ({odt})")
        _assert_same(r.partial, emu.partial, f"partial ({odt} run)")
        _assert_same(r.lse, emu.lse, f"lse ({odt} run)")
    return emu


@simulator_only
@pytest.mark.parametrize("T,S", [(1, 4), (33, 4), (129, 2)])
def test_lengths_and_split_schedule(T, S):
    # T=33: two tiles, one split; T=129: five tiles over A=2 splits (3 + 2)
    c = _case(T, B=1, Q=2, Hq=2, Hkv=1, D=64, page_size=16, seq_lens=[T])
    emu = check_bits(c, S)
    A = active_splits(T, S)
    assert A < -(-T // 32) or T <= 32
    if A < S:           # (T = 129: both splits are active, no unwritten one to look at)
        assert np.all(emu.partial[:, A:] == SENTINEL) and np.all(emu.lse[:, A:] == SENTINEL)


@simulator_only
def test_batch_of_two_lengths_gqa_and_scales():
    """Two requests of different lengths (A = 3 and A = 1 of S = 3), GQA (G = 2), strided
    caches, k_scale / v_scale neither 1 nor powers of two."""
    c = _case(21, B=2, Q=3, Hq=4, Hkv=2, D=64, page_size=16, seq_lens=[170, 45],
              scale=0.2, k_scale=0.37, v_scale=1.3)
    emu = check_bits(c, 3)
    assert np.all(emu.partial[1, 1:] == SENTINEL)          # request 1 has one active split


@simulator_only
def test_explicit_row_lengths_zero_and_negative():
    rows = np.array([[0, 5, -3, 70], [45, 0, 0, 1]], np.int32)
    c = _case(11, B=2, Q=4, Hq=2, Hkv=1, D=64, page_size=16, seq_lens=[80, 50], row_lengths=rows)
    emu = check_bits(c, 3)
    assert np.all(emu.out[rows <= 0] == 0)


@simulator_only
def test_request_without_visible_keys_keeps_the_sentinel():
    rows = np.array([[0, -2], [10, 12]], np.int32)
    c = _case(12, B=2, Q=2, Hq=2, Hkv=1, D=64, page_size=16, seq_lens=[20, 12], row_lengths=rows)
    emu = check_bits(c, 2, out_dtypes=("float32",))
    assert np.all(emu.partial[0] == SENTINEL) and np.all(emu.lse[0] == SENTINEL)


@simulator_only
def test_head_dim_256():
    c = _case(256, B=1, Q=2, Hq=1, Hkv=1, D=256, page_size=16, seq_lens=[150],
              k_scale=0.37, v_scale=1.3)
    check_bits(c, 2)


@simulator_only
def test_five_active_splits_with_dead_ones():
    """A = 5 of S = 8 (10 tiles, 2 a split); row 1 sees only split 0's keys, so splits 1..4
    are dead for it (m = -1e30, l = 0) and the combine must skip them; row 2 sees into
    split 2 only partly."""
    rows = np.array([[300, 20, 150]], np.int32)
    c = _case(5, B=1, Q=3, Hq=2, Hkv=1, D=64, page_size=32, seq_lens=[300], row_lengths=rows,
              k_scale=0.37, v_scale=1.3)
    emu = check_bits(c, 8)
    assert active_splits(300, 8) == 5
    assert np.all(emu.lse[0, 1:5, 1, :, 0] == NEG_INF)


def _combine_kernel(seq_lens, S, partial, lse, out_dtype):
    B, _, Q, Hq, D = partial.shape
    out = cuda.to_device(np.full((B, Q, Hq, D), -777.0, out_dtype))
    frozen.combine_kernel[(B, Q, Hq), frozen.THREADS](
        cuda.to_device(np.asarray(seq_lens, np.int32)), cuda.to_device(np.zeros((B, Q), np.int32)),
        0, S, cuda.to_device(partial), cuda.to_device(lse), out)
    return out.copy_to_host()


@simulator_only
@pytest.mark.parametrize("out_dtype", [np.float32, np.float16])
def test_combine_alone_on_a_built_workspace(out_dtype):
    """Frozen's combine on a workspace with A = 6 live splits whose maxima are close (every
    split weighs in, so the order of the sums shows), dead splits first and between, and the
    unread splits s >= A NaN."""
    rng = np.random.default_rng(6)
    B, S, Q, Hq, D = 1, 9, 2, 2, 64
    T = 6 * 64
    A = active_splits(T, S)
    assert A == 6
    partial = np.full((B, S, Q, Hq, D), np.nan, np.float32)
    lse = np.full((B, S, Q, Hq, 2), np.nan, np.float32)
    partial[:, :A] = rng.standard_normal((B, A, Q, Hq, D)).astype(np.float32)
    lse[:, :A, ..., 0] = rng.uniform(-1.5, 1.5, (B, A, Q, Hq)).astype(np.float32)
    lse[:, :A, ..., 1] = rng.uniform(0.5, 40, (B, A, Q, Hq)).astype(np.float32)
    for s in (0, 3):
        lse[:, s, ..., 0] = NEG_INF
        lse[:, s, ..., 1] = 0
        partial[:, s] = 0
    seq_lens = [T + Q - 1]
    got = _combine_kernel(seq_lens, S, partial, lse, out_dtype)
    want = emulate_combine(partial, lse, default_row_lengths(seq_lens, Q), splits=S,
                           out_dtype=out_dtype)
    _assert_same(got, want, "combine out")
    # the order of the weighted sum matters at these values: reversing it changes some bits
    rev = partial.copy()
    rev_l = lse.copy()
    rev[:, :A] = partial[:, A - 1::-1]
    rev_l[:, :A] = lse[:, A - 1::-1]
    other = emulate_combine(rev, rev_l, default_row_lengths(seq_lens, Q), splits=S,
                            out_dtype=np.float32)
    if out_dtype == np.float32:
        assert oracle.first_mismatch(got, other) is not None


def test_emulation_against_the_fp64_oracle():
    """Sanity (no kernel; runs on a GPU machine too): the emulation is within 1e-5 relative
    L2 of the FP64 oracle, over several splits, GQA, D = 128, zero and partial rows."""
    rows = np.array([[700, 650, 0, 3], [90, 91, 92, 93]], np.int32)
    c = _case(77, B=2, Q=4, Hq=4, Hkv=2, D=128, page_size=64, seq_lens=[700, 93],
              row_lengths=rows, k_scale=0.37, v_scale=1.3)
    ref = oracle.attention_reference(**{k: c[k] for k in ORACLE_KEYS if k in c})
    emu32 = emulate_attention(**c, splits=80, out_dtype="float32")
    rel = oracle.rel_l2(emu32.out, ref)
    assert rel <= 1e-5, rel
    emu16 = emulate_attention(**c, splits=80, out_dtype="float16")
    assert np.array_equal(emu16.out, emu32.out.astype(np.float16))
    assert np.array_equal(emu16.partial, emu32.partial) and np.array_equal(emu16.lse, emu32.lse)
