"""The screen's case matrices: named, seeded input sets for attention and GDN.

Attention cases are built with ``oracle.random_attention_case`` (random E4M3 K/V, FP16 q,
pages in random order, optionally padded/reversed strides). The quick matrix is small
enough for the CUDA simulator; the full matrix mirrors a production acceptance run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

import oracle

LENGTH_STATES = ("live", "all rows zero", "last row zero", "first row zero", "restored")
# cache scales neither 1 nor a power of two (k_scale rounds qk_scale, v_scale the partials),
# used by the padded/strided and batch cases so a kernel that drops either one fails
CACHE_SCALES = dict(k_scale=0.37, v_scale=1.3)


@dataclass
class AttentionCaseSpec:
    name: str
    B: int
    Q: int
    Hq: int
    Hkv: int
    D: int
    page_size: int
    seq_lens: List[int]
    splits: int
    strided: bool = False
    length_states: bool = False
    seed: int = 0
    k_scale: float = 1.0
    v_scale: float = 1.0

    def build(self) -> Dict:
        rng = np.random.default_rng(self.seed)
        c = oracle.random_attention_case(rng, B=self.B, Q=self.Q, Hq=self.Hq, Hkv=self.Hkv,
                                         D=self.D, page_size=self.page_size,
                                         seq_lens=self.seq_lens, strided=self.strided,
                                         k_scale=self.k_scale, v_scale=self.v_scale)
        return c

    @property
    def context(self) -> int:
        return int(max(self.seq_lens))


def row_lengths_for_state(seq_lens, Q: int, state: str) -> np.ndarray:
    """Explicit ``row_lengths [B, Q]`` of one length state (contract C)."""
    L = oracle.row_lengths_of(np.asarray(seq_lens), Q).astype(np.int32)
    if state in ("live", "restored"):
        return L
    L = L.copy()
    if state == "all rows zero":
        L[:] = 0
    elif state == "last row zero":
        L[:, -1] = 0
    elif state == "first row zero":
        L[:, 0] = 0
    else:
        raise ValueError(f"state: unknown length state {state!r}")
    return L


def attention_matrix(quick: bool, contexts: Optional[List[int]] = None) -> List[AttentionCaseSpec]:
    if quick:
        base = dict(Hq=2, Hkv=1, D=64, page_size=16)
        specs = [
            AttentionCaseSpec("q8 T=1", B=1, Q=8, seq_lens=[8], splits=4, seed=1, **base),
            AttentionCaseSpec("q3 T=33 pad", B=1, Q=3, seq_lens=[33], splits=4, strided=True, seed=2,
                              **base, **CACHE_SCALES),
            AttentionCaseSpec("q2 T=129 A<S", B=1, Q=2, seq_lens=[129], splits=4, seed=3, **base),
            AttentionCaseSpec("q4 T=200 A=S states", B=1, Q=4, seq_lens=[200], splits=4,
                              length_states=True, seed=4, **base),
            AttentionCaseSpec("q3 batch mixed G=2", B=2, Q=3, Hq=4, Hkv=2, D=64, page_size=16,
                              seq_lens=[17, 140], splits=3, seed=5, **CACHE_SCALES),
            # the production head dim (tiled_wide's only one) and G = 6, Q = 3: 18 query rows,
            # so a second row group of 16 runs; T = 140: A = 3 of S = 4 splits (2, 2, 1 tiles)
            AttentionCaseSpec("q3 T=140 D=256 G=6 rows=18", B=1, Q=3, Hq=6, Hkv=1, D=256,
                              page_size=16, seq_lens=[140], splits=4, seed=6, **CACHE_SCALES),
        ]
        if contexts:
            specs = [AttentionCaseSpec(f"q2 T={T}", B=1, Q=2, seq_lens=[T], splits=4, seed=T, **base)
                     for T in contexts]
        return specs
    prod = dict(Hq=6, Hkv=1, D=256)
    ctxs = contexts or [63, 3295, 3296, 3297, 6593, 32768, 131072, 132096, 261888, 262144]
    specs = []
    for i, T in enumerate(ctxs):
        page = (3296, 1648, 848)[i % 3]
        scales = CACHE_SCALES if i % 2 == 1 else {}
        specs.append(AttentionCaseSpec(f"q8 T={T} page={page}", B=1, Q=8, page_size=page,
                                       seq_lens=[T], splits=80, strided=(i % 2 == 1),
                                       length_states=True, seed=100 + i, **prod, **scales))
    if not contexts:
        for Q in range(2, 8):
            specs.append(AttentionCaseSpec(f"q{Q} T={40000 + Q} page=3296", B=1, Q=Q,
                                           page_size=3296, seq_lens=[40000 + Q], splits=80,
                                           length_states=(Q == 7), seed=200 + Q, **prod))
        specs.append(AttentionCaseSpec("q8 batch 129/3296/70001/262144 page=1648", B=4, Q=8,
                                       page_size=1648, seq_lens=[129, 3296, 70001, 262144],
                                       splits=80, strided=True, length_states=True, seed=300,
                                       **prod, **CACHE_SCALES))
    return specs


@dataclass
class GdnCaseSpec:
    name: str
    T: int
    H: int
    HV: int
    K: int
    V: int
    dtype: str = "float16"
    seq_lens: Optional[List[int]] = None      # packed variable length when given
    initial_state: bool = False
    use_qk_l2norm: bool = True
    seed: int = 0
    scale: Optional[float] = None             # the query scale; None: K ** -0.5
    extra: Dict = field(default_factory=dict)

    def build(self) -> Dict:
        rng = np.random.default_rng(self.seed)
        cu = None
        if self.seq_lens is not None:
            cu = np.concatenate([[0], np.cumsum(self.seq_lens)]).astype(np.int32)
            assert cu[-1] == self.T
        N = 1 if cu is None else len(self.seq_lens)
        dt = np.dtype(self.dtype)
        q = rng.standard_normal((1, self.T, self.H, self.K)).astype(dt)
        k = rng.standard_normal((1, self.T, self.H, self.K))
        if not self.use_qk_l2norm:      # keep ||k|| ~ 1 so the recurrence stays bounded
            k = k / np.sqrt(self.K)
        k = k.astype(dt)
        v = rng.standard_normal((1, self.T, self.HV, self.V)).astype(dt)
        g = (-np.abs(rng.standard_normal((1, self.T, self.HV))) * 0.1).astype(np.float32)
        beta = rng.uniform(0.05, 1.0, (1, self.T, self.HV)).astype(np.float32)
        c = dict(q=q, k=k, v=v, g=g, beta=beta, cu_seqlens=cu, use_qk_l2norm=self.use_qk_l2norm,
                 scale=self.scale)
        if self.initial_state:
            c["initial_state"] = (rng.standard_normal((N, self.HV, self.K, self.V)) * 0.1).astype(np.float32)
        return c


def gdn_matrix(quick: bool, lengths: Optional[List[int]] = None) -> List[GdnCaseSpec]:
    if quick:
        specs = [
            GdnCaseSpec("T=70 fp16", T=70, H=1, HV=2, K=32, V=32, seed=1),
            GdnCaseSpec("T=64 fp32 h0 no-l2", T=64, H=1, HV=2, K=32, V=32, dtype="float32",
                        initial_state=True, use_qk_l2norm=False, seed=2),
            GdnCaseSpec("varlen 1/63/66 h0", T=130, H=1, HV=2, K=32, V=32, seq_lens=[1, 63, 66],
                        initial_state=True, seed=3),
            # empty sequences pass their initial state through; V = 64: two column blocks
            GdnCaseSpec("varlen 0/5/0/70/0 h0 V=64", T=75, H=1, HV=2, K=32, V=64,
                        seq_lens=[0, 5, 0, 70, 0], initial_state=True, seed=4),
            # two q/k heads of two value heads each (a head map that mixes them up is seen
            # only with H > 1 and HV / H > 1), a sequence of three chunks, a scale of its own
            GdnCaseSpec("H=2 HV=4 varlen 3/150 h0 scale=0.3", T=153, H=2, HV=4, K=32, V=32,
                        seq_lens=[3, 150], initial_state=True, scale=0.3, seed=5),
        ]
        if lengths:
            specs = [GdnCaseSpec(f"T={T}", T=T, H=1, HV=2, K=32, V=32, seed=T) for T in lengths]
        return specs
    prod = dict(H=4, HV=12, K=128, V=128)
    Ts = lengths or [4096, 32768, 65536]
    specs = [GdnCaseSpec(f"T={T}", T=T, seed=T, **prod) for T in Ts]
    if not lengths:
        specs.append(GdnCaseSpec("T=8192 h0", T=8192, initial_state=True, seed=11, **prod))
        specs.append(GdnCaseSpec("varlen 0/1/100/0/4000/64/12219/0 h0", T=16384,
                                 seq_lens=[0, 1, 100, 0, 4000, 64, 12219, 0], initial_state=True,
                                 seed=12, **prod))
        specs.append(GdnCaseSpec("T=4096 fp32 h0 no-l2", T=4096, dtype="float32", initial_state=True,
                                 use_qk_l2norm=False, seed=13, **prod))
    return specs
