"""Every GDN variant's bytes do not depend on what its planned global scratch held before the
call: the scratch (every FP32 device array the plan keeps) and the output and final-state
buffers are overwritten with a word (a quiet NaN, -inf, or a large finite pattern) after
planning, and the call must still give the bytes of the same call on a fresh plan.

Scratch is ``cuda.device_array`` on a GPU (whatever the allocator hands back) and zeros on
the simulator, so a kernel that reads a word it never wrote (P^T's upper part, the rows past
a partial chunk, a slab past its end) and lets it reach a result would pass every test that
plans afresh. A NaN reaches a result even through a multiplication by zero.

On the simulator: a small shape with a partial chunk and two sequences. With
``DFLASH2_GPU=1`` on a GPU the ``gpu``-marked case runs the production shape (H = 4, HV = 12,
K = V = 128, FP16) with a partial last chunk."""
from types import SimpleNamespace

import numpy as np
import pytest

import oracle
from dflash2_numba import _registry, plan_gdn
from dflash2_numba._compat import cuda
from dflash2_numba.gdn._scratch import scratch_arrays

FILLS = {"nan": 0x7FC00000, "-inf": 0xFF800000, "5a5a5a5a": 0x5A5A5A5A}
VARIANTS = [v for v in _registry.variants("gdn") if v != "serial"]


def fill(arr, word):
    arr.copy_to_device(np.full(arr.shape, word, np.uint32).view(arr.dtype)
                       if np.dtype(arr.dtype).itemsize == 4
                       else np.full(arr.shape, word & 0xFFFF, np.uint16).view(arr.dtype))


def bytes_of(call):
    cuda.synchronize()
    return tuple(np.asarray(x.copy_to_host() if hasattr(x, "copy_to_host") else x).tobytes()
                 for x in call.results())


def filled_call_matches_fresh(case, variant, word, **kw):
    want = bytes_of(_launched(plan_gdn(**case, variant=variant, **kw)))
    call = plan_gdn(**case, variant=variant, **kw)
    arrays = scratch_arrays(call.plan)
    assert arrays, f"{variant}: no scratch found to fill"
    for a in arrays:
        fill(a, word)
    fill(call.plan.o, word)
    fill(call.plan.hT, word)
    got = bytes_of(_launched(call))
    return got, want


def _launched(call):
    call.launch()
    return call


@pytest.mark.parametrize("fill_name", list(FILLS))
@pytest.mark.parametrize("variant", VARIANTS)
def test_scratch_contents_do_not_reach_the_results(variant, fill_name):
    case = oracle.random_gdn_case(np.random.default_rng(21), B=1, T=70, H=1, HV=2, K=32,
                                  V=32, dtype=np.float32, cu_seqlens=np.array([0, 5, 70]),
                                  with_state=True)
    got, want = filled_call_matches_fresh(case, variant, FILLS[fill_name],
                                          out_dtype="float32")
    assert got[0] == want[0], f"{variant}: output changed with a {fill_name}-filled scratch"
    assert got[1] == want[1], f"{variant}: final state changed with a {fill_name}-filled scratch"


def test_scratch_walk_reaches_nested_state_rows():
    """chunked_overlap and chunked_ahead keep their gathered initial-state rows in a nested
    segment namespace (``scratch.seg.rows``); the fill must reach them."""
    case = oracle.random_gdn_case(np.random.default_rng(22), B=1, T=70, H=1, HV=2, K=32,
                                  V=32, dtype=np.float32, cu_seqlens=np.array([0, 5, 70]),
                                  with_state=True)
    for variant in ("chunked_overlap", "chunked_ahead"):
        call = plan_gdn(**case, variant=variant, out_dtype="float32")
        rows = call.plan.scratch.seg.rows
        assert any(a is rows for a in scratch_arrays(call.plan)), variant


def test_scratch_walk_enters_only_the_containers_plans_build():
    """A namespace in a plan's scratch also holds kernels, streams and events; walking their
    attributes led (on a GPU) to an object that answers every attribute, taken for an array.
    The walk finds the arrays beside such an object and never enters it."""
    class AnswersAnything:
        def __getattr__(self, name):
            return self

    arr = cuda.to_device(np.zeros(3, np.float32))
    nested = cuda.to_device(np.zeros(2, np.float32))
    ints = cuda.to_device(np.zeros(2, np.int32))
    plan = SimpleNamespace(scratch=SimpleNamespace(
        kernel=AnswersAnything(), a=arr, seg=SimpleNamespace(rows=[nested, ints]),
        table={"k": AnswersAnything()}))
    assert [id(a) for a in scratch_arrays(plan)] == [id(arr), id(nested)]


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_plan_launched_twice_gives_the_same_bytes(variant):
    """A planned call replayed (as a CUDA graph replays it) reads only its inputs, never
    what its previous launch left in its scratch, output or final state."""
    case = oracle.random_gdn_case(np.random.default_rng(23), B=1, T=70, H=1, HV=2, K=32,
                                  V=32, dtype=np.float32, cu_seqlens=np.array([0, 5, 70]),
                                  with_state=True)
    call = plan_gdn(**case, variant=variant, out_dtype="float32")
    first = bytes_of(_launched(call))
    second = bytes_of(_launched(call))
    assert first[0] == second[0], f"{variant}: output differs on the second launch"
    assert first[1] == second[1], f"{variant}: final state differs on the second launch"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_production_shape_scratch_contents_do_not_reach_the_results(variant):
    T = 4096 + 37                                   # a partial last chunk
    case = oracle.random_gdn_case(np.random.default_rng(T), B=1, T=T, H=4, HV=12, K=128,
                                  V=128, dtype=np.float16, g_low=-0.2, g_high=-0.001,
                                  with_state=True)
    dev = {n: (cuda.to_device(a) if isinstance(a, np.ndarray) else a) for n, a in case.items()}
    for name, word in FILLS.items():
        got, want = filled_call_matches_fresh(dev, variant, word)
        assert got == want, f"{variant}: results changed with a {name}-filled scratch"
