"""GDN prefill, ``chunked`` family, optimised variant ``chunked_smprep``: bit-identical to the
frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input).

It is :mod:`.chunked_wsr_two_loop` (the warp-specialised state pass whose output units run
two plain loops) with the pre-pass of :mod:`._prep_smem` (kernel ``gdn_smem_prep``) in
place of chunked_split's: the chunk's q and k are read from global memory once and kept in
shared memory, so G / S and every value head's X / Kd read them there instead of reading k
three more times and kn^T / qs^T from the global scratch. Only where values live and which
thread computes them change (see :mod:`._prep_smem`); every value keeps its rounding, so
the scratch the state pass reads holds chunked_split's bits and the output is chunked's.

Knobs (read and checked at plan time, :mod:`._knobs`; a value not accepted is refused with a
``ValueError`` naming the variable before any launch): those of :mod:`.chunked_wsr`, and
``DFLASH2_GDN_SMPREP_THREADS`` (pre-pass threads a CTA: a multiple of 32 from 32 to 256;
0 or unset: 256, two CTAs of 87.8 KB of shared memory sharing an H200 SM, sixteen warps;
the simulator's default is 64). The same pre-pass, with this knob, is chunked_rec's and
chunked_rec_pipe's (and on the simulator chunked_overlap's and chunked_ahead's).
"""
from __future__ import annotations

from .._compat import SIMULATOR, jit_bounded
from .._dynshared import require_shared
from . import _knobs as KN
from . import chunked_split as S
from . import chunked_ws as W
from . import chunked_wsr as R
from ._common import GdnPlan
from ._prep_smem import gdn_smem_prep_kernel, smem_floats
from ._split_state_two_loop import gdn_wsr_two_loop_state_kernel

PREP_NAME = "gdn_smem_prep"
STATE_NAME = "gdn_wsr_two_loop_state"     # chunked_wsr_two_loop's kernel
MAX_PREP_THREADS = 256
PREP_LAUNCH_BOUNDS = (MAX_PREP_THREADS, 2)     # two CTAs an SM: at most 128 registers
SIM_PREP_THREADS = 64
PREP_THREADS = None    # overrides DFLASH2_GDN_SMPREP_THREADS when set (tests, bench); None: the env


def prep_threads() -> int:
    """Pre-pass threads a CTA: ``DFLASH2_GDN_SMPREP_THREADS`` (or :data:`PREP_THREADS`),
    whole warps from 32 to 256, checked (``ValueError`` naming the variable), else 256 (64
    on the simulator)."""
    n = KN.warps(KN.SMPREP_THREADS, 0, MAX_PREP_THREADS, override=PREP_THREADS)
    return n or (SIM_PREP_THREADS if SIMULATOR else MAX_PREP_THREADS)


def supports(plan: GdnPlan) -> None:
    S.supports(plan)
    require_shared("chunked_smprep: the pre-pass", 4 * smem_floats(plan.K))


PREP = W.PrePass(PREP_NAME, gdn_smem_prep_kernel,
                 jit_bounded(gdn_smem_prep_kernel, PREP_LAUNCH_BOUNDS), prep_threads,
                 lambda K: 4 * smem_floats(K), PREP_LAUNCH_BOUNDS)

VARIANT = W.register_ws_variant(
    "chunked_smprep", STATE_NAME, gdn_wsr_two_loop_state_kernel,
    "chunked_wsr_two_loop's state pass after a pre-pass that keeps the chunk's q / k in "
    "shared memory (read from global memory once; G / S, X and Kd from shared memory)",
    R.DEFAULT_THREADS, R.units_per_phase, prep=PREP, supports=supports)
