#!/usr/bin/env python3
"""q8 verification attention on the GPU: sixteen layers in one CUDA graph, roofline
fractions, launch overhead, and the PyTorch peers side by side.

Production shape (per rank): B=1, Q=8 new tokens, Hq=6 query heads, Hkv=1 KV head, D=256,
E4M3 K/V cache, page 3296 tokens, 80 logical splits. Sixteen distinct layers (own K/V
caches, block tables, seq_lens, q and workspaces); for each context and attention variant
the split + combine kernels of all sixteen layers are captured in one CUDA graph
(``torch.cuda.graph``; numba kernels launched on the capture stream through
``numba.cuda.external_stream``) and replayed. Eager launches of the same sixteen layers
are timed in the same rounds; the difference is the launch overhead the graph removes.

Ceilings, measured in the same run: FP32 FMA instructions per second (a numba kernel of
independent FMA chains) and device-to-device copy bandwidth (bytes read + written).
Cost model (contract): ~850 FP32 instructions per (row, key), rows = Q*Hq, so the
16-layer floor is 850*rows*T*16 / FMA rate; bytes per layer ~ 2*T*Hkv*D (K and V) + q +
split workspace written and read back + output.

Peers (torch only, each graph-captured when possible, else eager): the PyTorch path a
user would write (gather pages, E4M3 -> FP16 via float8_e4m3fn views, QK^T, FP32 softmax,
PV, times v_scale, causal inside the block) and scaled_dot_product_attention on the
dequantised FP16 (boolean block mask; and lower-right causal bias where available).
Accuracy: relative L2 against the FP64 oracle at one context (--acc-context), layer 0:
each variant's timed plan (FP16 output, relaunched after a sentinel fill of its workspace)
and a fresh plan of the same call with an FP32 output, whose RNE rounding must be the timed
plan's bytes.

Input sets: where the sixteen layers' working set (K/V read, workspace written and read
back) fits within twice the L2, every timed call, eager or graph, goes through several
input sets in turn (``C.input_sets``: the fewest past twice the L2), each layer's set with
its own run of cache pages (a rotated block table), its own workspace, the same q; times
are divided by the number of sets, so they stay per sixteen layers. Every set's output is
checked in the graph-against-eager comparison.

Exit status 1 (after writing the files) when a variant's plan or launch failed, a graph (a
variant's or a peer's) could not be captured or replayed other bytes than the eager call, a
timed trial (any item's) raised, a variant's accuracy is missing or past its bound (FP32
output 1e-5, FP16 output 2**-11 + 1e-5 relative L2), a block table changed, a requested
context was skipped for the budget, a context's peers were not run because the budget was
spent, or a ceiling was not measured; 2 for usage errors. A peer that cannot run at a
context (its set-up raises) is a note.

Usage: ``python3 bench/attention.py [--out DIR] [--contexts 1024,32768] [--variants all]``;
``--smoke`` is a tiny configuration for the CUDA simulator (NUMBA_ENABLE_CUDASIM=1):
host perf_counter timing, no graphs, no torch. Progress goes to stderr; a short table
is printed last; attention.json, attention.md and attention.png are written to --out.
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
from dflash2_numba.contract import active_splits  # noqa: E402
from numba import cuda  # noqa: E402

import oracle  # noqa: E402



def instr_per_row_key(D: int) -> int:
    """Contract A's FP32 instructions per (row, key) at head dim ``D``: the score's D fma
    and D/16 Kahan steps of 4, PV's 2D fma (probability and residual) and D/32 (O's fma once
    a tile), about 10 for the softmax: ``105 D / 32 + 10``, 850 at the production D = 256."""
    return 105 * D // 32 + 10


INSTR_PER_ROW_KEY = instr_per_row_key(256)       # 850: the production figure the notes quote
PRODUCTION = dict(Q=8, Hq=6, Hkv=1, D=256, page=3296, splits=80, layers=16,
                  contexts=[1024, 32768, 65536, 131072, 261888], acc_context=32768)
SMOKE = dict(Q=2, Hq=2, Hkv=1, D=64, page=16, splits=2, layers=2,
             contexts=[40, 160], acc_context=160)   # 160 keys: two active splits
TORCH_DEVICE = "cuda"             # (a CPU dry run of the torch code paths sets "cpu")
SCALE_K = 0.75                   # k_scale and v_scale: not 1, so the scale paths are exercised
SCALE_V = 1.25
MIN_REPS = 3                     # graph replays (or eager rounds) per timed trial, at least

def parse_args(argv=None):
    p = C.bench_parser(__doc__, "tiny configuration (runs on the CUDA simulator; no graphs, no torch)")
    p.add_argument("--contexts", default=None, type=positive_int_list,
                   help="comma-separated context lengths (seq_lens, incl. the Q new tokens)")
    p.add_argument("--variants", default="all", help="comma-separated attention variants, or 'all'")
    p.add_argument("--layers", type=positive_int, default=None,
                   help="distinct layers (default 16; 2 with --smoke)")
    p.add_argument("--trials", type=positive_int, default=None,
                   help="timed trials per item (default 7; 2 with --smoke)")
    p.add_argument("--target-ms", type=positive_float, default=30.0,
                   help="approximate length of one trial (graph replays / eager rounds)")
    p.add_argument("--acc-context", type=positive_int, default=None,
                   help="context of the accuracy check vs the FP64 oracle (default 32768; 160 "
                        "with --smoke); the nearest timed context is checked")
    p.add_argument("--no-peers", action="store_true", help="skip the PyTorch peers")
    p.add_argument("--no-eager", action="store_true", help="skip the eager (no graph) timing")
    p.add_argument("--budget-s", type=positive_float, default=420.0,
                   help="wall-clock budget; optional work is skipped once it is spent")
    p.add_argument("--seed", type=seed, default=0, help="input generator seed (an int >= 0)")
    args = p.parse_args(argv)
    q_len = (SMOKE if args.smoke else PRODUCTION)["Q"]
    if args.contexts and min(args.contexts) < q_len:
        p.error(f"--contexts: every context must be >= Q = {q_len}, got {args.contexts}")
    args.variant_names = C.check_run_args(p, args, d2.attention_variants(), "attention",
                                          "attention.py")
    return args


# --------------------------------------------------------------------------- inputs

class GraphMismatch(RuntimeError):
    """A captured graph's replay wrote other bytes than the eager launches: never timed."""


