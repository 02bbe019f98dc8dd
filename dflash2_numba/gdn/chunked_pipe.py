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
* All CTAs use chunked_split's device code (``prep_item`` and ``state_item``) with one
  block size (128 threads on a GPU): the state CTA takes the "all columns per thread" form
  of step 6; its shared arrays are the pre-pass's, reused.

What it keeps: every rounding of chunked (the same device functions as chunked_split, which
keeps chunked's order; the order inside a chunk does not depend on the grouping, and the
state between groups is the same FP32 values, copied).

Knob (plan time): ``DFLASH2_GDN_PIPE_STAGES`` = S (default 8; the simulator uses one chunk
per group so that every hand-over is exercised).
"""
from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np

from .. import _registry
from .._compat import SIMULATOR, cuda
from . import chunked_split as S
from ._common import C, MAXD, GdnPlan

PIPE_NAME = "gdn_split_pipe"
THREADS = 32 if SIMULATOR else 128
STAGES = int(os.environ.get("DFLASH2_GDN_PIPE_STAGES", "8") or 8)


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
    state hand-over buffer (launches allocate nothing; they can be graph-captured)."""
    chunks, nslots, items, w = S._tables(plan, stream)
    seqs = np.asarray(plan.seqs.copy_to_host(stream=stream)).reshape(-1, 3).astype(np.int64)
    if stream != 0:
        stream.synchronize()
    P, ngroups, pitems, poff = _schedule(nslots, seqs, plan.H, STAGES)
    F = S.slot_floats(plan.H, plan.HV, plan.K, plan.V)
    if SIMULATOR:
        scr = cuda.to_device(np.zeros(max(nslots, 1) * F, dtype=np.float32), stream=stream)
    else:
        scr = cuda.device_array(max(nslots, 1) * F, dtype=np.float32, stream=stream)
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
        hbuf=cuda.device_array(max(1, items.shape[0]) * MAXD * S.VS, dtype=np.float32,
                               stream=stream),
        launches=launches, threads=threads, cols=w, chunks_per_group=P)


def run(plan: GdnPlan, stream) -> None:
    if plan.n_items == 0:
        return
    if plan.scratch is None:
        prepare(plan, stream)
    s = plan.scratch
    for grid, n_state, p0, ci_lo, ci_hi in s.launches:
        _registry.launch(PIPE_NAME, S._pipe, grid, s.threads, stream,
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
    kernels=(_registry.KernelSpec(PIPE_NAME, S.gdn_split_pipe_kernel, S._pipe_signatures()),),
    run=run,
    supports=S.supports,
    bitwise_reference="chunked",
    prepare=prepare,
))
