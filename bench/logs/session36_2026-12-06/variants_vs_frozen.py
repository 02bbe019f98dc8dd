"""Session 36: every variant against frozen, bytes of out and the active splits' partial / lse, in the H200 npz beside this file and in the simulator npz named by the argument."""
import os
import sys

import numpy as np
from dflash2_numba.contract import active_splits
for src in (os.path.join(os.path.dirname(os.path.abspath(__file__)), "nan_probe.npz"), sys.argv[1]):
    z = np.load(src); bad = 0; n = 0
    for k in z.files:
        if "_frozen_" in k: continue
        parts = k.split("_"); 
        fk = k
        for v in ("tiled_compact", "tiled_perm", "tiled_wide", "tiled"):
            if f"_{v}_" in k:
                fk = k.replace(f"_{v}_", "_frozen_"); break
        if fk not in z.files: continue
        a, b = z[k], z[fk]
        if k.endswith(("_lse", "_partial")):
            T = int(k.split("_")[0][1:]); A = active_splits(T, 80); a, b = a[:, :A], b[:, :A]
        n += 1
        if a.tobytes() != b.tobytes(): bad += 1; print(src[-20:], "differs from frozen:", k)
    print(src, "compared", n, "differ", bad)
