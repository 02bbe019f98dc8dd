"""``DFLASH2_EMULATE_CC``: every plan-time choice that depends on the device answers as on a
device of the named compute capability (the forms a variant launches, the shared-memory
limits it checks), so the sm_70 forms can be screened and sanitised on a newer GPU. Checked
on the simulator: the answers, the refusal of bad values, and a GDN variant's sm_70 plan
(the attention variants' are in ``test_tiled_sm70_forms_sim.py``)."""
from __future__ import annotations

import pytest

from dflash2_numba import _registry
from dflash2_numba._compat import EMULATE_CC_ENV, device_cc_at_least, emulated_cc
from dflash2_numba._dynshared import SHARED_LIMITS, max_dynamic_shared, shared_per_sm


def test_unset_keeps_the_simulators_answers(monkeypatch):
    monkeypatch.delenv(EMULATE_CC_ENV, raising=False)
    assert emulated_cc() is None
    assert device_cc_at_least((8, 0)) and device_cc_at_least((9, 0))
    assert max_dynamic_shared() == 96 * 1024 and shared_per_sm() == 96 * 1024


@pytest.mark.parametrize("raw, cc, per_block, per_sm", [
    ("7.0", (7, 0), 96 * 1024, 96 * 1024),
    (" 7.5 ", (7, 5), 64 * 1024, 64 * 1024),
    ("8.6", (8, 6), 99 * 1024, 100 * 1024),
    ("9.0", (9, 0), 227 * 1024, 228 * 1024),
])
def test_a_named_capability_sets_the_forms_and_the_limits(monkeypatch, raw, cc, per_block, per_sm):
    monkeypatch.setenv(EMULATE_CC_ENV, raw)
    assert emulated_cc() == cc
    assert device_cc_at_least(cc) and device_cc_at_least((7, 0))
    assert device_cc_at_least((8, 0)) == (cc >= (8, 0))
    assert not device_cc_at_least((cc[0], cc[1] + 1))
    assert SHARED_LIMITS[cc] == (per_block, per_sm)
    assert max_dynamic_shared() == per_block and shared_per_sm() == per_sm


@pytest.mark.parametrize("raw", ["seven", "7", "7.0.1", "7,0"])
def test_a_malformed_value_is_refused_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(EMULATE_CC_ENV, raw)
    with pytest.raises(ValueError, match=EMULATE_CC_ENV):
        emulated_cc()


@pytest.mark.parametrize("raw", ["6.1", "7.2", "10.0", "-7.0"])
def test_a_capability_without_known_limits_is_refused(monkeypatch, raw):
    """Refused when read, not at the first shared-memory check: before, ``6.1`` planned
    ``chunked`` and failed ``tiled_compact`` at plan time, and the screen ran."""
    monkeypatch.setenv(EMULATE_CC_ENV, raw)
    pattern = rf"{EMULATE_CC_ENV}='{raw}': no shared-memory limits known .*known: 7.0, 7.5"
    for ask in (emulated_cc, lambda: device_cc_at_least((7, 0)), max_dynamic_shared,
                shared_per_sm):
        with pytest.raises(ValueError, match=pattern):
            ask()


def test_gdn_fastest_variant_at_cc70_runs_the_sm70_output_kernel_with_chunkeds_bytes(monkeypatch):
    """``chunked_ahead`` planned as on a V100: the staged output kernel (``gdn_chunk_out``,
    below compute capability 8.0) instead of the streamed one, and chunked's bytes."""
    from tests.test_gdn_variants_sim import KNOB_CASE, VARIANTS, _assert_same, _inputs, _reference

    assert "chunked_ahead" in VARIANTS
    from dflash2_numba.gdn.api import gdn_prefill

    ref_o, ref_s = _reference(KNOB_CASE, "float32")
    monkeypatch.setenv(EMULATE_CC_ENV, "7.0")
    _registry.route_counters(reset=True)
    o, s = gdn_prefill(**_inputs(KNOB_CASE), variant="chunked_ahead", out_dtype="float32")
    routes = _registry.route_counters(reset=True)
    assert routes.get("gdn_chunk_out", 0) >= 1, routes
    assert "gdn_chunk_out_pipe" not in routes and "gdn_chunk_out_wide" not in routes
    _assert_same(o, ref_o, "chunked_ahead at cc 7.0: output")
    _assert_same(s, ref_s, "chunked_ahead at cc 7.0: final state")
