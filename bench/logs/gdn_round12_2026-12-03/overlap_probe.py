#!/usr/bin/env python3
"""Does the recurrence leave room for the pre-pass / output kernels beside it on the H200?

Two independent planned chunked_rec_pipe calls X and Y (T tokens each, production shape).
Times (CUDA events, median of reps): each kernel alone; X's recurrence launched first on
stream s1 and one of Y's parallel kernels launched right after on stream s2 (wall time from
an event before both to the later of the two end events). No arithmetic changes: the same
kernels on different data, so only scheduling is measured.
"""
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import numpy as np
import dflash2_numba as d2
from numba import cuda
from dflash2_numba.gdn import chunked_split as S
from dflash2_numba.gdn import chunked_rec as RC
from profile_kernels import gdn_inputs, host

T = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
OUT = Path(os.environ.get("OUT", "."))
REPS = int(os.environ.get("REPS", "7"))


def plan(seed, prep_threads=None):
    call = d2.plan_gdn(**gdn_inputs(T, seed), variant="chunked_rec_pipe", check_values=False)
    call.launch()
    cuda.synchronize()
    if prep_threads:
        call.plan.scratch.prep_threads = prep_threads
    return call


def regs(dk):
    k = getattr(dk, "kernel", dk)
    try:
        return {str(s): v for s, v in k.get_regs_per_thread().items()}
    except Exception as e:  # noqa: BLE001
        return repr(e)


def set_carveout(dk, pct):
    """CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = pct on every compiled overload."""
    from numba.cuda.cudadrv.driver import binding, driver
    k = getattr(dk, "kernel", dk)
    attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    n = 0
    for comp in k.overloads.values():
        f = comp._codelibrary.get_cufunc()
        driver.cuKernelSetAttribute(attr, int(pct), f.handle, f.device.id)
        n += 1
    return n


def timed(fns_by_stream, streams):
    """Wall ms: event on streams[0], every other stream waits on it, each fn on its stream,
    end events on each stream; the later end."""
    e0 = cuda.event()
    ends = [cuda.event() for _ in fns_by_stream]
    e0.record(streams[0])
    for st in streams[1:]:
        e0.wait(st)
    for fn, st, e in zip(fns_by_stream, streams, ends):
        fn(st)
        e.record(st)
    for e in ends:
        e.synchronize()
    el = getattr(cuda, "event_elapsed_time", lambda a, b: 0.0)     # (the simulator has none)
    t = [el(e0, e) for e in ends]
    return max(t), t


def med(fns, streams):
    timed(fns, streams)
    ws, parts = [], []
    for _ in range(REPS):
        w, p = timed(fns, streams)
        ws.append(w)
        parts.append(p)
    i = int(np.argsort(ws)[len(ws) // 2])
    return float(np.median(ws)), parts[i]


def main():
    rows = []
    X = plan(1)
    Y = plan(2)
    Y128 = plan(3, prep_threads=128)
    ref_o, ref_s = (host(a) for a in X.results())
    s1, s2, s3 = cuda.stream(), cuda.stream(), cuda.stream()
    px, py, py128 = X.plan, Y.plan, Y128.plan
    sc = px.scratch
    rows.append(dict(what="resources", prep_regs=regs(sc.prep_kernel), rec_regs=regs(sc.rec.state),
                     out_regs=regs(sc.rec.out), prep_threads=sc.prep_threads, rec_threads=sc.rec.threads,
                     out_threads=sc.rec.out_threads, n_items=sc.n_items, nslots=sc.nslots))
    print(rows[-1], flush=True)
    rec = lambda p: (lambda st: RC.launch_state(p, st))
    prep = lambda p: (lambda st: S.launch_prep(p, st))
    out = lambda p: (lambda st: RC.launch_out(p, st))
    cases = [
        ("rec X alone", [rec(px)], [s1]),
        ("prep256 Y alone", [prep(py)], [s2]),
        ("prep128 Y alone", [prep(py128)], [s2]),
        ("out Y alone", [out(py)], [s3]),
        ("rec X || prep128 Y", [rec(px), prep(py128)], [s1, s2]),
        ("rec X || prep256 Y", [rec(px), prep(py)], [s1, s2]),
        ("rec X || out Y", [rec(px), out(py)], [s1, s3]),
        ("rec X || prep128 Y || out Y", [rec(px), prep(py128), out(py)], [s1, s2, s3]),
        ("prep128 Y first || rec X", [prep(py128), rec(px)], [s2, s1]),
        ("full call X (serial)", [lambda st: X.launch()], [cuda.default_stream()]),
    ]
    try:
        import torch
        hi = torch.cuda.Stream(priority=-5)      # (clamped to the device's highest)
        lo = torch.cuda.Stream(priority=0)
        lo2 = torch.cuda.Stream(priority=0)
        print("torch priority range", torch.cuda.Stream.priority_range(), hi.priority, flush=True)
        h1 = cuda.external_stream(hi.cuda_stream)
        l2 = cuda.external_stream(lo.cuda_stream)
        l3 = cuda.external_stream(lo2.cuda_stream)
        cases += [
            ("PRIO rec X || prep128 Y", [rec(px), prep(py128)], [h1, l2]),
            ("PRIO prep128 Y first || rec X", [prep(py128), rec(px)], [l2, h1]),
            ("PRIO prep256 Y first || rec X", [prep(py), rec(px)], [l2, h1]),
            ("PRIO rec X || prep128 Y || out Y", [rec(px), prep(py128), out(py)], [h1, l2, l3]),
        ]
    except Exception as e:  # noqa: BLE001
        print("no priority streams:", repr(e), flush=True)
    def run_cases(cs, tag=""):
        for name, fns, sts in cs:
            w, parts = med(fns, sts)
            rows.append(dict(what=tag + name, wall_ms=round(w, 4), ends_ms=[round(x, 4) for x in parts]))
            print(rows[-1], flush=True)
    skip = os.environ.get("SKIP_PLAIN", "")
    if not skip:
        run_cases(cases)
    n = [set_carveout(k, 100) for k in (sc.prep_kernel, sc.rec.state, sc.rec.out)]
    print("carveout 100 set on", n, flush=True)
    run_cases([c for c in cases if "first" not in c[0] or "PRIO" in c[0]], "CARVE100 ")
    # X's own bytes unchanged after all the concurrent runs: relaunch X whole, compare
    X.launch()
    cuda.synchronize()
    o2, s2_ = (host(a) for a in X.results())
    rows.append(dict(what="X bytes stable", out=o2.tobytes() == ref_o.tobytes(), state=s2_.tobytes() == ref_s.tobytes()))
    print(rows[-1], flush=True)
    (OUT / "overlap_probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