class Layer:
    """One layer's device inputs: q, K/V caches, block table, workspace, and per-context
    seq_lens; plus host copies when the oracle needs them."""

    def __init__(self, idx, q, kc, vc, bt, ws, n_pages, input_set=0):
        self.idx = idx
        self.input_set = input_set
        self.q, self.kc, self.vc, self.bt, self.ws = q, kc, vc, bt, ws
        self.n_pages = n_pages
        self.seq_lens = {}
        self.bt_host = to_host(bt).copy()     # what the block table must still hold later

    @property
    def label(self):
        return str(self.idx) if self.input_set == 0 else f"{self.idx} (input set {self.input_set})"


def changed_block_tables(layers):
    """Indices of the layers whose device block table no longer holds its original pages
    (the kernels only read it: a change means something wrote where it must not)."""
    return [L.label for L in layers if not np.array_equal(to_host(L.bt), L.bt_host)]


def make_layers(cfg, torch, rng, pages):
    """``cfg["layers"]`` layers, each with K/V caches of ``pages`` pages in a random block
    table order."""
    Q, Hq, Hkv, D, page, S = (cfg[k] for k in ("Q", "Hq", "Hkv", "D", "page", "splits"))
    P = pages
    layers = []
    for i in range(cfg["layers"]):
        perm = rng.permutation(P).astype(np.int32).reshape(1, P)
        q_np = rng.standard_normal((1, Q, Hq, D)).astype(np.float16)
        if torch is not None:
            gen = torch.Generator(device=TORCH_DEVICE)
            gen.manual_seed(int(rng.integers(1 << 62)))

            def cache():
                x = torch.randn((P, page, Hkv, D), generator=gen, device=TORCH_DEVICE,
                                dtype=torch.float16)
                x.mul_(2.0).clamp_(-448.0, 448.0)
                c = x.to(torch.float8_e4m3fn).view(torch.uint8)
                del x
                return c

            kc, vc = cache(), cache()
            q = torch.from_numpy(q_np).to(TORCH_DEVICE)
            bt = torch.from_numpy(perm).to(TORCH_DEVICE)
        else:
            from oracle.selfcheck import encode_e4m3

            kc = cuda.to_device(encode_e4m3(rng.standard_normal((P, page, Hkv, D)) * 2.0))
            vc = cuda.to_device(encode_e4m3(rng.standard_normal((P, page, Hkv, D)) * 2.0))
            q = cuda.to_device(q_np)
            bt = cuda.to_device(perm)
        ws = d2.AttentionWorkspace(batch=1, q_len=Q, heads=Hq, head_dim=D, splits=S)
        layers.append(Layer(i, q, kc, vc, bt, ws, P))
    if torch is not None:
        torch.cuda.synchronize()
    return layers


def working_set_bytes(cfg, T) -> int:
    """The layers' working set at context ``T``: K/V read, the workspace written and read
    back."""
    cm = cost_model(cfg, T)
    return cfg["layers"] * (cm["kv_bytes_per_layer"] + cm["workspace_bytes_per_layer"])


