#!/usr/bin/env python3
"""``gdn_chunk_out_wide`` (the default output kernel of ``chunked_rec_pipe`` /
``chunked_overlap``) compiled under other launch bounds, ``(128, B)`` for each ``--blocks``
B: the registers ptxas may use fall as B rises (163 at B = 3, the committed bound; 128 with
540 B of spill at 4; 96 at 5, sm_90, CUDA 12.9 ptxas), the CTAs an SM may hold rise.

One ``chunked_rec_pipe`` call at ``--T`` (per-rank production shape) leaves its chunk-start
states and vn in its scratch; then each form relaunches the output kernel alone over every
slot: its output is compared byte for byte with the call's, and timed with CUDA events in
interleaved rounds (``--reps`` launches a figure, median over ``--rounds``). Writes
``out_bounds_ab_T<T>.json``.

    python3 bench/out_bounds_ab.py --T 65536 --blocks 3,4,2 --out $OUT
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
from _common import Clock, try_import_torch  # noqa: E402
from dflash2_numba._compat import jit_bounded  # noqa: E402
from dflash2_numba._dynshared import DynShared  # noqa: E402
from dflash2_numba.gdn import chunked_rec as RC  # noqa: E402
from dflash2_numba.gdn import chunked_rec_pipe as RP  # noqa: E402
from dflash2_numba.gdn._chunk_output_wide import (gdn_chunk_out_wide_kernel,  # noqa: E402
                                                  wide_floats)
from overlap_probe import inputs, plan_with  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=int, default=65536)
    ap.add_argument("--small", action="store_true", help="H = 1, HV = 2, K = V = 32")
    ap.add_argument("--blocks", default="3,4,2", help="B of each form (128, B)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    torch, _why = try_import_torch()
    clock = Clock(torch)
    call = plan_with(inputs(args.T, 1, args.small), "chunked_rec_pipe", {})
    call.launch(clock.stream)
    clock.sync()
    plan = call.plan
    if plan.scratch.rec.out_name != RP.WIDE_NAME:
        raise SystemExit(f"the planned output kernel is {plan.scratch.rec.out_name}, "
                         f"not {RP.WIDE_NAME} (DFLASH2_GDN_OUT_TILE, or below cc 8.0)")
    o = plan.o
    want = o.copy_to_host().tobytes()
    forms = {}
    for b in (int(x) for x in args.blocks.split(",") if x):
        forms[f"(128, {b})"] = DynShared(jit_bounded(gdn_chunk_out_wide_kernel, (128, b)),
                                         4 * wide_floats(plan.K, plan.V))
    rows = []
    for name, kern in forms.items():
        plan.scratch.rec.out = kern
        o.copy_to_device(np.zeros(o.shape, o.dtype))
        RC.launch_out(plan, clock.stream)
        clock.sync()
        rows.append(dict(what="bytes", bounds=name, same=o.copy_to_host().tobytes() == want))
        print(rows[-1], flush=True)
    times = {n: [] for n in forms}
    for _ in range(args.rounds):
        for name, kern in forms.items():
            plan.scratch.rec.out = kern
            times[name].append(clock.time_ms(lambda: RC.launch_out(plan, clock.stream),
                                             args.reps))
    for name, xs in times.items():
        rows.append(dict(what="output kernel alone", bounds=name, T=args.T, clock=clock.method,
                         ms=round(float(np.median(xs)), 4), rounds=[round(x, 4) for x in xs]))
        print(rows[-1], flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, f"out_bounds_ab_T{args.T}.json").write_text(json.dumps(rows, indent=1))
    return 0 if all(r["same"] for r in rows if "same" in r) else 1


if __name__ == "__main__":
    sys.exit(main())
