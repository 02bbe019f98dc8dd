"""dflash2-screen: every kernel variant against the FP64 oracle and its frozen kernel.

    dflash2-screen [attention|gdn|all] [--quick] [--contexts 1024,32768,...]
                   [--variants all|name,name] [--json out.json] [--plot out.png] [--mp]
                   [--no-timing] [--jobs N]

With no GPU it re-runs itself on numba's CUDA simulator and runs the quick matrix, its cases
in as many processes as this process has cores (``--jobs``; the rows are the same).
Exit status 1 when any check fails (oracle bound, bitwise equality, guards, route audit,
a crash, a selected variant unsupported on every case: never checked); a variant
unsupported on some cases is reported there and checked on the others. Exit status 2 for a
usage error (malformed --contexts or one past 262144 tokens, a --variants name no screened
family registers, a --json / --plot path that cannot be written, a --plot path without an
image format, --json and --plot naming one file, a malformed DFLASH2_EMULATE_CC or one
naming a capability with no known shared-memory limits), before any check runs.
"""
from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from typing import List, Optional

from .._cli import int_list_upto, output_path, plot_path, positive_int, variant_list

# the longest context (attention) / length (GDN) a --contexts value may ask for: the
# contract's context, the full matrix's longest case
MAX_CONTEXT = 262144


def _parse(argv):
    ap = argparse.ArgumentParser(prog="dflash2-screen", description=__doc__.splitlines()[0])
    ap.add_argument("family", nargs="?", default="all", choices=["attention", "gdn", "all"])
    ap.add_argument("--quick", action="store_true", help="small matrix (the default without a GPU)")
    ap.add_argument("--contexts", default=None, type=int_list_upto(MAX_CONTEXT),
                    help="comma-separated contexts (attention) / lengths (gdn) replacing the "
                         f"matrix's, each at most {MAX_CONTEXT} (a repeated one is run once)")
    ap.add_argument("--variants", default="all", help="'all' or comma-separated variant names")
    ap.add_argument("--json", default=None, type=output_path, help="write every figure here")
    ap.add_argument("--plot", default=None, type=plot_path,
                    help="write error-vs-context plot here (.png, .pdf, .svg, ...)")
    ap.add_argument("--mp", action="store_true",
                    help="cross-check the FP64 oracle with mpmath: its hand cases, and on the "
                         "quick matrix each attention case's live rows and each GDN case of "
                         "T <= 70")
    ap.add_argument("--no-timing", action="store_true", help="skip GPU timing")
    ap.add_argument("--jobs", default=None, type=positive_int,
                    help="cases screened at once, each in its own process (default: on the "
                         "simulator, the cores this process may use; on a GPU, 1; more than "
                         "1 on a GPU needs --no-timing)")
    args = ap.parse_args(argv)
    if args.json and args.plot and os.path.realpath(args.json) == os.path.realpath(args.plot):
        ap.error(f"--json and --plot name one file ({args.plot!r}): the plot would replace the "
                 f"figures")
    return args


def _select(names_all, wanted: List[str], registry) -> List[str]:
    """The variants of one family to screen: those of ``wanted`` it registers, and the
    bitwise reference of each, references first."""
    chosen = [n for n in wanted if n in names_all]
    if not chosen:
        return []
    # every chosen variant's bitwise reference runs too, first
    refs = []
    for n in chosen:
        r = registry[n].bitwise_reference
        if r and r not in chosen and r not in refs:
            refs.append(r)
    ordered = [n for n in names_all if n in set(chosen) | set(refs)]
    return sorted(ordered, key=lambda n: registry[n].bitwise_reference is not None)


