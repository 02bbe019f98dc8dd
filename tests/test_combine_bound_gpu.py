"""The register-tiled variants' combine at its real bound, on a GPU: up to ``MAX_SPLITS``
(512) splits the batched combine runs, above it frozen's, and the output, ``partial`` and
``lse`` are frozen's bytes either way. Marked ``gpu``: 513 split CTAs a row group are too
many for the simulator, which checks the same route with the bound lowered
(``tests/test_combine_batched_sim.py``).

The context, 40000 keys, makes every split active (A = min(S, ceil(40000 / 64)) = S for
S <= 625), so the batched kernel reads all 512 entries of its shared arrays at S = 512, and
frozen's combine reads 513 and 625 live splits above the bound."""
from __future__ import annotations

import numpy as np
import pytest

import dflash2_numba as d2
from dflash2_numba.attention import combine_batched
from dflash2_numba.contract import active_splits
from tests.attention_helpers import case

pytestmark = pytest.mark.gpu

T = 40000
TILED = ["tiled", "tiled_compact", "tiled_wide", "tiled_perm"]


@pytest.fixture(scope="module")
def production_case():
    return case(np.random.default_rng(512), B=1, Q=8, Hq=6, Hkv=1, D=256, page_size=3296,
                seq_lens=[T], row_lengths=None, strided=False)


@pytest.mark.parametrize("S", [512, 513, 640])
def test_combine_route_and_bytes_at_the_bound(production_case, S):
    assert combine_batched.MAX_SPLITS == 512
    assert active_splits(T, S) == min(S, 625)
    ref = d2.verify_attention(**production_case, splits=S, variant="frozen")
    combine = "combine" if S <= combine_batched.MAX_SPLITS else "combine.unbatched"
    for variant in TILED:
        d2.route_counters(reset=True)
        got = d2.verify_attention(**production_case, splits=S, variant=variant)
        launched = [n for n in d2.route_counters() if ".combine" in n]
        assert launched == [f"attention.{variant}.{combine}"], (variant, launched)
        assert got.out.tobytes() == ref.out.tobytes(), variant
        assert got.partial.tobytes() == ref.partial.tobytes(), variant
        assert got.lse.tobytes() == ref.lse.tobytes(), variant
    assert np.isfinite(ref.out).all()
