#!/usr/bin/env python3
"""Where a kernel's stall samples go, phase by phase: reads the per-instruction CSV of an
Nsight Compute report's source page and sums it over the stretches of SASS between block
barriers (``BAR``), which in this project's kernels are the phases of a tile or chunk step.

Per segment: instructions in it, instructions executed (warp level), share of all warp
stall samples, shared-memory wavefronts against the ideal (bank conflicts), the largest
stall reasons (as shares of the segment's samples) and the commonest executed opcodes;
``--mix N`` adds each segment's N commonest opcodes with their modifiers (``IMAD.MOV.U32``
apart from ``IMAD``) and their executed counts, to tell moves and address work from math.

    ncu --set full --import-source no -k regex:split_kernel -c 1 -o rep python3 ...
    ncu -i rep.ncu-rep --page source --csv --print-source sass > source.csv
    python3 bench/ncu_source_segments.py source.csv [--min-share 0.5] [--json out.json] [--loops]
                                          [--mix 12]
"""
from __future__ import annotations

import argparse
import collections
import csv
import json
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
WAVEFRONTS = "L1 Wavefronts Shared"
WAVEFRONTS_IDEAL = "L1 Wavefronts Shared Ideal"


def _num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return 0.0


def _full_opcode(source):
    """The instruction's opcode with its modifiers (``IMAD.MOV.U32``), predicate dropped."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def read_rows(path):
    """(header, rows) of the source-page CSV; the first line names the kernel."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    return rows[start], rows[start + 1:]


def _stretch(first):
    return dict(first=first, n=0, executed=0.0, samples=0.0, wavefronts=0.0,
                wavefronts_ideal=0.0, stalls=collections.Counter(), ops=collections.Counter(),
                ops_full=collections.Counter())


def _add(cur, r, ix, stall_cols):
    """Add instruction row ``r`` to the sums of stretch ``cur``; returns its opcode."""
    full = _full_opcode(r[ix["Source"]])
    op = full.split(".")[0]
    ex = _num(r[ix[EXECUTED]])
    cur["n"] += 1
    cur["executed"] += ex
    cur["samples"] += _num(r[ix[SAMPLES]])
    cur["wavefronts"] += _num(r[ix[WAVEFRONTS]]) if WAVEFRONTS in ix else 0.0
    cur["wavefronts_ideal"] += _num(r[ix[WAVEFRONTS_IDEAL]]) if WAVEFRONTS_IDEAL in ix else 0.0
    for c in stall_cols:
        cur["stalls"][c[len("stall_"):]] += _num(r[ix[c]])
    cur["ops"][op] += ex
    cur["ops_full"][full] += ex
    return op


def _columns(header):
    return ({h: i for i, h in enumerate(header)},
            [h for h in header if h.startswith("stall_") and "Not Issued" not in h])


def segments(header, rows):
    """One dict per stretch of instructions ending at (and including) a BAR instruction."""
    ix, stall_cols = _columns(header)
    out, cur = [], None
    for r in rows:
        if cur is None:
            cur = _stretch(r[ix["Address"]])
        if _add(cur, r, ix, stall_cols) == "BAR":
            cur["last"] = r[ix["Address"]]
            out.append(cur)
            cur = None
    if cur is not None:
        out.append(cur)
    return out


_BRA_TARGET = re.compile(r"\bBRA\s+(?:`\()?(0x[0-9a-fA-F]+)")


