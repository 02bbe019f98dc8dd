"""The per-variant steps both screen families share: launching a variant with its failures
recorded on the row, the route audit (only the variant's own kernels ran), and the byte
comparison of each variant's results with its ``bitwise_reference``, and the FP16 output's
checks against the oracle."""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional

import oracle

from .. import _registry
from ..contract import FP32_REL_L2_BOUND


def launch_variant(row, plan_and_launch: Callable[[], object]) -> Optional[object]:
    """``plan_and_launch()`` with the route counters reset first. A shape the variant does not
    support marks ``row`` unsupported; any other exception marks it an error of this
    variant (not of the screen). Returns what the call returned, or None when it failed."""
    try:
        _registry.route_counters(reset=True)
        return plan_and_launch()
    except _registry.UnsupportedShape as e:
        row.status = "unsupported"
        row.problems.append(str(e))
    except Exception as e:  # noqa: BLE001
        row.status = "error"
        row.problems.append(f"{type(e).__name__}: {e}")
    return None


def audit_route(row, variant) -> None:
    """Which kernels ran since :func:`launch_variant`: some, and only the variant's own."""
    counts = _registry.route_counters(reset=True)
    own = {k.name for k in variant.kernels}
    row.route = ", ".join(f"{k}x{n}" for k, n in sorted(counts.items()))
    row.route_ok = bool(counts) and set(counts) <= own
    if not row.route_ok:
        row.fail(f"route audit: launched {sorted(counts)}, own kernels {sorted(own)}")


def bitwise_checks(rows: List, snaps: Dict[str, dict], registry, keys: Iterable[str]) -> None:
    """Each row whose variant names a ``bitwise_reference``: every array in ``keys`` of its
    snapshot must equal the reference's byte for byte (``oracle.first_mismatch``); also the
    ratio of its FP32 error to the reference's."""
    errs = {r.variant: r.rel_l2_fp32 for r in rows}
    for r in rows:
        if r.variant not in snaps:
            continue
        ref_name = registry[r.variant].bitwise_reference
        if ref_name is None:
            continue
        ref_snap = snaps.get(ref_name)
        if ref_snap is None:
            r.fail(f"bitwise reference {ref_name!r} did not run")
            continue
        mism = [f"{key}: {m}" for key in keys
                if (m := oracle.first_mismatch(snaps[r.variant][key], ref_snap[key])) is not None]
        r.bitwise = not mism
        if mism:
            r.mismatch = mism[0]
            r.fail(f"not byte-identical to {ref_name}: " + "; ".join(mism))
        base = errs.get(ref_name)
        if base and r.rel_l2_fp32 is not None:
            r.ratio_to_frozen = r.rel_l2_fp32 / base


def fp16_oracle_problems(o16, ref, fp32_bound: float = FP32_REL_L2_BOUND) -> List[str]:
    """What is wrong with an FP16 output against the FP64 oracle ``ref`` (empty: nothing),
    judged from the FP32 bound ``b`` alone, never from the FP32 output (that would pass any
    FP16 output that is the rounding of an FP32 output, right or wrong): the FP16 output is
    one RNE rounding of an FP32 result ``y`` within ``b`` relative L2 and ``b * max|ref|``
    per element (both screens check both of the FP32 output). The rounding moves an element
    by at most ``2**-11 |y|`` (``2**-25`` among the subnormals), so the relative L2 is at
    most ``oracle.fp16_rel_l2_bound``: ``2**-11 (1 + b) + b`` and the subnormal term, the
    README's "2**-11 + 1e-5" to first order. RNE keeps ``f16(y)`` at or above the lower end
    of ``y``'s binade, so ``ulp16(out16) / 2`` covers ``|f16(y) - y|``; with the triangle
    inequality each element is within ``ulp16(out16) / 2 + b max|ref|`` of ``ref``
    (``oracle.fp16_excess <= 0``)."""
    out = []
    rel, bound16 = oracle.rel_l2(o16, ref), oracle.fp16_rel_l2_bound(ref, fp32_bound)
    if not rel <= bound16:
        out.append(f"FP16 output rel L2 {rel:.3e} > {bound16:.3e}")
    excess = oracle.fp16_excess(o16, ref, oracle.max_abs_bound(ref, fp32_bound))
    if not excess <= 0:
        out.append(f"FP16 output {excess:.3e} farther from the oracle than one FP16 rounding "
                   "of a bounded FP32 result")
    return out
