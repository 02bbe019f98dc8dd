"""The timing scripts' argument checks (usage errors exit 2 before any work, no output folder
left behind), their message without a GPU, and the GDN bench's graph check (a replay that
writes nothing is caught: the outputs are NaN-filled before it)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from tests.bench_helpers import bench_importable, run_bench_script

def _run(script, args, tmp_path, simulator=True):
    return run_bench_script(script, args, tmp_path, simulator=simulator, timeout=300)


BAD = [
    # (script, arguments, the option the message names)
    ("attention.py", ["--contexts", "abc"], "--contexts"),
    ("attention.py", ["--contexts", ""], "--contexts"),
    ("attention.py", ["--contexts", "1"], "--contexts"),            # below Q
    ("attention.py", ["--layers", "0"], "--layers"),
    ("attention.py", ["--trials", "-1"], "--trials"),
    ("attention.py", ["--acc-context", "0"], "--acc-context"),
    ("attention.py", ["--budget-s", "-5"], "--budget-s"),
    ("attention.py", ["--target-ms", "nan"], "--target-ms"),
    ("attention.py", ["--variants", ","], "--variants"),
    ("attention.py", ["--variants", "frozen,nope"], "--variants"),
    ("gdn.py", ["--lengths", "0"], "--lengths"),
    ("gdn.py", ["--lengths", "70,x"], "--lengths"),
    ("gdn.py", ["--trials", "0"], "--trials"),
    ("gdn.py", ["--acc-length", "-3"], "--acc-length"),
    ("gdn.py", ["--variants", ""], "--variants"),
    ("gdn.py", ["--variants", "frozen"], "--variants"),              # an attention name
    ("attention.py", ["--seed", "-1"], "--seed"),                     # numpy's generators refuse it
    ("gdn.py", ["--seed", "x"], "--seed"),
]


@pytest.mark.parametrize("script,args,option", BAD, ids=[f"{b[0]}{' '.join(b[1])}" for b in BAD])
def test_bad_argument_is_a_usage_error(script, args, option, tmp_path):
    out = tmp_path / "out"
    proc = _run(script, ["--smoke", "--out", str(out), *args], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "error:" in last and option in last, last
    assert not out.exists()


@pytest.mark.parametrize("script", ["attention.py", "gdn.py"])
def test_unwritable_out_is_a_usage_error(script, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = _run(script, ["--smoke", "--out", str(blocker / "sub")], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--out" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("script", ["attention.py", "gdn.py"])
def test_production_shape_refused_on_the_simulator(script, tmp_path):
    proc = _run(script, ["--out", str(tmp_path / "out")], tmp_path)
    assert proc.returncode == 2 and "pass --smoke" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def test_no_gpu_is_one_clear_line(tmp_path):
    has_gpu = subprocess.run([sys.executable, "-c", "from numba import cuda; "
                              "print(cuda.is_available())"], capture_output=True, text=True,
                             env={k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"})
    assert has_gpu.returncode == 0, has_gpu.stderr[-2000:]      # numba.cuda imports without one
    if has_gpu.stdout.strip() == "True":
        pytest.skip("a CUDA GPU is present")
    assert has_gpu.stdout.strip() == "False", has_gpu.stdout[-500:]
    for script in ("attention.py", "gdn.py"):
        proc = _run(script, ["--smoke", "--out", str(tmp_path / "out")], tmp_path, simulator=False)
        assert proc.returncode == 1, proc.stderr[-2000:]
        assert proc.stderr.strip().startswith("error: no CUDA GPU found"), proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        assert not (tmp_path / "out").exists()


# --- the GDN bench's graph check, with a stand-in for torch's graph API -----------------------

class _Graph:
    replay_runs = None          # what a replay does: None = nothing (a capture that missed)

    def replay(self):
        if _Graph.replay_runs is not None:
            _Graph.replay_runs()


@contextlib.contextmanager
def _capture(g, **_):
    yield


_FAKE_TORCH = types.SimpleNamespace(cuda=types.SimpleNamespace(
    CUDAGraph=_Graph, graph=_capture, synchronize=lambda: None))


@pytest.fixture
def gdn_bench(monkeypatch):
    bench_importable(monkeypatch)
    import bench.gdn as G
    from bench import _common as C

    monkeypatch.setattr(C, "SIMULATOR", False)          # graph_item skips the simulator
    monkeypatch.setattr(C, "numba_stream_of_torch", lambda torch, s=None: 0)
    monkeypatch.setattr(_Graph, "replay_runs", None)
    return G, C


class _Clock:
    """A stand-in clock: every trial makes its calls and lasts 2 ms."""
    stream = 0

    def sync(self):
        pass

    def time_ms(self, fn, reps=1):
        for _ in range(reps):
            fn()
        return 2.0


def _graph_item(G, C, replay_runs: str, sets: int = 1, variant="chunked", T=5):
    """graph_item over ``sets`` input sets of ``variant`` (T = 5 by default: the check, not
    the kernel, is under test), as the bench calls it (the plans' scratch NaN-filled before
    the replay); the fake graph's replay makes the calls of every set (``"all"``), of the
    first only (``"first"``) or none."""
    cfg = dict(G.SMOKE)
    rng = np.random.default_rng(0)
    holders = [{} for _ in range(sets)]
    for h in holders:
        G.variant_caller(G.find_gdn_prefill()[0], G.make_inputs(cfg, T, None, rng), variant,
                         0, h)
    launches = [h["launch"] for h in holders]
    if replay_runs != "none":
        _Graph.replay_runs = lambda: [f(0) for f in launches[:None if replay_runs == "all" else 1]]
    items, labels, notes = {}, {}, []
    added = G.graph_item(items, labels, notes, _FAKE_TORCH, _Clock(), f"{variant}/graph",
                         (variant, "variant", 1), lambda s: [f(s) for f in launches],
                         lambda: [x for h in holders for x in h["get"]()[:2]], 30.0, calls=sets,
                         scratch=lambda: [x for h in holders for x in h["scratch"]()])
    return added, items, notes


def test_gdn_graph_that_writes_nothing_is_not_timed(gdn_bench):
    added, items, notes = _graph_item(*gdn_bench, replay_runs="none")
    assert added is False and "chunked/graph" not in items
    assert any("graph replay differs" in n for n in notes), notes


def test_gdn_graph_that_replays_the_call_is_timed(gdn_bench):
    added, items, notes = _graph_item(*gdn_bench, replay_runs="all")
    assert added is True and "chunked/graph" in items, notes


def test_gdn_graph_over_input_sets_checks_every_set_and_times_per_call(gdn_bench):
    """Two input sets in one graph: a replay that runs the first set's call only leaves the
    second's outputs NaN and is not timed; one that runs both is timed per call (half a
    replay's time)."""
    added, items, notes = _graph_item(*gdn_bench, replay_runs="first", sets=2)
    assert added is False and any("graph replay differs" in n for n in notes), notes
    added, items, notes = _graph_item(*gdn_bench, replay_runs="all", sets=2)
    assert added is True, notes
    assert items["chunked/graph"]() == 1.0


