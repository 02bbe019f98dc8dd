"""Alternative schedules of a staged output unit (chunked step 7, two rows x four columns),
for timing experiments only (``bench/profile_kernels.py phase-clock --gdn-variant
chunked_wsp:two_loop``). Each keeps the chains of
:func:`dflash2_numba.gdn._split_state_wsr.flat_out_unit` (same initial values, operands and
order), so the output bytes are chunked's; the phase clock checks that on the GPU and
``tests/test_profile_tools.py`` on the simulator."""
from __future__ import annotations

from dflash2_numba._compat import cuda
from dflash2_numba.gdn._common import C
from dflash2_numba.gdn._split_ops import VS, fma4, ld1, ld4
from dflash2_numba.gdn._split_state import OFF_OQ, OFF_VN, store_row
from dflash2_numba.gdn._split_state_ws import out_unit_rows


@cuda.jit(device=True)
def two_loop_out_unit(o, bb, t0, hv, c0, sm, off_pt, u2, half, L):
    """Row p's chain in one plain loop, then row ib's in another: no select per step (the
    flat loop's row switch costs eight FSEL per step), at the price of divergent trip
    counts across the warp's lanes."""
    p, c4, ib, na = out_unit_rows(u2, half, L)
    acc = ld4(sm, OFF_OQ + p * VS + c4)
    qp = off_pt + p
    qv = OFF_VN + c4
    j = 0
    while j < na:
        acc = fma4(ld1(sm, qp), ld4(sm, qv), acc)
        qp += C
        qv += VS
        j += 1
    if na > 0:
        store_row(o, bb, t0 + p, hv, c0 + c4, acc)
    acc = ld4(sm, OFF_OQ + ib * VS + c4)
    qp = off_pt + ib
    qv = OFF_VN + c4
    j = 0
    while j <= ib:
        acc = fma4(ld1(sm, qp), ld4(sm, qv), acc)
        qp += C
        qv += VS
        j += 1
    store_row(o, bb, t0 + ib, hv, c0 + c4, acc)


FORMS = {"two_loop": two_loop_out_unit}
