"""The screen catches what it exists to catch: a variant with one changed rounding (byte
comparison), a variant that writes past its buffer (guard rows), a variant that launches
another variant's kernel (route audit); and it passes the registered variants."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import dflash2_numba as d2
from dflash2_numba import _registry
from dflash2_numba._compat import cuda
from dflash2_numba.attention import frozen
from dflash2_numba.contract import EXP_CLAMP, LIVE_M_THRESHOLD, NEG_INF, active_splits
from dflash2_numba.screen import main as screen_main
from dflash2_numba.screen.cases import AttentionCaseSpec, gdn_matrix
from tests.attention_helpers import attention_variants_accepting

F0 = np.float32(0.0)
F1 = np.float32(1.0)


@cuda.jit
def _combine_two_roundings(seq_lens, row_lengths, use_rows, splits, partial, lse, out):
    """frozen's combine with one changed rounding: fma(w, inv * partial, acc) instead of
    fma(w * inv, partial, acc) (explicit fma both: no compiler contraction can merge the two
    forms; a first form, acc + (w*inv)*partial, was contracted into frozen's own fma on a
    GPU, session 39)."""
    b = cuda.blockIdx.x
    t = cuda.blockIdx.y
    h = cuda.blockIdx.z
    Q = out.shape[1]
    D = out.shape[3]
    L = row_lengths[b, t] if use_rows != 0 else seq_lens[b] - Q + 1 + t
    for d in range(cuda.threadIdx.x, D, cuda.blockDim.x):
        if L <= 0:
            out[b, t, h, d] = F0
            continue
        T = 0
        for tt in range(Q):
            Lt = row_lengths[b, tt] if use_rows != 0 else seq_lens[b] - Q + 1 + tt
            T = max(T, Lt)
        A = 1 if T <= 128 else min(splits, (T + 63) // 64)
        M = NEG_INF
        for s in range(A):
            M = max(M, lse[b, s, t, h, 0])
        den = F0
        for s in range(A):
            if lse[b, s, t, h, 0] > LIVE_M_THRESHOLD:
                w = np.float32(math.exp(max(lse[b, s, t, h, 0] - M, EXP_CLAMP)))
                den = cuda.fma(w, lse[b, s, t, h, 1], den)
        inv = F1 / den if den > F0 else F0
        acc = F0
        for s in range(A):
            if lse[b, s, t, h, 0] > LIVE_M_THRESHOLD:
                w = np.float32(math.exp(max(lse[b, s, t, h, 0] - M, EXP_CLAMP)))
                acc = cuda.fma(w, inv * partial[b, s, t, h, d], acc)
        out[b, t, h, d] = acc


@cuda.jit
def _poke(flat, index, value):
    if cuda.threadIdx.x == 0:
        flat[index] = value


def _register(name, run, kernels=frozen.VARIANT.kernels, bitwise_reference="frozen"):
    return _registry.register(_registry.Variant(
        name=name, family="attention", description="deliberately wrong (test)",
        contract="A", kernels=kernels, run=run, bitwise_reference=bitwise_reference))


def _default_rows_one_key_short(out_dtype=None):
    """frozen, right with explicit rows, one key short on the default causal rows (of the
    ``out_dtype`` output only, when given)."""
    def run(plan, stream):
        if plan.use_rows == 0 and (out_dtype is None or plan.out.dtype == out_dtype):
            plan.seq_lens = cuda.to_device(plan.seq_lens.copy_to_host() - 1)
        frozen.run(plan, stream)
    return run


@pytest.fixture
def bad_variants():
    split_spec, combine_spec = frozen.VARIANT.kernels

    def run_rounding(plan, stream):
        B, Q, Hq, D = plan.q_shape
        frozen.run(plan, stream)      # split + the right combine, then the wrong one on top
        _registry.launch("test.combine_two_roundings", _combine_two_roundings, (B, Q, Hq), 64, stream,
                         plan.seq_lens, plan.row_lengths, plan.use_rows, plan.splits,
                         plan.partial, plan.lse, plan.out)

    def run_past_rows(plan, stream):
        frozen.run(plan, stream)
        buf = plan.workspace._buffers["lse"]
        _registry.launch("test.poke", _poke, 1, 32, stream, buf.flat, buf.guard + buf.size, np.float32(1.0))

    def run_foreign(plan, stream):
        frozen.run(plan, stream)

    made = [
        _register("bad_rounding", run_rounding,
                  (split_spec, combine_spec, _registry.KernelSpec("test.combine_two_roundings",
                                                                 _combine_two_roundings.py_func, ()))),
        _register("bad_past_rows", run_past_rows,
                  (split_spec, combine_spec, _registry.KernelSpec("test.poke", _poke.py_func, ()))),
        _register("bad_route", run_foreign, (_registry.KernelSpec("test.own_kernel", _poke.py_func, ()),)),
        _register("bad_default_rows", _default_rows_one_key_short()),
    ]
    yield [v.name for v in made]
    for v in made:
        _registry.unregister("attention", v.name)


def test_screen_catches_wrong_variants(bad_variants, tmp_path, capsys):
    out = tmp_path / "s.json"
    rc = screen_main(["attention", "--quick", "--contexts", "150", "--variants", ",".join(bad_variants),
                      "--json", str(out)])
    import json

    every = json.loads(out.read_text())["rows"] if out.exists() else None
    assert rc == 1, (rc, every)
    assert every is not None, "no JSON report written"
    rows = {r["variant"]: r for r in every}
    r = rows["frozen"]
    assert r["status"] == "ok" and r["bitwise"] is None, r
    r = rows["bad_rounding"]
    assert r["status"] == "FAIL" and r["bitwise"] is False and r["mismatch"].startswith(("out16", "out32")), r
    assert r["guards"] is True and r["route_ok"] is True, r
    r = rows["bad_past_rows"]
    assert r["status"] == "FAIL" and r["guards"] is False and r["bitwise"] is True, r
    r = rows["bad_route"]
    assert r["status"] == "FAIL" and r["route_ok"] is False, r
    live = [r for r in every if r["variant"] == "bad_default_rows" and r["state"] == "live"]
    assert live and all(r["status"] == "FAIL" and r["bitwise"] is False for r in live), live


def _frozen_then(change):
    """frozen's run, then ``change`` applied to the host copy of its output."""
    def run(plan, stream):
        frozen.run(plan, stream)
        cuda.synchronize()
        out = plan.out.copy_to_host()
        plan.out.copy_to_device(change(out))
    return run


