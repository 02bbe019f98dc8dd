"""The sequential pass of variant ``chunked_rec``: only the recurrence of chunked's steps 6
and 8 (``vn = U - W h``; ``h' = h * gamma_{L-1} + sum_j Kd_j vn_j``), chunk after chunk;
the output (step 7) is left to a parallel kernel (:mod:`._chunk_output`) that reads what
this pass writes.

It is :mod:`._split_state_wsr`'s warp-specialised pass (compute warps and copy warps, two
barriers per chunk, copies loaded a phase ahead and carried in registers) with the output
taken out:

* phase 1 (compute): the units of step 6 only (m ascending from 0, ``vn = U - wh``), one
  row x four columns (``dot_h``, ``64 (w/4)`` units) or two rows x four columns
  (``phase1_unit``'s W^T product, half as many, with the operands loaded four steps
  ahead: :func:`rows2_ahead`); no ``qh``;
* phase 2 (compute): the state units of step 8 only, four rows x four columns
  (``phase2_state_unit``'s chains) or two rows x four columns (``state_rows2``; twice the
  units for the same chains, ``DFLASH2_GDN_REC_ROWS``), or, in a twelve-column item, two
  rows x six columns (:func:`rec_state_half`: the columns ``0-3, 8-9`` or ``4-7, 10-11``,
  ``K`` units over four warps; the default: its shared loads are one 8-byte Kd load and
  two broadcast vn loads per twelve fma); no output units (phase 1 has a half-row form
  too, :func:`rec_phase1_half`);
* the copy warps move W^T, Kd, the U slice and gamma (no qs^T, no P^T: 64 KB a chunk
  instead of 112 KB at K = 128), and write out what the output kernel needs: in phase 1,
  while nothing writes the state slice, the chunk-start state ``h`` (the state before
  chunk ``ci``'s update) to ``scr[snap0 + ((slot * HV + hv) * K + m) * V + c]``; in
  phase 2, while nothing writes vn, this chunk's ``vn`` rows ``i < L`` over the slot's U
  slice (U has been read: it was staged a phase earlier; each CTA writes only its own
  columns). Those row copies step through their elements with per-thread increments
  (:func:`row_walk`, no division an element), and when a thread's carried float4 are a
  whole region (W^T and Kd at 128 copy threads, K = 128) they move without the general
  path's clamp and select (:func:`load_exact` / :func:`store_exact`).

Every value the compute warps produce is made by the same chain as in ``chunked_wsr``
(same operands, order and initial values; only the tile shape, the unit count and which
thread runs a unit change: the one-row and half-row units above are tiles that
``chunked_wsr`` does not have), so the final state is chunked's byte for byte, and ``h``
and ``vn`` are chunked's chunk-start states and vn: exact FP32 copies.

Dynamic shared memory (floats, :func:`rec_floats`): state slice ``[MAXD][VS]`` (``MAXD`` =
128 rows whatever K is: ``OFF_VN = N_HS``), vn ``[C][VS]``, (unused ``[C][VS]``), W^T
``[K][C]``, Kd ``[C][K]``, U slice ``[C][VS]``, gamma ``[2][C]``: 81,408 B at K = 128, so
sm_70's 96 KB stage Kd too.
"""
from __future__ import annotations

import numpy as np
from numba import types

from .._compat import cuda
from ._common import C, ZERO
from ._split_ops import VS, _dev, block_sync, fma2, fma4, ld1, ld2, ld4, opaque, st4
from ._split_state import (OFF_VN, OFF_WQ, dot_h, item_layout, load_state_slice,
                           scale4, state_rows2, store_state_slice, sub4)
from ._split_state_ws import prefetch_chunk_l2, rows4
from ._split_state_wsr import (_Z4, SLOTS, copy_ug_rest, load_slots, load_ug, store_region,
                               store_ug, ug_slot, zero_slots)

_F32 = types.float32        # (the dynamic shared array's dtype, as the simulator wants it)
I32 = np.int32


def rec_floats(K: int) -> int:
    """Dynamic shared memory of :func:`gdn_rec_state_kernel` in floats."""
    return OFF_WQ + 2 * K * C + C * VS + 2 * C


