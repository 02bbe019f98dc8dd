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
