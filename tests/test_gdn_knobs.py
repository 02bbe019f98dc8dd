"""The GDN variants' tuning knobs (``DFLASH2_GDN_*`` environment variables,
:mod:`dflash2_numba.gdn._knobs`) on the simulator.

* Every knob: malformed and out-of-range values are refused at plan time by ``gdn_prefill``
  with a ``ValueError`` naming the variable and the value, before any launch (the route
  counters stay empty) and without writing the caller's ``out``.
* Valid non-default values (every knob, several a run) still give the frozen ``chunked``
  kernel's bytes, on a small case (two sequences of 3 and 17 tokens, K = V = 32).
* The thread-count knobs the simulator does not use (it runs one or two warps) keep their
  GPU meaning: the plan-time arithmetic is checked with the simulator flag off.
* ``import dflash2_numba`` succeeds whatever the knobs say (nothing is read at import).
"""
import functools
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import oracle
from dflash2_numba import _registry, route_counters
from dflash2_numba._compat import cuda
from dflash2_numba.gdn import _knobs as KN
from dflash2_numba.gdn import chunked_overlap as OV
from dflash2_numba.gdn import chunked_rec as RC
from dflash2_numba.gdn import chunked_smprep as SP
from dflash2_numba.gdn import chunked_split as S
from dflash2_numba.gdn import chunked_ws as W
from dflash2_numba.gdn import gdn_prefill, plan_gdn

SENT = np.float32(-777.0)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _case():
    rng = np.random.default_rng(140)
    return oracle.random_gdn_case(rng, B=1, T=20, H=1, HV=1, K=32, V=32, dtype=np.float32,
                                  cu_seqlens=np.array([0, 3, 20], np.int32), with_state=True)


CASE = _case()


@functools.lru_cache(maxsize=None)
def _reference():
    return gdn_prefill(**CASE, variant="chunked", out_dtype="float32")


@pytest.fixture(autouse=True)
def _no_knobs(monkeypatch):
    """Every test starts with no knob set (a knob in the caller's environment would change
    what is refused or planned)."""
    for name in KN.NAMES:
        monkeypatch.delenv(name, raising=False)


# (knob, the variants that read it, refused values)
REFUSED = [
    (KN.SPLIT_COLS, ("chunked_split", "chunked_pipe", "chunked_rec"),
     ("abc", "6", "16", "-4", "1.5", "0x8", "99999999999999999999")),
    (KN.SPLIT_THREADS, ("chunked_split", "chunked_ws"), ("abc", "100", "16", "352", "-32")),
    (KN.STAGE_KP, ("chunked_split", "chunked_wsr"), ("yes", "2", "FALSE", "auto1")),
    (KN.PIPE_STAGES, ("chunked_pipe",), ("abc", "0", "-1", "2.5")),
    (KN.WS_COPY_THREADS, ("chunked_ws", "chunked_wsr_two_loop"), ("abc", "100", "384", "-32")),
    (KN.SMPREP_THREADS, ("chunked_smprep", "chunked_rec"), ("abc", "48", "288", "-64")),
    (KN.REC_THREADS, ("chunked_rec",),
     ("abc", "128", "128,100", "200,128", "0,128", "128,0", "128,128,1", "a,b", "128;128")),
    (KN.REC_ROWS, ("chunked_rec",), ("x", "3,0", "2,0,1", "2,1")),
    (KN.OUT_TILE, ("chunked_rec_pipe", "chunked_overlap"), ("8", "wide", "8X8")),
    (KN.SEGMENTS, ("chunked_overlap", "chunked_ahead"), ("abc", "0", "-2", "1.5")),
    (KN.OVERLAP_PREP_THREADS, ("chunked_overlap",), ("abc", "0", "100", "512")),
    (KN.OVERLAP_CARVEOUT, ("chunked_overlap",), ("abc", "101", "-1", "50%", "nan")),
    (KN.OVERLAP_OUT, ("chunked_overlap",), ("later", "End")),
    (KN.OVERLAP_PREP, ("chunked_overlap",), ("tiles",)),
]
REFUSED_PARAMS = [pytest.param(name, variant, value, id=f"{name[12:]}={value}-{variant}")
                  for name, variants, values in REFUSED
                  for i, value in enumerate(values)
                  for variant in (variants if i == 0 else variants[:1])]


