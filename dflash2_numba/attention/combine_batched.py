"""Combine step of contract A with its workspace loads batched ("batched combine").

Keeps: contract A's combine bit for bit, i.e. frozen's ``combine_kernel``, with the same
expressions, types and order:
  * ``M = max(M, m_s)`` over s < A in ascending s, from M = -1e30;
  * for the splits with ``m_s > -1e20``: ``w_s = f32(E(max(m_s - M, -80)))``,
    ``Dn = fma(w_s, l_s, Dn)`` in ascending s, ``inv = 1 / Dn`` (IEEE) or 0;
  * ``acc = fma(w_s * inv, partial_s[d], acc)`` in ascending s, ``out = f16(acc)`` (or acc);
  * rows with ``L <= 0`` write +0 and read no workspace.
Only where each operand is loaded from, and when, differs.

Why: frozen's combine runs one 256-thread CTA per row (48 CTAs at the production shape) and
loads each split's ``lse`` and ``partial`` inside the loop that uses them. Each of its
3 x A loop iterations then waits for a global load, so at A = 80 the kernel is, by estimate,
a chain of 100-240 load latencies, 20-40 us a layer (``bench/attention_fast_notes.md``,
tenth round).

Layout: one CTA of ``COLS`` = 64 threads per (b, t, h, group of 64 columns), grid
``(B, Q, Hq * ceil(D / 64))``:
  1. the CTA stages ``m_s`` and ``l_s`` (s < A) in shared memory, one load per thread and
     split, all in flight together;
  2. every thread forms M from shared memory (broadcast reads, the same chain in each);
  3. the thread of split s forms ``w_s`` (0 where the split is not live) in shared memory;
  4. every thread forms Dn and inv (the same chain in each);
  5. thread d loads ``partial_s[d]`` for ``BATCH`` = 16 splits at once (indices past A-1
     read split A-1 and are not used), then applies their fmas in ascending s.
Plans with more than ``MAX_SPLITS`` splits (the shared arrays' size) run frozen's combine
instead, under the name ``attention.<variant>.combine.unbatched``: the same bits either way.

Measured (RESULTS.md, "Attention, session 32"; H100 80GB HBM3, CUDA graph of 16 layers):
``tiled_perm``'s split kernel followed by this combine took 12.19 ms at 261888 tokens against
12.57 ms with frozen's combine, and 2.23 against 2.58 ms at 32768, in one run: 24 us a
layer at 261888. (Launched alone and eagerly, 54 against 61 us: dispatch-bound, so only
graph replays show the difference.) This is the combine of every register-tiled variant
(``tiled``, ``tiled_compact``, ``tiled_wide``, ``tiled_perm``).
"""
from __future__ import annotations

import math

import numpy as np

from .._compat import cuda
from .._registry import KernelSpec, launch
from ..contract import EXP_CLAMP, LIVE_M_THRESHOLD, NEG_INF
from ._device import active_split_count, request_keys, row_length
from ._tiled_source import Source, exec_source
from . import frozen
from .frozen import F32_ONE, F32_ZERO, _combine_sigs

COLS = 64            # threads (output columns) per CTA
BATCH = 16           # partial loads in flight per thread
MAX_SPLITS = 512     # shared arrays m, l, w: 6 KB


