"""GDN prefill on a real GPU at the production shape (per rank H = 4, HV = 12, K = V = 128,
FP16): both families against the FP64 oracle, relative L2 <= 1e-5 for the FP32 (pre-cast)
output and the final state. Prints the figures and the kernel time.

Run with ``DFLASH2_GPU=1 python -m pytest -q -s tests/test_gdn_gpu.py`` on a GPU machine."""
import time

import numpy as np
import pytest

import oracle
from dflash2_numba import _registry
from dflash2_numba._compat import cuda
from dflash2_numba.gdn import gdn_prefill

pytestmark = pytest.mark.gpu

H, HV, K, V = 4, 12, 128, 128
TOL = 1e-5
_cache = {}


def production_case(T):
    if T not in _cache:
        rng = np.random.default_rng(T)
        case = oracle.random_gdn_case(rng, B=1, T=T, H=H, HV=HV, K=K, V=V, dtype=np.float16,
                                      g_low=-0.2, g_high=-0.001, with_state=True)
        t = time.perf_counter()
        ref = oracle.gdn_reference(**case)
        print(f"\n[oracle] T={T}: FP64 reference in {time.perf_counter() - t:.1f} s")
        _cache.clear()                      # keep one T in memory at a time
        _cache[T] = (case, ref)
    return _cache[T]


@pytest.mark.parametrize("T", [4096, 32768, 65536])
@pytest.mark.parametrize("family", ["serial", "chunked"])
def test_production_shape_against_fp64(T, family):
    case, (ref_o, ref_s) = production_case(T)
    dev = {n: (cuda.to_device(a) if isinstance(a, np.ndarray) else a) for n, a in case.items()}
    gdn_prefill(**dev, variant=family, out_dtype="float32")          # compile + warm up
    cuda.synchronize()
    _registry.route_counters(reset=True)
    t = time.perf_counter()
    o, s = gdn_prefill(**dev, variant=family, out_dtype="float32")
    cuda.synchronize()
    ms = (time.perf_counter() - t) * 1e3
    assert _registry.route_counters() == {f"gdn_{family}_fwd": 1}
    o = o.copy_to_host()
    s = s.copy_to_host()
    o16, _ = gdn_prefill(**dev, variant=family)
    o16 = o16.copy_to_host()
    eo, es = oracle.rel_l2(o, ref_o), oracle.rel_l2(s, ref_s)
    print(f"[gdn {family:7s}] T={T:6d} H={H} HV={HV} K={K} V={V} fp16: "
          f"rel L2 out {eo:.3e} (max abs {oracle.max_abs(o, ref_o):.3e}), "
          f"state {es:.3e} (max abs {oracle.max_abs(s, ref_s):.3e}), "
          f"fp16 out rel L2 {oracle.rel_l2(o16, ref_o):.3e}, {ms:.1f} ms")
    assert np.isfinite(o).all() and np.isfinite(s).all()
    assert oracle.first_mismatch(o16, o.astype(np.float16)) is None
    assert eo <= TOL and es <= TOL, (eo, es)