@_dev
def rec_regions(KC):
    """Offsets of Kd, the U slice and the two gamma buffers (:func:`rec_floats`' layout)."""
    off_kp = OFF_WQ + KC
    off_u = off_kp + KC
    return off_kp, off_u, off_u + C * VS


@_dev
def store_rows(dst, base, stride, sm, soff, nrows, ncg, at):
    """``dst[base + r * stride + 4g ..] = sm[soff + r * VS + 4g ..]`` for rows ``r < nrows``
    and the ``ncg`` float4 ``g`` of a row (16-byte moves): this copy thread's elements
    ``e = pt, pt + npt, ..`` (``e = r * ncg + g``), walked by the per-thread steps of
    :func:`row_walk` ``at`` instead of a division an element."""
    r, g, dr, dg = at
    q = base + r * stride + 4 * g
    sq = soff + r * VS + 4 * g
    dq = dr * stride + 4 * dg
    dsq = dr * VS + 4 * dg
    wq = stride - 4 * ncg
    wsq = VS - 4 * ncg
    while r < nrows:
        st4(dst, q, ld4(sm, sq))
        r += dr
        g += dg
        q += dq
        sq += dsq
        if g >= ncg:
            g -= ncg
            r += 1
            q += wq
            sq += wsq


@_dev
def row_walk(pt, npt, ncg):
    """``(r0, g0, dr, dg)``: copy thread ``pt``'s first element ``pt = r0 * ncg + g0`` of a
    row-major ``rows x ncg`` float4 block, and the step ``npt = dr * ncg + dg``
    (:func:`store_rows`)."""
    r0 = pt // ncg
    dr = npt // ncg
    return r0, pt - r0 * ncg, dr, npt - dr * ncg


@_dev
def load_exact(scr, s, step):
    """The ``SLOTS`` float4 a copy thread carries when they are all of a one-part region
    and all valid (``n = SLOTS * nprod``): ``scr[s + k * step ..]``, k < ``SLOTS`` (no
    clamp, no select: :func:`._split_state_wsr.load_slots`' values for that case)."""
    return ((ld4(scr, s), ld4(scr, s + step), ld4(scr, s + 2 * step), ld4(scr, s + 3 * step),
             ld4(scr, s + 4 * step), ld4(scr, s + 5 * step), ld4(scr, s + 6 * step),
             ld4(scr, s + 7 * step)),
            (ld4(scr, s + 8 * step), ld4(scr, s + 9 * step), ld4(scr, s + 10 * step),
             ld4(scr, s + 11 * step), ld4(scr, s + 12 * step), ld4(scr, s + 13 * step),
             ld4(scr, s + 14 * step), ld4(scr, s + 15 * step)))


@_dev
def store_exact(sm, d, step, x):
    """:func:`load_exact`'s float4 to ``sm[d + k * step ..]`` (``store_region``'s stores
    for that case)."""
    a, b = x
    st4(sm, d, a[0])
    st4(sm, d + step, a[1])
    st4(sm, d + 2 * step, a[2])
    st4(sm, d + 3 * step, a[3])
    st4(sm, d + 4 * step, a[4])
    st4(sm, d + 5 * step, a[5])
    st4(sm, d + 6 * step, a[6])
    st4(sm, d + 7 * step, a[7])
    st4(sm, d + 8 * step, b[0])
    st4(sm, d + 9 * step, b[1])
    st4(sm, d + 10 * step, b[2])
    st4(sm, d + 11 * step, b[3])
    st4(sm, d + 12 * step, b[4])
    st4(sm, d + 13 * step, b[5])
    st4(sm, d + 14 * step, b[6])
    st4(sm, d + 15 * step, b[7])


@_dev
def load_region(scr, s, exact, pt4, step4, ptid, nprod, n4):
    """The carried float4 of a one-part region at ``scr[s ..]``: :func:`load_exact` when
    they are the whole region (``exact``), else ``load_slots``."""
    if exact:
        return load_exact(scr, s + pt4, step4)
    return load_slots(scr, ptid, nprod, n4, n4, s, s)


@_dev
def put_region(sm, scr, s, d, exact, pt4, step4, ptid, nprod, n4, x):
    """:func:`load_region`'s float4 (and, when not ``exact``, the rest of the region) into
    ``sm[d ..]``."""
    if exact:
        store_exact(sm, d + pt4, step4, x)
    else:
        store_region(sm, scr, ptid, nprod, n4, n4, s, s, d, x)


