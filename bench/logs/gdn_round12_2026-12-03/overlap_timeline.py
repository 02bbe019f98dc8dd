#!/usr/bin/env python3
"""chunked_overlap's schedule with timing events around every launch (eager): when each
segment's pre-pass, recurrence and output start and end (ms from the fork), per mode."""
import json, os, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import numpy as np
import dflash2_numba as d2
from numba import cuda
from dflash2_numba import _registry
from dflash2_numba.gdn import chunked_overlap as OV
from dflash2_numba.gdn import chunked_rec as RC
from profile_kernels import gdn_inputs

T = 65536
OUT = Path(os.environ.get("OUT", "."))
rows = []


def run_timed(plan, mode):
    s = plan.scratch
    g = s.seg
    r = s.rec
    ev = lambda: cuda.event()                         # noqa: E731
    e0 = ev()
    e0.record(0)
    for st in (g.s_prep, g.s_rec, g.s_out):
        e0.wait(st)
    nb = OV.copy_blocks(plan.N, plan.HV, plan.K, plan.V)
    _registry.launch("g", OV._gather, nb, OV.COPY_THREADS, g.s_rec, plan.h0, plan.h0_idx, g.rows)
    marks = []
    outs = []
    for si, seg in enumerate(g.launches):
        a, b = ev(), ev()
        a.record(g.s_prep)
        _registry.launch("p", s.prep_kernel, seg.nslots * plan.H, s.prep_threads, g.s_prep,
                         plan.q, plan.k, plan.v, plan.g, plan.beta, seg.chunks, seg.scr, s.F,
                         plan.scale, plan.use_l2)
        b.record(g.s_prep)
        g.ev_prep[si].record(g.s_prep)
        g.ev_prep[si].wait(g.s_rec)
        c, d = ev(), ev()
        c.record(g.s_rec)
        _registry.launch("r", r.state, seg.n_items, r.threads, g.s_rec, plan.o, g.rows, seg.row_in,
                         g.rows, seg.row_out, seg.seqs, seg.items, s.scr, s.F, np.int32(plan.H),
                         np.int32(plan.K), r.snap0, r.ncomp, r.n1, r.nq)
        d.record(g.s_rec)
        g.ev_rec[si].record(g.s_rec)
        marks.append([a, b, c, d])
        if mode == "std":
            g.ev_rec[si].wait(g.s_out)
            outs.append(seg)
            e, f = ev(), ev()
            e.record(g.s_out)
            _registry.launch("o", r.out, seg.nslots * plan.HV, r.out_threads, g.s_out, plan.o,
                             seg.scr, seg.chunks, s.F, np.int32(plan.H), np.int32(plan.K), seg.snap0)
            f.record(g.s_out)
            marks[-1] += [e, f]
    if mode == "out_last":
        g.ev_rec[len(g.launches) - 1].wait(g.s_out)
        for si, seg in enumerate(g.launches):
            e, f = ev(), ev()
            e.record(g.s_out)
            _registry.launch("o", r.out, seg.nslots * plan.HV, r.out_threads, g.s_out, plan.o,
                             seg.scr, seg.chunks, s.F, np.int32(plan.H), np.int32(plan.K), seg.snap0)
            f.record(g.s_out)
            marks[si] += [e, f]
    end = ev()
    for st in (g.s_prep, g.s_rec, g.s_out):
        x = ev()
        x.record(st)
        x.wait(0)
    end.record(0)
    end.synchronize()
    t = lambda x: round(cuda.event_elapsed_time(e0, x), 3)   # noqa: E731
    return t(end), [[t(x) for x in m] for m in marks]


for cfg in sys.argv[1].split(","):
    seg, carve, mode = cfg.split(":")
    os.environ["DFLASH2_GDN_SEGMENTS"] = seg
    os.environ["DFLASH2_GDN_OVERLAP_CARVEOUT"] = carve
    call = d2.plan_gdn(**gdn_inputs(T), variant="chunked_overlap", check_values=False)
    call.launch()
    cuda.synchronize()
    res = [run_timed(call.plan, mode) for _ in range(4)]
    tot = [x[0] for x in res]
    i = int(np.argsort(tot)[len(tot) // 2])
    rows.append(dict(cfg=cfg, total_ms=tot, marks=res[i][1]))
    print(f"== {cfg}: totals {tot}", flush=True)
    for si, m in enumerate(res[i][1]):
        print(f"  seg {si}: prep {m[0]:7.3f}-{m[1]:7.3f}  rec {m[2]:7.3f}-{m[3]:7.3f}" +
              (f"  out {m[4]:7.3f}-{m[5]:7.3f}" if len(m) > 4 else ""), flush=True)
    del call
(OUT / "overlap_timeline.json").write_text(json.dumps(rows, indent=1))
