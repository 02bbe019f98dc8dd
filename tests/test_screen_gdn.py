"""The GDN screen catches what it exists to catch: variants that are wrong in one path only
(an empty sequence's state, the order of the state-cache slots), a variant that writes next
to its output or final state (guard elements, one row away included), one that writes into
its inputs (``state_indices`` included), one that leaves final-state words unwritten
(sentinel-filled state) and one state element off per element only (max abs); each mutant
is the frozen ``chunked`` run and then one corruption."""
from __future__ import annotations

import numpy as np
import pytest

import oracle

from dflash2_numba import _registry
from dflash2_numba._compat import SIMULATOR, cuda
from dflash2_numba.contract import SENTINEL
from dflash2_numba.gdn import api as gdn_api
from dflash2_numba.gdn import chunked
from dflash2_numba.screen import gdn as gdn_screen
from dflash2_numba.screen.cases import GdnCaseSpec
from dflash2_numba.screen.gdn import _guarded_output, guard_elements, screen_case

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


def _register(name, run, bitwise_reference="chunked"):
    """A deliberately wrong GDN variant on chunked's kernels (unregistered by the caller)."""
    return _registry.register(_registry.Variant(
        name=name, family="gdn", description="deliberately wrong (test)", contract="B",
        kernels=chunked.VARIANT.kernels, run=run, bitwise_reference=bitwise_reference))


@pytest.fixture
def mutants():
    made = [_register(name, run) for name, run in MUTANTS.items()]
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


def _screen_beside_chunked(runs, spec=SPEC, reference=None):
    """``{variant: row}`` of ``spec`` screened for chunked and, registered for the call only,
    one deliberately wrong variant per ``{name: run}`` (chunked's kernels; bitwise
    ``reference`` None by default: the oracle alone judges them)."""
    made = [_register(name, run, reference) for name, run in runs.items()]
    try:
        return {r.variant: r for r in screen_case(spec, ["chunked", *runs], timing=False)}
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
    for shape, what, want in (((1, 4, 2, 32), "output", 2 * 32),
                              ((3, 2, 32, 64), "state", 2 * 32 * 64)):
        guard = guard_elements(shape, what)
        assert guard == want           # one token's row / one sequence's state
        for where in (guard - 1, -guard, 0, -1):
            out = _guarded_output(shape, np.float32, what)
            assert out.guard == guard and out.guards_intact()
            assert np.all(out.view.copy_to_host() == SENTINEL)
            flat = out.flat.copy_to_host()
            flat[where] = 0.0
            out.flat.copy_to_device(flat)
            assert not out.guards_intact()


def _named_states_then(change):
    """chunked's run, then ``change(states)`` on the named final states ``hT[hT_idx]``
    (``[N, HV, K, V]``, in place), alike in the plain and the server form, so the state
    cache still equals the plain form's state."""
    def run(plan, stream):
        chunked.run(plan, stream)
        cuda.synchronize()
        idx = plan.hT_idx.copy_to_host()
        h = plan.hT.copy_to_host()
        named = h[idx]
        change(named)
        h[idx] = named
        plan.hT.copy_to_device(h)
    return run


def _one_state_element_off(named):
    """The largest element moved by 0.6e-5 x the states' L2 norm: relative L2 about 6e-6
    (within 1e-5), per element several times 1e-5 x max|ref|."""
    i = np.unravel_index(np.argmax(np.abs(named)), named.shape)
    named[i] += np.float32(0.6e-5 * np.linalg.norm(named.astype(np.float64)))


def _one_state_element_nan(named):
    named[(0,) * named.ndim] = np.nan


def test_gdn_screen_bounds_the_final_state_per_element():
    """Contract C's max abs check on the final state (no bitwise reference: the oracle alone
    judges): one element off past 1e-5 x max|ref| fails by name while its relative L2
    passes; a NaN in the state fails it too; chunked passes."""
    rows = _screen_beside_chunked({"bad_state_element": _named_states_then(_one_state_element_off),
                                   "bad_state_nan": _named_states_then(_one_state_element_nan)})
    assert rows["chunked"].status == "ok", rows["chunked"].__dict__
    r = rows["bad_state_element"]
    assert r.status == "FAIL" and r.bitwise is None and r.guards is True, r.__dict__
    assert r.state_err <= 1e-5, r.state_err
    assert len(r.problems) == 1 and r.problems[0].startswith("final state max abs"), r.problems
    r = rows["bad_state_nan"]
    assert r.status == "FAIL", r.__dict__
    assert any(m.startswith("final state max abs nan") for m in r.problems), r.problems
    assert any(m.startswith("final state rel L2 nan") for m in r.problems), r.problems


def _plain_form(plan) -> bool:
    """The plain form writes a final state of its own; the server form updates the state
    cache it reads in place (``h0`` is ``hT``)."""
    return plan.hT is not plan.h0


def _leaves_empty_states_unwritten(plan, stream):
    """A kernel that, in the plain form only, never copies an empty sequence's initial state
    to its final state: those words keep what the buffer held before the launch (the
    server form's in-place cache already holds it, so that form is right)."""
    before = plan.hT.copy_to_host() if _plain_form(plan) else None
    chunked.run(plan, stream)
    if before is None:
        return
    cuda.synchronize()
    seqs, slots = plan.seqs.copy_to_host(), plan.hT_idx.copy_to_host()
    h = plan.hT.copy_to_host()
    for n in np.flatnonzero(seqs[:, 2] == 0):
        h[slots[n]] = before[slots[n]]
    plan.hT.copy_to_device(h)


