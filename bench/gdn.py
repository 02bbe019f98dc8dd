#!/usr/bin/env python3
"""GDN (gated delta rule) prefill on the GPU: every registered GDN variant at the per-rank
production shape, the FP32 floor, tokens/s, accuracy vs the FP64 oracle, and
flash-linear-attention's chunk_gated_delta_rule side by side.

Shape (per rank): B=1, H=4 q/k heads, HV=12 value heads, K=V=128, FP16 q/k/v, FP32 g (log
decay) and beta, use_qk_l2norm=True, zero initial state, final state returned; lengths
T = 4096, 32768, 65536 (--lengths). Each variant call is ``plan_gdn(...).launch`` (kernels
only: the plan's host checks, transfers and allocations happen once, before timing; the
public ``gdn_prefill`` where ``plan_gdn`` is missing), timed with CUDA events after a
warm-up call, median of --trials trials (at least min(5, --trials) where the budget runs
out), variants (and the peer) in rotated order within each round; CUDA-graph replays of the
same call beside it. Where one call's inputs and outputs fit within twice the L2, several
input sets (more than twice the L2 in all) are made and every timed call, eager or
replayed, goes through all of them in turn: the figure is the time per call.

Exit status 1 (after writing the files) when a variant's call failed, a graph (a variant's
or fla's) could not be captured or replayed other bytes than the eager call, a timed trial
(any item's) raised, a variant's accuracy is missing or past its bound (FP32 output and
state 1e-5, FP16 output 2**-11 + 1e-5 relative L2), a requested length was skipped for the
budget, fla was not run at a length because the budget was spent, or a ceiling was not
measured; 3 when ``gdn_prefill`` is missing; 2 for usage errors. fla failing at a length is
a note (it is not tried at later lengths), and the report's peer line says where.

FP32 floor: about 130 kFLOP per token per value head (chunk C=64, K=V=128, H=4, HV=12;
other shapes scaled by the contract's count, ``fma_per_token_head``); the FLOP rate
is 2 x the FMA instruction rate measured in the same run. Accuracy: relative L2 of the
output (FP16: the timed call's; FP32: the same call with an FP32 output, whose RNE rounding
must be the FP16 bytes) and of the final state against ``oracle.gdn_reference`` (FP64) at
--acc-length (default 4096).

Peer (guarded import): ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` with q, k
[B, T, H, K], v [B, T, HV, V], g, beta [B, T, HV], use_qk_l2norm_in_kernel=True,
output_final_state=True (its signature is inspected; q/k are expanded to HV heads when
the installed version rejects H != HV).

Usage: ``python3 bench/gdn.py [--out DIR] [--lengths 4096,32768] [--variants all]``;
``--smoke`` is a tiny configuration for the CUDA simulator (T=70, K=V=32, H=1, HV=2;
perf_counter timing, no torch). Writes gdn.json, gdn.md, gdn.png to --out.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import gc  # noqa: E402
import inspect  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402

import dflash2_numba as d2  # noqa: E402  (numpy shim before numba)
from bench import _common as C  # noqa: E402
from dflash2_numba._cli import positive_float, positive_int, positive_int_list, seed  # noqa: E402
from dflash2_numba.gdn._scratch import scratch_arrays  # noqa: E402
from numba import cuda  # noqa: E402

import oracle  # noqa: E402

CHUNK = 64                       # contract B's chunk C


def fma_per_token_head(H: int, HV: int, K: int, V: int, C: int = CHUNK) -> float:
    """Contract B's FP32 fma per token per value head (``bench/gdn_fast_notes.md`` section 5's
    count, per chunk of C tokens divided by C): the pre-pass's G and S (C^2 K per q/k head,
    shared by HV / H value heads), W and U (C^2 K / 2 and C^2 V / 2), the triangular solve
    (C^3 / 6) and about 0.04 M element-wise; the state pass's V (3 C K + C^2 / 2)."""
    per_chunk = (C * C * K * H / HV + C * C * (K + V) / 2 + C ** 3 / 6 + 40e3
                 + V * (3 * C * K + C * C / 2))
    return per_chunk / C


FLOP_PER_TOKEN_HEAD = 130e3      # the notes' round figure at the production shape (the count: 131 k)
_PRODUCTION_FMA = fma_per_token_head(H=4, HV=12, K=128, V=128)


