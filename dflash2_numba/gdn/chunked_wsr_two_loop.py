"""GDN prefill, ``chunked`` family, optimised variant ``chunked_wsr_two_loop``: bit-identical
to the frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every
input).

It is :mod:`.chunked_wsr` (chunked_split's pre-pass and scratch, chunked_wsr's warp-
specialised state pass with copies carried a phase ahead) whose staged output units run
their two chains in two plain loops instead of one loop with a row switch
(:mod:`._split_state_two_loop`, kernel ``gdn_wsr_two_loop_state``). Which thread runs
which chain, and when, is all that changes: every fma chain keeps its operands, its order
and its initial value, so the bits are chunked_wsr's, hence chunked's.

Knobs (plan time) and thread counts: those of :mod:`.chunked_wsr`.
"""
from __future__ import annotations

from . import chunked_ws as W
from . import chunked_wsr as R
from ._split_state_two_loop import gdn_wsr_two_loop_state_kernel

STATE_NAME = "gdn_wsr_two_loop_state"

VARIANT = W.register_ws_variant(
    "chunked_wsr_two_loop", STATE_NAME, gdn_wsr_two_loop_state_kernel,
    "chunked_wsr whose output units run row p's chain and row L-1-p's in two plain loops "
    "(no per-step row switch; the chains unchanged)",
    R.DEFAULT_THREADS, R.units_per_phase)