def test_gdn_screen_sentinel_fills_the_plain_final_state(monkeypatch):
    """The plain form's final state is sentinel-filled before the launch, whatever memory the
    call would have had: here the call's own buffer comes pre-filled with the oracle's final
    state (a GPU allocator may hand back the previous variant's freed, correct state). Every
    variant (chunked included) sees only sentinels in its plain-form state before it runs,
    and a variant that never writes the empty sequences' states there fails on them."""
    c = SPEC.build()
    _, ref_h = oracle.gdn_reference(c["q"], c["k"], c["v"], c["g"], c["beta"], scale=c["scale"],
                                    initial_state=c["initial_state"], cu_seqlens=c["cu_seqlens"],
                                    use_qk_l2norm=c["use_qk_l2norm"])
    real_allocate = gdn_api.allocate

    def allocate(shape, dtype, stream, sized_by):
        if tuple(shape) == ref_h.shape and np.dtype(dtype) == np.float32:
            return cuda.to_device(ref_h.astype(np.float32))
        return real_allocate(shape, dtype, stream, sized_by)

    monkeypatch.setattr(gdn_api, "allocate", allocate)
    seen = []

    def probe(plan, stream):
        if _plain_form(plan):
            seen.append(bool(np.all(plan.hT.copy_to_host() == SENTINEL)))
        chunked.run(plan, stream)

    rows = _screen_beside_chunked({"probe_plain_state": probe,
                                   "bad_unwritten_empty_state": _leaves_empty_states_unwritten},
                                  reference="chunked")
    assert seen == [True], seen
    assert rows["chunked"].status == "ok", rows["chunked"].__dict__
    assert rows["probe_plain_state"].status == "ok", rows["probe_plain_state"].__dict__
    r = rows["bad_unwritten_empty_state"]
    assert r.status == "FAIL" and r.bitwise is False and r.guards is True, r.__dict__
    assert r.mismatch.startswith("state:"), r.mismatch
    assert any(m.startswith("final state rel L2") for m in r.problems), r.problems


# V = 128, one value head: a row of V elements is one token's whole output row, two of
# the old 64-element guards
SPEC_V128 = GdnCaseSpec("varlen 2/1 h0 V=128", T=3, H=1, HV=1, K=32, V=128, seq_lens=[2, 1],
                        initial_state=True, seed=7)


def _poke(arr, at: int) -> None:
    """Write 0 at element ``at`` from ``arr``'s first one (before it: negative; past it: at
    least its size), a stand-in for a kernel indexing out of bounds: on the simulator a
    device array is a numpy view, whose memory is reached through its base. A place outside
    that memory is left alone (a kernel's store there hits memory nobody checks)."""
    a = arr._ary
    base = a
    while base.base is not None:
        base = base.base
    flat = base.reshape(-1).view(a.dtype)
    first = (a.__array_interface__["data"][0] - flat.__array_interface__["data"][0]) // a.itemsize
    if 0 <= first + at < flat.size:
        flat[first + at] = 0


def _writes_a_row_past(attr):
    """chunked's run, then 0 at the last element of the V-row just past the buffer ``attr``
    and at the first element of the V-row just before it (output: the server and plain
    forms; final state: the plain form's only, the server form's cache has guard slots)."""
    def run(plan, stream):
        chunked.run(plan, stream)
        cuda.synchronize()
        if attr == "hT" and not _plain_form(plan):
            return
        arr = getattr(plan, attr)
        _poke(arr, arr.size + plan.V - 1)
        _poke(arr, -plan.V)
    return run


@pytest.mark.skipif(not SIMULATOR, reason="writes past a buffer through the simulator's numpy base")
def test_gdn_screen_guards_a_whole_row_around_outputs_and_state():
    """A store one V-row before or past the output or the plain form's final state lands in
    a guard (at V = 128 twice the old 64-element guard; the final state had none) and fails
    by name, the bytes of the buffers themselves right; chunked passes."""
    rows = _screen_beside_chunked({"bad_row_past_o": _writes_a_row_past("o"),
                                   "bad_row_past_state": _writes_a_row_past("hT")},
                                  spec=SPEC_V128, reference="chunked")
    assert rows["chunked"].status == "ok", rows["chunked"].__dict__
    for name, msg in (("bad_row_past_o", "output: a guard element around o was written"),
                      ("bad_row_past_state", "final state: a guard element around the plain "
                                             "form's final state was written")):
        r = rows[name]
        assert r.status == "FAIL" and r.guards is False and r.bitwise is True, r.__dict__
        assert r.problems == [msg], r.problems


def test_gdn_screen_checks_state_indices_unchanged(monkeypatch):
    """``state_indices`` is an input like the others: a call that writes it (here: the plan
    reversing the caller's array after reading it, so every launch is still right) fails by
    name; chunked passes."""
    real_plan = gdn_screen.plan_gdn

    def plan_gdn(*args, **kw):
        call = real_plan(*args, **kw)
        idx = kw.get("state_indices")
        if idx is not None and kw["variant"] == "bad_writes_state_indices":
            idx.copy_to_device(idx.copy_to_host()[::-1].copy())
        return call

    monkeypatch.setattr(gdn_screen, "plan_gdn", plan_gdn)
    rows = _screen_beside_chunked({"bad_writes_state_indices": chunked.run}, reference="chunked")
    assert rows["chunked"].status == "ok", rows["chunked"].__dict__
    r = rows["bad_writes_state_indices"]
    assert r.status == "FAIL" and r.bitwise is True and r.guards is True, r.__dict__
    assert r.problems == ["input state_indices was modified"], r.problems