def _off_by_1e4(out):
    return (out.astype(np.float32) * np.float32(1 + 1e-4)).astype(out.dtype)


def _dead_rows_negative_zero(out):
    rows = out.reshape(-1, out.shape[-1])
    dead = np.all(rows.view(np.uint16 if out.dtype == np.float16 else np.uint32) == 0, axis=1)
    rows[dead] = -0.0
    return out


def test_screen_oracle_gate_catches_what_bytes_cannot():
    """Variants with no bitwise reference are judged by the oracle checks alone: an output
    1e-4 off (past the FP32 bound 1e-5) and dead rows written as -0.0 (which the oracle's
    +0 rows equal in value) must each fail, with frozen beside them passing."""
    by = _screen_beside_frozen({"bad_accuracy": _frozen_then(_off_by_1e4),
                                "bad_dead_rows": _frozen_then(_dead_rows_negative_zero)}, None)
    for state, r in by["bad_accuracy"].items():
        if state == "all rows zero":          # +0 * (1 + 1e-4) is +0: nothing to see
            continue
        assert r.status == "FAIL" and r.bitwise is None, (state, r.__dict__)
        assert any(m.startswith("FP32 rel L2") for m in r.problems), (state, r.problems)
    dead_states = ("all rows zero", "last row zero", "first row zero")
    for state, r in by["bad_dead_rows"].items():
        assert (r.status == "FAIL") == (state in dead_states), (state, r.__dict__)
        if state in dead_states:
            for out in ("FP32", "FP16"):
                assert f"a row with no visible key is not +0 in the {out} output" in r.problems, \
                    (state, r.problems)


