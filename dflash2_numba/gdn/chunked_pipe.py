"""GDN prefill, ``chunked`` family, optimised variant ``chunked_pipe``: the two halves of
:mod:`.chunked_split` (the state-independent pre-pass and the sequential state pass)
software-pipelined over groups of chunks, so that the pre-pass of group ``s + 1`` runs on
the SMs' spare capacity while the state pass walks group ``s``. Bit-identical to the frozen
:mod:`.chunked` kernel (output and final state, every input).

What it changes (relative to chunked_split; both only move work, see chunked_split for the
operation-order argument)
------------------------------------------------------------------------------------
* The chunk indices of every sequence are cut into ``S`` groups of ``P`` chunks. Launch
  ``s = 0 .. S`` of ``gdn_split_pipe`` (one kernel) holds two kinds of CTA: the first
  ``n_items`` CTAs (``s >= 1``) run the state pass of their (sequence, value head, columns)
  item over group ``s - 1``; the others run the pre-pass of the chunk slots of group ``s``.
  The state slice is handed from one launch to the next through ``hbuf`` (global, exact
  FP32 copies). Within a launch no CTA reads anything another CTA of that launch writes:
  the state CTAs read slots written by the previous launch; the pre-pass CTAs write only
  slots of their own group (an L1 prefetch never reaches past the state CTA's group either).
* All CTAs use chunked_split's pre-pass code (``prep_item``) and the unstaged state pass
  ``state_item`` (the chains of chunked_split's ``staged_state_item``) with one block size
  (128 threads on a GPU). At 128 threads the state CTA takes the "all columns per thread"
  form of step 6 for items of 8 or 12 columns and the per-group form for 4 columns (which
  for one group is the same work); its shared arrays are the pre-pass's, reused.

What it keeps: every rounding of chunked (the same device functions as chunked_split, which
keeps chunked's order; the order inside a chunk does not depend on the grouping, and the
state between groups is the same FP32 values, copied).

Knob (read and checked at plan time, :mod:`._knobs`; a value not accepted is refused with a
``ValueError`` naming the variable before any launch): ``DFLASH2_GDN_PIPE_STAGES`` = S, an
integer of at least 1 (unset: 8; more stages than the longest sequence's chunks give one
chunk a group; the simulator uses one chunk per group whatever S is, so that every
hand-over is exercised), and chunked_split's ``DFLASH2_GDN_SPLIT_COLS``.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from numba import types

from .. import _registry
from .._compat import SIMULATOR, cuda, device_zeros
from . import _knobs as KN
from . import chunked_split as S
from ._common import C, MAXD, GdnPlan
from ._split_ops import N_MS, N_TS, N_XS, SHARED_ALIGN, VS
from ._split_prep import prep_item
from ._split_state import state_item

if SIMULATOR:
    # The simulator swaps in its fake ``cuda`` module only in the globals of the kernel's
    # own module and of simulated device functions; the two entry points live in other
    # modules, so call them as simulated device functions here (the GPU path is unchanged).
    prep_item = cuda.jit(device=True)(prep_item)
    state_item = cuda.jit(device=True)(state_item)

PIPE_NAME = "gdn_split_pipe"
THREADS = 32 if SIMULATOR else 128
DEFAULT_STAGES = 8


def pipe_stages() -> int:
    """``DFLASH2_GDN_PIPE_STAGES``: the number of chunk groups S, at least 1 (unset: 8)."""
    return KN.integer(KN.PIPE_STAGES, DEFAULT_STAGES,
                      f"an integer of at least 1 (unset: {DEFAULT_STAGES})", lambda n: n >= 1)


def gdn_split_pipe_kernel(q, k, v, g, beta, o, h0, h0_idx, hT, hT_idx, seqs, items, chunks,
                          pitems, scr, hbuf, F, scale, use_l2, n_state, p0, ci_lo, ci_hi):
    """The pipelined form (variant ``chunked_pipe``) of contract.md part B, ``chunked``
    family: CTAs ``b < n_state`` run the state pass (steps 6-8) of item ``b`` over chunks
    ``ci_lo <= ci < ci_hi``; the others run the pre-pass (steps 1-5) of items
    ``pitems[p0 + b - n_state]`` (slot, q/k head) of the next group of chunks. Nothing in one
    launch reads what another CTA of the same launch writes. Output and final state must
    equal the frozen ``gdn_chunked_kernel``'s bit for bit."""
    Ms = cuda.shared.array(N_MS, np.float32, SHARED_ALIGN)   # prep: S | G^T;          state: h
    Ts = cuda.shared.array(N_TS, np.float32, SHARED_ALIGN)   # prep: q rows, D->A, T^T; state: vn
    Xs = cuda.shared.array(N_XS, np.float32, SHARED_ALIGN)   # prep: k rows, X/Y slab;  state: qh*gamma
    ga = cuda.shared.array(C, np.float32)
    bs = cuda.shared.array(C, np.float32)
    gm = cuda.shared.array(C, np.float32)
    dl = cuda.shared.array(C, np.float32)
    rk = cuda.shared.array(C, np.float32)
    rq = cuda.shared.array(C, np.float32)
    b = cuda.blockIdx.x
    if b < n_state:
        state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, hbuf, F, q.shape[2], q.shape[3],
                   b, ci_lo, ci_hi, Ms, Ts, Xs)
    else:
        e = p0 + b - n_state
        prep_item(q, k, v, g, beta, chunks, scr, F, scale, use_l2, pitems[e, 0], pitems[e, 1],
                  Ms, Ts, Xs, ga, bs, gm, dl, rk, rq)


