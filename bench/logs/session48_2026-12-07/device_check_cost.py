"""Host time of the one-device pieces themselves (session 47), torch inputs of one attention
call: call_device over its eight arrays (raw objects, and parsed as the plan passes its five inputs),
on_device when the device is already current,
check_stream of a torch stream. Medians of 2000, microseconds, three rounds."""
import statistics
import time

import numpy as np
import torch
from numba import cuda

import dflash2_numba as d2
import oracle
from dflash2_numba import _devices
from dflash2_numba._arrays import as_array_arg


def med_us(fn, n=2000):
    for _ in range(50):
        fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


rng = np.random.default_rng(1)
c = oracle.random_attention_case(rng, B=1, Q=8, Hq=6, Hkv=1, D=256, page_size=256,
                                 seq_lens=[4096], strided=False)
t = {k: (torch.from_numpy(np.ascontiguousarray(v)).cuda() if isinstance(v, np.ndarray) else v)
     for k, v in c.items()}
ws = d2.AttentionWorkspace(batch=1, q_len=8, heads=6, head_dim=256, splits=80)
out = torch.empty((1, 8, 6, 256), dtype=torch.float16, device="cuda")
named = [(k, t[k]) for k in ("q", "k_cache", "v_cache", "block_table", "seq_lens")]
named += [("row_lengths", None), ("out", out), ("workspace", ws.partial)]
parsed = [(k, as_array_arg(v, k) if k in t else v) for k, v in named]
s = torch.cuda.Stream()
ns = cuda.external_stream(s.cuda_stream)


def on0():
    with _devices.on_device(0):
        pass


for r in range(3):
    print(f"round {r}: call_device (8 args) {med_us(lambda: _devices.call_device(named)):7.1f} us"
          f" | parsed {med_us(lambda: _devices.call_device(parsed)):7.1f} us"
          f" | on_device(current) {med_us(on0):6.2f} us"
          f" | check_stream(torch) {med_us(lambda: _devices.check_stream(ns, 0)):6.2f} us")