# T = 40 of S = 4 splits: one active split (three the requests never reach), none in
# "all rows zero"
STATES_SPEC = AttentionCaseSpec("q2 T=40 states", B=1, Q=2, Hq=2, Hkv=1, D=64, page_size=16,
                                seq_lens=[40], splits=4, length_states=True, seed=9)


def _screen_beside_frozen(runs, bitwise_reference):
    """``screen_case`` on the five length states of a small case, frozen beside test
    variants ``{name: run}`` (frozen's kernels) of ``bitwise_reference``: ``{variant:
    {state: row}}``, frozen's rows asserted ok."""
    from dflash2_numba.screen.attention import screen_case

    made = [_register(name, run, bitwise_reference=bitwise_reference)
            for name, run in runs.items()]
    try:
        rows = screen_case(STATES_SPEC, ["frozen"] + list(runs), timing=False)
    finally:
        for v in made:
            _registry.unregister("attention", v.name)
    by = {}
    for r in rows:
        by.setdefault(r.variant, {})[r.state] = r
    assert all(r.status == "ok" for r in by["frozen"].values()), \
        {k: r.problems for k, r in by["frozen"].items()}
    return by


def _fp16_only(change):
    return lambda out: change(out) if out.dtype == np.float16 else out


def test_screen_fails_negative_zero_in_the_fp16_output_alone():
    """Dead rows written -0.0 in the FP16 output only (the FP32 output right): equal in value
    to f16(+0), but not its bytes, and not the contract's +0. Without a bitwise reference
    only the screen's own checks can see it."""
    by = _screen_beside_frozen({"bad_dead_rows16": _frozen_then(_fp16_only(_dead_rows_negative_zero))},
                               None)
    dead_states = ("all rows zero", "last row zero", "first row zero")
    for state, r in by["bad_dead_rows16"].items():
        assert (r.status == "FAIL") == (state in dead_states), (state, r.__dict__)
        if state in dead_states:
            assert set(r.problems) == {
                "FP16 output is not the RNE rounding of the FP32 output",
                "a row with no visible key is not +0 in the FP16 output"}, (state, r.problems)


def _skip_dead_rows_while_some_row_lives(plan, stream):
    """frozen, except that the combine leaves a row with no visible key unwritten when
    another row of its request sees keys (right when every row is dead)."""
    cuda.synchronize()
    before = plan.out.copy_to_host()
    frozen.run(plan, stream)
    cuda.synchronize()
    if plan.use_rows == 0:
        return
    rl = plan.row_lengths.copy_to_host()
    out = plan.out.copy_to_host()
    for b in range(rl.shape[0]):
        if rl[b].max() > 0:
            out[b, rl[b] <= 0] = before[b, rl[b] <= 0]
    plan.out.copy_to_device(out)


def test_screen_fills_the_sentinel_before_each_length_state():
    """A combine that skips a dead row while another row of the request lives: in "last
    row zero" the skipped last row held +0 from "all rows zero" (the right bytes) when the
    states ran on unrefilled buffers; each state now starts from the sentinel, so the row
    shows -777 there."""
    by = _screen_beside_frozen({"bad_skips_dead_rows": _skip_dead_rows_while_some_row_lives},
                               "frozen")
    for state, r in by["bad_skips_dead_rows"].items():
        failing = state in ("last row zero", "first row zero")
        assert (r.status == "FAIL") == failing, (state, r.__dict__)
        if failing:
            assert r.bitwise is False and r.mismatch.startswith(("out16", "out32")), (state, r.mismatch)
            assert any(m.startswith("FP32 rel L2") for m in r.problems), (state, r.problems)


