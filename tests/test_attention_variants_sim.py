"""Fast attention variants against frozen, byte for byte, on the CUDA simulator.

For each case both variants run into sentinel-filled workspaces; the FP16 output, the whole
``partial`` and the whole ``lse`` (including the splits >= A that must keep the sentinel)
must be the same bytes, and every guard must hold; the main cases also compare the FP32
output (the combine's own bits, which the FP16 rounding can hide). The simulator's dynamic shared memory is
poisoned (all bits set: NaN) so a read of a shared value nothing wrote cannot pass.
"""
from __future__ import annotations

import numpy as np
import pytest

import dflash2_numba as d2
from dflash2_numba import _registry
from dflash2_numba.contract import active_splits
from tests.attention_helpers import (attention_variants_accepting, case, decode_on_cpu,
                                     sentinel_run)


def _bitwise_variants_accepting(D):
    """Of :func:`attention_variants_accepting` (``D``), those that must equal frozen byte for
    byte."""
    registry = _registry.variants("attention")
    return [n for n in attention_variants_accepting(D)
            if registry[n].bitwise_reference == "frozen"]


# Taken from the registry, so a new variant with bitwise_reference="frozen" is byte-tested
# here without editing this file: the cases below (head dim 64) run every variant that
# accepts D = 64; the D = 256 cases further down run those built for D = 256 only
# (tiled_wide). test_every_bitwise_variant_is_byte_tested says that no variant falls
# between the two.
FAST_VARIANTS = _bitwise_variants_accepting(64)
WIDE_VARIANTS = [n for n in _bitwise_variants_accepting(256) if n not in FAST_VARIANTS]


pytestmark = pytest.mark.usefixtures("poisoned_dynamic_shared_memory")   # (conftest.py)


def _assert_same(c, splits, variant):
    ref, g_ref = sentinel_run(d2, c, "frozen", splits)
    got, g_got = sentinel_run(d2, c, variant, splits)
    assert g_ref and g_got, "a guard element was written"
    assert got.out.tobytes() == ref.out.tobytes(), "FP16 output differs from frozen"
    assert got.partial.tobytes() == ref.partial.tobytes(), "partial differs from frozen"
    assert got.lse.tobytes() == ref.lse.tobytes(), "lse differs from frozen"
    return ref


# (seed, B, Q, Hq, Hkv, D, page, seq_lens, splits, row_lengths)
CASES = {
    # T = 1: one split, one (mostly empty) tile; S > A
    "T1_q1_g1": (1, 1, 1, 1, 1, 64, 16, [1], 4, None),
    # T = 33: two tiles in one split (S = A = 1); G = 2, two KV heads, a short second request
    "T33_q3_g2": (2, 2, 3, 4, 2, 64, 8, [33, 4], 1, None),
    # T = 129: A = ceil(129/64) = 3 but S = 2 < 3 (A = S); G = 1, Q = 8; page 5 (pages inside tiles)
    "T129_q8_g1": (3, 1, 8, 2, 2, 64, 5, [129], 2, None),
    # T = 300, G = 6, Q = 3 (18 rows: a full and a nearly empty row group), S = 8 > A = 5,
    # rows of zero and negative length, a row shorter than one tile
    "T300_q3_g6_zero_rows": (4, 1, 3, 6, 1, 64, 32, [300], 8,
                             np.array([[0, 300, 17]], np.int32)),
    # D = 256, G = 6, Q = 1 (6 rows), T = 70 -> A = 1 < S = 2; first row group only
    "T70_d256_q1_g6": (5, 1, 1, 6, 1, 256, 16, [70], 2, None),
}


