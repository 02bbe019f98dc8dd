#!/usr/bin/env python3
"""Can GDN's parallel kernels run beside its recurrence, and where does ``chunked_overlap``'s
time go? Two modes (per-rank shape, B = 1, H = 4, HV = 12, K = V = 128, FP16; ``--T``):

``pair``: two independent planned ``chunked_rec_pipe`` calls X and Y. X's recurrence goes on
one stream, then one or two of Y's parallel kernels (the pre-pass at 256 or 128 threads a
CTA, the output) on others. Each case is timed with CUDA events, median of ``--reps``: the
wall time and when each stream's kernel ended. Every case runs under the driver's
shared-memory carveout, then under ``--carveout`` percent (the kernels' attribute), and with
the recurrence on a high-priority stream. Same kernels on different data: only the
scheduling is measured; X's bytes are checked afterwards.

``timeline``: ``chunked_overlap``'s schedule, eagerly launched, with a timing event before
and after every segment's pre-pass, recurrence and output (ms from the fork), for each
``--configs`` entry ``SEGMENTS:CARVEOUT:MODE`` (MODE ``std``: the variant's run, its outputs
in one launch after the last recurrence; ``segments``: each segment's output after its own
recurrence, ``DFLASH2_GDN_OVERLAP_OUT=segments``; ``none``: no outputs). The stream
priorities are reported with each entry.
Host launch time shows in eager runs, so the times are an upper bound for a graph replay.

Writes ``overlap_<mode>.json`` to ``--out``. Usage on the H200:
``python3 bench/overlap_probe.py pair --out $OUT`` /
``python3 bench/overlap_probe.py timeline --configs 16:80:std,16:80:segments --out $OUT``.
The simulator runs both at a small shape (``--small``: H = 1, HV = 2, K = V = 32) for the tests.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402

import dflash2_numba as d2  # noqa: E402  (numpy shim before numba)
from dflash2_numba._compat import SIMULATOR  # noqa: E402
from dflash2_numba._dynshared import set_carveout  # noqa: E402
from dflash2_numba._streams import priority_stream, stream_priority  # noqa: E402
from dflash2_numba.gdn import chunked_overlap as OV  # noqa: E402
from dflash2_numba.gdn import chunked_rec as RC  # noqa: E402
from dflash2_numba.gdn import chunked_split as S  # noqa: E402
from numba import cuda  # noqa: E402
from profile_kernels import gdn_inputs, host  # noqa: E402


KNOBS = ("DFLASH2_GDN_SEGMENTS", "DFLASH2_GDN_OVERLAP_PREP_THREADS",
         "DFLASH2_GDN_OVERLAP_CARVEOUT", "DFLASH2_GDN_OVERLAP_PREP", "DFLASH2_GDN_OVERLAP_OUT",
         "DFLASH2_GDN_REC_ROWS")


def plan_with(ins, variant, env):
    """A planned call with ``env`` as chunked_overlap's knobs at plan time (the other
    :data:`KNOBS` cleared); the caller's environment is restored afterwards."""
    saved = {k: os.environ.pop(k, None) for k in KNOBS}
    try:
        os.environ.update(env)
        return d2.plan_gdn(**ins, variant=variant, check_values=False)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v


def inputs(T, seed, small):
    if not small:
        return gdn_inputs(T, seed)
    rng = np.random.default_rng(seed)
    dev = cuda.to_device
    return dict(q=dev(rng.standard_normal((1, T, 1, 32)).astype(np.float16)),
                k=dev(rng.standard_normal((1, T, 1, 32)).astype(np.float16)),
                v=dev(rng.standard_normal((1, T, 2, 32)).astype(np.float16)),
                g=dev(rng.uniform(-1, -0.01, (1, T, 2)).astype(np.float32)),
                beta=dev(rng.uniform(0, 1, (1, T, 2)).astype(np.float32)))


