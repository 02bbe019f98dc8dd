"""Shared helpers of the GPU benchmarks: environment and run metadata, timing (CUDA events,
or ``time.perf_counter`` on the simulator), the two measured ceilings (FP32 FMA instruction
rate, device-to-device copy bandwidth), a time budget, and the JSON / markdown / PNG output.

Import ``dflash2_numba`` before this module (it applies the numpy shim numba-cuda needs);
the scripts do that first.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import importlib
import inspect
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

import dflash2_numba  # noqa: F401  (numpy shim before numba)
from numba import cuda

REPO_ROOT = Path(__file__).resolve().parents[1]
from dflash2_numba._compat import SIMULATOR  # noqa: E402  (the switch as numba read it)
from dflash2_numba import contract as _contract  # noqa: E402

_T0 = time.perf_counter()


# --------------------------------------------------------------------------- logging

def log(msg: str) -> None:
    """Progress line on stderr, with the seconds since the script started."""
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


class Budget:
    """Wall-clock budget of one script: optional work is skipped once it is spent."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def exceeded(self) -> bool:
        return self.left() <= 0


# --------------------------------------------------------------------------- environment

def try_import_torch():
    """``torch`` when it imports and sees a CUDA device (never on the simulator), else None,
    with the reason as the second element."""
    if SIMULATOR:
        return None, "simulator run: torch is not used"
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure means "no torch"
        return None, f"torch not importable: {type(exc).__name__}: {exc}"
    try:
        if not torch.cuda.is_available():
            return None, "torch imported but torch.cuda.is_available() is False"
    except Exception as exc:  # noqa: BLE001
        return None, f"torch.cuda failed: {type(exc).__name__}: {exc}"
    return torch, None


def _version(dist: str) -> Optional[str]:
    try:
        from importlib import metadata

        return metadata.version(dist)
    except Exception:  # noqa: BLE001
        return None


def versions() -> Dict[str, Optional[str]]:
    out = {"python": sys.version.split()[0], "numpy": np.__version__}
    for dist in ("numba", "numba-cuda", "torch", "triton", "cupy-cuda13x", "fla-core",
                 "flash-linear-attention"):
        out[dist] = _version(dist)
    return out


def git_commit() -> Dict[str, object]:
    if os.environ.get("DFLASH2_COMMIT"):
        # the caller names the commit its tree was archived from (a lent GPU machine runs a
        # copy, possibly inside some other checkout whose HEAD says nothing about it)
        return {"git_commit": os.environ["DFLASH2_COMMIT"], "git_dirty": None}

    def run(*args):
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=20)
    try:
        r = run("rev-parse", "--short", "HEAD")
        commit = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "unknown"
    except Exception:  # noqa: BLE001
        commit = "unknown"
    dirty = None
    if commit != "unknown":
        try:
            r = run("status", "--porcelain", "--untracked-files=no")
            dirty = bool(r.stdout.strip()) if r.returncode == 0 else None
        except Exception:  # noqa: BLE001
            dirty = None
    return {"git_commit": commit, "git_dirty": dirty}


