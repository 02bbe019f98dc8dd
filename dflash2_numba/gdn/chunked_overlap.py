"""GDN prefill, ``chunked`` family, optimised variant ``chunked_overlap``: bit-identical to
the frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input).

:mod:`.chunked_rec_pipe`'s three kernels, unchanged, run over segments of the chunk slots
so that the parallel pre-pass overlaps the sequential recurrence. The slots are cut into
``S`` contiguous segments; segment ``s``'s pre-pass runs on a low-priority stream, its
recurrence on a high-priority stream after its own pre-pass (and after segment ``s - 1``'s
recurrence). So while the recurrence of segment ``s`` runs (one CTA an SM, about a quarter
of the SM's FMA rate used: its pace is set by shared-memory wavefronts), the pre-pass of
later segments runs beside it on the same SMs. The output kernel runs once over every slot
after the last recurrence (its CTAs never fit beside the recurrence's; the per-segment
schedule, each segment's output on a third stream after its recurrence, is the knob
``DFLASH2_GDN_OVERLAP_OUT=segments``).

Why the bits are chunked's: every chunk's pre-pass, recurrence step and output run the
same kernels, with the same chains, on the same scratch slot as in chunked_rec_pipe (the
output launch at the end is chunked_rec_pipe's own); a segment's pre-pass and output see a
view of the chunk table and scratch that starts at the
segment's first slot (each CTA addresses its slot relative to the view, the chunk-start
states relative to an offset moved by the same amount). A sequence cut by a segment
boundary continues from an exact FP32 copy of its state: the recurrence launch of the
segment before writes its last state to a row of the variant's own state array (as the
final state it writes to ``hT`` when not cut), the next one reads it back as its initial
state (as from ``h0``). The caller's initial states are copied into that array before the
first launch and the final states out of it after the last (:mod:`._state_rows`, exact
copies; a sequence with no tokens passes its initial state, or zeros, through, as the
recurrence kernel does).

Co-residence (the point of the variant) needs the recurrence CTA (256 threads, about 182
registers, 81 KB of shared memory at K = 128) and a pre-pass CTA on one SM: the pre-pass
runs 128 threads a CTA (16 K registers; 87.8 KB of shared memory), and all three kernels
ask for a shared-memory carveout of 80 % (an SM's split of L1 and shared memory is fixed
while CTAs run on it; with the driver's default the recurrence's SMs keep too little shared
memory for a pre-pass CTA; on the H200 80 % holds both CTAs and was 3 % faster than 86 or
100 %, while 70 % and less no longer hold them: bench/RESULTS.md, GDN fourteenth round).
These are the variant's own compiled kernels, so the carveout does not change
chunked_rec_pipe's launches. On sm_70 (96 KB of shared memory an SM) no
pre-pass CTA fits beside the recurrence: there the variant runs one segment (chunked_rec_pipe's
schedule plus the two state copies).

A call is about 4 S launches and event operations. Launched eagerly, their host time (about
40-100 us each on the H200) outruns the GPU work, and the variant is slower than
chunked_rec_pipe. Capture it in a CUDA graph: the measured gain (bench/RESULTS.md, GDN twelfth
and thirteenth rounds) is under graph replay.

Knobs (read and checked at plan time, before anything is allocated, :mod:`._knobs`; a value
not accepted is refused with a ``ValueError`` naming the variable before any launch):
``DFLASH2_GDN_SEGMENTS`` (segments: an integer of at least 1; more than the chunk slots
give one a slot; unset: :func:`segment_count`, up to 16, each segment's pre-pass at most
one wave of CTAs), ``DFLASH2_GDN_OVERLAP_PREP_THREADS`` (pre-pass threads a CTA on a GPU:
a multiple of 32 from 32 to 256; unset: 128; the simulator runs chunked_smprep's count),
``DFLASH2_GDN_OVERLAP_PREP`` (which pre-pass kernel: :func:`prep_form`, ``smem`` or
``split``), ``DFLASH2_GDN_OVERLAP_CARVEOUT`` (percent: an integer from 0 to 100, or ``none``,
which leaves the driver's choice; unset: 80), ``DFLASH2_GDN_OVERLAP_OUT`` (where the
outputs run: :func:`out_schedule`, ``end`` or ``segments``), chunked_rec_pipe's
``DFLASH2_GDN_OUT_TILE`` (which output kernel, default the 8 x 8 ``gdn_chunk_out_wide``),
and chunked_rec's (with chunked_smprep's and chunked_split's ``DFLASH2_GDN_SPLIT_COLS``).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .. import _registry
from .._compat import SIMULATOR, cuda, device_zeros, jit_bounded
from .._dynshared import DynShared, shared_per_sm
from .._streams import order_event, priority_stream
from . import _knobs as KN
from . import chunked_rec as RC
from . import chunked_rec_pipe as RP
from . import chunked_smprep as SP
from . import chunked_split as S
from ._chunk_output import gdn_chunk_out_kernel
from ._chunk_output_pipe import gdn_chunk_out_pipe_kernel
from ._chunk_output_wide import gdn_chunk_out_wide_kernel
from ._common import C, GdnPlan, default_max_ctas
from ._prep_smem import gdn_smem_prep_kernel, smem_floats
from ._split_state_rec import gdn_rec_state_kernel, rec_floats
from ._state_rows import (COPY_THREADS, GATHER_SIGNATURES, SCATTER_SIGNATURES, copy_blocks,
                          gdn_state_gather_kernel, gdn_state_scatter_kernel)

GATHER_NAME = "gdn_state_gather"
SCATTER_NAME = "gdn_state_scatter"
DEFAULT_SEGMENTS = 16
DEFAULT_PREP_THREADS = 128
DEFAULT_CARVEOUT = "80"      # (H200, T = 65536: 6.44-6.50 ms against 6.63-6.72 at 100)

# the variant's own compiled kernels (their carveout attribute is theirs alone)
_prep = jit_bounded(gdn_smem_prep_kernel, SP.PREP_LAUNCH_BOUNDS)
_state = jit_bounded(gdn_rec_state_kernel, RC.STATE_LAUNCH_BOUNDS)
_outs = {name: jit_bounded(fn, bounds) for name, (fn, bounds, _f, _t) in RP.OUT_FORMS.items()}
_prep_split = cuda.jit(S.gdn_split_prep_kernel)      # (knob DFLASH2_GDN_OVERLAP_PREP=split)
_gather = cuda.jit(gdn_state_gather_kernel)
_scatter = cuda.jit(gdn_state_scatter_kernel)


CTA_RESERVED_SMEM = 1024      # bytes of shared memory the hardware keeps per CTA (sm_80 on)


def prep_fits_beside_rec(K: int, per_sm: int) -> bool:
    """Whether a pre-pass CTA and a recurrence CTA fit one SM's ``per_sm`` bytes of shared
    memory together (H200, K = 128: 81.4 + 87.8 KB of 228; a V100's 96 KB holds only one)."""
    need = 4 * (rec_floats(K) + smem_floats(K)) + 2 * CTA_RESERVED_SMEM
    return need <= per_sm


def segment_count(nslots: int, H: int, beside: bool = True) -> int:
    """Segments when ``DFLASH2_GDN_SEGMENTS`` is not set. One when no pre-pass CTA fits
    beside the recurrence (``beside`` false: nothing would overlap, and every boundary
    costs). Otherwise as many as give each segment's pre-pass at most one wave of CTAs at
    two an SM (segments of at most ``floor(2 SMs / H)`` slots), at most
    :data:`DEFAULT_SEGMENTS`. The pre-passes of successive segments run one after the
    other on their stream, so a segment too small to fill the machine costs a whole CTA's
    latency for a sliver of the work, and one a few CTAs past a wave costs a second wave
    (H200, bench/RESULTS.md GDN twelfth round: T = 4096 at 16 segments 2.01 ms against
    chunked_rec_pipe's 0.46; T = 65536 at 15 segments of 272 CTAs 7.44 ms, at 16 of 256
    CTAs 6.85). The simulator keeps :data:`DEFAULT_SEGMENTS` (capped by the slots), so
    its small cases still cut sequences."""
    if SIMULATOR:
        return DEFAULT_SEGMENTS
    if not beside:
        return 1
    per_seg = max(1, (2 * default_max_ctas()) // H)   # slots whose pre-pass is one wave
    return max(1, min(DEFAULT_SEGMENTS, -(-nslots // per_seg)))


def prep_form() -> str:
    """``DFLASH2_GDN_OVERLAP_PREP``: ``smem`` (chunked_smprep's pre-pass, the default) or
    ``split`` (chunked_split's: slower alone, 2.45 against 1.87 ms at T = 65536, but 78
    registers at sm_90 and 44.8 KB of static shared memory a CTA, so on the H200 two CTAs
    of up to 96 threads fit beside the recurrence where one of the other fits). Measured on
    the H200 at T = 65536 (CUDA graph, bench/RESULTS.md GDN thirteenth round): ``split``
    8.44-9.01 ms against ``smem``'s 6.82; kept as a measurement option."""
    return KN.choice(KN.OVERLAP_PREP, "smem", ("smem", "split"))


def out_schedule() -> str:
    """``DFLASH2_GDN_OVERLAP_OUT``: ``end`` (the default: one output launch over every slot
    after the last recurrence, with the machine to itself) or ``segments`` (each segment's
    output on the output stream after its own recurrence). The output kernel's CTAs never
    fit beside the recurrence's, so per-segment outputs only run in the gaps between
    recurrence launches and hold up the next one. Measured on the H200 (CUDA graph,
    interleaved, bench/RESULTS.md GDN thirteenth round): T = 65536, 16 segments, 6.62 ms
    against 6.90; T = 32768, 8 segments, 3.41 against 3.53."""
    return KN.choice(KN.OVERLAP_OUT, "end", ("segments", "end"))


def segments_knob() -> int:
    """``DFLASH2_GDN_SEGMENTS``: the segment count, at least 1, or 0 when unset (then
    :func:`segment_count`)."""
    return KN.integer(KN.SEGMENTS, 0, "an integer of at least 1 (more than the chunk slots: "
                      "one a slot; unset: automatic)", lambda n: n >= 1)


def prep_threads_knob() -> int:
    """``DFLASH2_GDN_OVERLAP_PREP_THREADS``: pre-pass threads a CTA on a GPU, whole warps
    from 32 to 256 (unset: :data:`DEFAULT_PREP_THREADS`)."""
    return KN.warps(KN.OVERLAP_PREP_THREADS, DEFAULT_PREP_THREADS, SP.MAX_PREP_THREADS,
                    zero_is_default=False)


def carveout_knob():
    """``DFLASH2_GDN_OVERLAP_CARVEOUT``: the shared-memory carveout in percent, an integer
    from 0 to 100, or None for ``none`` (any case: the driver's choice); unset:
    :data:`DEFAULT_CARVEOUT`."""
    raw = KN.raw(KN.OVERLAP_CARVEOUT)
    if raw.strip().lower() == "none":
        return None
    return KN.integer(KN.OVERLAP_CARVEOUT, int(DEFAULT_CARVEOUT),
                      f"an integer percent from 0 to 100, or 'none' (the driver's choice; "
                      f"unset: {DEFAULT_CARVEOUT})", lambda n: 0 <= n <= 100)


def read_knobs():
    """``(segments or 0, pre-pass threads, carveout percent or None)`` as the environment
    gives them, checked (``ValueError`` naming the variable): :func:`segments_knob`,
    :func:`prep_threads_knob`, :func:`carveout_knob`."""
    return segments_knob(), prep_threads_knob(), carveout_knob()


def knobs(nslots: int, H: int, K: int, read):
    """``(segments, pre-pass threads, carveout percent or None)`` for a plan of ``nslots``
    chunk slots, from ``read`` (:func:`read_knobs`' result, read before the plan's scratch
    was allocated). Unset, the segments are
    :func:`segment_count`'s (whose shared-memory test, :func:`prep_fits_beside_rec`, is the
    smem pre-pass's, which needs more than the split one at every K); the simulator runs
    chunked_smprep's pre-pass thread count."""
    nseg, threads, carve = read
    if not nseg:
        nseg = segment_count(nslots, H, prep_fits_beside_rec(K, shared_per_sm()))
    if SIMULATOR:
        threads = SP.prep_threads()
    return max(1, nseg), threads, carve


def segment_tables(seqs: np.ndarray, nseg: int, HV: int, V: int, w: int):
    """The segments of the slot list for sequences ``seqs`` (host ``[N, 3]``: batch row,
    first token, length), as chunked_split numbers the slots (each sequence's chunks in
    order, sequences in order). Returns ``(bounds, segs, src_row, n_rows)``:

    * ``bounds``: slot boundaries, ``S + 1`` increasing integers from 0 to the slot count;
    * ``segs[s]``: ``(sub, row_in, row_out, items)`` for segment ``s``: one row per part of
      a sequence inside the segment (``sub``: batch row, first token, length), the state
      rows it starts from and ends in, and its recurrence work items (part, value head,
      first column, columns, first slot), longest parts first;
    * ``src_row[n]``: the row holding sequence ``n``'s final state (its initial state's row
      when it has no tokens);
    * ``n_rows``: rows of the state array. Row ``n`` holds sequence n's initial state, row
      ``N + n`` its final state, row ``2 N + b - 1`` the state at boundary ``b``
      (``1 <= b < S``) of the sequence that boundary cuts."""
    seqs = np.asarray(seqs, dtype=np.int64).reshape(-1, 3)
    N = seqs.shape[0]
    nch = (seqs[:, 2] + C - 1) // C
    slot0 = np.concatenate([[0], np.cumsum(nch)[:-1]]) if N else np.zeros(0, np.int64)
    nslots = int(nch.sum())
    S = max(1, min(nseg, nslots))
    bounds = [int(round(b * nslots / S)) for b in range(S + 1)]
    segs = []
    for s in range(S):
        a, b = bounds[s], bounds[s + 1]
        sub, rin, rout, lo_slot = [], [], [], []
        for n in range(N):
            f0, f1 = int(slot0[n]), int(slot0[n] + nch[n])
            lo, hi = max(a, f0), min(b, f1)
            if lo >= hi:
                continue
            t_lo = (lo - f0) * C
            t_hi = min(int(seqs[n, 2]), (hi - f0) * C)
            sub.append((int(seqs[n, 0]), int(seqs[n, 1]) + t_lo, t_hi - t_lo))
            rin.append(n if lo == f0 else 2 * N + s - 1)
            rout.append(N + n if hi == f1 else 2 * N + s)
            lo_slot.append(lo)
        order = sorted(range(len(sub)), key=lambda j: -sub[j][2])
        items = [(j, hv, c0, min(w, V - c0), lo_slot[j])
                 for j in order for hv in range(HV) for c0 in range(0, V, w)]
        segs.append((np.array(sub, dtype=np.int32).reshape(-1, 3),
                     np.array(rin, dtype=np.int32), np.array(rout, dtype=np.int32),
                     np.array(items, dtype=np.int32).reshape(-1, 5)))
    src_row = np.array([N + n if nch[n] > 0 else n for n in range(N)], dtype=np.int32)
    return bounds, segs, src_row, 2 * N + max(S - 1, 0)


def supports(plan: GdnPlan) -> None:
    RP.supports(plan)


def prepare(plan: GdnPlan, stream, state=None, state_name: str = RC.STATE_NAME) -> None:
    """Plan time: chunked_rec_pipe's plan (scratch, tables, chunk-start states), then this
    variant's kernels (own compiled copies with the carveout), segment tables, state rows,
    streams and events (launches allocate nothing: CUDA-graph capturable). ``state`` /
    ``state_name``: another compiled recurrence kernel with ``gdn_rec_state``'s arguments,
    shared memory and launch bounds, and its name (a variant built on this schedule:
    :mod:`.chunked_ahead`). This variant's knobs are read first, then chunked_rec_pipe's
    (its prepare): a value they do not accept is refused before anything is allocated."""
    read, form, schedule = read_knobs(), prep_form(), out_schedule()
    RP.prepare(plan, stream)
    s = plan.scratch
    nseg, pthreads, carve = knobs(s.nslots, plan.H, plan.K, read)
    K, V, HV = plan.K, plan.V, plan.HV
    if form == "split":
        s.prep_name = S.PREP_NAME
        s.prep_kernel = DynShared(_prep_split, 0, carve)
    else:
        s.prep_kernel = DynShared(_prep, 4 * smem_floats(K), carve)
    s.prep_threads = pthreads
    s.out_at_end = schedule == "end"
    s.rec.state = DynShared(_state if state is None else state, 4 * rec_floats(K), carve)
    s.rec.state_name = state_name
    out_shared = RP.OUT_FORMS[s.rec.out_name][2]          # (chunked_rec_pipe's choice)
    s.rec.out = DynShared(_outs[s.rec.out_name], 4 * out_shared(K, V), carve)
    seqs = plan.seqs.copy_to_host(stream=stream)
    if stream != 0:
        stream.synchronize()
    bounds, segs, src_row, n_rows = segment_tables(seqs, nseg, HV, V, s.cols)
    F = int(s.F)
    kv = HV * K * V
    dev = lambda a: cuda.to_device(a, stream=stream)            # noqa: E731
    launches = []
    for si, (sub, rin, rout, items) in enumerate(segs):
        a, b = bounds[si], bounds[si + 1]
        launches.append(SimpleNamespace(
            nslots=b - a, chunks=s.chunks[a:b], scr=s.scr[a * F:],
            snap0=np.int64(int(s.rec.snap0) + a * kv - a * F),
            seqs=dev(sub) if len(sub) else None, row_in=dev(rin) if len(rin) else None,
            row_out=dev(rout) if len(rout) else None,
            items=dev(items) if len(items) else None, n_items=int(items.shape[0])))
    s.seg = SimpleNamespace(
        launches=launches, rows=device_zeros((max(n_rows, 1), HV, K, V), np.float32, stream),
        src_row=dev(src_row),
        s_prep=priority_stream(False), s_rec=priority_stream(True), s_out=priority_stream(False),
        fork=order_event(), ev_prep=[order_event() for _ in launches],
        ev_rec=[order_event() for _ in launches], joins=[order_event() for _ in range(3)])
    plan.scratch = s


def _direct(segment: int, kernel: str, stream, launch) -> None:
    launch()


def _launch_segment(plan: GdnPlan, g, seg, si: int, around, outputs: bool) -> None:
    """Segment ``si``: pre-pass (low-priority stream), recurrence after it (high priority),
    output after that (low priority); each launch through ``around`` (see :func:`run`)."""
    s = plan.scratch
    r = s.rec
    if seg.nslots:
        around(si, "prep", g.s_prep, lambda: _registry.launch(
            s.prep_name, s.prep_kernel, seg.nslots * plan.H, s.prep_threads, g.s_prep, plan.q,
            plan.k, plan.v, plan.g, plan.beta, seg.chunks, seg.scr, s.F, plan.scale,
            plan.use_l2))
    g.ev_prep[si].record(g.s_prep)
    g.ev_prep[si].wait(g.s_rec)
    if seg.n_items:
        around(si, "rec", g.s_rec, lambda: _registry.launch(
            r.state_name, r.state, seg.n_items, r.threads, g.s_rec, plan.o, g.rows, seg.row_in,
            g.rows, seg.row_out, seg.seqs, seg.items, s.scr, s.F, np.int32(plan.H),
            np.int32(plan.K), r.snap0, r.ncomp, r.n1, r.nq))
    g.ev_rec[si].record(g.s_rec)
    g.ev_rec[si].wait(g.s_out)
    if seg.nslots and outputs:
        around(si, "out", g.s_out, lambda: _registry.launch(
            r.out_name, r.out, seg.nslots * plan.HV, r.out_threads, g.s_out, plan.o, seg.scr,
            seg.chunks, s.F, np.int32(plan.H), np.int32(plan.K), seg.snap0))


def run(plan: GdnPlan, stream, around=_direct, outputs: bool = True, plan_with=None) -> None:
    """Fork from ``stream`` onto the variant's three streams, the state rows in, every
    segment, the final states out, and join back onto ``stream``. ``around(segment, kernel,
    stream, launch)`` makes each segment launch (``launch()``); a measurement passes one
    that records events on either side (``bench/overlap_probe.py timeline``, which also
    leaves the outputs out with ``outputs=False``). ``plan_with``: the prepare of a variant
    built on this schedule (:mod:`.chunked_ahead`), for a plan not yet prepared."""
    if plan.n_items == 0:
        return
    if plan.scratch is None or not hasattr(plan.scratch, "seg"):
        (plan_with or prepare)(plan, stream)
    g = plan.scratch.seg
    g.fork.record(stream)
    for st in (g.s_prep, g.s_rec, g.s_out):
        g.fork.wait(st)
    nb = copy_blocks(plan.N, plan.HV, plan.K, plan.V)
    _registry.launch(GATHER_NAME, _gather, nb, COPY_THREADS, g.s_rec, plan.h0, plan.h0_idx,
                     g.rows)
    at_end = plan.scratch.out_at_end
    for si, seg in enumerate(g.launches):
        _launch_segment(plan, g, seg, si, around, outputs and not at_end)
    if outputs and at_end:
        around(len(g.launches), "out", g.s_rec, lambda: RC.launch_out(plan, g.s_rec))
    _registry.launch(SCATTER_NAME, _scatter, nb, COPY_THREADS, g.s_rec, g.rows, g.src_row,
                     plan.hT, plan.hT_idx)
    for ev, st in zip(g.joins, (g.s_prep, g.s_rec, g.s_out)):
        ev.record(st)
        ev.wait(stream)


VARIANT = _registry.register(_registry.Variant(
    name="chunked_overlap",
    family="gdn",
    description="chunked_rec_pipe's kernels over segments of the chunk slots on prioritised "
                "streams: the pre-pass of later segments runs beside the recurrence (exact "
                "state copies across segment boundaries), the output once after the last "
                "recurrence",
    contract="B (GDN prefill), chunked family: bit-identical to chunked",
    kernels=(SP.PREP.spec(),
             _registry.KernelSpec(S.PREP_NAME, S.gdn_split_prep_kernel, S._prep_signatures()),
             _registry.KernelSpec(RC.STATE_NAME, gdn_rec_state_kernel, RC._state_signatures(),
                                  launch_bounds=RC.STATE_LAUNCH_BOUNDS),
             _registry.KernelSpec(RP.OUT_NAME, gdn_chunk_out_pipe_kernel, RC._out_signatures(),
                                  launch_bounds=RP.OUT_LAUNCH_BOUNDS, min_cc=RP.PIPE_MIN_CC),
             _registry.KernelSpec(RP.WIDE_NAME, gdn_chunk_out_wide_kernel, RC._out_signatures(),
                                  launch_bounds=RP.WIDE_LAUNCH_BOUNDS, min_cc=RP.PIPE_MIN_CC),
             _registry.KernelSpec(RC.OUT_NAME, gdn_chunk_out_kernel, RC._out_signatures(),
                                  launch_bounds=RC.OUT_LAUNCH_BOUNDS,
                                  max_cc=(RP.PIPE_MIN_CC[0] - 1, 99)),
             _registry.KernelSpec(GATHER_NAME, gdn_state_gather_kernel, GATHER_SIGNATURES),
             _registry.KernelSpec(SCATTER_NAME, gdn_state_scatter_kernel, SCATTER_SIGNATURES)),
    run=run,
    supports=supports,
    bitwise_reference="chunked",
    prepare=prepare,
    flat_inputs=True,         # the pre-pass reads q, k, v, g, beta through flat views
))
