"""GDN prefill, ``chunked`` family, optimised variant ``chunked_split``: bit-identical to the
frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input), split
into a parallel pre-pass and a narrow sequential state pass. (:mod:`.chunked_pipe` runs the
same device code software-pipelined; see there.)

What it changes (only the things chunked.py's docstring lists as free)
----------------------------------------------------------------------
* Two kernels instead of one. ``gdn_split_prep`` runs steps 1-5 of chunked's order (row
  norms, kn / qs, decay products D / gamma, G / S -> A / P, X / Kd, T = (I + A)^-1, W, U)
  once per (chunk, q/k head), in parallel over all chunks of all sequences, and stores what
  the state pass needs in a global scratch laid out per chunk *slot*: ``qs^T [K][64]`` per
  q/k head and ``W^T [K][64]``, ``Kd [64][K]``, ``U [64][V]``, ``P^T [64][64]``,
  ``gamma [64]`` per value head. ``gdn_split_state`` then runs only steps 6-8 (vn = U - W h,
  the output, the state update) sequentially over the chunks of a sequence, one CTA per
  (sequence, value head, block of ``w <= 12`` state columns; ``w`` chosen at plan time so
  that the CTAs fill the SMs once: 12 at the production shape on 132 SMs).
* G_ij and S_ij depend only on the q/k head, so one pre-pass CTA computes them once and
  reuses the bits for the ``HV / H`` value heads that read it (A and P, which involve beta
  and D, are formed per value head exactly as in chunked).
* Row norms: the same chain as ``row_recip`` (``ss = fma(x_m, x_m, ss)``, m ascending; add
  eps, IEEE sqrt, IEEE division), on rows staged through shared memory 32 columns at a time
  (the partial sum waits in shared memory between blocks). ``kn_jm = k_jm * r_j`` is
  recomputed where needed (once per staged slab, used for both X and Kd), giving the same
  bits as the stored one. Global accesses of the pre-pass use 32-bit offsets from per-thread
  base pointers (:mod:`._split_prep_io`).
* Register tiling: G / S in 4 x 4 tiles; W / U in 4 x 4 tiles (T is kept transposed so
  that ``T[i0..i0+3, j]`` is one 16-byte load); step 6 (and qh) two rows x 4 columns of one
  product; step 7 two rows (p, L-1-p) x 4 columns; step 8 two rows x 4 columns. Every tile
  keeps one accumulator per output scalar and runs that scalar's chain in chunked's order
  (m ascending; j ascending) from chunked's initial value, so tiling changes no bit.
* The forward substitution runs column by column (one thread per column m of T, rows in
  ascending order, four rows interleaved): entry (i, m) is still
  ``t = -A_im; for j = m+1 .. i-1 ascending: t = fma(-A_ij, T_jm, t)``; column m reads
  only A and its own earlier entries T_jm (j < i), so the solve needs no barrier
  (chunked: one per row). A is stored in place of D (lower triangle), T transposed in the
  upper triangle.
* Barriers per chunk in the state pass: 2 (chunked: L + 6). The state pass stages the
  chunk's W^T / qs^T, and where the device's shared memory allows (227 KB on sm_90; not on
  sm_70's 96 KB) its Kd / P^T, in dynamic shared memory with bursts of 16-byte loads (exact
  copies; :mod:`._split_state`); L1 prefetches (no value effect) bring the next chunk in.

What it keeps
-------------
Every FP32 value is produced by the same sequence of roundings as in chunked.py: the same
fma chains in the same order starting from the same values, the same unfused products with
the same association (``(G * beta) * D``, ``kn * (beta * gamma)``, ``(q * r) * scale``,
``kn * D_{L-1,j}``, ``v * beta``, ``qh * gamma``, ``h * gamma_{L-1}``, ``U - wh``), the
same norm chain, ``E`` only on ``min(g, 0)``, the same backwards running product for D and
gamma, the same RNE cast of the output. Only where values live (global scratch, shared
memory, registers) and which thread computes them differ. The operands of each fma are
passed in chunked's order (this matters only for NaN payloads on the host). Rows past L of
a partial 4-row tile compute on whatever memory holds and are never stored.

Scratch (allocated by :func:`prepare`, sized from the plan; launches allocate nothing)
------------------------------------------------------------------------------------
``scr`` float32 ``[slots * F]``, one block of F floats per chunk of every sequence (slot =
first slot of the sequence + chunk index),
``F = H * 2*K*64 + HV * (2*K*64 + 64*V + 64*64 + 64)``: per q/k head ``kn^T`` and
``qs^T``; per value head ``W^T``, ``Kd``, ``U``, ``P^T``, ``gamma``. At the per-rank
production shape (T = 65536, H = 4, HV = 12, K = V = 128) this is 1024 x 1.64 MB =
1.68 GB. Tables: ``chunks [slots, 3]`` (batch row, first token, length) and
``items [n, 5]`` (sequence, value head, first column, width, first slot).

Knobs (read and checked at plan time, :mod:`._knobs`; a value not listed here is refused
with a ``ValueError`` naming the variable before any launch): ``DFLASH2_GDN_SPLIT_COLS``
(state columns per CTA: 4, 8 or 12; 0 or unset: automatic), ``DFLASH2_GDN_SPLIT_THREADS``
(state CTA threads on a GPU: a multiple of 32 from 32 to 320; 0 or unset: one per phase-2
unit, 288 at K = 128, w = 12; the simulator runs 32) and ``DFLASH2_GDN_STAGE_KP``
(``auto``, the default, ``1`` or ``0``, also ``true`` / ``false``: stage Kd / P^T in shared
memory too).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from numba import types

from .. import _registry
from .._compat import SIMULATOR, cuda, device_zeros, exact_fp32, jit_bounded
from . import _knobs as KN
from ._common import C, MAXD, GdnPlan, default_max_ctas
from ._split_ops import SW, VS
from ._split_prep import gdn_split_prep_kernel
from .._dynshared import DynShared, max_dynamic_shared
from ._split_state import gdn_split_state_kernel, staged_floats, staged_threads

PREP_NAME = "gdn_split_prep"
STATE_NAME = "gdn_split_state"

PREP_THREADS = 32 if SIMULATOR else 128
MAX_STATE_THREADS = 320          # 288 used at K = 128, w = 12 (204 registers allowed)
SIM_STATE_THREADS = 32

# Tuning knobs, read and checked at plan time (:func:`split_cols`, :func:`state_threads`,
# :func:`stage_kp_knob`): state columns per CTA (0 = automatic), threads per state CTA
# (0 = one per phase-2 unit, see staged_threads), and whether the state CTA also stages
# Kd / P^T in shared memory ("auto": when the device allows the bytes). These attributes
# override the environment when set (tests, bench/profile_kernels.py); None: the environment.
COLS = None
STATE_THREADS = None
STAGE_KP = None
STAGE_KP_FORMS = ("auto", "1", "0", "true", "false", "True", "False")


def split_cols() -> int:
    """``DFLASH2_GDN_SPLIT_COLS`` (or :data:`COLS`): 4, 8 or 12 state columns per CTA, or
    0 (also unset) for :func:`choose_cols`' automatic width."""
    return KN.integer(KN.SPLIT_COLS, 0, "4, 8 or 12 (0 or unset: automatic)",
                      lambda n: n in (0, 4, 8, 12), COLS)