@_dev
def unit_place(u, n):
    """Where unit ``u`` of a phase works: ``(k, g)``, its index within column group ``g``
    (``n`` units a group; a group's units are consecutive, so a warp's lanes share one
    column group and its h / vn loads are broadcasts)."""
    g = u // n
    return u - g * n, g


@_dev
def rows2_ahead(src, p, stride, x, px, a0, a1, n):
    """``rows2``'s chains (``a_r[c] = fma(src[p + t*stride + r], x[px + t*VS + c], a_r[c])``
    for t = 0 .. n-1 ascending, r = 0, 1), four steps a pass with the next four steps'
    loads issued before this pass's 32 fma (``n`` a multiple of 4, at least 4): a lone warp
    on its scheduler waits on fewer shared loads. No load reaches past row ``n - 1``."""
    s2 = 2 * stride
    s3 = 3 * stride
    f0 = ld2(src, p)
    f1 = ld2(src, p + stride)
    f2 = ld2(src, p + s2)
    f3 = ld2(src, p + s3)
    h0 = ld4(x, px)
    h1 = ld4(x, px + VS)
    h2 = ld4(x, px + 2 * VS)
    h3 = ld4(x, px + 3 * VS)
    t = 4
    while t < n:
        p += 4 * stride
        px += 4 * VS
        g0 = ld2(src, p)
        g1 = ld2(src, p + stride)
        g2 = ld2(src, p + s2)
        g3 = ld2(src, p + s3)
        k0 = ld4(x, px)
        k1 = ld4(x, px + VS)
        k2 = ld4(x, px + 2 * VS)
        k3 = ld4(x, px + 3 * VS)
        a0, a1 = four_steps((f0, f1, f2, f3), (h0, h1, h2, h3), a0, a1)
        f0, f1, f2, f3 = g0, g1, g2, g3
        h0, h1, h2, h3 = k0, k1, k2, k3
        t += 4
    return four_steps((f0, f1, f2, f3), (h0, h1, h2, h3), a0, a1)


@_dev
def pass_loads(src, p, stride, x, px):
    """The operands of one pass (four steps t = 0 .. 3) of :func:`rows2_ahead`'s chains as
    one call: the W^T pairs ``src[p + t*stride ..]`` and the state rows ``x[px + t*VS ..]``
    (``_split_state_ahead.rows2_deep``'s loads; :func:`rows2_ahead` keeps its own inline:
    through this call its sm_90 SASS changes, and its timings are of the inline form)."""
    s2 = 2 * stride
    s3 = 3 * stride
    return ((ld2(src, p), ld2(src, p + stride), ld2(src, p + s2), ld2(src, p + s3)),
            (ld4(x, px), ld4(x, px + VS), ld4(x, px + 2 * VS), ld4(x, px + 3 * VS)))


@_dev
def four_steps(w, h, a0, a1):
    """Four steps of :func:`rows2_ahead`'s two chains per column, in order, on one pass's
    operands (:func:`pass_loads`)."""
    a0 = fma4(w[0][0], h[0], a0)
    a1 = fma4(w[0][1], h[0], a1)
    a0 = fma4(w[1][0], h[1], a0)
    a1 = fma4(w[1][1], h[1], a1)
    a0 = fma4(w[2][0], h[2], a0)
    a1 = fma4(w[2][1], h[2], a1)
    a0 = fma4(w[3][0], h[3], a0)
    a1 = fma4(w[3][1], h[3], a1)
    return a0, a1


PLACE_GROUP = 0     # phase-1 two-row units of a twelve-column item: a warp a column group
PLACE_PAIRS = 1     # two column groups a warp, 16 row pairs each (and one warp of group 2)
PLACE_SPREAD = 2    # four warps of 24 lanes: eight row pairs x three column groups each


@_dev
def place_slots(place):
    """Thread slots the phase-1 loop walks under a placement (:func:`place_unit`): 96, or
    128 for ``PLACE_SPREAD`` (four warps, eight lanes each at rest)."""
    return 128 if place == PLACE_SPREAD else 96


