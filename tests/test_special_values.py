"""Defined behaviour for special values (contract A, E4M3 NaN codes 0x7F / 0xFF):

* non-finite inputs the caller controls (q; GDN q/k/v/g/beta/initial state; scales) are
  errors raised before launch (tests in the validation suites);
* a NaN byte in the K or V cache reaches exactly the rows that see its key: those rows'
  outputs are NaN, every other row (same tile, same split) is bit-identical to a run with
  a finite byte there.
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