@pytest.mark.parametrize("variant", FAST_VARIANTS)
@pytest.mark.parametrize("name", list(CASES))
def test_bitwise_equal_to_frozen(name, variant):
    seed, B, Q, Hq, Hkv, D, page, seq, splits, rows = CASES[name]
    rng = np.random.default_rng(seed)
    c = case(rng, B=B, Q=Q, Hq=Hq, Hkv=Hkv, D=D, page_size=page, seq_lens=seq,
             row_lengths=rows, strided=True)
    ref = _assert_same(c, splits, variant)
    T = int(rows[0].max()) if rows is not None else seq[0]
    A = active_splits(T, splits)
    if A < splits:      # (T33, T129: every split is active, no unwritten one to look at)
        assert np.all(ref.partial[0, A:] == d2.SENTINEL) and np.all(ref.lse[0, A:] == d2.SENTINEL)


@pytest.mark.parametrize("variant", FAST_VARIANTS)
@pytest.mark.parametrize("name", list(CASES))
def test_fp32_output_equal_to_frozen(name, variant):
    """The FP32 output too: the FP16 rounding hides a one-ulp change in the combine."""
    seed, B, Q, Hq, Hkv, D, page, seq, splits, rows = CASES[name]
    c = case(np.random.default_rng(seed), B=B, Q=Q, Hq=Hq, Hkv=Hkv, D=D, page_size=page,
             seq_lens=seq, row_lengths=rows, strided=True)
    ref, g_ref = sentinel_run(d2, c, "frozen", splits, out_dtype="float32")
    got, g_got = sentinel_run(d2, c, variant, splits, out_dtype="float32")
    assert g_ref and g_got, "a guard element was written"
    assert got.out.dtype == np.float32 and got.out.tobytes() == ref.out.tobytes(), \
        "FP32 output differs from frozen"


@pytest.mark.parametrize("variant", FAST_VARIANTS)
def test_request_without_keys_and_byte_path(variant, monkeypatch):
    """A request whose rows see nothing writes nothing; caches whose strides forbid 16-byte
    loads take the byte path (forced here) with the same bytes."""
    from dflash2_numba.attention import tiled

    monkeypatch.setattr(tiled, "_u32_view", lambda arr: None)
    rng = np.random.default_rng(6)
    rows = np.array([[0, 0], [40, 12]], np.int32)
    c = case(rng, B=2, Q=2, Hq=2, Hkv=1, D=64, page_size=8, seq_lens=[20, 40],
             row_lengths=rows, strided=True)
    ref = _assert_same(c, 3, variant)
    assert np.all(ref.partial[0] == d2.SENTINEL) and np.all(ref.lse[0] == d2.SENTINEL)


def test_u32_view_only_when_16_byte_loads_are_legal():
    from dflash2_numba.attention import tiled
    from numba import cuda

    ok = cuda.to_device(np.zeros((3, 4, 2, 64), np.uint8))
    v = tiled._u32_view(ok)
    assert v is not None and v.shape == (3, 4, 2, 16) and v.dtype == np.uint32

    class Fake:
        shape = (3, 4, 2, 64)
        strides = (4 * 2 * 69, 2 * 69, 69, 1)     # a padded head row: 69-byte stride

    assert tiled._u32_view(Fake()) is None


def test_e4m3_bit_decode_ir_matches_the_table():
    """The GPU decode's LLVM IR (run through numba's CPU target) and its simulator rendering
    give the decode table's values times 2^-120, bit for bit, NaN codes included."""
    from dflash2_numba.attention._tiled_ops import decode_ir, e4m3x4_py
    from dflash2_numba.e4m3 import DECODE_TABLE

    rng = np.random.default_rng(0)
    ws = np.concatenate([np.arange(256, dtype=np.uint32) * np.uint32(0x01010101),
                         rng.integers(0, 2 ** 32, 4000, dtype=np.uint64).astype(np.uint32)])
    got = decode_on_cpu(decode_ir, ws)
    sim = np.array([e4m3x4_py(w) for w in ws], np.float32)
    tab = (DECODE_TABLE.astype(np.float64) * 2.0 ** -120).astype(np.float32)
    nan = np.isnan(DECODE_TABLE)
    tab[nan] = DECODE_TABLE[nan]
    want = tab[ws.view(np.uint8).reshape(-1, 4)]
    assert got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
    assert sim.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()


