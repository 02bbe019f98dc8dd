#!/usr/bin/env python3
"""How fast can CTAs that share their chunk data pull it from L2 into shared memory? The
ceiling under every state pass of the GDN ``chunked`` variants (issue 8).

In ``chunked_split`` / ``chunked_ws`` every chunk step makes each of the ``per_group`` CTAs
of a value head copy the same chunk data (W^T, qs^T, Kd, P^T: 112 KB at K = 128) from the
pre-pass scratch into its shared memory, the first reader bringing it from HBM, the others
from L2. This kernel does only that, with the package's own copy routine
(``_split_state.stage_two``: two regions, eight 16-byte loads per region and thread in
flight), ``nsteps`` steps with one block barrier each, and no arithmetic. ``share = 0``
gives every CTA its own data (HBM-bound, for comparison). One CTA per group can issue
``prefetch.global.L2`` of the data two steps ahead, as ``chunked_ws`` does.

Bytes delivered to the SMs per second is the figure: a state pass whose chunk step copies
B bytes into each of its CTAs cannot take less than ``CTAs * B * steps / ceiling``.

    python3 bench/l2_copy_ceiling.py --out $OUT                # the sweep, a table, JSON
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402

import dflash2_numba  # noqa: E402,F401  (numpy shim before numba)
from dflash2_numba._compat import cuda  # noqa: E402
from dflash2_numba._dynshared import DynShared  # noqa: E402
from dflash2_numba.gdn._split_ops import pf2  # noqa: E402
from dflash2_numba.gdn._split_state import stage_two  # noqa: E402
from numba import types  # noqa: E402

_F32 = types.float32


def copy_steps_kernel(src, region, nsteps, per_group, share, prefetch, dump):
    """Step ``s`` copies the ``region`` floats of ``src`` at
    ``((s * groups + g) if share else (s * CTAs + cta)) * region`` into shared memory
    (two halves through ``stage_two``), then a block barrier. ``dump[cta]`` receives the
    shared copy of the last step for ``cta < dump.shape[0]`` (for tests)."""
    sm = cuda.shared.array(0, _F32)
    cta = cuda.blockIdx.x
    ncta = cuda.gridDim.x
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    g = cta // per_group
    groups = ncta // per_group
    half = region // 2
    n4 = half // 4
    for s in range(nsteps):
        if share != 0:
            base = (s * groups + g) * np.int64(region)
        else:
            base = (s * ncta + cta) * np.int64(region)
        if prefetch != 0 and share != 0 and cta - g * per_group == 0 and s + 2 < nsteps:
            ahead = ((s + 2) * groups + g) * np.int64(region)
            e = tid
            while e < region // 32:
                pf2(src, ahead + 32 * e)
                e += nthr
        stage_two(sm, 0, half, src, base, n4, base + half, n4, tid, nthr)
        cuda.syncthreads()
    if cta < dump.shape[0]:
        for e in range(tid, region, nthr):
            dump[cta, e] = sm[e]


_kernel = cuda.jit(copy_steps_kernel)


def launcher(src, region, nsteps, groups, per_group, share, prefetch, threads, dump, stream=0):
    """A no-argument function that launches one run (dynamic shared memory: the region)."""
    kern = DynShared(_kernel, 4 * region)
    args = (src, np.int64(region), np.int32(nsteps), np.int32(per_group), np.int32(share),
            np.int32(prefetch), dump)

    def go():
        kern[groups * per_group, threads, stream](*args)
    return go


def main(argv=None):
    from bench.profile_kernels import event_median_ms

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=12, help="value heads")
    ap.add_argument("--per-group", type=int, default=11, help="CTAs per value head")
    ap.add_argument("--steps", type=int, default=1024, help="chunk steps (share = 1)")
    ap.add_argument("--kb", default="112,64", help="bytes per CTA and step, in KB")
    ap.add_argument("--threads", default="128,256,384,512,768,1024")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    G, R = args.groups, args.per_group
    rows = []
    kbs = [int(x) for x in args.kb.split(",")]
    max_region = max(kbs) * 256
    steps_private = max(1, args.steps // R)            # the same bytes from HBM as shared
    n = max(args.steps * G, steps_private * G * R) * max_region
    src = cuda.to_device(np.random.default_rng(0).random(n, dtype=np.float32))
    dump = cuda.device_array((0, 1), np.float32)
    for kb in kbs:
        region = kb * 256
        for share, prefetch in ((1, 0), (1, 1), (0, 0)):
            steps = args.steps if share else steps_private
            for thr in (int(x) for x in args.threads.split(",")):
                go = launcher(src, region, steps, G, R, share, prefetch, thr, dump)
                try:
                    ms = event_median_ms(go, 5, 1)
                except Exception as exc:  # noqa: BLE001  (e.g. too many registers for thr)
                    rows.append(dict(kb=kb, share=share, prefetch=prefetch, threads=thr,
                                     error=f"{type(exc).__name__}: {exc}"[:200]))
                    print(rows[-1], flush=True)
                    continue
                to_sm = G * R * steps * region * 4 / (ms * 1e-3)
                rows.append(dict(kb=kb, share=share, prefetch=prefetch, threads=thr, steps=steps,
                                 ms=ms, to_sm_TBps=to_sm / 1e12,
                                 us_per_step=1e3 * ms / steps))
                print(rows[-1], flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "l2_copy_ceiling.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'KB':>4} {'share':>5} {'pf':>3} {'thr':>5} {'us/step':>8} {'TB/s to SMs':>12}")
    for r in (r for r in rows if "ms" in r):
        print(f"{r['kb']:>4} {r['share']:>5} {r['prefetch']:>3} {r['threads']:>5} "
              f"{r['us_per_step']:>8.2f} {r['to_sm_TBps']:>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
