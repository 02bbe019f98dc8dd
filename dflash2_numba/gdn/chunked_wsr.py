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

from . import chunked_ws as W
from ._common import C
from ._split_state_wsr import gdn_wsr_state_kernel

STATE_NAME = "gdn_wsr_state"
DEFAULT_THREADS = {True: (192, 192), False: (288, 96)}


def units_per_phase(K: int, w: int, stage_kp: bool) -> int:
    """The larger phase's unit count: phase 1 has C x w / 4 two-row units, phase 2 has
    K / 4 (staged Kd) or K / 2 state units plus C / 2 output units per column group."""
    ncg = w // 4
    return max(C * ncg, ((K // 4 if stage_kp else K // 2) + C // 2) * ncg)


VARIANT = W.register_ws_variant(
    "chunked_wsr", STATE_NAME, gdn_wsr_state_kernel,
    "chunked_ws with copies loaded a phase before they are stored (carried in registers "
    "across the barrier) and one equal-length loop per output unit",
    DEFAULT_THREADS, units_per_phase)