def loops(header, rows):
    """One dict per backward branch (a loop, innermost and outer alike): the stretch from
    its target to the branch, barriers inside included, with the sums of
    :func:`segments`, and the offsets of both ends from the kernel's first instruction."""
    ix, stall_cols = _columns(header)
    addr = []
    for r in rows:
        try:
            addr.append(int(r[ix["Address"]], 16))
        except ValueError:
            addr.append(None)
    base = next((a for a in addr if a is not None), 0)
    pos = {a: i for i, a in enumerate(addr) if a is not None}
    out = []
    for i, r in enumerate(rows):
        m = _BRA_TARGET.search(r[ix["Source"]])
        if not m or addr[i] is None:
            continue
        t = int(m.group(1), 16)
        if t > addr[i] or t not in pos:
            continue
        lp = _stretch(f"+{t - base:#x}")
        lp["last"] = f"+{addr[i] - base:#x}"
        for body_row in rows[pos[t]:i + 1]:
            _add(lp, body_row, ix, stall_cols)
        out.append(lp)
    return out


def loop_summary(lps, total, min_share=1.0, top=5):
    """One line per loop with at least ``min_share`` % of the kernel's ``total`` samples:
    where it is, its size and static opcode mix, its share and its stalls."""
    lines = []
    for lp in lps:
        share = 100.0 * lp["samples"] / (total or 1.0)
        if share < min_share:
            continue
        samp = lp["samples"] or 1.0
        st = ", ".join(f"{k} {100 * v / samp:.0f}%" for k, v in lp["stalls"].most_common(top))
        ex = lp["executed"] or 1.0
        ops = ", ".join(f"{k} {100 * v / ex:.0f}%" for k, v in lp["ops"].most_common(top))
        lines.append(f"loop {lp['first']}..{lp['last']}: {lp['n']} instructions, "
                     f"{lp['executed']:.3g} executed, {share:.1f}% of samples; stalls: {st}; "
                     f"opcodes: {ops}")
    return "\n".join(lines)


def summary(segs, min_share=0.5, top=6, mix=0):
    """The per-segment report; ``mix``: also each segment's ``mix`` commonest opcodes with
    modifiers, in millions of warp instructions executed."""
    total = sum(s["samples"] for s in segs) or 1.0
    lines = [f"total stall samples {total:.0f}"]
    overall = collections.Counter()
    for s in segs:
        overall.update(s["stalls"])
    for i, s in enumerate(segs):
        share = 100.0 * s["samples"] / total
        if share < min_share:
            continue
        samp = s["samples"] or 1.0
        ex = s["executed"] or 1.0
        st = ", ".join(f"{k} {100 * v / samp:.0f}%" for k, v in s["stalls"].most_common(top))
        ops = ", ".join(f"{k} {100 * v / ex:.0f}%" for k, v in s["ops"].most_common(top))
        lines.append(f"segment {i}: {s['n']} instructions, {s['executed']:.3g} executed, "
                     f"{share:.1f}% of samples, shared wavefronts {s['wavefronts']:.3g} "
                     f"(ideal {s['wavefronts_ideal']:.3g})")
        lines.append(f"    stalls: {st}")
        lines.append(f"    opcodes: {ops}")
        if mix:
            lines.append("    executed (M): " + ", ".join(
                f"{k} {v / 1e6:.2f}" for k, v in s["ops_full"].most_common(mix)))
    lines.append("overall stalls: " + ", ".join(f"{k} {100 * v / total:.1f}%"
                                                for k, v in overall.most_common(12)))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--min-share", type=float, default=0.5,
                    help="print segments with at least this percentage of the samples")
    ap.add_argument("--json", default=None, help="write the segments here")
    ap.add_argument("--loops", action="store_true",
                    help="also one line per loop (backward branch) with >= 1%% of the samples")
    ap.add_argument("--mix", type=int, default=0, metavar="N",
                    help="also each segment's N commonest opcodes with modifiers, executed (M)")
    args = ap.parse_args(argv)
    header, rows = read_rows(args.csv)
    segs = segments(header, rows)
    print(summary(segs, args.min_share, mix=args.mix))
    if args.loops:
        print(loop_summary(loops(header, rows), sum(x["samples"] for x in segs)))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([dict(s, stalls=dict(s["stalls"]), ops=dict(s["ops"]),
                            ops_full=dict(s["ops_full"])) for s in segs],
                      fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
