#!/usr/bin/env python3
"""Which compiler stage makes ``I32(V // 2)`` wrong in ``gdn_chunk_out_pipe`` on the H200?
(``bench/hb_mismatch_probe.py`` has the spellings and the byte check; GDN eleventh round.)

A spelling's kernel is compiled and launched once as numba builds it (CUDA 13 NVVM, then
its linker). Then its machine code is swapped, one experiment at a time, for a cubin that
``ptxas`` assembles from a given PTX (the loaded module's entry renamed to numba's), and
the call is run again and compared byte for byte with ``chunked``:

  PTX from this machine's NVVM (CUDA 13) or from another machine's (``--ptx-dir``: files
  ``gdn_chunk_out_pipe.FORM[.smXY].ptx``, e.g. NVVM 12.9 from ``hb_mismatch_probe.py cubin DIR``
  run without a GPU), assembled by this machine's ``ptxas`` or another one
  (``--ptxas-alt``: e.g. the 12.9 ``ptxas`` of the ``cuda12`` extra), at -O3 .. -O0.

Each cubin is written to ``OUT`` for a SASS diff (``nvdisasm -c``). Usage on the device:

    python3 bench/hb_toolchain_probe.py OUT --ptx-dir DIR --ptxas-alt PATH [--T 4096]
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import hb_mismatch_probe as HB  # noqa: E402  (the package's numpy shim first)

ENTRY = re.compile(r"\.entry\s+([A-Za-z0-9_$]+)\s*\(")


def entry_name(ptx: str) -> str:
    names = ENTRY.findall(ptx)
    if len(names) != 1:
        raise RuntimeError(f"expected one .entry in the PTX, found {names}")
    return names[0]


def assemble(ptx: str, entry: str, ptxas: str, arch: str, opt: int, cubin: Path) -> bytes:
    """``ptx`` with its entry renamed to ``entry``, assembled by ``ptxas`` for ``arch``."""
    src = ptx.replace(entry_name(ptx), entry)
    p = cubin.with_suffix(".ptx")
    p.write_text(src)
    subprocess.run([ptxas, f"-arch={arch}", f"-O{opt}", str(p), "-o", str(cubin)], check=True)
    return cubin.read_bytes()


class Swapped:
    """A launched kernel's code libraries (every overload of the dispatcher), whose cubin
    can be replaced and restored."""

    def __init__(self, kern):
        self.libs = [k._codelibrary for k in kern.overloads.values()]
        if not self.libs:
            raise RuntimeError("the kernel has not been compiled yet")
        self.cc = self.libs[0]._ensure_cc(None)

    def device_ptx(self) -> str:
        return self.libs[0].get_asm_str(cc=self.cc)

    def entry(self) -> str:
        return self.libs[0]._entry_name

    def use(self, cubin: bytes | None) -> None:
        """Load ``cubin`` at the next launch (None: numba links its own again; a module
        once loaded keeps its handle in the context, so nothing is reloaded as it was)."""
        from cuda.core import ObjectCode
        for lib in self.libs:
            lib._cubin_cache.clear()
            if cubin is not None:
                lib._cubin_cache[self.cc] = ObjectCode.from_cubin(cubin)
            lib._cufunc_cache.clear()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--T", type=int, default=4096)
    ap.add_argument("--forms", default="floordiv64,shipped")
    ap.add_argument("--ptx-dir", help="PTX of another NVVM: gdn_chunk_out_pipe.FORM.ptx")
    ap.add_argument("--ptxas-alt", help="another ptxas (e.g. CUDA 12.9's)")
    ap.add_argument("--opts", default="3,2,1,0", help="ptxas -O levels with this machine's ptxas")
    ap.add_argument("--alt-isa", default="8.8", help="PTX ISA version the alt ptxas reads")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    here_ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    print(f"ptxas here: {subprocess.run([here_ptxas, '--version'], capture_output=True, text=True).stdout.split(chr(10))[-2]}")
    if args.ptxas_alt:
        alt = subprocess.run([args.ptxas_alt, "--version"], capture_output=True, text=True).stdout
        print(f"ptxas alt:  {alt.split(chr(10))[-2]}")
    inputs = HB.gdn_inputs(args.T)
    want = HB.reference_bits(inputs)
    for form in args.forms.split(","):
        kern = HB.out_kernel(form)
        call = HB.planned_call(inputs, form, kern=kern)
        print(f"{form} as numba builds it: {HB.describe(HB.output_bits(call), want)}", flush=True)
        sw = Swapped(kern)
        arch = "sm_%d%d%s" % sw.cc
        dev_ptx = sw.device_ptx()
        (out / f"{form}.numba.ptx").write_text(dev_ptx)
        plans = [(f"this NVVM + this ptxas -O{o}", dev_ptx, here_ptxas, int(o))
                 for o in args.opts.split(",")]
        if args.ptxas_alt:
            # (an older ptxas refuses a newer PTX ISA version; the kernel uses nothing new)
            older = re.sub(r"^\.version \S+", f".version {args.alt_isa}", dev_ptx, flags=re.M)
            plans.append((f"this NVVM (.version {args.alt_isa}) + alt ptxas -O3", older,
                          args.ptxas_alt, 3))
        # (hb_mismatch_probe.py cubin names its files gdn_chunk_out_pipe.FORM.smXY.ptx)
        found = sorted(Path(args.ptx_dir).glob(f"gdn_chunk_out_pipe.{form}.*ptx")) \
            if args.ptx_dir else []
        other = next((f for f in found if f.name.split(".")[1] == form), None)
        if other is not None:
            plans.append(("other NVVM + this ptxas -O3", other.read_text(), here_ptxas, 3))
            if args.ptxas_alt:
                plans.append(("other NVVM + alt ptxas -O3", other.read_text(), args.ptxas_alt, 3))
        for i, (what, ptx, ptxas, opt) in enumerate(plans):
            cubin = out / f"{form}.{i}.cubin"
            try:
                sw.use(assemble(ptx, sw.entry(), ptxas, arch, opt, cubin))
                got = HB.describe(HB.output_bits(call), want)
            except Exception as exc:                   # (report and go on)
                got = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
            print(f"{form} [{i}] {what} ({arch}): {got}", flush=True)
        sw.use(None)
        print(f"{form} restored: {HB.describe(HB.output_bits(call), want)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
