"""``tiled_compact``'s layout claims, checked without a GPU: the load role covers every
(key, 16-byte column) of a tile once; its decode stores and the softmax stores hit distinct
shared-memory banks, in the default layout and in the ``k_perm`` one; the plain decode equals
the patched one on words with no NaN code; the generator's schedule and layout options
(``defer_o``, loop shapes, operand depth, ``k_late``, ``pv_pairs``, ``k_perm``, ``loop32``,
``nan_once``) keep the bytes
(simulator)."""
from __future__ import annotations

import numpy as np
import pytest

import dflash2_numba as d2
from dflash2_numba.attention import tiled_compact as TC
from dflash2_numba.contract import TILE_KEYS
from tests.attention_helpers import case, decode_on_cpu

BANKS = 32


def _host(x):
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.array(x)


def _roles(D):
    lc_bits, lk_bits = TC.load_role_bits(D)
    tid = np.arange(TC.NT)
    lc = sum(((tid >> b) & 1) << i for i, b in enumerate(lc_bits))
    lk0 = sum(((tid >> b) & 1) << i for i, b in enumerate(lk_bits))
    return lc, lk0


def _source_roles(D):
    """(lc, lk0) evaluated from the generated kernel source's own expressions."""
    src = TC._source(D, True)
    exprs = {}
    for line in src.splitlines():
        s = line.strip()
        for name in ("lc", "lk0"):
            if s.startswith(f"{name} = "):
                exprs[name] = s.split("=", 1)[1].split("#")[0]
    tid = np.arange(TC.NT)
    return eval(exprs["lc"], {"tid": tid}), eval(exprs["lk0"], {"tid": tid})


@pytest.mark.parametrize("D", [64, 128, 256])
def test_load_role_covers_each_chunk_of_a_tile_once(D):
    lc, lk0 = _roles(D)
    slc, slk0 = _source_roles(D)
    assert np.array_equal(lc, slc) and np.array_equal(lk0, slk0)
    cpk, kstep, nch = D // 16, TC.NT // (D // 16), (TILE_KEYS * D // 16) // TC.NT
    assert lc.max() == cpk - 1 and lk0.max() == kstep - 1
    chunks = {(int(k) + kstep * n, int(c)) for k, c in zip(lk0, lc) for n in range(nch)}
    assert chunks == {(key, c) for key in range(TILE_KEYS) for c in range(cpk)}