def pages_needed(cfg, contexts, sets) -> int:
    """Cache pages a layer needs: the longest context's, and at each context one disjoint
    run of pages per input set (``sets[T]``)."""
    page = cfg["page"]
    return max(sets[T] * -(-T // page) for T in contexts)


def input_set_layer(base, s, T, cfg, torch):
    """Layer ``base`` as input set ``s`` at context ``T``: the same q and caches, a block
    table rotated so that its first pages (those ``T`` reaches) are the ``s``-th disjoint
    run of the base table's, and a workspace of its own (set 0 is ``base`` itself)."""
    if s == 0:
        return base
    npg = -(-T // cfg["page"])
    perm = np.roll(base.bt_host, -s * npg, axis=1)
    bt = (torch.from_numpy(perm).to(TORCH_DEVICE) if torch is not None
          else cuda.to_device(perm))
    ws = d2.AttentionWorkspace(batch=1, q_len=cfg["Q"], heads=cfg["Hq"], head_dim=cfg["D"],
                               splits=cfg["splits"])
    layer = Layer(base.idx, base.q, base.kc, base.vc, bt, ws, base.n_pages, input_set=s)
    layer.seq_lens = base.seq_lens
    return layer


def device_int32(torch, values):
    a = np.asarray(values, dtype=np.int32)
    return torch.from_numpy(a).to(TORCH_DEVICE) if torch is not None else cuda.to_device(a)


def to_host(x):
    """numpy copy of a torch tensor, numba device array or numpy array."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    return np.asarray(x)


# --------------------------------------------------------------------------- peers

def _qk_scale(scale, k_scale):
    return float(np.float32(np.float32(scale) * np.float32(k_scale)))


class PeerContext:
    """Per-context tensors shared by the torch peers: the visible-key mask and page lists."""

    def __init__(self, torch, cfg, T, device=None):
        Q, Hq, Hkv = cfg["Q"], cfg["Hq"], cfg["Hkv"]
        G = Hq // Hkv
        device = device or TORCH_DEVICE
        j = torch.arange(T, device=device)
        last = T - Q + torch.arange(Q, device=device)            # row t sees j <= T - Q + t
        self.allow = j[None, :] <= last[:, None]                  # [Q, T] bool
        self.block_rows = (~self.allow).repeat_interleave(G, dim=0)   # [Q*G, T], rows t*G+g
        self.n_pages = -(-T // cfg["page"])
        self.T = T


def peer_torch_path(torch, cfg, layer, pc, scale):
    """The PyTorch path a user would write; returns fn() -> out [1, Q, Hq, D] fp16."""
    Q, Hq, Hkv, D = cfg["Q"], cfg["Hq"], cfg["Hkv"], cfg["D"]
    G = Hq // Hkv
    T = pc.T
    qk = _qk_scale(scale, SCALE_K)
    vs = float(np.float32(SCALE_V))
    pages = layer.bt[0, :pc.n_pages].long()
    qh = layer.q[0].reshape(Q, Hkv, G, D).permute(1, 0, 2, 3).reshape(Hkv, Q * G, D)
    block = pc.block_rows

    def fn():
        k = layer.kc.index_select(0, pages).reshape(-1, Hkv, D)[:T]
        v = layer.vc.index_select(0, pages).reshape(-1, Hkv, D)[:T]
        k = k.view(torch.float8_e4m3fn).to(torch.float16)        # exact dequantisation
        v = v.view(torch.float8_e4m3fn).to(torch.float16)
        s = torch.matmul(qh, k.permute(1, 2, 0)).float()           # [Hkv, Q*G, T]
        s.mul_(qk).masked_fill_(block, float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = torch.matmul(p.to(torch.float16), v.permute(1, 0, 2))  # [Hkv, Q*G, D]
        o = o * vs
        return o.reshape(Hkv, Q, G, D).permute(1, 0, 2, 3).reshape(1, Q, Hq, D)

    return fn


def _sdpa_has_gqa(torch):
    try:
        return "enable_gqa" in inspect.signature(
            torch.nn.functional.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):
        return False


def peer_sdpa(torch, cfg, layer, pc, scale, lower_right=False):
    """scaled_dot_product_attention on the dequantised FP16 K/V with the causal block mask
    (boolean [Q, T], or torch's lower-right causal bias)."""
    Q, Hq, Hkv, D = cfg["Q"], cfg["Hq"], cfg["Hkv"], cfg["D"]
    T = pc.T
    F = torch.nn.functional
    qk = _qk_scale(scale, SCALE_K)
    vs = float(np.float32(SCALE_V))
    pages = layer.bt[0, :pc.n_pages].long()
    qs = layer.q.permute(0, 2, 1, 3)                                 # [1, Hq, Q, D]
    gqa = _sdpa_has_gqa(torch) and Hkv != Hq and not lower_right
    if lower_right:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(Q, T)
    else:
        mask = pc.allow

    def fn():
        k = layer.kc.index_select(0, pages).reshape(-1, Hkv, D)[:T]
        v = layer.vc.index_select(0, pages).reshape(-1, Hkv, D)[:T]
        k = k.view(torch.float8_e4m3fn).to(torch.float16).permute(1, 0, 2).unsqueeze(0)
        v = v.view(torch.float8_e4m3fn).to(torch.float16).permute(1, 0, 2).unsqueeze(0)
        if gqa:
            o = F.scaled_dot_product_attention(qs, k, v, attn_mask=mask, scale=qk,
                                               enable_gqa=True)
        else:
            if Hkv == 1 and Hq > 1:          # a broadcast view, no copy
                k = k.expand(1, Hq, T, D)
                v = v.expand(1, Hq, T, D)
            elif Hkv != Hq:
                k = k.repeat_interleave(Hq // Hkv, dim=1)
                v = v.repeat_interleave(Hq // Hkv, dim=1)
            o = F.scaled_dot_product_attention(qs, k, v, attn_mask=mask, scale=qk)
        return (o * vs).permute(0, 2, 1, 3)                          # [1, Q, Hq, D]

    return fn


PEERS = {
    "torch_path": lambda torch, cfg, layer, pc, scale: peer_torch_path(torch, cfg, layer, pc, scale),
    "sdpa_mask": lambda torch, cfg, layer, pc, scale: peer_sdpa(torch, cfg, layer, pc, scale),
    "sdpa_lower_right": lambda torch, cfg, layer, pc, scale: peer_sdpa(torch, cfg, layer, pc,
                                                                       scale, lower_right=True),
}


# --------------------------------------------------------------------------- cost model

def cost_model(cfg, T):
    Q, Hq, Hkv, D, S = (cfg[k] for k in ("Q", "Hq", "Hkv", "D", "splits"))
    rows = Q * Hq
    A = active_splits(T, S)
    kv = 2 * T * Hkv * D
    ws = 2 * A * Q * Hq * (D + 2) * 4          # partial + lse written by split, read by combine
    qo = 2 * Q * Hq * D * 2                    # q read, FP16 out written
    return {"rows": rows, "active_splits": A, "instr_per_layer": instr_per_row_key(D) * rows * T,
            "bytes_per_layer": kv + ws + qo, "kv_bytes_per_layer": kv,
            "workspace_bytes_per_layer": ws}


def roofline(cm, layers, ms_all, ceil):
    fma = (ceil.get("fma") or {}).get("fma_instr_per_s")
    bw = (ceil.get("copy") or {}).get("bytes_per_s")
    out = {}
    if fma:
        out["floor_instr_ms_all"] = cm["instr_per_layer"] * layers / fma * 1e3
    if bw:
        out["floor_bytes_ms_all"] = cm["bytes_per_layer"] * layers / bw * 1e3
    if ms_all:
        if "floor_instr_ms_all" in out:
            out["frac_fp32_floor"] = out["floor_instr_ms_all"] / ms_all
        if "floor_bytes_ms_all" in out:
            out["frac_bandwidth"] = out["floor_bytes_ms_all"] / ms_all
        out["achieved_bytes_per_s"] = cm["bytes_per_layer"] * layers / (ms_all * 1e-3)
    return out


# --------------------------------------------------------------------------- main


#: The bounds a variant's accuracy check must meet (``C.accuracy_failures``).
ACCURACY_BOUNDS = {"rel_l2_fp32": C.FP32_REL_L2_BOUND, "rel_l2_fp16": C.CAST_REL_L2_BOUND}


def unsupported_variants(variants, cfg) -> dict:
    """``{name: reason}`` for the variants whose ``supports`` refuses the benchmark's shape
    (e.g. ``tiled_wide`` at the smoke run's D = 64): they are left out of the timings and
    named in the notes, instead of failing at every context."""
    from dflash2_numba import _registry

    shape = dict(B=1, Q=cfg["Q"], Hq=cfg["Hq"], Hkv=cfg["Hkv"], D=cfg["D"],
                 page_size=cfg["page"], splits=cfg["splits"])
    out = {}
    for v in variants:
        try:
            _registry.get_variant("attention", v).supports(shape)
        except _registry.UnsupportedShape as exc:
            out[v] = str(exc)
    return out

def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = dict(SMOKE if args.smoke else PRODUCTION)
    if args.contexts is not None:
        cfg["contexts"] = args.contexts
    if args.layers is not None:
        cfg["layers"] = args.layers
    contexts = sorted(set(cfg["contexts"]))
    trials = args.trials if args.trials is not None else (2 if C.SIMULATOR else 7)
    acc_ctx_req = args.acc_context if args.acc_context is not None else cfg["acc_context"]
    acc_ctx = min(contexts, key=lambda c: (abs(c - acc_ctx_req), c))
    budget = C.Budget(args.budget_s)
    out_dir = C.out_dir(args.out)
    notes = []
    failures = []        # what makes the exit status 1: a variant that failed or lied
    if acc_ctx != acc_ctx_req:
        notes.append(f"accuracy checked at context {acc_ctx}, the timed context nearest the "
                     f"{acc_ctx_req} asked for")

    variants = args.variant_names
    unsupported = unsupported_variants(variants, cfg)
    for v, why in unsupported.items():
        notes.append(f"{v}: not run, it does not support this shape ({why})")
    variants = [v for v in variants if v not in unsupported]
    if args.variants.strip().lower() != "all" and not variants:
        failures.append(f"none of the variants named ({args.variants}) supports this shape")
        notes.append(failures[-1])

    torch, why_no_torch = C.try_import_torch()
    peers_info = {}
    if torch is None:
        notes.append(f"no torch: {why_no_torch}; no CUDA graphs and no peers")
        peers_info["skipped"] = f"no torch ({why_no_torch})"
    elif args.no_peers:
        peers_info["skipped"] = "--no-peers"
    use_graphs = torch is not None
    clock = C.Clock(torch)
    if C.SIMULATOR:
        notes.append("CUDA simulator: times are host perf_counter around simulated kernels "
                     "(no CUDA events, no graphs); they say nothing about GPU speed")
    meta = C.run_meta(args.smoke, clock.method, torch)
    C.log(f"attention bench on {meta.get('device')}; variants {variants}; contexts {contexts}; "
          f"{cfg['layers']} layers; timing {clock.method}")

    ceilings = C.measure_ceilings(clock)
    failures += C.ceiling_failures(ceilings)
    l2 = meta.get("l2_bytes")
    scale = cfg["D"] ** -0.5
    rng = np.random.default_rng(args.seed)

    sets_at = {T: C.input_sets(working_set_bytes(cfg, T), l2) for T in contexts}
    C.log(f"allocating {cfg['layers']} layers for context {max(contexts)}")
    layers = make_layers(cfg, torch, rng, pages_needed(cfg, contexts, sets_at))
    kv_total = sum(2 * L.n_pages * cfg["page"] * cfg["Hkv"] * cfg["D"] for L in layers)
    C.log(f"  K/V caches: {kv_total / 1e9:.3f} GB in {2 * len(layers)} allocations")

    results = []        # one row per (context, impl, mode)
    overhead = []
    accuracy = {"context": acc_ctx, "layer": 0, "rows": {}}
    graph_checks = []
    skipped = []
    acc_plans = {}      # variant -> its timed plan of layer 0 at the accuracy context

    for T in contexts:
        if budget.exceeded():
            skipped.append(T)
            continue
        cm = cost_model(cfg, T)
        ws_bytes = working_set_bytes(cfg, T)
        n_sets = sets_at[T]
        l2_resident = False
        if n_sets > 1:
            notes.append(f"context {T}: the {cfg['layers']}-layer working set ({ws_bytes / 1e6:.1f} MB) "
                         f"is within 2x the L2 ({C.fmt(l2 and l2 / 1e6, '.0f')} MB): {n_sets} input "
                         f"sets (each layer's own run of cache pages, block table and workspace), "
                         f"every timed call goes through them in turn; times are per "
                         f"{cfg['layers']} layers")
        elif not l2:
            notes.append(f"context {T}: the L2 size is unknown: one input set, reused")
            l2_resident = True
        for L in layers:
            L.seq_lens[T] = device_int32(torch, [T])
        timed = [input_set_layer(L, s, T, cfg, torch) for s in range(n_sets) for L in layers]

        def per_set_ms(fn, reps, n_sets=n_sets):
            """Milliseconds per set of layers: ``reps`` passes over every input set, divided."""
            return clock.time_ms(fn, reps) / n_sets
        C.log(f"context {T}: {cm['active_splits']} active splits, "
              f"{ws_bytes / 1e6:.1f} MB working set")

        items = {}      # name -> trial fn
        labels = {}     # name -> (impl, kind, mode)
        # (graph, owner) pairs: a captured graph holds raw addresses, not references, so
        # whatever its kernels read (plans' buffers, the peers' page lists) must stay alive
        # until the graph is dropped; with --no-eager nothing else holds them
        graphs = []
        # ---- variants: plans, eager warm-up (compiles), graph capture
        for v in variants:
            try:
                plans = [d2.plan_attention(L.q, L.kc, L.vc, L.bt, L.seq_lens[T], scale=scale,
                                           k_scale=SCALE_K, v_scale=SCALE_V,
                                           splits=cfg["splits"], variant=v, workspace=L.ws,
                                           stream=clock.stream)
                         for L in timed]
            except Exception as exc:  # noqa: BLE001
                msg = f"{v} @ {T}: plan failed: {type(exc).__name__}: {exc}"
                notes.append(msg)
                failures.append(msg)
                C.log("  " + msg)
                continue

            if T == acc_ctx:
                acc_plans[v] = plans[0]

            def eager(s=None, plans=plans):
                st = clock.stream if s is None else s
                for p in plans:
                    p.launch(st)

            t0 = time.perf_counter()
            try:
                if not C.SIMULATOR:     # warm-up (compiles); on the simulator the trials suffice
                    eager()
                    clock.sync()
            except Exception as exc:  # noqa: BLE001
                msg = f"{v} @ {T}: launch failed: {type(exc).__name__}: {exc}"
                notes.append(msg)
                failures.append(msg)
                C.log("  " + msg)
                continue
            if not C.SIMULATOR:
                C.log(f"  {v}: first launch of {len(plans)} layers {time.perf_counter() - t0:.2f} s"
                      f" (includes compilation the first time)")
            est = None if C.SIMULATOR else clock.time_ms(eager, 1)
            if not args.no_eager or not use_graphs:
                reps = (1 if C.SIMULATOR
                        else C.choose_reps(est, args.target_ms, min_reps=MIN_REPS))
                items[f"{v}/eager"] = (lambda eager=eager, reps=reps:
                                       per_set_ms(eager, reps))
                labels[f"{v}/eager"] = (v, "variant", "eager", reps)
            if use_graphs:
                try:
                    g = C.capture_graph(torch, lambda s, eager=eager: eager(s))
                    graphs.append((g, plans))   # the plans own what the graph reads
                    ok = check_graph(clock, timed, eager, g)
                    graph_checks.append({"context": T, "variant": v, "graph_output_equals_eager": ok})
                    if not ok:
                        raise GraphMismatch(f"{v} @ {T}: graph replay output differs from eager "
                                            f"output; graph not timed")
                    g.replay()
                    est_g = clock.time_ms(g.replay, 1)
                    reps = C.choose_reps(est_g, args.target_ms, min_reps=MIN_REPS)
                    items[f"{v}/graph"] = (lambda g=g, reps=reps:
                                           per_set_ms(g.replay, reps))
                    labels[f"{v}/graph"] = (v, "variant", "graph", reps)
                except Exception as exc:  # noqa: BLE001
                    msg = (str(exc) if isinstance(exc, GraphMismatch) else
                           f"{v} @ {T}: graph capture failed, eager only: "
                           f"{type(exc).__name__}: {exc}")
                    failures.append(msg)        # a variant's figure is its graph replay's
                    notes.append(msg)
                    C.log("  " + msg)
                    C.log(traceback.format_exc())
                    if f"{v}/eager" not in items:
                        reps = 1 if C.SIMULATOR else C.choose_reps(est, args.target_ms,
                                                                   min_reps=MIN_REPS)
                        items[f"{v}/eager"] = (lambda eager=eager, reps=reps:
                                               per_set_ms(eager, reps))
                        labels[f"{v}/eager"] = (v, "variant", "eager", reps)
                    _recover_torch(torch)

        bad = changed_block_tables(timed)
        if bad:
            notes.append(f"context {T}: block tables of layers {bad} changed after the variants' "
                         "launches and graph captures")
            failures.append(notes[-1])
            C.log("  " + notes[-1])
        # ---- peers
        pc = None
        if (torch is not None and not args.no_peers
                and not C.peers_cut_by_budget(budget, T, notes, failures)):
            try:
                pc = PeerContext(torch, cfg, T)
            except Exception as exc:  # noqa: BLE001
                notes.append(f"peers @ {T}: set-up failed: {type(exc).__name__}: {exc}")
            for name, make in (PEERS.items() if pc is not None else []):
                info = peers_info.setdefault(name, {"ran_at": [], "errors": {}, "modes": {}})
                try:
                    with torch.inference_mode():
                        fns = [make(torch, cfg, L, pc, scale) for L in timed]

                        def run_all(fns=fns):
                            for f in fns:
                                f()
                        run_all()
                        run_all()
                        torch.cuda.synchronize()
                    info["ran_at"].append(T)
                except Exception as exc:  # noqa: BLE001
                    info["errors"][str(T)] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    notes.append(f"peer {name} @ {T} unavailable: {info['errors'][str(T)]}")
                    C.log("  " + notes[-1])
                    _recover_torch(torch)
                    continue

                outs = {}

                def run_inf(fns=fns, outs=outs):
                    with torch.inference_mode():
                        outs["o"] = [f() for f in fns]
                mode = "eager"
                try:
                    g = C.capture_graph(torch, lambda s, run_inf=run_inf: run_inf())
                    graphs.append((g, fns))     # the peers' closures own the page lists it reads
                    if not peer_graph_matches(clock, run_inf, g, outs):
                        raise GraphMismatch("graph replay output differs from the eager "
                                            "output; graph not timed")
                    g.replay()
                    est_g = clock.time_ms(g.replay, 1)
                    reps = C.choose_reps(est_g, args.target_ms, min_reps=MIN_REPS)
                    items[f"{name}/graph"] = (lambda g=g, reps=reps:
                                              per_set_ms(g.replay, reps))
                    labels[f"{name}/graph"] = (name, "peer", "graph", reps)
                    mode = "graph"
                except Exception as exc:  # noqa: BLE001
                    notes.append(f"peer {name} @ {T}: no graph timed, eager: "
                                 f"{type(exc).__name__}: {str(exc)[:200]}")
                    failures.append(notes[-1])  # the peers are compared as graph replays too
                    _recover_torch(torch)
                est = clock.time_ms(run_inf, 1)
                reps = C.choose_reps(est, args.target_ms, min_reps=MIN_REPS)
                if mode == "eager" or not args.no_eager:
                    items[f"{name}/eager"] = (lambda run_inf=run_inf, reps=reps:
                                              per_set_ms(run_inf, reps))
                    labels[f"{name}/eager"] = (name, "peer", "eager", reps)
                info["modes"][str(T)] = mode

        # ---- timing: every item once per round, order rotated each round
        if items:
            C.log(f"  timing {len(items)} items x {trials} trials: {', '.join(items)}")
            times = C.alternating_trials(items, trials, budget, min_trials=min(5, trials),
                                         notes=notes, label=f"ctx {T}", failures=failures)
            for key, ts in times.items():
                impl, kind, mode, reps = labels[key]
                st = C.stats(ts)
                ms_all = st["median_ms"]
                row = {"context": T, "impl": impl, "kind": kind, "mode": mode,
                       "layers": cfg["layers"], "reps_per_trial": reps,
                       "ms_all": ms_all, "ms_layer": (ms_all / cfg["layers"]) if ms_all else None,
                       "min_ms_all": st["min_ms"], "max_ms_all": st["max_ms"],
                       "trials": st["trials"], "trials_ms_all": st["trials_ms"],
                       "input_sets": n_sets, "l2_resident_possible": l2_resident}
                row.update(roofline(cm, cfg["layers"], ms_all, ceilings))
                results.append(row)
                C.log(f"    {key:28s} {C.fmt(ms_all, '.4g')} ms / {cfg['layers']} layers")
            for v in variants:
                e = next((r for r in results if r["context"] == T and r["impl"] == v
                          and r["mode"] == "eager"), None)
                gr = next((r for r in results if r["context"] == T and r["impl"] == v
                           and r["mode"] == "graph"), None)
                if e and gr and e["ms_all"] and gr["ms_all"]:
                    d = e["ms_all"] - gr["ms_all"]
                    overhead.append({"context": T, "variant": v, "eager_ms_all": e["ms_all"],
                                     "graph_ms_all": gr["ms_all"], "overhead_ms_all": d,
                                     "overhead_us_per_launch": d * 1e3 / (2 * cfg["layers"])})

            bad = changed_block_tables(timed)
            if bad:
                notes.append(f"context {T}: block tables of layers {bad} changed during the "
                             "timed trials")
                failures.append(notes[-1])
                C.log("  " + notes[-1])

        # ---- accuracy vs the FP64 oracle (layer 0)
        if T == acc_ctx:
            accuracy_at(cfg, torch, layers[0], T, scale, variants, pc, accuracy, notes,
                        acc_plans, clock)
            acc_plans.clear()

        del graphs, items
        if torch is not None:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        gc.collect()

    failures += C.closing_failures(notes, skipped=skipped, what="contexts",
                                   budget_s=args.budget_s, acc_at=acc_ctx,
                                   acc_where=f"context {acc_ctx}", acc_rows=accuracy["rows"],
                                   bounds=ACCURACY_BOUNDS, judge=bool(variants))

    described = d2.attention_variants()
    record = {
        "meta": meta,
        "config": {**cfg, "contexts": contexts, "variants": variants, "unsupported": unsupported,
                   "trials": trials,
                   "acc_context": acc_ctx, "scale": scale, "k_scale": SCALE_K,
                   "v_scale": SCALE_V, "batch": 1,
                   "instr_per_row_key": instr_per_row_key(cfg["D"]), "target_ms_per_trial": args.target_ms,
                   "budget_s": args.budget_s, "kv_bytes_total": kv_total},
        "ceilings": ceilings,
        "results": results,
        "launch_overhead": overhead,
        "graph_checks": graph_checks,
        "accuracy": accuracy,
        "peers": peers_info,
        "variants_described": {v: described[v] for v in variants},
        "notes": notes,
        "failures": failures,
        "elapsed_s": budget.elapsed(),
    }
    return finish(record, out_dir, cfg)


def _recover_torch(torch):
    """After a failed capture: make sure no capture is left open and the device is usable."""
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        C.log(f"  torch.cuda.synchronize after a failure: {type(exc).__name__}: {exc}")


def check_graph(clock, layers, eager, g):
    """Whether one replay of the variant's graph writes every layer's output as an eager
    launch does (:func:`C.replay_gives`: the outputs, and the split records the combine
    reads, NaN-filled first, so a graph that lost its split launches cannot pass)."""
    eager()
    clock.sync()
    outs = [L.ws.out for L in layers]
    records = [x for L in layers for x in (L.ws.partial, L.ws.lse)]
    return C.replay_gives(g, C.host_bytes(outs), outs, clock.sync, scratch=records)


def peer_graph_matches(clock, run_inf, g, outs):
    """Whether one replay of a peer's graph writes into the graph's own outputs
    (``outs["o"]``, set while it was captured) the bytes of an eager call's."""
    captured = outs["o"]
    run_inf()
    clock.sync()
    return C.replay_gives(g, C.host_bytes(outs["o"]), captured, clock.sync)


def accuracy_at(cfg, torch, L, T, scale, variants, pc, accuracy, notes, acc_plans, clock):
    C.log(f"  accuracy at context {T} (layer 0) vs oracle.attention_reference (FP64)")
    t0 = time.perf_counter()
    try:
        npg = -(-T // cfg["page"])
        bt = to_host(L.bt)
        used = bt[0, :npg]
        # only the pages this request reaches, renumbered (keeps the host copy small)
        kc = to_host(L.kc[used.tolist()] if torch is not None else L.kc.copy_to_host()[used])
        vc = to_host(L.vc[used.tolist()] if torch is not None else L.vc.copy_to_host()[used])
        bt_small = np.arange(npg, dtype=np.int32).reshape(1, npg)
        q = to_host(L.q)
        seq = np.array([T], dtype=np.int32)
        ref = oracle.attention_reference(q, kc, vc, bt_small, seq, scale=scale,
                                         k_scale=SCALE_K, v_scale=SCALE_V)
    except Exception as exc:  # noqa: BLE001
        notes.append(f"oracle at {T} failed: {type(exc).__name__}: {exc}")
        C.log(traceback.format_exc())
        return
    accuracy["oracle_s"] = time.perf_counter() - t0
    C.log(f"    oracle {accuracy['oracle_s']:.1f} s")
    rows = accuracy["rows"]
    for v in variants:
        r = {"kind": "variant"}
        try:
            plan = acc_plans.get(v)
            if plan is None:
                raise RuntimeError(f"no timed plan at context {T}")
            L.ws.fill_sentinel()                  # the timed plan, relaunched, writes it all
            cuda.synchronize()
            plan.launch(clock.stream)
            clock.sync()
            o16 = to_host(L.ws.out)
            res = d2.verify_attention(L.q, L.kc, L.vc, L.bt, L.seq_lens[T], scale=scale,
                                      k_scale=SCALE_K, v_scale=SCALE_V,
                                      splits=cfg["splits"], variant=v, out_dtype="float32")
            o32 = to_host(res.out)
            for tag, o in (("fp16", o16), ("fp32", o32)):
                r[f"rel_l2_{tag}"] = oracle.rel_l2(o, ref)
                r[f"max_abs_{tag}"] = oracle.max_abs(o, ref)
            if o16.tobytes() != o32.astype(np.float16).tobytes():
                raise RuntimeError("the timed plan's FP16 output is not the RNE rounding of "
                                   "the same call's FP32 output")
        except Exception as exc:  # noqa: BLE001
            r["error"] = f"{type(exc).__name__}: {exc}"
        rows[v] = r
        C.log(f"    {v}: rel L2 fp16 {C.fmt(r.get('rel_l2_fp16'))}, fp32 {C.fmt(r.get('rel_l2_fp32'))}")
    if torch is None or pc is None:
        return
    for name, make in PEERS.items():
        r = {"kind": "peer"}
        try:
            with torch.inference_mode():
                o = make(torch, cfg, L, pc, scale)()
            o = o.float().cpu().numpy()
            r["rel_l2_fp16"] = oracle.rel_l2(o, ref)
            r["max_abs_fp16"] = oracle.max_abs(o, ref)
        except Exception as exc:  # noqa: BLE001
            r["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            _recover_torch(torch)
        rows[name] = r
        C.log(f"    {name}: rel L2 {C.fmt(r.get('rel_l2_fp16'))} {r.get('error') or ''}")


def finish(record, out_dir: Path, cfg) -> int:
    results = record["results"]
    ovh = {(o["context"], o["variant"]): o for o in record["launch_overhead"]}
    nl = cfg["layers"]
    headers = ["context", "impl", "mode", f"ms/{nl} layers", "ms/layer", "FP32 floor %",
               "bandwidth %", f"launch ovh ms/{nl}"]
    rows = []
    for r in sorted(results, key=lambda r: (r["context"], r["kind"] != "variant", r["impl"],
                                            r["mode"])):
        o = ovh.get((r["context"], r["impl"])) if r["mode"] == "graph" else None
        rows.append([str(r["context"]), r["impl"], r["mode"], C.fmt(r["ms_all"], ".4g"),
                     C.fmt(r["ms_layer"], ".4g"),
                     C.fmt(100 * r["frac_fp32_floor"] if r.get("frac_fp32_floor") else None, ".3g"),
                     C.fmt(100 * r["frac_bandwidth"] if r.get("frac_bandwidth") else None, ".3g"),
                     C.fmt(o["overhead_ms_all"] if o else None, ".3g")])
    acc = record["accuracy"]
    acc_headers = ["impl", "rel L2 (FP16 out)", "max abs (FP16)", "rel L2 (FP32 out)", "error"]
    acc_rows = [[n, C.fmt(a.get("rel_l2_fp16")), C.fmt(a.get("max_abs_fp16")),
                 C.fmt(a.get("rel_l2_fp32")), (a.get("error") or "")[:60]]
                for n, a in acc.get("rows", {}).items()]
    ceil = record["ceilings"]
    fma = (ceil.get("fma") or {}).get("fma_instr_per_s")
    bw = (ceil.get("copy") or {}).get("bytes_per_s")
    ceil_line = (f"ceilings (measured): FP32 FMA {C.fmt(fma and fma / 1e12, '.3g')} T instr/s, "
                 f"copy {C.fmt(bw and bw / 1e9, '.4g')} GB/s (read + write)")

    meta = record["meta"]
    md = [C.md_header(f"q8 verification attention: {nl}-layer step timing "
                      f"({'CUDA graph and eager' if any(r['mode'] == 'graph' for r in results) else 'eager'})",
                      meta),
          f"Shape: B=1, Q={cfg['Q']}, Hq={cfg['Hq']}, Hkv={cfg['Hkv']}, D={cfg['D']}, E4M3 K/V, "
          f"page {cfg['page']}, {cfg['splits']} splits, {cfg['layers']} distinct layers; "
          f"{record['config']['trials']} trials requested (median; the notes say where the "
          f"budget cut them), variant order rotated per round. "
          f"FP32 floor % = contract floor ({instr_per_row_key(cfg['D'])} FP32 instructions per (row, key) "
          f"at the measured FMA rate) / time; bandwidth % = modelled bytes / time / measured copy "
          f"bandwidth. The peers use tensor cores and materialise FP16 K/V, so their FP32-floor "
          f"percentage can exceed 100.",
          "", ceil_line, "", C.md_table(headers, rows), "",
          f"Launch overhead the graph removes (eager minus graph, {nl} layers = {2 * nl} launches):",
          "", C.md_table(["context", "variant", f"eager ms/{nl}", f"graph ms/{nl}", "overhead ms",
                          "us per launch"],
                         [[str(o["context"]), o["variant"], C.fmt(o["eager_ms_all"], ".4g"),
                           C.fmt(o["graph_ms_all"], ".4g"), C.fmt(o["overhead_ms_all"], ".3g"),
                           C.fmt(o["overhead_us_per_launch"], ".3g")]
                          for o in record["launch_overhead"]]), "",
          f"Accuracy at context {acc.get('context')} (layer 0) vs the FP64 oracle:", "",
          C.md_table(acc_headers, acc_rows), ""]
    if record["notes"]:
        md += ["Notes:", ""] + [f"- {n}" for n in record["notes"]] + [""]

    # plot: time per step (all layers) vs context
    series = []
    impls = []
    for r in results:
        if (r["impl"], r["mode"]) not in impls:
            impls.append((r["impl"], r["mode"]))
    for impl, mode in impls:
        rs = sorted([r for r in results if r["impl"] == impl and r["mode"] == mode],
                    key=lambda r: r["context"])
        style = ("o-" if mode == "graph" else "s--") if not impl.startswith(("torch", "sdpa")) \
            else ("^-" if mode == "graph" else "v:")
        series.append({"label": f"{impl} ({mode})", "x": [r["context"] for r in rs],
                       "y": [r["ms_all"] for r in rs], "style": style})
    ctxs = sorted({r["context"] for r in results})
    per_row_key = instr_per_row_key(cfg["D"])
    for key, label in (("floor_instr_ms_all", f"FP32 floor ({per_row_key} instr/row/key)"),
                       ("floor_bytes_ms_all", "bandwidth floor")):
        ys = []
        for c in ctxs:
            r = next((r for r in results if r["context"] == c and key in r), None)
            ys.append(r[key] if r else None)
        series.append({"label": label, "x": ctxs, "y": ys, "style": "k:" if "FP32" in label else "k-."})
    C.write_outputs(out_dir, "attention", record, md,
                    f"q8 attention, {cfg['layers']} layers, {meta.get('device')}",
                    "context (tokens)", f"ms per {cfg['layers']} layers", series)

    print(ceil_line)
    print(C.text_table(headers, rows))
    if acc_rows:
        print(f"\naccuracy at context {acc.get('context')} (layer 0) vs FP64 oracle:")
        print(C.text_table(acc_headers, acc_rows))
    if record["failures"]:
        print("\nFAILED (exit status 1):\n  " + "\n  ".join(record["failures"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