def device_info() -> Dict[str, object]:
    """Name, compute capability, SM count, clocks, L2 size of the current device."""
    if SIMULATOR:
        return {"device": "numba CUDA simulator (no GPU)", "cc": None, "sms": 1,
                "l2_bytes": None}
    info: Dict[str, object] = {}
    try:
        dev = cuda.get_current_device()
        name = dev.name
        info["device"] = name.decode() if isinstance(name, bytes) else str(name)
        info["cc"] = list(dev.compute_capability)
        for key, attr in (("sms", "MULTIPROCESSOR_COUNT"), ("sm_clock_khz", "CLOCK_RATE"),
                          ("mem_clock_khz", "MEMORY_CLOCK_RATE"),
                          ("mem_bus_bits", "GLOBAL_MEMORY_BUS_WIDTH"),
                          ("l2_bytes", "L2_CACHE_SIZE")):
            try:
                info[key] = int(getattr(dev, attr))
            except Exception:  # noqa: BLE001
                info[key] = None
    except Exception as exc:  # noqa: BLE001
        info = {"device": f"unknown ({type(exc).__name__}: {exc})", "cc": None, "sms": None,
                "l2_bytes": None}
    # nominal figures (information only; the fractions use the measured ceilings)
    fp32_lanes = {(7, 0): 64, (8, 0): 64, (8, 6): 128, (8, 9): 128, (9, 0): 128, (10, 0): 128}
    cc = tuple(info.get("cc") or ())
    if cc in fp32_lanes and info.get("sms") and info.get("sm_clock_khz"):
        info["nominal_fma_per_s"] = fp32_lanes[cc] * info["sms"] * info["sm_clock_khz"] * 1e3
    if info.get("mem_clock_khz") and info.get("mem_bus_bits"):
        info["nominal_bytes_per_s"] = 2.0 * info["mem_clock_khz"] * 1e3 * info["mem_bus_bits"] / 8
    return info


def run_meta(smoke: bool, timing_method: str, torch=None) -> Dict[str, object]:
    """The run's record header: date, command, versions, commit, device (its L2 size from
    numba, else from torch where given)."""
    argv = getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv
    meta = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(argv),
        "cwd": os.getcwd(),
        "simulator": SIMULATOR,
        "smoke": bool(smoke),
        "timing_method": timing_method,
        "versions": versions(),
        # DFLASH2_EMULATE_CC: the variants planned as on that capability (their forms, its
        # shared-memory limits), timed on the device in hand
        "emulated_cc": os.environ.get("DFLASH2_EMULATE_CC") or None,
    }
    meta.update(git_commit())
    meta.update(device_info())
    if not meta.get("l2_bytes") and torch is not None and not SIMULATOR:
        try:
            meta["l2_bytes"] = int(torch.cuda.get_device_properties(0).L2_cache_size)
        except Exception:  # noqa: BLE001
            pass
    return meta


# --------------------------------------------------------------------------- replay checks

def host_bytes(arrays) -> List[bytes]:
    """The bytes of device arrays (numba's or torch's), in order (None: absent, skipped)."""
    return [(x.copy_to_host() if hasattr(x, "copy_to_host") else x.detach().cpu().numpy()).tobytes()
            for x in arrays if x is not None]


def nan_fill(arrays) -> None:
    """Fill device arrays with NaN in place: numba device arrays, torch tensors (those made
    under ``torch.inference_mode()``, as the peers' are, filled under it too); None skipped."""
    for x in arrays:
        if x is None:
            continue
        if hasattr(x, "fill_"):
            if x.is_inference():
                import torch

                with torch.inference_mode():
                    x.fill_(float("nan"))
            else:
                x.fill_(float("nan"))
        else:
            x.copy_to_device(np.full(x.shape, np.nan, dtype=x.dtype))


def replay_gives(g, want: List[bytes], outputs, sync, scratch=()) -> bool:
    """Whether one replay of graph ``g`` writes ``want`` (the eager call's bytes) into
    ``outputs`` (the graph's own output arrays), NaN-filled first: a replay that writes
    nothing, or part, cannot pass. ``scratch`` (what the graph's kernels write and read back:
    split records, a pre-pass's W / U) is NaN-filled too, so a replay that skips an earlier
    kernel cannot pass on what the eager call left there."""
    nan_fill(list(outputs) + list(scratch))
    sync()
    g.replay()
    sync()
    return host_bytes(outputs) == want


# --------------------------------------------------------------------------- graphs

def _graph_kwargs(torch):
    try:
        params = inspect.signature(torch.cuda.graph).parameters
    except (TypeError, ValueError):
        return {}
    return {"capture_error_mode": "thread_local"} if "capture_error_mode" in params else {}