def flop_per_token_head(H: int, HV: int, K: int, V: int) -> float:
    """The floor's FLOP per token per value head: 130 k at the production shape (H = 4,
    HV = 12, K = V = 128), other shapes scaled by :func:`fma_per_token_head`'s ratio."""
    return FLOP_PER_TOKEN_HEAD * fma_per_token_head(H, HV, K, V) / _PRODUCTION_FMA
PRODUCTION = dict(B=1, H=4, HV=12, K=128, V=128, lengths=[4096, 32768, 65536], acc_length=4096)
SMOKE = dict(B=1, H=1, HV=2, K=32, V=32, lengths=[70], acc_length=70)
TORCH_DEVICE = "cuda"            # (a CPU dry run of the torch code paths sets "cpu")
G_RANGE = (-1.0, -0.01)          # log decay, uniform (as oracle.random_gdn_case)

def parse_args(argv=None):
    p = C.bench_parser(__doc__, "tiny configuration (runs on the CUDA simulator; no torch)")
    p.add_argument("--lengths", default=None, type=positive_int_list,
                   help="comma-separated sequence lengths T")
    p.add_argument("--variants", default="all", help="comma-separated GDN variants, or 'all'")
    p.add_argument("--trials", type=positive_int, default=None,
                   help="timed trials per item (default 7; 2 with --smoke)")
    p.add_argument("--target-ms", type=positive_float, default=30.0,
                   help="approximate length of one trial")
    p.add_argument("--acc-length", type=positive_int, default=None,
                   help="length of the accuracy check vs the FP64 oracle (default 4096; 70 "
                        "with --smoke); the nearest timed length is checked")
    p.add_argument("--no-peers", action="store_true", help="skip flash-linear-attention")
    p.add_argument("--budget-s", type=positive_float, default=420.0,
                   help="wall-clock budget; optional work is skipped once it is spent")
    p.add_argument("--seed", type=seed, default=0, help="input generator seed (an int >= 0)")
    args = p.parse_args(argv)
    args.variant_names = C.check_run_args(p, args, d2.gdn_variants(), "GDN", "gdn.py")
    return args


def to_host(x):
    if x is None:
        return None
    if hasattr(x, "detach"):
        return x.detach().float().cpu().numpy() if x.dtype.is_floating_point else x.cpu().numpy()
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    return np.asarray(x)


def find_gdn_prefill():
    """``(gdn_prefill, where)`` or ``(None, reason)``."""
    fn = getattr(d2, "gdn_prefill", None)
    if fn is not None:
        return fn, "dflash2_numba.gdn_prefill"
    try:
        from dflash2_numba import gdn as _gdn

        fn = getattr(_gdn, "gdn_prefill", None)
        if fn is not None:
            return fn, "dflash2_numba.gdn.gdn_prefill (not exported at the top level)"
        return None, "dflash2_numba.gdn has no gdn_prefill"
    except Exception as exc:  # noqa: BLE001
        return None, f"dflash2_numba.gdn_prefill missing; importing dflash2_numba.gdn failed: {exc}"


def make_inputs(cfg, T, torch, rng):
    """q, k [B,T,H,K] fp16; v [B,T,HV,V] fp16; g, beta [B,T,HV] fp32, on the device."""
    B, H, HV, K, V = (cfg[k] for k in ("B", "H", "HV", "K", "V"))
    if torch is not None:
        gen = torch.Generator(device=TORCH_DEVICE)
        gen.manual_seed(int(rng.integers(1 << 62)))
        dev = TORCH_DEVICE
        q = torch.randn((B, T, H, K), generator=gen, device=dev, dtype=torch.float16)
        k = torch.randn((B, T, H, K), generator=gen, device=dev, dtype=torch.float16)
        v = torch.randn((B, T, HV, V), generator=gen, device=dev, dtype=torch.float16)
        lo, hi = G_RANGE
        g = torch.rand((B, T, HV), generator=gen, device=dev, dtype=torch.float32) * (hi - lo) + lo
        beta = torch.rand((B, T, HV), generator=gen, device=dev, dtype=torch.float32)
        torch.cuda.synchronize()
        return dict(q=q, k=k, v=v, g=g, beta=beta)
    host = dict(
        q=rng.standard_normal((B, T, H, K)).astype(np.float16),
        k=rng.standard_normal((B, T, H, K)).astype(np.float16),
        v=rng.standard_normal((B, T, HV, V)).astype(np.float16),
        g=rng.uniform(*G_RANGE, (B, T, HV)).astype(np.float32),
        beta=rng.uniform(0.0, 1.0, (B, T, HV)).astype(np.float32),
    )
    return {n: cuda.to_device(a) for n, a in host.items()}