def _write_first_inactive_split(plan, stream):
    """frozen, then split A's records (the first split the request does not reach) zeroed:
    the output is right, the workspace touched where contract A says nothing is."""
    frozen.run(plan, stream)
    cuda.synchronize()
    seq = plan.seq_lens.copy_to_host()
    Q = plan.q_shape[1]
    rl = (plan.row_lengths.copy_to_host() if plan.use_rows
          else seq[:, None] - Q + 1 + np.arange(Q)[None, :])
    partial, lse = plan.partial.copy_to_host(), plan.lse.copy_to_host()
    for b in range(rl.shape[0]):
        A = active_splits(int(rl[b].max()), plan.splits)
        if A < plan.splits:
            partial[b, A] = 0.0
            lse[b, A] = 0.0
    plan.partial.copy_to_device(partial)
    plan.lse.copy_to_device(lse)


def test_screen_checks_the_reference_leaves_unreached_splits_alone():
    """A reference (no bitwise reference of its own) that also writes the first split past
    A: its output is right, so only the sentinel check on the splits a request does not
    reach (every state here has some, all four in "all rows zero") can fail it. Unchecked,
    it would pass and every correct variant compared with it would fail instead."""
    by = _screen_beside_frozen({"bad_touches_split_a": _write_first_inactive_split}, None)
    rows = by["bad_touches_split_a"]
    assert set(rows) == {"live", "all rows zero", "last row zero", "first row zero", "restored"}
    for state, r in rows.items():
        assert r.status == "FAIL", (state, r.__dict__)
        A = 0 if state == "all rows zero" else 1
        want = {f"{key} written at (0, {A}, 0, 0, 0) past request 0's {A} active split(s) of 4"
                for key in ("partial", "lse")}
        assert {p.split(":")[0] for p in r.problems} == want, (state, r.problems)


def test_screen_runs_the_fp32_output_on_the_default_causal_rows():
    """The FP32-output call with ``row_lengths=None`` runs in the "restored" state (the FP16
    one with the rows given): a variant wrong on that path alone fails there, against frozen
    and against the live state's bytes."""
    by = _screen_beside_frozen({"bad_fp32_default_rows": _default_rows_one_key_short(np.float32)},
                               "frozen")
    for state, r in by["bad_fp32_default_rows"].items():
        assert (r.status == "FAIL") == (state == "restored"), (state, r.__dict__)
    r = by["bad_fp32_default_rows"]["restored"]
    assert r.bitwise is False and r.mismatch.startswith("out32"), r.mismatch
    assert any(m.startswith("restored state differs from live in out32") for m in r.problems), r.problems


@pytest.fixture
def narrow_variant():
    """A variant (frozen's kernels) that supports only Q = 2."""
    def supports(shape):
        if shape["Q"] != 2:
            raise d2.UnsupportedShape(f"narrow: only Q = 2, not {shape['Q']}")

    _registry.register(_registry.Variant(name="narrow", family="attention", description="test",
                                         contract="A", kernels=frozen.VARIANT.kernels,
                                         run=frozen.run, supports=supports,
                                         bitwise_reference="frozen"))
    yield "narrow"
    _registry.unregister("attention", "narrow")


def _tiny_matrix(*Qs):
    from dflash2_numba.screen.cases import AttentionCaseSpec

    def matrix(quick, contexts=None):
        return [AttentionCaseSpec(f"q{Q} T=40", B=1, Q=Q, Hq=2, Hkv=1, D=64, page_size=16,
                                  seq_lens=[40], splits=2, seed=Q) for Q in Qs]
    return matrix


def test_screen_reports_unsupported_without_failing_where_some_case_checks(
        narrow_variant, monkeypatch, tmp_path):
    """A variant unsupported on some cases of the run and checked on another: the refused
    cases are reported 'unsupported', the run passes."""
    import json

    from dflash2_numba.screen import cases

    monkeypatch.setattr(cases, "attention_matrix", _tiny_matrix(1, 2))
    out = tmp_path / "s.json"
    rc = screen_main(["attention", "--variants", narrow_variant, "--json", str(out)])
    rows = {(r["variant"], r["case"]): r for r in json.loads(out.read_text())["rows"]}
    assert rows["narrow", "q1 T=40"]["status"] == "unsupported"
    checked = rows["narrow", "q2 T=40"]
    assert checked["status"] == "ok" and checked["bitwise"] is True
    assert {r["case"] for r in rows.values()} == {"q1 T=40", "q2 T=40"}, "a never-checked row"
    assert rc == 0