def _source(batch=BATCH):
    """Python source of the batched combine kernel; ``batch``: partial loads per step."""
    src = Source()
    e = src.e
    e(0, "def combine_kernel(seq_lens, row_lengths, use_rows, splits, partial, lse, out):")
    # the kernel's docstring (plain text: no triple quote or backslash inside it)
    e(1, '"""Combine step of contract.md part A, section Combine, with the workspace loads')
    e(1, "batched (generated source): its out must equal that of frozen.py's combine_kernel")
    e(1, '(attention.frozen.combine) bit for bit; this module says how."""')
    for line in [
        "b = cuda.blockIdx.x", "t = cuda.blockIdx.y", "z = cuda.blockIdx.z",
        "tid = cuda.threadIdx.x", "Q = out.shape[1]", "D = out.shape[3]",
        f"groups = (D + {COLS - 1}) // {COLS}", "h = z // groups",
        f"d = (z - h * groups) * {COLS} + tid",
        f"m_sh = cuda.shared.array({MAX_SPLITS}, np.float32)",
        f"l_sh = cuda.shared.array({MAX_SPLITS}, np.float32)",
        f"w_sh = cuda.shared.array({MAX_SPLITS}, np.float32)",
        "L = row_length(seq_lens, row_lengths, use_rows, b, t, Q)",
        "if L <= 0:",
        "    if d < D:",
        "        out[b, t, h, d] = F32_ZERO",
        "    return",
        "T = request_keys(seq_lens, row_lengths, use_rows, b, Q)",
        "A = active_split_count(T, splits)",
        f"for s in range(tid, A, {COLS}):                 # 1. stage m_s, l_s",
        "    m_sh[s] = lse[b, s, t, h, 0]",
        "    l_sh[s] = lse[b, s, t, h, 1]",
        "cuda.syncthreads()",
        "M = NEG_INF                                     # 2. frozen's max chain",
        "for s in range(A):",
        "    M = max(M, m_sh[s])",
        f"for s in range(tid, A, {COLS}):                 # 3. w_s of the live splits",
        "    ms = m_sh[s]",
        "    w = F32_ZERO",
        "    if ms > LIVE_M_THRESHOLD:",
        "        w = np.float32(math.exp(max(ms - M, EXP_CLAMP)))",
        "    w_sh[s] = w",
        "cuda.syncthreads()",
        "den = F32_ZERO                                  # 4. frozen's Dn chain",
        "for s in range(A):",
        "    if m_sh[s] > LIVE_M_THRESHOLD:",
        "        den = cuda.fma(w_sh[s], l_sh[s], den)",
        "inv = F32_ZERO",
        "if den > F32_ZERO:",
        "    inv = F32_ONE / den",
        "if d >= D:",
        "    return",
        "last = A - 1",
        "acc = F32_ZERO",
        f"for s0 in range(0, A, {batch}):                  # 5. {batch} loads, then their fmas",
    ]:
        e(1, line)
    for i in range(batch):
        e(2, f"p{i} = partial[b, min(s0 + {i}, last), t, h, d]")
    for i in range(batch):
        ind = 2
        if i:
            e(2, f"if s0 + {i} < A:")
            ind = 3
        e(ind, f"if m_sh[s0 + {i}] > LIVE_M_THRESHOLD:")
        e(ind + 1, f"acc = cuda.fma(w_sh[s0 + {i}] * inv, p{i}, acc)")
    e(1, "out[b, t, h, d] = acc")
    return src.text()


def _make_kernel(batch=BATCH):
    """The combine kernel's Python function (not yet jitted)."""
    ns = dict(__name__=__name__, cuda=cuda, np=np, math=math, F32_ZERO=F32_ZERO,
              F32_ONE=F32_ONE, NEG_INF=NEG_INF, LIVE_M_THRESHOLD=LIVE_M_THRESHOLD,
              EXP_CLAMP=EXP_CLAMP, row_length=row_length, request_keys=request_keys,
              active_split_count=active_split_count)
    exec_source(_source(batch), f"<attention combine_batched b{batch}>", ns)
    return ns["combine_kernel"]


combine_pyfunc = _make_kernel()
combine_kernel = cuda.jit(combine_pyfunc)


def combine_specs(variant: str):
    """The ``KernelSpec`` of each combine kernel ``variant`` launches (``launch_combine``):
    the batched one and frozen's, for plans above ``MAX_SPLITS`` splits."""
    return (KernelSpec(f"attention.{variant}.combine", combine_pyfunc, _combine_sigs),
            KernelSpec(f"attention.{variant}.combine.unbatched", frozen.combine_kernel.py_func,
                       _combine_sigs))


def launch_combine(plan, stream, variant: str) -> None:
    """The combine of ``plan`` (its workspace into its output) on ``stream``, counted under
    ``variant``'s names: the batched kernel, or frozen's where the plan has more than
    ``MAX_SPLITS`` splits (the same bits; the shared arrays hold ``MAX_SPLITS``)."""
    if plan.splits > MAX_SPLITS:
        frozen.launch_combine(plan, stream, f"attention.{variant}.combine.unbatched")
        return
    B, Q, Hq, D = plan.q_shape
    launch(f"attention.{variant}.combine", combine_kernel,
           (B, Q, Hq * ((D + COLS - 1) // COLS)), COLS, stream,
           plan.seq_lens, plan.row_lengths, plan.use_rows, plan.splits,
           plan.partial, plan.lse, plan.out)
