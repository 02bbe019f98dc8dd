#!/usr/bin/env python3
"""How many bytes a cycle can shared memory hand to the registers of an SM's lanes? A
timing experiment behind the recurrence's floor (``bench/gdn_fast_notes.md`` section 22).

Each warp of one CTA an SM loads ``--iters`` times from shared memory, 1, 2 or 4 floats a
lane (``ld1`` / ``ld2`` / ``ld4``: LDS.32 / .64 / .128), every lane from the same address
(``broadcast``: the recurrence's h and vn operands) or from its own (``distinct``: 16 B
apart at LDS.128, 8 at .64, 4 at .32: a warp's load one contiguous span, no bank
conflict), four loads an iteration, and adds what it loads into four FP32 accumulators.
``%clock64`` around the loop; printed per form and warp count: the median cycles and the
bytes delivered per SM cycle, counting every lane's copy (``warps x iters x 4 x 32 x 4 x
floats``). The sums go to a sink so the loads stay.

    python3 bench/smem_delivery.py --out $OUT
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import argparse  # noqa: E402
import json  # noqa: E402

import numpy as np  # noqa: E402
from numba import types  # noqa: E402

import dflash2_numba  # noqa: E402,F401  (numpy shim before numba)
from dflash2_numba._compat import cuda, jit_bounded  # noqa: E402
from dflash2_numba.gdn._split_ops import ld1, ld2, ld4  # noqa: E402
from bench._state_phase_clock import clk  # noqa: E402

_F32 = types.float32
SMEM_FLOATS = 16384          # 64 KB, a power of two (the address wraps with a mask)
ZERO = np.float32(0.0)


def _make(width: int):
    """The experiment kernel for ``width`` floats a lane a load."""
    def kern(sink, cycles, bcast, iters):
        sm = cuda.shared.array(0, _F32)
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        for e in range(tid, SMEM_FLOATS, nt):
            sm[e] = np.float32(1.0 / 1024.0) * np.float32((e % 7) - 3)
        cuda.syncthreads()
        lane = tid & 31
        off = np.int32(0) if bcast else np.int32(lane * width)
        q = np.int32(((tid >> 5) * 512) & (SMEM_FLOATS - 512))
        a0 = ZERO
        a1 = ZERO
        a2 = ZERO
        a3 = ZERO
        t0 = clk()
        for i in range(iters):
            p = q + off
            if width == 4:
                x = ld4(sm, p)
                y = ld4(sm, p + 128)
                z = ld4(sm, p + 256)
                u = ld4(sm, p + 384)
                a0 += (x[0] + y[1]) + (z[2] + u[3])
                a1 += (x[1] + y[2]) + (z[3] + u[0])
                a2 += (x[2] + y[3]) + (z[0] + u[1])
                a3 += (x[3] + y[0]) + (z[1] + u[2])
            elif width == 2:
                x = ld2(sm, p)
                y = ld2(sm, p + 128)
                z = ld2(sm, p + 256)
                u = ld2(sm, p + 384)
                a0 += x[0] + y[1]
                a1 += x[1] + y[0]
                a2 += z[0] + u[1]
                a3 += z[1] + u[0]
            else:
                a0 += ld1(sm, p)
                a1 += ld1(sm, p + 128)
                a2 += ld1(sm, p + 256)
                a3 += ld1(sm, p + 384)
            q = (q + np.int32(1024)) & np.int32(SMEM_FLOATS - 512)
        t1 = clk()
        cuda.syncthreads()
        if lane == 0:
            cycles[cuda.blockIdx.x, tid >> 5] = t1 - t0
        sink[cuda.blockIdx.x * nt + tid] = a0 + a1 + a2 + a3
    return kern


_KERNELS = {}


def run_form(width: int, bcast: bool, warps: int, iters: int = 4096, blocks: int = 132) -> dict:
    """Median cycles of one form and its bytes delivered per SM cycle (every lane's copy)."""
    from dflash2_numba._dynshared import DynShared

    if width not in _KERNELS:
        _KERNELS[width] = jit_bounded(_make(width), (1024, 1))
    nt = 32 * warps
    cycles = cuda.to_device(np.zeros((blocks, warps), np.int64))
    sink = cuda.to_device(np.zeros(blocks * nt, np.float32))
    kern = DynShared(_KERNELS[width], 4 * SMEM_FLOATS)
    args = (sink, cycles, np.int32(1 if bcast else 0), np.int32(iters))
    for _ in range(2):
        kern[blocks, nt, 0](*args)
        cuda.synchronize()
    cyc = cycles.copy_to_host().max(axis=1).astype(np.float64)   # the CTA's slowest warp
    med = float(np.median(cyc))
    nbytes = warps * iters * 4 * 32 * 4 * width                  # four loads an iteration
    return {"floats_a_load": width, "broadcast": bcast, "warps": warps,
            "cycles": med, "bytes_per_cycle": nbytes / med,
            "lane_floats_per_cycle": nbytes / 4 / med}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="1,2,4")
    ap.add_argument("--warps", default="1,2,4,8,16")
    ap.add_argument("--iters", type=int, default=4096)
    ap.add_argument("--blocks", type=int, default=132)
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)
    rows = []
    for width in (int(x) for x in args.widths.split(",")):
        for bcast in (True, False):
            for warps in (int(x) for x in args.warps.split(",")):
                rows.append(run_form(width, bcast, warps, args.iters, args.blocks))
                r = rows[-1]
                print(f"LDS x{width} {'broadcast' if bcast else 'distinct '} {warps:2d} warps:"
                      f" {r['cycles']:9.0f} cycles, {r['bytes_per_cycle']:6.1f} B/cycle",
                      flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "smem_delivery.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
