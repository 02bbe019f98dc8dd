"""GDN prefill, ``chunked`` family, optimised variant ``chunked_wsr``: bit-identical to the
frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input).

It is :mod:`.chunked_ws` (chunked_split's pre-pass and scratch, a warp-specialised state
pass) with the state pass of :mod:`._split_state_wsr`: the copy threads load each region
one phase before they store it and carry it in registers, so an L2 round trip is no longer
any phase's critical path; each output unit runs its two chains in one loop of the same
length for every lane; and with Kd / P^T staged and twelve-column items (the H200) the
compute tiles are twelve columns wide (kernel ``gdn_wsr_state``), so four compute warps,
one per SM sub-partition, cover both phases. None of this moves a rounding: every output,
state and intermediate value is computed by chunked_ws's (hence chunked_split's) fma
chain for it, in its order, on the same shared-memory values.

Knobs (plan time): those of :mod:`.chunked_ws`. Defaults (compute + copy threads): 128 +
256 with the twelve-column tiles; 192 + 192 with the four-column tiles and Kd / P^T staged
(192 phase-1 and 192 phase-2 units at K = 128, w = 12); 288 + 96 when they are not staged
(sm_70's 96 KB).
"""
from __future__ import annotations

from .. import _registry
from .._compat import SIMULATOR, cuda
from . import chunked_split as S
from . import chunked_ws as W
from ._common import C, GdnPlan
from ._split_prep import gdn_split_prep_kernel
from ._split_state_wsr import gdn_wsr_state_kernel, gdn_wsr_state_kernel_narrow

STATE_NAME = "gdn_wsr_state"


def _jit(fn):
    return cuda.jit(fn) if SIMULATOR else cuda.jit(fn, launch_bounds=W.WS_LAUNCH_BOUNDS)


_state_wide = _jit(gdn_wsr_state_kernel)
_state_narrow = _jit(gdn_wsr_state_kernel_narrow)


def wide_tiles(w: int, stage_kp: bool) -> bool:
    """The twelve-column tiles: Kd / P^T staged and twelve-column items (a narrower last
    item of a value head runs them too, storing only its columns)."""
    return bool(stage_kp) and w == 12


def pick_kernel(w: int, stage_kp: bool):
    return _state_wide if wide_tiles(w, stage_kp) else _state_narrow


def default_threads(w: int, stage_kp: bool):
    """(compute, copy) threads: one compute thread per unit of the larger phase, the rest
    of the 384 copy (module docstring)."""
    if wide_tiles(w, stage_kp):
        return 128, 256
    return (192, 192) if stage_kp else (288, 96)


def units_per_phase(K: int, w: int, stage_kp: bool) -> int:
    """The larger phase's unit count. Twelve-column tiles: 2 C one-row phase-1 units;
    K / 2 two-row state units plus C / 2 output units. Four-column tiles: C x w / 4 two-row
    phase-1 units; K / 4 (staged Kd) or K / 2 state units plus C / 2 output units per
    column group."""
    if wide_tiles(w, stage_kp):
        return max(2 * C, K // 2 + C // 2)
    ncg = w // 4
    return max(C * ncg, ((K // 4 if stage_kp else K // 2) + C // 2) * ncg)


def prepare(plan: GdnPlan, stream) -> None:
    W.prepare_with(plan, stream, pick_kernel, "chunked_wsr", default_threads, units_per_phase)


def run(plan: GdnPlan, stream) -> None:
    W.run_with(plan, stream, STATE_NAME, prepare)


VARIANT = _registry.register(_registry.Variant(
    name="chunked_wsr",
    family="gdn",
    description="chunked_ws with copies loaded a phase before they are stored (carried in "
                "registers across the barrier) and one equal-length loop per output unit",
    contract="B (GDN prefill), chunked family: bit-identical to chunked",
    kernels=(_registry.KernelSpec(S.PREP_NAME, gdn_split_prep_kernel, S._prep_signatures()),
             _registry.KernelSpec(STATE_NAME, gdn_wsr_state_kernel, W._state_signatures(),
                                  launch_bounds=W.WS_LAUNCH_BOUNDS),
             _registry.KernelSpec(STATE_NAME + "_narrow", gdn_wsr_state_kernel_narrow,
                                  W._state_signatures(), launch_bounds=W.WS_LAUNCH_BOUNDS)),
    run=run,
    supports=S.supports,
    bitwise_reference="chunked",
    prepare=prepare,
))
