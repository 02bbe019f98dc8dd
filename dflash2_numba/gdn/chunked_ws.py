"""GDN prefill, ``chunked`` family, optimised variant ``chunked_ws``: bit-identical to the
frozen :mod:`dflash2_numba.gdn.chunked` kernel (output and final state, every input).

It is :mod:`.chunked_split` (the same parallel pre-pass kernel ``gdn_split_prep`` and the
same scratch) with a *warp-specialised* state pass (kernel ``gdn_ws_state``,
:mod:`._split_state_ws`): the state CTA gets extra warps whose only job is to copy the next
phase's chunk data (W^T / qs^T / U / gamma, Kd / P^T) from the scratch into shared memory
while the compute warps run the other phase. In ``chunked_split`` the compute threads
issue those copies themselves at the start of each phase and wait for them (an L2 round
trip per burst, on the sequential critical path of all 1024 chunks).

What it changes: only which thread copies what, and when (exact FP32 moves); U and gamma
are read from shared memory instead of global memory. The compute threads run
``chunked_split``'s state chains unchanged (same operands, order and initial values; with
Kd / P^T staged, phase 2 groups them into larger tiles: :mod:`._split_state_ws`), so every
fma chain is chunked's (see :mod:`.chunked_split` for the argument, step by step).

Knobs (read and checked at plan time, :mod:`._knobs`; a value not accepted is refused with a
``ValueError`` naming the variable before any launch): those of :mod:`.chunked_split`
(``DFLASH2_GDN_SPLIT_COLS``, ``DFLASH2_GDN_SPLIT_THREADS`` for the compute threads, a
multiple of 32 up to 320, and ``DFLASH2_GDN_STAGE_KP``) and ``DFLASH2_GDN_WS_COPY_THREADS``
(copy threads: a multiple of 32 from 32 to 352; 0 or unset: the default); 384 threads in all
is the launch bound, so a copy count set with the compute threads past 384 is refused (the
default copy count shrinks to fit). Defaults: 256 compute + 128 copy threads when Kd / P^T
are staged (the H200), 288 + 96 when they are not (sm_70's 96 KB); the simulator runs
32 + 32 whatever the thread knobs say (they are checked all the same). On the H200 at
T = 65536 (state pass alone, ``bench/RESULTS.md``), first form: 288 + 96 8.55 ms, 288 + 64
9.32, 224 + 160 8.02, 256 + 128 7.84: the copies are bound by the bytes the copy threads
keep in flight, so copy threads are worth more than the last 32 compute threads (which
then take a second phase-2 unit).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Optional, Tuple

import numpy as np

from numba import types

from .. import _registry
from .._compat import SIMULATOR, jit_bounded
from .._dynshared import DynShared
from . import _knobs as KN
from . import chunked_split as S
from ._common import GdnPlan
from ._split_prep import gdn_split_prep_kernel
from ._split_state import staged_threads
from ._split_state_ws import gdn_ws_state_kernel, ws_floats

STATE_NAME = "gdn_ws_state"
MAX_THREADS = 384                    # 256 compute + 128 copy threads at K = 128, w = 12
WS_LAUNCH_BOUNDS = (MAX_THREADS, 1)  # (170 registers a thread)
SIM_COMPUTE, SIM_COPY = 32, 32
COPY_THREADS = None     # overrides DFLASH2_GDN_WS_COPY_THREADS when set (bench); None: the env
# (compute, copy) threads by default, with Kd / P^T staged and without (measured, see
# the module docstring); DFLASH2_GDN_SPLIT_THREADS / _WS_COPY_THREADS override them
DEFAULT_THREADS = {True: (256, 128), False: (288, 96)}


def copy_threads() -> int:
    """``DFLASH2_GDN_WS_COPY_THREADS`` (or :data:`COPY_THREADS`): copy threads of the state
    CTA, whole warps from 32 to ``MAX_THREADS - 32``; 0 (also unset) for the default."""
    return KN.warps(KN.WS_COPY_THREADS, 0, MAX_THREADS - 32, override=COPY_THREADS)



def _state_signatures():
    return tuple(sig + (types.int32,) for sig in S._state_signatures())


def _threads(plan: GdnPlan, w: int, stage_kp: bool, knobs, defaults=None, cap=None):
    """(compute threads, copy threads), whole warps: at most ``cap(K, w, stage_kp)`` compute
    threads (by default one per two-row phase-2 unit); ``defaults`` maps ``stage_kp`` to
    the (compute, copy) pair used when no knob is set; ``knobs``: the (compute, copy) knob
    values (0: unset; :func:`.chunked_split.state_threads`, :func:`copy_threads`). A copy count set by its knob that does not fit
    :data:`MAX_THREADS` beside the compute threads is refused (``ValueError``), on the
    simulator too (which runs 32 + 32)."""
    comp_knob, copy_knob = knobs
    comp0, copy0 = (defaults or DEFAULT_THREADS)[bool(stage_kp)]
    most = cap(plan.K, w, stage_kp) if cap else staged_threads(plan.K, w)
    ncomp = comp_knob or min(comp0, most)
    ncomp = -(-ncomp // 32) * 32
    ncopy = copy_knob or copy0
    used = min(MAX_THREADS - 32, plan.threads or ncomp)      # (the compute threads a GPU runs)
    if copy_knob and used + copy_knob > MAX_THREADS:
        KN.refuse(KN.WS_COPY_THREADS, str(copy_knob),
                  f"at most {MAX_THREADS - used} copy threads beside the {used} compute "
                  f"threads ({KN.SPLIT_THREADS} or the default; {MAX_THREADS} a CTA)")
    if SIMULATOR:
        ncomp, ncopy = SIM_COMPUTE, SIM_COPY
    if plan.threads:
        ncomp = plan.threads
    ncomp = max(1, min(MAX_THREADS - 32, ncomp))
    ncopy = max(1, min(MAX_THREADS - ncomp, ncopy))
    return ncomp, ncopy


@dataclass(frozen=True)
class PrePass:
    """The pre-pass kernel of a warp-specialised variant: chunked_split's arguments and
    scratch layout, one CTA per (chunk slot, q/k head). ``threads()``: threads a CTA;
    ``smem(K)``: bytes of dynamic shared memory (0: static arrays only)."""
    name: str
    pyfunc: Callable
    kernel: Any
    threads: Callable[[], int]
    smem: Callable[[int], int]
    launch_bounds: Optional[Tuple[int, int]] = None

    def spec(self) -> _registry.KernelSpec:
        return _registry.KernelSpec(self.name, self.pyfunc, S._prep_signatures(),
                                    launch_bounds=self.launch_bounds)


SPLIT_PREP = PrePass(S.PREP_NAME, gdn_split_prep_kernel, S._prep, lambda: S.PREP_THREADS,
                     lambda K: 0)


def plan_prep(s, prep: PrePass, K: int, threads: int) -> None:
    """Make ``prep`` the planned pre-pass of scratch ``s`` (:func:`.chunked_split.launch_prep`
    launches it) with ``threads`` threads a CTA (``prep.threads()``, read by the caller
    before its scratch was allocated)."""
    nbytes = prep.smem(K)
    s.prep_name = prep.name
    s.prep_kernel = DynShared(prep.kernel, nbytes) if nbytes else prep.kernel
    s.prep_threads = threads


def prepare_with(plan: GdnPlan, stream, kernel, name: str, defaults=None, cap=None,
                 prep: PrePass = SPLIT_PREP) -> None:
    """Plan time of a warp-specialised variant (``kernel``: its jitted state kernel, with
    this module's arguments and shared layout): chunked_split's tables and scratch, the
    pre-pass launch (``prep``), then the state kernel configuration in ``plan.scratch.ws``
    (launches allocate nothing: CUDA-graph capturable). The knobs are read first: a value
    they do not accept is refused before the scratch is allocated."""
    knobs = (S.state_threads(), copy_threads())
    knob_kp, pthreads = S.stage_kp_knob(), prep.threads()
    s = S.prepare_scratch(plan, stream)
    plan_prep(s, prep, plan.K, pthreads)
    stage_kp = S.stage_kp_choice(ws_floats(plan.K, True), knob_kp)
    ncomp, ncopy = _threads(plan, s.cols, stage_kp, knobs, defaults, cap)
    smem = 4 * ws_floats(plan.K, stage_kp)
    args = (plan.o, plan.h0, plan.h0_idx, plan.hT, plan.hT_idx, plan.seqs, s.items, s.scr,
            s.F, np.int32(plan.H), np.int32(plan.K), np.int32(stage_kp), np.int32(ncomp))
    total = S.fit_threads(kernel, args, ncomp + ncopy)
    if total < ncomp + ncopy:       # pragma: no cover - a toolchain that needs more registers
        raise RuntimeError(f"{name}: {ncomp} + {ncopy} threads do not fit one SM")
    s.ws = SimpleNamespace(kernel=DynShared(kernel, smem), smem=smem, ncomp=np.int32(ncomp),
                           ncopy=ncopy, stage_kp=np.int32(stage_kp))
    plan.scratch = s


def run_with(plan: GdnPlan, stream, state_name: str, prepare_fn) -> None:
    """The planned pre-pass (``prepare_fn`` chose it), then the warp-specialised state
    kernel ``state_name``."""
    if plan.n_items == 0:
        return
    if plan.scratch is None or not hasattr(plan.scratch, "ws"):
        prepare_fn(plan, stream)
    S.launch_prep(plan, stream)
    s = plan.scratch
    ws = s.ws
    _registry.launch(state_name, ws.kernel, s.n_items, int(ws.ncomp) + ws.ncopy, stream,
                     plan.o, plan.h0, plan.h0_idx, plan.hT, plan.hT_idx, plan.seqs, s.items,
                     s.scr, s.F, np.int32(plan.H), np.int32(plan.K), ws.stage_kp, ws.ncomp)


_JITTED_STATE = {}


def _jitted_state(state_kernel):
    """``state_kernel`` compiled with this module's launch bounds, one dispatcher per Python
    function (variants that share a state kernel share its compiled code)."""
    if state_kernel not in _JITTED_STATE:
        _JITTED_STATE[state_kernel] = jit_bounded(state_kernel, WS_LAUNCH_BOUNDS)
    return _JITTED_STATE[state_kernel]


def register_ws_variant(name: str, state_name: str, state_kernel, description: str,
                        defaults=None, cap=None, prep: PrePass = SPLIT_PREP, supports=None):
    """Register a ``chunked``-family variant made of the pre-pass ``prep`` (by default
    chunked_split's) and the warp-specialised state kernel ``state_kernel`` (this module's
    arguments, launch bounds and shared layout; :func:`prepare_with`'s ``defaults`` /
    ``cap``), bitwise against ``chunked``; returns the variant."""
    jitted = _jitted_state(state_kernel)

    def prepare(plan: GdnPlan, stream) -> None:
        prepare_with(plan, stream, jitted, name, defaults, cap, prep)

    def run(plan: GdnPlan, stream) -> None:
        run_with(plan, stream, state_name, prepare)

    return _registry.register(_registry.Variant(
        name=name,
        family="gdn",
        description=description,
        contract="B (GDN prefill), chunked family: bit-identical to chunked",
        kernels=(prep.spec(),
                 _registry.KernelSpec(state_name, state_kernel, _state_signatures(),
                                      launch_bounds=WS_LAUNCH_BOUNDS)),
        run=run,
        supports=supports or S.supports,
        bitwise_reference="chunked",
        prepare=prepare,
        flat_inputs=True,     # the pre-pass reads q, k, v, g, beta through flat views
    ))


VARIANT = register_ws_variant(
    "chunked_ws", STATE_NAME, gdn_ws_state_kernel,
    "chunked_split's pre-pass, then a warp-specialised state pass: copy warps stage the next "
    "phase's chunk data in shared memory while the compute warps run the current phase "
    "(2 barriers per chunk)")
