"""The timing experiments of bench/ built from the package's own kernels: the leave-one-out
and phase-clock copies of the staged state passes (``chunked_split``, ``chunked_ws``,
``chunked_wsr``) must compute their variant's bytes exactly, the L2 copy-ceiling kernel must
move exact bytes, the phase-clock summary must read the right stamps, and
``bench/profile_kernels.py`` must check its ``--variants`` before any work."""
import os

import numpy as np
import pytest

import oracle
from bench._out_unit_forms import EXACT_FORMS
from dflash2_numba import plan_gdn
from dflash2_numba._compat import cuda

# the state passes whose staged output units run only with the H200's plan
STAGED_OUT = ("chunked_wsr_two_loop", *(f"chunked_wsr:{f}" for f in EXACT_FORMS))


def _planned_with_sentinels(variant, T, seed):
    """A planned, launched GDN call, host copies of its output and final state (taken before
    the refill, whatever kind of array the call returns), and its output / final-state
    buffers refilled with the sentinel, so an experiment kernel must rewrite every byte."""
    case = oracle.random_gdn_case(np.random.default_rng(seed), B=1, T=T, H=1, HV=2, K=32, V=32,
                                  dtype=np.float32, cu_seqlens=None, with_state=True)
    call = plan_gdn(**case, variant=variant, out_dtype="float32")
    call.launch()
    ref = (call.plan.o.copy_to_host(), call.plan.hT.copy_to_host())
    call.plan.o.copy_to_device(np.full(call.plan.o.shape, -777.0, np.float32))
    call.plan.hT.copy_to_device(np.full(call.plan.hT.shape, -777.0, np.float32))
    return call, ref


def _assert_results_are(call, ref):
    cuda.synchronize()
    assert call.plan.o.copy_to_host().tobytes() == ref[0].tobytes()
    assert call.plan.hT.copy_to_host().tobytes() == ref[1].tobytes()


@pytest.mark.parametrize("variant", ["chunked_split", "chunked_ws"])
def test_leave_one_out_kernel_with_nothing_skipped_is_the_state_pass(variant):
    from bench import _state_leave_one_out as X
    from bench.profile_kernels import state_pass_launcher

    call, ref = _planned_with_sentinels(variant, 70, 5)
    kern = X.kernel if variant == "chunked_split" else X.ws_kernel
    state_pass_launcher(call, kern, np.int32(0))()
    _assert_results_are(call, ref)


@pytest.mark.parametrize("variant", ["chunked_split", "chunked_ws", "chunked_wsr",
                                     "chunked_wsr_two_loop"])
def test_state_pass_launcher_runs_the_variants_own_state_kernel(variant):
    """The launcher bench/profile_kernels.py times the state passes with (split_launchers,
    ws_state_launcher) rewrites the call's output and final state with the same bytes."""
    from bench.profile_kernels import split_launchers, ws_state_launcher

    call, ref = _planned_with_sentinels(variant, 70, 8)
    (split_launchers(call)[1] if variant == "chunked_split" else ws_state_launcher(call))()
    _assert_results_are(call, ref)


@pytest.mark.parametrize("variant", ["chunked_split", "chunked_wsr_two_loop", "chunked_smprep"])
def test_prep_launcher_runs_the_variants_own_pre_pass(variant):
    """The pre-pass launcher bench/profile_kernels.py times alone (prep_launcher: the
    variant's own pre-pass kernel, threads and shared memory) refills a sentinel-filled
    scratch so that the state pass rewrites the call's bytes."""
    from bench.profile_kernels import prep_launcher, split_launchers, ws_state_launcher

    call, ref = _planned_with_sentinels(variant, 70, 9)
    s = call.plan.scratch
    s.scr.copy_to_device(np.full(s.scr.shape, -777.0, np.float32))
    prep_launcher(call)()
    (split_launchers(call)[1] if variant == "chunked_split" else ws_state_launcher(call))()
    _assert_results_are(call, ref)


@pytest.mark.parametrize("variant", ["chunked_rec", "chunked_rec_pipe"])
def test_rec_kernels_launched_one_at_a_time_rewrite_the_call(variant):
    """chunked_rec's (and chunked_rec_pipe's) three kernels as bench/profile_kernels.py
    times them alone (chunked_split.launch_prep, chunked_rec.launch_state,
    chunked_rec.launch_out, which launches the plan's own output kernel), on a scratch
    refilled with the sentinel (slots and chunk-start states): the call's bytes."""
    from dflash2_numba.gdn import chunked_rec, chunked_split

    call, ref = _planned_with_sentinels(variant, 70, 9)
    s = call.plan.scratch
    s.scr.copy_to_device(np.full(s.scr.shape, -777.0, np.float32))
    chunked_split.launch_prep(call.plan, 0)
    chunked_rec.launch_state(call.plan, 0)
    chunked_rec.launch_out(call.plan, 0)
    _assert_results_are(call, ref)


