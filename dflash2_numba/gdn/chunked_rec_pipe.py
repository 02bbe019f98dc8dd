"""GDN prefill, ``chunked`` family, optimised variant ``chunked_rec_pipe``: bit-identical to
the frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input).

:mod:`.chunked_rec`'s three kernels with another output kernel: ``gdn_chunk_out_wide``
(:mod:`._chunk_output_wide`, the default) or ``gdn_chunk_out_pipe``
(:mod:`._chunk_output_pipe`) streams each CTA's operands through two shared-memory buffers
of 16-row slabs, the next slab's global loads in flight while the current one is
computed, where ``gdn_chunk_out`` stages 64 rows at a time between barriers. The pre-pass
and the recurrence are chunked_rec's, with its knobs (``DFLASH2_GDN_REC_THREADS``,
``DFLASH2_GDN_REC_ROWS``).

Why the bits are chunked's: the pre-pass and the recurrence are chunked_rec's kernels; the
output kernel runs ``gdn_chunk_out``'s chains step for step (its module docstring).

Below compute capability 8.0 the variant launches ``gdn_chunk_out`` instead (it is then
chunked_rec): ptxas 12.9 gives ``gdn_chunk_out_pipe`` 4 B of spill stores at sm_70 under
its (256, 2) launch bounds, and the spill-free form tried (slab addresses advanced by adds,
``b3353fe``) was not bit-identical on the H200 (``bench/RESULTS.md``, GDN eighth round).

Knob (read and checked at plan time, :mod:`._knobs`; a value not accepted is refused with a
``ValueError`` naming the variable before any launch): ``DFLASH2_GDN_OUT_TILE`` = ``8x8``
(``gdn_chunk_out_wide``, the default, also when unset: an 8 x 8 register tile and ``V``
threads a CTA) or ``4x8`` (``gdn_chunk_out_pipe``: a 4 x 8 tile and ``2 V`` threads, the
default until the fifteenth round, kept as the measured alternative). Both run the same
chains; the 8 x 8 tile took the output kernel from 1.37 to 1.22 ms at T = 65536 on the
H200 (``bench/RESULTS.md``, GDN fifteenth round). Both are compute capability 8.0 on;
below it the knob is checked but not used.
"""
from __future__ import annotations

from .. import _registry
from .._compat import device_cc_at_least, jit_bounded
from .._dynshared import require_shared
from . import _knobs as KN
from . import chunked_rec as RC
from ._chunk_output import out_floats, out_threads
from ._chunk_output_pipe import gdn_chunk_out_pipe_kernel, pipe_fits, pipe_floats
from ._chunk_output_wide import gdn_chunk_out_wide_kernel, wide_fits, wide_floats, wide_threads
from ._common import GdnPlan
from .chunked_smprep import PREP

OUT_NAME = "gdn_chunk_out_pipe"
OUT_LAUNCH_BOUNDS = RC.OUT_LAUNCH_BOUNDS
PIPE_MIN_CC = (8, 0)         # (sm_70: gdn_chunk_out, module docstring)

WIDE_NAME = "gdn_chunk_out_wide"
WIDE_LAUNCH_BOUNDS = (128, 3)
DEFAULT_OUT_TILE = "8x8"    # bench/RESULTS.md, GDN fifteenth round

# the output kernels a plan may launch, by name: (kernel function, launch bounds, dynamic
# shared floats (K, V), threads a CTA (V)); chunked_overlap compiles its own copies from it
OUT_FORMS = {
    OUT_NAME: (gdn_chunk_out_pipe_kernel, OUT_LAUNCH_BOUNDS, pipe_floats, out_threads),
    WIDE_NAME: (gdn_chunk_out_wide_kernel, WIDE_LAUNCH_BOUNDS, wide_floats, wide_threads),
    RC.OUT_NAME: (RC.gdn_chunk_out_kernel, RC.OUT_LAUNCH_BOUNDS, out_floats, out_threads),
}
TILE_KERNELS = {"4x8": OUT_NAME, "8x8": WIDE_NAME}      # DFLASH2_GDN_OUT_TILE -> kernel
OUT_TILES = tuple(TILE_KERNELS)

_out = jit_bounded(gdn_chunk_out_pipe_kernel, OUT_LAUNCH_BOUNDS)
_wide = jit_bounded(gdn_chunk_out_wide_kernel, WIDE_LAUNCH_BOUNDS)
_STREAMED = {OUT_NAME: _out, WIDE_NAME: _wide}


def out_tile() -> str:
    """``DFLASH2_GDN_OUT_TILE``: the output kernel's register tile, ``8x8``
    (``gdn_chunk_out_wide``, :data:`DEFAULT_OUT_TILE`) or ``4x8`` (``gdn_chunk_out_pipe``)."""
    return KN.choice(KN.OUT_TILE, DEFAULT_OUT_TILE, OUT_TILES)


def supports(plan: GdnPlan) -> None:
    """chunked_rec's shapes; a slab's float4 fit the threads' registers (every V that
    chunked_split supports) and the buffers fit the device's shared memory."""
    RC.supports(plan)
    if not (pipe_fits(plan.V) and wide_fits(plan.V)):
        raise _registry.UnsupportedShape(f"chunked_rec_pipe: V={plan.V} slabs exceed a thread's loads")
    require_shared("chunked_rec_pipe:",
                   4 * max(pipe_floats(plan.K, plan.V), wide_floats(plan.K, plan.V)))


def pipe_here() -> bool:
    """Whether the current device runs a streamed output kernel (``gdn_chunk_out_wide`` or
    ``gdn_chunk_out_pipe``: compute capability 8.0 on, and the simulator) rather than
    ``gdn_chunk_out``."""
    return device_cc_at_least(PIPE_MIN_CC)


def out_kernel_name() -> str:
    """The output kernel a plan launches here: ``gdn_chunk_out`` below :data:`PIPE_MIN_CC`
    (the knob is checked but not used), else the kernel of :func:`out_tile`
    (:data:`TILE_KERNELS`)."""
    tile = out_tile()
    return TILE_KERNELS[tile] if pipe_here() else RC.OUT_NAME


def prepare(plan: GdnPlan, stream) -> None:
    """chunked_rec's plan with this variant's output kernel (:func:`out_kernel_name`)."""
    name = out_kernel_name()
    if name == RC.OUT_NAME:
        RC.prepare(plan, stream)
        return
    _fn, _bounds, floats, threads = OUT_FORMS[name]
    RC.prepare(plan, stream, out=(name, _STREAMED[name], 4 * floats(plan.K, plan.V),
                                  threads(plan.V)))


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
             _registry.KernelSpec(WIDE_NAME, gdn_chunk_out_wide_kernel, RC._out_signatures(),
                                  launch_bounds=WIDE_LAUNCH_BOUNDS, min_cc=PIPE_MIN_CC),
             _registry.KernelSpec(RC.OUT_NAME, RC.gdn_chunk_out_kernel, RC._out_signatures(),
                                  launch_bounds=RC.OUT_LAUNCH_BOUNDS,
                                  max_cc=(PIPE_MIN_CC[0] - 1, 99))),
    run=RC.make_run(prepare),
    supports=supports,
    bitwise_reference="chunked",
    prepare=prepare,
    flat_inputs=True,         # the pre-pass reads q, k, v, g, beta through flat views
))
