"""Chunked step 5's W / U tiles of one slab in balanced units, a form of
``gdn_smem_prep``'s ``wu_slab`` (:mod:`._prep_smem`) for measurement.

``wu_slab`` gives each thread one 4 x 4 tile: row tile r carries ``4 r`` chain steps, so a
warp of row tiles 14 and 15 works eight times as long as the warp of tiles 0 and 1, and the
slab's barrier waits for it (the sixth round's profile: 7 % of the pre-pass's stall samples
on the barriers after the slabs). Here a unit is a pair of row tiles, ``p`` and
``nt - 1 - p`` (``nt`` row tiles of the chunk; the middle one alone when ``nt`` is odd), times
two slab columns: every unit carries about ``4 nt + 4`` steps of 8 fma. A warp is one pair
and all 32 column pairs of the slab (T^T's loads are a broadcast, X's consecutive 8 bytes).

Every entry is the same chain as in ``wu_slab`` (:func:`._split_prep.wu_tile`): ``X_ic``,
then ``fma(T_ij, X_jc, .)`` for j = 0 .. i - 1 ascending; the stores write the same entries
(rows ``>= L`` dropped). So the bits are the same.
"""
from __future__ import annotations

from ._common import C
from ._split_ops import _dev, fma2, ld2
from ._split_prep import make_wu_tile
from ._split_prep_io import st4x, stx, view

XW = 64                 # slab columns and row stride (as _prep_smem.XW / XWS)
XWS = XW + 4


#: The 4 x 2 tile: ``wu_tile``'s chains on two slab columns.
wu_tile2 = make_wu_tile(ld2, fma2)


@_dev
def store_tile2(sv, gc, K, V, L, i0, o_w, o_u, w0, w1, w2, w3):
    """A 4 x 2 tile at global column ``gc`` of [W | U] into the slot: W^T columns (16-byte
    stores of four rows) for ``gc < K``, else U rows; rows ``>= L`` dropped."""
    if gc < K:
        wv = view(sv, o_w + gc * C + i0)
        if i0 + 3 < L:
            st4x(wv, 0, (w0[0], w1[0], w2[0], w3[0]))
            st4x(wv, C, (w0[1], w1[1], w2[1], w3[1]))
        else:
            stx(wv, 0, w0[0])
            stx(wv, C, w0[1])
            if i0 + 1 < L:
                stx(wv, 1, w1[0])
                stx(wv, C + 1, w1[1])
            if i0 + 2 < L:
                stx(wv, 2, w2[0])
                stx(wv, C + 2, w2[1])
    else:
        uv = view(sv, o_u + i0 * V + gc - K)
        stx(uv, 0, w0[0])
        stx(uv, 1, w0[1])
        if i0 + 1 < L:
            stx(uv, V, w1[0])
            stx(uv, V + 1, w1[1])
        if i0 + 2 < L:
            stx(uv, 2 * V, w2[0])
            stx(uv, 2 * V + 1, w2[1])
        if i0 + 3 < L:
            stx(uv, 3 * V, w3[0])
            stx(uv, 3 * V + 1, w3[1])


@_dev
def wu_pair_slab(Xs, Ts, sl, K, V, L, sv, o_w, o_u, tid, nthr):
    """The W / U tiles of slab ``sl`` (``Xs``, row stride XWS): unit u is row tiles
    ``p = u >> 5`` and ``nt - 1 - p``, slab columns ``2 (u & 31) ..`` (module docstring)."""
    nt = (L + 3) // 4
    npair = (nt + 1) >> 1
    u = tid
    while u < (npair << 5):
        c2 = 2 * (u & 31)
        gc = sl * XW + c2
        if gc < K + V:
            p = u >> 5
            w0, w1, w2, w3 = wu_tile2(Xs, XWS, Ts, 4 * p, c2)
            store_tile2(sv, gc, K, V, L, 4 * p, o_w, o_u, w0, w1, w2, w3)
            q = nt - 1 - p
            if q > p:
                w0, w1, w2, w3 = wu_tile2(Xs, XWS, Ts, 4 * q, c2)
                store_tile2(sv, gc, K, V, L, 4 * q, o_w, o_u, w0, w1, w2, w3)
        u += nthr