def main(argv: Optional[List[str]] = None) -> int:
    """The command (``argv`` None: ``sys.argv``). Called with a list, the screen runs in the
    caller's process unless ``--jobs`` says otherwise, so that the caller's registrations and
    patches hold; the command's default is :func:`.parallel.default_jobs`."""
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv)
    from .._compat import SIMULATOR, emulated_cc, gpu_available

    try:
        emu = emulated_cc()
    except ValueError as exc:
        print(f"dflash2-screen: error: {exc}", file=sys.stderr)
        return 2

    if not SIMULATOR:

        if not gpu_available():
            print("dflash2-screen: no CUDA GPU found: re-running on numba's CUDA simulator "
                  "with the quick matrix", file=sys.stderr, flush=True)
            env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
            return subprocess.call([sys.executable, "-m", "dflash2_numba.screen", *argv], env=env)

    import dflash2_numba  # noqa: F401  (registers every variant)
    import oracle

    from .. import _registry
    from .._compat import EMULATE_CC_ENV
    from . import report
    from .parallel import CasePool, default_jobs

    quick = args.quick or SIMULATOR
    timing = not SIMULATOR and not args.no_timing
    contexts = args.contexts
    families = ["attention", "gdn"] if args.family == "all" else [args.family]
    known = _registry.variant_names(families)
    try:
        wanted = variant_list(args.variants, known)
    except ValueError as exc:
        print(f"dflash2-screen: error: --variants ({args.family}): {exc}", file=sys.stderr)
        return 2
    if args.jobs is not None:
        jobs = args.jobs
    else:
        jobs = default_jobs(SIMULATOR) if from_command_line else 1
    if jobs > 1 and timing:
        print("dflash2-screen: error: --jobs: GPU timing needs the device to one process; "
              "give --jobs 1 or --no-timing", file=sys.stderr)
        return 2
    where = "CUDA simulator" if SIMULATOR else "GPU"
    print(f"dflash2-screen: {'quick' if quick else 'full'} matrix on the {where}", flush=True)
    if emu is not None:
        print(f"dflash2-screen: plans as on compute capability {emu[0]}.{emu[1]} "
              f"({EMULATE_CC_ENV}): that capability's forms and shared-memory limits, compiled "
              f"for the device in hand", flush=True)

    if args.mp:
        ok = oracle.run_selfcheck(verbose=False)
        print(f"oracle self-check (FP64 against mpmath, hand cases): {'pass' if ok else 'FAIL'}")
        if not ok:
            return 1

    plans = []                        # (family's screen module, its runner, specs, variant names)
    for fam in families:
        registry = _registry.variants(fam)
        names = _select(list(registry), wanted, registry)
        if not names:                 # (--variants names only the other family's)
            continue
        if fam == "attention":
            from . import attention as family
            from .cases import attention_matrix

            specs, runner = attention_matrix(quick, contexts), family.run_attention
        else:
            from . import gdn as family
            from .cases import gdn_matrix

            specs, runner = gdn_matrix(quick, contexts), family.run_gdn
        print(f"{fam}: variants {', '.join(names)}; {len(specs)} cases", flush=True)
        plans.append((family, runner, specs, names))
    workers = min(jobs, sum(len(specs) for _, _, specs, _ in plans))
    if workers > 1:
        print(f"dflash2-screen: {workers} worker processes (--jobs)", flush=True)
    rows = []
    total = sum(family.expected_steps(specs, len(names)) for family, _, specs, names in plans)
    with _progress(total, "+".join(families)) as step, CasePool(workers, step) as pool:
        # every case of every family is submitted before any is waited for
        futures = [[pool.submit(family.screen_case, spec, names, timing=timing,
                                mp_check=args.mp and quick,
                                ticks=family.expected_steps([spec], len(names)))
                    for spec in specs] for family, _, specs, names in plans]
        for (_, runner, specs, names), fam_futures in zip(plans, futures):
            rows.extend(runner(specs, names, timing=timing,
                               case_rows=(f.result() for f in fam_futures)))

    report.print_table(rows)
    failed = [r for r in rows if r.status in ("FAIL", "error")]
    unsupported = [r for r in rows if r.status == "unsupported"]
    print(f"\n{len(rows)} checks: {len(rows) - len(failed) - len(unsupported)} passed, "
          f"{len(failed)} failed, {len(unsupported)} unsupported")
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                where=where, quick=quick, argv=argv, commit=_commit(),
                emulated_cc=None if emu is None else f"{emu[0]}.{emu[1]}")
    if not SIMULATOR:
        try:
            from numba import cuda

            meta["device"] = cuda.get_current_device().name.decode() if isinstance(
                cuda.get_current_device().name, bytes) else str(cuda.get_current_device().name)
        except Exception:  # pragma: no cover
            pass
    if args.json:
        report.write_json(rows, args.json, meta)
    if args.plot:
        report.write_plot(rows, args.plot)
    return 1 if failed or not rows else 0


def _commit() -> str:
    """The commit the screened tree came from: ``DFLASH2_COMMIT`` first (a lent GPU machine
    runs a copy of the tree, possibly inside some other checkout whose HEAD says nothing
    about it), else git's HEAD, else "unknown"."""
    named = os.environ.get("DFLASH2_COMMIT")
    if named:
        return named
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    return found or "unknown"


class _progress:
    """A progress bar on stderr (tqdm) that the runners tick once per variant run."""

    def __init__(self, total: int, label: str):
        self.total, self.label = total, label
        self.bar = None

    def __enter__(self):
        from tqdm import tqdm

        self.bar = tqdm(total=self.total, desc=self.label, file=sys.stderr, leave=False,
                        disable=not sys.stderr.isatty() and self.total < 50)
        return lambda: self.bar.update(1)

    def __exit__(self, *exc):
        self.bar.close()
        return False
