"""The register-tiled attention variants' sm_70 forms: the packed u scratch (rows of 32
floats, each row's keys rotated) that brings their D = 256 shared memory inside a V100's
96 KB a CTA, and the plan-time refusal of a form larger than the device allows.

Checked without a GPU: the sizes; that the generated stores and Kahan reads of the packed u
put each (slice, row, key) at one address, the same one for the writer and the reader, and
hit distinct banks (the expressions are evaluated from the generated source); and, on the
simulator with plans made as on compute capability 7.0 (``DFLASH2_EMULATE_CC``), that each
variant routes to its ``.sm70`` kernels and writes frozen's bytes (poisoned shared memory),
and that a form larger than the emulated device allows is refused at plan time."""
from __future__ import annotations

import re

import numpy as np
import pytest

import dflash2_numba as d2
from dflash2_numba.attention import tiled as TL
from dflash2_numba.attention import tiled_compact as TC
from dflash2_numba.attention import tiled_perm as TP
from dflash2_numba.attention import tiled_wide as TW
from dflash2_numba.attention._tiled_source import U_PACK_RS
from tests.attention_helpers import case, sentinel_run

V100_SHARED_PER_CTA = 96 * 1024
BANKS = 32


@pytest.fixture
def device_is_sm70(monkeypatch):
    """Plans answer as on a device of compute capability 7.0 (``DFLASH2_EMULATE_CC``): the
    sm_70 forms and a V100's 96 KB a CTA."""
    monkeypatch.setenv("DFLASH2_EMULATE_CC", "7.0")


def test_sm70_forms_fit_a_v100_and_the_h200_forms_are_unchanged():
    for D in (64, 128, 256):
        assert TL._SMEM_BYTES[D, True] <= V100_SHARED_PER_CTA
        assert TC._SMEM_BYTES[D, False] <= V100_SHARED_PER_CTA
    assert TW.SMEM_BYTES[False] <= V100_SHARED_PER_CTA
    # the H200 forms' layouts (measured there) keep their sizes
    assert (TL._SMEM_BYTES[256, False], TC._SMEM_BYTES[256, True], TW.SMEM_BYTES[True]) == \
        (98_832, 100_112, 108_560)
    assert (TL._SMEM_BYTES[256, True], TC._SMEM_BYTES[256, False], TW.SMEM_BYTES[False]) == \
        (89_616, 91_408, 92_688)


def _exprs(src, names):
    """name -> the right-hand side of its first assignment in ``src`` (comments dropped)."""
    out = {}
    for line in src.splitlines():
        st = line.strip()
        for name in names:
            if name not in out and st.startswith(f"{name} = "):
                out[name] = st.split("=", 1)[1].split("#")[0]
    return out


def _store_base(src, env, uv):
    """The slice-relative base address the generated source passes to its packed-u store
    helper (``_store_u_rot`` / ``_store_u16_rot``), evaluated for every thread at slice 0."""
    m = re.search(r"_store_u(?:16)?_rot\(sm, ([^,]+),", src)
    assert m, "no packed-u store in the source"
    return eval(m.group(1), {**env, "sl": 0}) - uv


def _packed_u_addresses(src, nt, rows_per_thread, periods, key_step, row_base, uv):
    """The packed u's addresses within one slice, with the thread roles, the store columns
    ``uc*`` and the Kahan offsets ``uo*`` evaluated from the generated source: (roles,
    store address / row / key per (thread, tile row rr and key c), Kahan read address / key
    per (thread, m))."""
    nk = 32 // key_step
    names = ["kg", "srg", "r", "kq", "urot", *[f"uc{q}" for q in range(periods)],
             *[f"uo{m}" for m in range(nk)]]
    ex = _exprs(src, names)
    assert set(ex) == set(names), set(names) - set(ex)
    tid = np.arange(nt)
    env = {"tid": tid, "lane": tid & 31, "warp": tid >> 5}
    for name in ("kg", "srg", "r", "kq"):
        env[name] = eval(ex[name], env)
    env["urot"] = eval(ex["urot"], env)
    uc = [eval(ex[f"uc{q}"], env) for q in range(periods)]
    base = _store_base(src, env, uv)
    stores = np.stack([base + rr * U_PACK_RS + uc[rr % periods] + c
                       for rr in range(rows_per_thread) for c in range(4)], axis=1)
    keys = np.stack([4 * env["kg"] + c for rr in range(rows_per_thread) for c in range(4)], axis=1)
    rows = np.stack([row_base(env) + rr for rr in range(rows_per_thread) for c in range(4)], axis=1)
    ubr = re.search(r"ubr = ([^#\n]+)", src).group(1)
    reads = np.stack([eval(ubr, env) - uv + eval(ex[f"uo{m}"], env) for m in range(nk)], axis=1)
    read_keys = np.stack([env["kq"] + key_step * m for m in range(nk)], axis=1)
    return env, stores, rows, keys, reads, read_keys


