#!/usr/bin/env python3
"""Where a kernel's issue slots go, read from its sm_90 machine code (no GPU).

Compiles registered kernels (``--kernels``: names of the variants' KernelSpecs, first
signature unless ``--sig``) under their variants' launch bounds, assembles them for sm_90
with the ptxas of the ``cuda12`` extra (registers and spills from ``-v``), disassembles
them with ``nvdisasm`` (``--nvdisasm``, by default the ``cuda12`` extra's), and reports each
loop (a backward branch): its instructions, its FFMAs, the FFMA share of its issue slots and its opcode
mix. The innermost loop with the most FFMAs is the kernel's hot loop, and the smallest
loop around it shows what the hot loop's surroundings cost.

    python3 bench/sass_loops.py [--nvdisasm PATH] [--kernels gdn_chunk_out_pipe,gdn_chunk_out_wide]
                                [--out DIR]

The default compares GDN's two streamed output kernels (the 4 x 8 and 8 x 8 tiles,
``bench/RESULTS.md``, GDN fifteenth round). The ptxas is CUDA 12.9's, not the H200's
CUDA 13 one, so registers can differ by a few; counts are static (every instruction of a
loop once, branches a warp may skip included).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def parse_sass(text: str) -> tuple[list[tuple[int, str, str]], dict[str, int]]:
    """Instructions ``(address, opcode, operands)`` in order and each label's address (the
    address of the instruction after it) from an ``nvdisasm -c`` listing."""
    instrs, labels, pending = [], {}, []
    for line in text.splitlines():
        m = _LABEL.match(line.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTR.search(line)
        if m:
            addr = int(m.group(1), 16)
            for lab in pending:
                labels[lab] = addr
            pending = []
            instrs.append((addr, m.group(3), m.group(4)))
    return instrs, labels


def loops(instrs, labels) -> list[dict]:
    """Every backward branch as a loop: body from the target's address to the branch's, its
    instruction count, FFMA count and opcode mix (opcode stem: ``FFMA``, ``LDS``, ...)."""
    out = []
    for addr, op, rest in instrs:
        if not op.startswith("BRA"):
            continue
        t = _TARGET.search(rest)
        if not t or t.group(1) not in labels or labels[t.group(1)] > addr:
            continue
        lo = labels[t.group(1)]
        body = [o for a, o, _ in instrs if lo <= a <= addr]
        mix = Counter(o.split(".")[0] for o in body)
        out.append(dict(start=lo, end=addr, instructions=len(body), ffma=mix.get("FFMA", 0),
                        ffma_share=round(mix.get("FFMA", 0) / len(body), 3),
                        mix=dict(mix.most_common())))
    return out


def hot_loop(found: list[dict]) -> tuple[dict | None, dict | None]:
    """The innermost loop (no other loop inside it) with the most FFMAs, and the smallest
    loop around it (``None`` where there is none)."""
    def inside(a, b):   # a strictly inside b
        return b["start"] <= a["start"] and a["end"] <= b["end"] \
            and (a["start"], a["end"]) != (b["start"], b["end"])

    inner = [lp for lp in found if not any(inside(o, lp) for o in found)]
    if not inner:
        return None, None
    hot = max(inner, key=lambda lp: lp["ffma"])
    around = [lp for lp in found if inside(hot, lp)]
    return hot, (min(around, key=lambda lp: lp["instructions"]) if around else None)


def kernel_specs(names: list[str], sig: int) -> dict:
    """``name -> (pyfunc, signature, launch_bounds)`` for each name, from the first variant
    that lists a KernelSpec of that name."""
    import dflash2_numba  # noqa: F401  (registers the variants)
    from dflash2_numba import _registry

    found = {}
    for _family, _variant, spec in _registry.all_kernel_specs():
        if spec.name in names and spec.name not in found:
            found[spec.name] = (spec.pyfunc, spec.signatures[sig], spec.launch_bounds)
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"--kernels: no registered kernel named {', '.join(missing)}")
    return {n: found[n] for n in names}


def sm90_sass(fn, sig, bounds, stem: Path, nvdisasm: str) -> tuple[str, int, int]:
    """Compile ``fn`` for ``sig`` under ``bounds`` to sm_90 (``stem``.ptx, .cubin, .sass
    written) with the ``cuda12`` extra's ptxas; the ``nvdisasm -c`` listing, registers and
    spill bytes (stores + loads)."""
    from dflash2_numba._compat import compile_ptx_cc
    from dflash2_numba.ptx import find_ptxas

    ptx_path, cubin, sass_path = (Path(f"{stem}.{ext}") for ext in ("ptx", "cubin", "sass"))
    ptx, _ = compile_ptx_cc(fn, sig, cc=(9, 0), launch_bounds=bounds)
    ptx_path.write_text(ptx)
    res = subprocess.run([find_ptxas(), "-arch=sm_90", "-v", str(ptx_path), "-o", str(cubin)],
                         capture_output=True, text=True, check=True)
    regs = int(re.search(r"Used (\d+) registers", res.stderr).group(1))
    spill = sum(int(x) for x in re.findall(r"(\d+) bytes spill", res.stderr))
    sass = subprocess.run([nvdisasm, "-c", str(cubin)],
                          capture_output=True, text=True, check=True).stdout
    sass_path.write_text(sass)
    return sass, regs, spill


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nvdisasm", default=None,
                    help="path of an nvdisasm that reads sm_90 (default: the cuda12 extra's)")
    ap.add_argument("--kernels", default="gdn_chunk_out_pipe,gdn_chunk_out_wide",
                    help="comma-separated kernel names (as the PTX report prints them)")
    ap.add_argument("--sig", type=int, default=0, help="which of a kernel's signatures")
    ap.add_argument("--out", default="sass_loops")
    args = ap.parse_args(argv)
    if args.nvdisasm is None:
        from cuda import pathfinder

        args.nvdisasm = pathfinder.find_nvidia_binary_utility("nvdisasm")
        if args.nvdisasm is None:
            ap.error("no nvdisasm found (install the cuda12 extra, or pass --nvdisasm PATH)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {}
    for name, (fn, sig, bounds) in kernel_specs(args.kernels.split(","), args.sig).items():
        sass, regs, spill = sm90_sass(fn, sig, bounds, out / name, args.nvdisasm)
        instrs, labels = parse_sass(sass)
        found = loops(instrs, labels)
        hot, outer = hot_loop(found)
        report[name] = dict(launch_bounds=bounds, registers=regs, spill_bytes=spill,
                            instructions=len(instrs), loops=found, hot_loop=hot,
                            outer_loop=outer)
        line = f"{name}: {regs} registers, {spill} B spill, {len(instrs)} instructions"
        if hot:
            top = ", ".join(f"{k} {v}" for k, v in list(hot["mix"].items())[:8])
            line += (f"\n  hot loop: {hot['instructions']} instructions, {hot['ffma']} FFMA "
                     f"({100 * hot['ffma_share']:.0f} %): {top}")
        if outer:
            line += (f"\n  loop around it: {outer['instructions']} instructions, "
                     f"{outer['ffma']} FFMA, {outer['instructions'] - hot['instructions']} "
                     f"outside the hot loop")
        print(line)
    (out / "sass_loops.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