_pipe = cuda.jit(gdn_split_pipe_kernel)


def _pipe_signatures():
    i32, f32 = types.int32, types.float32
    return tuple((S._arr(din, 4), S._arr(din, 4), S._arr(din, 4), S._arr(f32, 3), S._arr(f32, 3),
                  S._arr(dout, 4), S._arr(f32, 4), S._arr(i32, 1), S._arr(f32, 4), S._arr(i32, 1),
                  S._arr(i32, 2), S._arr(i32, 2), S._arr(i32, 2), S._arr(i32, 2), S._arr(f32, 1),
                  S._arr(f32, 1), i32, f32, i32, i32, i32, i32, i32)
                 for din, dout in ((types.float16, types.float16), (types.float16, types.float32),
                                   (types.float32, types.float32)))


def _schedule(nslots: int, seqs: np.ndarray, H: int, stages: int):
    """``(P, S, pitems, poff)``: chunks per group, number of groups, the pre-pass items
    ``(slot, q/k head)`` ordered by group, and each group's first item."""
    nch = (seqs[:, 2] + C - 1) // C
    maxch = int(nch.max()) if nch.size else 0
    if SIMULATOR:
        P = 1
    else:
        P = max(1, -(-maxch // max(1, stages)))
    ngroups = max(1, -(-maxch // P))
    group = np.zeros(nslots, dtype=np.int64)
    slot0 = np.zeros(len(nch), dtype=np.int64)
    if len(nch):
        slot0[1:] = np.cumsum(nch)[:-1]
    for n in range(len(nch)):
        group[slot0[n]:slot0[n] + nch[n]] = np.arange(int(nch[n])) // P
    order = np.argsort(group, kind="stable")
    pitems = np.zeros((max(1, nslots * H), 2), dtype=np.int32)
    if nslots:
        sl = np.repeat(order, H)
        pitems[:nslots * H, 0] = sl
        pitems[:nslots * H, 1] = np.tile(np.arange(H), nslots)
    counts = (np.bincount(group, minlength=ngroups + 1) * H if nslots
              else np.zeros(ngroups + 1, np.int64))
    poff = np.zeros(ngroups + 2, dtype=np.int64)
    poff[1:] = np.cumsum(counts[:ngroups + 1])
    return P, ngroups, pitems, poff


def prepare(plan: GdnPlan, stream) -> None:
    """Plan time: chunked_split's tables and scratch, the pre-pass items by group and the
    state hand-over buffer (launches allocate nothing; they can be graph-captured). The
    knobs are read first: a value they do not accept is refused before anything is
    allocated."""
    stages = pipe_stages()
    chunks, nslots, items, w = S._tables(plan, stream)
    seqs = np.asarray(plan.seqs.copy_to_host(stream=stream)).reshape(-1, 3).astype(np.int64)
    if stream != 0:
        stream.synchronize()
    P, ngroups, pitems, poff = _schedule(nslots, seqs, plan.H, stages)
    F = S.slot_floats(plan.H, plan.HV, plan.K, plan.V)
    scr = device_zeros(max(nslots, 1) * F, np.float32, stream)
    threads = plan.threads or THREADS
    launches = []
    for s in range(ngroups + 1):
        n_state = int(items.shape[0]) if s >= 1 else 0
        p_lo = int(poff[s]) if s < ngroups else 0
        n_prep = int(poff[s + 1] - poff[s]) if s < ngroups else 0
        if n_state + n_prep:
            launches.append((n_state + n_prep, n_state, p_lo, (s - 1) * P, s * P))
    plan.scratch = SimpleNamespace(
        chunks=cuda.to_device(chunks, stream=stream), items=cuda.to_device(items, stream=stream),
        pitems=cuda.to_device(pitems, stream=stream), scr=scr, F=np.int32(F),
        hbuf=device_zeros(max(1, items.shape[0]) * MAXD * VS, np.float32, stream),
        launches=launches, threads=threads, cols=w, chunks_per_group=P)


def run(plan: GdnPlan, stream) -> None:
    if plan.n_items == 0:
        return
    if plan.scratch is None:
        prepare(plan, stream)
    s = plan.scratch
    for grid, n_state, p0, ci_lo, ci_hi in s.launches:
        _registry.launch(PIPE_NAME, _pipe, grid, s.threads, stream,
                         plan.q, plan.k, plan.v, plan.g, plan.beta, plan.o, plan.h0,
                         plan.h0_idx, plan.hT, plan.hT_idx, plan.seqs, s.items, s.chunks,
                         s.pitems, s.scr, s.hbuf, s.F, plan.scale, plan.use_l2,
                         np.int32(n_state), np.int32(p0), np.int32(ci_lo), np.int32(ci_hi))


VARIANT = _registry.register(_registry.Variant(
    name="chunked_pipe",
    family="gdn",
    description="chunked_split's pre-pass and state pass software-pipelined over groups of "
                "chunks (one kernel, S + 1 launches: state pass of group s-1 beside the "
                "pre-pass of group s), bit-identical to chunked",
    contract="B (GDN prefill), chunked family: bit-identical to chunked",
    kernels=(_registry.KernelSpec(PIPE_NAME, gdn_split_pipe_kernel, _pipe_signatures()),),
    run=run,
    supports=S.supports,
    bitwise_reference="chunked",
    prepare=prepare,
    flat_inputs=True,         # the pre-pass reads q, k, v, g, beta through flat views
))