def test_every_bitwise_variant_is_byte_tested():
    """Every attention variant registered with ``bitwise_reference="frozen"`` is in one of
    the two lists the byte tests run over, and the lists hold the variants known today (so
    an empty list, e.g. from a ``supports`` that refuses every shape here, cannot pass)."""
    bitwise = [n for n, v in _registry.variants("attention").items()
               if v.bitwise_reference == "frozen"]
    missing = sorted(set(bitwise) - set(FAST_VARIANTS) - set(WIDE_VARIANTS))
    assert not missing, f"accept neither head dim 64 nor 256, so no byte test runs them: {missing}"
    assert {"tiled", "tiled_compact", "tiled_perm"} <= set(FAST_VARIANTS), FAST_VARIANTS
    assert "tiled_wide" in WIDE_VARIANTS and "tiled_wide" not in FAST_VARIANTS, WIDE_VARIANTS


def test_registry_and_route_counters():
    v = d2.attention_variants()
    for name in FAST_VARIANTS:
        assert "bit-identical to frozen" in v[name]["contract"]
    rng = np.random.default_rng(15)
    c = case(rng, B=1, Q=1, Hq=1, Hkv=1, D=64, page_size=16, seq_lens=[5])
    d2.route_counters(reset=True)
    d2.verify_attention(**c, splits=2, variant="tiled")
    assert d2.route_counters() == {"attention.tiled.split.d64": 1, "attention.tiled.combine": 1}


def test_unsupported_shape_is_refused():
    from dflash2_numba.attention import tiled

    with pytest.raises(d2.UnsupportedShape):
        tiled.supports(dict(B=1, Q=2, Hq=2, Hkv=1, D=96, page_size=16, splits=4))


@pytest.mark.parametrize("variant", FAST_VARIANTS)
@pytest.mark.parametrize("which", ["k_cache", "v_cache"])
def test_nan_cache_byte_same_bytes_as_frozen(which, variant):
    """A NaN code (0x7F / 0xFF) in K or V: in a boundary tile (seen by some rows only, the
    masked PV path) and inside a tile every row sees (the unmasked path)."""
    _assert_same(_nan_case(31, 64, which, ((43, 7, 0x7F), (10, 3, 0xFF))), 2, variant)