@_dev
def place_unit(s, place):
    """``(k, g, active)``: the two-row phase-1 unit (row pair ``k`` of 32, column group
    ``g`` of 3) that thread slot ``s`` runs in a twelve-column item.

    * ``PLACE_PAIRS``: slots 0-63 take column groups 0 and 1 in neighbouring lanes, a warp
      16 row pairs (its W^T load: 32 rows, one 128-byte wavefront; its h load: two float4,
      one wavefront); slots 64-95 take column group 2, a lane a row pair (as
      ``unit_place``);
    * ``PLACE_SPREAD``: warp ``s >> 5``'s lanes 0-23 take row pairs ``8 (s >> 5) .. + 7``
      x the three column groups (lane = 3 x pair + group), lanes 24-31 rest: four warps
      share the work (16 rows: a 64-byte W^T load; three float4 of h: one wavefront).

    Which thread runs a unit changes; its chains do not."""
    if place == PLACE_PAIRS:
        if s < 64:
            return s >> 1, s & 1, True
        return s - 64, 2, True
    lane = s & 31
    q = lane // 3
    return 8 * (s >> 5) + q, lane - 3 * q, lane < 24


@_dev
def rec_state_unit(sm, u, nq, off_kp, K, gl, L):
    """Phase-2 state unit ``u`` (``nq`` units per column group, placed by
    :func:`unit_place`): chunked step 8 on the staged Kd, in place (``h' = h *
    gamma_{L-1}``, then ``fma(Kd_jm, vn_jc, h')`` for j = 0 .. L-1), four rows x four
    columns when ``nq == K / 4`` (``rows4``, ``phase2_state_unit``'s chains), else two rows
    (``state_rows2``)."""
    k, g = unit_place(u, nq)
    c4 = 4 * g
    if 4 * nq == K:
        m0 = 4 * k
        ph = m0 * VS + c4
        a0 = scale4(ld4(sm, ph), gl)
        a1 = scale4(ld4(sm, ph + VS), gl)
        a2 = scale4(ld4(sm, ph + 2 * VS), gl)
        a3 = scale4(ld4(sm, ph + 3 * VS), gl)
        a0, a1, a2, a3 = rows4(sm, off_kp + m0, K, sm, OFF_VN + c4, a0, a1, a2, a3, L)
        st4(sm, ph, a0)
        st4(sm, ph + VS, a1)
        st4(sm, ph + 2 * VS, a2)
        st4(sm, ph + 3 * VS, a3)
    else:
        state_rows2(sm, sm, 1, off_kp, 0, K, 2 * k, c4, gl, L)


@_dev
def half_cols(u):
    """The six of twelve state columns of a half-row unit ``u``: ``c4 .. c4 + 3`` and
    ``c2, c2 + 1`` (``u & 1`` picks ``0-3, 8-9`` or ``4-7, 10-11``: 16- and 8-byte aligned,
    and the two halves of a row pair are neighbouring lanes)."""
    hf = u & 1
    return 4 * hf, 8 + 2 * hf


@_dev
def rec_phase1_half(sm, u, K, off_u):
    """Phase-1 unit ``u < 128`` of a twelve-column item (``C`` rows x two halves): chunked
    step 6 for row ``i = u >> 1`` and the six columns of :func:`half_cols` (``wh = sum_m
    W_im h_mc``, m ascending from 0; ``vn = U - wh``): six chains, one W load and two
    broadcast h loads a step. A warp covers 16 rows: its W load is one 64-byte wavefront."""
    i = u >> 1
    c4, c2 = half_cols(u)
    a = (ZERO, ZERO, ZERO, ZERO)
    b = (ZERO, ZERO)
    p = OFF_WQ + i
    ph = 0
    m = 0
    while m < K:
        x = ld1(sm, p)
        a = fma4(x, ld4(sm, ph + c4), a)
        b = fma2(x, ld2(sm, ph + c2), b)
        p += C
        ph += VS
        m += 1
    pr = i * VS
    st4(sm, OFF_VN + pr + c4, sub4(ld4(sm, off_u + pr + c4), a))
    ub = ld2(sm, off_u + pr + c2)
    sm[OFF_VN + pr + c2] = ub[0] - b[0]
    sm[OFF_VN + pr + c2 + 1] = ub[1] - b[1]


