"""bench/profile_kernels.py's leave-one-out kernel is built by editing the package's own
staged state pass: with nothing switched off it must be that kernel, byte for byte."""
import numpy as np

import oracle
from dflash2_numba import plan_gdn
from dflash2_numba._compat import cuda, exact_fp32
from dflash2_numba._dynshared import DynShared


def test_leave_one_out_kernel_with_nothing_skipped_is_the_state_pass():
    from bench import _state_leave_one_out as X

    rng = np.random.default_rng(5)
    case = oracle.random_gdn_case(rng, B=1, T=70, H=1, HV=2, K=32, V=32, dtype=np.float32,
                                  cu_seqlens=None, with_state=True)
    call = plan_gdn(**case, variant="chunked_split", out_dtype="float32")
    call.launch()
    ref_o, ref_s = call.results()
    p, s = call.plan, call.plan.scratch
    p.o.copy_to_device(np.full(p.o.shape, -777.0, np.float32))
    p.hT.copy_to_device(np.full(p.hT.shape, -777.0, np.float32))
    with exact_fp32():
        DynShared(X.kernel, s.smem)[s.n_items, s.state_threads, 0](
            p.o, p.h0, p.h0_idx, p.hT, p.hT_idx, p.seqs, s.items, s.scr, s.F, np.int32(p.H),
            np.int32(p.K), s.stage_kp, np.int32(0))
    cuda.synchronize()
    assert p.o.copy_to_host().tobytes() == np.asarray(ref_o).tobytes()
    assert p.hT.copy_to_host().tobytes() == np.asarray(ref_s).tobytes()


def test_leave_one_out_ws_kernel_with_nothing_skipped_is_the_ws_state_pass():
    from bench import _state_leave_one_out as X

    rng = np.random.default_rng(6)
    case = oracle.random_gdn_case(rng, B=1, T=70, H=1, HV=2, K=32, V=32, dtype=np.float32,
                                  cu_seqlens=None, with_state=True)
    call = plan_gdn(**case, variant="chunked_ws", out_dtype="float32")
    call.launch()
    ref_o, ref_s = call.results()
    p, s = call.plan, call.plan.scratch
    p.o.copy_to_device(np.full(p.o.shape, -777.0, np.float32))
    p.hT.copy_to_device(np.full(p.hT.shape, -777.0, np.float32))
    with exact_fp32():
        DynShared(X.ws_kernel, s.ws.smem)[s.n_items, int(s.ws.ncomp) + s.ws.ncopy, 0](
            p.o, p.h0, p.h0_idx, p.hT, p.hT_idx, p.seqs, s.items, s.scr, s.F, np.int32(p.H),
            np.int32(p.K), s.ws.stage_kp, s.ws.ncomp, np.int32(0))
    cuda.synchronize()
    assert p.o.copy_to_host().tobytes() == np.asarray(ref_o).tobytes()
    assert p.hT.copy_to_host().tobytes() == np.asarray(ref_s).tobytes()
