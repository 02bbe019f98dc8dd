"""Defined behaviour for special values (contract A, E4M3 NaN codes 0x7F / 0xFF):

* non-finite inputs the caller controls (q; GDN q/k/v/g/beta/initial state; scales) are
  errors raised before launch (tests in the validation suites);
* a NaN byte in the K or V cache reaches only the rows that see its key: every other row
  (same tile, same split) is bit-identical to a run with a finite byte there; the rows
  that see it are NaN, except for a NaN K byte in the only tile of its split that a row
  sees, where ``if tsum > 0`` drops that split (README, "Defined behaviour").
"""
import numpy as np
import pytest

import dflash2_numba as d2
import oracle


@pytest.mark.parametrize("which", ["k_cache", "v_cache"])
def test_nan_byte_reaches_only_rows_that_see_it(which):
    rng = np.random.default_rng(21)
    # one request, 4 rows: rows 0/1 see 40 keys, rows 2/3 see 45 (same 32-key tile 1)
    rows = np.array([[40, 40, 45, 45]], np.int32)
    c = oracle.random_attention_case(rng, B=1, Q=4, Hq=2, Hkv=1, D=64, page_size=16,
                                     seq_lens=[45], strided=False, row_lengths=rows)
    clean = d2.verify_attention(**c, splits=2, out_dtype="float32")
    cache = c[which].copy()
    key = 43                                   # seen by rows 2 and 3 only
    page = c["block_table"][0, key // 16]
    cache[page, key % 16, 0, 7] = 0x7F         # NaN code
    dirty = d2.verify_attention(**dict(c, **{which: cache}), splits=2, out_dtype="float32")
    assert np.isnan(dirty.out[0, 2:]).any() and np.isnan(dirty.out[0, 3]).any()
    assert not np.isnan(dirty.out[0, :2]).any()
    assert dirty.out[0, :2].tobytes() == clean.out[0, :2].tobytes()
    assert dirty.partial[0, :1, :2].tobytes() == clean.partial[0, :1, :2].tobytes()   # A = 1
    assert dirty.lse[0, :1, :2].tobytes() == clean.lse[0, :1, :2].tobytes()


def test_nan_v_byte_lands_where_the_oracle_puts_it():
    """A NaN V byte: the kernel's NaN entries are exactly the oracle's (fp64 and mp), the
    rows that see its key, in its column; everything else is finite in both."""
    rng = np.random.default_rng(22)
    rows = np.array([[40, 40, 45, 45]], np.int32)
    c = oracle.random_attention_case(rng, B=1, Q=4, Hq=2, Hkv=1, D=64, page_size=16,
                                     seq_lens=[45], strided=False, row_lengths=rows)
    key = 43
    c["v_cache"][c["block_table"][0, key // 16], key % 16, 0, 7] = 0x7F
    got = d2.verify_attention(**c, splits=2, out_dtype="float32").out
    for precision in ("fp64", "mp"):
        ref = np.asarray(oracle.attention_reference(**c, precision=precision), np.float64)
        assert oracle.first_mismatch(np.isnan(got), np.isnan(ref)) is None, precision
    assert np.isnan(got[0, 2:, :, 7]).all() and np.isfinite(np.delete(got, 7, axis=-1)).all()


@pytest.mark.parametrize("T,key,split", [(12, 10, 0), (150, 140, 2)])
def test_nan_k_byte_alone_in_a_split_drops_that_split(T, key, split):
    A = split + 1                           # the active splits (the last holds the NaN)
    """Contract A's ``if tsum > 0``: a NaN K byte makes the tile's sum NaN, so the tile does
    not count as live. When it is the only tile of its split that the row sees (T <= 32: one
    split of one tile; T = 150 with 80 splits: tiles 2 + 2 + 1, the key in the last), the
    split records ``lse = (-1e30, 0)`` with a NaN numerator, and the combine skips it: the row
    gets the other splits' finite result (+0 when there are none), where the FP64 oracle
    says NaN. Every variant keeps the same bytes."""
    rng = np.random.default_rng(23)
    c = oracle.random_attention_case(rng, B=1, Q=1, Hq=1, Hkv=1, D=64, page_size=32,
                                     seq_lens=[T], strided=False)
    c["k_cache"][c["block_table"][0, key // 32], key % 32, 0, 5] = 0x7F
    assert np.isnan(oracle.attention_reference(**c)).all()
    frozen = d2.verify_attention(**c, out_dtype="float32")
    assert np.isfinite(frozen.out).all()
    if split == 0:
        assert frozen.out.tobytes() == np.zeros_like(frozen.out).tobytes()    # +0, no split left
    assert frozen.lse[0, split, 0, 0].tobytes() == np.float32([-1e30, 0.0]).tobytes()
    assert np.isnan(frozen.partial[0, split]).all()
    for name in d2.attention_variants():
        try:
            r = d2.verify_attention(**c, out_dtype="float32", variant=name)
        except d2.UnsupportedShape:          # tiled_wide: head dim 256 only
            continue
        assert oracle.first_mismatch(r.out, frozen.out) is None, name
        for part in ("partial", "lse"):       # splits >= A are never written
            assert oracle.first_mismatch(getattr(r, part)[:, :A],
                                         getattr(frozen, part)[:, :A]) is None, (name, part)