@_dev
def half_state_in(sm, u, gl):
    """A half-row phase-2 unit's start: its first row ``m0``, columns ``c4``, ``c2``
    (:func:`half_cols`), state offset ``ph``, and its twelve chains' initial values ``h *
    gamma_{L-1}`` (two rows: four columns ``a0``, ``a1``, two columns ``b0``, ``b1``)."""
    m0 = 2 * (u >> 1)
    c4, c2 = half_cols(u)
    ph = m0 * VS
    a0 = scale4(ld4(sm, ph + c4), gl)
    a1 = scale4(ld4(sm, ph + VS + c4), gl)
    h0 = ld2(sm, ph + c2)
    h1 = ld2(sm, ph + VS + c2)
    return m0, c4, c2, ph, a0, a1, (h0[0] * gl, h0[1] * gl), (h1[0] * gl, h1[1] * gl)


@_dev
def half_step(f, va, vb, a0, a1, b0, b1):
    """One step j of a half-row phase-2 unit's twelve chains: ``fma(Kd_jm, vn_jc, h')`` for
    its two rows (``f``) and six columns (``va``: four, ``vb``: two)."""
    return (fma4(f[0], va, a0), fma4(f[1], va, a1), fma2(f[0], vb, b0), fma2(f[1], vb, b1))


@_dev
def half_state_out(sm, ph, c4, c2, a0, a1, b0, b1):
    """A half-row phase-2 unit's twelve chains' ends back into the state, in place."""
    st4(sm, ph + c4, a0)
    st4(sm, ph + VS + c4, a1)
    sm[ph + c2] = b0[0]
    sm[ph + c2 + 1] = b0[1]
    sm[ph + VS + c2] = b1[0]
    sm[ph + VS + c2 + 1] = b1[1]


@_dev
def rec_state_half(sm, u, off_kp, K, gl, L):
    """Phase-2 unit ``u < K`` of a twelve-column item (``K / 2`` row pairs x two halves):
    chunked step 8 for rows ``m0 = 2 (u >> 1)``, ``m0 + 1`` and the six columns of
    :func:`half_cols`, in place (``h' = h * gamma_{L-1}``, then ``fma(Kd_jm, vn_jc, h')``
    for j = 0 .. L-1): twelve chains, one 8-byte Kd load and two broadcast vn loads a step.
    A warp covers 32 rows: its Kd load is one 128-byte wavefront."""
    m0, c4, c2, ph, a0, a1, b0, b1 = half_state_in(sm, u, gl)
    p = off_kp + m0
    pv = OFF_VN
    j = 0
    while j < L:
        f = ld2(sm, p)
        va = ld4(sm, pv + c4)
        vb = ld2(sm, pv + c2)
        a0, a1, b0, b1 = half_step(f, va, vb, a0, a1, b0, b1)
        p += K
        pv += VS
        j += 1
    half_state_out(sm, ph, c4, c2, a0, a1, b0, b1)


