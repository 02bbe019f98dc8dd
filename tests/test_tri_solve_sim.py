"""Chunked step 4 (``T = (I + A)^-1``) in each form of :data:`dflash2_numba.gdn._prep_smem.SOLVES`,
run alone on the simulator for chunk lengths L = 1 .. 17 and a spread up to 64 (23, 31, 33,
36, 40, 47, 55, 57, 63, 64; every L would cost the simulator several minutes a form),
against the contract's chain
written out on the host: ``T_im = -A_im``, then ``T_im = fma(-A_ij, T_jm, T_im)`` for
j = mm + 1 .. i - 1 ascending, correctly rounded FP32 fma (``fma32_exact``). Byte equality,
so any reordering of a chain fails. Also: the forms touch nothing but T's entries (the
lower triangle, the diagonal and rows past L keep their bytes)."""
import numpy as np
import pytest

from dflash2_numba._compat import cuda, fma32_exact
from dflash2_numba.gdn._common import C
from dflash2_numba.gdn._prep_smem import SOLVES
from dflash2_numba.gdn._split_ops import TS

_KERNELS = {}


def _kernel(form):
    """One CTA: ``Ts`` from global memory into shared memory, the form, and back."""
    if form not in _KERNELS:
        solve = SOLVES[form]

        def run(ts, L):
            sm = cuda.shared.array(C * TS, np.float32)
            tid = cuda.threadIdx.x
            nthr = cuda.blockDim.x
            e = tid
            while e < C * TS:
                sm[e] = ts[e]
                e += nthr
            cuda.syncthreads()
            solve(sm, np.int32(L), np.int32(tid), np.int32(nthr))
            cuda.syncthreads()
            e = tid
            while e < C * TS:
                ts[e] = sm[e]
                e += nthr

        _KERNELS[form] = cuda.jit(run)
    return _KERNELS[form]


def _contract_solve(A, L):
    """T^T's strict upper triangle (row mm, column i) by the contract's chains."""
    T = np.zeros((C, C), dtype=np.float32)          # T[i, mm], i > mm
    for mm in range(L - 1):
        for i in range(mm + 1, L):
            t = np.float32(-A[i, mm])
            for j in range(mm + 1, i):
                t = fma32_exact(np.float32(-A[i, j]), T[j, mm], t)
            T[i, mm] = t
    return T


@pytest.mark.parametrize("form", sorted(SOLVES))
def test_every_chunk_length_matches_the_contract_chains(form):
    rng = np.random.default_rng(7)
    kern = _kernel(form)
    lengths = list(range(1, 18)) + [23, 31, 33, 36, 40, 47, 55, 57, 63, 64]
    for L in lengths:
        A = np.zeros((C, C), dtype=np.float32)
        A[np.tril_indices(C, -1)] = rng.standard_normal(C * (C - 1) // 2).astype(np.float32) * 0.3
        ts0 = rng.standard_normal((C, TS)).astype(np.float32)    # garbage everywhere else
        for i in range(L):
            ts0[i, :i] = A[i, :i]
        ts = ts0.copy().reshape(-1)
        kern[1, 32](ts, L)                                       # fewer threads than columns
        got = ts.reshape(C, TS)
        want_T = _contract_solve(A, L)
        expect = ts0.copy()
        for mm in range(L - 1):
            expect[mm, mm + 1:L] = want_T[mm + 1:L, mm]
        assert np.array_equal(got.view(np.uint32), expect.view(np.uint32)), (form, L)
