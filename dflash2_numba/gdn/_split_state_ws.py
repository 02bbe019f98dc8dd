"""The sequential state pass of variant ``chunked_ws``: steps 6-8 of the frozen
:mod:`.chunked` order, with the CTA split into *compute* threads and *copy* threads.

The compute threads run exactly :func:`._split_state.staged_state_item`'s fma chains (each
chain with the same operands, order and initial values; U and gamma are read from shared
memory instead of global). The tiles are not all the same: phase 1's are
staged_state_item's, but with Kd / P^T staged phase 2 runs state units of four rows x four
columns (:func:`rows4`) instead of two rows, and interleaves the two output rows of a unit
(:func:`out_pair`) instead of running them one after the other; without that staging it
runs staged_state_item's units. The copy threads (whole warps after the compute warps)
move the chunk data from the pre-pass scratch into shared memory *while the compute
threads work on the other phase*, so no compute thread waits on an L2 round trip:

* during phase 1 of chunk ``ci`` (vn = U - W h, qh * gamma), which reads W^T / qs^T / U
  and gamma, they copy chunk ``ci``'s Kd / P^T (read only in phase 2);
* during phase 2 of chunk ``ci`` (state update, output), which reads Kd / P^T / vn / qh and
  gamma_{L-1}, they copy chunk ``ci + 1``'s W^T / qs^T / U (read only in phase 1) and its
  gamma into the other of two gamma buffers.

Each region is written in the phase in which nobody reads it, and the block barrier that
ends each phase orders every write before its reads, so there are still two barriers per
chunk and no other synchronisation. Every copy is an exact FP32 move.

Without Kd / P^T staging (sm_70's 96 KB of shared memory), phase 2 reads them from global
memory as in ``staged_state_item``, and the copy threads L1-prefetch them during phase 1.

Dynamic shared memory, float32 offsets: state slice ``[MAXD][VS]`` (``MAXD`` = 128 rows
whatever K is: ``OFF_VN = N_HS``), vn ``[C][VS]``, qh * gamma ``[C][VS]``, W^T | qs^T
``[2][K][C]``, (Kd ``[C][K]`` | P^T ``[C][C]``), U slice ``[C][VS]``, gamma ``[2][C]``.
"""
from __future__ import annotations

from numba import types

from .._compat import cuda
from ._common import C
from ._split_ops import VS, _dev, fma4, ld1, ld4, pf1, pf2, st4
from ._split_state import (OFF_OQ, OFF_VN, OFF_WQ, item_layout, load_state_slice,
                           prefetch_kd_pt_l1,
                           phase1_unit, scale4, stage_two, state_rows2,
                           store_row, store_state_slice)

_F32 = types.float32        # (the dynamic shared array's dtype, as the simulator wants it)


def ws_floats(K: int, stage_kp: bool) -> int:
    """Dynamic shared memory of :func:`gdn_ws_state_kernel` in floats: the staged layout of
    the module docstring, ending with the U slice and the two gamma buffers (the kernel
    derives the same offsets from ``K`` and ``stage_kp``)."""
    return OFF_WQ + 2 * K * C + ((C * K + C * C) if stage_kp else 0) + C * VS + 2 * C


@_dev
def _ug_addr(e, nu, ncg, bu, V, du, bg, dg):
    """Source and destination of float4 number ``e`` of the U slice (``C`` rows of ``ncg``
    float4, global row stride V, shared row stride VS) followed by gamma (``C / 4`` float4)."""
    if e < nu:
        i = e // ncg
        g4 = 4 * (e - i * ncg)
        return bu + i * V + g4, du + i * VS + g4
    j4 = 4 * (e - nu)
    return bg + j4, dg + j4


