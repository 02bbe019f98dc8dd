"""Boundary cases for compute-sanitizer: every kernel of every variant, once each.

Run under the sanitizer by ``bench/sanitize.sh`` (memcheck, racecheck, synccheck; initcheck on request). The
cases are small (sanitizers slow kernels down by orders of magnitude) except the 262144
boundary, which runs only with ``--large``.

    compute-sanitizer --tool memcheck python3 bench/sanitize_cases.py [--large]
"""
from __future__ import annotations

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import dflash2_numba as d2  # noqa: E402
import oracle  # noqa: E402
from dflash2_numba._compat import cuda  # noqa: E402


def attention_cases(large: bool):
    """(name, case kwargs, splits): page crossings, T = 1 / 129, q2..q8, empty rows."""
    base = dict(Hq=6, Hkv=1, D=256)
    cases = []
    for i, (Q, T, page) in enumerate([(8, 1, 848), (8, 129, 848), (2, 849, 848), (3, 1697, 848),
                                      (4, 3297, 3296), (5, 700, 64), (6, 64, 64), (7, 65, 64)]):
        cases.append((f"q{Q} T={T} page={page}", dict(B=1, Q=Q, page_size=page, seq_lens=[T], **base), 80))
    cases.append(("q8 batch 1/200/0-rows", dict(B=3, Q=8, page_size=128, seq_lens=[1, 200, 30],
                                                row_lengths=np.array([[1] * 8, [200 - 7 + t for t in range(8)],
                                                                      [0, 0, 5, 0, 30, 0, 0, 0]], np.int32),
                                                Hq=4, Hkv=2, D=128), 80))
    if large:
        cases.append(("q8 T=262144 page=3296", dict(B=1, Q=8, page_size=3296, seq_lens=[262144], **base), 80))
    return cases


def gdn_cases():
    rng = np.random.default_rng(0)
    out = []
    for name, lens in [("T=1", [1]), ("T=65", [65]), ("varlen 1/63/66/130", [1, 63, 66, 130])]:
        T = sum(lens)
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        H, HV, K, V = 2, 4, 128, 128
        c = dict(q=rng.standard_normal((1, T, H, K)).astype(np.float16),
                 k=rng.standard_normal((1, T, H, K)).astype(np.float16),
                 v=rng.standard_normal((1, T, HV, V)).astype(np.float16),
                 g=(-np.abs(rng.standard_normal((1, T, HV))) * 0.1).astype(np.float32),
                 beta=rng.uniform(0, 1, (1, T, HV)).astype(np.float32),
                 cu_seqlens=cu if len(lens) > 1 else None,
                 initial_state=(rng.standard_normal((len(lens), HV, K, V)) * 0.1).astype(np.float32))
        out.append((name, c))
    return out


def parse_args(argv=None) -> argparse.Namespace:
    """The options, checked before any launch: ``--variants`` is ``all`` or names registered
    in a selected family (``dflash2_numba._cli.variant_list``, as the timing scripts check
    theirs), else a usage error: a misspelt name would run nothing, and the sanitizer would
    report a clean run. ``args.wanted`` holds the names."""
    from dflash2_numba._cli import variant_list

    ap = argparse.ArgumentParser()
    ap.add_argument("--large", action="store_true", help="also the 262144-token boundary")
    ap.add_argument("--family", choices=["attention", "gdn", "all"], default="all")
    ap.add_argument("--variants", default="all", help="'all' or comma-separated variant names")
    args = ap.parse_args(argv)
    known = (list(d2.attention_variants()) if args.family != "gdn" else []) + \
        (list(d2.gdn_variants()) if args.family != "attention" else [])
    try:
        args.wanted = set(variant_list(args.variants, known))
    except ValueError as exc:
        ap.error(f"--variants ({args.family}): {exc}")
    return args


def selected_launches(args):
    """(label, launch) of every selected variant on every case of its family, attention
    first. A family none of whose variants is selected builds no case (``--family all
    --variants chunked`` makes no 262144-token cache); the attention inputs come from one
    seeded generator, case by case, so a case's inputs do not depend on which attention
    variants are selected."""
    attention = [v for v in d2.attention_variants() if v in args.wanted]
    gdn = [v for v in d2.gdn_variants() if v in args.wanted]
    rng = np.random.default_rng(1)
    for name, kw, splits in (attention_cases(args.large) if attention else []):
        c = oracle.random_attention_case(rng, strided=False, **kw)
        for variant in attention:
            yield (f"attention {variant:<16} {name}",
                   functools.partial(d2.verify_attention, **c, splits=splits, variant=variant))
    for name, c in (gdn_cases() if gdn else []):
        for variant in gdn:
            yield f"gdn {variant:<16} {name}", functools.partial(d2.gdn_prefill, **c, variant=variant)


def main(argv=None) -> int:
    """Run every selected variant on every case once; exit 1 when no variant-case ran (every
    selected variant refused every case), so that an empty run never reads as a clean one."""
    args = parse_args(argv)
    d2.route_counters(reset=True)       # the launches printed at the end are this run's
    ran = 0
    for label, launch in selected_launches(args):
        verdict = ""
        try:
            launch()
            cuda.synchronize()
            ran += 1
        except d2.UnsupportedShape:
            verdict = "  (unsupported)"
        print(label + verdict, flush=True)
    print(f"ran {ran} variant-cases; launches: {d2.route_counters()}")
    if ran == 0:
        print("error: no variant-case ran: the selection checks nothing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