def test_screen_fails_a_variant_unsupported_on_every_case(narrow_variant, monkeypatch, tmp_path,
                                                          capsys):
    """A variant the run selected and never checked (every case refused it) fails the run
    with a message saying so, its reference (frozen, unselected) excepted; the refused
    cases themselves stay 'unsupported'."""
    import json

    from dflash2_numba.screen import cases

    monkeypatch.setattr(cases, "attention_matrix", _tiny_matrix(1))
    out = tmp_path / "s.json"
    rc = screen_main(["attention", "--variants", narrow_variant, "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 1, text[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["status"] for r in rows if r["variant"] == "frozen"] == ["ok"]
    narrow = {r["case"]: r for r in rows if r["variant"] == "narrow"}
    assert narrow["q1 T=40"]["status"] == "unsupported"
    bad = narrow["every case"]
    assert bad["status"] == "FAIL" and any("never checked" in p for p in bad["problems"])
    assert "never checked" in text and "1 failed" in text


def test_quick_screen_fails_tiled_wide_on_contexts_it_never_runs(capsys, tmp_path):
    """--contexts builds head-dim-64 cases only, which tiled_wide (head dim 256) refuses
    each: the run must not pass it unchecked. Its rows: refused on the one case, then the
    failing "every case" row; frozen (its reference) checked."""
    import json

    from dflash2_numba.screen.attention import NEVER_CHECKED_CASE

    rc = screen_main(["attention", "--quick", "--contexts", "40", "--variants", "tiled_wide",
                      "--json", str(tmp_path / "r.json")])
    text = capsys.readouterr().out
    assert rc == 1 and "never checked" in text, text[-3000:]
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    wide = [(r["case"], r["status"]) for r in rows if r["variant"] == "tiled_wide"]
    assert wide == [("q2 T=40", "unsupported"), (NEVER_CHECKED_CASE, "FAIL")], wide
    assert [r["status"] for r in rows if r["variant"] == "frozen"] == ["ok"]


def test_never_checked_names_only_variants_refused_everywhere():
    from dflash2_numba.screen.attention import Row
    from dflash2_numba.screen.report import never_checked

    def row(variant, case, status):
        return Row("attention", case, "live", variant, 40, status=status)

    rows = [row("frozen", "a", "unsupported"), row("wide", "a", "unsupported"),
            row("some", "a", "unsupported"), row("bad", "a", "unsupported"),
            row("frozen", "b", "unsupported"), row("wide", "b", "unsupported"),
            row("some", "b", "ok"), row("bad", "b", "FAIL")]
    assert never_checked(rows) == ["frozen", "wide"]
    assert never_checked(rows, exempt={"frozen"}) == ["wide"]
    assert never_checked([]) == []


def test_gdn_screen_fails_a_variant_refused_on_every_case(monkeypatch):
    """The GDN screen's rows end, as the attention screen's, with one failing "every case"
    row per variant no case supports (its bitwise reference excepted)."""
    from dflash2_numba.screen import gdn as screen_gdn
    from dflash2_numba.screen.attention import NEVER_CHECKED_CASE, Row

    def fake_case(spec, names, **_):
        return [Row("gdn", spec.name, "live", n, spec.T,
                    status="unsupported" if n in ("chunked", "chunked_ahead") else "ok")
                for n in names]

    monkeypatch.setattr(screen_gdn, "screen_case", fake_case)
    specs = gdn_matrix(quick=True)[:2]
    rows = screen_gdn.run_gdn(specs, ["chunked", "chunked_ahead", "serial"], timing=False)
    extra = [r for r in rows if r.case == NEVER_CHECKED_CASE]
    assert [(r.family, r.variant, r.status) for r in extra] == [("gdn", "chunked_ahead", "FAIL")]
    assert "never checked" in extra[0].problems[0] and extra[0].context == max(s.T for s in specs)


@pytest.mark.slow
def test_screen_command_passes_every_variant(tmp_path):
    """The README's screen command on a machine without a GPU, with one case per family
    (``--contexts 40``, head dim 64) in place of the quick matrix: every registered variant
    that accepts head dim 64 (all but those built for 256 only, such as ``tiled_wide``, which
    ``test_attention_variants_sim`` compares with ``frozen`` byte for byte) passes against
    the oracle and its frozen kernel. The full quick
    matrix costs about 25 minutes of CI's 90 on the simulator; each variant's checks on its
    cases' shapes (partial chunks, empty and packed sequences, initial states, G = 6, a
    second row group) are the variant tests' (``test_gdn_variants_sim``,
    ``test_attention_variants_sim``)."""
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)   # the command must find the simulator by itself
    attention = attention_variants_accepting(64)
    assert "frozen" in attention and "tiled_wide" not in attention, attention
    names = attention + list(_registry.variants("gdn"))
    proc = subprocess.run([sys.executable, "-m", "dflash2_numba.screen", "--quick", "--mp",
                           "--contexts", "40", "--variants", ",".join(names),
                           "--json", str(tmp_path / "q.json"), "--plot", str(tmp_path / "q.png")],
                          capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "failed" in proc.stdout and " 0 failed" in proc.stdout
    # the command screens its cases in one process per core it may use (--jobs' default)
    from dflash2_numba.screen.parallel import default_jobs

    assert (f"{default_jobs(True)} worker processes" in proc.stdout) == (default_jobs(True) > 1)
    assert (tmp_path / "q.png").stat().st_size > 1000
    import json

    rows = json.loads((tmp_path / "q.json").read_text())["rows"]
    for fam in ("attention", "gdn"):
        ok = {r["variant"] for r in rows if r["family"] == fam and r["status"] == "ok"}
        assert ok == {n for n in names if n in _registry.variants(fam)}, (fam, ok)
    assert all(r["bitwise"] in (None, True) for r in rows if r["status"] == "ok"), rows


def test_commit_named_by_the_caller_wins(monkeypatch):
    """A lent GPU machine runs a copy of the tree: DFLASH2_COMMIT names its commit."""
    from dflash2_numba import screen

    monkeypatch.setenv("DFLASH2_COMMIT", "abc1234")
    assert screen._commit() == "abc1234"
    monkeypatch.delenv("DFLASH2_COMMIT")
    assert screen._commit() not in ("", "abc1234")


def test_screen_under_an_emulated_capability_says_so_and_records_it(monkeypatch, tmp_path, capsys):
    """``DFLASH2_EMULATE_CC=7.0`` (the ``screen-sm70`` stage of bench/run_all_gpu.sh): the
    screen names the capability it plans for, screens the sm_70 forms (here
    ``tiled_compact``'s, one short context) and records the capability in its JSON."""
    import json

    monkeypatch.setenv("DFLASH2_EMULATE_CC", "7.0")
    out = tmp_path / "s.json"
    rc = screen_main(["attention", "--quick", "--contexts", "40", "--variants", "tiled_compact",
                      "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text[-3000:]
    assert "plans as on compute capability 7.0" in text
    data = json.loads(out.read_text())
    assert data["meta"]["emulated_cc"] == "7.0"
    rows = [r for r in data["rows"] if r["variant"] == "tiled_compact"]
    assert rows and all(r["status"] == "ok" and r["bitwise"] is True for r in rows)
    assert all(".split.d64.sm70" in r["route"] for r in rows)


@pytest.mark.parametrize("argv,what", [
    (["attention", "--contexts", ""], "--contexts"),
    (["attention", "--contexts", "abc"], "--contexts"),
    (["attention", "--contexts", ","], "--contexts"),
    (["gdn", "--contexts", "-5"], "--contexts"),
    (["attention", "--contexts", "0"], "--contexts"),
    (["attention", "--jobs", "0"], "--jobs"),
    (["attention", "--jobs", "two"], "--jobs"),
    (["attention", "--json", "/nonexistent_dir/x.json"], "--json"),
    (["attention", "--plot", "/nonexistent_dir/x.png"], "--plot"),
    # past the longest context: a traceback or an allocation of terabytes, after the start
    (["attention", "--contexts", "262145"], "--contexts"),
    (["gdn", "--contexts", "8,100000000000"], "--contexts"),
    (["attention", "--contexts", "1_0"], "--contexts"),           # int() would take these
    (["attention", "--contexts", "+5"], "--contexts"),
    # an image format matplotlib cannot write failed after the run; none wrote x.png
    (["gdn", "--plot", "p.txt"], "--plot"),
    (["gdn", "--plot", "noext"], "--plot"),
    (["gdn", "--json", "/proc/dflash2_x.json"], "--json"),         # writable bits, no file
    (["gdn", "--json", "same.png", "--plot", "same.png"], "--json and --plot"),
])
def test_screen_usage_errors_before_any_check(argv, what, capsys, tmp_path, monkeypatch):
    """Malformed arguments and unwritable output paths are argparse usage errors (exit 2),
    raised before anything runs, not a traceback at the start or a lost run at the end."""
    monkeypatch.chdir(tmp_path)          # (relative output paths are probed here)
    with pytest.raises(SystemExit) as exc:
        screen_main(argv)
    assert exc.value.code == 2
    assert what in capsys.readouterr().err


def test_screen_output_link_into_a_missing_folder_is_a_usage_error(tmp_path, capsys, monkeypatch):
    """A --json link whose target's folder does not exist passed the folder check (the
    link's own folder is writable) and failed after the run; the probe leaves no file."""
    monkeypatch.chdir(tmp_path)
    os.symlink(tmp_path / "missing" / "x.json", tmp_path / "dangling.json")
    with pytest.raises(SystemExit) as exc:
        screen_main(["gdn", "--json", "dangling.json"])
    assert exc.value.code == 2 and "--json" in capsys.readouterr().err
    # a fresh path is probed and removed again, an existing file keeps its contents
    (tmp_path / "keep.json").write_text("old")
    from dflash2_numba._cli import output_path

    assert output_path("new.json") == "new.json" and not (tmp_path / "new.json").exists()
    assert output_path("keep.json") == "keep.json"
    assert (tmp_path / "keep.json").read_text() == "old"


@pytest.mark.parametrize("raw", ["banana", "6.1"])
def test_screen_malformed_emulated_capability_is_a_usage_error(monkeypatch, capsys, raw):
    """A value that is no MAJOR.MINOR, or a capability with no known shared-memory limits."""
    monkeypatch.setenv("DFLASH2_EMULATE_CC", raw)
    d2.route_counters(reset=True)
    assert screen_main(["gdn", "--contexts", "8"]) == 2
    assert f"DFLASH2_EMULATE_CC='{raw}'" in capsys.readouterr().err
    assert d2.route_counters() == {}


def test_context_lists_drop_repeats_and_take_plain_digits_only():
    from dflash2_numba._cli import positive_int_list

    assert positive_int_list("8, 8,3,8") == [8, 3]
    assert positive_int_list("262144", 262144) == [262144]
    for bad in ("1_0", "+5", " ", "8,,3", "٣"):
        with pytest.raises(Exception, match="positive integers"):
            positive_int_list(bad)


def test_table_says_ref_only_for_a_reference_variant():
    """A row without a byte comparison reads "ref" in the bitwise column only when its
    variant is a family's bitwise reference; a never-checked row of another variant (the
    tiled_wide row of the test above) read "ref" too."""
    from dflash2_numba.screen.attention import Row
    from dflash2_numba.screen.report import HEADERS, table_rows

    col = HEADERS.index("bitwise")
    rows = [Row("attention", "c", "live", "frozen", 8), Row("gdn", "c", "live", "chunked", 8),
            Row("attention", "every case", "-", "tiled_wide", 0, status="FAIL"),
            Row("gdn", "c", "live", "chunked_ahead", 8, bitwise=True)]
    cells = [r[col] for r in table_rows(rows)]
    assert cells[:2] == ["ref", "ref"] and "ref" not in cells[2:], cells


@pytest.mark.parametrize("argv,unknown", [
    (["attention", "--variants", "frozen,bogus"], "bogus"),   # one good name does not hide it
    (["--variants", "bogus"], "bogus"),                       # family all names it too
    (["attention", "--variants", "chunked"], "chunked"),      # the other family's variant
    (["attention", "--variants", ","], "','"),
])
def test_screen_unknown_variants_are_a_usage_error(argv, unknown, capsys):
    d2.route_counters(reset=True)
    assert screen_main(argv) == 2
    err = capsys.readouterr().err
    assert "--variants" in err and unknown in err and "frozen" in err   # the known names listed
    assert d2.route_counters() == {}, "a kernel was launched"


def test_screen_variants_split_across_families_under_all(tmp_path):
    """Under family all, each name runs in the family that registers it."""
    out = tmp_path / "s.json"
    rc = screen_main(["--contexts", "40", "--variants", "frozen,serial", "--json", str(out)])
    import json

    rows = json.loads(out.read_text())["rows"]
    assert rc == 0
    assert {(r["family"], r["variant"]) for r in rows} >= {("attention", "frozen"), ("gdn", "serial")}


def test_jobs_give_the_rows_of_one_process(tmp_path, capsys):
    """``--jobs 2``: the cases of both families screened in two spawned processes give the
    rows, in the same order, of the same run in this process."""
    import json

    argv = ["--contexts", "40", "--variants", "frozen,serial", "--no-timing"]
    assert screen_main(argv + ["--jobs", "1", "--json", str(tmp_path / "one.json")]) == 0
    assert "worker processes" not in capsys.readouterr().out
    assert screen_main(argv + ["--jobs", "2", "--json", str(tmp_path / "two.json")]) == 0
    assert "2 worker processes" in capsys.readouterr().out
    one = json.loads((tmp_path / "one.json").read_text())["rows"]
    two = json.loads((tmp_path / "two.json").read_text())["rows"]
    assert {(r["family"], r["variant"]) for r in one} == {("attention", "frozen"), ("gdn", "serial")}
    assert two == one


def test_jobs_in_a_call_default_to_this_process(monkeypatch):
    """``main(argv)`` without ``--jobs`` screens in the caller's process (its registrations
    and patches hold there): the pool it makes has one job."""
    from dflash2_numba.screen import parallel

    made = []
    original = parallel.CasePool.__init__

    def init(self, jobs, progress):
        made.append(jobs)
        original(self, jobs, progress)

    monkeypatch.setattr(parallel.CasePool, "__init__", init)
    assert screen_main(["--contexts", "40", "--variants", "frozen,serial"]) == 0
    assert made == [1]


def test_default_jobs_are_the_cores_on_the_simulator_and_one_on_a_gpu():
    from dflash2_numba.screen.parallel import default_jobs

    assert default_jobs(True) == len(os.sched_getaffinity(0))
    assert default_jobs(False) == 1


def test_jobs_with_gpu_timing_are_a_usage_error(monkeypatch, capsys):
    """On a GPU, timings need the device to one process: ``--jobs 2`` without
    ``--no-timing`` is refused (exit 2) before any check."""
    from dflash2_numba import _compat

    monkeypatch.setattr(_compat, "SIMULATOR", False)
    monkeypatch.setattr(_compat, "gpu_available", lambda: True)
    d2.route_counters(reset=True)
    assert screen_main(["attention", "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert "--jobs" in err and "--no-timing" in err
    assert d2.route_counters() == {}, "a kernel was launched"
