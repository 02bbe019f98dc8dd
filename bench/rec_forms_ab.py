#!/usr/bin/env python3
"""The recurrence of ``chunked_ahead`` under each pair of compute forms, in one run: phase
1's two-row chains ``pass`` (``rows2_ahead``: loads one pass ahead, ``gdn_rec_state``'s) or
``deep`` (``rows2_deep``: two passes ahead), phase 2's half-row units ``plain``
(``rec_state_half``, ``gdn_rec_state``'s) or ``ahead`` (``rec_state_half_ahead``: loads a
step ahead). Each pair is compiled by ``_split_state_ahead.rec_kernel_for`` under
``gdn_rec_state``'s launch bounds, with the carveout chunked_ahead plans.

One ``chunked_ahead`` call is planned at ``--T`` (per-rank production shape, or
``--small``); for each pair its recurrence kernel is swapped into the plan and the call is
captured as a CUDA graph (torch's route). Bytes: each pair's whole call (eager, and its
graph replay on a zeroed output) against the frozen ``chunked``'s (``--frozen``) or the
first pair's. Timing, interleaved rounds, CUDA events, ``--reps`` launches a figure, median
over ``--rounds``: the recurrence alone over every item (``chunked_rec.launch_state``, one
launch, no segments) and the whole call as a graph replay. Writes
``rec_forms_ab_T<T>.json``.

    python3 bench/rec_forms_ab.py --T 65536 --frozen --out $OUT
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
from dflash2_numba._compat import jit_bounded  # noqa: E402
from dflash2_numba._dynshared import DynShared  # noqa: E402
from dflash2_numba.gdn import chunked_rec as RC  # noqa: E402
from dflash2_numba.gdn._split_state_ahead import (P1_FORMS, P2_FORMS,  # noqa: E402
                                                  rec_kernel_for)
from dflash2_numba.gdn._split_state_rec import rec_floats  # noqa: E402
from out_tile_ab import results_bytes  # noqa: E402
from overlap_probe import inputs, plan_with  # noqa: E402

DEFAULT_PAIRS = "pass:plain,deep:ahead,pass:ahead,deep:plain"


def parse_pairs(text: str) -> list[tuple[str, str]]:
    """``P1:P2,..`` into pairs, each name checked against the form tables."""
    pairs = []
    for entry in (e for e in text.split(",") if e):
        p1, _, p2 = entry.partition(":")
        if p1 not in P1_FORMS or p2 not in P2_FORMS:
            raise SystemExit(f"--pairs: P1:P2 with P1 in {sorted(P1_FORMS)} and P2 in "
                             f"{sorted(P2_FORMS)}, not {entry!r}")
        pairs.append((p1, p2))
    return pairs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=65536)
    ap.add_argument("--small", action="store_true", help="H = 1, HV = 2, K = V = 32")
    ap.add_argument("--pairs", default=DEFAULT_PAIRS, help="P1:P2 forms, comma-separated")
    ap.add_argument("--frozen", action="store_true", help="compare with chunked's bytes")
    ap.add_argument("--reps", type=int, default=5, help="launches per figure")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    pairs = parse_pairs(args.pairs)
    torch, why, clock, rows, log = ab_session(args.out)

    ins = inputs(args.T, 1, args.small)
    call = plan_with(ins, "chunked_ahead", {})
    plan = call.plan
    r = plan.scratch.rec
    carve = r.state.carveout
    kernels = {pair: DynShared(jit_bounded(rec_kernel_for(*pair), RC.STATE_LAUNCH_BOUNDS),
                               4 * rec_floats(plan.K), carve) for pair in pairs}
    want = None
    if args.frozen:
        ref = plan_with(ins, "chunked", {})
        ref.launch(clock.stream)
        clock.sync()
        want = results_bytes(ref)
        del ref
    graphs = {}
    o = plan.o
    for pair, kern in kernels.items():
        r.state = kern
        o.copy_to_device(np.zeros(o.shape, o.dtype))
        call.launch(clock.stream)
        clock.sync()
        got = results_bytes(call)
        want = got if want is None else want
        log(dict(what="bytes", pair=":".join(pair), same=got == want))
        if torch is None:
            continue
        graphs[pair] = capture_graph(torch, call.launch)
        o.copy_to_device(np.zeros(o.shape, o.dtype))
        graphs[pair].replay()
        torch.cuda.synchronize()
        log(dict(what="graph replay bytes", pair=":".join(pair),
                 same=results_bytes(call) == want))
    if torch is None:
        log(dict(what="graphs not captured", why=why))
    alone = {p: [] for p in pairs}
    whole = {p: [] for p in graphs}
    for _ in range(args.rounds):
        for pair, kern in kernels.items():
            r.state = kern
            alone[pair].append(clock.time_ms(lambda: RC.launch_state(plan, clock.stream),
                                             args.reps))
            if pair in graphs:
                whole[pair].append(clock.time_ms(graphs[pair].replay, args.reps))
    med = lambda xs: round(float(np.median(xs)), 4) if xs else None          # noqa: E731
    for name, table in (("recurrence alone", alone), ("call (graph replay)", whole)):
        for pair, xs in table.items():
            log(dict(what=name, pair=":".join(pair), T=args.T, clock=clock.method, ms=med(xs),
                     rounds=[round(x, 4) for x in xs]))
    Path(args.out, f"rec_forms_ab_T{args.T}.json").write_text(json.dumps(rows, indent=1))
    return 0 if all(r["same"] for r in rows if "same" in r) else 1


if __name__ == "__main__":
    sys.exit(main())
