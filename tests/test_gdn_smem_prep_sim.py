"""The pre-pass of ``chunked_smprep`` (kernel ``gdn_smem_prep``, q / k held in shared memory)
on the simulator, against chunked_split's pre-pass (``gdn_split_prep``): the same bytes in
every scratch region the state pass reads (qs^T per q/k head; W^T, Kd, U, P^T, gamma per
value head), for every thread count the loops must handle (one warp: G / S tiles in whole
passes plus rows; 96: tiles in one pass; the simulator's default 64), with K = V = 32 and
K = 64, V = 32 (a slab of [X | Y] that mixes k and v columns), GVA 3, and a partial last
chunk (rows past L are compared nowhere: neither kernel defines them); and the pre-pass
built with each other form of step 4 (:data:`._prep_smem.SOLVES`) and of step 5's W / U
tiles (:data:`._prep_smem.WUS`)."""
import numpy as np
import pytest

import oracle
from dflash2_numba.gdn import chunked_smprep, chunked_split as S
from dflash2_numba.gdn._common import C
from dflash2_numba.gdn.api import plan_gdn


def _slot_regions(H, HV, K, V):
    """(name, first float, rows, row length, row stride) of the regions the state pass reads
    in one slot (``slot_floats``' layout); a region's row r holds token r of the chunk
    (W^T / qs^T / P^T: column-major [.][C], so token r is column r)."""
    KC = K * C
    out = [(f"qs^T h{h}", h * 2 * KC + KC, "cols", K) for h in range(H)]
    phv = 2 * KC + C * V + C * C + C
    for hv in range(HV):
        o = H * 2 * KC + hv * phv
        out += [(f"W^T v{hv}", o, "cols", K), (f"Kd v{hv}", o + KC, "rows", K),
                (f"U v{hv}", o + 2 * KC, "rows", V), (f"P^T v{hv}", o + 2 * KC + C * V, "cols", C),
                (f"gamma v{hv}", o + 2 * KC + C * V + C * C, "rows", 1)]
    return out


def _scratch(variant, case, monkeypatch, threads=None, solve=None):
    if threads is not None:
        monkeypatch.setattr(chunked_smprep, "PREP_THREADS", threads)
    call = plan_gdn(**case, variant=variant, out_dtype="float32")
    if solve is not None:               # the pre-pass built with another form ("SOLVE+WU")
        from bench.profile_kernels import prep_form_kernel

        call.plan.scratch.prep_kernel = prep_form_kernel(solve, case["k"].shape[-1])
    call.launch()
    s = call.plan.scratch
    assert s.prep_threads == (threads or (chunked_smprep.SIM_PREP_THREADS
                                          if variant == "chunked_smprep" else S.PREP_THREADS))
    chunks = np.asarray(s.chunks.copy_to_host())[: s.nslots]
    return np.asarray(s.scr.copy_to_host()).reshape(s.nslots, int(s.F)), chunks


@pytest.mark.parametrize("threads,K,V,T,solve", [
    (32, 32, 32, 128, None), (96, 32, 32, 128, None), (None, 32, 32, 128, None),
    (32, 64, 32, 100, None), (96, 64, 32, 100, None), (None, 64, 32, 100, None),
    # step 4's forms built in explicitly (the same chains; the default, cols8, runs eight
    # rows at a time): every row offset of a column's groups (L = 64, 36), a chunk with no
    # whole group (L = 5), fewer threads than columns
    (None, 32, 32, 69, "cols4"), (32, 64, 32, 100, "cols4"), (None, 32, 32, 69, "cols8"),
    # a SOLVE+WU form name (step 5's only form, tile4), one warp
    (32, 64, 32, 100, "cols8+tile4")])
def test_scratch_matches_split_prep(monkeypatch, threads, K, V, T, solve):
    rng = np.random.default_rng(2000 + K + T)
    case = oracle.random_gdn_case(rng, B=1, T=T, H=1, HV=3, K=K, V=V, dtype=np.float16,
                                  cu_seqlens=None, with_state=True)
    ref, chunks = _scratch("chunked_wsr_two_loop", case, monkeypatch)
    got, chunks2 = _scratch("chunked_smprep", case, monkeypatch, threads, solve)
    assert np.array_equal(chunks, chunks2)
    compared = 0
    for slot, (_, _, L) in enumerate(chunks):
        for name, o, kind, n in _slot_regions(1, 3, K, V):
            if kind == "cols":          # [n][C]: entry (m, r) at o + m * C + r
                a = ref[slot, o:o + n * C].reshape(n, C)[:, :L]
                b = got[slot, o:o + n * C].reshape(n, C)[:, :L]
            else:                        # [C][n]: row r at o + r * n
                a = ref[slot, o:o + C * n].reshape(C, n)[:L]
                b = got[slot, o:o + C * n].reshape(C, n)[:L]
            mm = oracle.first_mismatch(b, a)
            assert mm is None, f"slot {slot} (L = {L}) {name}: {mm}"
            compared += a.size
    assert compared > 0 and chunks[-1, 2] == (T - 1) % C + 1


def test_unsupported_when_shared_memory_is_short(monkeypatch):
    """A device whose blocks cannot have the pre-pass's shared memory: UnsupportedShape
    from plan time, before any launch."""
    from dflash2_numba import UnsupportedShape
    from dflash2_numba.gdn._prep_smem import smem_floats

    from dflash2_numba import _dynshared

    monkeypatch.setattr(_dynshared, "max_dynamic_shared", lambda: 4 * smem_floats(32) - 4)
    rng = np.random.default_rng(5)
    case = oracle.random_gdn_case(rng, B=1, T=8, H=1, HV=1, K=32, V=32, dtype=np.float32,
                                  cu_seqlens=None, with_state=False)
    with pytest.raises(UnsupportedShape, match=r"^variant: chunked_smprep: .* shared memory"):
        plan_gdn(**case, variant="chunked_smprep")
    assert 4 * smem_floats(128) <= 96 * 1024          # sm_70's opt-in limit
