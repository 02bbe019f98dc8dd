"""GDN prefill, ``chunked`` family, optimised variant ``chunked_rec_pipe``: bit-identical to
the frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input).

:mod:`.chunked_rec`'s three kernels with another output kernel: ``gdn_chunk_out_pipe``
(:mod:`._chunk_output_pipe`) streams each CTA's operands through two shared-memory buffers
of 16-row slabs, the next slab's global loads in flight while the current one is
computed, where ``gdn_chunk_out`` stages 64 rows at a time between barriers. The pre-pass
and the recurrence are chunked_rec's, with its knobs (``DFLASH2_GDN_REC_THREADS``,
``_ROWS``, ``_MAP``).

Why the bits are chunked's: the pre-pass and the recurrence are chunked_rec's kernels; the
output kernel runs ``gdn_chunk_out``'s chains step for step (its module docstring).

Below compute capability 8.0 the variant launches ``gdn_chunk_out`` instead (it is then
chunked_rec): ptxas 12.9 gives ``gdn_chunk_out_pipe`` 4 B of spill stores at sm_70 under
its (256, 2) launch bounds, and the spill-free form tried (slab addresses advanced by adds,
``b3353fe``) was not bit-identical on the H200 (``bench/RESULTS.md``, GDN eighth round).
"""
from __future__ import annotations

from .. import _registry
from .._compat import device_cc_at_least, jit_bounded
from .._dynshared import max_dynamic_shared
from . import chunked_rec as RC
from ._chunk_output_pipe import gdn_chunk_out_pipe_kernel, pipe_fits, pipe_floats
from ._common import GdnPlan
from .chunked_smprep import PREP

OUT_NAME = "gdn_chunk_out_pipe"
OUT_LAUNCH_BOUNDS = RC.OUT_LAUNCH_BOUNDS
PIPE_MIN_CC = (8, 0)         # (sm_70: gdn_chunk_out, module docstring)

_out = jit_bounded(gdn_chunk_out_pipe_kernel, OUT_LAUNCH_BOUNDS)


def supports(plan: GdnPlan) -> None:
    """chunked_rec's shapes; a slab's float4 fit the threads' registers (every V that
    chunked_split supports) and the buffers fit the device's shared memory."""
    RC.supports(plan)
    if not pipe_fits(plan.V):
        raise _registry.UnsupportedShape(f"chunked_rec_pipe: V={plan.V} slabs exceed a thread's loads")
    need = 4 * pipe_floats(plan.K, plan.V)
    if need > max_dynamic_shared():
        raise _registry.UnsupportedShape(
            f"chunked_rec_pipe: needs {need} bytes of shared memory a block, the device "
            f"allows {max_dynamic_shared()}")


def pipe_here() -> bool:
    """Whether the current device runs ``gdn_chunk_out_pipe`` (compute capability 8.0 on,
    and the simulator) rather than ``gdn_chunk_out``."""
    return device_cc_at_least(PIPE_MIN_CC)


def prepare(plan: GdnPlan, stream) -> None:
    """chunked_rec's plan with this variant's output kernel (``gdn_chunk_out`` below
    :data:`PIPE_MIN_CC`)."""
    if pipe_here():
        RC.prepare(plan, stream, out=(OUT_NAME, _out, 4 * pipe_floats(plan.K, plan.V)))
    else:
        RC.prepare(plan, stream)


VARIANT = _registry.register(_registry.Variant(
    name="chunked_rec_pipe",
    family="gdn",
    description="chunked_rec with an output kernel that streams its operands through two "
                "shared-memory buffers (next slab's loads in flight during the current one)",
    contract="B (GDN prefill), chunked family: bit-identical to chunked",
    kernels=(PREP.spec(),
             _registry.KernelSpec(RC.STATE_NAME, RC.gdn_rec_state_kernel,
                                  RC._state_signatures(), launch_bounds=RC.STATE_LAUNCH_BOUNDS),
             _registry.KernelSpec(OUT_NAME, gdn_chunk_out_pipe_kernel, RC._out_signatures(),
                                  launch_bounds=OUT_LAUNCH_BOUNDS, min_cc=PIPE_MIN_CC),
             _registry.KernelSpec(RC.OUT_NAME, RC.gdn_chunk_out_kernel, RC._out_signatures(),
                                  launch_bounds=RC.OUT_LAUNCH_BOUNDS,
                                  max_cc=(PIPE_MIN_CC[0] - 1, 99))),
    run=RC.make_run(prepare),
    supports=supports,
    bitwise_reference="chunked",
    prepare=prepare,
))
