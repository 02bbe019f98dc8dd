"""What makes a timing script exit 1: a variant whose accuracy is missing, not finite or
past its bound, a timed trial that raised, a requested context or length skipped for the
budget, a ceiling not measured. And the GDN bench's input sets, rotated where one call's
data fits twice in the L2. Simulator runs of the ``--smoke`` shape, in process where the
oracle is swapped for a wrong one."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tests.bench_helpers import bench_importable, run_bench_script

@pytest.fixture
def bench(monkeypatch):
    bench_importable(monkeypatch)
    monkeypatch.delenv("OUT", raising=False)
    from bench import _common as C

    return C


def test_accuracy_failures_judge_variants_only(bench):
    C = bench
    bounds = {"rel_l2_fp32": 1e-5, "rel_l2_fp16": 5e-4}
    rows = {
        "good": {"kind": "variant", "rel_l2_fp32": 3e-7, "rel_l2_fp16": 2e-4},
        "far": {"kind": "variant", "rel_l2_fp32": 2e-5, "rel_l2_fp16": 2e-4},
        "nan": {"kind": "variant", "rel_l2_fp32": math.nan, "rel_l2_fp16": 2e-4},
        "missing": {"kind": "variant", "rel_l2_fp16": 2e-4},
        "raised": {"kind": "variant", "error": "RuntimeError: boom"},
        "peer": {"kind": "peer", "rel_l2_fp16": 0.5},
    }
    got = C.accuracy_failures(rows, bounds, "here")
    assert not [m for m in got if "good" in m or "peer" in m], got
    for name in ("far", "nan", "missing", "raised"):
        assert [m for m in got if m.startswith(f"here: {name}:")], (name, got)
    assert len(got) == 4


def test_a_trial_that_raises_is_a_failure(bench):
    C = bench
    calls = []

    def ok():
        calls.append(1)
        return 1.0

    def boom():
        raise RuntimeError("launch failed")

    notes, failures = [], []
    times = C.alternating_trials({"ok": ok, "boom": boom}, 3, C.Budget(60.0), min_trials=3,
                                 notes=notes, label="T 70", failures=failures)
    assert times == {"ok": [1.0, 1.0, 1.0], "boom": []}
    assert failures == ["T 70 boom: trial failed: RuntimeError: launch failed"]
    assert failures[0] in notes


def test_a_ceiling_not_measured_is_a_failure(bench):
    C = bench
    ceilings = {"fma": {"fma_instr_per_s": 3e13}, "copy": {"error": "OSError: x", "bytes_per_s": None}}
    assert C.ceiling_failures(ceilings) == ["ceiling copy not measured: OSError: x"]
    assert C.ceiling_failures({"fma": {"fma_instr_per_s": 1.0}, "copy": {"bytes_per_s": 1.0}}) == []


@pytest.mark.parametrize("script,variant", [("attention.py", "frozen"), ("gdn.py", "chunked")])
def test_a_budget_that_skips_everything_is_a_failure(script, variant, tmp_path):
    out = tmp_path / "out"
    proc = run_bench_script(script, ["--smoke", "--out", str(out), "--variants", variant,
                                     "--no-peers", "--budget-s", "0.001"], tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    failed = proc.stdout[proc.stdout.index("FAILED"):]
    assert "skipped" in failed and "no accuracy check" in failed, failed
    assert (out / script.replace(".py", ".json")).is_file()


def test_gdn_accuracy_past_its_bound_is_a_failure(bench, monkeypatch, tmp_path, capsys):
    import bench.gdn as G

    real = G.oracle.gdn_reference
    monkeypatch.setattr(G.oracle, "gdn_reference",
                        lambda *a, **k: tuple(np.asarray(x) * 1.001 for x in real(*a, **k)))
    rc = G.main(["--smoke", "--out", str(tmp_path), "--variants", "chunked", "--trials", "1"])
    failed = capsys.readouterr().out
    assert rc == 1, failed
    for key in ("rel_l2_out_fp32", "rel_l2_state"):     # 1e-3 off: past 1e-5
        assert f"chunked: {key} = " in failed, failed


def test_attention_accuracy_past_its_bound_is_a_failure(bench, monkeypatch, tmp_path, capsys):
    import bench.attention as A

    real = A.oracle.attention_reference
    monkeypatch.setattr(A.oracle, "attention_reference",
                        lambda *a, **k: np.asarray(real(*a, **k)) * 1.001)
    rc = A.main(["--smoke", "--out", str(tmp_path), "--variants", "frozen", "--trials", "1",
                 "--contexts", "160"])
    failed = capsys.readouterr().out
    assert rc == 1, failed
    for key in ("rel_l2_fp32", "rel_l2_fp16"):          # 1e-3 off: past 1e-5 and 4.98e-4
        assert f"frozen: {key} = " in failed, failed


def test_gdn_input_sets_cover_twice_the_l2(bench):
    import bench.gdn as G

    assert G.input_sets(34_700_000, 52_000_000) == 3           # 104.1 MB > 104 MB
    assert G.input_sets(26, 52) == 5                           # 4 x 26 = 104 is not past it
    assert G.input_sets(105, 52) == 1 and G.input_sets(10, None) == 1
    for call, l2 in ((34_700_000, 52_000_000), (26, 52), (1, 7)):
        n = G.input_sets(call, l2)
        assert n * call > 2 * l2 and (n - 1) * call <= 2 * l2


def test_gdn_rotated_input_sets_run(bench, monkeypatch, tmp_path):
    import json

    import bench.gdn as G

    monkeypatch.setattr(G, "input_sets", lambda call_bytes, l2: 2)
    rc = G.main(["--smoke", "--out", str(tmp_path), "--variants", "chunked", "--trials", "1"])
    data = json.loads((tmp_path / "gdn.json").read_text())
    assert rc == 0, data["failures"]
    # one row per timed item: the variant alone on the simulator; with a GPU also its graph
    # and the fla peer's eager and graph items, every one timed over the same input sets
    rows = data["results"]
    assert "chunked" in [r["impl"] for r in rows]
    if bench.SIMULATOR:                 # no graph and no torch on the simulator: one item
        assert len(rows) == 1, rows
    assert [r["input_sets"] for r in rows] == [2] * len(rows)
    assert not data["failures"]


def test_attention_input_sets_read_disjoint_pages_and_time_per_sixteen_layers(
        bench, monkeypatch, tmp_path):
    """Where the layers' working set fits within twice the L2, bench/attention.py times every
    call over several input sets: each layer's sets read disjoint runs of its cache pages
    (rotated block tables; the caches grown to hold them), and a figure is the time of one
    pass over all sets divided by their number (here every timed call says 6 ms over 3
    sets: 2 ms per set of layers)."""
    import json

    import bench.attention as A

    monkeypatch.setattr(A.C, "input_sets", lambda call_bytes, l2: 3)
    made = []
    real_layer = A.input_set_layer

    def recording_layer(base, s, T, cfg, torch):
        layer = real_layer(base, s, T, cfg, torch)
        made.append((base.idx, s, base.n_pages, A.to_host(layer.bt)[0].copy()))
        return layer

    monkeypatch.setattr(A, "input_set_layer", recording_layer)
    real_time = A.C.Clock.time_ms
    trial_calls = []

    def six_ms_per_call(self, fn, reps=1):
        if getattr(fn, "__name__", "") == "eager":       # the variant's timed calls
            trial_calls.append(fn)
            fn()
            return 6.0
        return real_time(self, fn, reps)

    monkeypatch.setattr(A.C.Clock, "time_ms", six_ms_per_call)
    rc = A.main(["--smoke", "--out", str(tmp_path), "--variants", "frozen", "--trials", "1",
                 "--contexts", "160", "--no-peers"])
    data = json.loads((tmp_path / "attention.json").read_text())
    assert rc == 0, data["failures"]
    rows = [r for r in data["results"] if r["impl"] == "frozen"]
    assert rows and [r["input_sets"] for r in rows] == [3] * len(rows), rows
    assert trial_calls and all(r["ms_all"] == 2.0 for r in rows), rows
    assert any("3 input sets" in n for n in data["notes"]), data["notes"]
    npg = 160 // 16                                   # smoke page: 16 tokens
    for idx in {m[0] for m in made}:
        sets = sorted((s, bt[:npg]) for i, s, _, bt in made if i == idx)
        assert [s for s, _ in sets] == [0, 1, 2]
        assert all(n_pages >= 3 * npg for i, _, n_pages, _ in made if i == idx)
        used = np.concatenate([pages for _, pages in sets])
        assert len(set(used.tolist())) == 3 * npg     # disjoint runs of real pages


def test_peers_cut_by_the_budget_are_a_failure(bench):
    """Where the budget is spent before a context's (or length's) peers run, the run's
    figures there would stand alone: a note and a failure say so; otherwise nothing."""
    C = bench
    notes, failures = [], []
    assert C.peers_cut_by_budget(C.Budget(3600), 1024, notes, failures) is False
    assert notes == [] and failures == []
    assert C.peers_cut_by_budget(C.Budget(0), 261888, notes, failures) is True
    assert failures == notes and len(notes) == 1
    assert notes[0].startswith("peers @ 261888: not run, the budget was spent")


def test_gdn_report_says_where_fla_failed(bench):
    """fla that ran at a first length and failed at a later one is dropped for the rest of
    the run: the report's peer line says where and why, not just "available"."""
    import bench.gdn as G

    assert G.peer_line({"available": True, "layout": "GVA"}) == "available (GVA)"
    line = G.peer_line({"available": True, "layout": "GVA", "error": "OutOfMemoryError: x",
                        "failed_at": 65536})
    assert line.startswith("available (GVA); failed at T = 65536") and "OutOfMemoryError" in line
    assert G.peer_line({"available": False, "error": "skipped (--no-peers)"}) == \
        "not run: skipped (--no-peers)"


def test_attention_plot_labels_the_floor_with_the_shapes_count(bench, monkeypatch, tmp_path):
    """The plot's FP32-floor series names the instructions per (row, key) of the shape run
    (220 at the smoke shape's D = 64), not the production shape's 850."""
    import bench.attention as A

    seen = {}
    real = A.C.write_outputs

    def recording(out_dir, stem, record, md, title, xlabel, ylabel, series):
        seen["labels"] = [s["label"] for s in series]
        return real(out_dir, stem, record, md, title, xlabel, ylabel, series)

    monkeypatch.setattr(A.C, "write_outputs", recording)
    rc = A.main(["--smoke", "--out", str(tmp_path), "--variants", "frozen", "--trials", "1",
                 "--contexts", "160", "--no-peers"])
    assert rc == 0
    assert f"FP32 floor ({A.instr_per_row_key(64)} instr/row/key)" in seen["labels"]
    assert A.instr_per_row_key(64) == 220
