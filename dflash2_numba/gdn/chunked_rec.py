"""GDN prefill, ``chunked`` family, optimised variant ``chunked_rec``: bit-identical to the
frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input).

Three kernels: the pre-pass of :mod:`.chunked_smprep` (``gdn_smem_prep``, steps 1-5 for
every chunk at once), a sequential pass that runs only the recurrence (``gdn_rec_state``,
:mod:`._split_state_rec`: chunked's steps 6 and 8, ``vn = U - W h`` and the state update,
writing each chunk's start state and vn), and a parallel output kernel
(``gdn_chunk_out``, :mod:`._chunk_output`: chunked's step 7 for every chunk and value head
at once). The output is off the recurrence, so the sequential pass no longer computes
``qh`` (half of phase 1's fma) nor the output rows (phase 2's longest units), and copies
64 KB of chunk data a chunk step instead of 112 KB (no qs^T, no P^T).

Why the bits are chunked's: the recurrence runs chunked_wsr's chains unchanged; the chunk-
start states and vn are exact copies of the values those chains produce; the output
kernel runs step 7's chains (qh from 0 over m ascending, times gamma_i, then P_ij vn_j for
j = 0 .. i ascending) on those copies. Only where values live and which thread computes
them change.

Scratch: :mod:`.chunked_split`'s slots (vn is written over each slot's U, which the
recurrence has read by then), then the chunk-start states, ``[slot][HV][K][V]`` FP32
(0.81 GB at the production shape, T = 65536).

Knobs (read and checked at plan time, :mod:`._knobs`; a value not accepted is refused with a
``ValueError`` naming the variable before any launch): ``DFLASH2_GDN_REC_THREADS`` =
``compute,copy`` threads of the recurrence CTA on a GPU (default 128,128; copy a multiple of
32, at least 32; compute at least 1; at most 256 in all; the simulator runs 32,32),
``DFLASH2_GDN_REC_ROWS`` = ``r1,r2``, rows of a phase-1 unit (1 or 2) and of a phase-2
state unit (2 or 4), or 0 for a phase's half-row units (six of a twelve-column item's
columns a thread) (default 2,0: 96 phase-1 units of two rows x four columns, 128
phase-2 units of two rows x six columns at twelve columns); ``r1`` = ``2p`` or ``2s``
places a twelve-column item's two-row phase-1 units two column groups a warp or over four
warps of 24 lanes (``_split_state_rec.place_unit``), chunked_smprep's
``DFLASH2_GDN_SMPREP_THREADS`` (pre-pass threads) and chunked_split's
``DFLASH2_GDN_SPLIT_COLS`` (state columns per CTA).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from numba import types

from .. import _registry
from .._compat import SIMULATOR, jit_bounded
from .._dynshared import DynShared, require_shared
from . import _knobs as KN
from . import chunked_split as S
from . import chunked_ws as W
from ._chunk_output import gdn_chunk_out_kernel, out_floats, out_threads
from ._common import C, GdnPlan
from ._split_state_rec import PLACE_PAIRS, PLACE_SPREAD, gdn_rec_state_kernel, rec_floats
from .chunked_smprep import PREP
from .chunked_smprep import supports as smprep_supports

STATE_NAME = "gdn_rec_state"
OUT_NAME = "gdn_chunk_out"
MAX_THREADS = 256                 # (320 threads capped ptxas near 204 and gave 168 + spills)
STATE_LAUNCH_BOUNDS = (MAX_THREADS, 1)
OUT_LAUNCH_BOUNDS = (256, 2)
DEFAULT_THREADS = (128, 128)      # (H200, T = 65536: bench/RESULTS.md, GDN ninth round)
DEFAULT_ROWS = "2,0"
PLACEMENTS = {"2p": PLACE_PAIRS, "2s": PLACE_SPREAD}   # (DFLASH2_GDN_REC_ROWS's r1 field)
SIM_THREADS = (32, 32)

_state = jit_bounded(gdn_rec_state_kernel, STATE_LAUNCH_BOUNDS)
_out = jit_bounded(gdn_chunk_out_kernel, OUT_LAUNCH_BOUNDS)


def _arr(dt, nd):
    return types.Array(dt, nd, "C")


def _state_signatures():
    return tuple(sig[:-1] + (types.int64, types.int32, types.int32, types.int32)  # (no stage_kp)
                 for sig in S._state_signatures())


def _out_signatures():
    return tuple((_arr(dout, 4), _arr(types.float32, 1), _arr(types.int32, 2), types.int32,
                  types.int32, types.int32, types.int64)
                 for dout in (types.float16, types.float32))


REC_THREADS_ACCEPTED = (f"'compute,copy': copy a multiple of 32, at least 32; compute at "
                        f"least 1; at most {MAX_THREADS} in all (unset: "
                        f"{DEFAULT_THREADS[0]},{DEFAULT_THREADS[1]})")


def rec_threads_knob():
    """``DFLASH2_GDN_REC_THREADS`` = ``compute,copy``: ``(compute, copy)`` as given, or None
    when unset; refused (``ValueError`` naming the variable) unless copy is whole warps
    (at least one), compute at least 1 and both together at most :data:`MAX_THREADS`."""
    raw = KN.raw(KN.REC_THREADS)
    if not raw.strip():
        return None
    fields = [KN.parse_int(x) for x in raw.split(",")]
    if len(fields) != 2 or None in fields:
        KN.refuse(KN.REC_THREADS, raw, REC_THREADS_ACCEPTED)
    ncomp, ncopy = fields
    if ncopy < 32 or ncopy % 32 or ncomp < 1 or ncomp + ncopy > MAX_THREADS:
        KN.refuse(KN.REC_THREADS, raw, REC_THREADS_ACCEPTED)
    return ncomp, ncopy


def knob_threads(plan: GdnPlan):
    """(compute, copy) threads of the recurrence CTA: ``DFLASH2_GDN_REC_THREADS`` (checked
    everywhere, used on a GPU: :func:`rec_threads_knob`) or the default; ``plan.threads``
    (the API's ``_threads``) overrides the compute threads."""
    ncomp, ncopy = SIM_THREADS if SIMULATOR else DEFAULT_THREADS
    knob = rec_threads_knob()
    if knob is not None and not SIMULATOR:
        ncomp, ncopy = knob
    if plan.threads:
        ncomp = plan.threads
    ncomp = max(1, min(MAX_THREADS - ncopy, ncomp))   # (ncopy: whole warps, checked)
    return ncomp, ncopy


def knob_units(K: int):
    """``(n1, nq)`` for the recurrence kernel from ``DFLASH2_GDN_REC_ROWS`` = ``r1,r2``, the
    rows of a phase-1 unit (1 or 2) and of a phase-2 unit (2 or 4): the units per column
    group ``(C / r1, K / r2)``; 0 for a phase's half-row units (r1 or r2 = 0: six of a
    twelve-column item's columns a thread; items of other widths then take two- / four-row
    units). r1 = ``2p`` / ``2s`` (two-row units, placed) gives ``n1 = -PLACEMENTS[r1]``
    (-1 / -2): the kernel reads a negative ``n1`` as placement ``-n1`` with ``C / 2`` units
    (placed in twelve-column items only)."""
    raw = KN.raw(KN.REC_ROWS)
    f1, _, f2 = (raw.strip() or DEFAULT_ROWS).partition(",")
    if f1 not in ("0", "1", "2", *PLACEMENTS) or f2 not in ("0", "2", "4"):
        KN.refuse(KN.REC_ROWS, raw, f"'r1,r2' (r1 0, 1, 2, 2p or 2s; r2 0, 2 or 4; unset: "
                                    f"{DEFAULT_ROWS})")
    if f1 in PLACEMENTS:                 # (two-row units, placed)
        n1 = -PLACEMENTS[f1]
    else:
        n1 = {"0": 0, "1": C, "2": C // 2}[f1]
    nq = {"0": 0, "2": K // 2, "4": K // 4}[f2]
    return n1, nq


def supports(plan: GdnPlan) -> None:
    """chunked_smprep's shapes, and the recurrence's and the output kernel's shared memory
    (both below the pre-pass's at every supported K, V; checked all the same)."""
    smprep_supports(plan)
    require_shared("chunked_rec:", 4 * max(rec_floats(plan.K), out_floats(plan.K, plan.V)))


def prepare(plan: GdnPlan, stream, out=None) -> None:
    """Plan time: chunked_split's tables and slots plus the chunk-start states, the pre-pass
    (``gdn_smem_prep``), and the two other kernels' configurations (launches allocate
    nothing: CUDA-graph capturable). ``out`` = ``(name, kernel, dynamic shared bytes,
    threads)`` of another output kernel with ``gdn_chunk_out``'s arguments and grid
    (``chunked_rec_pipe``). The knobs are read first: a value they do not accept is refused
    before the scratch is allocated."""
    ncomp, ncopy = knob_threads(plan)
    n1, nq = knob_units(plan.K)
    pthreads = PREP.threads()
    s = S.prepare_scratch(plan, stream, extra_per_slot=plan.HV * plan.K * plan.V)
    W.plan_prep(s, PREP, plan.K, pthreads)
    snap0 = s.extra0                     # (the chunk-start states follow the slots)
    args = (plan.o, plan.h0, plan.h0_idx, plan.hT, plan.hT_idx, plan.seqs, s.items, s.scr,
            s.F, np.int32(plan.H), np.int32(plan.K), snap0, np.int32(ncomp), np.int32(n1),
            np.int32(nq))
    if S.fit_threads(_state, args, ncomp + ncopy) < ncomp + ncopy:   # pragma: no cover
        raise RuntimeError(f"chunked_rec: {ncomp} + {ncopy} threads do not fit one SM")
    s.rec = SimpleNamespace(
        state=DynShared(_state, 4 * rec_floats(plan.K)), state_name=STATE_NAME,
        threads=ncomp + ncopy,
        ncomp=np.int32(ncomp), n1=np.int32(n1), nq=np.int32(nq), snap0=snap0,
        out=DynShared(_out, 4 * out_floats(plan.K, plan.V)), out_threads=out_threads(plan.V),
        out_name=OUT_NAME)
    if out is not None:
        s.rec.out_name = out[0]
        s.rec.out = DynShared(out[1], out[2])
        s.rec.out_threads = out[3]
    plan.scratch = s


def launch_state(plan: GdnPlan, stream) -> None:
    """The planned recurrence pass (one CTA per work item)."""
    s = plan.scratch
    r = s.rec
    _registry.launch(r.state_name, r.state, s.n_items, r.threads, stream,
                     plan.o, plan.h0, plan.h0_idx, plan.hT, plan.hT_idx, plan.seqs, s.items,
                     s.scr, s.F, np.int32(plan.H), np.int32(plan.K), r.snap0, r.ncomp, r.n1,
                     r.nq)


def launch_out(plan: GdnPlan, stream) -> None:
    """The planned output kernel (one CTA per chunk slot and value head), if there are
    chunks."""
    s = plan.scratch
    r = s.rec
    if s.nslots:
        _registry.launch(r.out_name, r.out, s.nslots * plan.HV, r.out_threads, stream,
                         plan.o, s.scr, s.chunks, s.F, np.int32(plan.H), np.int32(plan.K),
                         r.snap0)


def make_run(prepare_fn):
    """The variant's call: plan if needed (``prepare_fn``), then the three kernels."""
    def run(plan: GdnPlan, stream) -> None:
        if plan.n_items == 0:
            return
        if plan.scratch is None or not hasattr(plan.scratch, "rec"):
            prepare_fn(plan, stream)
        S.launch_prep(plan, stream)
        launch_state(plan, stream)
        launch_out(plan, stream)
    return run


run = make_run(prepare)


VARIANT = _registry.register(_registry.Variant(
    name="chunked_rec",
    family="gdn",
    description="chunked_smprep's pre-pass, a warp-specialised sequential pass that runs "
                "only the recurrence (vn = U - W h, the state update; writes chunk-start "
                "states and vn), then the output of every chunk at once in a parallel kernel",
    contract="B (GDN prefill), chunked family: bit-identical to chunked",
    kernels=(PREP.spec(),
             _registry.KernelSpec(STATE_NAME, gdn_rec_state_kernel, _state_signatures(),
                                  launch_bounds=STATE_LAUNCH_BOUNDS),
             _registry.KernelSpec(OUT_NAME, gdn_chunk_out_kernel, _out_signatures(),
                                  launch_bounds=OUT_LAUNCH_BOUNDS)),
    run=run,
    supports=supports,
    bitwise_reference="chunked",
    prepare=prepare,
    flat_inputs=True,         # the pre-pass reads q, k, v, g, beta through flat views
))
