"""Attention screen: every registered attention variant against the FP64 oracle and, byte
for byte, against the frozen kernel (contract C).

For each case the inputs are placed on the device once (caches in padded rows when the case
asks for strides); each variant gets its own guarded workspaces (one with an FP16 output, one
with an FP32 output), filled with the sentinel before each of the case's length states (contract
C), so a word a state leaves unwritten shows the sentinel, never the previous state's bytes.
In the live state the FP16 call takes the default causal rows (``row_lengths=None``) and the
FP32 call the same rows given explicitly; in the "restored" state the other way round. Each
path of each output is therefore screened, and "restored" must give the live state's bytes
again (host snapshots of both outputs and of the split records). The FP16 output must be the
RNE rounding of the FP32 one byte for byte, a row with no visible key +0 in both, and the
splits a request does not reach (``s >= active_splits(T_b, S)``, every split when ``T_b <= 0``)
must keep the sentinel in ``partial`` and ``lse`` (contract A, "Workspace"): checked for every
variant, the bitwise reference included, which nothing else would check. A variant
unsupported on every case of a run fails it (one "every case" row): a variant the run never
checked must not pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

import oracle

from .. import _registry
from .._compat import cuda
from ..attention.api import plan_attention
from ..contract import FP32_REL_L2_BOUND, SENTINEL, active_splits
from ..workspace import AttentionWorkspace
from .cases import LENGTH_STATES, AttentionCaseSpec, row_lengths_for_state
from .report import never_checked
from .variant_steps import audit_route, bitwise_checks, fp16_oracle_problems, launch_variant

FP32_REL_BOUND = FP32_REL_L2_BOUND
NEVER_CHECKED_CASE = "every case"      # the case of the row that fails a never-checked variant


@dataclass
class Row:
    family: str
    case: str
    state: str
    variant: str
    context: int
    rel_l2_fp32: Optional[float] = None
    max_abs_fp32: Optional[float] = None
    rel_l2_fp16: Optional[float] = None
    max_abs_fp16: Optional[float] = None
    ratio_to_frozen: Optional[float] = None
    bitwise: Optional[bool] = None          # None: this is the reference itself
    mismatch: str = ""
    guards: Optional[bool] = None
    route: str = ""
    route_ok: Optional[bool] = None
    state_err: Optional[float] = None       # GDN: final-state rel L2 against the oracle
    time_ms: Optional[float] = None
    status: str = "ok"                      # ok | FAIL | unsupported | error
    problems: List[str] = field(default_factory=list)

    def fail(self, msg: str) -> None:
        self.problems.append(msg)
        self.status = "FAIL"


def _device_inputs(c: Dict, padded: bool):
    """Device copies of one case; with ``padded`` the caches live in rows of D + 16 bytes."""
    dev = {}
    for key in ("q", "block_table", "seq_lens"):
        dev[key] = cuda.to_device(np.ascontiguousarray(c[key]))
    for key in ("k_cache", "v_cache"):
        a = np.ascontiguousarray(c[key])
        if padded:
            base = np.zeros(a.shape[:-1] + (a.shape[-1] + 16,), np.uint8)
            base[..., :a.shape[-1]] = a
            dev[key] = cuda.to_device(base)[:, :, :, :a.shape[-1]]
        else:
            dev[key] = cuda.to_device(a)
    return dev


def time_launches(plan, repeats: int = 7) -> float:
    """Median CUDA-event time (ms) of ``plan.launch()`` after one warm-up launch; any object
    with a ``launch()`` method (AttentionPlan, GdnCall)."""
    plan.launch()
    cuda.synchronize()
    start, end = cuda.event(), cuda.event()
    times = []
    for _ in range(repeats):
        start.record()
        plan.launch()
        end.record()
        end.synchronize()
        times.append(cuda.event_elapsed_time(start, end))
    return float(np.median(times))


class _VariantBuffers:
    def __init__(self, spec: AttentionCaseSpec):
        kw = dict(batch=spec.B, q_len=spec.Q, heads=spec.Hq, head_dim=spec.D, splits=spec.splits)
        self.ws16 = AttentionWorkspace(**kw, out_dtype="float16")
        self.ws32 = AttentionWorkspace(**kw, out_dtype="float32")

    def fill_sentinel(self) -> None:
        """The sentinel in every element of both workspaces, guards included (before each
        length state's launch)."""
        self.ws16.fill_sentinel()
        self.ws32.fill_sentinel()

    def snapshot(self):
        return dict(out16=self.ws16.out.copy_to_host(), out32=self.ws32.out.copy_to_host(),
                    partial=self.ws16.partial.copy_to_host(), lse=self.ws16.lse.copy_to_host(),
                    partial32=self.ws32.partial.copy_to_host(), lse32=self.ws32.lse.copy_to_host())

    def guards_intact(self) -> bool:
        return self.ws16.guards_intact() and self.ws32.guards_intact()


def screen_case(spec: AttentionCaseSpec, variant_names: List[str], *, timing: bool,
                mp_check: bool = False, progress=None) -> List[Row]:
    c = spec.build()
    dev = _device_inputs(c, spec.strided)
    states = LENGTH_STATES if spec.length_states else ("live",)
    registry = _registry.variants("attention")
    rows: List[Row] = []
    buffers = {name: _VariantBuffers(spec) for name in variant_names}
    live_snapshots: Dict[str, dict] = {}
    for state in states:
        rl = row_lengths_for_state(c["seq_lens"], spec.Q, state)
        dev_rl = cuda.to_device(rl)
        ref = oracle.attention_reference(c["q"], c["k_cache"], c["v_cache"], c["block_table"],
                                         c["seq_lens"], scale=c["scale"], k_scale=c["k_scale"],
                                         v_scale=c["v_scale"], row_lengths=rl)
        if mp_check and state == "live":
            ref_mp = oracle.attention_reference(c["q"], c["k_cache"], c["v_cache"], c["block_table"],
                                                c["seq_lens"], scale=c["scale"], k_scale=c["k_scale"],
                                                v_scale=c["v_scale"], row_lengths=rl, precision="mp")
            gap = oracle.rel_l2(ref, ref_mp)
            if not gap <= 1e-12:
                raise AssertionError(f"oracle FP64 vs mpmath gap {gap:.3e} on {spec.name}")
        snaps: Dict[str, dict] = {}
        for name in variant_names:
            v = registry[name]
            row = Row("attention", spec.name, state, name, spec.context)
            rows.append(row)
            bufs = buffers[name]
            kwargs = dict(scale=c["scale"], k_scale=c["k_scale"], v_scale=c["v_scale"],
                          splits=spec.splits, variant=name)
            # live: the FP16 call takes the default causal rows (row_lengths=None, derived
            # from seq_lens on the device), the FP32 call the same rows given explicitly;
            # restored: the other way round (the FP32 output's default path)
            rows16 = None if state == "live" else dev_rl
            rows32 = None if state == "restored" else dev_rl
            bufs.fill_sentinel()

            def plan_and_launch():
                p32 = plan_attention(dev["q"], dev["k_cache"], dev["v_cache"], dev["block_table"],
                                     dev["seq_lens"], workspace=bufs.ws32, out_dtype="float32",
                                     row_lengths=rows32, **kwargs)
                p16 = plan_attention(dev["q"], dev["k_cache"], dev["v_cache"], dev["block_table"],
                                     dev["seq_lens"], workspace=bufs.ws16, out_dtype="float16",
                                     row_lengths=rows16, **kwargs)
                p32.launch()
                p16.launch()
                cuda.synchronize()
                return p32, p16

            plans = launch_variant(row, plan_and_launch)
            if plans is None:
                continue
            p16 = plans[1]
            audit_route(row, v)
            snap = bufs.snapshot()
            snaps[name] = snap
            _oracle_checks(row, snap, ref)
            for msg in untouched_split_problems(snap, rl, spec.splits):
                row.fail(msg)
            row.guards = bufs.guards_intact()
            if not row.guards:
                row.fail("guard rows overwritten")
            if timing and state == "live":
                row.time_ms = time_launches(p16)
            if progress is not None:
                progress()
        bitwise_checks(rows[-len(variant_names):], snaps, registry,
                       ("out16", "out32", "partial", "lse"))
        if state == "live":
            live_snapshots = snaps
        if state == "restored":
            for r in rows[-len(variant_names):]:
                a, b = snaps.get(r.variant), live_snapshots.get(r.variant)
                if a is not None and b is not None:
                    for key in ("out16", "out32", "partial", "lse"):
                        m = oracle.first_mismatch(a[key], b[key])
                        if m is not None:
                            r.fail(f"restored state differs from live in {key}: {m}")
    return rows


def _oracle_checks(row: Row, snap: dict, ref: np.ndarray) -> None:
    out32, out16 = snap["out32"], snap["out16"]
    row.rel_l2_fp32 = oracle.rel_l2(out32, ref)
    row.max_abs_fp32 = oracle.max_abs(out32, ref)
    row.rel_l2_fp16 = oracle.rel_l2(out16, ref)
    row.max_abs_fp16 = oracle.max_abs(out16, ref)
    # FP32: rel L2 within the bound, and per element within the bound times max|ref|;
    # FP16: the RNE rounding of the FP32 output, and against the oracle within one rounding
    # of a result inside those bounds (derived from the bound, not from out32)
    abs_bound = oracle.max_abs_bound(ref, FP32_REL_BOUND)
    if not row.rel_l2_fp32 <= FP32_REL_BOUND:
        row.fail(f"FP32 rel L2 {row.rel_l2_fp32:.3e} > {FP32_REL_BOUND}")
    if not row.max_abs_fp32 <= abs_bound:
        row.fail(f"FP32 max abs {row.max_abs_fp32:.3e} > {abs_bound:.3e} (bound x max|ref|)")
    # bytes, not values: -0.0 == +0.0 in value
    if (out16.dtype != np.float16 or out16.shape != out32.shape
            or out16.tobytes() != out32.astype(np.float16).tobytes()):
        row.fail("FP16 output is not the RNE rounding of the FP32 output")
    for msg in fp16_oracle_problems(out16, ref, FP32_REL_BOUND):
        row.fail(msg)
    dead = np.all(ref == 0, axis=-1)
    if dead.any():
        for name, out in (("FP32", out32), ("FP16", out16)):
            if np.any(out[dead] != 0) or np.any(np.signbit(out[dead])):
                row.fail(f"a row with no visible key is not +0 in the {name} output")
    # the FP32 and FP16 runs share every workspace value
    if snap["partial"].tobytes() != snap["partial32"].tobytes() or snap["lse"].tobytes() != snap["lse32"].tobytes():
        row.fail("workspace of the FP32-output run differs from the FP16-output run")


def untouched_split_problems(snap: dict, row_lengths: np.ndarray, splits: int) -> List[str]:
    """What is wrong with the splits no request reaches (contract A, "Workspace": splits
    ``s >= active_splits(T_b, S)``, ``T_b = max_t row_lengths[b, t]``, are not touched): each
    of ``snap``'s ``partial`` and ``lse`` (the FP16-output run's; the FP32-output run's must
    equal them) holding anything but the sentinel's bytes there (empty: nothing)."""
    out = []
    for b in range(row_lengths.shape[0]):
        A = active_splits(int(row_lengths[b].max()), splits)
        if A >= splits:
            continue
        for key in ("partial", "lse"):
            x = snap[key][b, A:]
            m = oracle.first_mismatch(x, np.full(x.shape, SENTINEL, x.dtype))
            if m is not None:
                where = (b, A + m.index[0]) + m.index[1:] if m.index else (b, A)
                out.append(f"{key} written at {where} past request {b}'s {A} active split(s) of "
                           f"{splits}: {m.a_value!r} [{m.a_bytes}], not the sentinel; "
                           f"{m.count} element(s) of split(s) >= {A} not the sentinel")
    return out


def run_attention(specs: List[AttentionCaseSpec], variant_names: List[str], *, timing: bool,
                  mp_check: bool = False, progress=None, case_rows=None) -> List[Row]:
    """Every case of ``specs`` for every variant (:func:`family_rows`)."""
    return family_rows("attention", screen_case, specs, variant_names,
                       max((s.context for s in specs), default=0), timing=timing,
                       mp_check=mp_check, progress=progress, case_rows=case_rows)


def family_rows(family: str, screen_one, specs, variant_names: List[str], context: int, *,
                timing: bool, mp_check: bool, progress, case_rows) -> List[Row]:
    """The rows of every case of ``specs`` (``screen_one(spec, names, ...)``: one case's
    rows) for every variant of ``family``; then one failing row ("every case", at
    ``context``) per variant that was unsupported on every case, so that a variant the run
    never checked fails it (its bitwise reference, added for the others, excepted).
    ``case_rows``: each spec's rows in spec order, already screened (``--jobs``:
    :mod:`.parallel`), instead of screening them here."""
    if case_rows is None:
        case_rows = (screen_one(spec, variant_names, timing=timing, mp_check=mp_check,
                                progress=progress) for spec in specs)
    rows: List[Row] = [row for one_case in case_rows for row in one_case]
    return rows + never_checked_rows(family, rows, variant_names, len(specs), context)


def never_checked_rows(family: str, rows: List[Row], variant_names: List[str], n_cases: int,
                       context: int) -> List[Row]:
    """One failing row ("every case") per variant of ``family`` that ``rows`` show
    unsupported on every case (:func:`.report.never_checked`; the run's bitwise references,
    added for the others' byte comparison, excepted)."""
    registry = _registry.variants(family)
    refs = {registry[n].bitwise_reference for n in variant_names} - {None}
    out = []
    for name in never_checked(rows, exempt=refs):
        row = Row(family, NEVER_CHECKED_CASE, "-", name, context)
        row.fail(f"never checked: unsupported on every case of this run ({n_cases} cases); "
                 f"screen it on cases it supports or leave it out of --variants")
        out.append(row)
    return out


def expected_steps(specs: List[AttentionCaseSpec], n_variants: int) -> int:
    return sum((len(LENGTH_STATES) if s.length_states else 1) * n_variants for s in specs)

