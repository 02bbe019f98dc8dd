"""The recurrence kernel of variant ``chunked_ahead``: :mod:`._split_state_rec`'s
``gdn_rec_state`` (warp-specialised, compute and copy warps, two barriers a chunk step)
with the compute warps' shared loads issued further ahead of the fma that use them. Same
chains, same operands, same order, same initial values: the final state, the chunk-start
states and vn are chunked's, byte for byte.

Why: a chunk step's two phases run on three or four compute warps, one a scheduler, so
nothing covers a warp's wait on its own loads (``bench/gdn_fast_notes.md`` sections 22-23).

* Phase 1's two-row units (:func:`rows2_deep`) issue each pass's loads two passes (eight
  m steps) ahead instead of one; with three warps' loads in the shared pipe a load can take
  longer than one pass of 32 fma to return. On the H200 the phase alone went from 3390 to
  3044 cycles a pass (``bench/rec_loop_micro.py``, configurations ``128x2x0`` / ``128x2dx0``).
* Phase 2's half-row units (:func:`rec_state_half_ahead`) issue each step's three loads a
  step ahead: the device's ptxas otherwise puts an unrolled iteration's twelve loads in a
  row and the warp waits on them. The phase alone went from 2871 to 2154 cycles a pass.

Everything else (the copy warps, the barriers, the items, the other unit forms of
``DFLASH2_GDN_REC_ROWS``) is :func:`._split_state_rec.make_rec_forms`' item, unchanged.
Beside the copy warps most of the micro's gain is lost: the chunk step went from 7378 to
7228 cycles and the call from 6.405 to 6.268 ms at T = 65536 (``bench/RESULTS.md``, GDN
seventeenth round).
"""
from __future__ import annotations

from .._compat import SIMULATOR, cuda
from ._split_ops import VS, _dev, ld2, ld4
from ._split_state import OFF_VN
from ._split_state_rec import (_F32, four_steps, half_state_in, half_state_out, half_step,
                               make_rec_forms, pass_loads, rec_state_half, rows2_ahead)


@_dev
def rows2_deep(src, p, stride, x, px, a0, a1, n):
    """``rows2_ahead``'s chains (``a_r[c] = fma(src[p + t*stride + r], x[px + t*VS + c],
    a_r[c])``, t ascending, r = 0, 1) with each pass's loads issued two passes (eight steps)
    ahead instead of one: under three warps' load traffic a load may take longer than one
    pass of 32 fma to return. ``n`` a multiple of 4, at least 8; no load past row ``n - 1``.
    Phase 1's two-row chains in ``gdn_rec_ahead_state``."""
    w, h = pass_loads(src, p, stride, x, px)
    wn, hn = pass_loads(src, p + 4 * stride, stride, x, px + 4 * VS)
    t = 8
    while t < n:
        p += 4 * stride
        px += 4 * VS
        w2, h2 = pass_loads(src, p + 4 * stride, stride, x, px + 4 * VS)
        a0, a1 = four_steps(w, h, a0, a1)
        w = wn
        h = hn
        wn = w2
        hn = h2
        t += 4
    a0, a1 = four_steps(w, h, a0, a1)
    return four_steps(wn, hn, a0, a1)


@_dev
def rec_state_half_ahead(sm, u, off_kp, K, gl, L):
    """:func:`rec_state_half` with each step's three shared loads (Kd, the two vn parts)
    issued a step ahead of its fma: the same twelve chains, initial values and j order, so
    the same bytes. The device's ptxas leaves the plain loop's loads at the top of each
    unrolled iteration, twelve in a row, and the warp then waits on them
    (``bench/gdn_fast_notes.md`` section 22); here they interleave with the fma. Phase 2's
    half-row units in ``gdn_rec_ahead_state`` (``r2 = a`` in ``bench/rec_loop_micro.py``)."""
    m0, c4, c2, ph, a0, a1, b0, b1 = half_state_in(sm, u, gl)
    if L > 0:
        p = off_kp + m0
        pv = OFF_VN
        f = ld2(sm, p)
        va = ld4(sm, pv + c4)
        vb = ld2(sm, pv + c2)
        j = 1
        while j < L:
            p += K
            pv += VS
            fn = ld2(sm, p)
            van = ld4(sm, pv + c4)
            vbn = ld2(sm, pv + c2)
            a0, a1, b0, b1 = half_step(f, va, vb, a0, a1, b0, b1)
            f = fn
            va = van
            vb = vbn
            j += 1
        a0, a1, b0, b1 = half_step(f, va, vb, a0, a1, b0, b1)
    half_state_out(sm, ph, c4, c2, a0, a1, b0, b1)


P1_FORMS = {"pass": rows2_ahead, "deep": rows2_deep}   # phase 1's two-row chain functions
P2_FORMS = {"plain": rec_state_half, "ahead": rec_state_half_ahead}   # phase 2's half-row units


def rec_kernel_for(p1: str, p2: str):
    """A recurrence kernel function with ``gdn_rec_state``'s arguments, shared memory and
    chains, built by ``make_rec_forms`` on ``P1_FORMS[p1]`` and ``P2_FORMS[p2]`` (compile it
    under ``gdn_rec_state``'s launch bounds). ``pass`` / ``plain`` is ``gdn_rec_state``'s
    code; ``bench/rec_forms_ab.py`` times the four pairs in one plan."""
    _, _, item = make_rec_forms(P1_FORMS[p1], P2_FORMS[p2])
    # (the item reads ``cuda.threadIdx`` through :mod:`._split_state_rec`'s globals, which the
    # simulator swaps only for kernels defined there; a simulated device function swaps its
    # own module's. On a GPU the item is compiled into the kernel and nothing is swapped.)
    run = cuda.jit(device=True)(item) if SIMULATOR else item

    def rec_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, snap0, ncomp, n1,
                   nq):
        """Recurrence of contract.md part B, ``chunked`` family: ``gdn_rec_state`` built on
        the given phase-1 / phase-2 forms (``chunked_ahead`` registers ``deep`` / ``ahead``).
        The final state must equal the frozen ``gdn_chunked_kernel``'s bit for bit, and the
        start states and vn are that kernel's values (exact FP32 copies)."""
        sm = cuda.shared.array(0, _F32)
        run(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, snap0, cuda.blockIdx.x,
            ncomp, n1, nq, sm)

    rec_kernel.__name__ = rec_kernel.__qualname__ = f"gdn_rec_{p1}_{p2}_state_kernel"
    rec_kernel.item = item          # (its source: bench/_state_phase_clock.py's clocked copy)
    return rec_kernel

gdn_rec_ahead_state_kernel = rec_kernel_for("deep", "ahead")
