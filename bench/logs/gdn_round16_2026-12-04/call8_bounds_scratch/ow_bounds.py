"""Scratch experiment: gdn_chunk_out_wide under launch bounds (128, 3) / (128, 4) / (128, 2)."""
import sys
from pathlib import Path
sys.path.insert(0, 'bench'); sys.path.insert(0, '.')
import numpy as np
import dflash2_numba  # noqa
from _common import Clock, try_import_torch
from overlap_probe import inputs, plan_with
from dflash2_numba._compat import jit_bounded
from dflash2_numba._dynshared import DynShared
from dflash2_numba.gdn import chunked_rec as RC
from dflash2_numba.gdn._chunk_output_wide import gdn_chunk_out_wide_kernel, wide_floats

T = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
torch, _ = try_import_torch()
clock = Clock(torch)
ins = inputs(T, 1, False)
call = plan_with(ins, 'chunked_rec_pipe', {})
call.launch(clock.stream); clock.sync()
plan = call.plan
o = plan.o
want = o.copy_to_host().tobytes()
forms = {'128x3': plan.scratch.rec.out}
for b in (4, 2):
    forms[f'128x{b}'] = DynShared(jit_bounded(gdn_chunk_out_wide_kernel, (128, b)), 4 * wide_floats(plan.K, plan.V))
for name, k in forms.items():
    plan.scratch.rec.out = k
    o.copy_to_device(np.zeros(o.shape, o.dtype))
    RC.launch_out(plan, clock.stream); clock.sync()
    print(name, 'same bytes', o.copy_to_host().tobytes() == want, flush=True)
t = {n: [] for n in forms}
for r in range(7):
    for name, k in forms.items():
        plan.scratch.rec.out = k
        t[name].append(clock.time_ms(lambda: RC.launch_out(plan, clock.stream), 7))
for name in forms:
    print(name, 'median ms', round(float(np.median(t[name])), 4), [round(x, 4) for x in t[name]])