def _refused(monkeypatch, variant, env, name, value):
    """``gdn_prefill`` with ``env`` set: a ValueError naming ``name`` and ``value``, no
    launch, the caller's device ``out`` untouched."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = cuda.to_device(np.full((1, 20, 1, 32), SENT, np.float32))
    route_counters(reset=True)
    with pytest.raises(ValueError, match=name) as exc:
        gdn_prefill(**CASE, variant=variant, out_dtype="float32", out=out)
    assert repr(value) in str(exc.value), str(exc.value)
    assert route_counters() == {}
    assert np.all(np.asarray(out.copy_to_host()) == SENT)
    return str(exc.value)


@pytest.mark.parametrize("name,variant,value", REFUSED_PARAMS)
def test_bad_value_is_refused_before_any_launch(monkeypatch, name, variant, value):
    _refused(monkeypatch, variant, {name: value}, name, value)


def test_copy_threads_past_the_cta_are_refused(monkeypatch):
    """chunked_ws: copy threads set by their knob that do not fit 384 a CTA beside the
    compute threads (set, or the default) are refused, naming both knobs; the default copy
    count shrinks to fit instead."""
    msg = _refused(monkeypatch, "chunked_ws", {KN.SPLIT_THREADS: "320", KN.WS_COPY_THREADS: "96"},
                   KN.WS_COPY_THREADS, "96")
    assert KN.SPLIT_THREADS in msg and "at most 64" in msg
    # (the default compute threads: at least 64 here, so 352 copy threads never fit)
    _refused(monkeypatch, "chunked_ws", {KN.WS_COPY_THREADS: "352"}, KN.WS_COPY_THREADS, "352")


def test_plan_gdn_refuses_too(monkeypatch):
    """The refusal is ``plan_gdn``'s (plan time), not the launch's."""
    monkeypatch.setenv(KN.SEGMENTS, "none")
    route_counters(reset=True)
    with pytest.raises(ValueError, match=KN.SEGMENTS):
        plan_gdn(**CASE, variant="chunked_overlap")
    assert route_counters() == {}


def test_frozen_kernels_read_no_knob(monkeypatch):
    """``chunked`` reads no knob: bad values everywhere change nothing."""
    ref_o, ref_s = _reference()
    for name in KN.NAMES:
        monkeypatch.setenv(name, "abc")
    o, s = gdn_prefill(**CASE, variant="chunked", out_dtype="float32")
    assert oracle.first_mismatch(o, ref_o) is None
    assert oracle.first_mismatch(s, ref_s) is None


def test_override_attributes_are_checked(monkeypatch):
    """The module attributes that tests and bench scripts set in place of a variable are
    checked as the variable's value would be, and the refusal names the variable."""
    for mod, attr, bad, name in ((S, "COLS", 6, KN.SPLIT_COLS),
                                 (S, "STATE_THREADS", 100, KN.SPLIT_THREADS),
                                 (S, "STAGE_KP", "yes", KN.STAGE_KP),
                                 (W, "COPY_THREADS", 400, KN.WS_COPY_THREADS),
                                 (SP, "PREP_THREADS", 48, KN.SMPREP_THREADS)):
        monkeypatch.setattr(mod, attr, bad)
        route_counters(reset=True)
        with pytest.raises(ValueError, match=name):
            gdn_prefill(**CASE, variant="chunked_smprep")
        assert route_counters() == {}
        monkeypatch.setattr(mod, attr, None)
    monkeypatch.setattr(S, "COLS", 8)           # an attribute wins over the variable
    monkeypatch.setenv(KN.SPLIT_COLS, "4")
    assert S.split_cols() == 8


# valid non-default values, several a run: (variant, env, what the plan must show)
VALID = [
    ("chunked_split", {KN.SPLIT_COLS: "8", KN.SPLIT_THREADS: "64", KN.STAGE_KP: "0"},
     lambda s: s.cols == 8 and int(s.stage_kp) == 0),
    ("chunked_split", {KN.SPLIT_COLS: " 12 ", KN.STAGE_KP: "true"},
     lambda s: s.cols == 12 and int(s.stage_kp) == 1),
    ("chunked_pipe", {KN.PIPE_STAGES: "2", KN.SPLIT_COLS: "4"}, lambda s: s.cols == 4),
    ("chunked_ws", {KN.SPLIT_THREADS: "288", KN.WS_COPY_THREADS: "96", KN.STAGE_KP: "1",
                    KN.SPLIT_COLS: "0"},
     lambda s: int(s.ws.stage_kp) == 1),
    ("chunked_smprep", {KN.SMPREP_THREADS: "32", KN.WS_COPY_THREADS: "64"},
     lambda s: s.prep_threads == 32),
    ("chunked_rec", {KN.REC_THREADS: "96,64", KN.REC_ROWS: "1,2", KN.SMPREP_THREADS: "96"},
     lambda s: s.prep_threads == 96 and (int(s.rec.n1), int(s.rec.nq)) == (64, 16)),
    ("chunked_rec_pipe", {KN.OUT_TILE: "4x8"}, lambda s: s.rec.out_name == "gdn_chunk_out_pipe"),
    ("chunked_overlap", {KN.SEGMENTS: "2", KN.OVERLAP_PREP_THREADS: "64",
                         KN.OVERLAP_CARVEOUT: "None", KN.OVERLAP_OUT: "segments",
                         KN.OVERLAP_PREP: "split"},
     lambda s: len(s.seg.launches) == 2 and not s.out_at_end and s.prep_name == S.PREP_NAME),
    ("chunked_ahead", {KN.SEGMENTS: "5", KN.OVERLAP_CARVEOUT: "100", KN.OVERLAP_OUT: "end",
                       KN.OUT_TILE: "8x8"},
     lambda s: len(s.seg.launches) == 2 and s.out_at_end),      # (5 segments: one a slot)
]