def make_rec_forms(rows2_chains, state_half):
    """The recurrence's compute forms built on a two-row phase-1 chain function
    ``rows2_chains`` (:func:`rows2_ahead`'s arguments and chains) and a half-row phase-2 unit
    ``state_half`` (:func:`rec_state_half`'s arguments and chains): ``(rec_phase1_rows2,
    rec_phase1_unit, rec_state_item)``. The forms a kernel is built from decide when each
    shared load issues, never a chain, its order or its operands: every pair gives chunked's
    bytes. The module's own (``gdn_rec_state``) are built on :func:`rows2_ahead` and
    :func:`rec_state_half`; :mod:`._split_state_ahead` builds a second kernel."""

    @_dev
    def rec_phase1_rows2(sm, k, g, K, off_u):
        """Chunked step 6 for rows ``2k``, ``2k + 1`` and columns ``4g .. 4g + 3``
        (``rows2_chains``: ``phase1_unit``'s W^T product, m ascending from 0; ``vn = U -
        wh``): the two-row unit, wherever a placement puts it."""
        r0 = 2 * k
        c4 = 4 * g
        z4 = (ZERO, ZERO, ZERO, ZERO)
        a0, a1 = rows2_chains(sm, OFF_WQ + r0, C, sm, c4, z4, z4, K)
        pr = r0 * VS + c4
        pu = off_u + pr
        st4(sm, OFF_VN + pr, sub4(ld4(sm, pu), a0))
        st4(sm, OFF_VN + pr + VS, sub4(ld4(sm, pu + VS), a1))

    @_dev
    def rec_phase1_unit(sm, u, n1, K, off_u):
        """Phase-1 unit ``u`` (``n1`` units per column group, placed by :func:`unit_place`):
        chunked step 6 (``wh = sum_m W_im h_mc``, m ascending from 0; ``vn = U - wh``) over
        four columns for one row when ``n1 == C`` (``dot_h``: four chains, one W and one
        broadcast h load per four fma), else for two rows (:func:`rec_phase1_rows2`: the
        chains of ``phase1_unit``'s W^T product)."""
        k, g = unit_place(u, n1)
        c4 = 4 * g
        if n1 == C:
            a0, a1, a2 = dot_h(sm, OFF_WQ + k, C, sm, c4, K, 1)
            st4(sm, OFF_VN + k * VS + c4, sub4(ld4(sm, off_u + k * VS + c4), a0))
        else:
            rec_phase1_rows2(sm, k, g, K, off_u)

    @_dev
    def rec_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, snap0, it, ncomp,
                       n1, nq, sm):
        """Steps 6 and 8 of chunked for work item ``it`` over every chunk of its sequence,
        writing each chunk's start state and vn for the output kernel (module docstring).
        Threads ``tid < ncomp`` compute, the others copy. A CTA-wide call: every thread passes
        the same number of barriers."""
        tid = cuda.threadIdx.x
        nthr = cuda.blockDim.x
        n, hv, c0, w, bb, bos, ln, V, KC, sb, o_qs, o_w, o_kd, o_u, o_p, o_g = item_layout(
            o, seqs, items, F, H, K, it)
        off_kp, off_u, off_g = rec_regions(KC)
        ncg = w // 4
        nch = (ln + C - 1) // C
        HV = o.shape[2]
        load_state_slice(sm, h0, h0_idx[n], hv, c0, K, w, tid, nthr)

        if tid >= ncomp:
            ptid = I32(tid - ncomp)
            nprod = I32(nthr - ncomp)
            n4 = I32(KC // 4)                        # float4 of W^T (= of Kd)
            cu = I32(c0 + o_u)                       # the U slice's first column in the slot
            nvh = I32(2 * KC + C * V + C * C + C)    # W^T, Kd, U, P^T, gamma (L2 prefetch)
            o_w = I32(o_w)
            o_kd = I32(o_kd)
            o_g = I32(o_g)
            V = I32(V)
            ncg = I32(ncg)
            KC = I32(KC)
            KV = np.int64(K * V)
            # chunk-start states of this item: [slot][hv][K][V], slot = first slot + ci
            sh = snap0 + (np.int64(items[it, 4]) * HV + hv) * KV + c0
            shs = np.int64(HV) * KV                  # (one slot further)
            pf_l2 = c0 == 0                          # one CTA per value head prefetches into L2
            u0 = ug_slot(ptid, ncg, cu, V, off_u, o_g, off_g)
            u1 = ug_slot(ptid + nprod, ncg, cu, V, off_u, o_g, off_g)
            walk = row_walk(ptid, nprod, ncg)        # (once: the chunk loop adds, never divides)
            exact = n4 == SLOTS * nprod              # the carried float4 are the whole region
            pt4 = I32(4 * ptid)
            step4 = I32(4 * nprod)
            x = zero_slots()
            xu = (_Z4, _Z4)
            if nch > 0:
                if pf_l2 and nch > 1:
                    prefetch_chunk_l2(scr, sb + F, o_w, o_w, nvh, I32(0), ptid, nprod)
                store_ug(sm, u0, u1, 0, load_ug(scr, sb, u0, u1))
                copy_ug_rest(sm, scr, sb, ptid + 2 * nprod, nprod, ncg, cu, V, off_u, o_g, off_g, 0)
                put_region(sm, scr, sb + o_w, OFF_WQ, exact, pt4, step4, ptid, nprod, n4,
                           load_region(scr, sb + o_w, exact, pt4, step4, ptid, nprod, n4))
                x = load_region(scr, sb + o_kd, exact, pt4, step4, ptid, nprod, n4)
            block_sync()
            for ci in range(nch):
                L = min(C, ln - ci * C)
                sn = sb + F
                # phase 1: this chunk's Kd (carried) into shared memory, the chunk-start state
                # out, then the loads of the next chunk's W^T / U / gamma
                ptid = opaque(ptid)
                if pf_l2 and ci + 2 < nch:
                    prefetch_chunk_l2(scr, sb + 2 * F, o_w, o_w, nvh, I32(0), ptid, nprod)
                put_region(sm, scr, sb + o_kd, off_kp, exact, pt4, step4, ptid, nprod, n4, x)
                store_rows(scr, sh, V, sm, 0, K, ncg, walk)
                x = zero_slots()
                xu = (_Z4, _Z4)
                if ci + 1 < nch:
                    xu = load_ug(scr, sn, u0, u1)
                    x = load_region(scr, sn + o_w, exact, pt4, step4, ptid, nprod, n4)
                block_sync()
                # phase 2: the next chunk's W^T / U / gamma (other gamma buffer) into shared
                # memory, this chunk's vn out (over its U slice), then the next chunk's Kd loads
                ptid = opaque(ptid)
                if ci + 1 < nch:
                    store_ug(sm, u0, u1, (ci + 1) & 1, xu)
                    copy_ug_rest(sm, scr, sn, ptid + 2 * nprod, nprod, ncg, cu, V, off_u, o_g,
                                 off_g, (ci + 1) & 1)
                    put_region(sm, scr, sn + o_w, OFF_WQ, exact, pt4, step4, ptid, nprod, n4, x)
                store_rows(scr, sb + cu, V, sm, OFF_VN, L, ncg, walk)
                x = zero_slots()
                if ci + 1 < nch:
                    x = load_region(scr, sn + o_kd, exact, pt4, step4, ptid, nprod, n4)
                block_sync()
                sb += F
                sh += shs
        else:
            block_sync()
            half1 = n1 == 0 and ncg == 3             # half-row units (twelve-column items)
            half2 = nq == 0 and ncg == 3
            place = PLACE_GROUP
            if n1 < 0:                               # two-row units, placed (place_unit)
                place = -n1
                n1 = C // 2
            placed = place != PLACE_GROUP and ncg == 3
            nslot = place_slots(place)
            if n1 == 0:                              # (other items: two- / four-row units)
                n1 = C // 2
            if nq == 0:
                nq = K // 4
            ns = nq * ncg
            for ci in range(nch):
                L = min(C, ln - ci * C)
                gb = off_g + (ci & 1) * C            # this chunk's gamma buffer
                # phase 1: chunked step 6 (vn = U - W h), m ascending
                if half1:
                    for u in range(tid, 2 * C, ncomp):
                        rec_phase1_half(sm, u, K, off_u)
                elif placed:
                    for u in range(tid, nslot, ncomp):
                        k1, g1, act = place_unit(u, place)
                        if act:
                            rec_phase1_rows2(sm, k1, g1, K, off_u)
                else:
                    for u in range(tid, n1 * ncg, ncomp):
                        rec_phase1_unit(sm, u, n1, K, off_u)
                block_sync()
                # phase 2: chunked step 8 (h' = h * gamma_{L-1}, then fma(Kd_jm, vn_jc, h')
                # for j = 0 .. L-1), in place
                gl = ld1(sm, gb + L - 1)
                if half2:
                    for u in range(tid, K, ncomp):
                        state_half(sm, u, off_kp, K, gl, L)
                else:
                    for u in range(tid, ns, ncomp):
                        rec_state_unit(sm, u, nq, off_kp, K, gl, L)
                block_sync()

        store_state_slice(hT, hT_idx[n], hv, c0, sm, K, w, tid, nthr)

    return rec_phase1_rows2, rec_phase1_unit, rec_state_item


rec_phase1_rows2, rec_phase1_unit, rec_state_item = make_rec_forms(rows2_ahead, rec_state_half)


def gdn_rec_state_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, snap0, ncomp,
                         n1, nq):
    """Recurrence of contract.md part B, ``chunked`` family (``chunked_rec`` and the variants
    built on it): steps 6 and 8 of :mod:`.chunked`'s FP32 order for work item ``blockIdx.x``, writing each
    chunk's start state and vn for the output kernel. The final state must equal the frozen
    ``gdn_chunked_kernel``'s bit for bit, and the start states and vn are that kernel's
    values (exact FP32 copies)."""
    sm = cuda.shared.array(0, _F32)
    rec_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, snap0,
                   cuda.blockIdx.x, ncomp, n1, nq, sm)