def capture_graph(torch, launch_fn):
    """Capture ``launch_fn(numba_stream)`` into a torch CUDA graph. Numba frees are deferred
    and Python's GC is off while capturing, so no cuMemFree lands in the capture."""
    g = torch.cuda.CUDAGraph()
    gc.collect()
    defer = getattr(cuda, "defer_cleanup", None)
    was = gc.isenabled()
    with (defer() if defer is not None else contextlib.nullcontext()):
        gc.disable()
        try:
            with torch.cuda.graph(g, **_graph_kwargs(torch)):
                launch_fn(numba_stream_of_torch(torch))
        finally:
            if was:
                gc.enable()
    torch.cuda.synchronize()
    return g


# --------------------------------------------------------------------------- streams and clocks

def numba_stream_of_torch(torch, torch_stream=None):
    """The numba stream for a torch stream (the current one by default); the legacy default
    stream (handle 0) maps to numba's default stream."""
    s = torch_stream if torch_stream is not None else torch.cuda.current_stream()
    handle = int(s.cuda_stream)
    if handle == 0:
        return cuda.default_stream()
    return cuda.external_stream(handle)


class Clock:
    """Times ``reps`` calls of a function that launches work on :attr:`stream`.

    ``torch-events``: torch.cuda.Event on torch's current stream (numba launches go to the
    same stream); ``numba-events``: numba events on numba's default stream;
    ``perf_counter``: host wall clock around a device synchronisation (the simulator).
    """

    def __init__(self, torch=None):
        self.torch = torch
        if SIMULATOR:
            self.method = "perf_counter"
            self.stream = 0
        elif torch is not None:
            self.method = "torch-events"
            self.stream = numba_stream_of_torch(torch)
        else:
            self.method = "numba-events"
            self.stream = cuda.default_stream()

    def sync(self) -> None:
        if self.torch is not None:
            self.torch.cuda.synchronize()
        cuda.synchronize()

    def time_ms(self, fn: Callable[[], object], reps: int = 1) -> float:
        """Milliseconds per call: ``reps`` back-to-back calls between two events."""
        reps = max(1, int(reps))
        self.sync()
        # numba frees (cuMemFree synchronises the device) wait until the trial is over
        defer = None if SIMULATOR else getattr(cuda, "defer_cleanup", None)
        with (defer() if defer is not None else contextlib.nullcontext()):
            return self._time_ms(fn, reps)

    def _time_ms(self, fn, reps: int) -> float:
        if self.method == "torch-events":
            t = self.torch
            e0, e1 = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(reps):
                fn()
            e1.record()
            e1.synchronize()
            return float(e0.elapsed_time(e1)) / reps
        if self.method == "numba-events":
            e0, e1 = cuda.event(timing=True), cuda.event(timing=True)
            e0.record(stream=self.stream)
            for _ in range(reps):
                fn()
            e1.record(stream=self.stream)
            e1.synchronize()
            return float(cuda.event_elapsed_time(e0, e1)) / reps
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / reps


def ab_session(out: str):
    """The start of an interleaved A/B tool's run (``bench/out_tile_ab.py``,
    ``overlap_knobs.py``, ``rec_forms_ab.py``): ``out`` created; ``(torch, why torch is
    missing, a Clock, the rows list, log)``, where ``log(row)`` appends a row and prints it."""
    Path(out).mkdir(parents=True, exist_ok=True)
    torch, why = try_import_torch()
    rows = []

    def log(row):
        rows.append(row)
        print(row, flush=True)

    return torch, why, Clock(torch), rows, log


def choose_reps(est_ms: float, target_ms: float, max_reps: int = 200, min_reps: int = 1) -> int:
    """Calls per trial so that one trial lasts about ``target_ms`` (at least ``min_reps``)."""
    if not est_ms or not math.isfinite(est_ms) or est_ms <= 0:
        return max(1, min_reps)
    return int(max(1, min_reps, min(max_reps, math.ceil(target_ms / est_ms))))


def stats(times: Sequence[float]) -> Dict[str, object]:
    t = [float(x) for x in times if x is not None and math.isfinite(float(x))]
    if not t:
        return {"median_ms": None, "min_ms": None, "max_ms": None, "trials": 0, "trials_ms": []}
    return {"median_ms": float(np.median(t)), "min_ms": min(t), "max_ms": max(t),
            "trials": len(t), "trials_ms": t}


