#!/usr/bin/env python3
"""DynShared's remembered launch (new) against typing every argument once per attribute on
every launch (old, restored by patching prepare): bytes, host enqueue time and eager GPU
time of planned GDN calls, interleaved rounds."""
import json, os, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "bench"))
import numpy as np
import dflash2_numba as d2
from dflash2_numba import _dynshared as DS
from numba import cuda
from profile_kernels import gdn_inputs, host
import torch

OUT = Path(os.environ.get("OUT", "."))
rows = []
def log(r):
    rows.append(r); print(r, flush=True)

new_prepare = DS.DynShared.prepare
def old_prepare(self, args):
    if self.nbytes > 48 * 1024:
        DS.raise_smem_limit(self.kernel, args, self.nbytes)
    if self.carveout is not None:
        DS.set_carveout(self.kernel, args, self.carveout)

def ev(fn, reps):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    hs, gs = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        a.record(); t0 = time.perf_counter(); fn(); t1 = time.perf_counter(); b.record(); b.synchronize()
        hs.append((t1 - t0) * 1e3); gs.append(a.elapsed_time(b))
    return float(np.median(hs)), float(np.median(gs))

for T in (4096, 65536):
    inp = gdn_inputs(T)
    ref = d2.plan_gdn(**inp, variant="chunked_rec_pipe", check_values=False)
    ref.launch(); cuda.synchronize()
    ro, rs = (host(x) for x in ref.results())
    calls = {"chunked_rec_pipe": ref, "chunked_overlap": d2.plan_gdn(**inp, variant="chunked_overlap", check_values=False)}
    res = {}
    for mode, prep in (("new", new_prepare), ("old", old_prepare)):
        DS.DynShared.prepare = prep
        for n, c in calls.items():
            c.launch(); cuda.synchronize()
            o, s = (host(x) for x in c.results())
            log(dict(what=f"{n} {mode} T={T} bytes vs chunked_rec_pipe", out=o.tobytes() == ro.tobytes(), state=s.tobytes() == rs.tobytes()))
    for rnd in range(3):
        for mode, prep in (("new", new_prepare), ("old", old_prepare)):
            DS.DynShared.prepare = prep
            for n, c in calls.items():
                h, g = ev(c.launch, 7)
                res.setdefault((n, mode), []).append((h, g))
    for (n, mode), v in res.items():
        log(dict(what=f"{n} {mode} T={T}", host_ms=[round(x[0], 3) for x in v], gpu_ms=[round(x[1], 4) for x in v]))
    DS.DynShared.prepare = new_prepare
(OUT / "dyn_ab.json").write_text(json.dumps(rows, indent=1))