def cost_model(cfg, T):
    B, H, HV, K, V = (cfg[k] for k in ("B", "H", "HV", "K", "V"))
    flop = flop_per_token_head(H, HV, K, V) * B * T * HV
    nbytes = (2 * B * T * H * K * 2 + B * T * HV * V * 2      # q, k, v (fp16)
              + 2 * B * T * HV * 4                             # g, beta
              + B * T * HV * V * 2                             # o (fp16)
              + B * HV * K * V * 4)                            # final state
    return {"flop": flop, "bytes": nbytes, "tokens": B * T}


input_sets = C.input_sets      # (a module name: the tests replace it here)


def in_turn(fns):
    """One function that makes every call of ``fns`` (one per input set), in order."""
    def run():
        for fn in fns:
            fn()
    return run


#: The bounds a variant's accuracy check must meet (``C.accuracy_failures``).
ACCURACY_BOUNDS = {"rel_l2_out_fp32": C.FP32_REL_L2_BOUND, "rel_l2_state": C.FP32_REL_L2_BOUND,
                   "rel_l2_out_fp16": C.CAST_REL_L2_BOUND}


def roofline(cm, ms, ceil):
    fma = (ceil.get("fma") or {}).get("fma_instr_per_s")
    bw = (ceil.get("copy") or {}).get("bytes_per_s")
    out = {}
    if fma:
        out["floor_fp32_ms"] = cm["flop"] / (2 * fma) * 1e3
    if bw:
        out["floor_bytes_ms"] = cm["bytes"] / bw * 1e3
    if ms:
        out["tokens_per_s"] = cm["tokens"] / (ms * 1e-3)
        out["achieved_flop_per_s"] = cm["flop"] / (ms * 1e-3)
        if "floor_fp32_ms" in out:
            out["frac_fp32_floor"] = out["floor_fp32_ms"] / ms
        if "floor_bytes_ms" in out:
            out["frac_bandwidth"] = out["floor_bytes_ms"] / ms
    return out


# --------------------------------------------------------------------------- callers

def variant_caller(prefill, inputs, variant, stream, holder, out_dtype=None):
    """``(fn, kwargs, mode)``: fn() runs one GDN prefill of ``variant`` on ``stream``;
    ``holder["get"]()`` then returns its ``(o, final_state)``.

    With ``dflash2_numba.plan_gdn`` the call is validated and bound once here and fn() is
    ``GdnCall.launch`` (kernels only, no checks, transfers or allocations); without it
    fn() is a whole ``gdn_prefill`` call."""
    planner = getattr(d2, "plan_gdn", None)
    target = planner if planner is not None else prefill
    params = inspect.signature(target).parameters
    has_var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
    kw = dict(use_qk_l2norm=True, variant=variant, output_final_state=True)
    optional = {"check_values": False, "stream": stream}
    if out_dtype is not None:
        optional["out_dtype"] = out_dtype
    for name, val in optional.items():
        if name in params or has_var_kw:
            kw[name] = val
    q, k, v, g, beta = (inputs[n] for n in ("q", "k", "v", "g", "beta"))
    if planner is not None:
        call = planner(q, k, v, g, beta, **kw)

        def fn():
            call.launch(stream)

        holder["get"] = call.results
        holder["launch"] = call.launch          # (launch(stream): a CUDA-graph capture)
        holder["scratch"] = lambda: scratch_arrays(call.plan)   # (NaN-filled before a replay)
        return fn, sorted(kw), "plan_gdn(...).launch (kernels only)"

    def fn():
        res = prefill(q, k, v, g, beta, **kw)
        holder["get"] = lambda: res

    return fn, sorted(kw), "gdn_prefill call (host checks and transfers included)"


