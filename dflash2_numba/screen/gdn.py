"""GDN screen: every registered GDN variant against the FP64 oracle (output before and after
the cast, final state) and, byte for byte, against its family's frozen kernel.

Each variant runs twice per case, on its own device copies of the inputs (which, with
``state_indices``, must come back unchanged): once in the plain form with an FP32 output and
a fresh final state, once in the server form with the input-dtype output and the state
written in place into a sentinel-filled state cache whose unnamed slots (guards around and
between the named ones, named in a non-ascending order) must keep the sentinel and whose
named slots must equal the plain form's state. Both outputs and the plain form's final state
are the screen's own buffers, sentinel-filled before the launches (a word a kernel never
writes shows the sentinel, not what the allocator left there) and guarded on each side by
sentinel elements that must stay untouched: one token's whole output row (``HV * V``
elements) around each output, one sequence's whole state (``HV * K * V``) around the final
state (:func:`guard_elements`).

Against the oracle: the FP32 output and the final state within ``FP32_REL_BOUND`` relative
L2 and within ``FP32_REL_BOUND * max|ref|`` per element (a NaN fails both), and an FP16
output (FP16 inputs) within what one FP16 rounding of such a result allows
(:func:`fp16_oracle_problems`), besides being the RNE rounding of the FP32 output.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

import oracle

from .. import _registry
from .._compat import cuda
from ..contract import SENTINEL
from ..gdn.api import plan_gdn
from ..workspace import GuardedBuffer
from .attention import FP32_REL_BOUND, Row, family_rows, time_launches
from .cases import GdnCaseSpec
from .variant_steps import audit_route, bitwise_checks, fp16_oracle_problems, launch_variant


def _host(x):
    """numpy view of a result (device arrays are copied back)."""
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def guard_elements(shape, what: str) -> int:
    """Sentinel elements on each side of a screened buffer of ``shape``: an output
    ``[B, T, HV, V]`` gets one token's row (``HV * V``: at least one ``V`` row of every
    head), a final state ``[N, HV, K, V]`` one sequence's state (``HV * K * V``), so a write
    one token or one sequence before or past the buffer lands in its guard."""
    if what == "output":
        return int(np.prod(shape[2:]))
    if what == "state":
        return int(np.prod(shape[1:]))
    raise ValueError(f"what: 'output' or 'state', got {what!r}")


def _guarded_output(shape, dtype, what: str = "output") -> GuardedBuffer:
    """A sentinel-filled buffer of ``shape`` with :func:`guard_elements` on each side."""
    out = GuardedBuffer(shape, dtype, guard_elements(shape, what))
    out.fill()
    return out


def _device_inputs(c: Dict) -> Dict:
    return {k: (cuda.to_device(v) if isinstance(v, np.ndarray) else v) for k, v in c.items()}


def screen_case(spec: GdnCaseSpec, variant_names: List[str], *, timing: bool,
                mp_check: bool = False, progress=None) -> List[Row]:
    c = spec.build()
    ref_o, ref_h = oracle.gdn_reference(c["q"], c["k"], c["v"], c["g"], c["beta"], scale=c["scale"],
                                        initial_state=c.get("initial_state"), cu_seqlens=c["cu_seqlens"],
                                        use_qk_l2norm=c["use_qk_l2norm"])
    if mp_check and spec.T <= 70:
        mp_o, mp_h = oracle.gdn_reference(c["q"], c["k"], c["v"], c["g"], c["beta"], scale=c["scale"],
                                          initial_state=c.get("initial_state"), cu_seqlens=c["cu_seqlens"],
                                          use_qk_l2norm=c["use_qk_l2norm"], precision="mp")
        gap = max(oracle.rel_l2(ref_o, mp_o), oracle.rel_l2(ref_h, mp_h))
        if not gap <= 1e-12:
            raise AssertionError(f"GDN oracle FP64 vs mpmath gap {gap:.3e} on {spec.name}")
    N, HV, K, V = ref_h.shape
    slots = 2 * N + 1                         # named slots 1, 3, 5, ...: guards around each
    # sequence n's slot: the odd slots in a seeded order (not ascending, where N > 1)
    idx = np.random.default_rng(spec.seed).permutation(np.arange(1, 2 * N, 2)).astype(np.int32)
    if N > 1 and np.all(np.diff(idx) > 0):
        idx = idx[::-1].copy()
    o_shape = (1, spec.T, HV, V)
    registry = _registry.variants("gdn")
    rows: List[Row] = []
    snaps: Dict[str, dict] = {}
    for name in variant_names:
        v = registry[name]
        row = Row("gdn", spec.name, "live", name, spec.T)
        rows.append(row)
        cache_host = np.full((slots, HV, K, V), SENTINEL, np.float32)
        cache_host[idx] = c["initial_state"] if "initial_state" in c else 0.0
        cache = cuda.to_device(cache_host)
        dev = _device_inputs(c)               # each variant its own copies: checked after
        out32 = _guarded_output(o_shape, np.float32)
        out_cast = _guarded_output(o_shape, c["q"].dtype)
        final = _guarded_output(ref_h.shape, np.float32, "state")
        dev_idx = cuda.to_device(idx)        # (checked unchanged, as the other inputs)
        common = dict(cu_seqlens=dev["cu_seqlens"], use_qk_l2norm=c["use_qk_l2norm"],
                      scale=c["scale"], variant=name)

        def plan_and_launch():
            plain = plan_gdn(dev["q"], dev["k"], dev["v"], dev["g"], dev["beta"],
                             initial_state=dev.get("initial_state"), out_dtype="float32",
                             out=out32.view, **common)
            # the plain form's final state goes to the screen's sentinel-filled, guarded
            # buffer, not the call's own (uninitialised memory: perhaps a freed buffer that
            # still holds the previous variant's state); swapped before the first launch
            plain._write_final_state_to(final.view)
            server = plan_gdn(dev["q"], dev["k"], dev["v"], dev["g"], dev["beta"],
                              state_cache=cache, state_indices=dev_idx,
                              out=out_cast.view, **common)
            plain.launch()
            server.launch()
            cuda.synchronize()
            return plain, server

        plans = launch_variant(row, plan_and_launch)
        if plans is None:
            continue
        plain, server = plans
        audit_route(row, v)
        o32, h = (_host(x) for x in plain.results())
        o_cast = _host(server.results()[0])
        cache_after = cache.copy_to_host()
        snap = dict(o32=o32, o=o_cast, state=h)
        snaps[name] = snap
        row.rel_l2_fp32 = oracle.rel_l2(o32, ref_o)
        row.max_abs_fp32 = oracle.max_abs(o32, ref_o)
        row.rel_l2_fp16 = oracle.rel_l2(o_cast, ref_o)
        row.max_abs_fp16 = oracle.max_abs(o_cast, ref_o)
        row.state_err = oracle.rel_l2(h, ref_h)
        if not row.rel_l2_fp32 <= FP32_REL_BOUND:
            row.fail(f"output rel L2 {row.rel_l2_fp32:.3e} > {FP32_REL_BOUND}")
        abs_bound = oracle.max_abs_bound(ref_o, FP32_REL_BOUND)
        if not row.max_abs_fp32 <= abs_bound:
            row.fail(f"output max abs {row.max_abs_fp32:.3e} > {FP32_REL_BOUND} x max|ref| "
                     f"= {abs_bound:.3e}")
        if not row.state_err <= FP32_REL_BOUND:
            row.fail(f"final state rel L2 {row.state_err:.3e} > {FP32_REL_BOUND}")
        state_abs = oracle.max_abs(h, ref_h)
        state_abs_bound = oracle.max_abs_bound(ref_h, FP32_REL_BOUND)
        if not state_abs <= state_abs_bound:
            row.fail(f"final state max abs {state_abs:.3e} > {FP32_REL_BOUND} x max|ref| "
                     f"= {state_abs_bound:.3e}")
        if o_cast.tobytes() != o32.astype(o_cast.dtype).tobytes():
            row.fail("the cast output is not the RNE rounding of the FP32 output")
        if o_cast.dtype == np.float16:        # (an FP32 cast output is o32's bytes: above)
            for msg in fp16_oracle_problems(o_cast, ref_o):
                row.fail(msg)
        guard = np.ones(slots, bool)
        guard[idx] = False
        slots_kept = bool(np.all(cache_after[guard] == SENTINEL))
        outs_kept = out32.guards_intact() and out_cast.guards_intact()
        state_kept = final.guards_intact()
        row.guards = slots_kept and outs_kept and state_kept
        if not slots_kept:
            row.fail("state cache: a slot that was not named changed")
        if not outs_kept:
            row.fail("output: a guard element around o was written")
        if not state_kept:
            row.fail("final state: a guard element around the plain form's final state "
                     "was written")
        inputs = [(key, host, dev[key]) for key, host in c.items() if isinstance(host, np.ndarray)]
        for key, host, arr in inputs + [("state_indices", idx, dev_idx)]:
            if _host(arr).tobytes() != host.tobytes():
                row.fail(f"input {key} was modified")
        if cache_after[idx].tobytes() != h.tobytes():
            row.fail("state cache: written slots differ from the plain form's final state")
        if timing:
            row.time_ms = time_launches(plain, repeats=5)
        if progress is not None:
            progress()
    bitwise_checks(rows, snaps, registry, ("o", "o32", "state"))
    return rows


def run_gdn(specs: List[GdnCaseSpec], variant_names: List[str], *, timing: bool,
            mp_check: bool = False, progress=None, case_rows=None) -> List[Row]:
    """Every case of ``specs`` for every variant; a variant unsupported on every case fails
    the run (:func:`.attention.family_rows`, as the attention screen's)."""
    return family_rows("gdn", screen_case, specs, variant_names, max((s.T for s in specs), default=0),
                       timing=timing, mp_check=mp_check, progress=progress, case_rows=case_rows)


def expected_steps(specs: List[GdnCaseSpec], n_variants: int) -> int:
    return len(specs) * n_variants