def elapsed(a, b) -> float:
    """ms between two recorded events (0 on the simulator, which has no event timing)."""
    fn = getattr(cuda, "event_elapsed_time", None)
    return round(float(fn(a, b)), 4) if fn is not None else 0.0


def timed(fns, streams):
    """One run: an event on ``streams[0]`` that every other stream waits on, ``fns[i]`` on
    ``streams[i]``, an end event on each; ``(wall ms, [end ms of each stream])``."""
    e0 = cuda.event()
    ends = [cuda.event() for _ in fns]
    e0.record(streams[0])
    for st in streams[1:]:
        e0.wait(st)
    for fn, st, e in zip(fns, streams, ends):
        fn(st)
        e.record(st)
    for e in ends:
        e.synchronize()
    t = [elapsed(e0, e) for e in ends]
    return max(t), t


def median_run(fns, streams, reps):
    timed(fns, streams)
    runs = [timed(fns, streams) for _ in range(reps)]
    order = np.argsort([w for w, _ in runs])
    return runs[int(order[len(runs) // 2])]


def mode_pair(args):
    mk = lambda seed: d2.plan_gdn(**inputs(args.T, seed, args.small),        # noqa: E731
                                  variant="chunked_rec_pipe", check_values=False)
    X, Y, Y128 = mk(1), mk(2), mk(3)
    for c in (X, Y, Y128):
        c.launch()
    cuda.synchronize()
    Y128.plan.scratch.prep_threads = 128
    ref = [host(a).tobytes() for a in X.results()]
    px, py, py128 = X.plan, Y.plan, Y128.plan
    rec = lambda p: (lambda st: RC.launch_state(p, st))                        # noqa: E731
    prep = lambda p: (lambda st: S.launch_prep(p, st))                         # noqa: E731
    out = lambda p: (lambda st: RC.launch_out(p, st))                          # noqa: E731
    s1, s2, s3 = cuda.stream(), cuda.stream(), cuda.stream()
    hi, lo2, lo3 = priority_stream(True), priority_stream(False), priority_stream(False)
    cases = [("recurrence alone", [rec(px)], [s1]),
             ("pre-pass 256 alone", [prep(py)], [s2]),
             ("pre-pass 128 alone", [prep(py128)], [s2]),
             ("output alone", [out(py)], [s3]),
             ("recurrence, pre-pass 128", [rec(px), prep(py128)], [s1, s2]),
             ("recurrence, pre-pass 256", [rec(px), prep(py)], [s1, s2]),
             ("recurrence, output", [rec(px), out(py)], [s1, s3]),
             ("recurrence, pre-pass 128, output", [rec(px), prep(py128), out(py)], [s1, s2, s3]),
             ("priority: recurrence, pre-pass 128", [rec(px), prep(py128)], [hi, lo2]),
             ("priority: recurrence, pre-pass 128, output", [rec(px), prep(py128), out(py)],
              [hi, lo2, lo3])]
    rows = []
    for carve in (None, args.carveout):
        if carve is not None and not SIMULATOR:          # (the kernels X and Y share)
            for dk, launch_args in kernel_args(px):
                set_carveout(dk.kernel, launch_args, carve)
        for name, fns, sts in cases:
            w, ends = median_run(fns, sts, args.reps)
            rows.append(dict(case=name, carveout=carve, wall_ms=round(w, 4), ends_ms=ends))
            print(rows[-1], flush=True)
    X.launch()
    cuda.synchronize()
    rows.append(dict(case="X bytes unchanged",
                     same=[host(a).tobytes() for a in X.results()] == ref))
    print(rows[-1], flush=True)
    return rows


def kernel_args(plan):
    """``(DynShared, launch arguments)`` of a planned chunked_rec_pipe call's three kernels."""
    s = plan.scratch
    r = s.rec
    return ((s.prep_kernel, (plan.q, plan.k, plan.v, plan.g, plan.beta, s.chunks, s.scr, s.F,
                             plan.scale, plan.use_l2)),
            (r.state, (plan.o, plan.h0, plan.h0_idx, plan.hT, plan.hT_idx, plan.seqs, s.items,
                       s.scr, s.F, np.int32(plan.H), np.int32(plan.K), r.snap0, r.ncomp, r.n1,
                       r.nq)),
            (r.out, (plan.o, s.scr, s.chunks, s.F, np.int32(plan.H), np.int32(plan.K),
                     r.snap0)))


def timeline_run(plan, mode):
    """chunked_overlap's own run (:func:`chunked_overlap.run`) with timing events on either
    side of every segment launch; ``(total ms, [[prep start, end, rec start, end(, out
    start, end)] per segment], [kernel names per segment])``, from an event recorded just
    before the fork. The one output launch after the last recurrence (the variant's default
    schedule) is an extra entry of its own (kernel ``out``)."""
    marks = {}
    names = {}

    def around(segment, kernel, stream, launch):
        a, b = cuda.event(), cuda.event()
        a.record(stream)
        launch()
        b.record(stream)
        marks.setdefault(segment, []).extend([a, b])
        names.setdefault(segment, []).append(kernel)

    e0, end = cuda.event(), cuda.event()
    e0.record(0)
    OV.run(plan, 0, around=around, outputs=mode != "none")
    end.record(0)
    end.synchronize()
    return (elapsed(e0, end), [[elapsed(e0, x) for x in marks[k]] for k in sorted(marks)],
            [names[k] for k in sorted(marks)])


def mode_timeline(args):
    rows = []
    ins = inputs(args.T, 1, args.small)
    want = None
    for cfg in [c for c in args.configs.split(",") if c]:
        seg, carve, mode = cfg.split(":")
        if mode not in ("std", "segments", "none"):
            raise ValueError(f"--configs: MODE std, segments or none, not {mode!r}")
        call = plan_with(ins, "chunked_overlap", {
            "DFLASH2_GDN_SEGMENTS": seg, "DFLASH2_GDN_OVERLAP_CARVEOUT": carve,
            "DFLASH2_GDN_OVERLAP_OUT": "segments" if mode == "segments" else "end"})
        call.launch()
        cuda.synchronize()
        if want is None:
            want = [host(a).tobytes() for a in call.results()]
        o = call.plan.o
        o.copy_to_device(np.full(o.shape, np.nan, o.dtype))   # the schedule must rewrite it
        runs = [timeline_run(call.plan, mode) for _ in range(args.reps)]
        got = [host(a).tobytes() for a in call.results()]
        same = None if mode == "none" else got == want      # (no outputs in mode none)
        i = int(np.argsort([r[0] for r in runs])[len(runs) // 2])
        g = call.plan.scratch.seg
        rows.append(dict(config=cfg, totals_ms=[r[0] for r in runs], segments=runs[i][1],
                         kernels=runs[i][2],
                         bytes_as_a_whole_call=same,
                         priorities=[stream_priority(x) for x in (g.s_prep, g.s_rec, g.s_out)]))
        print(f"== {cfg}: totals {rows[-1]['totals_ms']}, bytes as a whole call: {same}",
              flush=True)
        for si, (m, kn) in enumerate(zip(runs[i][1], runs[i][2])):
            print(f"  segment {si}: " + "  ".join(
                f"{name} {m[2 * k]:7.3f}-{m[2 * k + 1]:7.3f}"
                for k, name in enumerate(kn)), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["pair", "timeline"])
    ap.add_argument("--T", type=int, default=65536)
    ap.add_argument("--small", action="store_true", help="H = 1, HV = 2, K = V = 32")
    carve = OV.DEFAULT_CARVEOUT                     # (the variant's own default)
    ap.add_argument("--carveout", type=int, default=int(carve))
    ap.add_argument("--configs", default=f"16:{carve}:std,16:{carve}:segments,16:{carve}:none")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rows = mode_pair(args) if args.mode == "pair" else mode_timeline(args)
    Path(args.out, f"overlap_{args.mode}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