def state_threads() -> int:
    """``DFLASH2_GDN_SPLIT_THREADS`` (or :data:`STATE_THREADS`): threads of the state CTA
    (chunked_ws: its compute threads), whole warps up to :data:`MAX_STATE_THREADS`; 0
    (also unset) for the default."""
    return KN.warps(KN.SPLIT_THREADS, 0, MAX_STATE_THREADS, override=STATE_THREADS)


def stage_kp_knob() -> str:
    """``DFLASH2_GDN_STAGE_KP`` (or :data:`STAGE_KP`): ``auto`` (also unset), ``1`` or
    ``0`` (``true`` / ``false`` too)."""
    return KN.choice(KN.STAGE_KP, "auto", STAGE_KP_FORMS, STAGE_KP)


def slot_floats(H: int, HV: int, K: int, V: int) -> int:
    """Scratch floats per chunk slot (a multiple of 64, so every block is 256-byte aligned)."""
    return H * 2 * K * C + HV * (2 * K * C + C * V + C * C + C)


_prep = cuda.jit(gdn_split_prep_kernel)
# (launch bounds: ptxas keeps the state kernel within the registers that MAX_STATE_THREADS
# threads may hold on one SM; the simulator has no such option)
STATE_LAUNCH_BOUNDS = (MAX_STATE_THREADS, 1)
_state = jit_bounded(gdn_split_state_kernel, STATE_LAUNCH_BOUNDS)


# --- host side --------------------------------------------------------------------------

def _arr(dt, nd):
    return types.Array(dt, nd, "C")