@pytest.mark.parametrize("form", ["cols4", "cols8+tile4"])
def test_prep_forms_swapped_into_a_planned_call_rewrite_its_bytes(form):
    """``--prep-solve``'s pre-pass forms, built and swapped into a planned chunked_rec_pipe
    call as bench/profile_kernels.py does (prep_form_kernel), on a scratch refilled with the
    sentinel: the call's bytes."""
    from bench.profile_kernels import prep_form_kernel
    from dflash2_numba.gdn import chunked_rec, chunked_split

    call, ref = _planned_with_sentinels("chunked_rec_pipe", 70, 11)
    s = call.plan.scratch
    s.prep_kernel = prep_form_kernel(form, call.plan.K)
    s.scr.copy_to_device(np.full(s.scr.shape, -777.0, np.float32))
    chunked_split.launch_prep(call.plan, 0)
    chunked_rec.launch_state(call.plan, 0)
    chunked_rec.launch_out(call.plan, 0)
    _assert_results_are(call, ref)


@pytest.mark.parametrize("variant", ["chunked_ws", "chunked_wsr", "chunked_rec", "chunked_ahead",
                                     *STAGED_OUT])
def test_clocked_state_pass_is_the_state_pass_and_stamps_every_sampled_chunk(monkeypatch,
                                                                            variant):
    """bench/profile_kernels.py phase-clock: a warp-specialised state pass with per-warp
    cycle stamps computes the same bytes; each sampled (item, chunk, warp) gets five
    ordered stamps, and chunks outside the sample range are not written. ``VARIANT:FORM``
    is the variant's plan with an output unit of bench/_out_unit_forms (the exact ones), run
    with Kd / P^T staged and twelve-column items, where the staged output units run."""
    from bench import _state_phase_clock as X
    from bench.profile_kernels import state_pass_launcher
    from dflash2_numba.gdn import chunked_split

    staged = variant in STAGED_OUT
    if staged:
        monkeypatch.setattr(chunked_split, "COLS", 12)
        monkeypatch.setattr(chunked_split, "STAGE_KP", "1")
    call, ref = _planned_with_sentinels(variant.split(":")[0], 141, 6)   # chunks 64, 64, 13
    if staged:
        assert int(call.plan.scratch.ws.stage_kp) == 1
    s = call.plan.scratch
    if hasattr(s, "rec"):            # (the call wrote vn over U: the pre-pass writes U anew)
        chunked_split.launch_prep(call.plan, 0)
    stamps = X.stamp_buffer(call, 2)
    state_pass_launcher(call, X.clocked_kernel(variant), stamps, np.int32(1),
                        np.int32(3))()                           # chunks 1, 2
    if hasattr(s, "rec"):            # (the recurrence writes vn and h; the output is apart)
        from dflash2_numba.gdn import chunked_rec

        chunked_rec.launch_out(call.plan, 0)
    _assert_results_are(call, ref)
    st = stamps.copy_to_host()
    assert (st > 0).all()
    assert (np.diff(st, axis=3) >= 0).all()                 # a <= b <= c <= d <= e per warp
    assert (st[:, 1, :, 0] >= st[:, 0, :, 4]).all()          # chunk 2 starts after chunk 1 ends
    ncomp = int(s.rec.ncomp if hasattr(s, "rec") else s.ws.ncomp)
    nthreads = s.rec.threads if hasattr(s, "rec") else ncomp + s.ws.ncopy
    summary = X.summarise(st, ncomp)
    assert set(summary) >= {"compute", "copy", "chunk_period", "phase1_span", "phase2_span",
                            "tail", "warp_phase1_busy", "warp_phase2_busy"}
    assert summary["chunk_period"] > 0 and summary["compute"]["phase1_busy"] >= 0
    assert summary["compute"]["phase1_wait"] >= 0 and summary["copy"]["phase2_wait"] >= 0
    assert len(summary["warp_phase1_busy"]) == st.shape[2] == -(-nthreads // 32)
    # a stamp block never written (a chunk past the sequence) is skipped, not counted
    st2 = np.concatenate([st, np.full_like(st[:, :1], -1)], axis=1)
    assert X.summarise(st2, ncomp)["chunk_period"] == summary["chunk_period"]


@pytest.mark.parametrize("share", [1, 0])
def test_l2_copy_ceiling_kernel_copies_each_ctas_region_of_the_last_step(share):
    """bench/l2_copy_ceiling.py moves exact bytes: after ``nsteps`` steps every CTA's shared
    memory holds the region of its last step (its group's when shared, its own when not)."""
    from bench import l2_copy_ceiling as L

    groups, per_group, nsteps, region, threads = 2, 3, 3, 256, 32
    ncta = groups * per_group
    n = nsteps * ncta * region
    host_src = np.random.default_rng(7).random(n, dtype=np.float32)
    src = cuda.to_device(host_src)
    dump = cuda.to_device(np.full((ncta, region), -777.0, np.float32))
    L.launcher(src, region, nsteps, groups, per_group, share, 1, threads, dump)()
    cuda.synchronize()
    got = dump.copy_to_host()
    s = nsteps - 1
    for cta in range(ncta):
        slot = s * groups + cta // per_group if share else s * ncta + cta
        assert got[cta].tobytes() == host_src[slot * region:(slot + 1) * region].tobytes()


def test_phase_clock_summary_reads_only_the_pre_barrier_stamps():
    """summarise: phase ends are the last warp's pre-barrier stamp (b, d), the next chunk
    starts at its earliest a; the after-barrier stamps (c, e) are ignored (on the GPU they
    run before the barrier's wait). One item, two chunks, two compute warps + one copy
    warp, hand-made stamps."""
    from bench import _state_phase_clock as X

    st = np.full((1, 2, 3, X.N_STAMPS), -1, np.int64)
    #                a     b     c     d     e   (c, e: junk that must not matter)
    st[0, 0, 0] = [100, 400, 401, 900, 901]
    st[0, 0, 1] = [110, 500, 501, 800, 801]
    st[0, 0, 2] = [105, 300, 301, 1000, 1001]    # copy warp
    st[0, 1, :, 0] = [1200, 1210, 1205]
    st[0, 1, :, 1] = [1500, 1600, 1400]
    st[0, 1, :, 3] = [2000, 1900, 2100]
    st[0, 1, :, 2] = st[0, 1, :, 1] + 1
    st[0, 1, :, 4] = st[0, 1, :, 3] + 1
    out = X.summarise(st, ncomp=64)
    assert out["phase1_span"] == np.median([500 - 100, 1600 - 1200])
    assert out["phase2_span"] == np.median([1000 - 500, 2100 - 1600])
    assert out["tail"] == 1200 - 1000 and out["chunk_period"] == 1200 - 100
    assert out["compute"]["warps"] == 2 and out["copy"]["warps"] == 1
    assert out["copy"]["phase1_busy"] == np.median([300 - 100, 1400 - 1200])
    assert out["copy"]["phase1_wait"] == np.median([500 - 300, 1600 - 1400])
    assert out["compute"]["phase2_busy"] == np.median([900 - 500, 800 - 500,
                                                       2000 - 1600, 1900 - 1600])
    assert out["compute"]["phase2_wait"] == np.median([1200 - 900, 1200 - 800])  # chunk 0 only
    assert out["warp_phase1_busy"] == [np.median([300, 300]), np.median([400, 400]),
                                       np.median([200, 200])]


def test_ncu_source_segments_split_at_barriers_and_sum_each_phase(tmp_path):
    """The per-barrier summary of an ncu source-page CSV: segments end at BAR, samples,
    executed counts, wavefronts and stall reasons are summed per segment."""
    from bench import ncu_source_segments as N

    head = ["Address", "Source", N.SAMPLES, N.EXECUTED, N.WAVEFRONTS, N.WAVEFRONTS_IDEAL,
            "stall_short_sb", "stall_selected", "stall_short_sb (Not Issued)"]
    body = [["0x0", "  LDS.128 R4, [R2]", "10", "100", "8", "4", "7", "3", "7"],
            ["0x10", "  @P0 FFMA R1, R4, R5, R1", "6", "100", "0", "0", "1", "5", "1"],
            ["0x20", "  BAR.SYNC.DEFER_BLOCKING 0x0", "4", "50", "0", "0", "0", "4", "0"],
            ["0x30", "  FFMA R1, R4, R5, R1", "20", "400", "0", "0", "0", "20", "0"]]
    path = tmp_path / "source.csv"
    path.write_text("\n".join(",".join(f'"{c}"' for c in r)
                              for r in [["Kernel Name", "k"], head] + body) + "\n")
    header, rows = N.read_rows(path)
    segs = N.segments(header, rows)
    assert [s["n"] for s in segs] == [3, 1]
    assert segs[0]["samples"] == 20 and segs[0]["executed"] == 250
    assert segs[0]["wavefronts"] == 8 and segs[0]["wavefronts_ideal"] == 4
    assert segs[0]["stalls"] == {"short_sb": 8, "selected": 12}
    assert segs[0]["ops"] == {"LDS": 100, "FFMA": 100, "BAR": 50}
    assert segs[1]["ops"] == {"FFMA": 400}
    assert segs[0]["ops_full"] == {"LDS.128": 100, "FFMA": 100, "BAR.SYNC.DEFER_BLOCKING": 50}
    text = N.summary(segs)
    assert "segment 0: 3 instructions" in text and "50.0% of samples" in text
    assert "executed (M)" not in text
    assert "executed (M)" not in N.summary(segs)


def test_ncu_source_segments_mix_keeps_modifiers_apart(tmp_path):
    """``--mix``: per segment, the commonest opcodes with their modifiers (a move written as
    ``IMAD.MOV.U32`` apart from a multiply-add ``IMAD``), in millions executed."""
    from bench import ncu_source_segments as N

    head = ["Address", "Source", N.SAMPLES, N.EXECUTED]
    body = [["0x0", "  IMAD.MOV.U32 R1, RZ, RZ, R2", "1", "3000000"],
            ["0x10", "  @!P1 IMAD R3, R4, R5, R6", "1", "1500000"],
            ["0x20", "  IMAD.MOV.U32 R7, RZ, RZ, R8", "1", "2000000"],
            ["0x30", "  FFMA R1, R4, R5, R1", "1", "250000"]]
    path = tmp_path / "source.csv"
    path.write_text("\n".join(",".join(f'"{c}"' for c in r)
                              for r in [["Kernel Name", "k"], head] + body) + "\n")
    header, rows = N.read_rows(path)
    segs = N.segments(header, rows)
    assert segs[0]["ops"] == {"IMAD": 6500000, "FFMA": 250000}
    assert segs[0]["ops_full"] == {"IMAD.MOV.U32": 5000000, "IMAD": 1500000, "FFMA": 250000}
    assert "    executed (M): IMAD.MOV.U32 5.00, IMAD 1.50\n" in N.summary(segs, mix=2)
    out = tmp_path / "segs.json"
    assert N.main([str(path), "--mix", "3", "--json", str(out)]) == 0
    import json
    assert json.loads(out.read_text())[0]["ops_full"]["IMAD.MOV.U32"] == 5000000


def test_ncu_source_loops_follow_backward_branches(tmp_path):
    """The per-loop view: every backward branch makes one loop from its target to itself
    (barriers inside included), with offsets from the kernel's first instruction; forward
    branches make none."""
    from bench import ncu_source_segments as N

    head = ["Address", "Source", N.SAMPLES, N.EXECUTED, "stall_selected"]
    body = [["0x100", "  MOV R1, RZ", "1", "1", "1"],
            ["0x110", "  LDS R4, [R2]", "5", "10", "5"],
            ["0x120", "  BAR.SYNC.DEFER_BLOCKING 0x0", "2", "10", "2"],
            ["0x130", "  FFMA R1, R4, R4, R1", "8", "10", "8"],
            ["0x140", "  @P0 BRA 0x110", "1", "10", "1"],
            ["0x150", "  @P1 BRA 0x170", "1", "1", "1"],
            ["0x160", "  EXIT", "0", "1", "0"]]
    path = tmp_path / "source.csv"
    path.write_text("\n".join(",".join(f'"{c}"' for c in r)
                              for r in [["Kernel Name", "k"], head] + body) + "\n")
    header, rows = N.read_rows(path)
    lps = N.loops(header, rows)
    assert len(lps) == 1
    lp = lps[0]
    assert (lp["first"], lp["last"], lp["n"]) == ("+0x10", "+0x40", 4)
    assert lp["samples"] == 16 and lp["executed"] == 40
    assert lp["ops"] == {"LDS": 10, "BAR": 10, "FFMA": 10, "BRA": 10}
    text = N.loop_summary(lps, total=18.0)
    assert "loop +0x10..+0x40: 4 instructions" in text and "88.9% of samples" in text


def test_rec_loop_micro_forms_compute_the_same_bytes():
    """bench/rec_loop_micro.py: the recurrence's compute units alone, in each unit form
    (two- / four-row units, one- / two-row units, the half-row units of six columns, the
    two-row phase-1 units placed two column groups a warp or over four warps, the half-row
    phase-2 units with their loads a step ahead, the two-row phase-1 units with theirs two
    passes ahead), leave
    the same shared-memory bytes (the same chains on the same operands), and stamp every
    busy warp's two phases."""
    from bench import rec_loop_micro as M

    runs = {cfg: M.run_config(*cfg, reps=2, blocks=1) for cfg in
            [(32, 2, 4), (32, 1, 2), (64, 0, 0), (64, 2, 0), (64, "2p", 0), (32, "2s", 4),
             (64, 2, "a"), (64, "2d", 0)]}
    ref = runs[(32, 2, 4)][1]
    assert np.abs(ref).max() > 0
    for cfg, (cyc, sink) in runs.items():
        assert sink.view(np.uint32).tobytes() == ref.view(np.uint32).tobytes(), cfg
        summary = M.summarise(cyc, *cfg, 128, 2)
        assert summary["phase1_cycles_per_pass"] > 0 and summary["phase2_cycles_per_pass"] > 0


def test_overlap_probe_timeline_rewrites_the_output(tmp_path, monkeypatch):
    """bench/overlap_probe.py's timeline runs chunked_overlap's own schedule with events
    around each segment launch: with the output refilled with NaN first it must give a whole
    call's bytes, with marks for each segment's pre-pass, recurrence and output (none for the
    output when it is left out)."""
    import json

    import os

    from bench import overlap_probe as P

    monkeypatch.setenv("DFLASH2_GDN_SEGMENTS", "5")          # the caller's knob survives
    assert P.main(["timeline", "--small", "--T", "130", "--configs",
                   "2:100:segments,3:100:none,2:100:std", "--reps", "1", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "overlap_timeline.json").read_text())
    assert [r["bytes_as_a_whole_call"] for r in rows] == [True, None, True]
    assert [len(r["segments"]) for r in rows] == [2, 3, 3]
    assert [len(m) for m in rows[0]["segments"]] == [6, 6]            # prep, rec, out
    assert [len(m) for m in rows[1]["segments"]] == [4, 4, 4]         # prep, rec
    assert rows[2]["kernels"] == [["prep", "rec"], ["prep", "rec"], ["out"]]   # outputs at the end
    assert os.environ["DFLASH2_GDN_SEGMENTS"] == "5"
    assert "DFLASH2_GDN_OVERLAP_OUT" not in os.environ


def test_overlap_knobs_checks_bytes_per_setting(tmp_path, monkeypatch):
    """bench/overlap_knobs.py plans chunked_overlap under each knob setting (empty fields keep
    the defaults), checks its bytes against chunked_rec_pipe's and times every call; the knobs
    it sets do not leak into the environment, and a knob the caller had set is restored."""
    import json
    import os

    from bench import overlap_knobs as K

    monkeypatch.setenv("DFLASH2_GDN_OVERLAP_OUT", "segments")
    assert K.knob_env("2::::end") == {"DFLASH2_GDN_SEGMENTS": "2", "DFLASH2_GDN_OVERLAP_OUT": "end"}
    assert K.knob_env(":::::2p/0") == {"DFLASH2_GDN_REC_ROWS": "2p,0"}
    with pytest.raises(ValueError, match="--configs"):
        K.knob_env("1:2:3:4:5:6:7")
    assert K.main(["--small", "--T", "130", "--configs", "2::::segments,3::::end:2s/0",
                   "--reps", "1", "--rounds", "1", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "overlap_knobs_T130.json").read_text())
    eager = [r for r in rows if r["what"] == "eager bytes"]
    assert [(r["segments"], r["out_at_end"], r["same"]) for r in eager] == [(2, False, True),
                                                                            (3, True, True)]
    timed = [r for r in rows if r["what"] == "time"]
    assert [r["config"] for r in timed] == ["chunked_rec_pipe", "2::::segments",
                                            "3::::end:2s/0"]
    assert all(r["eager_ms"] > 0 for r in timed)
    assert os.environ["DFLASH2_GDN_OVERLAP_OUT"] == "segments"
    assert "DFLASH2_GDN_SEGMENTS" not in os.environ
    assert "DFLASH2_GDN_REC_ROWS" not in os.environ


def test_out_tile_ab_checks_bytes_of_every_tile(tmp_path, monkeypatch):
    """bench/out_tile_ab.py plans chunked_rec_pipe and chunked_overlap under each output tile,
    checks their bytes against chunked_rec_pipe's at the first tile (and the frozen
    chunked's), times the output kernel alone; the tile knob the caller had set is
    restored."""
    import json
    import os

    from bench import out_tile_ab as A

    monkeypatch.setenv("DFLASH2_GDN_OUT_TILE", "4x8")
    assert A.main(["--small", "--T", "70", "--frozen", "--reps", "1", "--rounds", "1",
                   "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "out_tile_ab_T70.json").read_text())
    checked = [(r["variant"], r["tile"], r.get("out_kernel"), r["same"]) for r in rows
               if r["what"] == "bytes"]
    assert checked == [("chunked_rec_pipe", "4x8", "gdn_chunk_out_pipe", True),
                       ("chunked_overlap", "4x8", "gdn_chunk_out_pipe", True),
                       ("chunked_rec_pipe", "8x8", "gdn_chunk_out_wide", True),
                       ("chunked_overlap", "8x8", "gdn_chunk_out_wide", True)]
    assert [r["same"] for r in rows if r["what"] == "bytes vs chunked"] == [True]
    alone = [r for r in rows if r["what"] == "output kernel alone"]
    assert [r["tile"] for r in alone] == ["4x8", "8x8"] and all(r["ms"] > 0 for r in alone)
    assert os.environ["DFLASH2_GDN_OUT_TILE"] == "4x8"
    with pytest.raises(SystemExit, match="--tiles"):
        A.main(["--small", "--tiles", "4x4", "--out", str(tmp_path)])


def test_sass_loops_finds_the_innermost_loop():
    """bench/sass_loops.py reads an nvdisasm listing: labels take the next
    instruction's address, a backward branch makes a loop, the hot loop is the innermost
    one with the most FFMAs and the loop around it is the smallest that contains it; a
    forward branch makes no loop."""
    from bench import sass_loops as S

    listing = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
    .L_x_0:
        /*0010*/                   LDS R2, [R3] ;
    .L_x_1:
        /*0020*/                   FFMA R4, R2, R5, R4 ;
        /*0030*/                   FFMA R6, R2, R7, R6 ;
        /*0040*/                   IADD3 R8, R8, 0x1, RZ ;
        /*0050*/              @!P0 BRA `(.L_x_1) ;
        /*0060*/                   FFMA R9, R4, R6, R9 ;
        /*0070*/               @P1 BRA `(.L_x_2) ;
        /*0080*/                   STG.E [R10.64], R9 ;
    .L_x_2:
        /*0090*/               @P2 BRA `(.L_x_0) ;
        /*00a0*/                   EXIT ;
    """
    instrs, labels = S.parse_sass(listing)
    assert len(instrs) == 11 and labels == {".L_x_0": 0x10, ".L_x_1": 0x20, ".L_x_2": 0x90}
    found = S.loops(instrs, labels)
    assert [(lp["start"], lp["end"], lp["instructions"], lp["ffma"]) for lp in found] == \
        [(0x20, 0x50, 4, 2), (0x10, 0x90, 9, 3)]
    hot, outer = S.hot_loop(found)
    assert (hot["start"], hot["ffma_share"], hot["mix"]["FFMA"]) == (0x20, 0.5, 2)
    assert (outer["start"], outer["end"]) == (0x10, 0x90)
    assert S.hot_loop([]) == (None, None)


def test_sass_loops_finds_registered_kernels_by_name():
    """bench/sass_loops.py takes kernels by their KernelSpec names, with the launch bounds
    their variant gives them, and refuses a name no variant registers."""
    from bench import sass_loops as S
    from dflash2_numba.gdn import chunked_rec_pipe as RP

    specs = S.kernel_specs(["gdn_chunk_out_wide", "gdn_chunk_out_pipe"], 1)
    assert list(specs) == ["gdn_chunk_out_wide", "gdn_chunk_out_pipe"]
    assert specs["gdn_chunk_out_wide"][2] == RP.WIDE_LAUNCH_BOUNDS
    assert specs["gdn_chunk_out_pipe"][2] == RP.OUT_LAUNCH_BOUNDS
    with pytest.raises(SystemExit, match="no_such_kernel"):
        S.kernel_specs(["gdn_chunk_out_wide", "no_such_kernel"], 0)


def test_sass_loops_runs_with_the_extras_nvdisasm(tmp_path):
    """bench/sass_loops.py end to end without ``--nvdisasm``: it finds the cuda12 extra's
    nvdisasm, and the streamed output kernel's hot loop is its 64 FFMAs (a child process
    with numba's real NVVM; skipped where there is none)."""
    import json
    import subprocess
    import sys

    from tests.nvvm_child import ROOT, child_json

    child_json("print('NVVM' + json.dumps(1))", "NVVM")     # skips without libNVVM
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "sass_loops.py"),
                           "--kernels", "gdn_chunk_out_pipe", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "sass_loops.json").read_text())["gdn_chunk_out_pipe"]
    assert report["registers"] > 0, report
    assert report["hot_loop"]["mix"]["FFMA"] == report["hot_loop"]["ffma"] == 64, report


def test_rec_loop_micro_column_halves_match_the_phases_in_turn():
    """bench/rec_loop_micro.py's ``ab`` form (phase 1 of one column half beside phase 2 of
    the other, two slots a step) touches disjoint columns in each slot, so after one step
    the first half (columns 0-3, 8-9) must hold the bytes that the half-row units leave
    when phase 1 and then phase 2 run (the sequential micro times its phases apart, all
    phase-1 passes first, so one step is the common ground); the read-only regions are
    untouched. The ``conc`` form
    (both whole phases at once, racing by design) leaves the read-only regions as they were
    and finite values everywhere."""
    from bench import rec_loop_micro as M
    from dflash2_numba._compat import cuda, jit_bounded
    from dflash2_numba._dynshared import DynShared
    from dflash2_numba.gdn._split_ops import VS
    from dflash2_numba.gdn._split_state import OFF_VN, OFF_WQ

    K = 128
    _, seq = M.run_config(64, 0, 0, reps=1, blocks=1)
    cyc = {}
    sinks = {}
    for name, halves in (("ab", True), ("conc", False)):
        kern = M._micro_ab if halves else M._micro_conc
        nf = M.rec_floats(K)
        c = cuda.to_device(np.zeros((1, 4 if halves else 7, 2), np.int64))
        s = cuda.to_device(np.zeros(nf, np.float32))
        t1 = 64 if halves else 96
        DynShared(jit_bounded(kern, (256, 1)), 4 * nf)[1, 128 if halves else 224, 0](
            s, c, np.int32(K), np.int32(t1), np.int32(0), np.int32(1))
        cyc[name], sinks[name] = c.copy_to_host(), s.copy_to_host()
    half0 = [0, 1, 2, 3, 8, 9]
    for region, rows in ((0, K), (OFF_VN, 64)):          # state slice, vn
        a = sinks["ab"][region:region + rows * VS].reshape(rows, VS)[:, half0]
        b = seq[region:region + rows * VS].reshape(rows, VS)[:, half0]
        assert a.tobytes() == b.tobytes()
        assert np.abs(b).max() > 0
    for name in ("ab", "conc"):
        assert sinks[name][OFF_WQ:].tobytes() == seq[OFF_WQ:].tobytes()   # W^T, Kd, U, gamma
        assert np.isfinite(sinks[name]).all() and (cyc[name] > 0).all()
    row = M.run_concurrent(64, 64, reps=1, blocks=1, halves=True)
    assert row["config"] == "ab64+64" and row["both_phases_cycles_per_pass"] > 0
    row = M.run_concurrent(96, 96, reps=1, blocks=1, r2=4)
    assert row["config"] == "conc96+96x4" and row["both_phases_cycles_per_pass"] > 0


def _delivery_sums(width, bcast, warps, iters):
    """Host copy of bench/smem_delivery.py's loads and FP32 sums, thread by thread."""
    from bench import smem_delivery as D

    n = D.SMEM_FLOATS
    e = np.arange(n)
    sm = np.float32(1.0 / 1024.0) * ((e % 7) - 3).astype(np.float32)
    f = np.float32
    out = np.zeros(32 * warps, np.float32)
    for tid in range(32 * warps):
        off = 0 if bcast else (tid & 31) * width
        q = ((tid >> 5) * 512) & (n - 512)
        a = [f(0), f(0), f(0), f(0)]
        for _ in range(iters):
            p = q + off
            x, y, z, u = (sm[p + 128 * k:p + 128 * k + width] for k in range(4))
            if width == 4:
                a[0] += (x[0] + y[1]) + (z[2] + u[3])
                a[1] += (x[1] + y[2]) + (z[3] + u[0])
                a[2] += (x[2] + y[3]) + (z[0] + u[1])
                a[3] += (x[3] + y[0]) + (z[1] + u[2])
            elif width == 2:
                a[0] += x[0] + y[1]
                a[1] += x[1] + y[0]
                a[2] += z[0] + u[1]
                a[3] += z[1] + u[0]
            else:
                a = [a[0] + x[0], a[1] + y[0], a[2] + z[0], a[3] + u[0]]
            q = (q + 1024) & (n - 512)
        out[tid] = a[0] + a[1] + a[2] + a[3]
    return out


@pytest.mark.parametrize("width", [1, 2, 4])
def test_smem_delivery_loads_what_it_counts(width):
    """bench/smem_delivery.py: every thread adds exactly the floats its loads name (the host
    copy of the address walk and the FP32 sums gives the same bits), broadcast and
    distinct, and the bytes-a-cycle figure counts four loads an iteration per lane."""
    from dflash2_numba._compat import cuda
    from dflash2_numba._dynshared import DynShared
    from bench import smem_delivery as D

    for bcast in (True, False):
        sink = cuda.to_device(np.zeros(64, np.float32))
        cyc = cuda.to_device(np.zeros((1, 2), np.int64))
        kern = D._KERNELS.setdefault(width, D.jit_bounded(D._make(width), (1024, 1)))
        DynShared(kern, 4 * D.SMEM_FLOATS)[1, 64, 0](sink, cyc, np.int32(int(bcast)),
                                                       np.int32(5))
        assert sink.copy_to_host().tobytes() == _delivery_sums(width, bcast, 2, 5).tobytes()
        row = D.run_form(width, bcast, 2, iters=3, blocks=1)
        assert row["cycles"] > 0
        assert row["bytes_per_cycle"] * row["cycles"] == pytest.approx(2 * 3 * 4 * 32 * 4 * width)


def test_out_bounds_ab_checks_bytes_under_each_bound(tmp_path, monkeypatch):
    """bench/out_bounds_ab.py relaunches the wide output kernel under each launch bound on
    one call's scratch: every form's output is the call's, byte for byte, and is timed;
    it refuses a plan whose output kernel is not the wide one."""
    import json

    from bench import out_bounds_ab as B

    monkeypatch.delenv("DFLASH2_GDN_OUT_TILE", raising=False)
    assert B.main(["--small", "--T", "70", "--blocks", "3,4", "--reps", "1", "--rounds", "1",
                   "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "out_bounds_ab_T70.json").read_text())
    assert [(r["bounds"], r["same"]) for r in rows if r["what"] == "bytes"] == \
        [("(128, 3)", True), ("(128, 4)", True)]
    alone = [r for r in rows if r["what"] == "output kernel alone"]
    assert [r["bounds"] for r in alone] == ["(128, 3)", "(128, 4)"]
    assert all(r["ms"] > 0 for r in alone)
    monkeypatch.setenv("DFLASH2_GDN_OUT_TILE", "4x8")
    with pytest.raises(SystemExit, match="gdn_chunk_out_pipe"):
        B.main(["--small", "--T", "70", "--out", str(tmp_path)])


def test_rec_forms_ab_checks_bytes_of_every_pair(tmp_path, monkeypatch):
    """bench/rec_forms_ab.py swaps each pair of recurrence compute forms into one
    chunked_ahead plan (twelve-column items here, so the half-row phase-2 units run): every
    pair's call gives the frozen chunked's bytes, and the recurrence alone is timed for
    each; a pair that names no form is refused."""
    import json

    from bench import rec_forms_ab as A
    from dflash2_numba.gdn import chunked_split

    monkeypatch.setattr(chunked_split, "COLS", 12)
    assert A.main(["--small", "--T", "70", "--frozen", "--reps", "1", "--rounds", "1",
                   "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "rec_forms_ab_T70.json").read_text())
    pairs = ["pass:plain", "deep:ahead", "pass:ahead", "deep:plain"]
    assert [(r["pair"], r["same"]) for r in rows if r["what"] == "bytes"] == \
        [(p, True) for p in pairs]
    alone = [r for r in rows if r["what"] == "recurrence alone"]
    assert [r["pair"] for r in alone] == pairs and all(r["ms"] > 0 for r in alone)
    with pytest.raises(SystemExit, match="--pairs"):
        A.main(["--small", "--pairs", "deep:deep", "--out", str(tmp_path)])


@pytest.mark.slow
def test_attention_option_ab_checks_each_option_set_against_the_registered_kernel(tmp_path):
    """``profile_kernels.py attn-ab`` (the tool that times tiled_compact's and tiled_wide's
    schedule options on the GPU) builds each option set's kernel with its own shared-memory
    size, and finds the registered kernel's partial and lse bytes for every one (a short
    context and two splits, for the simulator)."""
    import json

    from bench.profile_kernels import main

    opts = ("defer_o=1;defer_o=1,k_perm=1,pv_pairs=1,k_late=1;defer_o=1,u_pack=1;"
            "defer_o=1,k_perm=1,nan_once=1,k_late=1,u_mul_first=1,q_batch=8,loop32=1")
    assert main(["attn-ab", "--attn-ctx", "40", "--attn-splits", "2", "--attn-options", opts,
                 "--rounds", "1", "--reps", "1", "--inner", "1", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "profile_attn-ab.json").read_text())
    assert [r["what"].split("options ")[1].split(", one layer")[0] for r in rows] == opts.split(";")
    assert [r["same_bytes"] for r in rows] == [True, True, True, True]
    # tiled_wide's options, against the same registered tiled_compact bytes
    wide = "score_steps=8;score_steps=16,pv_keys=16,loop32=1;u_pack=1"
    assert main(["attn-ab", "--attn-ab-variant", "tiled_wide", "--attn-ctx", "40",
                 "--attn-splits", "2", "--attn-options", wide, "--rounds", "1", "--reps", "1",
                 "--inner", "1", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "profile_attn-ab.json").read_text())
    assert [r["what"].split(" split")[0] for r in rows] == ["tiled_wide"] * 3
    assert [r["same_bytes"] for r in rows] == [True, True, True]


def test_attention_combine_ab_times_both_combines_on_one_workspace(tmp_path):
    """``profile_kernels.py attn-combine`` (the tool that times frozen's and the batched
    combine alone on the GPU) runs both on one split workspace and finds the same FP16 output
    bytes (a short context and four splits, for the simulator)."""
    import json

    from bench.profile_kernels import main

    assert main(["attn-combine", "--attn-ctx", "200", "--attn-splits", "4", "--rounds", "1",
                 "--reps", "1", "--inner", "1", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "profile_attn-combine.json").read_text())
    assert [r["what"].split(",")[0] for r in rows] == [
        "split kernel (tiled_perm)", "combine (frozen)", "combine (batched)"]
    assert [r["same_bytes"] for r in rows] == [None, True, True]
    assert all(len(r["rounds"]) == 1 for r in rows)     # (the simulator's events time nothing)


def test_attention_combine_ab_refuses_more_splits_than_the_batched_combine_takes(tmp_path):
    """Above ``MAX_SPLITS`` the variants' combine is frozen's, so the A/B would time one
    kernel twice: the tool refuses, naming the argument, before building anything."""
    from bench.profile_kernels import main
    from dflash2_numba.attention import combine_batched

    S = combine_batched.MAX_SPLITS + 1
    with pytest.raises(ValueError, match=f"--attn-splits {S}"):
        main(["attn-combine", "--attn-splits", str(S), "--out", str(tmp_path)])
    assert list(tmp_path.iterdir()) == []


def test_attn_ab_rebuilds_give_the_registered_bytes():
    """``profile_kernels.py``'s ``attn-ab`` mode rebuilds ``tiled_compact``'s split kernel with
    other schedule options and compares its partial and lse with the registered kernel's
    after sentinel fill; the rebuilds launch under ``exact_fp32`` like the registered one
    (on a GPU a default build would contract ``a*b + c`` and never match). Same bits for a
    schedule option and for the defaults spelt out; a tiny context (one page, two splits)."""
    import argparse

    from bench import profile_kernels as P

    args = argparse.Namespace(attn_ab_variant="tiled_compact", attn_ctx=64, attn_splits=2,
                              attn_options="score_steps=8;pv_pairs=1", rounds=1, reps=1, inner=1)
    rows = P.mode_attn_ab(args)
    assert [r["same_bytes"] for r in rows] == [True, True], rows


@pytest.mark.parametrize("argv,named", [
    (["leave-out", "--variants", "chunked_rec"], "chunked_rec"),   # registered, no leave-out form
    (["leave-out", "--variants", "chunked_sp1it"], "chunked_sp1it"),
    (["gdn", "--variants", "chunked_aheda"], "chunked_aheda"),
    (["gdn", "--variants", ","], "no name"),
    (["leave-out", "--variants", ""], "no name"),                  # not the default
])
def test_profile_variants_are_checked_before_any_work(argv, named, tmp_path, capsys):
    """bench/profile_kernels.py's ``--variants``: leave-out mode used to drop names without
    a leave-one-out form (a run of nothing), gdn mode to fail only after the reference
    call's launch. Both are usage errors now, before the output folder is made."""
    from bench.profile_kernels import main

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", str(out)])
    assert exc.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--variants ({argv[0]})" in last and named in last, last
    assert not out.exists()


def test_profile_variants_reach_their_mode(monkeypatch, tmp_path):
    """The names a mode is given reach it, in the order given: each mode's default (leave-out
    mode's is its two forms, so ``profile_kernels.py leave-out`` runs as it always did),
    both leave-out forms, and ``all`` (every registered GDN variant in gdn mode)."""
    import dflash2_numba as d2
    from bench import profile_kernels as P

    seen = []
    monkeypatch.setattr(P, "gdn_inputs", lambda T: {})
    for mode in ("mode_gdn", "mode_leave_out"):
        monkeypatch.setattr(P, mode, lambda args, inputs: seen.append(args.variant_names) or [])
    for argv, names in [(["gdn"], ["chunked_split", "chunked_ws", "chunked_pipe"]),
                        (["leave-out"], ["chunked_split", "chunked_ws"]),   # its own default
                        (["gdn", "--variants", "all"], list(d2.gdn_variants())),
                        (["leave-out", "--variants", "chunked_ws,chunked_split"],
                         ["chunked_ws", "chunked_split"])]:
        assert P.main([*argv, "--out", str(tmp_path)]) == 0
        assert seen.pop() == names
