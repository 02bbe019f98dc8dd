"""Defined behaviour for special values (contract A, E4M3 NaN codes 0x7F / 0xFF):

* non-finite inputs the caller controls (q; GDN q/k/v/g/beta/initial state; scales) are
  errors raised before launch (tests in the validation suites);
* a NaN byte in the K or V cache reaches only the rows that see its key: every other row
  (same tile, same split) is bit-identical to a run with a finite byte there;
* a NaN V byte makes those rows NaN in its column, where the oracle puts NaN;
* a NaN K byte makes its score NaN, which the kernels' ``max`` ignores (numba's ``max`` of
  two floats is ``fmaxf`` on a GPU; the simulator is patched to match): the key's probability
  is ``E(-80)``, whose FP16 parts are 0, so the rows that see it get the result of the key
  being invisible, where the FP64 oracle gives NaN. Every variant keeps these bytes.
"""
import numpy as np
import pytest

import dflash2_numba as d2
import oracle


def _rows_case(seed):
    rng = np.random.default_rng(seed)
    # one request, 4 rows: rows 0/1 see 40 keys, rows 2/3 see 45 (same 32-key tile 1)
    rows = np.array([[40, 40, 45, 45]], np.int32)
    return oracle.random_attention_case(rng, B=1, Q=4, Hq=2, Hkv=1, D=64, page_size=16,
                                        seq_lens=[45], strided=False, row_lengths=rows)


def _with_nan(c, which, key, col=7):
    cache = c[which].copy()
    page_size = cache.shape[1]
    cache[c["block_table"][0, key // page_size], key % page_size, 0, col] = 0x7F
    return dict(c, **{which: cache})


@pytest.mark.parametrize("which", ["k_cache", "v_cache"])
def test_nan_byte_reaches_only_rows_that_see_it(which):
    c = _rows_case(21)
    clean = d2.verify_attention(**c, splits=2, out_dtype="float32")
    key = 43                                   # seen by rows 2 and 3 only
    dirty = d2.verify_attention(**_with_nan(c, which, key), splits=2, out_dtype="float32")
    if which == "v_cache":
        assert np.isnan(dirty.out[0, 2:, :, 7]).all()
    else:
        assert np.isfinite(dirty.out).all()
        assert dirty.out[0, 2:].tobytes() != clean.out[0, 2:].tobytes()
    assert not np.isnan(dirty.out[0, :2]).any()
    assert dirty.out[0, :2].tobytes() == clean.out[0, :2].tobytes()
    assert dirty.partial[0, :1, :2].tobytes() == clean.partial[0, :1, :2].tobytes()   # A = 1
    assert dirty.lse[0, :1, :2].tobytes() == clean.lse[0, :1, :2].tobytes()


def _without_key(c, key):
    """The case with key ``key`` removed (B = 1): the tokens after it move down one place,
    into a fresh cache with an identity block table, and every row that saw it sees one key
    fewer. Its FP64 reference is what a row gets when the key carries no weight."""
    bt, ps = c["block_table"][0], c["k_cache"].shape[1]
    T = int(max(c["seq_lens"][0], c.get("row_lengths", np.zeros((1, 1), np.int32)).max()))
    npg = -(-T // ps)
    out = dict(c)
    for name in ("k_cache", "v_cache"):
        cache = c[name]
        tok = cache[bt[:npg]].reshape(npg * ps, *cache.shape[2:])[:T]
        tok = np.delete(tok, key, axis=0)
        fresh = np.zeros((npg, ps) + cache.shape[2:], cache.dtype)
        fresh.reshape(npg * ps, *cache.shape[2:])[:T - 1] = tok
        out[name] = fresh
    out["block_table"] = np.arange(npg, dtype=np.int32)[None]
    rows = (c["row_lengths"] if "row_lengths" in c
            else oracle.row_lengths_of(c["seq_lens"], c["q"].shape[1]).astype(np.int32))
    out["row_lengths"] = np.where(rows > key, rows - 1, rows).astype(np.int32)
    out["seq_lens"] = c["seq_lens"] - 1
    return out


@pytest.mark.parametrize("T,key,Q", [(45, 43, 4), (12, 10, 1), (150, 140, 1), (150, 20, 1)])
def test_nan_k_byte_carries_no_weight(T, key, Q):
    """A NaN K byte: the rows that see its key get the FP64 result of the key removed
    (within the FP32 bound), finite where the oracle says NaN; it holds also where the
    key's tile is the only one of its split (T = 12: one split of one tile; T = 150 with 80
    splits: tiles 2 + 2 + 1, key 140 in the last). Every variant keeps frozen's bytes."""
    if Q == 4:
        c = _rows_case(23)
    else:
        c = oracle.random_attention_case(np.random.default_rng(23), B=1, Q=Q, Hq=1, Hkv=1,
                                         D=64, page_size=32, seq_lens=[T], strided=False)
    dirty_case = _with_nan(c, "k_cache", key, col=5)
    assert np.isnan(oracle.attention_reference(**dirty_case)[0, -1]).all()
    frozen = d2.verify_attention(**dirty_case, out_dtype="float32")
    assert np.isfinite(frozen.out).all()
    want = oracle.attention_reference(**_without_key(c, key))
    assert oracle.rel_l2(frozen.out, want) <= 1e-5
    A = 1 if T <= 128 else 3                 # the active splits (80 asked)
    for name in d2.attention_variants():
        try:
            r = d2.verify_attention(**dirty_case, out_dtype="float32", variant=name)
        except d2.UnsupportedShape:          # tiled_wide: head dim 256 only
            continue
        assert oracle.first_mismatch(r.out, frozen.out) is None, name
        for part in ("partial", "lse"):       # splits >= A are never written
            assert oracle.first_mismatch(getattr(r, part)[:, :A],
                                         getattr(frozen, part)[:, :A]) is None, (name, part)


def test_nan_v_byte_lands_where_the_oracle_puts_it():
    """A NaN V byte: the kernel's NaN entries are exactly the oracle's (fp64 and mp), the
    rows that see its key, in its column; everything else is finite in both."""
    c = _with_nan(_rows_case(22), "v_cache", key=43)
    got = d2.verify_attention(**c, splits=2, out_dtype="float32").out
    for precision in ("fp64", "mp"):
        ref = np.asarray(oracle.attention_reference(**c, precision=precision), np.float64)
        assert oracle.first_mismatch(np.isnan(got), np.isnan(ref)) is None, precision
    assert np.isnan(got[0, 2:, :, 7]).all() and np.isfinite(np.delete(got, 7, axis=-1)).all()