def alternating_trials(items: Dict[str, Callable[[], float]], trials: int, budget: Budget,
                       min_trials: int = 3, notes: Optional[List[str]] = None,
                       label: str = "", failures: Optional[List[str]] = None
                       ) -> Dict[str, List[float]]:
    """Run one trial of every item per round, the order rotated each round, ``trials``
    rounds (fewer, but at least ``min_trials``, once the budget is spent). An item whose
    trial raises is dropped from later rounds; the error is put in ``notes`` and in
    ``failures`` (what makes a benchmark exit 1)."""
    names = list(items)
    out: Dict[str, List[float]] = {n: [] for n in names}
    dead = set()
    for r in range(trials):
        if r >= min_trials and budget.exceeded():
            if notes is not None:
                notes.append(f"{label}: time budget spent, {r} trials instead of {trials}")
            break
        k = r % max(1, len(names))
        for n in names[k:] + names[:k]:
            if n in dead:
                continue
            try:
                out[n].append(items[n]())
            except Exception as exc:  # noqa: BLE001
                dead.add(n)
                msg = f"{label} {n}: trial failed: {type(exc).__name__}: {exc}"
                for sink in (notes, failures):
                    if sink is not None:
                        sink.append(msg)
                log("  " + msg)
    return out


#: What a variant's accuracy check must meet (the project's FP32 bound; the cast output adds
#: at most one RNE rounding, 2**-11 relative, to the FP32 output's error).
FP32_REL_L2_BOUND = _contract.FP32_REL_L2_BOUND
CAST_REL_L2_BOUND = 2.0 ** -11 + FP32_REL_L2_BOUND


def accuracy_failures(rows: Dict[str, dict], bounds: Dict[str, float], where: str) -> List[str]:
    """The failures of the variants' rows (``kind == "variant"``) of an accuracy table:
    a check that raised, a figure missing or not finite, or one above its bound
    (``bounds``: key -> largest relative L2 allowed). Peers' rows are recorded, not judged."""
    out = []
    for name, row in rows.items():
        if row.get("kind") != "variant":
            continue
        if row.get("error"):
            out.append(f"{where}: {name}: accuracy check failed: {row['error']}")
            continue
        for key, bound in bounds.items():
            value = row.get(key)
            if value is None or not math.isfinite(value) or not value <= bound:
                out.append(f"{where}: {name}: {key} = {value} (bound {bound:.3g})")
    return out


def peers_cut_by_budget(budget: Budget, where: str, notes: List[str],
                        failures: List[str]) -> bool:
    """Whether the budget is spent before the peers at ``where`` (a context or length) run;
    if so a note and a failure say so: the run's figures there would stand without the peers
    the report compares them with."""
    if not budget.exceeded():
        return False
    notes.append(f"peers @ {where}: not run, the budget was spent (no peer beside these "
                 f"figures)")
    failures.append(notes[-1])
    log("  " + notes[-1])
    return True


def closing_failures(notes: List[str], *, skipped: Sequence[int], what: str, budget_s: float,
                     acc_at: int, acc_where: str, acc_rows: Dict[str, dict],
                     bounds: Dict[str, float], judge: bool) -> List[str]:
    """A run's last failures: the contexts or lengths (``what``) skipped for the budget
    (also a note) and, where variants ran (``judge``), a missing accuracy check or a
    variant past its bounds (:func:`accuracy_failures`)."""
    out = []
    if skipped:
        notes.append(f"time budget ({budget_s:.0f} s) spent: {what} {list(skipped)} skipped")
        out.append(notes[-1])
    if judge:
        if not acc_rows:
            out.append(f"no accuracy check at {acc_where}"
                       + (" (skipped for the budget)" if acc_at in skipped else ""))
        out += accuracy_failures(acc_rows, bounds, f"accuracy at {acc_where}")
    return out


