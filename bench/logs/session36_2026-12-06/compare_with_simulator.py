"""Session 36: the H200 arrays of nan_probe.py (nan_probe.npz beside this file) against the simulator's (the npz that `OUT=DIR NUMBA_ENABLE_CUDASIM=1 python3 nan_probe.py` writes; its path is the argument)."""
import os
import sys

import numpy as np
from dflash2_numba.contract import active_splits
gpu = np.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "nan_probe.npz")); sim = np.load(sys.argv[1])
worst = {}
for k in sorted(gpu.files):
    a, b = gpu[k], sim[k]
    if k.endswith(("_lse", "_partial")):
        T = int(k.split("_")[0][1:]); A = active_splits(T, 80); a, b = a[:, :A], b[:, :A]
    nan_same = np.array_equal(np.isnan(a), np.isnan(b))
    m = np.isfinite(a) & np.isfinite(b)
    rel = float(np.max(np.abs(a[m] - b[m]) / (np.abs(a[m]) + 1e-30))) if m.any() else 0.0
    if not nan_same or rel > 1e-5:
        print(k, "nan pattern same:", nan_same, "max rel diff", rel)
print("done")
