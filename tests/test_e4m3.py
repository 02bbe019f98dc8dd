"""E4M3FN codec: the kernels' 256-entry table against ml_dtypes and the bit fields."""
import ml_dtypes
import numpy as np
import pytest

from dflash2_numba import e4m3


def test_table_matches_ml_dtypes_for_all_256_codes():
    codes = np.arange(256, dtype=np.uint8)
    ref = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert e4m3.DECODE_TABLE.dtype == np.float32
    assert np.array_equal(_bits(e4m3.DECODE_TABLE), _bits(ref))         # signs of zero too
    assert np.isnan(e4m3.DECODE_TABLE[[0x7F, 0xFF]]).all()
    assert np.isfinite(np.delete(e4m3.DECODE_TABLE, [0x7F, 0xFF])).all()


def _bits(x):
    """float32 bit patterns (so -0.0 and +0.0 differ); NaNs all map to one pattern."""
    a = np.asarray(x, np.float32)
    return np.where(np.isnan(a), np.uint32(0x7FC00000), a.view(np.uint32))


def test_table_matches_bit_fields():
    for code in range(256):
        want = e4m3.decode_exact(code)
        got = float(e4m3.DECODE_TABLE[code])
        assert _bits(want) == _bits(got), code
    assert np.signbit(e4m3.DECODE_TABLE[0x80]) and not np.signbit(e4m3.DECODE_TABLE[0x00])
    assert e4m3.decode_exact(0x7E) == 448.0 and e4m3.decode_exact(0x01) == 2.0 ** -9


def test_values_exact_in_fp16():
    finite = e4m3.DECODE_TABLE[np.isfinite(e4m3.DECODE_TABLE)]
    assert np.array_equal(finite.astype(np.float16).astype(np.float32), finite)


def test_encode_rounds_to_nearest_even_saturates_and_keeps_nan():
    assert e4m3.encode([1.0625])[0] == e4m3.encode([1.0])[0]          # tie -> even mantissa
    assert e4m3.encode([1.1875])[0] == e4m3.encode([1.25])[0]         # tie -> even (1.25 has mantissa 2)
    assert e4m3.decode(e4m3.encode([1e6, -1e6, 448.0, 465.0])).tolist() == [448.0, -448.0, 448.0, 448.0]
    assert np.isnan(e4m3.decode(e4m3.encode([np.nan])))[0]


def test_round_trip_of_every_finite_code():
    codes = np.array([c for c in range(256) if c not in (0x7F, 0xFF)], np.uint8)
    assert np.array_equal(e4m3.encode(e4m3.decode(codes)), codes)


def test_decode_rejects_wrong_dtype():
    with pytest.raises(TypeError, match="codes"):
        e4m3.decode(np.zeros(3, np.int32))


def test_encode_rounds_float64_once():
    # 1.0625 + 2**-30 lies above the tie 1.0625: nearest is 1.125.  Through float32 it
    # would first round to the tie 1.0625 and then to the even 1.0.
    x = 1.0625 + 2.0 ** -30
    assert e4m3.decode(e4m3.encode(np.array([x])))[0] == 1.125
    assert e4m3.decode(e4m3.encode(np.array([x], np.float32)))[0] == 1.0


def test_decode_exact_refuses_codes_outside_a_byte():
    for bad in (256, -1):
        with pytest.raises(ValueError, match="code"):
            e4m3.decode_exact(bad)
    for bad in (1.7, True):
        with pytest.raises(TypeError, match="code"):
            e4m3.decode_exact(bad)
