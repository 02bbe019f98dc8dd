#!/usr/bin/env python3
"""The output kernel of ``chunked_rec_pipe`` / ``chunked_overlap`` under each register tile
(``DFLASH2_GDN_OUT_TILE``: ``4x8`` = ``gdn_chunk_out_pipe``, ``8x8`` = ``gdn_chunk_out_wide``),
in one run: bytes, then the output kernel alone and the whole calls, timed in interleaved
rounds.

For each tile: ``chunked_rec_pipe`` and ``chunked_overlap`` are planned with that tile
(every other knob at its default) and their output and final state are compared byte for
byte with ``chunked_rec_pipe``'s at the first tile, and with the frozen ``chunked``'s when
``--frozen`` is given (about 0.7 s a call at T = 65536). Timing, per round and in the same
order: the planned output kernel alone (``chunked_rec_pipe``'s launch over every slot, on
the chunk-start states and vn its own call left), then each whole call as a CUDA-graph
replay (torch's graph route); CUDA events, ``--reps`` launches a figure, median over
``--rounds``. Shape: the per-rank production one (B = 1, H = 4, HV = 12, K = V = 128,
FP16, l2norm) at ``--T`` tokens, or ``--small`` (H = 1, HV = 2, K = V = 32: the simulator
runs the byte checks and host-clock timings there, no graphs).

Usage on the H200: ``python3 bench/out_tile_ab.py --T 65536 --frozen --out $OUT`` (writes
``out_tile_ab_T<T>.json``).
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
from dflash2_numba.gdn import chunked_rec as RC  # noqa: E402
from dflash2_numba.gdn import chunked_rec_pipe as RP  # noqa: E402
from overlap_probe import inputs, plan_with  # noqa: E402
from profile_kernels import host  # noqa: E402

TILE_KNOB = "DFLASH2_GDN_OUT_TILE"
VARIANTS = ("chunked_rec_pipe", "chunked_overlap")


def plan_tile(ins, variant: str, tile: str):
    """``variant`` planned with output tile ``tile`` (the knob restored afterwards)."""
    saved = os.environ.pop(TILE_KNOB, None)
    try:
        os.environ[TILE_KNOB] = tile
        return plan_with(ins, variant, {})
    finally:
        os.environ.pop(TILE_KNOB, None)
        if saved is not None:
            os.environ[TILE_KNOB] = saved


def results_bytes(call):
    return [host(a).tobytes() for a in call.results()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=65536)
    ap.add_argument("--small", action="store_true", help="H = 1, HV = 2, K = V = 32")
    ap.add_argument("--tiles", default=",".join(RP.OUT_TILES))
    ap.add_argument("--frozen", action="store_true", help="also compare with chunked's bytes")
    ap.add_argument("--reps", type=int, default=7, help="launches per figure")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    tiles = [t for t in args.tiles.split(",") if t]
    for t in tiles:
        if t not in RP.OUT_TILES:
            raise SystemExit(f"--tiles: one of {RP.OUT_TILES}, not {t!r}")
    torch, why, clock, rows, log = ab_session(args.out)

    ins = inputs(args.T, 1, args.small)
    calls = {}
    for tile in tiles:
        for v in VARIANTS:
            call = plan_tile(ins, v, tile)
            call.launch(clock.stream)
            clock.sync()
            calls[(v, tile)] = call
    want = results_bytes(calls[(VARIANTS[0], tiles[0])])
    for (v, tile), call in calls.items():
        log(dict(what="bytes", variant=v, tile=tile, out_kernel=call.plan.scratch.rec.out_name,
                 out_threads=int(call.plan.scratch.rec.out_threads),
                 same=results_bytes(call) == want))
    if args.frozen:
        ref = plan_with(ins, "chunked", {})
        ref.launch(clock.stream)
        clock.sync()
        log(dict(what="bytes vs chunked", variant=VARIANTS[0], tile=tiles[0],
                 same=results_bytes(ref) == want))
    graphs = {}
    if torch is None:
        log(dict(what="graphs not captured", why=why))
    else:
        for key, call in calls.items():
            graphs[key] = capture_graph(torch, call.launch)
            o = call.plan.o
            o.copy_to_device(np.zeros(o.shape, o.dtype))
            graphs[key].replay()
            torch.cuda.synchronize()
            log(dict(what="graph replay bytes", variant=key[0], tile=key[1],
                     same=results_bytes(call) == want))
    alone = {t: [] for t in tiles}
    whole = {k: [] for k in calls}
    for _ in range(args.rounds):
        for tile in tiles:
            plan = calls[(VARIANTS[0], tile)].plan
            alone[tile].append(clock.time_ms(lambda: RC.launch_out(plan, clock.stream),
                                             args.reps))
            for v in VARIANTS:
                if (v, tile) in graphs:
                    whole[(v, tile)].append(clock.time_ms(graphs[(v, tile)].replay, args.reps))
    med = lambda xs: round(float(np.median(xs)), 4) if xs else None          # noqa: E731
    for tile in tiles:
        log(dict(what="output kernel alone", tile=tile, T=args.T, clock=clock.method,
                 ms=med(alone[tile]), rounds=[round(x, 4) for x in alone[tile]]))
    for (v, tile), xs in whole.items():
        log(dict(what="call (graph replay)", variant=v, tile=tile, T=args.T, ms=med(xs),
                 rounds=[round(x, 4) for x in xs]))
    Path(args.out, f"out_tile_ab_T{args.T}.json").write_text(json.dumps(rows, indent=1))
    return 0 if all(r["same"] for r in rows if "same" in r) else 1


if __name__ == "__main__":
    sys.exit(main())