# --------------------------------------------------------------------------- ceilings

FMA_CHAINS = 16   # independent FMA chains per thread
FMA_UNROLL = 8    # FMAs per chain per loop iteration
_fma_kernel = None


def _build_fma_kernel():
    """An FP32 FMA-throughput kernel: FMA_CHAINS independent ``c = fma(c, a, b)`` chains per
    thread, FMA_UNROLL times each per loop iteration; the result is written only when it
    equals a run-time sentinel (never), so nothing is dead code."""
    global _fma_kernel
    if _fma_kernel is not None:
        return _fma_kernel
    lines = ["def fma_peak(x, out, iters):",
             "    i = cuda.grid(1)",
             "    a = x[0]",
             "    b = x[1]"]
    lines += [f"    c{j} = x[{2 + j}]" for j in range(FMA_CHAINS)]
    lines.append("    for _ in range(iters):")
    for _ in range(FMA_UNROLL):
        lines += [f"        c{j} = cuda.fma(c{j}, a, b)" for j in range(FMA_CHAINS)]
    lines.append("    s = " + " + ".join(f"c{j}" for j in range(FMA_CHAINS)))
    lines.append(f"    if s == x[{2 + FMA_CHAINS}]:")
    lines.append("        out[i] = s")
    ns = {"cuda": cuda}
    exec(compile("\n".join(lines) + "\n", "<bench_fma_peak>", "exec"), ns)  # noqa: S102
    _fma_kernel = cuda.jit(ns["fma_peak"])
    return _fma_kernel


def measure_fma_rate(clock: Clock, *, trials: int = 5) -> Dict[str, object]:
    """FP32 FMA instructions per second (one instruction per FMA), best of ``trials``."""
    kern = _build_fma_kernel()
    x = np.full(3 + FMA_CHAINS, 0.5, dtype=np.float32)
    x[0], x[1] = np.float32(0.999), np.float32(0.001)
    x[2:2 + FMA_CHAINS] = np.linspace(0.1, 0.9, FMA_CHAINS, dtype=np.float32)
    x[2 + FMA_CHAINS] = np.float32(np.nan)      # never equal: no store, but not provably dead
    dx = cuda.to_device(x)
    if SIMULATOR:
        blocks, threads, iters = 1, 32, 2
    else:
        sms = int(device_info().get("sms") or 132)
        blocks, threads, iters = sms * 8, 256, 8192
    dout = cuda.device_array(blocks * threads, dtype=np.float32)
    s = clock.stream

    def launch():
        kern[blocks, threads, s](dx, dout, iters)

    launch()          # compile
    clock.sync()
    n_fma = blocks * threads * iters * FMA_CHAINS * FMA_UNROLL
    times = [clock.time_ms(launch, 1) for _ in range(trials)]
    best = min(times)
    rate = n_fma / (best * 1e-3)
    return {"fma_instr_per_s": rate, "fp32_flop_per_s": 2 * rate,
            "fma_per_launch": n_fma, "launch": [blocks, threads, iters],
            "chains_per_thread": FMA_CHAINS, "unroll": FMA_UNROLL,
            "trials_ms": times, "uses": "best trial",
            "meaningful": not SIMULATOR}


def measure_copy_bandwidth(clock: Clock, *, trials: int = 5,
                           nbytes: Optional[int] = None) -> Dict[str, object]:
    """Device-to-device copy bandwidth, counting bytes read + written, best of ``trials``."""
    if nbytes is None:
        nbytes = (1 << 20) if SIMULATOR else (1 << 30)
    src = cuda.device_array(nbytes, dtype=np.uint8)
    dst = cuda.device_array(nbytes, dtype=np.uint8)
    s = clock.stream

    def copy():
        dst.copy_to_device(src, stream=s)

    copy()
    clock.sync()
    reps = 1 if SIMULATOR else 10
    times = [clock.time_ms(copy, reps) for _ in range(trials)]
    best = min(times)
    bw = 2 * nbytes / (best * 1e-3)
    return {"bytes_per_s": bw, "copy_bytes": nbytes, "reps_per_trial": reps,
            "trials_ms_per_copy": times, "uses": "best trial, bytes read + written",
            "meaningful": not SIMULATOR}


