"""Host time of the API's per-call work with torch inputs (session 47: the one-device checks).
Run once per tree (PYTHONPATH picks the package); prints medians in microseconds."""
import statistics
import sys
import time

import numpy as np
import torch
from numba import cuda

import dflash2_numba as d2
import oracle


def med_us(fn, n=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(ts) * 1e6


rng = np.random.default_rng(1)
c = oracle.random_attention_case(rng, B=1, Q=8, Hq=6, Hkv=1, D=256, page_size=256,
                                 seq_lens=[4096], strided=False)
t = {k: (torch.from_numpy(np.ascontiguousarray(v)).cuda() if isinstance(v, np.ndarray) else v)
     for k, v in c.items()}
ws = d2.AttentionWorkspace(batch=1, q_len=8, heads=6, head_dim=256, splits=80)
s = torch.cuda.Stream()
ns = cuda.external_stream(s.cuda_stream)
plan = d2.plan_attention(**t, workspace=ws, stream=s)
g = oracle.random_gdn_case(rng, B=1, T=256, H=2, HV=4, K=128, V=128, dtype=np.float16,
                           with_state=True)
tg = {k: (torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v) for k, v in g.items()}
call = d2.plan_gdn(**tg, stream=s)
rows = [
    ("plan_attention (torch, workspace, stream)", med_us(lambda: d2.plan_attention(**t, workspace=ws, stream=s))),
    ("plan.launch(stream) (attention)", med_us(lambda: plan.launch(ns))),
    ("verify_attention (torch, workspace)", med_us(lambda: d2.verify_attention(**t, workspace=ws))),
    ("plan_gdn (torch, initial_state, stream)", med_us(lambda: d2.plan_gdn(**tg, stream=s), n=100)),
    ("call.launch(stream) (gdn chunked)", med_us(lambda: call.launch(ns))),
]
print(sys.argv[1] if len(sys.argv) > 1 else "tree ?")
for name, us in rows:
    print(f"  {name:45s} {us:9.1f} us")