def _prep_signatures():
    return tuple((_arr(din, 4), _arr(din, 4), _arr(din, 4), _arr(types.float32, 3),
                  _arr(types.float32, 3), _arr(types.int32, 2), _arr(types.float32, 1),
                  types.int32, types.float32, types.int32)
                 for din in (types.float16, types.float32))


def _state_signatures():
    return tuple((_arr(dout, 4), _arr(types.float32, 4), _arr(types.int32, 1),
                  _arr(types.float32, 4), _arr(types.int32, 1), _arr(types.int32, 2),
                  _arr(types.int32, 2), _arr(types.float32, 1), types.int32, types.int32,
                  types.int32, types.int32)
                 for dout in (types.float16, types.float32))


def choose_cols(n_active: int, HV: int, V: int, sms: int, cols: int) -> int:
    """State columns per CTA: ``cols`` (:func:`split_cols`: 4, 8 or 12) when not 0, else the
    width (multiple of 4, at most 12) that minimises the per-SM column load
    ``ceil(ctas / sms) * w`` with one CTA per SM (ties: the wider)."""
    if cols:
        return cols
    best, best_cost = VS, None
    for w in (12, 8, 4):
        ctas = n_active * HV * (-(-V // w))
        cost = (-(-ctas // max(1, sms))) * w
        if best_cost is None or cost < best_cost:
            best, best_cost = w, cost
    return best


def _tables(plan: GdnPlan, stream):
    cols = split_cols()              # (checked before anything is copied or allocated)
    seqs = plan.seqs.copy_to_host(stream=stream)
    if stream != 0:
        stream.synchronize()
    seqs = np.asarray(seqs).reshape(-1, 3).astype(np.int64)
    N = seqs.shape[0]
    nch = (seqs[:, 2] + C - 1) // C
    slot0 = np.zeros(N, dtype=np.int64)
    if N:
        slot0[1:] = np.cumsum(nch)[:-1]
    nslots = int(nch.sum())
    chunks = np.zeros((max(nslots, 1), 3), dtype=np.int32)
    for n in range(N):
        ci = np.arange(int(nch[n]))
        s = slot0[n] + ci
        chunks[s, 0] = seqs[n, 0]
        chunks[s, 1] = seqs[n, 1] + ci * C
        chunks[s, 2] = np.minimum(C, seqs[n, 2] - ci * C)
    w = choose_cols(int(np.count_nonzero(seqs[:, 2] > 0)) or N, plan.HV, plan.V,
                    default_max_ctas(), cols)
    order = np.argsort(-seqs[:, 2], kind="stable")
    rows = [(n, hv, c0, min(w, plan.V - c0), slot0[n])
            for n in order for hv in range(plan.HV) for c0 in range(0, plan.V, w)]
    items = np.array(rows, dtype=np.int64).reshape(-1, 5).astype(np.int32)
    return chunks, nslots, items, w


def fit_threads(kernel, args, want: int) -> int:
    """``want`` threads, or fewer (whole warps) if the kernel compiled for ``args`` (with the
    package's exact-FP32 flags, as the launch will) uses too many registers for ``want``
    threads on one SM; compiling here also keeps compilation out of the first launch."""
    if SIMULATOR:
        return want
    try:
        argtypes = tuple(kernel.typeof_pyval(a) for a in args)
        with exact_fp32():
            regs = int(kernel.compile(argtypes).regs_per_thread)
    except Exception:        # pragma: no cover - leave the launch to report it
        return want
    per_warp = -(-regs * 32 // 256) * 256
    return max(32, min(want, (65536 // per_warp) * 32))


def prepare_scratch(plan: GdnPlan, stream, extra_per_slot: int = 0) -> SimpleNamespace:
    """Plan time, shared with :mod:`.chunked_ws`: the chunk and item tables, the global
    scratch and the pre-pass configuration. ``extra_per_slot`` floats per chunk slot are
    appended to the scratch after the slots, from float ``extra0`` on, for a variant's own
    per-chunk data."""
    chunks, nslots, items, w = _tables(plan, stream)
    F = slot_floats(plan.H, plan.HV, plan.K, plan.V)
    extra0 = max(nslots, 1) * F
    nfloats = extra0 + nslots * extra_per_slot
    # (zeros: the partial 4-row tiles read rows past L that are never stored, and the
    # output kernels load P^T's never-written upper part in whole float4; neither reaches
    # a result, see device_zeros)
    scr = device_zeros(nfloats, np.float32, stream)
    return SimpleNamespace(
        chunks=cuda.to_device(chunks, stream=stream), items=cuda.to_device(items, stream=stream),
        scr=scr, F=np.int32(F), extra0=np.int64(extra0), nslots=nslots,
        n_items=int(items.shape[0]), cols=w,
        prep_name=PREP_NAME, prep_kernel=_prep, prep_threads=PREP_THREADS)


def launch_prep(plan: GdnPlan, stream) -> None:
    """The planned pre-pass (``plan.scratch``'s kernel, its name, threads and shared
    memory; one CTA per chunk slot and q/k head) on ``stream``, if there are chunks."""
    s = plan.scratch
    if s.nslots:
        _registry.launch(s.prep_name, s.prep_kernel, s.nslots * plan.H, s.prep_threads, stream,
                         plan.q, plan.k, plan.v, plan.g, plan.beta, s.chunks, s.scr, s.F,
                         plan.scale, plan.use_l2)


def stage_kp_choice(floats_with_kp: int, knob: str) -> bool:
    """Whether the state pass also stages Kd / P^T (``knob``: :func:`stage_kp_knob`'s
    value; ``auto``: when ``floats_with_kp`` floats of dynamic shared memory fit the
    device)."""
    if knob == "auto":
        return 4 * floats_with_kp <= max_dynamic_shared()
    return knob in ("1", "true", "True")


def prepare(plan: GdnPlan, stream) -> None:
    """Plan time: the chunk and item tables and the global scratch (every launch after
    this allocates nothing, so it can be captured in a CUDA graph). The knobs are read
    first: a value they do not accept is refused before anything is allocated."""
    knob_threads, knob_kp = state_threads(), stage_kp_knob()
    s = prepare_scratch(plan, stream)
    if SIMULATOR:
        sthreads = SIM_STATE_THREADS
    else:
        sthreads = knob_threads or staged_threads(plan.K, s.cols)
    if plan.threads:
        sthreads = plan.threads
    sthreads = max(1, min(MAX_STATE_THREADS, sthreads))
    stage_kp = stage_kp_choice(staged_floats(plan.K, True), knob_kp)
    smem = 4 * staged_floats(plan.K, stage_kp)
    sthreads = fit_threads(_state, (plan.o, plan.h0, plan.h0_idx, plan.hT, plan.hT_idx,
                                    plan.seqs, s.items, s.scr, s.F, np.int32(plan.H),
                                    np.int32(plan.K), np.int32(stage_kp)), sthreads)
    s.state_threads = sthreads
    s.stage_kp = np.int32(stage_kp)
    s.state_kernel = DynShared(_state, smem)
    s.smem = smem
    plan.scratch = s


def run(plan: GdnPlan, stream) -> None:
    if plan.n_items == 0:
        return
    if plan.scratch is None:
        prepare(plan, stream)
    launch_prep(plan, stream)
    s = plan.scratch
    _registry.launch(STATE_NAME, s.state_kernel, s.n_items, s.state_threads, stream,
                     plan.o, plan.h0, plan.h0_idx, plan.hT, plan.hT_idx, plan.seqs, s.items,
                     s.scr, s.F, np.int32(plan.H), np.int32(plan.K), s.stage_kp)


def supports(plan: GdnPlan) -> None:
    if plan.K > MAXD or plan.V > MAXD or plan.K % SW or plan.V % SW:
        raise _registry.UnsupportedShape(
            f"chunked_split: K={plan.K}, V={plan.V} not in {{32, 64, 128}}")


VARIANT = _registry.register(_registry.Variant(
    name="chunked_split",
    family="gdn",
    description="chunked (C = 64), bit-identical: parallel pre-pass over (chunk, q/k head) "
                "for steps 1-5 (G/S shared by the value heads, column-wise forward "
                "substitution, 4x4 register tiles) into global scratch, then a sequential "
                "state pass per (sequence, value head, <= 12 columns), 2 barriers per chunk",
    contract="B (GDN prefill), chunked family: bit-identical to chunked",
    kernels=(_registry.KernelSpec(PREP_NAME, gdn_split_prep_kernel, _prep_signatures()),
             _registry.KernelSpec(STATE_NAME, gdn_split_state_kernel, _state_signatures(),
                                  launch_bounds=STATE_LAUNCH_BOUNDS)),
    run=run,
    supports=supports,
    bitwise_reference="chunked",
    prepare=prepare,
    flat_inputs=True,         # the pre-pass reads q, k, v, g, beta through flat views
))
