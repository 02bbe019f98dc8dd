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

from .. import _registry
from .._compat import jit_bounded
from . import chunked_split as S
from . import chunked_ws as W
from . import chunked_wsr as R
from ._common import GdnPlan
from ._split_prep import gdn_split_prep_kernel
from ._split_state_two_loop import gdn_wsr_two_loop_state_kernel

STATE_NAME = "gdn_wsr_two_loop_state"

_state = jit_bounded(gdn_wsr_two_loop_state_kernel, W.WS_LAUNCH_BOUNDS)


def prepare(plan: GdnPlan, stream) -> None:
    W.prepare_with(plan, stream, _state, "chunked_wsr_two_loop", R.DEFAULT_THREADS,
                   R.units_per_phase)


def run(plan: GdnPlan, stream) -> None:
    W.run_with(plan, stream, STATE_NAME, prepare)


VARIANT = _registry.register(_registry.Variant(
    name="chunked_wsr_two_loop",
    family="gdn",
    description="chunked_wsr whose output units run row p's chain and row L-1-p's in two "
                "plain loops (no per-step row switch; the chains unchanged)",
    contract="B (GDN prefill), chunked family: bit-identical to chunked",
    kernels=(_registry.KernelSpec(S.PREP_NAME, gdn_split_prep_kernel, S._prep_signatures()),
             _registry.KernelSpec(STATE_NAME, gdn_wsr_two_loop_state_kernel,
                                  W._state_signatures(), launch_bounds=W.WS_LAUNCH_BOUNDS)),
    run=run,
    supports=S.supports,
    bitwise_reference="chunked",
    prepare=prepare,
))
