"""``python -m dflash2_numba.ptx --cc 7.0``: compile every kernel of every registered
variant to PTX for the given compute capability and assemble it with ptxas.

One row per (kernel, signature): registers, spill bytes (stores + loads), stack
frame, shared memory, the number of FP64 instructions in the PTX, the number of times the
PTX declares or addresses local memory (``.local``: a ``cuda.local.array`` indexed at run
time lands there, with a stack frame, without spilling), and the number of 64-bit shifts
left by 31 (``shl.b64 ..., 31``: how NVVM narrows a halved 64-bit value, e.g. from
``I32(V // 2)``; ptxas 12.9 and 13.0 lowered it wrongly in two builds of one kernel,
bench/RESULTS.md, GDN eleventh round; spell such offsets in 32-bit arithmetic).
Registers and shared memory are the kernel entry's; stack frame and spills are summed over
every function ptxas reports for the PTX (the entry and any function it kept out of line).
Exits non-zero when a kernel fails to compile or assemble, spills, uses local memory (a
stack frame or ``.local`` in its PTX: status ``LOCAL``), does FP64 work or holds such a
shift. The JSON rows (``--json``) also count each PTX's ``fma.rn.f32`` instructions and
its block barriers: those all threads must reach at one instruction and ``barrier.sync``,
which threads may reach at different ones (the GDN PTX test reads them).
``--jobs N`` compiles N signatures at once, each in its own process (default: one per
core); the rows are the same, in the same order.

Needs a CUDA 12 toolchain that can still target sm_70 (the ``cuda12`` extra:
``numba-cuda[cu12]`` brings libNVVM 12.9 and ptxas); no GPU is needed. Under the
CUDA simulator the report re-runs itself in a child process without it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import List, Optional

from ._cli import compute_capability, output_folder, output_path, positive_int, usable_cores

FP64_RE = re.compile(r"^\s*(?:@%p\d+\s+)?[a-z]+(?:\.[a-z0-9]+)*\.f64\b", re.M)
REG_RE = re.compile(r"Used (\d+) registers")
SPILL_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
SMEM_RE = re.compile(r"(\d+) bytes smem")
SHL31_RE = re.compile(r"^\s*(?:@%p\d+\s+)?shl\.b64\s+%rd\d+,\s*%rd\d+,\s*31;", re.M)
# a line that declares (``.local .align 4 .b8 __local_depot0[256];``) or addresses
# (``ld.local``, ``st.local``, ``cvta.local``, ...) the local state space
LOCAL_RE = re.compile(r"(?:^|[\s.])local\b(?=[\s.])", re.M)
COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# block barriers every thread must reach at the same instruction (``bar.sync``,
# ``barrier.sync.aligned``) and the one threads may reach at different ones
# (``barrier.sync`` without ``.aligned``: warp-specialised loops need it)
ALIGNED_BAR_RE = re.compile(r"\bbar(?:rier)?\.sync\.aligned\b|\bbar\.sync\b")
ANY_SITE_BAR_RE = re.compile(r"\bbarrier\.sync\s")


@dataclass
class KernelReport:
    family: str
    variant: str
    kernel: str
    signature: str
    registers: Optional[int] = None
    stack_bytes: Optional[int] = None
    spill_store_bytes: Optional[int] = None
    spill_load_bytes: Optional[int] = None
    shared_bytes: Optional[int] = None
    fp64_instructions: Optional[int] = None
    shl64_by31: Optional[int] = None
    local_refs: Optional[int] = None   # declarations and accesses of .local in the PTX
    fma_f32: Optional[int] = None      # fma.rn.f32 instructions in the PTX
    aligned_barriers: Optional[int] = None    # bar.sync / barrier.sync.aligned
    any_site_barriers: Optional[int] = None   # barrier.sync (reachable at different sites)
    error: str = ""

    @property
    def spills(self) -> bool:
        return bool(self.spill_store_bytes or self.spill_load_bytes)

    @property
    def uses_local(self) -> bool:
        """A stack frame (ptxas) or ``.local`` in the PTX: the kernel uses local memory."""
        return bool(self.stack_bytes or self.local_refs)

    @property
    def ok(self) -> bool:
        return (not self.error and self.fp64_instructions == 0 and not self.shl64_by31
                and self.spill_store_bytes == 0 and self.spill_load_bytes == 0
                and self.stack_bytes == 0 and self.local_refs == 0)

    @property
    def status(self) -> str:
        if self.ok:
            return "ok"
        if self.error:
            return self.error
        if self.fp64_instructions:
            return "FP64"
        if self.shl64_by31:
            return "SHL64_BY31"
        if self.spills:
            return "SPILLS"
        if self.uses_local:
            return "LOCAL"
        return "INCOMPLETE"   # a figure ptxas did not report


def find_ptxas() -> Optional[str]:
    """ptxas from the cuda12 extra (nvidia-cuda-nvcc-cu12) first, then PATH, if it targets sm_70."""
    candidates = []
    try:
        import nvidia.cuda_nvcc as nvcc_pkg  # type: ignore

        for base in list(getattr(nvcc_pkg, "__path__", [])):
            candidates.append(os.path.join(base, "bin", "ptxas"))
    except ImportError:
        pass
    env = os.environ.get("DFLASH2_PTXAS")
    if env:
        candidates.insert(0, env)
    found = shutil.which("ptxas")
    if found:
        candidates.append(found)
    for c in candidates:
        if c and os.path.exists(c):
            try:
                out = subprocess.run([c, "--help"], capture_output=True, text=True, timeout=30).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            if "sm_70" in out:
                return c
    return None


def count_fp64(ptx: str) -> int:
    return len(FP64_RE.findall(ptx))


def count_shl64_by31(ptx: str) -> int:
    """64-bit shifts left by 31 in ``ptx`` (how NVVM forms ``I32(x // 2)`` of a 64-bit x)."""
    return len(SHL31_RE.findall(ptx))


def count_local(ptx: str) -> int:
    """How often ``ptx`` (comments aside) declares or addresses local memory (``.local``:
    a declaration, ``ld.local``, ``st.local``, ``cvta.local``, ...)."""
    return len(LOCAL_RE.findall(COMMENT_RE.sub("", ptx)))


def parse_ptxas_log(log: str) -> dict:
    """The figures of ``ptxas -v``'s log for one PTX: ``registers`` and ``shared_bytes``
    from its "Used ..." line (ptxas prints one for each entry, and a report assembles one
    entry), and ``stack_bytes`` / ``spill_store_bytes`` / ``spill_load_bytes`` summed over
    every "Function properties" block: the entry's and those of functions ptxas kept out
    of line, in whatever order it prints them."""
    used = REG_RE.search(log)
    smem = SMEM_RE.search(log)
    res = {"registers": int(used.group(1)) if used else None,
           "shared_bytes": int(smem.group(1)) if smem else 0}
    props = [tuple(map(int, m)) for m in SPILL_RE.findall(log)]
    if props:
        res["stack_bytes"] = sum(p[0] for p in props)
        res["spill_store_bytes"] = sum(p[1] for p in props)
        res["spill_load_bytes"] = sum(p[2] for p in props)
    return res


def assemble(ptxas: str, ptx: str, cc) -> dict:
    """Assemble ``ptx`` for ``cc`` with ``ptxas -v``; its figures (:func:`parse_ptxas_log`)."""
    arch = f"sm_{cc[0]}{cc[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([ptxas, f"-arch={arch}", "-v", src, "-o", os.path.join(tmp, "k.cubin")],
                              capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed: {log.strip()[-400:]}")
    return parse_ptxas_log(log)


_SHORT = {"float16": "f16", "float32": "f32", "float64": "f64", "uint8": "u8", "int32": "i32",
          "int64": "i64"}


def _sig_text(sig) -> str:
    parts = []
    for t in sig:
        dt = getattr(t, "dtype", None)
        if dt is not None:
            parts.append(f"{_SHORT.get(str(dt), str(dt))}[{t.ndim}{t.layout}]")
        else:
            parts.append(_SHORT.get(str(t), str(t)))
    return " ".join(parts)


def kernels_not_for(cc, family: Optional[str] = None, variant: Optional[str] = None) -> List[str]:
    """Names of the registered kernels (of ``family`` / ``variant`` when given) that none of
    those variants launches at compute capability ``cc``; each name once, in registration
    order."""
    import dflash2_numba  # noqa: F401  (registers every variant)
    from dflash2_numba._registry import all_kernel_specs

    chosen = [spec for fam, vname, spec in all_kernel_specs()
              if (not family or fam == family) and (not variant or vname == variant)]
    launched = {spec.name for spec in chosen if _launched_at(spec, cc)}
    return list(dict.fromkeys(spec.name for spec in chosen if spec.name not in launched))


def _launched_at(spec, cc) -> bool:
    return tuple(spec.min_cc) <= tuple(cc) <= tuple(spec.max_cc)


def build_reports(cc=(7, 0), family: Optional[str] = None, variant: Optional[str] = None,
                  dump: Optional[str] = None, jobs: int = 1,
                  launched: bool = True) -> List[KernelReport]:
    """One row per (kernel, signature) launched at ``cc`` (``launched=False``: per one its
    variant does not launch there, compiled for ``cc`` all the same), of ``family`` /
    ``variant`` when given, in registration order; ``dump``: also write each PTX to
    ``dump/<variant>.<kernel>.<i>.sm<cc>.ptx`` (to diff one toolchain's PTX against
    another's). ``jobs`` above 1 compiles the signatures in that many spawned processes
    (each compile is independent; the rows are the same, in the same order); those
    processes see only the variants the package registers on import, so a variant
    registered at run time is reported with ``jobs=1``."""
    import dflash2_numba  # noqa: F401  (registers every variant)
    from dflash2_numba._registry import all_kernel_specs

    ptxas = find_ptxas()
    tasks = [(fam, vname, spec.name, i, tuple(cc), dump, ptxas)
             for fam, vname, spec in all_kernel_specs()
             if not ((family and fam != family) or (variant and vname != variant)
                     or _launched_at(spec, cc) != launched)
             for i in range(len(spec.signatures))]
    workers = min(jobs, len(tasks))
    if workers <= 1:
        return [_report_task(t) for t in tasks]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawn, not fork: a caller may hold threads or a CUDA context
    with ProcessPoolExecutor(max_workers=workers,
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_report_task, tasks))


def _report_task(task) -> KernelReport:
    """The row of one (kernel, signature): ``task`` is (family, variant, kernel name,
    signature index, cc, dump folder or None, ptxas path or None)."""
    import dflash2_numba  # noqa: F401  (registers every variant: a spawned worker starts bare)
    from dflash2_numba._compat import compile_ptx_cc
    from dflash2_numba._registry import all_kernel_specs

    fam, vname, kname, i, cc, dump, ptxas = task
    spec = next(s for f, v, s in all_kernel_specs() if (f, v, s.name) == (fam, vname, kname))
    sig = spec.signatures[i]
    r = KernelReport(fam, vname, spec.name, _sig_text(sig))
    try:
        ptx, _ = compile_ptx_cc(spec.pyfunc, sig, cc=cc,
                                launch_bounds=getattr(spec, "launch_bounds", None))
        r.fp64_instructions = count_fp64(ptx)
        r.shl64_by31 = count_shl64_by31(ptx)
        r.local_refs = count_local(ptx)
        r.fma_f32 = ptx.count("fma.rn.f32")
        r.aligned_barriers = len(ALIGNED_BAR_RE.findall(ptx))
        r.any_site_barriers = len(ANY_SITE_BAR_RE.findall(ptx))
        if dump:
            os.makedirs(dump, exist_ok=True)
            name = f"{vname}.{spec.name}.{i}.sm{cc[0]}{cc[1]}.ptx"
            with open(os.path.join(dump, name), "w") as f:
                f.write(ptx)
        if ptxas is None:
            r.error = "no ptxas that targets sm_70 (install the cuda12 extra)"
        else:
            for k, v in assemble(ptxas, ptx, cc).items():
                setattr(r, k, v)
    except Exception as e:  # report and go on: one row per kernel
        r.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
    return r


def format_table(reports: List[KernelReport]) -> str:
    head = (f"{'variant':<22} {'kernel':<34} {'regs':>4} {'spill':>5} {'stack':>5} {'local':>5} "
            f"{'smem':>6} {'fp64':>4}  status")
    lines = [head, "-" * len(head)]
    for r in reports:
        spill = (r.spill_store_bytes or 0) + (r.spill_load_bytes or 0)
        fmt = lambda v: "-" if v is None else str(v)  # noqa: E731
        lines.append(f"{r.family + '/' + r.variant:<22} {r.kernel:<34} {fmt(r.registers):>4} "
                     f"{spill if r.registers is not None else '-':>5} {fmt(r.stack_bytes):>5} "
                     f"{fmt(r.local_refs):>5} {fmt(r.shared_bytes):>6} {fmt(r.fp64_instructions):>4}  "
                     f"{r.status}")
        lines.append(f"{'':<22}   ({r.signature})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dflash2_numba.ptx",
                                 description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--cc", default=(7, 0), type=compute_capability,
                    help="compute capability, e.g. 7.0")
    ap.add_argument("--family", choices=["attention", "gdn"], default=None)
    ap.add_argument("--variant", default=None, help="only this variant's kernels")
    ap.add_argument("--dump", default=None, type=output_folder,
                    help="also write each kernel's PTX into this folder (made now if missing)")
    ap.add_argument("--json", default=None, type=output_path, help="write the rows as JSON here")
    ap.add_argument("--jobs", default=None, type=positive_int,
                    help="signatures compiled at once, each in its own process (default: the "
                         "cores this process may use; main(argv) called from Python: 1)")
    from_command_line = argv is None
    arg_list = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(arg_list)
    from ._compat import SIMULATOR   # numba's own reading of NUMBA_ENABLE_CUDASIM

    if SIMULATOR:
        env = dict(os.environ)
        env.pop("NUMBA_ENABLE_CUDASIM", None)
        return subprocess.call([sys.executable, "-m", "dflash2_numba.ptx", *arg_list], env=env)
    major, minor = args.cc
    if args.variant is not None:
        import dflash2_numba  # noqa: F401  (registers every variant)
        from dflash2_numba import _registry

        families = [args.family] if args.family else ["attention", "gdn"]
        known = _registry.variant_names(families)
        if args.variant not in known:
            print(f"python -m dflash2_numba.ptx: error: --variant: no {args.family or 'attention or gdn'} "
                  f"variant {args.variant!r}; known: {', '.join(known)}", file=sys.stderr)
            return 2
    jobs = args.jobs if args.jobs is not None else (usable_cores() if from_command_line else 1)
    reports = build_reports((major, minor), args.family, args.variant, args.dump, jobs)
    print(format_table(reports))
    bad = [r for r in reports if not r.ok]
    others = kernels_not_for((major, minor), args.family, args.variant)
    if others:
        print(f"\nnot launched at sm_{major}{minor} (another schedule of the same arithmetic is): "
              + ", ".join(others))
    print(f"\n{len(reports)} kernel signatures at sm_{major}{minor}: {len(reports) - len(bad)} ok, {len(bad)} failing")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dict(asdict(r), ok=r.ok, status=r.status) for r in reports], f, indent=1)
    if not reports:
        print("no kernels registered")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