@_dev
def stage_ug(dst, src, bu, V, ncg, du, bg, dg, ptid, nprod):
    """Copy the chunk's U slice and gamma (exact), three 16-byte loads per thread in flight."""
    nu = C * ncg
    n = nu + C // 4
    e = ptid
    while e < n:
        s0, d0 = _ug_addr(e, nu, ncg, bu, V, du, bg, dg)
        x0 = ld4(src, s0)
        e1 = e + nprod
        e2 = e + 2 * nprod
        s1, d1 = _ug_addr(min(e1, n - 1), nu, ncg, bu, V, du, bg, dg)
        x1 = ld4(src, s1)
        s2, d2 = _ug_addr(min(e2, n - 1), nu, ncg, bu, V, du, bg, dg)
        x2 = ld4(src, s2)
        st4(dst, d0, x0)
        if e1 < n:
            st4(dst, d1, x1)
        if e2 < n:
            st4(dst, d2, x2)
        e += 3 * nprod


@_dev
def rows4(src, p, stride, x, px, a0, a1, a2, a3, n):
    """Four chains per column over four columns:
    ``a_r[c] = fma(src[p + t*stride + r], x[px + t*VS + c], a_r[c])`` for t = 0 .. n-1
    ascending (r = 0 .. 3): two 16-byte shared loads per sixteen fma."""
    t = 0
    while t < n:
        f = ld4(src, p)
        hh = ld4(x, px)
        a0 = fma4(f[0], hh, a0)
        a1 = fma4(f[1], hh, a1)
        a2 = fma4(f[2], hh, a2)
        a3 = fma4(f[3], hh, a3)
        p += stride
        px += VS
        t += 1
    return a0, a1, a2, a3


@_dev
def phase2_state_unit(sm, scr, u, nq, stage_kp, off_kp, kd_base, K, gl, L):
    """Phase-2 state unit ``u`` (< ``nq`` units per column group x the column groups),
    in place: chunked step 8 (``h' = h * gamma_{L-1}``, then ``fma(Kd_jm, vn_jc, h')`` for
    j = 0 .. L-1): four rows x four columns with Kd staged at ``sm[off_kp ..]``, two rows
    (more loads in flight) with Kd read from ``scr[kd_base ..]``."""
    g = u // nq
    c4 = 4 * g
    if stage_kp != 0:
        m0 = 4 * (u - g * nq)
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
        state_rows2(sm, scr, 0, 0, kd_base, K, 2 * (u - g * nq), c4, gl, L)


@_dev
def out_unit_rows(u2, half, L):
    """Output unit ``u2`` of a chunk of ``L`` rows (``half = (L + 1) / 2`` units per column
    group): ``(p, c4, ib, na)``, its rows p and ib = L-1-p (``ib >= p``; equal only for the
    middle row), its first column ``c4``, and the step count of row p's chain (p + 1; 0
    for the middle row, which is row ib's alone)."""
    g = u2 // half
    p = u2 - g * half
    ib = L - 1 - p
    na = p + 1
    if ib == p:
        na = 0
    return p, 4 * g, ib, na


@_dev
def out_pair(src, pa, pb, stride, x, px, oa, ob, na, nb):
    """Two output rows a, b (na <= nb steps) over four columns, interleaved:
    ``o_a[c] = fma(src[pa + j*stride], x[px + j*VS + c], o_a[c])`` for j = 0 .. na-1 and
    likewise for b up to nb - 1, each row's j ascending (one vn load feeds both rows)."""
    t = 0
    while t < na:
        v = ld4(x, px)
        oa = fma4(ld1(src, pa), v, oa)
        ob = fma4(ld1(src, pb), v, ob)
        pa += stride
        pb += stride
        px += VS
        t += 1
    while t < nb:
        ob = fma4(ld1(src, pb), ld4(x, px), ob)
        pb += stride
        px += VS
        t += 1
    return oa, ob


@_dev
def prefetch_chunk_l2(scr, sb, o_w, o_qs, nvh, KC, pt, npt):
    """``prefetch.global.L2`` of one chunk slot's data for one value head: the ``nvh``
    floats from ``o_w`` (W^T, Kd, U, P^T, gamma) and the ``KC`` floats of qs^T (one
    instruction per 128-byte line, threads ``pt`` of ``npt``; no value is touched)."""
    n1 = (nvh + 31) // 32
    e = pt
    while e < n1 + KC // 32:
        if e < n1:
            pf2(scr, sb + o_w + 32 * e)
        else:
            pf2(scr, sb + o_qs + 32 * (e - n1))
        e += npt


