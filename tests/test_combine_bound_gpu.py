"""The register-tiled variants' combine at its real bound, on a GPU: up to ``MAX_SPLITS``
(512) splits the batched combine runs, above it frozen's, and the output, ``partial`` and
``lse`` are frozen's bytes either way. Marked ``gpu``: 513 split CTAs a row group are too
many for the simulator, which checks the same route with the bound lowered
(``tests/test_combine_batched_sim.py``).

The context, 40000 keys, gives A = min(S, ceil(40000 / 64)) = min(S, 625) active splits: the
batched kernel reads all 512 entries of its shared arrays at S = 512, frozen's combine 513
and 625 live splits above the bound. At S = 640 splits 625-639 are not active and the
contract has them written by nobody, so every call gets a workspace filled with the
sentinel: the whole ``partial`` and ``lse`` are then comparable byte for byte, and the
inactive splits must still hold the sentinel."""
from __future__ import annotations

import numpy as np
import pytest

import dflash2_numba as d2
from dflash2_numba.attention import combine_batched
from dflash2_numba.contract import SENTINEL, active_splits
from tests.attention_helpers import case, sentinel_run

pytestmark = pytest.mark.gpu

T = 40000
# every variant that registered the batched combine and its fallback (combine_specs)
TILED = [name for name, about in d2.attention_variants().items()
         if f"attention.{name}.combine.unbatched" in about["kernels"].split(", ")]


@pytest.fixture(scope="module")
def production_case():
    return case(np.random.default_rng(512), B=1, Q=8, Hq=6, Hkv=1, D=256, page_size=3296,
                seq_lens=[T], row_lengths=None, strided=False)


def _call(c, S, variant):
    r, guards = sentinel_run(d2, c, variant, S)
    assert guards, variant
    return r


@pytest.mark.parametrize("S", [512, 513, 640])
def test_combine_route_and_bytes_at_the_bound(production_case, S):
    assert combine_batched.MAX_SPLITS == 512
    assert {"tiled", "tiled_compact", "tiled_wide", "tiled_perm"} <= set(TILED), TILED
    A = active_splits(T, S)
    assert A == min(S, 625)
    ref = _call(production_case, S, "frozen")
    assert np.all(ref.lse[:, A:] == SENTINEL) and np.all(ref.partial[:, A:] == SENTINEL)
    assert np.isfinite(ref.out).all() and np.isfinite(ref.lse[:, :A]).all()
    combine = "combine" if S <= combine_batched.MAX_SPLITS else "combine.unbatched"
    for variant in TILED:
        d2.route_counters(reset=True)
        got = _call(production_case, S, variant)
        launched = [n for n in d2.route_counters() if ".combine" in n]
        assert launched == [f"attention.{variant}.{combine}"], (variant, launched)
        assert got.out.tobytes() == ref.out.tobytes(), variant
        assert got.partial.tobytes() == ref.partial.tobytes(), variant
        assert got.lse.tobytes() == ref.lse.tobytes(), variant