def measure_ceilings(clock: Clock) -> Dict[str, object]:
    """The FP32 FMA rate and the copy bandwidth every figure is set against (their sizes
    are the simulator's where it runs). A ceiling that fails is an ``error`` entry:
    :func:`ceiling_failures` names it."""
    log("measuring ceilings: FP32 FMA rate, device-to-device copy bandwidth")
    out: Dict[str, object] = {}
    try:
        out["fma"] = measure_fma_rate(clock)
        log(f"  FMA: {out['fma']['fma_instr_per_s'] / 1e12:.2f} T instr/s")
    except Exception as exc:  # noqa: BLE001
        out["fma"] = {"error": f"{type(exc).__name__}: {exc}", "fma_instr_per_s": None}
        log(f"  FMA ceiling failed: {out['fma']['error']}")
    try:
        out["copy"] = measure_copy_bandwidth(clock)
        log(f"  copy: {out['copy']['bytes_per_s'] / 1e9:.1f} GB/s (read + write)")
    except Exception as exc:  # noqa: BLE001
        out["copy"] = {"error": f"{type(exc).__name__}: {exc}", "bytes_per_s": None}
        log(f"  bandwidth ceiling failed: {out['copy']['error']}")
    if SIMULATOR:
        out["note"] = "simulator: the ceilings and every fraction below are not meaningful"
    return out


def ceiling_failures(ceilings: Dict[str, object]) -> List[str]:
    """A benchmark whose figures have no roofline beside them has failed: one message per
    ceiling that could not be measured."""
    return [f"ceiling {name} not measured: {(ceilings.get(name) or {}).get('error')}"
            for name in ("fma", "copy") if (ceilings.get(name) or {}).get("error")]


# --------------------------------------------------------------------------- output

def out_dir(arg: Optional[str]) -> Path:
    d = Path(arg or os.environ.get("OUT") or "./bench_out")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _clean(x):
    """JSON-safe copy: numpy scalars to Python, non-finite floats to None."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return _clean(x.tolist())
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return v if math.isfinite(v) else None
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    return str(x)


def write_json(path: Path, record: dict) -> None:
    path.write_text(json.dumps(_clean(record), indent=1, allow_nan=False) + "\n")


def fmt(x, spec: str = ".3g", none: str = "-") -> str:
    if x is None:
        return none
    if isinstance(x, str):
        return x
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(v):
        return none
    return format(v, spec)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cols = [list(map(str, c)) for c in zip(headers, *rows)] if rows else [[h] for h in headers]
    widths = [max(len(s) for s in c) for c in cols]
    line = lambda r: "  ".join(str(s).rjust(w) for s, w in zip(r, widths))  # noqa: E731
    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def md_header(title: str, meta: dict) -> str:
    v = meta.get("versions", {})
    dirty = " (uncommitted changes)" if meta.get("git_dirty") else ""
    return "\n".join([
        f"### {title}",
        "",
        f"- Date (UTC): {meta.get('date_utc')}; commit `{meta.get('git_commit')}`{dirty}",
        f"- Device: {meta.get('device')}; timing: {meta.get('timing_method')}",
        f"- numba-cuda {v.get('numba-cuda')}, numpy {v.get('numpy')}, torch {v.get('torch')}",
        f"- Command: `{meta.get('command')}`",
        "",
    ])


def plot_series(path: Path, title: str, xlabel: str, ylabel: str,
                series: List[dict]) -> Optional[str]:
    """Log-log line plot. Each series: ``{"label", "x", "y", "style"}`` (None y skipped).
    Returns an error string instead of raising."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # noqa: BLE001
        return f"matplotlib unavailable: {exc}"
    try:
        fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
        drawn = 0
        for s in series:
            pts = [(x, y) for x, y in zip(s["x"], s["y"]) if y is not None and y > 0]
            if not pts:
                continue
            xs, ys = zip(*pts)
            ax.plot(xs, ys, s.get("style", "o-"), label=s["label"], markersize=4)
            drawn += 1
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        if drawn:
            ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return None
    except Exception as exc:  # noqa: BLE001
        return f"plot failed: {type(exc).__name__}: {exc}"