def fla_caller(torch, fla_fn, inputs, cfg, holder):
    """fn() for fla's chunk_gated_delta_rule, trying the layouts the installed version takes.
    Returns (fn, description) or raises with every attempt's error."""
    params = inspect.signature(fla_fn).parameters
    has_var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
    q, k, v, g, beta = (inputs[n] for n in ("q", "k", "v", "g", "beta"))
    G = cfg["HV"] // cfg["H"]
    base = {"output_final_state": True, "initial_state": None,
            "scale": float(cfg["K"]) ** -0.5}
    prenorm = False
    if "use_qk_l2norm_in_kernel" in params or has_var_kw:
        base["use_qk_l2norm_in_kernel"] = True
    else:
        prenorm = True
    if "cu_seqlens" in params:
        base["cu_seqlens"] = None
    attempts = []
    for expand in ((False, True) if G > 1 else (False,)):
        for beta_dt in ("fp32", "input"):
            attempts.append((expand, beta_dt))
    errors = []

    def l2n(x):
        xf = x.float()
        return (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)

    for expand, beta_dt in attempts:
        qq, kk = q, k
        if prenorm:
            qq, kk = l2n(qq), l2n(kk)
        if expand:
            qq = qq.repeat_interleave(G, dim=2)
            kk = kk.repeat_interleave(G, dim=2)
        bb = beta if beta_dt == "fp32" else beta.to(q.dtype)

        def fn(qq=qq, kk=kk, bb=bb):
            with torch.inference_mode():
                holder["res"] = fla_fn(qq, kk, v, g, bb, **base)

        try:
            fn()
            torch.cuda.synchronize()
            o, st = holder["res"][0], holder["res"][1]
            if tuple(o.shape) != tuple(v.shape):
                raise ValueError(f"output shape {tuple(o.shape)} != v shape {tuple(v.shape)}")
            want = (cfg["B"], cfg["HV"], cfg["K"], cfg["V"])
            if st is None or tuple(st.shape) != want:
                raise ValueError(f"final state shape {None if st is None else tuple(st.shape)}"
                                 f" != {want}")
            desc = (f"q/k {'expanded to HV heads' if expand else 'H heads (GVA in fla)'}, "
                    f"beta {beta_dt}, {'l2norm in torch before the call' if prenorm else 'use_qk_l2norm_in_kernel=True'}")
            return fn, desc
        except Exception as exc:  # noqa: BLE001
            errors.append(f"expand={expand} beta={beta_dt}: {type(exc).__name__}: {str(exc)[:200]}")
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
    raise RuntimeError("; ".join(errors))


def graph_item(items, labels, notes, torch, clock, key, label, launch, get, target_ms, calls=1,
               scratch=None):
    """Add ``key``: CUDA-graph replays of ``calls`` calls (one per input set;
    ``launch(numba_stream)`` makes them all, captured into one torch graph), timed like the
    eager item (the time per call, ``target_ms`` a trial), after one replay's outputs and
    final states (``get()``: a list of arrays, the graph's own after the capture) give the
    eager calls' bytes (:func:`C.replay_gives`, with ``scratch()``'s arrays, the plans'
    scratch, NaN-filled as well, so a replay that skips a kernel cannot pass on what the
    eager calls left there). Returns True when added, False when the
    replay differs or the capture failed (a note; no graph timed), None when no graph is
    tried (no torch, the simulator)."""
    if torch is None or launch is None or C.SIMULATOR:
        return None
    try:
        launch(clock.stream)
        clock.sync()
        want = C.host_bytes(get())
        g = C.capture_graph(torch, launch)
        same = C.replay_gives(g, want, get(), clock.sync,
                              scratch=scratch() if scratch is not None else ())
    except Exception as exc:  # noqa: BLE001
        notes.append(f"{key}: capture failed: {type(exc).__name__}: {str(exc)[:300]}")
        return False
    if not same:
        notes.append(f"{key}: graph replay differs from the eager call; not timed")
        return False
    reps = C.choose_reps(clock.time_ms(g.replay, 1), target_ms)
    items[key] = (lambda g=g, reps=reps: clock.time_ms(g.replay, reps) / calls)
    labels[key] = (label[0] + "/graph", label[1], reps)
    return True


# --------------------------------------------------------------------------- main

