"""GDN prefill, ``chunked`` family, optimised variant ``chunked_wsp``: bit-identical to the
frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input).

It is :mod:`.chunked_wsr` (chunked_split's pre-pass and scratch, chunked_wsr's warp-
specialised state pass with copies carried a phase ahead) whose staged output units load
each step's operands two steps ahead (:mod:`._split_state_wsp`, kernel ``gdn_wsp_state``).
Only the time at which a shared-memory word is read moves: every fma chain keeps its
operands, its order and its initial value, so the bits are chunked_wsr's, hence
chunked's.

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
from ._split_state_wsp import gdn_wsp_state_kernel

STATE_NAME = "gdn_wsp_state"

_state = jit_bounded(gdn_wsp_state_kernel, W.WS_LAUNCH_BOUNDS)


def prepare(plan: GdnPlan, stream) -> None:
    W.prepare_with(plan, stream, _state, "chunked_wsp", R.DEFAULT_THREADS, R.units_per_phase)


def run(plan: GdnPlan, stream) -> None:
    W.run_with(plan, stream, STATE_NAME, prepare)


VARIANT = _registry.register(_registry.Variant(
    name="chunked_wsp",
    family="gdn",
    description="chunked_wsr whose output units load each step's P^T word and vn float4 "
                "two steps before its fma (the chains unchanged)",
    contract="B (GDN prefill), chunked family: bit-identical to chunked",
    kernels=(_registry.KernelSpec(S.PREP_NAME, gdn_split_prep_kernel, S._prep_signatures()),
             _registry.KernelSpec(STATE_NAME, gdn_wsp_state_kernel, W._state_signatures(),
                                  launch_bounds=W.WS_LAUNCH_BOUNDS)),
    run=run,
    supports=S.supports,
    bitwise_reference="chunked",
    prepare=prepare,
))
