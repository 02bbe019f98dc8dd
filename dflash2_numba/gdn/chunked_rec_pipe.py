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
"""
from __future__ import annotations

from .. import _registry
from .._compat import jit_bounded
from .._dynshared import max_dynamic_shared
from . import chunked_rec as RC
from ._chunk_output_pipe import gdn_chunk_out_pipe_kernel, pipe_fits, pipe_floats
from ._common import GdnPlan
from .chunked_smprep import PREP

OUT_NAME = "gdn_chunk_out_pipe"
OUT_LAUNCH_BOUNDS = RC.OUT_LAUNCH_BOUNDS

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


def prepare(plan: GdnPlan, stream) -> None:
    """chunked_rec's plan with this variant's output kernel."""
    RC.prepare(plan, stream, out=(OUT_NAME, _out, 4 * pipe_floats(plan.K, plan.V)))


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
                                  launch_bounds=OUT_LAUNCH_BOUNDS)),
    run=RC.make_run(prepare),
    supports=supports,
    bitwise_reference="chunked",
    prepare=prepare,
))
