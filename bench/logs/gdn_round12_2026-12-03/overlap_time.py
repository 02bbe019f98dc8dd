#!/usr/bin/env python3
"""chunked_overlap on the H200: bytes against chunked_rec_pipe (= chunked) at T, then event
timing (eager and torch CUDA-graph replay) under several knob settings, interleaved."""
import gc, json, os, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import numpy as np
import dflash2_numba as d2
from numba import cuda
from profile_kernels import gdn_inputs, host
import torch

T = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
CONFIGS = [c for c in (sys.argv[2] if len(sys.argv) > 2 else "8:128:100").split(",") if c]
OUT = Path(os.environ.get("OUT", "."))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
rows = []


def log(r):
    rows.append(r)
    print(r, flush=True)


def plan(variant, cfg=None):
    if cfg:
        seg, thr, carve = cfg.split(":")
        os.environ["DFLASH2_GDN_SEGMENTS"] = seg
        os.environ["DFLASH2_GDN_OVERLAP_PREP_THREADS"] = thr
        os.environ["DFLASH2_GDN_OVERLAP_CARVEOUT"] = carve
    c = d2.plan_gdn(**inputs, variant=variant, check_values=False)
    return c


def graph_of(call):
    s = torch.cuda.Stream()
    ns = cuda.external_stream(s.cuda_stream)
    call.launch(ns)              # warm (compile, attributes) outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(g, stream=s):
            call.launch(ns)
    finally:
        if was:
            gc.enable()
    torch.cuda.synchronize()
    return g


def ev_ms(fn, reps=7):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return float(np.median(ts))


inputs = gdn_inputs(T)
ref = plan("chunked_rec_pipe")
ref.launch()
cuda.synchronize()
ro, rs = (host(x) for x in ref.results())
calls = {"chunked_rec_pipe": ref}
for cfg in CONFIGS:
    c = plan("chunked_overlap", cfg)
    c.launch()
    cuda.synchronize()
    o, s = (host(x) for x in c.results())
    g = c.plan.scratch.seg
    from dflash2_numba._streams import stream_priority
    log(dict(what=f"overlap {cfg}: bytes vs chunked_rec_pipe T={T}", out=o.tobytes() == ro.tobytes(),
             state=s.tobytes() == rs.tobytes(), nseg=g.nseg,
             prio=[stream_priority(x) for x in (g.s_prep, g.s_rec, g.s_out)]))
    calls[cfg] = c
graphs = {}
for name, c in calls.items():
    try:
        graphs[name] = graph_of(c)
        # graph replay bytes: clear the output, replay, compare
        c.plan.o.copy_to_device(np.zeros(c.plan.o.shape, c.plan.o.dtype))
        graphs[name].replay()
        torch.cuda.synchronize()
        o, s = (host(x) for x in c.results())
        log(dict(what=f"{name}: graph replay bytes", out=o.tobytes() == ro.tobytes(), state=s.tobytes() == rs.tobytes()))
    except Exception as e:  # noqa: BLE001
        log(dict(what=f"{name}: graph capture failed", err=repr(e)[:300]))
eager = {n: [] for n in calls}
graph = {n: [] for n in graphs}
for _ in range(ROUNDS):
    for n, c in calls.items():
        eager[n].append(ev_ms(lambda: c.launch()))
        if n in graphs:
            graph[n].append(ev_ms(graphs[n].replay))
for n in calls:
    log(dict(what=f"{n} T={T}", eager_ms=round(float(np.median(eager[n])), 4),
             graph_ms=round(float(np.median(graph[n])), 4) if graph.get(n) else None,
             eager_rounds=[round(x, 4) for x in eager[n]], graph_rounds=[round(x, 4) for x in graph.get(n, [])]))
(OUT / f"overlap_time_T{T}.json").write_text(json.dumps(rows, indent=1))
