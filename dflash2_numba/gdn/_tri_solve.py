"""Chunked step 4, ``T = (I + A)^-1``, in forms with fewer serial loop trips than
:func:`._split_prep.tri_solve_cols4` (the form ``gdn_split_prep`` runs).

Layout (all forms): A in ``Ts``'s lower triangle (row i at ``i * TS``), T^T written to its
upper triangle (row mm holds column mm of T below the diagonal). Every T_im is one chain,
the same in every form:

    t = -A_im;  for j = mm + 1 .. i - 1 ascending:  t = fma(-A_ij, T_jm, t)

Every form keeps each chain's operands, order and initial value; only how many chains a
thread runs side by side, and when its loads are issued, change. So every form writes the
same bits. T_im needs A (read-only here) and its own column's earlier entries T_jm
(``j < i``), which the same thread wrote before (rows of a column in ascending order).

Why this form: in ``cols4`` one thread owns a column and walks its rows four at a time
from the top; column 0 then costs ~600 serial loop trips (15 four-row groups, then three
single rows of ~60 steps each), while six of the eight warps of a 256-thread CTA wait at
the barrier after the solve (``bench/RESULTS.md``, GDN sixth round: 28 % of the pre-pass's
stall samples). Here a column's first ``(L - 1 - mm) % 8`` rows (chains of at most six
steps) run one at a time and the rest in groups of eight aligned to the bottom: column 0
costs ~240 trips of eight independent chains.

:func:`tri_solve_cols8` runs eight chains over the common j range, then the group's
triangular tail (28 fma, each row's steps in ascending j). A form that issued the next
trip's nine loads before this trip's eight fma (``cols8r``) measured no faster on the H200
and was removed (``bench/RESULTS.md``, GDN tenth round).

No barrier in any form (the caller's follows).
"""
from __future__ import annotations

from .._compat import SIMULATOR, cuda
from ._split_ops import TS, _dev, ld1
from ._split_prep import solve_row, tail4
from ._split_prep_io import st1

if SIMULATOR:
    # (device functions of another module: the simulator binds ``cuda.fma`` per module)
    solve_row = cuda.jit(device=True)(solve_row)
    tail4 = cuda.jit(device=True)(tail4)


@_dev
def group_tail(Ts, rm, i, a0, a1, a2, a3, a4, a5, a6, a7):
    """Rows ``i .. i + 7`` of column ``rm / TS`` after their common steps (j < i): rows
    ``i .. i + 3`` as ``tail4``, then each of rows ``i + 4 .. i + 7``: its steps j = i ..
    i + r - 1 in ascending order on the group's own T entries as they become final, and the
    stores."""
    a0, a1, a2, a3 = tail4(Ts, rm, i, a0, a1, a2, a3)
    r4 = (i + 4) * TS
    r5 = r4 + TS
    r6 = r5 + TS
    r7 = r6 + TS
    a4 = cuda.fma(-ld1(Ts, r4 + i), a0, a4)
    a4 = cuda.fma(-ld1(Ts, r4 + i + 1), a1, a4)
    a4 = cuda.fma(-ld1(Ts, r4 + i + 2), a2, a4)
    a4 = cuda.fma(-ld1(Ts, r4 + i + 3), a3, a4)
    st1(Ts, rm + i + 4, a4)
    a5 = cuda.fma(-ld1(Ts, r5 + i), a0, a5)
    a5 = cuda.fma(-ld1(Ts, r5 + i + 1), a1, a5)
    a5 = cuda.fma(-ld1(Ts, r5 + i + 2), a2, a5)
    a5 = cuda.fma(-ld1(Ts, r5 + i + 3), a3, a5)
    a5 = cuda.fma(-ld1(Ts, r5 + i + 4), a4, a5)
    st1(Ts, rm + i + 5, a5)
    a6 = cuda.fma(-ld1(Ts, r6 + i), a0, a6)
    a6 = cuda.fma(-ld1(Ts, r6 + i + 1), a1, a6)
    a6 = cuda.fma(-ld1(Ts, r6 + i + 2), a2, a6)
    a6 = cuda.fma(-ld1(Ts, r6 + i + 3), a3, a6)
    a6 = cuda.fma(-ld1(Ts, r6 + i + 4), a4, a6)
    a6 = cuda.fma(-ld1(Ts, r6 + i + 5), a5, a6)
    st1(Ts, rm + i + 6, a6)
    a7 = cuda.fma(-ld1(Ts, r7 + i), a0, a7)
    a7 = cuda.fma(-ld1(Ts, r7 + i + 1), a1, a7)
    a7 = cuda.fma(-ld1(Ts, r7 + i + 2), a2, a7)
    a7 = cuda.fma(-ld1(Ts, r7 + i + 3), a3, a7)
    a7 = cuda.fma(-ld1(Ts, r7 + i + 4), a4, a7)
    a7 = cuda.fma(-ld1(Ts, r7 + i + 5), a5, a7)
    a7 = cuda.fma(-ld1(Ts, r7 + i + 6), a6, a7)
    st1(Ts, rm + i + 7, a7)


@_dev
def tri_solve_cols8(Ts, L, tid, nthr):
    """Step 4, one thread a column: the column's top ``(L - 1 - mm) % 8`` rows one at a
    time, then groups of eight rows (module docstring)."""
    mm = tid
    while mm < L - 1:
        rm = mm * TS
        i = mm + 1
        ie = i + ((L - 1 - mm) & 7)
        while i < ie:
            solve_row(Ts, rm, mm, i)
            i += 1
        while i < L:                             # (i + 7 < L: groups fill the column)
            r0 = i * TS
            a0 = -ld1(Ts, r0 + mm)
            a1 = -ld1(Ts, r0 + TS + mm)
            a2 = -ld1(Ts, r0 + 2 * TS + mm)
            a3 = -ld1(Ts, r0 + 3 * TS + mm)
            a4 = -ld1(Ts, r0 + 4 * TS + mm)
            a5 = -ld1(Ts, r0 + 5 * TS + mm)
            a6 = -ld1(Ts, r0 + 6 * TS + mm)
            a7 = -ld1(Ts, r0 + 7 * TS + mm)
            j = mm + 1
            while j < i:
                tj = ld1(Ts, rm + j)
                p = r0 + j
                a0 = cuda.fma(-ld1(Ts, p), tj, a0)
                a1 = cuda.fma(-ld1(Ts, p + TS), tj, a1)
                a2 = cuda.fma(-ld1(Ts, p + 2 * TS), tj, a2)
                a3 = cuda.fma(-ld1(Ts, p + 3 * TS), tj, a3)
                a4 = cuda.fma(-ld1(Ts, p + 4 * TS), tj, a4)
                a5 = cuda.fma(-ld1(Ts, p + 5 * TS), tj, a5)
                a6 = cuda.fma(-ld1(Ts, p + 6 * TS), tj, a6)
                a7 = cuda.fma(-ld1(Ts, p + 7 * TS), tj, a7)
                j += 1
            group_tail(Ts, rm, i, a0, a1, a2, a3, a4, a5, a6, a7)
            i += 8
        mm += nthr
