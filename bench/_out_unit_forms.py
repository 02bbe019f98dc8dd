"""Alternative schedules of ``chunked_wsr``'s staged output unit (chunked step 7, two rows
x four columns), for timing experiments only: ``bench/profile_kernels.py phase-clock
--gdn-variant chunked_wsr:FORM`` builds ``chunked_wsr``'s state pass around ``FORMS[FORM]``
(:func:`dflash2_numba.gdn._split_state_wsr.make_state_item`) with the phase clock's
stamps. Measured on 2026-12-02 (``bench/RESULTS.md``, GDN fifth round).

``pipelined`` and ``two_loop`` keep the chains of
:func:`dflash2_numba.gdn._split_state_wsr.flat_out_unit` (same initial values, operands
and order), so the output bytes are chunked's (the phase clock checks that on the GPU,
``tests/test_profile_tools.py`` on the simulator). ``store_only`` and ``loop_only`` are
diagnostics that drop one half of the unit's work, so their bytes differ by design: they
say whether an output warp's phase-2 time goes to its fma loop or to its stores."""
from __future__ import annotations

import numpy as np

from dflash2_numba._compat import cuda
from dflash2_numba.gdn._common import C
from dflash2_numba.gdn._split_ops import VS, fma4, ld1, ld4
from dflash2_numba.gdn._split_state import OFF_OQ, OFF_VN, store_row
from dflash2_numba.gdn._split_state import upd_h
from dflash2_numba.gdn._split_state_two_loop import two_loop_out_unit  # (chunked_wsr_two_loop's)
from dflash2_numba.gdn._split_state_ws import out_unit_rows


@cuda.jit(device=True)
def _next_ptrs(s, qp, qv, na, tot, rp, rv):
    """(P^T, vn) load offsets of step ``s + 1`` from those of step ``s``: one row down;
    row ib's first (``rp``, ``rv``) where row p's chain ends; unchanged past the end."""
    np_ = qp + C
    nv = qv + VS
    if s + 1 == na:
        np_ = rp
        nv = rv
    if s + 1 >= tot:
        np_ = qp
        nv = qv
    return np_, nv


@cuda.jit(device=True)
def pipelined_out_unit(o, bb, t0, hv, c0, sm, off_pt, u2, half, L):
    """The flat loop with each step's P^T word and vn float4 loaded two steps before its
    fma (operands rotated through registers; the last loads re-read the last step's)."""
    p, c4, ib, na = out_unit_rows(u2, half, L)
    tot = na + ib + 1
    rp = off_pt + ib
    rv = OFF_VN + c4
    qp = off_pt + p
    if na == 0:
        qp = rp
    qv = rv
    x0 = ld1(sm, qp)
    v0 = ld4(sm, qv)
    qp, qv = _next_ptrs(0, qp, qv, na, tot, rp, rv)
    x1 = ld1(sm, qp)
    v1 = ld4(sm, qv)
    acc = ld4(sm, OFF_OQ + p * VS + c4)
    ob = ld4(sm, OFF_OQ + ib * VS + c4)
    oa = acc
    t = 0
    while t < tot:
        qp, qv = _next_ptrs(t + 1, qp, qv, na, tot, rp, rv)
        x2 = ld1(sm, qp)
        v2 = ld4(sm, qv)
        if t == na:
            oa = acc
            acc = ob
        acc = fma4(x0, v0, acc)
        x0 = x1
        v0 = v1
        x1 = x2
        v1 = v2
        t += 1
    if na > 0:
        store_row(o, bb, t0 + p, hv, c0 + c4, oa)
    store_row(o, bb, t0 + ib, hv, c0 + c4, acc)


@cuda.jit(device=True)
def store_only_out_unit(o, bb, t0, hv, c0, sm, off_pt, u2, half, L):
    """Diagnostic (wrong bytes): the unit's stores of its initial values, no fma loop."""
    p, c4, ib, na = out_unit_rows(u2, half, L)
    if na > 0:
        store_row(o, bb, t0 + p, hv, c0 + c4, ld4(sm, OFF_OQ + p * VS + c4))
    store_row(o, bb, t0 + ib, hv, c0 + c4, ld4(sm, OFF_OQ + ib * VS + c4))


@cuda.jit(device=True)
def loop_only_out_unit(o, bb, t0, hv, c0, sm, off_pt, u2, half, L):
    """Diagnostic (wrong bytes): both chains, but one store of a value that is never a
    real row (their sum) and only where it is exactly 1234.5, i.e. almost never; the
    loops stay live."""
    p, c4, ib, na = out_unit_rows(u2, half, L)
    a = ld4(sm, OFF_OQ + p * VS + c4)
    a, d1, d2 = upd_h(sm, off_pt + p, C, sm, OFF_VN + c4, a, a, a, na, 1)
    b = ld4(sm, OFF_OQ + ib * VS + c4)
    b, d1, d2 = upd_h(sm, off_pt + ib, C, sm, OFF_VN + c4, b, b, b, ib + 1, 1)
    s = (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3])
    if s[0] + s[1] + s[2] + s[3] == np.float32(1234.5):     # (an FP32 compare)
        store_row(o, bb, t0 + ib, hv, c0 + c4, s)


_I32 = np.int32
_C32 = np.int32(C)
_VS32 = np.int32(VS)
_ONE32 = np.int32(1)


@cuda.jit(device=True)
def lean_out_unit(o, bb, t0, hv, c0, sm, off_pt, u2, half, L):
    """The flat loop with 32-bit counters and load offsets advanced by one add each (reset
    at the row switch) instead of 64-bit ``j * C + i`` / ``j * VS + c4`` per step; the
    switch still selects (eight FSEL per step)."""
    p, c4, ib, na = out_unit_rows(u2, half, L)
    na = _I32(na)
    tot = _I32(na + ib + 1)
    rp = _I32(off_pt + ib)
    rv = _I32(OFF_VN + c4)
    qp = _I32(off_pt + p)
    qv = rv
    acc = ld4(sm, OFF_OQ + p * VS + c4)
    ob = ld4(sm, OFF_OQ + ib * VS + c4)
    oa = acc
    t = _I32(0)
    while t < tot:
        if t == na:
            oa = acc
            acc = ob
            qp = rp
            qv = rv
        acc = fma4(ld1(sm, qp), ld4(sm, qv), acc)
        qp = _I32(qp + _C32)
        qv = _I32(qv + _VS32)
        t = _I32(t + _ONE32)
    if na > 0:
        store_row(o, bb, t0 + p, hv, c0 + c4, oa)
    store_row(o, bb, t0 + ib, hv, c0 + c4, acc)


FORMS = {"pipelined": pipelined_out_unit, "two_loop": two_loop_out_unit,
         "lean": lean_out_unit,
         "store_only": store_only_out_unit, "loop_only": loop_only_out_unit}
EXACT_FORMS = ("pipelined", "two_loop", "lean")   # chunked's bytes (the tests run these)
