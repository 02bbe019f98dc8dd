#!/usr/bin/env python3
"""``chunked_overlap`` under several knob settings against ``chunked_rec_pipe``, in one run:
bytes, then eager and CUDA-graph timings in interleaved rounds.

Each ``--configs`` entry is ``SEGMENTS:PREP_THREADS:CARVEOUT:PREP:OUT:ROWS`` (the plan-time
knobs ``DFLASH2_GDN_SEGMENTS``, ``_OVERLAP_PREP_THREADS``, ``_OVERLAP_CARVEOUT``,
``_OVERLAP_PREP``, ``_OVERLAP_OUT`` and the recurrence's ``_REC_ROWS``, written with ``/``
for its comma: ``2p/0``); a field left empty, or missing at the end, keeps the variant's
default. The baseline ``chunked_rec_pipe`` is planned with every knob at its default.
Every call is planned once and checked byte for byte (output and final state) against
``chunked_rec_pipe``'s, eagerly and after a graph replay that starts from a zeroed output.
Timing: per round, every call eagerly and as a graph replay (``--reps`` calls each, CUDA
events on torch's stream, median), ``--rounds`` rounds in the same order; the medians and
every round's figure are reported. Shape: the per-rank production one (B = 1, H = 4,
HV = 12, K = V = 128, FP16, l2norm) at ``--T`` tokens, or ``--small`` (H = 1, HV = 2,
K = V = 32; the simulator runs the byte checks and host-clock timings there, no graphs).

Usage on the H200: ``python3 bench/overlap_knobs.py --T 65536 --configs
16:128:100:smem:segments,16:128:100:smem:end --out $OUT`` (writes ``overlap_knobs_T<T>.json``).
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

import dflash2_numba  # noqa: E402,F401  (numpy shim before numba)
from _common import ab_session, capture_graph  # noqa: E402
from dflash2_numba._streams import stream_priority  # noqa: E402
from overlap_probe import KNOBS, inputs, plan_with  # noqa: E402
from profile_kernels import host  # noqa: E402

def knob_env(config: str) -> dict:
    """``{knob: value}`` for one ``--configs`` entry (empty fields left out)."""
    fields = config.split(":")
    if len(fields) > len(KNOBS):
        raise ValueError(f"--configs: at most {len(KNOBS)} fields, not {config!r}")
    return {k: v.replace("/", ",") for k, v in zip(KNOBS, fields) if v}


def results_bytes(call):
    return [host(a).tobytes() for a in call.results()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=65536)
    ap.add_argument("--small", action="store_true", help="H = 1, HV = 2, K = V = 32")
    ap.add_argument("--configs", default="::::segments,::::end")
    ap.add_argument("--reps", type=int, default=7, help="timed calls per item per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    torch, why, clock, rows, log = ab_session(args.out)

    ins = inputs(args.T, 1, args.small)
    ref = plan_with(ins, "chunked_rec_pipe", {})
    ref.launch(clock.stream)
    clock.sync()
    want = results_bytes(ref)
    calls = {"chunked_rec_pipe": ref}
    for cfg in [c for c in args.configs.split(",") if c]:
        env = knob_env(cfg)
        call = plan_with(ins, "chunked_overlap", env)
        call.launch(clock.stream)
        clock.sync()
        g = call.plan.scratch.seg
        log(dict(what="eager bytes", config=cfg, env=env, T=args.T, same=results_bytes(call) == want,
                 segments=len(g.launches), out_at_end=bool(call.plan.scratch.out_at_end),
                 priorities=[stream_priority(x) for x in (g.s_prep, g.s_rec, g.s_out)]))
        calls[cfg] = call
    graphs = {}
    if torch is None:
        log(dict(what="graphs not captured", why=why))
    else:
        for name, call in calls.items():
            graphs[name] = capture_graph(torch, call.launch)
            o = call.plan.o
            o.copy_to_device(np.zeros(o.shape, o.dtype))
            graphs[name].replay()
            torch.cuda.synchronize()
            log(dict(what="graph replay bytes", config=name, same=results_bytes(call) == want))
    eager = {n: [] for n in calls}
    graph = {n: [] for n in graphs}
    for _ in range(args.rounds):
        for name, call in calls.items():
            eager[name].append(clock.time_ms(lambda: call.launch(clock.stream), args.reps))
            if name in graphs:
                graph[name].append(clock.time_ms(graphs[name].replay, args.reps))
    for name in calls:
        log(dict(what="time", config=name, T=args.T, clock=clock.method,
                 eager_ms=round(float(np.median(eager[name])), 4),
                 graph_ms=round(float(np.median(graph[name])), 4) if graph.get(name) else None,
                 eager_rounds=[round(x, 4) for x in eager[name]],
                 graph_rounds=[round(x, 4) for x in graph.get(name, [])]))
    Path(args.out, f"overlap_knobs_T{args.T}.json").write_text(json.dumps(rows, indent=1))
    same = all(r["same"] for r in rows if "same" in r)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
