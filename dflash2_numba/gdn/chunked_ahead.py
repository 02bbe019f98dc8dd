"""GDN prefill, ``chunked`` family, optimised variant ``chunked_ahead``: bit-identical to
the frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input).

:mod:`.chunked_overlap`'s schedule and kernels (segments of the chunk slots, the pre-pass
of later segments beside the recurrence, the output once at the end), with its recurrence
kernel ``gdn_rec_state`` replaced by ``gdn_rec_ahead_state`` (:mod:`._split_state_ahead`):
the same item, copy warps and barriers, with the compute warps' shared loads issued
further ahead of the fma that use them (phase 1's two-row units two passes ahead, phase
2's half-row units a step ahead).

Why the bits are chunked's: ``gdn_rec_ahead_state`` runs ``gdn_rec_state``'s chains (same
operands, order and initial values; only when each load issues changes), and every other
launch is chunked_overlap's own.

Knobs: chunked_overlap's and chunked_rec's (``DFLASH2_GDN_REC_ROWS`` picks the unit forms
as there: the two-row phase-1 units, placed or not, and the half-row phase-2 units are the
ahead forms; the one-row and half-row phase-1 units and the two- / four-row phase-2 units
are ``gdn_rec_state``'s code). Capture a call in a CUDA graph, as for chunked_overlap.

Measured on the H200 (``bench/RESULTS.md``, GDN seventeenth round): 6.268 ms at T = 65536
under graph replay against chunked_overlap's 6.405; alone the forms cut the compute phases
by 17 %, beside the copy warps by 2 %. Those were contracted builds (every GPU build before
session 40 fused ``a*b + c``); built as the contract says, 6.453 ms on an H100 (fla 2.443 in
the same run; ``bench/RESULTS.md``, "Validation, session 40").
"""
from __future__ import annotations

from .. import _registry
from .._compat import jit_bounded
from . import chunked_overlap as OV
from . import chunked_rec as RC
from ._common import GdnPlan
from ._split_state_ahead import gdn_rec_ahead_state_kernel

STATE_NAME = "gdn_rec_ahead_state"

_state = jit_bounded(gdn_rec_ahead_state_kernel, RC.STATE_LAUNCH_BOUNDS)


def supports(plan: GdnPlan) -> None:
    OV.supports(plan)


def prepare(plan: GdnPlan, stream) -> None:
    """chunked_overlap's plan with this variant's recurrence kernel."""
    OV.prepare(plan, stream, state=_state, state_name=STATE_NAME)


def run(plan: GdnPlan, stream, around=OV._direct, outputs: bool = True) -> None:
    """chunked_overlap's call (:func:`.chunked_overlap.run`: ``around`` and ``outputs`` as
    there) on this variant's plan."""
    OV.run(plan, stream, around, outputs, plan_with=prepare)


def _kernels():
    """chunked_overlap's kernel list with ``gdn_rec_state`` replaced by this variant's."""
    ahead = _registry.KernelSpec(STATE_NAME, gdn_rec_ahead_state_kernel,
                                 RC._state_signatures(), launch_bounds=RC.STATE_LAUNCH_BOUNDS)
    return tuple(ahead if k.name == RC.STATE_NAME else k for k in OV.VARIANT.kernels)


VARIANT = _registry.register(_registry.Variant(
    name="chunked_ahead",
    family="gdn",
    description="chunked_overlap with the recurrence's shared loads issued further ahead "
                "(phase 1's two-row units two passes ahead, phase 2's half-row units a "
                "step ahead): same chains",
    contract="B (GDN prefill), chunked family: bit-identical to chunked",
    kernels=_kernels(),
    run=run,
    supports=supports,
    bitwise_reference="chunked",
    prepare=prepare,
    flat_inputs=True,         # the pre-pass reads q, k, v, g, beta through flat views
))
