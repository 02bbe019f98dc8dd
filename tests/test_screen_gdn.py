"""The GDN screen catches what it exists to catch: variants that are wrong in one path only
(an empty sequence's state, the order of the state-cache slots), a variant that writes next
to its output (guard elements) and one that writes into its inputs; each mutant is the frozen
``chunked`` run and then one corruption."""
from __future__ import annotations

import numpy as np
import pytest

from dflash2_numba import _registry
from dflash2_numba._compat import SIMULATOR, cuda
from dflash2_numba.contract import SENTINEL
from dflash2_numba.gdn import chunked
from dflash2_numba.screen.cases import GdnCaseSpec
from dflash2_numba.screen.gdn import GUARD, _guarded_output, screen_case

# two empty sequences between and after real ones, with initial states (an empty sequence's
# final state is its initial state)
SPEC = GdnCaseSpec("varlen 0/5/0/3 h0", T=8, H=1, HV=2, K=32, V=32, seq_lens=[0, 5, 0, 3, 0],
                   initial_state=True, seed=5)


def _zero_empty_states(plan, stream):
    chunked.run(plan, stream)
    cuda.synchronize()
    seqs, slots = plan.seqs.copy_to_host(), plan.hT_idx.copy_to_host()
    h = plan.hT.copy_to_host()
    for n in range(seqs.shape[0]):
        if seqs[n, 2] == 0 and slots[n] >= 0:
            h[slots[n]] = 0.0
    plan.hT.copy_to_device(h)


def _slots_in_ascending_order(plan, stream):
    for name in ("h0_idx", "hT_idx"):
        idx = getattr(plan, name).copy_to_host()
        if idx.min() >= 0:
            setattr(plan, name, cuda.to_device(np.sort(idx).astype(np.int32)))
    chunked.run(plan, stream)


def _writes_its_input(plan, stream):
    chunked.run(plan, stream)
    cuda.synchronize()
    q = plan.q.copy_to_host()
    q[0, 0, 0, 0] = q[0, 0, 0, 0] + q.dtype.type(1)
    plan.q.copy_to_device(q)


def _writes_next_to_its_output(plan, stream):
    """A stand-in for a kernel that stores one element past ``o``: on the simulator the
    caller's output is a numpy view, so the element after it is reached through its base."""
    chunked.run(plan, stream)
    cuda.synchronize()
    base = plan.o._ary
    while base.base is not None:
        base = base.base
    base.reshape(-1)[-1] = 0


MUTANTS = {"bad_empty_state": _zero_empty_states, "bad_slot_order": _slots_in_ascending_order,
           "bad_writes_input": _writes_its_input, "bad_writes_past_o": _writes_next_to_its_output}


@pytest.fixture
def mutants():
    made = []
    for name, run in MUTANTS.items():
        made.append(_registry.register(_registry.Variant(
            name=name, family="gdn", description="deliberately wrong (test)",
            contract="B", kernels=chunked.VARIANT.kernels, run=run, bitwise_reference="chunked")))
    yield [v.name for v in made]
    for v in made:
        _registry.unregister("gdn", v.name)


def test_gdn_screen_catches_one_path_mutants(mutants):
    wanted = list(mutants) if SIMULATOR else [m for m in mutants if m != "bad_writes_past_o"]
    rows = {r.variant: r for r in screen_case(SPEC, ["chunked"] + wanted, timing=False)}
    assert rows["chunked"].status == "ok", rows["chunked"].__dict__
    for name in wanted:
        assert rows[name].status == "FAIL", (name, rows[name].__dict__)
    assert rows["bad_empty_state"].bitwise is False
    assert rows["bad_slot_order"].bitwise is False
    assert any("input q was modified" in m for m in rows["bad_writes_input"].problems)
    if SIMULATOR:
        r = rows["bad_writes_past_o"]
        assert r.guards is False and r.bitwise is True
        assert any("guard element around o" in m for m in r.problems)


def _chunked_then_scaled(attr):
    """chunked's run, then the FP32 buffer ``attr`` (output or final state) made 1e-4 off."""
    def run(plan, stream):
        chunked.run(plan, stream)
        cuda.synchronize()
        arr = getattr(plan, attr)
        host = arr.copy_to_host()
        arr.copy_to_device((host.astype(np.float32) * np.float32(1 + 1e-4)).astype(host.dtype))
    return run