def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = dict(SMOKE if args.smoke else PRODUCTION)
    if args.lengths is not None:
        cfg["lengths"] = args.lengths
    lengths = sorted(set(cfg["lengths"]))
    trials = args.trials if args.trials is not None else (2 if C.SIMULATOR else 7)
    acc_req = args.acc_length if args.acc_length is not None else cfg["acc_length"]
    acc_T = min(lengths, key=lambda t: (abs(t - acc_req), t))
    budget = C.Budget(args.budget_s)
    out_dir = C.out_dir(args.out)
    notes = []
    failures = []        # what makes the exit status 1
    exit_code = 0
    if acc_T != acc_req:
        notes.append(f"accuracy checked at T = {acc_T}, the timed length nearest the "
                     f"{acc_req} asked for")

    prefill, where = find_gdn_prefill()
    all_variants = d2.gdn_variants()
    if prefill is None:
        notes.append(f"gdn_prefill not available: {where}; only the peer and ceilings ran")
        C.log(f"WARNING: {notes[-1]}")
        variants = []
        exit_code = 3
    else:
        variants = args.variant_names
    if prefill is not None and where != "dflash2_numba.gdn_prefill":
        notes.append(f"gdn_prefill taken from {where}")
    if prefill is not None and not variants:
        notes.append("no GDN variant registered")

    torch, why_no_torch = C.try_import_torch()
    if torch is None:
        notes.append(f"no torch: {why_no_torch}; inputs are numba device arrays, no peer")
    clock = C.Clock(torch)
    if C.SIMULATOR:
        notes.append("CUDA simulator: times are host perf_counter around simulated kernels "
                     "(no CUDA events); they say nothing about GPU speed")
    meta = C.run_meta(args.smoke, clock.method, torch)
    C.log(f"gdn bench on {meta.get('device')}; variants {variants}; lengths {lengths}; "
          f"shape B={cfg['B']} H={cfg['H']} HV={cfg['HV']} K={cfg['K']} V={cfg['V']}; "
          f"timing {clock.method}")
    ceilings = C.measure_ceilings(clock)
    failures += C.ceiling_failures(ceilings)

    fla_fn, fla_err = None, None
    peer_info = {"name": "fla chunk_gated_delta_rule", "available": False}
    if torch is None or args.no_peers:
        fla_err = "skipped (no torch)" if torch is None else "skipped (--no-peers)"
    else:
        mod, fla_err = C.import_optional("fla.ops.gated_delta_rule")
        if mod is not None:
            fla_fn = getattr(mod, "chunk_gated_delta_rule", None)
            if fla_fn is None:
                fla_err = "fla.ops.gated_delta_rule has no chunk_gated_delta_rule"
            else:
                try:
                    peer_info["signature"] = str(inspect.signature(fla_fn))
                except (TypeError, ValueError):
                    pass
                fla_mod = sys.modules.get("fla")
                peer_info["fla_file"] = getattr(fla_mod, "__file__", None)
                peer_info["fla_version"] = getattr(fla_mod, "__version__", None)
    if fla_err:
        peer_info["error"] = fla_err
        C.log(f"peer fla: {fla_err}")

    rng = np.random.default_rng(args.seed)
    results = []
    accuracy = {"length": acc_T, "rows": {}}
    skipped = []
    call_kwargs = {}

    for T in lengths:
        if budget.exceeded():
            skipped.append(T)
            continue
        cm = cost_model(cfg, T)
        l2 = meta.get("l2_bytes")
        n_sets = input_sets(cm["bytes"], l2)
        if not l2 and not C.SIMULATOR:
            notes.append(f"T = {T}: the L2 size is unknown: one input set, reused")
        if n_sets > 1:
            notes.append(f"T = {T}: one call's inputs and outputs ({cm['bytes'] / 1e6:.1f} MB) "
                         f"fit within twice the L2 ({C.fmt(l2 and l2 / 1e6, '.0f')} MB): "
                         f"{n_sets} input sets, every timed call goes through them in turn")
            C.log("  " + notes[-1])
        C.log(f"T = {T}: generating {n_sets} input set(s)")
        sets = [make_inputs(cfg, T, torch, rng) for _ in range(n_sets)]
        inputs = sets[0]                # the accuracy check's
        items, labels, holders = {}, {}, {}
        for v in variants:
            hs = [{} for _ in sets]
            t0 = time.perf_counter()
            try:
                fns = []
                for inp, h in zip(sets, hs):
                    fn, kws, mode = variant_caller(prefill, inp, v, clock.stream, h)
                    fns.append(fn)
                call_kwargs[v] = {"kwargs": kws, "timed": mode}
                if not C.SIMULATOR:     # warm-up (compiles); on the simulator the trials suffice
                    for fn in fns:
                        fn()
                    clock.sync()
            except Exception as exc:  # noqa: BLE001
                msg = f"{v} @ T={T}: call failed: {type(exc).__name__}: {exc}"
                notes.append(msg)
                failures.append(msg)
                C.log("  " + msg)
                C.log(traceback.format_exc())
                continue
            if not C.SIMULATOR:
                C.log(f"  {v}: first call {time.perf_counter() - t0:.2f} s "
                      f"(includes compilation the first time)")
            run_sets = in_turn(fns)
            reps = 1 if C.SIMULATOR else C.choose_reps(clock.time_ms(run_sets, 1), args.target_ms)
            items[v] = (lambda run_sets=run_sets, reps=reps: clock.time_ms(run_sets, reps) / n_sets)
            labels[v] = (v, "variant", reps)
            holders[v] = hs[0]
            launches = [h.get("launch") for h in hs]
            if all(launches):
                if graph_item(items, labels, notes, torch, clock, f"{v}/graph",
                              (v, "variant", reps),
                              lambda s, launches=launches: [f(s) for f in launches],
                              lambda hs=hs: [x for h in hs for x in h["get"]()[:2]],
                              args.target_ms, calls=n_sets,
                              scratch=lambda hs=hs: [x for h in hs
                                                     for x in h["scratch"]()]) is False:
                    failures.append(notes[-1])    # a variant with no graph, or one that lies
        if fla_fn is not None and not C.peers_cut_by_budget(budget, f"T {T}", notes, failures):
            hs = [{} for _ in sets]
            t0 = time.perf_counter()
            try:
                fns = []
                for inp, h in zip(sets, hs):
                    fn, desc = fla_caller(torch, fla_fn, inp, cfg, h)   # (called once there)
                    fns.append(fn)
                torch.cuda.synchronize()
                peer_info["available"] = True
                peer_info["layout"] = desc
                C.log(f"  fla: first calls {time.perf_counter() - t0:.1f} s (Triton compile/"
                      f"autotune); {desc}")
                run_sets = in_turn(fns)
                reps = C.choose_reps(clock.time_ms(run_sets, 1), args.target_ms)
                items["fla"] = (lambda run_sets=run_sets, reps=reps:
                                clock.time_ms(run_sets, reps) / n_sets)
                labels["fla"] = ("fla_chunk_gated_delta_rule", "peer", reps)
                holders["fla"] = hs[0]
                if graph_item(items, labels, notes, torch, clock, "fla/graph",
                              ("fla_chunk_gated_delta_rule", "peer", reps),
                              lambda _stream, run_sets=run_sets: run_sets(),
                              lambda hs=hs: [x for h in hs for x in h["res"][:2]],
                              args.target_ms, calls=n_sets) is False:
                    failures.append(notes[-1])    # the peer's figure is a graph replay's too
            except Exception as exc:  # noqa: BLE001
                peer_info["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
                peer_info["failed_at"] = T
                notes.append(f"fla @ T {T} failed, not run at this or any later length: "
                             f"{peer_info['error'][:300]}")
                C.log("  " + notes[-1])
                fla_fn = None

        if items:
            C.log(f"  timing {len(items)} items x {trials} trials: {', '.join(items)}")
            times = C.alternating_trials(items, trials, budget, min_trials=min(5, trials),
                                         notes=notes, label=f"T {T}", failures=failures)
            for key, ts in times.items():
                impl, kind, reps = labels[key]
                st = C.stats(ts)
                ms = st["median_ms"]
                timed = (call_kwargs.get(key.split("/")[0], {}).get("timed")
                         if kind == "variant" else "chunk_gated_delta_rule call")
                if key.endswith("/graph"):
                    timed = f"CUDA-graph replay of: {timed}"
                row = {"length": T, "impl": impl, "kind": kind, "timed": timed,
                       "reps_per_trial": reps, "input_sets": n_sets,
                       "ms": ms, "min_ms": st["min_ms"], "max_ms": st["max_ms"],
                       "trials": st["trials"], "trials_ms": st["trials_ms"]}
                row.update(roofline(cm, ms, ceilings))
                results.append(row)
                C.log(f"    {key:12s} {C.fmt(ms, '.4g')} ms  "
                      f"{C.fmt(row.get('tokens_per_s'), '.3g')} tok/s")

        if T == acc_T:
            accuracy_at(cfg, T, inputs, prefill, variants, holders, torch, clock, accuracy,
                        notes)
        del inputs, sets, items, holders
        gc.collect()
        if torch is not None:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    failures += C.closing_failures(notes, skipped=skipped, what="lengths",
                                   budget_s=args.budget_s, acc_at=acc_T,
                                   acc_where=f"T = {acc_T}", acc_rows=accuracy["rows"],
                                   bounds=ACCURACY_BOUNDS, judge=bool(variants))
    record = {
        "meta": meta,
        "config": {**cfg, "lengths": lengths, "variants": variants, "trials": trials,
                   "acc_length": acc_T, "dtype": "float16", "use_qk_l2norm": True,
                   "initial_state": None, "g_range": list(G_RANGE),
                   "flop_per_token_head": flop_per_token_head(cfg["H"], cfg["HV"], cfg["K"],
                                                              cfg["V"]),
                   "target_ms_per_trial": args.target_ms, "budget_s": args.budget_s,
                   "gdn_prefill": where, "call_kwargs": call_kwargs},
        "ceilings": ceilings,
        "results": results,
        "accuracy": accuracy,
        "peers": {"fla": peer_info},
        "variants_described": {v: all_variants.get(v) for v in variants},
        "notes": notes,
        "failures": failures,
        "elapsed_s": budget.elapsed(),
    }
    finish(record, out_dir, cfg)
    if exit_code:
        return exit_code
    if failures:
        print("\nFAILED (exit status 1):\n  " + "\n  ".join(failures))
        return 1
    return 0


def accuracy_at(cfg, T, inputs, prefill, variants, holders, torch, clock, accuracy, notes):
    C.log(f"  accuracy at T = {T} vs oracle.gdn_reference (FP64)")
    t0 = time.perf_counter()
    try:
        host = {n: to_host(a) for n, a in inputs.items()}
        host["q"] = host["q"].astype(np.float16)
        host["k"] = host["k"].astype(np.float16)
        host["v"] = host["v"].astype(np.float16)
        o_ref, h_ref = oracle.gdn_reference(host["q"], host["k"], host["v"], host["g"],
                                            host["beta"], use_qk_l2norm=True)
    except Exception as exc:  # noqa: BLE001
        notes.append(f"oracle at T={T} failed: {type(exc).__name__}: {exc}")
        C.log(traceback.format_exc())
        return
    accuracy["oracle_s"] = time.perf_counter() - t0
    C.log(f"    oracle {accuracy['oracle_s']:.1f} s")
    rows = accuracy["rows"]

    def compare(res, tag, r):
        o, st = res[0], res[1]
        oh = to_host(o)
        r[f"rel_l2_out_{tag}"] = oracle.rel_l2(oh, o_ref)
        r[f"max_abs_out_{tag}"] = oracle.max_abs(oh, o_ref)
        if st is not None and "rel_l2_state" not in r:
            sh = to_host(st).reshape(h_ref.shape)
            r["rel_l2_state"] = oracle.rel_l2(sh, h_ref)
            r["max_abs_state"] = oracle.max_abs(sh, h_ref)

    for v in variants:
        r = {"kind": "variant"}
        try:
            get = holders.get(v, {}).get("get")
            if get is None:        # not timed here: one call now
                h = {}
                fn, _, _ = variant_caller(prefill, inputs, v, clock.stream, h)
                fn()
                get = h["get"]
            clock.sync()
            compare(get(), "fp16", r)
            o16 = to_host(get()[0]).astype(np.float16)    # (to_host widens: exactly)
            h = {}
            fn, _, _ = variant_caller(prefill, inputs, v, clock.stream, h, out_dtype="float32")
            fn()
            clock.sync()
            compare(h["get"](), "fp32", r)
            if o16.tobytes() != to_host(h["get"]()[0]).astype(np.float16).tobytes():
                raise RuntimeError("the timed call's FP16 output is not the RNE rounding of "
                                   "the same call's FP32 output")
        except Exception as exc:  # noqa: BLE001
            r["error"] = f"{type(exc).__name__}: {exc}"
        rows[v] = r
        C.log(f"    {v}: rel L2 out fp16 {C.fmt(r.get('rel_l2_out_fp16'))}, "
              f"fp32 {C.fmt(r.get('rel_l2_out_fp32'))}, state {C.fmt(r.get('rel_l2_state'))}")
    res = holders.get("fla", {}).get("res")
    if res is not None:
        r = {"kind": "peer"}
        try:
            torch.cuda.synchronize()
            compare(res, "fp16", r)
        except Exception as exc:  # noqa: BLE001
            r["error"] = f"{type(exc).__name__}: {exc}"
        rows["fla_chunk_gated_delta_rule"] = r
        C.log(f"    fla: rel L2 out {C.fmt(r.get('rel_l2_out_fp16'))}, "
              f"state {C.fmt(r.get('rel_l2_state'))}")


def peer_line(peer: dict) -> str:
    """The report's word on fla: available (its layout), with where it failed if it did at
    a later length, or why it was not run."""
    if not peer.get("available"):
        return f"not run: {peer.get('error')}"
    line = f"available ({peer.get('layout')})"
    if peer.get("error"):
        line += f"; failed at T = {peer.get('failed_at')}, not run after: {peer['error']}"
    return line


def finish(record, out_dir: Path, cfg) -> None:
    results = record["results"]
    headers = ["T", "impl", "ms", "tokens/s", "FP32 floor ms", "FP32 floor %", "bandwidth %"]
    rows = [[str(r["length"]), r["impl"], C.fmt(r["ms"], ".4g"), C.fmt(r.get("tokens_per_s"), ".3g"),
             C.fmt(r.get("floor_fp32_ms"), ".3g"),
             C.fmt(100 * r["frac_fp32_floor"] if r.get("frac_fp32_floor") else None, ".3g"),
             C.fmt(100 * r["frac_bandwidth"] if r.get("frac_bandwidth") else None, ".3g")]
            for r in sorted(results, key=lambda r: (r["length"], r["kind"] != "variant", r["impl"]))]
    acc = record["accuracy"]
    acc_headers = ["impl", "rel L2 out (FP16)", "rel L2 out (FP32)", "rel L2 state",
                   "max abs out", "error"]
    acc_rows = [[n, C.fmt(a.get("rel_l2_out_fp16")), C.fmt(a.get("rel_l2_out_fp32")),
                 C.fmt(a.get("rel_l2_state")), C.fmt(a.get("max_abs_out_fp16")),
                 (a.get("error") or "")[:60]] for n, a in acc.get("rows", {}).items()]
    ceil = record["ceilings"]
    fma = (ceil.get("fma") or {}).get("fma_instr_per_s")
    bw = (ceil.get("copy") or {}).get("bytes_per_s")
    ceil_line = (f"ceilings (measured): FP32 {C.fmt(fma and 2 * fma / 1e12, '.3g')} TFLOP/s "
                 f"(2 x FMA rate), copy {C.fmt(bw and bw / 1e9, '.4g')} GB/s (read + write)")
    meta = record["meta"]
    peer = record["peers"]["fla"]
    md = [C.md_header("GDN prefill: per-rank shape", meta),
          f"Shape: B={cfg['B']}, H={cfg['H']}, HV={cfg['HV']}, K={cfg['K']}, V={cfg['V']}, FP16 "
          f"q/k/v, FP32 g/beta, use_qk_l2norm; {record['config']['trials']} trials requested "
          f"(median; the notes say where the budget cut them), "
          f"order rotated per round. Floor: {record['config']['flop_per_token_head'] / 1e3:.0f} kFLOP per token per "
          f"value head.",
          "", ceil_line, "",
          "Timed: " + "; ".join(sorted({f"{r['impl']}: {r.get('timed')}" for r in results})),
          "",
          "Peer: fla chunk_gated_delta_rule: " + peer_line(peer),
          "", C.md_table(headers, rows), "",
          f"Accuracy at T = {acc.get('length')} vs the FP64 oracle:", "",
          C.md_table(acc_headers, acc_rows), ""]
    if record["notes"]:
        md += ["Notes:", ""] + [f"- {n}" for n in record["notes"]] + [""]

    series = []
    for impl in dict.fromkeys(r["impl"] for r in results):
        rs = sorted([r for r in results if r["impl"] == impl], key=lambda r: r["length"])
        series.append({"label": impl, "x": [r["length"] for r in rs], "y": [r["ms"] for r in rs],
                       "style": "^-" if impl.startswith("fla") else "o-"})
    Ts = sorted({r["length"] for r in results})
    ys = [next((r.get("floor_fp32_ms") for r in results if r["length"] == t), None) for t in Ts]
    kflop = record["config"]["flop_per_token_head"] / 1e3
    series.append({"label": f"FP32 floor ({kflop:.0f} kFLOP/token/head)", "x": Ts, "y": ys,
                   "style": "k:"})
    C.write_outputs(out_dir, "gdn", record, md,
                    f"GDN prefill B={cfg['B']} H={cfg['H']} HV={cfg['HV']} K=V={cfg['K']}, "
                    f"{meta.get('device')}", "sequence length T", "ms per call", series)
    print(ceil_line)
    print(C.text_table(headers, rows))
    if acc_rows:
        print(f"\naccuracy at T = {acc.get('length')} vs FP64 oracle:")
        print(C.text_table(acc_headers, acc_rows))


if __name__ == "__main__":
    sys.exit(main())
