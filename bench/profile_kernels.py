#!/usr/bin/env python3
"""Where the time of the fast variants goes, on a GPU: the one-call profiling script behind
the "second round" figures of ``bench/RESULTS.md`` (issues 7 and 8).

Modes
  ``gdn``       at the per-rank GDN shape (B=1, H=4, HV=12, K=V=128, FP16, T from --T):
                for each of ``--variants``, byte equality with the frozen ``chunked``
                (output and final state) and the CUDA-event median of the whole call (and of
                the pre-pass / state pass alone for ``chunked_split`` and the warp-specialised
                variants); ``chunked_smprep``'s pre-pass alone at each ``--smprep-threads``;
                ``chunked_rec_pipe`` with its pre-pass built with each ``--prep-solve``
                form of step 4 (bytes, pre-pass alone interleaved, whole call);
                ``chunked_rec``'s three kernels alone, and the variant under each
                ``--rec-sweep`` entry ``COMPxCOPYxR1xR2`` (its thread and unit-row knobs);
                then ``chunked_split``'s state pass under each ``--sweep`` entry
                ``COLSxTHREADSxSTAGE_KP`` (e.g. ``12x288x1,12x288x0``) and ``chunked_ws``'s
                under each ``--ws-sweep`` entry ``COLSxCOMPUTExCOPYxSTAGE_KP`` (byte-checked).
  ``leave-out`` the state pass of ``chunked_split`` / ``chunked_ws`` (those of
                ``--variants``) with parts switched off (copies, phase-1 fma loops, phase-2
                fma loops; see :mod:`bench._state_leave_one_out`), results discarded: the
                time each part costs.
  ``phase-clock`` the state pass of ``--gdn-variant`` (``chunked_ws`` / ``_wsr`` / ``_wsr:FORM`` /
                ``chunked_rec``: its recurrence) with
                per-warp ``%clock64`` stamps around its
                two phases for chunks ``--clock-chunks LO:HI`` (see
                :mod:`bench._state_phase_clock`): byte equality with the real state pass,
                then each warp role's busy and barrier-waiting cycles per phase and the
                chunk-step period.
  ``gdn-once``  one ``--gdn-variant`` call (to run under ``ncu -k regex:gdn_``).
  ``attn-once`` one ``tiled`` (``--attn-variant``) attention launch at 261888 tokens, production
                shape (to run under ``ncu -k regex:split_kernel``), and its event median.
  ``attn-ab``   ``tiled_compact``'s split kernel under each ``--attn-options`` generator
                option set (same bits, checked): interleaved event medians.
  ``attn-combine`` the combine steps alone on one split workspace (``--attn-ctx``, production
                shape): frozen's and ``combine_batched``'s, outputs compared byte for byte,
                then interleaved event medians, beside the split kernel alone.

Timing: CUDA events around ``--inner`` back-to-back launches after one warm-up launch,
median of ``--reps``. Writes ``profile_<mode>.json`` to --out. Example (one device call):
``python3 bench/profile_kernels.py gdn --out $OUT --sweep 12x288x1,12x288x0``;
``ncu --clock-control none --section SpeedOfLight --section WarpStateStats
--section SourceCounters -k regex:gdn_split python3 bench/profile_kernels.py gdn-once``.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import argparse  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import dflash2_numba as d2  # noqa: E402  (numpy shim before numba)
from dflash2_numba.gdn import chunked_split as S  # noqa: E402
from numba import cuda  # noqa: E402

_T0 = time.time()


def log(*a):
    print(f"[{time.time() - _T0:6.1f}s]", *a, flush=True)


def event_median_ms(fn, reps=5, inner=3):
    """Median over ``reps`` of the CUDA-event time of ``inner`` launches, after a warm-up."""
    start, stop = cuda.event(), cuda.event()
    fn()
    cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(inner):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / inner)
    return float(np.median(times))


def gdn_inputs(T, seed=1):
    rng = np.random.default_rng(seed)
    B, H, HV, K, V = 1, 4, 12, 128, 128
    dev = cuda.to_device
    return dict(q=dev(rng.standard_normal((B, T, H, K)).astype(np.float16)),
                k=dev(rng.standard_normal((B, T, H, K)).astype(np.float16)),
                v=dev(rng.standard_normal((B, T, HV, V)).astype(np.float16)),
                g=dev(rng.uniform(-1, -0.01, (B, T, HV)).astype(np.float32)),
                beta=dev(rng.uniform(0, 1, (B, T, HV)).astype(np.float32)))


def host(x):
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def split_launchers(call):
    """The two kernels of a planned ``chunked_split`` call, launchable one at a time."""
    return prep_launcher(call), state_pass_launcher(call, S._state)


def prep_launcher(call):
    """The pre-pass kernel of a planned ``chunked_split`` or warp-specialised call alone
    (its own kernel, grid, block and dynamic shared memory: ``chunked_split.launch_prep``,
    as the variant's run launches it)."""
    def go():
        S.launch_prep(call.plan, 0)
    return go


def ws_state_launcher(call):
    """The state kernel of a planned warp-specialised call (``chunked_ws``,
    ``chunked_wsr``) alone."""
    return state_pass_launcher(call, call.plan.scratch.ws.kernel.kernel)   # (DynShared's)


def state_pass_launcher(call, kernel, *extra):
    """A no-argument launch of ``kernel``: the planned call's state kernel or an experiment
    copy of it (``bench._state_leave_one_out``, ``bench._state_phase_clock``), with the state
    kernel's own arguments followed by ``extra``, the variant's grid, block and dynamic
    shared memory, compiled under the exact-FP32 flags."""
    from dflash2_numba._compat import exact_fp32
    from dflash2_numba._dynshared import DynShared

    p, s = call.plan, call.plan.scratch
    if hasattr(s, "rec"):                                   # chunked_rec, chunked_rec_pipe
        from dflash2_numba.gdn._split_state_rec import rec_floats

        r = s.rec
        kern = DynShared(kernel, 4 * rec_floats(p.K))
        block, trail = r.threads, (r.snap0, r.ncomp, r.n1, r.nq)
    elif hasattr(s, "ws"):                                  # chunked_ws, chunked_wsr
        kern = DynShared(kernel, s.ws.smem)
        block, trail = int(s.ws.ncomp) + s.ws.ncopy, (s.ws.stage_kp, s.ws.ncomp)
    else:                                                   # chunked_split
        kern = DynShared(kernel, s.smem)
        block, trail = s.state_threads, (s.stage_kp,)
    args = (p.o, p.h0, p.h0_idx, p.hT, p.hT_idx, p.seqs, s.items, s.scr, s.F, np.int32(p.H),
            np.int32(p.K)) + trail + extra

    def go():
        with exact_fp32():
            kern[s.n_items, block, 0](*args)
    return go


def mode_gdn(args, inputs):
    from dflash2_numba.gdn import chunked_ws as W

    def plan(variant):
        return d2.plan_gdn(**inputs, variant=variant, check_values=False)

    rows = []
    ref = plan("chunked")
    ref.launch()
    cuda.synchronize()
    ro, rs = (host(x) for x in ref.results())
    for name in args.variant_names:
        call = plan(name)
        call.launch()
        cuda.synchronize()
        vo, vs = (host(x) for x in call.results())
        rows.append(dict(what=f"bitwise {name} vs chunked T={args.T}",
                         out=vo.tobytes() == ro.tobytes(), state=vs.tobytes() == rs.tobytes()))
        log(rows[-1])
        rows.append(dict(what=f"{name} full", ms=event_median_ms(call.launch, args.reps,
                                                                  args.inner)))
        log(rows[-1])
        if name == "chunked_split":
            prep, state = split_launchers(call)
            s = call.plan.scratch
            rows.append(dict(what="prep only", ms=event_median_ms(prep, args.reps, args.inner)))
            rows.append(dict(what="chunked_split state only", cols=s.cols, thr=s.state_threads,
                             kp=int(s.stage_kp), ms=event_median_ms(state, args.reps, args.inner)))
            log(rows[-2:])
        if hasattr(call.plan.scratch, "ws"):                 # chunked_ws, chunked_wsr
            s = call.plan.scratch
            rows.append(dict(what=f"{name} state only", cols=s.cols, comp=int(s.ws.ncomp),
                             copy=s.ws.ncopy, kp=int(s.ws.stage_kp),
                             ms=event_median_ms(ws_state_launcher(call), args.reps, args.inner)))
            rows.append(dict(what=f"{name} pre-pass only", threads=s.prep_threads,
                             ms=event_median_ms(prep_launcher(call), args.reps, args.inner)))
            log(rows[-2:])
        if hasattr(call.plan.scratch, "rec"):                # chunked_rec
            rows += rec_parts(call, name, args)
    rows += rec_sweep(args, plan, ro, rs)
    from dflash2_numba.gdn import chunked_smprep as SP
    saved_sp = SP.PREP_THREADS
    for thr in [int(e) for e in args.smprep_threads.split(",") if e]:
        SP.PREP_THREADS = thr
        c2 = plan("chunked_smprep")
        c2.launch()
        cuda.synchronize()
        vo, vs = (host(x) for x in c2.results())
        rows.append(dict(what="chunked_smprep pre-pass only", threads=c2.plan.scratch.prep_threads,
                         bitwise=vo.tobytes() == ro.tobytes() and vs.tobytes() == rs.tobytes(),
                         ms=event_median_ms(prep_launcher(c2), args.reps, args.inner)))
        log(rows[-1])
    SP.PREP_THREADS = saved_sp
    rows += prep_solve_ab(args, plan, ro, rs)
    saved = (S.COLS, S.STATE_THREADS, S.STAGE_KP, W.COPY_THREADS)
    for entry in [e for e in args.sweep.split(",") if e]:
        cols, thr, kp = (int(x) for x in entry.split("x"))
        S.COLS, S.STATE_THREADS, S.STAGE_KP = cols, thr, str(kp)
        c2 = plan("chunked_split")
        c2.launch()
        cuda.synchronize()
        _, st2 = split_launchers(c2)
        s2 = c2.plan.scratch
        rows.append(dict(what="chunked_split state only", cols=s2.cols, thr=s2.state_threads,
                         kp=int(s2.stage_kp), smem=s2.smem, items=s2.n_items,
                         ms=event_median_ms(st2, 3, 1)))
        log(rows[-1])
    for entry in [e for e in args.ws_sweep.split(",") if e]:
        cols, comp, copy, kp = (int(x) for x in entry.split("x"))
        S.COLS, S.STATE_THREADS, S.STAGE_KP, W.COPY_THREADS = cols, comp, str(kp), copy
        c2 = plan("chunked_ws")
        c2.launch()
        cuda.synchronize()
        vo, vs = (host(x) for x in c2.results())
        s2 = c2.plan.scratch
        rows.append(dict(what="chunked_ws state only", cols=s2.cols, comp=int(s2.ws.ncomp),
                         copy=s2.ws.ncopy, kp=int(s2.ws.stage_kp), smem=s2.ws.smem,
                         bitwise=vo.tobytes() == ro.tobytes() and vs.tobytes() == rs.tobytes(),
                         ms=event_median_ms(ws_state_launcher(c2), 3, 1)))
        log(rows[-1])
    S.COLS, S.STATE_THREADS, S.STAGE_KP, W.COPY_THREADS = saved
    return rows


def prep_form_kernel(form: str, K: int):
    """``gdn_smem_prep`` built with pre-pass form ``form`` (``SOLVE`` or ``SOLVE+WU``, keys of
    :data:`dflash2_numba.gdn._prep_smem.SOLVES` / ``WUS``), with chunked_smprep's launch
    bounds and shared memory at ``K``: a planned call's ``scratch.prep_kernel``."""
    from dflash2_numba._compat import jit_bounded
    from dflash2_numba._dynshared import DynShared
    from dflash2_numba.gdn import chunked_smprep as SP
    from dflash2_numba.gdn._prep_smem import make_smem_prep_kernel, smem_floats

    return DynShared(jit_bounded(make_smem_prep_kernel(*form.split("+")), SP.PREP_LAUNCH_BOUNDS),
                     4 * smem_floats(K))


def prep_solve_ab(args, plan, ro, rs):
    """``chunked_rec_pipe`` with its pre-pass built with each ``--prep-solve`` form, ``SOLVE``
    or ``SOLVE+WU`` (:data:`dflash2_numba.gdn._prep_smem.SOLVES`, ``WUS``): bytes of the whole call against
    ``chunked``, then the pre-pass alone, the forms interleaved over ``--rounds`` rounds of
    event medians, and the whole call once per form."""
    forms = [f for f in args.prep_solve.split(",") if f]
    if not forms:
        return []
    calls, rows = {}, []
    for form in forms:
        call = plan("chunked_rec_pipe")
        call.plan.scratch.prep_kernel = prep_form_kernel(form, call.plan.K)
        call.launch()
        cuda.synchronize()
        vo, vs = (host(x) for x in call.results())
        calls[form] = call
        rows.append(dict(what=f"prep-solve {form}: bitwise chunked_rec_pipe vs chunked T={args.T}",
                         out=vo.tobytes() == ro.tobytes(), state=vs.tobytes() == rs.tobytes()))
        log(rows[-1])
    ms = {f: [] for f in forms}
    for _ in range(args.rounds):
        for form in forms:
            p = calls[form].plan
            ms[form].append(event_median_ms(lambda: S.launch_prep(p, 0), args.reps, args.inner))
    for form in forms:
        rows.append(dict(what=f"prep-solve {form}: pre-pass only", ms=float(np.median(ms[form])),
                         rounds=ms[form]))
        log(rows[-1])
    for form in forms:
        rows.append(dict(what=f"prep-solve {form}: chunked_rec_pipe full",
                         ms=event_median_ms(calls[form].launch, args.reps, args.inner)))
        log(rows[-1])
    return rows


def rec_parts(call, name, args):
    """``chunked_rec``'s three kernels of a planned call, each timed alone."""
    from dflash2_numba.gdn import chunked_rec as RC

    p, s = call.plan, call.plan.scratch
    rows = []
    for part, fn in (("pre-pass", lambda: S.launch_prep(p, 0)),
                     ("recurrence", lambda: RC.launch_state(p, 0)),
                     ("output", lambda: RC.launch_out(p, 0))):
        rows.append(dict(what=f"{name} {part} only", cols=s.cols, comp=int(s.rec.ncomp),
                         copy=s.rec.threads - int(s.rec.ncomp), n1=int(s.rec.n1),
                         nq=int(s.rec.nq),
                         ms=event_median_ms(fn, args.reps, args.inner)))
        log(rows[-1])
    return rows


def rec_sweep(args, plan, ro, rs):
    """``chunked_rec`` under each ``--rec-sweep`` entry ``COMPxCOPYxR1xR2`` (its
    ``DFLASH2_GDN_REC_THREADS`` / ``_ROWS`` knobs): bytes against ``chunked``, the whole
    call and each kernel alone."""
    rows = []
    saved = {k: os.environ.get(k) for k in ("DFLASH2_GDN_REC_THREADS", "DFLASH2_GDN_REC_ROWS")}
    for entry in [e for e in args.rec_sweep.split(",") if e]:
        comp, copy, r1, r2 = (int(x) for x in entry.split("x"))
        os.environ["DFLASH2_GDN_REC_THREADS"] = f"{comp},{copy}"
        os.environ["DFLASH2_GDN_REC_ROWS"] = f"{r1},{r2}"
        c2 = plan("chunked_rec")
        c2.launch()
        cuda.synchronize()
        vo, vs = (host(x) for x in c2.results())
        rows.append(dict(what=f"chunked_rec {entry}", bitwise=vo.tobytes() == ro.tobytes()
                         and vs.tobytes() == rs.tobytes(),
                         ms=event_median_ms(c2.launch, args.reps, args.inner)))
        log(rows[-1])
        rows += rec_parts(c2, f"chunked_rec {entry}", args)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return rows


LEAVE_OUT_VARIANTS = ("chunked_split", "chunked_ws")     # the state passes with leave-one-out forms
GDN_MODE_VARIANTS = "chunked_split,chunked_ws,chunked_pipe"   # gdn mode's default --variants
LEAVE_OUT = ((0, "full"), (1, "no copies"), (2, "no phase-1 fma"), (4, "no phase-2 fma"),
             (6, "copies only"), (3, "phase-2 fma only"), (5, "phase-1 fma only"),
             (7, "loop + barriers only"))


def mode_leave_out(args, inputs):
    from bench import _state_leave_one_out as X

    rows = []
    for variant in args.variant_names:
        call = d2.plan_gdn(**inputs, variant=variant, check_values=False)
        call.launch()
        cuda.synchronize()
        kern = X.kernel if variant == "chunked_split" else X.ws_kernel
        for skip, name in LEAVE_OUT:
            go = state_pass_launcher(call, kern, np.int32(skip))
            rows.append(dict(variant=variant, skip=skip, what=name,
                             ms=event_median_ms(go, 3, 1)))
            log(rows[-1])
    return rows


def mode_phase_clock(args, inputs):
    from bench import _state_phase_clock as X

    c_lo, c_hi = (int(x) for x in args.clock_chunks.split(":"))
    # (VARIANT:FORM: the variant's plan, an experimental output unit of bench/_out_unit_forms)
    call = d2.plan_gdn(**inputs, variant=args.gdn_variant.split(":")[0], check_values=False)
    call.launch()
    cuda.synchronize()
    ro, rs = (host(x) for x in call.results())
    p, s = call.plan, call.plan.scratch
    stamps = X.stamp_buffer(call, c_hi - c_lo)
    go = state_pass_launcher(call, X.clocked_kernel(args.gdn_variant), stamps,
                            np.int32(c_lo), np.int32(c_hi))
    p.o.copy_to_device(np.full(p.o.shape, -777.0, p.o.dtype))      # sentinels: every
    p.hT.copy_to_device(np.full(p.hT.shape, -777.0, p.hT.dtype))   # byte must be rewritten
    if hasattr(s, "rec"):            # (the call wrote vn over U: the pre-pass writes U anew)
        S.launch_prep(p, 0)
    go()
    if hasattr(s, "rec"):            # (the recurrence writes vn and h; the output is apart)
        from dflash2_numba.gdn import chunked_rec as RC

        RC.launch_out(p, 0)
    cuda.synchronize()
    vo, vs = (host(x) for x in call.results())
    rows = [dict(what=f"clocked {args.gdn_variant} state pass vs itself, T={args.T}",
                 out=vo.tobytes() == ro.tobytes(), state=vs.tobytes() == rs.tobytes())]
    log(rows[-1])
    if hasattr(s, "rec"):                                   # chunked_rec, chunked_rec_pipe
        real = lambda: RC.launch_state(p, 0)                # noqa: E731
        ncomp, ncopy = int(s.rec.ncomp), s.rec.threads - int(s.rec.ncomp)
        form = dict(n1=int(s.rec.n1), nq=int(s.rec.nq))
    else:
        real = ws_state_launcher(call)
        ncomp, ncopy = int(s.ws.ncomp), s.ws.ncopy
        form = dict(stage_kp=int(s.ws.stage_kp))
    rows.append(dict(what="clocked state pass", ms=event_median_ms(go, 3, 1)))
    rows.append(dict(what="real state pass", ms=event_median_ms(real, 3, 1)))
    log(rows[-2:])
    st = stamps.copy_to_host()
    np.save(Path(args.out, "phase_clock_stamps.npy"), st)
    rows.append(dict(what=f"cycles, chunks {c_lo}:{c_hi}", compute_threads=ncomp,
                     copy_threads=ncopy, **form, **X.summarise(st, ncomp)))
    log(rows[-1])
    return rows


def mode_attn_once(args):
    plan, _, ctx = _attn_plan(args.attn_variant)
    plan.launch()
    cuda.synchronize()
    return [dict(what=f"attention {args.attn_variant} one layer at {ctx}",
                 ms=event_median_ms(plan.launch, args.reps, args.inner))]


def _attn_plan(variant, ctx=261888, splits=80):
    """The production-shape plan at ``ctx`` tokens and ``splits`` splits, 261888 and 80 by
    default (uniform random E4M3 bytes, no NaN codes)."""
    D, HQ, PAGE = 256, 6, 3296
    pages = -(-ctx // PAGE) + 1
    rng = np.random.default_rng(3)
    caches = []
    for _ in range(2):
        c = rng.integers(0, 256, (pages, PAGE, 1, D), dtype=np.uint8)
        c[(c & 0x7F) == 0x7F] = 0x10              # no NaN codes: the fast path throughout
        caches.append(cuda.to_device(c))
    q = cuda.to_device(rng.standard_normal((1, 8, HQ, D)).astype(np.float16))
    ws = d2.AttentionWorkspace(batch=1, q_len=8, heads=HQ, head_dim=D, splits=splits)
    plan = d2.plan_attention(q, caches[0], caches[1], np.arange(pages, dtype=np.int32)[None, :],
                             np.array([ctx], np.int32), scale=D ** -0.5,
                             splits=splits, variant=variant, workspace=ws)
    return plan, ws, ctx


def _attn_generator(target):
    """The source generator of ``target``'s split kernel (``tiled_compact`` or ``tiled_wide``)."""
    from dflash2_numba.attention import tiled_compact as TC
    from dflash2_numba.attention import tiled_wide as TW

    return TW._source if target == "tiled_wide" else TC._source


def attn_flag_options(target):
    """``target``'s generator options that are on / off (those whose default is a bool; the
    others are counts), read from the generator's signature."""
    return {name for name, p in inspect.signature(_attn_generator(target)).parameters.items()
            if isinstance(p.default, bool)}


def _ab_split_launch(target, plan, opts):
    """(launcher, threads) of ``target``'s split kernel (``tiled_compact`` or ``tiled_wide``)
    built with generator options ``opts`` for ``plan``."""
    from dflash2_numba._compat import jit_bounded
    from dflash2_numba.attention import tiled_compact as TC
    from dflash2_numba.attention import tiled_wide as TW

    # (``dyn`` is a DynShared: built under exact_fp32 like the registered kernel, whose bytes
    # mode_attn_ab compares)
    if target == "tiled_wide":
        kern = jit_bounded(TW._make_split_kernel(True, **opts), TW.LAUNCH_BOUNDS)
        _, dyn, grid, kargs = TW.split_launch(plan, {True: kern}, options=opts)
        return (lambda: dyn[grid, TW.NT, 0](*kargs)), TW.NT
    kern = cuda.jit(TC._make_split_kernel(256, True, **opts))
    _, dyn, grid, kargs = TC.split_launch(plan, {(256, True): kern}, options=opts)
    return (lambda: dyn[grid, TC.NT, 0](*kargs)), TC.NT


def mode_attn_ab(args):
    """The split kernel of ``--attn-ab-variant`` (``tiled_compact`` or ``tiled_wide``) built
    with each ``--attn-options`` entry (schedule options of its generator, same bits: the
    keyword parameters of ``tiled_compact._source`` / ``tiled_wide._source``; on / off ones as
    0 / 1, ``attn_flag_options``): partial and lse compared byte for byte with
    the registered ``tiled_compact`` kernel's (frozen's bytes) after sentinel fill, then
    CUDA-event medians in interleaved rounds."""
    target = args.attn_ab_variant
    plan, ws, ctx = _attn_plan("tiled_compact", args.attn_ctx, args.attn_splits)
    ws.fill_sentinel()
    plan.launch()
    cuda.synchronize()
    ref = (host(plan.partial).tobytes(), host(plan.lse).tobytes())
    flags = attn_flag_options(target)
    entries = {}
    for entry in [e for e in args.attn_options.split(";") if e]:
        opts = {}
        for kv in [x for x in entry.split(",") if x]:
            k, v = kv.split("=")
            opts[k] = bool(int(v)) if k in flags else int(v)
        go, _ = _ab_split_launch(target, plan, opts)
        ws.fill_sentinel()
        go()
        cuda.synchronize()
        same = (host(plan.partial).tobytes(), host(plan.lse).tobytes()) == ref
        entries[entry] = dict(go=go, same=same, ms=[])
        log(f"options {entry}: partial and lse same bytes as the registered kernel: {same}")
    for _ in range(args.rounds):
        for entry, d in entries.items():
            d["ms"].append(event_median_ms(d["go"], args.reps, args.inner))
    return [dict(what=f"{target} split kernel, options {entry}, one layer at {ctx}",
                 same_bytes=d["same"], ms=float(np.median(d["ms"])), rounds=d["ms"])
            for entry, d in entries.items()]


def mode_attn_combine(args):
    """Frozen's combine and the batched one (the register-tiled variants'), each alone on the
    workspace of one ``tiled_perm`` split launch: their FP16 outputs compared byte for byte
    (after sentinel fill), then CUDA-event medians in interleaved rounds, with the split
    kernel alone for scale."""
    from dflash2_numba._registry import launch
    from dflash2_numba.attention import combine_batched, frozen
    from dflash2_numba.attention import tiled_compact as TC
    from dflash2_numba.attention import tiled_perm as TP

    if args.attn_splits > combine_batched.MAX_SPLITS:     # (it would launch frozen's twice)
        raise ValueError(f"--attn-splits {args.attn_splits}: the batched combine takes at most "
                         f"{combine_batched.MAX_SPLITS}")
    plan, ws, ctx = _attn_plan("tiled_perm", args.attn_ctx, args.attn_splits)
    name, kern, grid, kargs = TP.split_launch(plan)
    stream = cuda.default_stream()
    steps = {"split kernel (tiled_perm)": lambda: launch(name, kern, grid, TC.NT, stream, *kargs),
             "combine (frozen)": lambda: frozen.launch_combine(plan, stream, "ab.frozen.combine"),
             "combine (batched)": lambda: combine_batched.launch_combine(plan, stream, "ab")}
    ws.fill_sentinel()
    steps["split kernel (tiled_perm)"]()
    outs = {}
    for what in ("combine (frozen)", "combine (batched)"):
        plan.out.copy_to_device(np.full(plan.out.shape, -777.0, plan.out.dtype))
        steps[what]()
        cuda.synchronize()
        outs[what] = host(plan.out).tobytes()
    same = outs["combine (frozen)"] == outs["combine (batched)"]
    log(f"batched combine: same FP16 output bytes as frozen's: {same}")
    ms = {what: [] for what in steps}
    for _ in range(args.rounds):
        for what, go in steps.items():
            ms[what].append(event_median_ms(go, args.reps, args.inner))
    return [dict(what=f"{what}, one layer at {ctx}", same_bytes=same if "combine" in what else None,
                 ms=float(np.median(v)), rounds=v) for what, v in ms.items()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["gdn", "leave-out", "phase-clock", "gdn-once", "attn-once",
                                     "attn-ab", "attn-combine"])
    ap.add_argument("--T", type=int, default=65536)
    ap.add_argument("--sweep", default="", help="state-pass configurations COLSxTHREADSxSTAGE_KP")
    ap.add_argument("--ws-sweep", default="",
                    help="chunked_ws state-pass configurations COLSxCOMPUTExCOPYxSTAGE_KP")
    ap.add_argument("--rec-sweep", default="",
                    help="gdn: chunked_rec configurations COMPxCOPYxR1xR2 (e.g. 192x64x1x2)")
    ap.add_argument("--smprep-threads", default="",
                    help="gdn mode: chunked_smprep pre-pass thread counts to time, e.g. 128,256")
    ap.add_argument("--prep-solve", default="",
                    help="gdn mode: pre-pass forms to A/B in chunked_rec_pipe, SOLVE or "
                         "SOLVE+WU (step 4 / step 5 forms), e.g. cols4,cols8,cols8+tile4")
    ap.add_argument("--variants", default=None,
                    help="gdn mode: the variants checked byte for byte and timed (default "
                         "chunked_split,chunked_ws,chunked_pipe); leave-out mode: the state "
                         "passes timed with parts left out (default both, chunked_split,chunked_ws)")
    ap.add_argument("--clock-chunks", default="256:264",
                    help="phase-clock: the chunks LO:HI whose stamps are kept")
    ap.add_argument("--gdn-variant", default="chunked_split",
                    help="gdn-once: the variant called; phase-clock: the state pass clocked "
                         "(chunked_ws, chunked_wsr, chunked_wsr_two_loop, chunked_wsr:FORM, "
                         "chunked_rec, chunked_rec_pipe, chunked_ahead)")
    ap.add_argument("--attn-variant", default="tiled")
    ap.add_argument("--attn-ctx", type=int, default=261888,
                    help="attn-ab, attn-combine: the context (tokens) of the production-shape plan")
    ap.add_argument("--attn-splits", type=int, default=80,
                    help="attn-ab, attn-combine: the plan's splits")
    ap.add_argument("--attn-ab-variant", default="tiled_compact", choices=["tiled_compact", "tiled_wide"],
                    help="attn-ab: whose split kernel the options build")
    ap.add_argument("--attn-options", default="defer_o=1;defer_o=0",
                    help="attn-ab: ';'-separated tiled_compact generator option sets, e.g. "
                         "'defer_o=1;defer_o=1,score_steps=16;pv_keys=16' (on / off options "
                         "0/1; score_steps and pv_keys 4/8/16; score_depth "
                         "and pv_depth 2/4)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="attn-ab, attn-combine, gdn --prep-solve: interleaved timing rounds")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--inner", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    if args.mode in ("gdn", "leave-out"):
        # checked before any work: a misspelt name would otherwise be dropped (leave-out) or
        # fail after the reference call's launch (gdn)
        from dflash2_numba._cli import variant_list

        known = LEAVE_OUT_VARIANTS if args.mode == "leave-out" else list(d2.gdn_variants())
        default = ",".join(LEAVE_OUT_VARIANTS) if args.mode == "leave-out" else GDN_MODE_VARIANTS
        try:
            args.variant_names = variant_list(default if args.variants is None else args.variants, known)
        except ValueError as exc:
            ap.error(f"--variants ({args.mode}): {exc}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.mode == "attn-once":
        rows = mode_attn_once(args)
    elif args.mode == "attn-ab":
        rows = mode_attn_ab(args)
    elif args.mode == "attn-combine":
        rows = mode_attn_combine(args)
    else:
        inputs = gdn_inputs(args.T)
        if args.mode == "gdn-once":
            call = d2.plan_gdn(**inputs, variant=args.gdn_variant, check_values=False)
            call.launch()
            cuda.synchronize()
            rows = [dict(what=f"{args.gdn_variant} launched once")]
        elif args.mode == "gdn":
            rows = mode_gdn(args, inputs)
        elif args.mode == "phase-clock":
            rows = mode_phase_clock(args, inputs)
        else:
            rows = mode_leave_out(args, inputs)
    for r in rows:
        print(r)
    Path(args.out, f"profile_{args.mode}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
