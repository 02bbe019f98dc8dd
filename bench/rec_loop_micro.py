#!/usr/bin/env python3
"""How fast do the recurrence's compute loops run on their own? A timing experiment for
``gdn_rec_state`` (``chunked_rec``, ``chunked_rec_pipe``): one CTA per SM runs only the
compute units of phase 1 (``rec_phase1_unit``: ``vn = U - W h``) and of phase 2
(``rec_state_unit``: the state update), ``--reps`` times each, with the block barrier that
ends a phase after each pass, on shared memory filled with small finite values. No copy
warps, no global traffic: the cycles a chunk step's compute costs when nothing else runs
on the SM.

Per warp, ``%clock64`` around the phase-1 passes and around the phase-2 passes; printed:
median cycles per pass and per step (K steps in phase 1, C in phase 2) for each
configuration ``COMPxR1xR2`` (compute threads, rows of a phase-1 unit, rows of a phase-2
unit, 0 for the half-row units of six columns, ``a`` for those units with their loads a
step ahead (:func:`rec_state_half_ahead`), ``2d`` for the two-row phase-1 units with their
loads two passes ahead (``_split_state_ahead.rows2_deep``; both ``gdn_rec_ahead_state``'s),
``2p`` / ``2s`` for the two-row phase-1 units placed two column groups a warp / over four
warps (``place_unit``); twelve state
columns, K = 128). The whole shared array is written to a sink at the end, so
nothing is optimised away and the forms' bytes can be compared. Used on a GPU (one device call):

    python3 bench/rec_loop_micro.py --out $OUT --configs 96x2x4,192x1x2,128x2x4
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
from dflash2_numba.gdn._common import C  # noqa: E402
from dflash2_numba.gdn._split_ops import _dev  # noqa: E402
from dflash2_numba.gdn._split_state_ahead import (rec_state_half_ahead,  # noqa: E402
                                                  rows2_deep)
from dflash2_numba.gdn._split_state_rec import make_rec_forms  # noqa: E402
from dflash2_numba.gdn._split_state_rec import (PLACE_SPREAD, place_slots,  # noqa: E402
                                                place_unit, rec_floats, rec_phase1_half,
                                                rec_phase1_rows2, rec_phase1_unit,
                                                rec_regions, rec_state_half, rec_state_unit)
from dflash2_numba.gdn.chunked_rec import PLACEMENTS  # noqa: E402
from bench._state_phase_clock import clk  # noqa: E402

COLS = 12
_F32 = types.float32    # (the dynamic shared array's dtype, as the simulator wants it)


@_dev
def _fill(sm, K):
    """Small finite values in the whole shared array (then a barrier); this thread, the
    threads, the offsets of Kd and the U slice, and the gamma the phase-2 units scale by."""
    tid = cuda.threadIdx.x
    ncomp = cuda.blockDim.x
    for e in range(tid, sm.shape[0], ncomp):
        sm[e] = np.float32(1.0 / 1024.0) * np.float32((e % 7) - 3)
    cuda.syncthreads()
    off_kp, off_u, off_g = rec_regions(K * C)
    return tid, ncomp, off_kp, off_u, sm[off_g + C - 1]


@_dev
def _finish(sink, cycles, sm, d0, d1, tid, ncomp):
    """Each warp's two timed spans into ``cycles``, the whole shared array (every form's
    bytes) into ``sink``."""
    if (tid & 31) == 0:
        w = tid >> 5
        cycles[cuda.blockIdx.x, w, 0] = d0
        cycles[cuda.blockIdx.x, w, 1] = d1
    nf = sm.shape[0]
    for e in range(tid, nf, ncomp):
        sink[cuda.blockIdx.x * nf + e] = sm[e]


DEEP = -8      # (n1 of the two-row phase-1 units with their loads two passes ahead)
_, rec_phase1_unit_deep, _ = make_rec_forms(rows2_deep, rec_state_half)   # (those units)


@_dev
def _phase2(sm, first, stride, nq, off_kp, K, gl):
    """One phase-2 pass over this thread's units ``first, first + stride, ..``: the ``K``
    half-row units (``nq == 0``; loads a step ahead for ``nq < 0``) or the ``3 nq`` units
    of ``K / nq`` rows x four columns."""
    if nq == 0:
        for u in range(first, K, stride):
            rec_state_half(sm, u, off_kp, K, gl, C)
    elif nq < 0:
        for u in range(first, K, stride):
            rec_state_half_ahead(sm, u, off_kp, K, gl, C)
    else:
        for u in range(first, nq * (COLS // 4), stride):
            rec_state_unit(sm, u, nq, off_kp, K, gl, C)


def _micro(sink, cycles, K, n1, nq, reps):
    sm = cuda.shared.array(0, _F32)
    tid, ncomp, off_kp, off_u, gl = _fill(sm, K)
    ncg = COLS // 4
    t0 = clk()
    for r in range(reps):
        if n1 == 0:
            for u in range(tid, 2 * C, ncomp):
                rec_phase1_half(sm, u, K, off_u)
        elif n1 == DEEP:
            for u in range(tid, C // 2 * ncg, ncomp):
                rec_phase1_unit_deep(sm, u, C // 2, K, off_u)
        elif n1 < 0:                            # (two-row units, placed: place_unit)
            for u in range(tid, place_slots(-n1), ncomp):
                k1, g1, act = place_unit(u, -n1)
                if act:
                    rec_phase1_rows2(sm, k1, g1, K, off_u)
        else:
            for u in range(tid, n1 * ncg, ncomp):
                rec_phase1_unit(sm, u, n1, K, off_u)
        cuda.syncthreads()
    t1 = clk()
    for r in range(reps):
        _phase2(sm, tid, ncomp, nq, off_kp, K, gl)
        cuda.syncthreads()
    t2 = clk()
    _finish(sink, cycles, sm, t1 - t0, t2 - t1, tid, ncomp)


def _micro_conc(sink, cycles, K, t1, nq, reps):
    """Both phases at once on disjoint warps: threads ``< t1`` run the 96 two-row phase-1
    units, the rest the 128 half-row phase-2 units (``nq == 0``) or the ``3 nq`` units of
    ``K / nq`` rows x four columns, one barrier a pass. A timing probe: how
    much the two phases' times overlap when schedulers hold two warps (the bytes race, by
    design: phase 1 reads the state that phase 2 writes)."""
    sm = cuda.shared.array(0, _F32)
    tid, ncomp, off_kp, off_u, gl = _fill(sm, K)
    t0 = clk()
    for r in range(reps):
        if tid < t1:
            for u in range(tid, 32 * (COLS // 4), t1):
                rec_phase1_unit(sm, u, 32, K, off_u)
        else:
            _phase2(sm, tid - t1, ncomp - t1, nq, off_kp, K, gl)
        cuda.syncthreads()
    t2 = clk()
    _finish(sink, cycles, sm, t2 - t0, t2 - t0, tid, ncomp)


def _micro_ab(sink, cycles, K, t1, nq, reps):
    """Two column halves a step apart: in each of a step's two slots, threads ``< t1`` run
    phase 1 of one half (:func:`rec_phase1_half`, 64 units of one row x six columns) while
    the rest run phase 2 of the other half (:func:`rec_state_half`, 64 units of two rows x
    six columns), one barrier a slot. The two halves' columns are disjoint, so nothing
    races: half ``0`` goes through the phases in turn, half ``1`` a half step behind."""
    sm = cuda.shared.array(0, _F32)
    tid, ncomp, off_kp, off_u, gl = _fill(sm, K)
    t0 = clk()
    for r in range(reps):
        for slot in range(2):
            if tid < t1:
                for i in range(tid, C, t1):
                    rec_phase1_half(sm, 2 * i + slot, K, off_u)
            else:
                for p in range(tid - t1, K // 2, ncomp - t1):
                    rec_state_half(sm, 2 * p + 1 - slot, off_kp, K, gl, C)
            cuda.syncthreads()
    t2 = clk()
    _finish(sink, cycles, sm, t2 - t0, t2 - t0, tid, ncomp)


_KERNELS = {}    # compiled experiment kernels, by launch bounds or form


def run_concurrent(t1: int, t2: int, K: int = 128, reps: int = 64, blocks: int = 132,
                   halves: bool = False, r2: int = 0) -> dict:
    """Median cycles a pass (both phases of all twelve columns) with ``t1`` phase-1 and
    ``t2`` phase-2 threads running at once: the whole phases (:func:`_micro_conc`) or
    column halves a step apart (``halves``, :func:`_micro_ab`); ``r2`` rows a phase-2 unit
    (0: the half-row units; whole phases only)."""
    from dflash2_numba._dynshared import DynShared

    comp = t1 + t2
    nw = -(-comp // 32)
    cycles = cuda.to_device(np.zeros((blocks, nw, 2), np.int64))
    sink = cuda.to_device(np.zeros(blocks * rec_floats(K), np.float32))
    form = _micro_ab if halves else _micro_conc
    if form not in _KERNELS:
        _KERNELS[form] = jit_bounded(form, (256, 1))
    kern = DynShared(_KERNELS[form], 4 * rec_floats(K))
    args = (sink, cycles, np.int32(K), np.int32(t1), np.int32(K // r2 if r2 else 0),
            np.int32(reps))
    for _ in range(2):
        kern[blocks, comp, 0](*args)
        cuda.synchronize()
    x = cycles.copy_to_host()[:, :, 0].astype(np.float64) / reps
    name = f"{'ab' if halves else 'conc'}{t1}+{t2}" + (f"x{r2}" if r2 else "")
    return {"config": name, "both_phases_cycles_per_pass": float(np.median(x))}



def micro_kernel(threads: int):
    """The experiment kernel under ``gdn_rec_state``'s launch bounds, (256, 1), or (384, 1)
    for more than 256 threads (the measured 384-thread recurrence form, since dropped)."""
    bounds = (256, 1) if threads <= 256 else (384, 1)
    if bounds not in _KERNELS:
        _KERNELS[bounds] = jit_bounded(_micro, bounds)
    return _KERNELS[bounds]


def run_config(comp: int, r1: int, r2: int, K: int = 128, reps: int = 64, blocks: int = 132):
    """Cycles of one configuration: ``(phase-1 cycles, phase-2 cycles)`` per warp and
    block (int64 [blocks, warps, 2]) and the sink."""
    from dflash2_numba._dynshared import DynShared

    if r1 in PLACEMENTS:                 # (two-row units, placed)
        n1 = -PLACEMENTS[r1]
    elif r1 == "2d":                     # (two-row units, loads two passes ahead)
        n1 = DEEP
    else:
        r1 = int(r1)
        n1 = C // r1 if r1 else 0        # (0: the half-row units of six columns)
    nq = -1 if r2 == "a" else (K // int(r2) if int(r2) else 0)   # (-1: rec_state_half_ahead)
    nw = -(-comp // 32)
    cycles = cuda.to_device(np.zeros((blocks, nw, 2), np.int64))
    sink = cuda.to_device(np.zeros(blocks * rec_floats(K), np.float32))
    kern = DynShared(micro_kernel(comp), 4 * rec_floats(K))
    args = (sink, cycles, np.int32(K), np.int32(n1), np.int32(nq), np.int32(reps))
    kern[blocks, comp, 0](*args)                 # (warm-up: compile, shared-memory limit)
    cuda.synchronize()
    kern[blocks, comp, 0](*args)
    cuda.synchronize()
    return cycles.copy_to_host(), sink.copy_to_host()


def summarise(cyc: np.ndarray, comp: int, r1: int, r2: int, K: int, reps: int) -> dict:
    """Median cycles per pass and per step of each phase over the busy warps (warps with a
    unit in the phase)."""
    if r1 in PLACEMENTS:                             # units (thread slots) of each phase
        u1 = 128 if PLACEMENTS[r1] == PLACE_SPREAD else 96
    elif r1 == "2d":
        u1 = 96
    else:
        u1 = C // int(r1) * COLS // 4 if int(r1) else 2 * C
    u2 = K if r2 == "a" or not int(r2) else K // int(r2) * COLS // 4
    out = {"config": f"{comp}x{r1}x{r2}"}
    for ph, units, steps in ((0, u1, K), (1, u2, C)):
        busy = -(-min(units, comp) // 32)
        x = cyc[:, :busy, ph].astype(np.float64) / reps
        out[f"phase{ph + 1}_cycles_per_pass"] = float(np.median(x))
        out[f"phase{ph + 1}_cycles_per_step"] = float(np.median(x)) / steps
        out[f"phase{ph + 1}_busy_warps"] = busy
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="96x2x4,128x2x4,192x1x2,192x1x4,192x2x4")
    ap.add_argument("--reps", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=132)
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)
    rows = []
    for entry in [e for e in args.configs.split(",") if e]:
        if entry.startswith(("conc", "ab")):   # concN+M[xR2] / abN+M: run_concurrent
            halves = entry.startswith("ab")
            body, _, r2 = entry[2 if halves else 4:].partition("x")
            t1, t2 = (int(x) for x in body.split("+"))
            rows.append(run_concurrent(t1, t2, reps=args.reps, blocks=args.blocks,
                                       halves=halves, r2=int(r2 or 0)))
            print(rows[-1], flush=True)
            continue
        f0, r1, f2 = entry.split("x")
        comp, r2 = int(f0), (f2 if f2 == "a" else int(f2))
        cyc, _ = run_config(comp, r1, r2, reps=args.reps, blocks=args.blocks)
        rows.append(summarise(cyc, comp, r1, r2, 128, args.reps))
        print(rows[-1], flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "rec_loop_micro.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