def _nan_case(seed, D, which, codes):
    """Rows of 40, 40, 45 and 70 keys (a boundary tile at keys 32..63) with the E4M3 NaN
    codes ``codes`` ((key, column, byte)...) written into ``which`` cache."""
    rng = np.random.default_rng(seed)
    rows = np.array([[40, 40, 45, 70]], np.int32)
    c = case(rng, B=1, Q=4, Hq=2, Hkv=1, D=D, page_size=16, seq_lens=[70], strided=False,
             row_lengths=rows)
    cache = c[which].copy()
    bt = c["block_table"][0]
    for key, col, code in codes:
        cache[bt[key // 16], key % 16, 0, col] = code
    return dict(c, **{which: cache})


# tiled_wide is built for the production head dim only: its own cases, all at D = 256
# (seed, B, Q, Hq, Hkv, D, page, seq_lens, splits, row_lengths, strided[, cache scales])
# cache scales neither 1 nor a power of two (k_scale rounds qk_scale, v_scale the partials)
# on the byte path and on the 16-byte path: a kernel that drops either one differs from frozen
SCALES = dict(k_scale=0.37, v_scale=1.3)
WIDE_CASES = {
    # G = 6, Q = 1 (6 rows), T = 70 -> A = 1 < S = 2; 16-byte loads
    "T70_q1_g6": (5, 1, 1, 6, 1, 256, 16, [70], 2, None, False),
    # G = 6, Q = 3 (18 rows: a full and a nearly empty row group), S = 8 > A = 5, rows of zero
    # and negative length, a row shorter than one tile, padded strides (the byte path)
    "T300_q3_g6_zero_rows": (4, 1, 3, 6, 1, 256, 32, [300], 8,
                             np.array([[0, 300, 17]], np.int32), True, SCALES),
    # two KV heads, Q = 8, page 5 (chunks cross pages inside a tile: the block-table recompute),
    # A = 3 but S = 2; a second request shorter than one tile
    "T129_q8_g1_two_heads": (3, 2, 8, 2, 2, 256, 5, [129, 9], 2, None, False, SCALES),
}


@pytest.mark.parametrize("variant", WIDE_VARIANTS)
@pytest.mark.parametrize("name", list(WIDE_CASES))
def test_wide_bitwise_equal_to_frozen(name, variant):
    seed, B, Q, Hq, Hkv, D, page, seq, splits, rows, strided, *scales = WIDE_CASES[name]
    rng = np.random.default_rng(seed)
    c = case(rng, B=B, Q=Q, Hq=Hq, Hkv=Hkv, D=D, page_size=page, seq_lens=seq,
             row_lengths=rows, strided=strided, **(scales[0] if scales else {}))
    ref = _assert_same(c, splits, variant)
    T = int(rows[0].max()) if rows is not None else seq[0]
    A = active_splits(T, splits)
    if A < splits:      # (where every split is active there is no unwritten one to look at)
        assert np.all(ref.partial[0, A:] == d2.SENTINEL) and np.all(ref.lse[0, A:] == d2.SENTINEL)


@pytest.mark.parametrize("variant", WIDE_VARIANTS)
@pytest.mark.parametrize("which", ["k_cache", "v_cache"])
def test_wide_nan_codes_and_byte_path(which, variant, monkeypatch):
    """NaN codes in K or V, in a boundary tile (the masked PV path) and in a tile every row
    sees, through the byte path (forced) and the 16-byte path."""
    from dflash2_numba.attention import tiled

    c = _nan_case(32, 256, which, ((43, 200, 0x7F), (10, 3, 0xFF)))
    _assert_same(c, 2, variant)
    monkeypatch.setattr(tiled, "_u32_view", lambda arr: None)
    _assert_same(c, 2, variant)


def test_tiled_wide_refuses_other_head_dims_before_any_launch():
    rng = np.random.default_rng(33)
    c = case(rng, B=1, Q=1, Hq=1, Hkv=1, D=64, page_size=16, seq_lens=[5])
    ws = d2.AttentionWorkspace(batch=1, q_len=1, heads=1, head_dim=64, splits=2)
    ws.fill_sentinel()
    d2.route_counters(reset=True)
    with pytest.raises(d2.UnsupportedShape, match=r"^variant: tiled_wide: head dim 64"):
        d2.verify_attention(**c, splits=2, variant="tiled_wide", workspace=ws)
    assert d2.route_counters() == {}
    assert np.all(np.asarray(ws.partial.copy_to_host() if hasattr(ws.partial, "copy_to_host")
                             else ws.partial) == d2.SENTINEL)


def test_tiled_wide_routes_its_own_kernels():
    """The simulator runs the form of compute capability 8.0 and up (two CTAs an SM)."""
    from dflash2_numba.attention import tiled_wide

    names = {k.name for k in tiled_wide.VARIANT.kernels}
    assert {"attention.tiled_wide.split.d256", "attention.tiled_wide.split.d256.sm70"} <= names
    rng = np.random.default_rng(34)
    c = case(rng, B=1, Q=1, Hq=6, Hkv=1, D=256, page_size=16, seq_lens=[20], strided=False)
    _assert_same(c, 1, "tiled_wide")
    d2.route_counters(reset=True)
    sentinel_run(d2, c, "tiled_wide", 1)
    assert d2.route_counters() == {"attention.tiled_wide.split.d256": 1,
                                   "attention.tiled_wide.combine": 1}