def test_gdn_graph_check_fills_the_scratch(gdn_bench):
    """A call of two kernels, the second reading what the first left in scratch: a replay
    that lost the first would read the eager call's scratch and write the eager bytes. The
    check NaN-fills the scratch it is given before the replay, so that replay is not timed
    (without the scratch named, it would be)."""
    G, C = gdn_bench
    from dflash2_numba._compat import cuda

    w = cuda.to_device(np.zeros(4, np.float32))      # the first kernel's scratch
    o = cuda.to_device(np.zeros(4, np.float32))      # the call's output, read from w

    def first():
        w.copy_to_device(np.arange(1, 5, dtype=np.float32))

    def second():
        o.copy_to_device(w.copy_to_host() * np.float32(2))

    _Graph.replay_runs = second                       # the capture lost the first kernel
    for scratch, timed in ((lambda: [w], False), (None, True)):
        items, labels, notes = {}, {}, []
        added = G.graph_item(items, labels, notes, _FAKE_TORCH, _Clock(), "two/graph",
                             ("two", "variant", 1), lambda s: (first(), second()),
                             lambda: [o], 30.0, scratch=scratch)
        assert added is timed, notes


@pytest.mark.parametrize("variant", ["chunked_rec", "chunked_ahead"])
def test_gdn_graph_of_the_whole_call_passes_with_its_scratch_filled(gdn_bench, variant):
    """What the bench NaN-fills before a replay (every FP32 array of the plans' scratch) is
    rewritten by the call before it is read: a whole call's replay still gives the eager
    bytes (two input sets; a multi-chunk sequence)."""
    added, items, notes = _graph_item(*gdn_bench, replay_runs="all", sets=2, variant=variant,
                                      T=70)
    assert added is True, notes


def test_attention_graph_check_fills_the_split_records(monkeypatch):
    """The attention bench's graph check: a replay that runs only the combine (the split
    launches lost) would turn the eager call's split records into the eager output; with
    the records NaN-filled before the replay it cannot pass, and the whole call's does."""
    bench_importable(monkeypatch)
    import bench.attention as A
    import dflash2_numba as d2
    from dflash2_numba.attention import frozen
    from tests.attention_helpers import case

    c = case(np.random.default_rng(3), B=1, Q=2, Hq=2, Hkv=1, D=64, page_size=8,
             seq_lens=[40], strided=False)
    layers, plans = [], []
    for _ in range(2):
        ws = d2.AttentionWorkspace(batch=1, q_len=2, heads=2, head_dim=64, splits=4)
        plans.append(d2.plan_attention(c["q"], c["k_cache"], c["v_cache"], c["block_table"],
                                       c["seq_lens"], scale=c["scale"], k_scale=c["k_scale"],
                                       v_scale=c["v_scale"], splits=4, workspace=ws))
        layers.append(types.SimpleNamespace(ws=ws))

    def eager():
        for p in plans:
            p.launch()

    class Replays:
        def __init__(self, run):
            self.replay = run

    combine_only = Replays(lambda: [frozen.launch_combine(p, 0, "test.combine") for p in plans])
    assert A.check_graph(_Clock(), layers, eager, combine_only) is False
    assert A.check_graph(_Clock(), layers, eager, Replays(eager)) is True


def test_attention_exit_status_says_when_nothing_named_ran(tmp_path):
    """Variants named on the command line that cannot run this shape are a failure (exit
    1, with the figures that were taken still written), not a silent success."""
    proc = _run("attention.py", ["--smoke", "--out", str(tmp_path / "out"), "--no-peers",
                                 "--variants", "tiled_wide"], tmp_path)    # D = 256 only
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "FAILED" in proc.stdout and "supports this shape" in proc.stdout
    assert (tmp_path / "out" / "attention.json").is_file()