def test_production_decode_and_softmax_stores_are_bank_conflict_free():
    D = 256
    L = TC._smem_layout(D)
    lc, lk0 = _roles(D)
    nch = D // 64
    for w in range(TC.NT // 32):
        lanes = slice(32 * w, 32 * w + 32)
        for n in range(nch):
            key = lk0[lanes] + (TC.NT // (D // 16)) * n
            # K: one 4-byte store per lane -> 32 distinct banks
            for m in range(16):
                addr = L["KS"] + lc[lanes] * L["KS_SL"] + m * TILE_KEYS + key
                assert len(set(addr % BANKS)) == BANKS
            # V: 16-byte stores, served 8 lanes at a time -> 8 distinct 4-bank groups
            for m in range(4):
                addr = L["UV"] + key * L["VRS"] + 16 * lc[lanes] + 4 * m
                for phase in range(4):
                    groups = (addr[8 * phase:8 * phase + 8] % BANKS) // 4
                    assert len(set(groups)) == 8
    tid = np.arange(TC.NT)
    r, kq = tid >> 3, tid & 7
    for w in range(TC.NT // 32):
        lanes = slice(32 * w, 32 * w + 32)
        for m in range(4):
            for base in (L["HS"], L["LS"]):
                addr = base + (kq[lanes] + 8 * m) * TC.HRS + r[lanes]
                assert len(set(addr % BANKS)) == BANKS
            addr = L["XS"] + r[lanes] * TC.XRS + kq[lanes] + 8 * m
            assert len(set(addr % BANKS)) == BANKS


def _wavefronts(addr):
    """Shared-memory wavefronts of one warp's 16-byte accesses at float offsets ``addr``:
    lanes at one address share a wavefront; distinct 16-byte units in one 4-bank group each
    need their own."""
    units = {int(a) // 4 for a in addr}
    per_group = np.bincount([u % (BANKS // 4) for u in units], minlength=BANKS // 4)
    return int(per_group.max())


def _source_exprs(src, names):
    exprs = {}
    for line in src.splitlines():
        st = line.strip()
        for name in names:
            if st.startswith(f"{name} = "):
                exprs[name] = st.split("=", 1)[1].split("#")[0]
    return exprs


@pytest.mark.parametrize("D", [64, 128, 256])
def test_permuted_k_positions_in_the_source(D):
    """``k_perm``: the source's kp{n} put chunk n's key j = lk0 + KSTEP n at 4 (j mod 8) +
    j div 8; at D = 256 a thread's four chunks are the adjacent words 4 lk0 .. 4 lk0 + 3."""
    nch, kstep = (TILE_KEYS * D // 16) // TC.NT, TC.NT // (D // 16)
    names = [f"kp{n}" for n in range(nch)]
    exprs = _source_exprs(TC._source(D, True, k_perm=True), ["lk0", *names])
    tid = np.arange(TC.NT)
    lk0 = eval(exprs["lk0"], {"tid": tid})
    for n in range(nch):
        j = lk0 + kstep * n
        assert np.array_equal(eval(exprs[f"kp{n}"], {"tid": tid, "lk0": lk0}), 4 * (j % 8) + j // 8)
        if D == 256:
            assert np.array_equal(4 * (j % 8) + j // 8, 4 * lk0 + n)


def test_permuted_k_layout_is_conflict_free_at_d256():
    """``k_perm`` at D = 256: K's 16-byte decode stores (8 lanes a phase) hit 8 distinct bank
    groups; the Kahan step's 16-byte u loads too; the score's K loads need the 2 wavefronts
    their 256 distinct bytes a warp take, as in the default layout."""
    D = 256
    L = TC._smem_layout(D, k_perm=True)
    lc, lk0 = _roles(D)
    tid = np.arange(TC.NT)
    for w in range(TC.NT // 32):
        lanes = slice(32 * w, 32 * w + 32)
        for ii in range(16):
            addr = L["KS"] + lc[lanes] * L["KS_SL"] + ii * TILE_KEYS + 4 * lk0[lanes]
            for phase in range(4):
                assert len(set((addr[8 * phase:8 * phase + 8] % BANKS) // 4)) == 8
    r, kq = tid >> 3, tid & 7
    for sl in range(D // 16):
        addr = L["UV"] + r * TC.U_RS + 16 * (r >> 3) + 4 * kq + sl * L["U_SL"]
        assert all(a % 4 == 0 for a in addr)
        for phase in range(TC.NT // 8):
            assert len(set((addr[8 * phase:8 * phase + 8] % BANKS) // 4)) == 8
    lane = tid & 31
    kg = (lane & 1) | (((lane >> 2) & 3) << 1)
    sb = lane >> 4
    for layout in (TC._smem_layout(D), L):
        for w in range(TC.NT // 32):
            lanes = slice(32 * w, 32 * w + 32)
            for ps in range(2):
                sl = ps * 8 + 2 * w + sb[lanes]
                for ii in range(16):
                    addr = layout["KS"] + sl * layout["KS_SL"] + ii * TILE_KEYS + 4 * kg[lanes]
                    assert _wavefronts(addr) == 2


@pytest.mark.parametrize("D", [64, 128, 256])
def test_shared_layout_fits_two_ctas_on_an_h200(D):
    nbytes = TC._SMEM_BYTES[D, True]
    assert nbytes == 4 * TC._smem_layout(D)["TOTAL"]
    assert 2 * (nbytes + 1024) <= 228 * 1024
    assert 2 * (TC.smem_bytes(D, k_perm=True) + 1024) <= 228 * 1024


def test_plain_decode_ir_matches_the_patched_decode_without_nan_codes():
    from dflash2_numba.attention._tiled_ops import decode_ir, e4m3x4_plain_py, plain_decode_ir

    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, (6000, 4), dtype=np.uint8)
    raw[(raw & 0x7F) == 0x7F] = 0x3C
    raw[:256, 0] = np.arange(256, dtype=np.uint8)
    raw[:256][(raw[:256, 0] & 0x7F) == 0x7F, 0] = 0x00
    ws = raw.view(np.uint32).reshape(-1)
    got_plain = decode_on_cpu(plain_decode_ir, ws)
    got_patched = decode_on_cpu(decode_ir, ws)
    sim = np.array([e4m3x4_plain_py(w) for w in ws], np.float32)
    assert got_plain.view(np.uint32).tobytes() == got_patched.view(np.uint32).tobytes()
    assert sim.view(np.uint32).tobytes() == got_patched.view(np.uint32).tobytes()


def test_sm70_schedule_keeps_the_bytes_and_routes():
    """The sm_70 form of the split kernel (O updated right after the tile's last barrier,
    ``defer_o=False``) writes the same partial and lse bytes as the form the H200 and the
    simulator launch (the deferred O update)."""
    rng = np.random.default_rng(41)
    c = case(rng, B=1, Q=2, Hq=2, Hkv=1, D=64, page_size=8, seq_lens=[200], strided=False)
    ws = d2.AttentionWorkspace(batch=1, q_len=2, heads=2, head_dim=64, splits=2)
    ws.fill_sentinel()
    d2.route_counters(reset=True)
    d2.verify_attention(**c, splits=2, variant="tiled_compact", workspace=ws)
    assert d2.route_counters() == {"attention.tiled_compact.split.d64": 1,
                                   "attention.tiled_compact.combine": 1}
    ref = (_host(ws.partial), _host(ws.lse))
    assert np.all(ref[1][0, :, :, :, 1] > 0)           # A = 2: both splits wrote every row
    plan = d2.plan_attention(c["q"], c["k_cache"], c["v_cache"], c["block_table"], c["seq_lens"],
                             scale=c["scale"], k_scale=c["k_scale"], v_scale=c["v_scale"],
                             splits=2, variant="tiled_compact", workspace=ws)
    ws.fill_sentinel()
    name, dyn, grid, args = TC.split_launch(plan, defer_o=False)
    assert name == "attention.tiled_compact.split.d64.sm70"
    dyn[grid, TC.NT, 0](*args)
    assert _host(ws.partial).tobytes() == ref[0].tobytes()
    assert _host(ws.lse).tobytes() == ref[1].tobytes()
    assert ws.guards_intact()


@pytest.mark.parametrize("variant, n_split", [("tiled", 12), ("tiled_compact", 12), ("tiled_perm", 12),
                                              ("tiled_wide", 4)])
def test_each_target_compiles_one_schedule(variant, n_split):
    """Each split kernel has one form per target: the ``.sm70`` ones below compute
    capability 8.0, the others from 8.0 on (the PTX report compiles each where it runs)."""
    from dflash2_numba import _registry
    from dflash2_numba.ptx import kernels_not_for

    names = {k.name for k in _registry.get_variant("attention", variant).kernels
             if ".split." in k.name}
    at70 = set(kernels_not_for((7, 0), "attention")) & names
    at90 = set(kernels_not_for((9, 0), "attention")) & names
    assert at70 == {n for n in names if not n.endswith(".sm70")}
    assert at90 == {n for n in names if n.endswith(".sm70")}
    assert len(names) == n_split


def _assert_options_keep_the_bytes(options, zero_slices=False):
    """``tiled_compact``'s split kernel built with ``options`` (``D``: head dim, default 64)
    writes the registered kernel's partial and lse bytes; ``zero_slices``: some keys' K16
    slices are all -0 / +0 bytes, q's slice 1 has one sign per token and some q slices are
    zero, so slice sums whose products are all -0 occur (-0 from an FMUL first, +0 from
    fma(q, k, +0))."""
    from dflash2_numba._compat import cuda

    D = options.pop("D", 64)
    rng = np.random.default_rng(43)
    c = case(rng, B=1, Q=2, Hq=2, Hkv=1, D=D, page_size=8, seq_lens=[200], strided=False)
    # a NaN code in V at key 199, which one row sees and the other does not: the boundary
    # tile takes the masked PV path
    c["v_cache"][c["block_table"][0, 199 // 8], 199 % 8, 0, 3] = 0x7F
    # and a NaN code in K (key 57): the patched K decode
    c["k_cache"][c["block_table"][0, 57 // 8], 57 % 8, 0, 5] = 0xFF
    if zero_slices:
        bt = c["block_table"][0]
        for key in range(0, 190, 3):            # slice 1 of these keys: -0 (0x80) or +0
            c["k_cache"][bt[key // 8], key % 8, 0, 16:32] = 0x80 if key % 2 else 0x00
        for key in range(1, 190, 7):            # every slice of these keys: -0
            c["k_cache"][bt[key // 8], key % 8, 0, :] = 0x80
        q = np.array(c["q"])
        q[0, 0, :, 16:32] = np.abs(q[0, 0, :, 16:32])    # token 0's slice 1 > 0: with K -0
        q[0, 1, :, 16:32] = -np.abs(q[0, 1, :, 16:32])   # bytes (0x80) every product is -0,
        q[0, 0, 0, 32:48] = -0.0                # and token 1's < 0: with K +0 bytes too
        q[0, 1, 1, 0:16] = 0.0                  # zero q slices
        c["q"] = q
    ws = d2.AttentionWorkspace(batch=1, q_len=2, heads=2, head_dim=D, splits=2)
    plan = d2.plan_attention(c["q"], c["k_cache"], c["v_cache"], c["block_table"], c["seq_lens"],
                             scale=c["scale"], k_scale=c["k_scale"], v_scale=c["v_scale"],
                             splits=2, variant="tiled_compact", workspace=ws)
    ws.fill_sentinel()
    plan.launch()
    ref = (_host(ws.partial), _host(ws.lse))
    vec = TC.tiled._u32_view(plan.k_cache) is not None
    kern = cuda.jit(TC._make_split_kernel(D, vec, **options))
    ws.fill_sentinel()
    _, dyn, grid, args = TC.split_launch(plan, {(D, vec): kern}, options=options)
    dyn[grid, TC.NT, 0](*args)
    assert _host(ws.partial).tobytes() == ref[0].tobytes()
    assert _host(ws.lse).tobytes() == ref[1].tobytes()


@pytest.mark.parametrize("options", [
    dict(score_steps=4, pv_keys=16), dict(score_steps=16, pv_keys=4),
    dict(score_depth=4, pv_depth=4), dict(k_late=True), dict(pv_pairs=True),
    dict(pv_pairs=True, k_late=True, score_steps=4, score_depth=4, pv_keys=4, pv_depth=4),
    dict(D=256, pv_pairs=True, k_late=True, score_depth=4, pv_depth=4),
    dict(k_perm=True), dict(D=128, k_perm=True, k_late=True),
    dict(D=256, k_perm=True), dict(D=256, k_perm=True, k_late=True, pv_pairs=True),
    dict(loop32=True), dict(loop32=True, pv_keys=16, score_steps=4),
    dict(D=256, loop32=True, k_perm=True, pv_pairs=True),
    dict(nan_once=True), dict(D=128, nan_once=True, k_late=True),
    dict(D=256, nan_once=True, k_perm=True, loop32=True),
    dict(q_batch=8), dict(D=256, k_perm=True, nan_once=True, k_late=True, q_batch=8),
    dict(u_mul_first=True), dict(u_mul_first=True, score_steps=16),
    dict(u_mul_first=True, score_steps=4, loop32=True, score_depth=4),
    dict(D=256, k_perm=True, nan_once=True, k_late=True, u_mul_first=True)],
    ids=lambda o: "-".join(f"{k}{int(v)}" for k, v in o.items()))
def test_schedule_options_keep_the_bytes(options, poisoned_dynamic_shared_memory):
    """The measurement options of the generator (K16 steps per score iteration, keys per PV
    iteration, operand sets in flight, where the next tile's K is loaded and decoded, the PV
    lanes' row groups, q loads in flight, FMUL-first slice sums) change the schedule only:
    same partial and lse bytes."""
    _assert_options_keep_the_bytes(dict(options))


@pytest.mark.parametrize("options", [dict(u_mul_first=True),
                                     dict(D=256, k_perm=True, nan_once=True, k_late=True,
                                          u_mul_first=True)],
                         ids=["d64", "d256-perm"])
def test_mul_first_keeps_the_bytes_where_slice_sums_are_zero(options,
                                                             poisoned_dynamic_shared_memory):
    """``u_mul_first``: a slice sum whose products are all zero is -0 where the first
    product is -0 (an FMUL) and +0 in the registered kernel (fma(q, k, +0)); the Kahan step
    makes the scores the same, so partial and lse keep their bytes with K slices of 0x80 /
    0x00 bytes and zero q slices."""
    _assert_options_keep_the_bytes(dict(options), zero_slices=True)


def test_bad_schedule_options_are_refused():
    for bad in (dict(score_steps=6), dict(score_depth=3), dict(score_steps=4, score_depth=8),
                dict(pv_keys=4, pv_depth=8), dict(pv_depth=1), dict(q_batch=3)):
        with pytest.raises(ValueError):
            TC._source(64, True, **bad)


@pytest.mark.parametrize("variant", ["tiled", "tiled_compact"])
def test_plan_builds_its_split_launch_once(monkeypatch, variant):
    """A plan's split launch (the caches' 16-byte views, the schedule, the launcher) is built
    at its first launch and reused: the second launch builds no view and writes the same
    bytes (a CUDA graph or a loop of eager launches pays the host work once)."""
    from dflash2_numba.attention import tiled

    rng = np.random.default_rng(44)
    c = case(rng, B=1, Q=2, Hq=2, Hkv=1, D=64, page_size=8, seq_lens=[100], strided=False)
    ws = d2.AttentionWorkspace(batch=1, q_len=2, heads=2, head_dim=64, splits=2)
    plan = d2.plan_attention(c["q"], c["k_cache"], c["v_cache"], c["block_table"], c["seq_lens"],
                             scale=c["scale"], k_scale=c["k_scale"], v_scale=c["v_scale"],
                             splits=2, variant=variant, workspace=ws)
    views = []
    real = tiled._u32_view
    monkeypatch.setattr(tiled, "_u32_view", lambda a: views.append(1) or real(a))
    ws.fill_sentinel()
    plan.launch()
    first = (_host(ws.partial).tobytes(), _host(ws.lse).tobytes(), _host(ws.out).tobytes())
    built = len(views)
    assert built in (1, 2) and len(plan.launch_cache) == 1
    ws.fill_sentinel()
    plan.launch()
    assert len(views) == built
    assert (_host(ws.partial).tobytes(), _host(ws.lse).tobytes(),
            _host(ws.out).tobytes()) == first
