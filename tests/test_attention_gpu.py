"""Frozen attention on a real GPU at the production shape (B=1, Q=8, Hq=6, Hkv=1, D=256,
page 3296) against the FP64 oracle. Marked ``gpu``: skipped without one.

Each test appends its figures (rel L2 and max abs, FP32 pre-cast and FP16) to the JSON
lines file named by ``DFLASH2_RESULTS`` when set, for bench/RESULTS.md.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

import oracle
from tests.attention_helpers import case, check_against_oracle
from tests.missing_tools import module

pytestmark = pytest.mark.gpu

PAGE = 3296


def _record(name, **fig):
    path = os.environ.get("DFLASH2_RESULTS")
    line = dict(test=name, **fig)
    print(json.dumps(line))
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def _run_and_check(name, c, variant="frozen"):
    import dflash2_numba as d2

    t0 = time.perf_counter()
    r32 = d2.verify_attention(**c, out_dtype="float32", variant=variant)
    r16 = d2.verify_attention(**c, out_dtype="float16", variant=variant)
    t1 = time.perf_counter()
    keys = ("q", "k_cache", "v_cache", "block_table", "seq_lens", "scale", "k_scale", "v_scale",
            "row_lengths")
    ref = oracle.attention_reference(**{k: c[k] for k in keys if k in c})
    rel32 = check_against_oracle(r32.out, r16.out, ref)
    _record(name, variant=variant, rel_l2_fp32=rel32, max_abs_fp32=oracle.max_abs(r32.out, ref),
            rel_l2_fp16=oracle.rel_l2(r16.out, ref), max_abs_fp16=oracle.max_abs(r16.out, ref),
            seq_lens=[int(x) for x in c["seq_lens"]], seconds_two_calls=round(t1 - t0, 3))
    return r32, r16


@pytest.mark.parametrize("ctx", [1024, 32768, 131072, 262144])
def test_production_shape_contexts(ctx):
    rng = np.random.default_rng(ctx)
    c = case(rng, B=1, Q=8, Hq=6, Hkv=1, D=256, page_size=PAGE, seq_lens=[ctx], strided=True)
    _run_and_check(f"q8 ctx={ctx}", c)


@pytest.mark.parametrize("Q", [2, 3, 4, 5, 6, 7])
def test_q_tails(Q):
    rng = np.random.default_rng(50 + Q)
    c = case(rng, B=1, Q=Q, Hq=6, Hkv=1, D=256, page_size=PAGE, seq_lens=[40000 + Q], strided=False)
    _run_and_check(f"q{Q} ctx={40000 + Q}", c)


def test_batch_of_four_mixed_lengths():
    rng = np.random.default_rng(4)
    lens = [129, 3296, 70001, 262144]
    c = case(rng, B=4, Q=8, Hq=6, Hkv=1, D=256, page_size=PAGE, seq_lens=lens, strided=True)
    _run_and_check("batch4 mixed", c)


def test_torch_and_cupy_zero_copy_interleaved_cache_on_caller_stream():
    """PyTorch / CuPy tensors are used zero-copy (interleaved K/V in one buffer, padded head
    rows), results come back as the caller's kind, on the caller's stream, and equal the
    numpy path byte for byte."""
    torch = module("torch")
    cupy = module("cupy")
    import dflash2_numba as d2

    rng = np.random.default_rng(9)
    B, Q, Hq, Hkv, D, P, T = 2, 8, 6, 1, 256, PAGE, 9000
    c = case(rng, B=B, Q=Q, Hq=Hq, Hkv=Hkv, D=D, page_size=P, seq_lens=[T, 5000], strided=False)
    pages = c["k_cache"].shape[0]
    buf = np.zeros((pages, P, 2, Hkv, D + 16), np.uint8)
    buf[:, :, 0, :, :D] = c["k_cache"]
    buf[:, :, 1, :, :D] = c["v_cache"]
    dev = torch.from_numpy(buf).cuda()
    kt, vt = dev[:, :, 0, :, :D], dev[:, :, 1, :, :D]
    assert not kt.is_contiguous()
    tq = torch.from_numpy(c["q"]).cuda()
    tbt = torch.from_numpy(c["block_table"]).cuda()
    tsl = torch.from_numpy(c["seq_lens"]).cuda()
    ref = d2.verify_attention(**c)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        r = d2.verify_attention(tq, kt, vt, tbt, tsl, scale=c["scale"], k_scale=c["k_scale"],
                                v_scale=c["v_scale"], stream=s)
    s.synchronize()
    assert isinstance(r.out, torch.Tensor) and r.out.is_cuda
    assert r.out.cpu().numpy().tobytes() == ref.out.tobytes()
    from dflash2_numba.contract import active_splits

    part = r.partial.cpu().numpy()
    for b, n in enumerate(c["seq_lens"]):
        A = active_splits(int(n), 80)     # splits >= A are never written (fresh buffers)
        assert part[b, :A].tobytes() == ref.partial[b, :A].tobytes()
    rc = d2.verify_attention(cupy.asarray(c["q"]), cupy.asarray(kt), cupy.asarray(vt),
                             cupy.asarray(c["block_table"]), cupy.asarray(c["seq_lens"]),
                             scale=c["scale"], k_scale=c["k_scale"], v_scale=c["v_scale"])
    assert isinstance(rc.out, cupy.ndarray)
    assert cupy.asnumpy(rc.out).tobytes() == ref.out.tobytes()