@_dev
def ws_regions(KC, w, ln, stage_kp):
    """Where a warp-specialised state item keeps its chunk data in dynamic shared memory
    (:func:`ws_floats`' layout) and how it splits the work: ``(off_kp, off_u, off_g, ncg,
    nch)``, the offsets of Kd | P^T, of the U slice and of the two gamma buffers, the
    column groups of the item's ``w`` columns and the chunks of its ``ln`` tokens."""
    off_kp = OFF_WQ + 2 * KC
    off_u = off_kp + ((KC + C * C) if stage_kp != 0 else 0)
    off_g = off_u + C * VS
    return off_kp, off_u, off_g, w // 4, (ln + C - 1) // C


@_dev
def ws_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, it, stage_kp,
                  ncomp, sm):
    """Steps 6-8 of chunked for work item ``it`` over every chunk of its sequence; threads
    ``tid < ncomp`` compute (the chains of ``staged_state_item``; the tiles of the module
    docstring), the others copy (see the module docstring). A CTA-wide call: every thread
    passes the same barriers."""
    tid = cuda.threadIdx.x
    nthr = cuda.blockDim.x
    n, hv, c0, w, bb, bos, ln, V, KC, sb, o_qs, o_w, o_kd, o_u, o_p, o_g = item_layout(
        o, seqs, items, F, H, K, it)
    off_kp, off_u, off_g, ncg, nch = ws_regions(KC, w, ln, stage_kp)
    n4 = KC // 4                             # float4 of W^T (= of qs^T, = of Kd)
    ptid = tid - ncomp                       # copy-thread number (< 0: a compute thread)
    nprod = nthr - ncomp
    nu1 = (C // 2) * 2 * ncg                 # phase-1 units; threads past them (whole
    n1 = min(ncomp, ((nu1 + 31) // 32) * 32)  # warps) copy in phase 1 too
    ptid1 = tid - n1
    nprod1 = nthr - n1
    nq = K // 4 if stage_kp != 0 else K // 2  # phase-2 state units per column group
    nu2 = (nq + C // 2) * ncg                # phase-2 units of a full chunk; threads past
    n2 = min(ncomp, ((nu2 + 31) // 32) * 32)  # them (whole warps) copy in phase 2 too
    ptid2 = tid - n2
    nprod2 = nthr - n2
    nvh = 2 * KC + C * V + C * C + C         # floats of one value head's slot data
    pf_l2 = c0 == 0                          # one CTA per value head prefetches into L2
    cu = c0 + o_u                            # the U slice's first column in the slot

    load_state_slice(sm, h0, h0_idx[n], hv, c0, K, w, tid, nthr)
    if nch > 0 and ptid >= 0:
        if pf_l2 and nch > 1:
            prefetch_chunk_l2(scr, sb + F, o_w, o_qs, nvh, KC, ptid, nprod)
        stage_ug(sm, scr, sb + cu, V, ncg, off_u, sb + o_g, off_g, ptid, nprod)
        stage_two(sm, OFF_WQ, OFF_WQ + KC, scr, sb + o_w, n4, sb + o_qs, n4, ptid, nprod)
    cuda.syncthreads()

    for ci in range(nch):
        cs = ci * C
        L = min(C, ln - cs)
        t0 = bos + cs
        gb = off_g + (ci & 1) * C            # this chunk's gamma buffer

        # ---- phase 1 (compute threads): chunked step 6 (wh = sum_m W_im h_mc, m ascending;
        # vn = U - wh) and step 7's qh = sum_m qs_im h_mc, m ascending, then qh * gamma_i.
        # Copy threads (and the compute warps with no phase-1 unit): an L2 prefetch of
        # chunk ci + 2, then this chunk's Kd / P^T (or an L1 prefetch of them).
        if ptid1 >= 0:
            if pf_l2 and ci + 2 < nch:
                prefetch_chunk_l2(scr, sb + 2 * F, o_w, o_qs, nvh, KC, ptid1, nprod1)
            if stage_kp != 0:
                stage_two(sm, off_kp, off_kp + KC, scr, sb + o_kd, n4, sb + o_p,
                          (C * C) // 4, ptid1, nprod1)
            else:
                prefetch_kd_pt_l1(scr, sb, o_kd, o_p, KC, ptid1, nprod1)
        else:
            for u in range(tid, (C // 2) * 2 * ncg, ncomp):
                phase1_unit(sm, u, ncg, KC, K, sm, off_u, VS, sm, gb)
        cuda.syncthreads()

        # ---- phase 2 (compute threads): chunked step 8 (h' = h * gamma_{L-1}, then
        # fma(Kd_jm, vn_jc, h') for j = 0 .. L-1, in place; units of four rows x four
        # columns, two rows when Kd is read from global memory) and step 7 (o = qh *
        # gamma, then fma(P_ij, vn_jc, o) for j = 0 .. i; units of rows p and L-1-p x
        # four columns, the two chains interleaved). Copy
        # threads (and the compute warps with no phase-2 unit): the next chunk's W^T /
        # qs^T / U slice and its gamma (into the other gamma buffer).
        if ptid2 >= 0:
            if ci + 1 < nch:
                sn = sb + F
                stage_ug(sm, scr, sn + cu, V, ncg, off_u, sn + o_g,
                         off_g + ((ci + 1) & 1) * C, ptid2, nprod2)
                stage_two(sm, OFF_WQ, OFF_WQ + KC, scr, sn + o_w, n4, sn + o_qs, n4,
                          ptid2, nprod2)
        else:
            gl = ld1(sm, gb + L - 1)
            half = (L + 1) // 2
            ns = nq * ncg
            for u in range(tid, ns + half * ncg, n2):
                if u < ns:
                    phase2_state_unit(sm, scr, u, nq, stage_kp, off_kp, sb + o_kd, K, gl, L)
                else:
                    p, c4, ib, na = out_unit_rows(u - ns, half, L)
                    oa = ld4(sm, OFF_OQ + p * VS + c4)
                    ob = ld4(sm, OFF_OQ + ib * VS + c4)
                    if stage_kp != 0:
                        oa, ob = out_pair(sm, off_kp + KC + p, off_kp + KC + ib, C, sm,
                                          OFF_VN + c4, oa, ob, na, ib + 1)
                    else:
                        # (P^T in global memory: one row after the other, as chunked_split;
                        # with na = 0 out_pair runs only its second row)
                        d0, oa = out_pair(scr, 0, sb + o_p + p, C, sm, OFF_VN + c4, oa, oa,
                                          0, na)
                        d0, ob = out_pair(scr, 0, sb + o_p + ib, C, sm, OFF_VN + c4, ob, ob,
                                          0, ib + 1)
                    if na > 0:
                        store_row(o, bb, t0 + p, hv, c0 + c4, oa)
                    store_row(o, bb, t0 + ib, hv, c0 + c4, ob)
        cuda.syncthreads()
        sb += F

    store_state_slice(hT, hT_idx[n], hv, c0, sm, K, w, tid, nthr)


def gdn_ws_state_kernel(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, stage_kp,
                        ncomp):
    """State pass of contract.md part B, ``chunked`` family (variant ``chunked_ws``): steps
    6-8 of :mod:`.chunked`'s FP32 order for work item ``blockIdx.x`` (:func:`ws_state_item`,
    compute and copy threads). Output and final state must equal the frozen
    ``gdn_chunked_kernel``'s bit for bit."""
    sm = cuda.shared.array(0, _F32)
    ws_state_item(o, h0, h0_idx, hT, hT_idx, seqs, items, scr, F, H, K, cuda.blockIdx.x,
                  stage_kp, ncomp, sm)
