"""bench/profile_kernels.py's leave-one-out kernels are built by editing the package's own
staged state passes (``chunked_split``, ``chunked_ws``): with nothing switched off each
must be its variant's state kernel, byte for byte."""
import numpy as np
import pytest

import oracle
from dflash2_numba import plan_gdn
from dflash2_numba._compat import cuda, exact_fp32
from dflash2_numba._dynshared import DynShared


def _launch_args(variant, s):
    """(kernel, block, the state kernel's own trailing arguments) of a planned call."""
    from bench import _state_leave_one_out as X

    if variant == "chunked_split":
        return DynShared(X.kernel, s.smem), s.state_threads, (s.stage_kp,)
    return (DynShared(X.ws_kernel, s.ws.smem), int(s.ws.ncomp) + s.ws.ncopy,
            (s.ws.stage_kp, s.ws.ncomp))


@pytest.mark.parametrize("variant", ["chunked_split", "chunked_ws"])
def test_leave_one_out_kernel_with_nothing_skipped_is_the_state_pass(variant):
    rng = np.random.default_rng(5)
    case = oracle.random_gdn_case(rng, B=1, T=70, H=1, HV=2, K=32, V=32, dtype=np.float32,
                                  cu_seqlens=None, with_state=True)
    call = plan_gdn(**case, variant=variant, out_dtype="float32")
    call.launch()
    ref_o, ref_s = call.results()
    p, s = call.plan, call.plan.scratch
    p.o.copy_to_device(np.full(p.o.shape, -777.0, np.float32))
    p.hT.copy_to_device(np.full(p.hT.shape, -777.0, np.float32))
    kern, block, extra = _launch_args(variant, s)
    with exact_fp32():
        kern[s.n_items, block, 0](p.o, p.h0, p.h0_idx, p.hT, p.hT_idx, p.seqs, s.items, s.scr,
                                  s.F, np.int32(p.H), np.int32(p.K), *extra, np.int32(0))
    cuda.synchronize()
    assert p.o.copy_to_host().tobytes() == np.asarray(ref_o).tobytes()
    assert p.hT.copy_to_host().tobytes() == np.asarray(ref_s).tobytes()


def test_clocked_state_pass_is_the_state_pass_and_stamps_every_sampled_chunk():
    """bench/profile_kernels.py phase-clock: the chunked_ws state pass with per-warp cycle
    stamps computes the same bytes; each sampled (item, chunk, warp) gets five ordered
    stamps, and chunks outside the sample range are not written."""
    from bench import _state_phase_clock as X

    rng = np.random.default_rng(6)
    case = oracle.random_gdn_case(rng, B=1, T=140, H=1, HV=2, K=32, V=32, dtype=np.float32,
                                  cu_seqlens=None, with_state=True)
    call = plan_gdn(**case, variant="chunked_ws", out_dtype="float32")
    call.launch()
    ref_o, ref_s = call.results()
    p, s = call.plan, call.plan.scratch
    p.o.copy_to_device(np.full(p.o.shape, -777.0, np.float32))
    p.hT.copy_to_device(np.full(p.hT.shape, -777.0, np.float32))
    nthr = int(s.ws.ncomp) + s.ws.ncopy
    nwarps = -(-nthr // 32)
    stamps = cuda.to_device(np.full((s.n_items, 2, nwarps, X.N_STAMPS), -1, np.int64))
    with exact_fp32():      # chunks 1 and 2 of three (T = 140: 64 + 64 + 12)
        DynShared(X.kernel, s.ws.smem)[s.n_items, nthr, 0](
            p.o, p.h0, p.h0_idx, p.hT, p.hT_idx, p.seqs, s.items, s.scr, s.F, np.int32(p.H),
            np.int32(p.K), s.ws.stage_kp, s.ws.ncomp, stamps, np.int32(1), np.int32(3))
    cuda.synchronize()
    assert p.o.copy_to_host().tobytes() == np.asarray(ref_o).tobytes()
    assert p.hT.copy_to_host().tobytes() == np.asarray(ref_s).tobytes()
    st = stamps.copy_to_host()
    assert (st > 0).all()
    assert (np.diff(st, axis=3) >= 0).all()                 # a <= b <= c <= d <= e per warp
    assert (st[:, 1, :, 0] >= st[:, 0, :, 4]).all()          # chunk 2 starts after chunk 1 ends
    summary = X.summarise(st, int(s.ws.ncomp))
    assert set(summary) >= {"compute", "copy", "chunk_period", "phase1_span", "phase2_span"}
    assert summary["chunk_period"] > 0 and summary["compute"]["phase1_busy"] >= 0
    # a stamp block never written (a chunk past the sequence) is skipped, not counted
    st2 = np.concatenate([st, np.full_like(st[:, :1], -1)], axis=1)
    assert X.summarise(st2, int(s.ws.ncomp))["chunk_period"] == summary["chunk_period"]


@pytest.mark.parametrize("share", [1, 0])
def test_l2_copy_ceiling_kernel_copies_each_ctas_region_of_the_last_step(share):
    """bench/l2_copy_ceiling.py moves exact bytes: after ``nsteps`` steps every CTA's shared
    memory holds the region of its last step (its group's when shared, its own when not)."""
    from bench import l2_copy_ceiling as L

    groups, per_group, nsteps, region, threads = 2, 3, 3, 256, 32
    ncta = groups * per_group
    n = nsteps * ncta * region
    host_src = np.random.default_rng(7).random(n, dtype=np.float32)
    src = cuda.to_device(host_src)
    dump = cuda.to_device(np.full((ncta, region), -777.0, np.float32))
    L.launcher(src, region, nsteps, groups, per_group, share, 1, threads, dump)()
    cuda.synchronize()
    got = dump.copy_to_host()
    s = nsteps - 1
    for cta in range(ncta):
        slot = s * groups + cta // per_group if share else s * ncta + cta
        assert got[cta].tobytes() == host_src[slot * region:(slot + 1) * region].tobytes()