def write_outputs(out_dir, stem: str, record: dict, md_lines: Sequence[str], title: str,
                  xlabel: str, ylabel: str, series: List[dict]) -> None:
    """A benchmark's three files in ``out_dir``: ``<stem>.png`` (:func:`plot_series`; a
    plotting failure becomes a note in the record and a last line of the markdown),
    ``<stem>.json`` (the record, with the file names added) and ``<stem>.md``
    (``md_lines``)."""
    out = Path(out_dir)
    png = out / f"{stem}.png"
    err = plot_series(png, title, xlabel, ylabel, series)
    if err:
        record["notes"].append(err)
        md_lines = [*md_lines, f"- {err}", ""]
    record["files"] = {"json": str(out / f"{stem}.json"), "markdown": str(out / f"{stem}.md"),
                       "plot": None if err else str(png)}
    write_json(out / f"{stem}.json", record)
    (out / f"{stem}.md").write_text("\n".join(md_lines) + "\n")
    log(f"wrote {', '.join(v for v in record['files'].values() if v)}")


def bench_parser(doc: str, smoke_help: str):
    """The argument parser every benchmark starts from: its description, ``--out`` and
    ``--smoke``; numba's grid-size advice on small launches is silenced here too (noise in
    a benchmark log)."""
    import argparse
    import warnings

    try:
        from numba.core.errors import NumbaPerformanceWarning

        warnings.simplefilter("ignore", NumbaPerformanceWarning)
    except Exception:  # noqa: BLE001
        pass
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="output folder (default $OUT, else ./bench_out)")
    p.add_argument("--smoke", action="store_true", help=smoke_help)
    return p


def check_run_args(p, args, known, family: str, script: str) -> List[str]:
    """What every timing script checks once its arguments are parsed, before any work:
    ``--variants`` names (``all`` or a non-empty list of ``known`` names; a usage error,
    exit 2, otherwise), the production shape refused on the simulator (a usage error: days of
    simulated threads), a GPU present without the simulator (exit 1 with a message, not a
    traceback from the driver), and the output folder made and writable (a usage error
    otherwise). Returns the variant names."""
    from dflash2_numba._cli import variant_list

    try:
        names = variant_list(args.variants, list(known))
    except ValueError as exc:
        p.error(f"--variants ({family}): {exc}")
    if SIMULATOR and not args.smoke:
        p.error("the production shape does not run on the CUDA simulator; pass --smoke")
    if not SIMULATOR and not cuda.is_available():
        print(f"error: no CUDA GPU found (numba.cuda.is_available() is False); without a GPU "
              f"run the tiny configuration on the simulator: NUMBA_ENABLE_CUDASIM=1 python3 "
              f"bench/{script} --smoke", file=sys.stderr)
        sys.exit(1)
    try:                    # made and written to now, not found unwritable after the run
        with tempfile.TemporaryFile(dir=out_dir(args.out)):
            pass
    except OSError as exc:
        p.error(f"--out: cannot write to {exc.filename or args.out!r}: {exc.strerror or exc}")
    return names


def import_optional(name: str):
    """(module, None) or (None, reason)."""
    try:
        return importlib.import_module(name), None
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"


def input_sets(call_bytes: int, l2_bytes) -> int:
    """How many input sets a timed call goes through in turn: one, unless one call's
    inputs and outputs fit within twice the L2; then the fewest whose bytes together
    exceed twice the L2 (each call then finds little of its data left there)."""
    if not l2_bytes or call_bytes > 2 * l2_bytes:
        return 1
    return 2 * int(l2_bytes) // int(call_bytes) + 1