def _screen_beside_chunked(runs):
    """``{variant: row}`` of SPEC screened for chunked and, registered for the call only,
    one deliberately wrong variant per ``{name: run}`` (chunked's kernels, no bitwise
    reference: the oracle alone judges them)."""
    made = [_registry.register(_registry.Variant(
        name=name, family="gdn", description="deliberately wrong (test)", contract="B",
        kernels=chunked.VARIANT.kernels, run=run, bitwise_reference=None))
        for name, run in runs.items()]
    try:
        return {r.variant: r for r in screen_case(SPEC, ["chunked", *runs], timing=False)}
    finally:
        for v in made:
            _registry.unregister("gdn", v.name)


def test_gdn_screen_oracle_gate_catches_what_bytes_cannot():
    """Variants with no bitwise reference are judged by the oracle alone: an output or a
    final state 1e-4 off (past the FP32 bound 1e-5) must fail by name, chunked passing."""
    rows = _screen_beside_chunked({"bad_output_accuracy": _chunked_then_scaled("o"),
                                   "bad_state_accuracy": _chunked_then_scaled("hT")})
    assert rows["chunked"].status == "ok", rows["chunked"].__dict__
    r = rows["bad_output_accuracy"]
    assert r.status == "FAIL" and r.bitwise is None, r.__dict__
    assert any(m.startswith("output rel L2") for m in r.problems), r.problems
    r = rows["bad_state_accuracy"]
    assert r.status == "FAIL" and r.bitwise is None, r.__dict__
    assert any(m.startswith("final state rel L2") for m in r.problems), r.problems


def _chunked_then_fp16_off(whole):
    """chunked's run, then, in the FP16-output (server) call only, the output 1 % off
    (``whole``) or its largest element 0.2 % off; the FP32-output call is left right."""
    def run(plan, stream):
        chunked.run(plan, stream)
        cuda.synchronize()
        if np.dtype(plan.o.dtype) != np.float16:
            return
        host = plan.o.copy_to_host().astype(np.float32)
        if whole:
            host *= np.float32(1.01)
        else:
            i = np.unravel_index(np.argmax(np.abs(host)), host.shape)
            host[i] *= np.float32(1.002)
        plan.o.copy_to_device(host.astype(np.float16))
    return run


def test_gdn_screen_checks_the_fp16_output_against_the_oracle():
    """An FP16 output off while the FP32 output is right fails on the FP16 oracle checks
    (derived from the FP32 bound, not from the FP32 output): 1 % off on relative L2 and per
    element, one element 0.2 % off (relative L2 still within 2**-11 + 1e-5) per element;
    no FP32 check fires, chunked passes."""
    rows = _screen_beside_chunked({"bad_fp16_output": _chunked_then_fp16_off(True),
                                   "bad_fp16_element": _chunked_then_fp16_off(False)})
    assert np.dtype(SPEC.dtype) == np.float16
    assert rows["chunked"].status == "ok", rows["chunked"].__dict__
    for name, rel_fails in (("bad_fp16_output", True), ("bad_fp16_element", False)):
        r = rows[name]
        assert r.status == "FAIL" and r.bitwise is None, r.__dict__
        assert not any(m.startswith(("output", "final state")) for m in r.problems), r.problems
        assert any(m.startswith("FP16 output rel L2") for m in r.problems) == rel_fails, r.problems
        assert any(m.startswith("FP16 output") and "farther from the oracle" in m
                   for m in r.problems), r.problems


def test_fp16_oracle_problems_needs_no_fp32_output():
    """The screen's FP16 check on its own: the rounding of the oracle passes, 1.01 times it
    fails both ways, its largest element 0.3 % off (several FP16 spacings) fails per element
only."""
    from dflash2_numba.screen.variant_steps import fp16_oracle_problems

    ref = np.random.default_rng(3).standard_normal((1, 64, 2, 32)) * 0.05
    assert fp16_oracle_problems(ref.astype(np.float16), ref) == []
    bad = fp16_oracle_problems((ref * 1.01).astype(np.float16), ref)
    assert len(bad) == 2 and bad[0].startswith("FP16 output rel L2"), bad
    assert "farther from the oracle" in bad[1], bad
    one = ref.astype(np.float16)
    i = np.unravel_index(np.argmax(np.abs(ref)), ref.shape)
    one[i] = np.float16(ref[i] * 1.003)
    bad = fp16_oracle_problems(one, ref)
    assert len(bad) == 1 and "farther from the oracle" in bad[0], bad


def test_guarded_output_sees_a_write_on_either_side():
    for where in (GUARD - 1, -GUARD):
        out = _guarded_output((1, 4, 2, 32), np.float32)
        assert out.guards_intact()
        assert np.all(out.view.copy_to_host() == SENTINEL)
        flat = out.flat.copy_to_host()
        flat[where] = 0.0
        out.flat.copy_to_device(flat)
        assert not out.guards_intact()