GEOMETRIES = {
    # variant: (source, threads, rows a score thread, store-column periods, Kahan key step,
    #           first row of a score thread, the u region's offset in shared memory)
    "tiled": (lambda: TL._source(64, True, u_pack=True), 128, 8, 4, 8,
              lambda v: 8 * v["srg"], TL._smem_layout(64, u_pack=True)["UV"]),
    "tiled_compact": (lambda: TC._source(64, True, defer_o=False, u_pack=True), 128, 8, 4, 8,
                      lambda v: 8 * v["srg"], TC._smem_layout(64, u_pack=True)["UV"]),
    "tiled_wide": (lambda: TW._source(True, u_pack=True), 256, 4, 2, 16,
                   lambda v: 4 * v["srg"], TW.smem_layout(u_pack=True)["UV"]),
}


@pytest.mark.parametrize("variant", list(GEOMETRIES))
def test_packed_u_is_one_address_per_sum_read_where_written_without_conflicts(variant):
    make, nt, rows_pt, periods, key_step, row_base, uv = GEOMETRIES[variant]
    env, stores, rows, keys, reads, read_keys = _packed_u_addresses(
        make(), nt, rows_pt, periods, key_step, row_base, uv)
    # writers: the 16 x 32 sums of one slice, each at one address inside the slice's 512
    # floats (threads of one slice: those of one score-role slice index)
    slice_of = (env["lane"] >> 4) + 2 * env["warp"] if nt == 128 else env["warp"]
    for s in np.unique(slice_of):
        sel = slice_of == s
        where = {}
        for a, r, k in zip(stores[sel].ravel(), rows[sel].ravel(), keys[sel].ravel()):
            assert where.setdefault((int(r), int(k)), int(a)) == int(a)
        assert len(where) == 16 * 32
        assert sorted(where.values()) == list(range(16 * U_PACK_RS))
    # readers (softmax role): row r, key kq + key_step m reads the address its writer used
    # (the same in every slice: ``where`` is the last slice's map)
    for t in range(nt):
        for m in range(reads.shape[1]):
            r, k = int(env["r"][t]), int(read_keys[t, m])
            assert int(reads[t, m]) == where[(r, k)]
    # banks: each Kahan read instruction of a warp hits 32 distinct banks; each 16-byte store
    # instruction, 8 lanes a phase, 8 distinct 4-bank groups
    for w in range(nt // 32):
        lanes = slice(32 * w, 32 * w + 32)
        for m in range(reads.shape[1]):
            assert len(set(reads[lanes, m] % BANKS)) == BANKS
        for rr in range(rows_pt):
            a = stores[lanes, 4 * rr]
            assert np.all(a % 4 == 0)
            for phase in range(4):
                assert len(set((a[8 * phase:8 * phase + 8] % BANKS) // 4)) == 8


# (seed, B, Q, Hq, Hkv, D, page, seq_lens, splits, row_lengths)
SM70_CASES = {
    # 18 rows (a full and a nearly empty row group), rows of zero and negative length, S > A
    "d64_q3_g6_zero_rows": (4, 1, 3, 6, 1, 64, 32, [300], 8, np.array([[0, 300, 17]], np.int32)),
    # the production head dim: 16 rows of one row group, pages crossed inside a tile
    "d256_q8_g2": (7, 1, 8, 2, 1, 256, 5, [100], 2, None),
}
SM70_RUNS = [("tiled", "d64_q3_g6_zero_rows"), ("tiled_compact", "d64_q3_g6_zero_rows"),
             ("tiled", "d256_q8_g2"), ("tiled_compact", "d256_q8_g2"), ("tiled_wide", "d256_q8_g2"),
             ("tiled_perm", "d64_q3_g6_zero_rows"),     # (tiled_compact's sm_70 kernel, own names)
             ("tiled_perm", "d256_q8_g2")]


def _host(x):
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.array(x)


def _run(c, variant, splits):
    r, guards = sentinel_run(d2, c, variant, splits)
    assert guards, "a guard element was written"
    return r


@pytest.mark.parametrize("variant, name", SM70_RUNS)
def test_sm70_form_routes_and_writes_frozens_bytes(variant, name, device_is_sm70,
                                                    poisoned_dynamic_shared_memory):
    seed, B, Q, Hq, Hkv, D, page, seq, splits, rows = SM70_CASES[name]
    c = case(np.random.default_rng(seed), B=B, Q=Q, Hq=Hq, Hkv=Hkv, D=D, page_size=page,
             seq_lens=seq, row_lengths=rows)
    ref = _run(c, "frozen", splits)
    d2.route_counters(reset=True)
    got = _run(c, variant, splits)
    split = [n for n in d2.route_counters() if ".split." in n]
    assert split and all(n.endswith(".sm70") for n in split), split
    combine = [n for n in d2.route_counters() if ".combine" in n]
    assert combine == [f"attention.{variant}.combine"], combine      # the batched combine
    assert got.out.tobytes() == ref.out.tobytes()
    assert got.partial.tobytes() == ref.partial.tobytes()
    assert got.lse.tobytes() == ref.lse.tobytes()


REFUSALS = [   # (emulated capability, variant, the form's bytes at D = 256, the opt-in limit)
    ("7.5", "tiled", 89_616, 65_536), ("7.5", "tiled_compact", 91_408, 65_536),
    ("7.5", "tiled_wide", 92_688, 65_536), ("7.5", "tiled_perm", 91_408, 65_536),
    ("8.6", "tiled_wide", 108_560, 101_376),
]


@pytest.mark.parametrize("cc, variant, need, limit", REFUSALS)
def test_a_form_larger_than_the_device_allows_is_refused_before_any_launch(
        cc, variant, need, limit, monkeypatch):
    """On a device whose opt-in limit is below the form's size (emulated: compute capability
    7.5 takes the sm_70 forms and allows 64 KB; 8.6 takes the H200 forms and allows 99 KB)
    the plan is refused naming both sizes; nothing is launched and the workspace keeps its
    sentinel."""
    monkeypatch.setenv("DFLASH2_EMULATE_CC", cc)
    c = case(np.random.default_rng(3), B=1, Q=1, Hq=2, Hkv=1, D=256, page_size=16, seq_lens=[40])
    ws = d2.AttentionWorkspace(batch=1, q_len=1, heads=2, head_dim=256, splits=2)
    ws.fill_sentinel()
    before = (_host(ws.partial).tobytes(), _host(ws.lse).tobytes())
    d2.route_counters(reset=True)
    with pytest.raises(ValueError, match=rf"{variant}: .*{need} B of shared memory.*{limit} B"):
        d2.verify_attention(**c, splits=2, variant=variant, workspace=ws)
    assert d2.route_counters() == {}
    assert (_host(ws.partial).tobytes(), _host(ws.lse).tobytes()) == before


@pytest.mark.parametrize("cc, variants", [
    ("7.0", ["tiled", "tiled_compact", "tiled_wide", "tiled_perm"]),
    ("8.6", ["tiled", "tiled_compact", "tiled_perm"])])
def test_forms_within_the_limit_pass_the_plan_check(cc, variants, monkeypatch):
    monkeypatch.setenv("DFLASH2_EMULATE_CC", cc)
    plan = dict(B=1, Q=1, Hq=2, Hkv=1, D=256, page_size=16, splits=2)
    for variant in variants:
        {"tiled": TL, "tiled_compact": TC, "tiled_wide": TW, "tiled_perm": TP}[variant].supports(plan)
