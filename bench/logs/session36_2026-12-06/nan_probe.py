"""Session 36: NaN K / V byte on the GPU: every variant's out / lse / partial saved."""
import os, sys
import numpy as np
import dflash2_numba as d2
import oracle
out = os.environ["OUT"]
save = {}
for T, key, D in [(12, 10, 64), (45, 43, 64), (150, 140, 64), (150, 20, 64), (45, 43, 256)]:
    rng = np.random.default_rng(23)
    c = oracle.random_attention_case(rng, B=1, Q=1, Hq=1, Hkv=1, D=D, page_size=32,
                                     seq_lens=[T], strided=False)
    for which in ("k_cache", "v_cache", None):
        cc = dict(c)
        if which:
            cc[which] = c[which].copy()
            cc[which][c["block_table"][0, key // 32], key % 32, 0, 5] = 0x7F
        for name in d2.attention_variants():
            try:
                r = d2.verify_attention(**cc, out_dtype="float32", variant=name)
            except d2.UnsupportedShape:
                continue
            tag = f"T{T}_k{key}_D{D}_{which}_{name}"
            save[tag + "_out"] = r.out; save[tag + "_lse"] = r.lse; save[tag + "_partial"] = r.partial
            print(tag, "nan:", int(np.isnan(r.out).sum()), "lse0:", r.lse[0, :3, 0, 0].tolist(),
                  "max|out|", float(np.nanmax(np.abs(r.out))) if np.isfinite(r.out).any() else None)
np.savez_compressed(os.path.join(out, "nan_probe.npz"), **save)
