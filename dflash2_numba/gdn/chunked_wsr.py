"""GDN prefill, ``chunked`` family, optimised variant ``chunked_wsr``: bit-identical to the
frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input).

It is :mod:`.chunked_ws` (chunked_split's pre-pass and scratch, a warp-specialised state
pass) with the state pass of :mod:`._split_state_wsr` (kernel ``gdn_wsr_state``): the copy
threads load each region one phase before they store it and carry it in registers, so an
L2 round trip is no longer any phase's critical path, and each output unit runs its two
chains in one loop of the same length for every lane. Neither change moves a rounding:
the compute threads run chunked_ws's (hence chunked_split's) fma chains, each in its own
order, on the same shared-memory values.

Knobs (plan time): those of :mod:`.chunked_ws`. Defaults: 192 compute + 192 copy threads
when Kd / P^T are staged (192 phase-1 and 192 phase-2 units at K = 128, w = 12: every
compute thread has one unit in each phase), 288 + 96 when they are not (sm_70's 96 KB).
"""
from __future__ import annotations

from .. import _registry
from .._compat import jit_bounded
from . import chunked_split as S
from . import chunked_ws as W
from ._common import C, GdnPlan
from ._split_prep import gdn_split_prep_kernel
from ._split_state_wsr import gdn_wsr_state_kernel

STATE_NAME = "gdn_wsr_state"
DEFAULT_THREADS = {True: (192, 192), False: (288, 96)}

_state = jit_bounded(gdn_wsr_state_kernel, W.WS_LAUNCH_BOUNDS)


def units_per_phase(K: int, w: int, stage_kp: bool) -> int:
    """The larger phase's unit count: phase 1 has C x w / 4 two-row units, phase 2 has
    K / 4 (staged Kd) or K / 2 state units plus C / 2 output units per column group."""
    ncg = w // 4
    return max(C * ncg, ((K // 4 if stage_kp else K // 2) + C // 2) * ncg)


def prepare(plan: GdnPlan, stream) -> None:
    W.prepare_with(plan, stream, _state, "chunked_wsr", DEFAULT_THREADS, units_per_phase)


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
                                  launch_bounds=W.WS_LAUNCH_BOUNDS)),
    run=run,
    supports=S.supports,
    bitwise_reference="chunked",
    prepare=prepare,
))