@pytest.mark.parametrize("variant,env,check", VALID, ids=[v[0] for v in VALID])
def test_valid_values_give_chunked_bytes(monkeypatch, variant, env, check):
    ref_o, ref_s = _reference()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    call = plan_gdn(**CASE, variant=variant, out_dtype="float32")
    assert check(call.plan.scratch)
    call.launch()
    o, s = (np.asarray(x.copy_to_host()) if hasattr(x, "copy_to_host") else x
            for x in call.results())
    assert oracle.first_mismatch(o, ref_o) is None, f"{variant} {env}: output"
    assert oracle.first_mismatch(s, ref_s) is None, f"{variant} {env}: final state"


def test_gpu_thread_counts(monkeypatch):
    """The GPU meaning of the thread knobs the simulator does not use (computed with the
    simulator flag off; nothing is launched): accepted values are used as given, the
    defaults are unchanged, a default copy count shrinks to fit 384 threads a CTA."""
    plan = SimpleNamespace(K=128, threads=0)
    monkeypatch.setattr(W, "SIMULATOR", False)

    def ws_threads(stage_kp):        # as chunked_ws's plans call it: the knobs read first
        return W._threads(plan, 12, stage_kp, (S.state_threads(), W.copy_threads()))

    assert ws_threads(True) == (256, 128)
    assert ws_threads(False) == (288, 96)
    monkeypatch.setenv(KN.SPLIT_THREADS, "320")
    assert ws_threads(True) == (320, 64)
    monkeypatch.setenv(KN.SPLIT_THREADS, "224")
    monkeypatch.setenv(KN.WS_COPY_THREADS, "160")
    assert ws_threads(True) == (224, 160)
    monkeypatch.setenv(KN.WS_COPY_THREADS, "192")
    with pytest.raises(ValueError, match=KN.WS_COPY_THREADS):
        ws_threads(True)

    monkeypatch.setattr(RC, "SIMULATOR", False)
    assert RC.knob_threads(plan) == (128, 128)
    monkeypatch.setenv(KN.REC_THREADS, "100,64")
    assert RC.knob_threads(plan) == (100, 64)
    monkeypatch.setenv(KN.REC_THREADS, " 192 , 64 ")
    assert RC.knob_threads(plan) == (192, 64)

    monkeypatch.setattr(SP, "SIMULATOR", False)
    assert SP.prep_threads() == 256
    monkeypatch.setenv(KN.SMPREP_THREADS, "0")
    assert SP.prep_threads() == 256
    monkeypatch.setenv(KN.SMPREP_THREADS, "160")
    assert SP.prep_threads() == 160

    monkeypatch.setattr(OV, "SIMULATOR", False)
    monkeypatch.setattr(OV, "default_max_ctas", lambda: 132)
    monkeypatch.setattr(OV, "shared_per_sm", lambda: 228 * 1024)
    assert OV.knobs(1024, 4, 128, OV.read_knobs()) == (16, 128, 80)
    monkeypatch.setenv(KN.SEGMENTS, "3")
    monkeypatch.setenv(KN.OVERLAP_PREP_THREADS, "96")
    monkeypatch.setenv(KN.OVERLAP_CARVEOUT, "0")
    assert OV.knobs(1024, 4, 128, OV.read_knobs()) == (3, 96, 0)
    monkeypatch.setenv(KN.OVERLAP_CARVEOUT, "NONE")
    assert OV.knobs(1024, 4, 128, OV.read_knobs())[2] is None


def test_unset_and_empty_mean_the_default(monkeypatch):
    for name in KN.NAMES:
        monkeypatch.setenv(name, "")
    assert S.split_cols() == 0 and S.state_threads() == 0 and S.stage_kp_knob() == "auto"
    assert W.copy_threads() == 0
    assert RC.rec_threads_knob() is None and RC.knob_units(128) == (32, 0)
    assert OV.read_knobs() == (0, OV.DEFAULT_PREP_THREADS, int(OV.DEFAULT_CARVEOUT))
    assert OV.prep_form() == "smem" and OV.out_schedule() == "end"


def test_import_with_malformed_knobs():
    """Nothing is read at import: ``import dflash2_numba`` (every variant registered) works
    with every knob malformed."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", **{name: "abc" for name in KN.NAMES})
    code = ("import dflash2_numba, dflash2_numba.gdn\n"
            "from dflash2_numba import _registry\n"
            "print(sorted(_registry.variants('gdn')))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "chunked_overlap" in proc.stdout and "chunked_split" in proc.stdout
    assert set(_registry.variants("gdn")) >= {"chunked_split", "chunked_pipe", "chunked_ws",
                                              "chunked_smprep", "chunked_rec", "chunked_overlap"}
