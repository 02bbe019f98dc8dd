"""Wide register-tiled q8 attention ("tiled_wide"): ``tiled_compact``'s arithmetic on CTAs
of 256 threads with 4 x 4 register tiles, so that a scheduler has four warps to choose from
instead of two.

Keeps: contract A bit for bit, by the argument of ``tiled.py``'s docstring: every FP32 value
the contract defines is produced by the same sequence of roundings as ``frozen.py``. The
power-of-two factors folded into the decoded K / V and into q, hi and lo are ``tiled``'s;
each K16 slice sum is a chain of 16 fused steps in ascending i from 0; the Kahan step runs
over the slices in ascending order per (row, key); the tile max is frozen's sequential max;
the probabilities, hi / lo, the pairwise tree (level 1 in a thread, p_j + p_(j+16); the
rest, (T1_j + T1_(j+8)) and frozen's levels 3-5, from shared memory), the (m, l, alpha)
update and the PV chain (hi_0..15, lo_0..15, hi_16..31, lo_16..31 per (row, column)) are
frozen's expressions in frozen's order. O = fma(O, alpha, T) follows each tile's last
barrier. The combine is ``combine_batched``'s: frozen's combine with its workspace
loads batched, the same bits.

What differs from ``tiled_compact`` (the decomposition of the same work, nothing else):
  * 256 threads per (split, request, KV head, 16 query rows), launch bounds (256, 2): two
    CTAs an SM as before, so 16 warps an SM instead of 8, and 128 registers a thread (from
    compute capability 8.0 on; the sm_70 form, kernel names ending ``.sm70``, is bounded to
    one CTA an SM, where ptxas would otherwise spill, and keeps the slice sums u packed,
    rows of 32 floats with each row's keys rotated: 92,688 bytes of dynamic shared memory
    instead of 108,560, inside a V100's 96 KB a CTA).
  * Score: a warp owns one K16 slice of a pass (8 slices a pass, two passes at D = 256), a
    thread 4 rows x 4 keys of it (16 accumulators); per step one 16-byte load of q and one
    of K feed 16 fused steps.
  * Kahan and softmax: a thread owns one row and the keys kq and kq + 16.
  * PV: a thread owns 4 rows x 4 columns; per key one 16-byte load of V and one of hi (or
    lo) feed 16 fused steps; a warp's V load covers 8 column groups (one wavefront).
  * Load and decode: a thread loads two 16-byte chunks of K and of V a tile (keys lk0 and
    lk0 + 16). V is loaded at the tile's start and decoded beside the softmax; the next
    tile's K is loaded at the start of PV and decoded after it, so neither is live across
    the score loop.
  * Only the production head dim, D = 256 (``supports`` refuses the others).
"""
from __future__ import annotations

import math  # noqa: F401  (the generated source calls math.exp)

import numpy as np

from .._compat import cuda, jit_bounded
from .._dynshared import DynShared
from .._registry import KernelSpec, UnsupportedShape, Variant, launch, register
from ..contract import EXP_CLAMP, MAX_GROUP, MAX_Q, NEG_INF, RESIDUAL_SCALE, TILE_KEYS  # noqa: F401
from . import combine_batched, tiled
from ._device import active_split_count, request_keys, row_length, split_first_tile, split_tile_count  # noqa: F401
from ._tiled_ops import (SHARED_ALIGN, add32, and32, e4m3x4, e4m3x4_plain, ld1, ldb4_at,  # noqa: F401
                         ldg4_at, lds4, lt32, mul32, nan_bytes, opaque32, shr32, st1, sts4)
from ._tiled_source import (U_PACK_RS, Source, emit_cache_load, emit_chunk_offsets, emit_decode_once,
                            emit_head, emit_kahan, emit_offsets_advance, emit_pv_next,
                            emit_q_and_lengths, emit_record, emit_row_tile_helpers, emit_tile_max,
                            emit_tree_update, exec_source, finish_layout, u_pack_store_columns,
                            u_slice_floats)
from .tiled import (_SMEM_DT, F32_ONE, F32_ZERO, HI_SCALE, LO_SCALE, Q_SCALE, U0,  # noqa: F401
                    U_UNSCALE, _devfn)

NT = 256                 # threads per CTA
RC = 16                  # query rows per CTA
D_WIDE = 256             # the one head dim it is built for
LAUNCH_BOUNDS = (NT, 2)  # two CTAs an SM: 128 registers a thread
# Below compute capability 8.0 (no uniform registers) ptxas 12.9 spills 8 bytes under the
# 128-register cap; the sm_70 form of the same arithmetic is bounded to one CTA an SM instead.
SM70_LAUNCH_BOUNDS = (NT, 1)     # (which form a device gets: ``tiled.sm70_form_here``)
NCH = 2                  # 16-byte chunks of K (and of V) a thread loads per tile
KSTEP = 16               # tile-key step between a thread's chunks
HRS = 20                 # hi / lo: key stride (16 rows + 4)
XRS = 48                 # x: row stride (32 keys + 16): a warp's two rows 16 banks apart
U_RS = 48                # u: row stride; two rows of a warp's Kahan loads 16 banks apart


def u_rot_256(row):
    """Source of the packed u layout's rotation of row ``row`` for this kernel's roles:
    16 (r mod 2). A softmax warp's two rows then read 32 distinct banks; a score thread's
    16-byte stores (8 lanes a phase: the 8 key groups of one row) 8 distinct bank groups."""
    return f"16 * (({row}) & 1)"


def smem_layout(u_pack=False):
    """Offsets (float32 elements) into the dynamic shared buffer; all multiples of 4.
    ``u_pack``: the u scratch packed (rows of 32, keys rotated per row), the sm_70 form's
    layout: 92,688 instead of 108,560 bytes, inside a V100's 96 KB a CTA."""
    D = D_WIDE
    NSL = D // 16
    L = {"VRS": D + 4}                       # V row stride: an 8-lane phase hits 8 bank groups
    L["QS_SL"] = 16 * RC + 4                 # q * 2^112 [slice][ii][row]
    L["QS"] = 0
    L["KS_SL"] = 16 * TILE_KEYS + 8          # K * 2^-120 [slice][ii][key]: 4-byte stores of a
    L["KS"] = L["QS"] + NSL * L["QS_SL"]     # warp (4 columns x 8 keys) hit 32 banks
    L["U_SL"] = u_slice_floats(u_pack, U_RS)   # u [slice][row][key]
    L["UV"] = L["KS"] + NSL * L["KS_SL"]     # u, then V * 2^-120 [key][d] (same space)
    uv = max(NSL * L["U_SL"], TILE_KEYS * L["VRS"])
    L["HS"] = L["UV"] + uv                   # hi * 2^120 [key][row]
    L["LS"] = L["HS"] + TILE_KEYS * HRS      # lo * 2^109 [key][row]
    L["XS"] = L["LS"] + TILE_KEYS * HRS      # x [row][key]
    L["T1"] = L["XS"] + RC * XRS             # pairwise-tree level 1 [row][16]
    return finish_layout(L, L["T1"] + RC * 16)


LC_BITS = (0, 4, 5, 6)   # load role: thread-index bits of the 16-byte column lc
LK_BITS = (1, 2, 3, 7)   # and of the key lk0: an 8-lane phase covers 2 columns x 4 keys


def _bits_expr(bits):
    return " + ".join(f"(((tid >> {b}) & 1) << {i})" for i, b in enumerate(bits))


def _helpers_source():
    """The 4 x 4 register-tile device functions (constant indices, inlined)."""
    src = Source()
    emit_row_tile_helpers(src.e, 4, dict(masked="_pv_masked16", o_update="_o_update16",
                                         zero="_zero16", store_u="_store_u16",
                                         store_u_rot="_store_u16_rot"))
    return src.text()


def emit_fma16(e, ind, acc, a, b):
    """acc[4r + c] = fma(a_r, b_c, acc[4r + c]) for the 4 x 4 tile."""
    for rr in range(4):
        for cc in range(4):
            e(ind, f"{acc}[{4 * rr + cc}] = cuda.fma({a}{rr}, {b}{cc}, {acc}[{4 * rr + cc}])")


def _source(VEC, score_steps=8, pv_keys=8, loop32=False, u_pack=False):
    """Python source of the split kernel (D = 256); ``VEC``: 16-byte cache loads (else four
    4-byte loads per chunk). Schedule options (same bits; the registered kernels use the
    defaults): ``score_steps`` K16 steps per score-loop iteration and ``pv_keys`` keys per
    PV-loop iteration (8 or 16); ``loop32``: both loops' counters and the PV loop's next
    offsets in 32-bit arithmetic (``tiled_compact``'s option of that name). ``u_pack``: the
    slice sums u in rows of 32 floats, row r's keys rotated by 16 (r mod 2), the registered
    sm_70 form's layout."""
    if score_steps not in (8, 16) or pv_keys not in (8, 16):
        raise ValueError("score_steps and pv_keys: 8 or 16")
    SS, PK = score_steps, pv_keys
    G = 16 // PK                     # PV iterations per (half, hi / lo) pass
    D = D_WIDE
    NSL = D // 16
    NPASS = NSL // 8                 # passes of the score role: 8 warps, one slice each
    L = smem_layout(u_pack)
    QS, QS_SL, KS, KS_SL, VRS = L["QS"], L["QS_SL"], L["KS"], L["KS_SL"], L["VRS"]
    UV, U_SL = L["UV"], L["U_SL"]
    HS, LS, T1, AS = L["HS"], L["LS"], L["T1"], L["AS"]
    SEEN, NANV = L["SEEN"], L["NANV"]
    src = Source()
    e = src.e

    def load(ind, arr, n, cache, off):
        emit_cache_load(e, ind, VEC, arr, n, cache, off)

    geo = dict(UV=UV, VRS=VRS, KS=KS, KS_SL=KS_SL, KSTEP=KSTEP, NCH=NCH,
               kpos=lambda n: f"lk0 + {KSTEP * n}")

    def decode(ind, arr, is_v, flag):
        """This thread's chunks of ``arr`` into shared memory after one NaN-code test of all
        their words (``flag``: its result); one straight path each way."""
        emit_decode_once(e, ind, arr, is_v, flag, geo)

    emit_head(e, D, after_smem=[
        "zr = W >> 40                  # 0 at run time, unknown to the compiler: loop trip counts",
        f"ns = {16 // SS} + zr                   # that it cannot unroll",
        f"npv = {64 // PK} + zr",
    ], roles=[
        "kg = lane & 7                                   # score role: keys 4kg..4kg+3,",
        "srg = lane >> 3                                 # rows 4srg..4srg+3 of slice 8ps + warp",
        "r = tid >> 4                                    # softmax role: row r,",
        "kq = tid & 15                                   # keys kq and kq + 16",
        "pcg = (lane & 7) + 8 * warp                     # PV role: columns 4pcg..4pcg+3,",
        "prg = lane >> 3                                 # rows 4prg..4prg+3",
    ], after_roles=[
        f"lc = {_bits_expr(LC_BITS)}     # load role: 16-byte column lc",
        f"lk0 = {_bits_expr(LK_BITS)}    # of keys lk0 and lk0 + {KSTEP}",
        "ks0 = k_cache.strides[0]", "ks1 = k_cache.strides[1]",
        "vs0 = v_cache.strides[0]", "vs1 = v_cache.strides[1]",
        "k_head = hk * k_cache.strides[2] + 16 * lc      # byte offset of the chunk in a row",
        "v_head = hk * v_cache.strides[2] + 16 * lc",
        f"k_tile = {TILE_KEYS} * ks1",
        f"v_tile = {TILE_KEYS} * vs1",
        f"kw = cuda.local.array({4 * NCH}, np.uint32)",
        f"vw = cuda.local.array({4 * NCH}, np.uint32)",
        "u = cuda.local.array(16, np.float32)",
        "o = cuda.local.array(16, np.float32)",
        "t = cuda.local.array(16, np.float32)",
        *(u_pack_store_columns(u_rot_256, lambda q: f"4 * srg + {q}", 2) if u_pack else []),
    ])
    emit_q_and_lengths(e, D, L, nt=NT)

    e(1, "# ---- the first tile: each chunk's page, cache offsets, K loads and decode ----")
    e(1, f"j0 = first * {TILE_KEYS} + lk0")
    e(1, "slot0 = j0 - (j0 // page_size) * page_size       # chunk 0's slot in its page")
    for n in range(NCH):
        emit_chunk_offsets(e, 1, n, f"j0 + {KSTEP * n}")
        load(1, "kw", n, "k_cache", f"kof{n}")
    decode(1, "kw", False, "nf")
    e(1, "_zero16(o)")
    e(1, "cuda.syncthreads()")

    e(1, "for tile in range(first, last + 1):")
    e(2, f"key0 = tile * {TILE_KEYS}")
    e(2, "# ---- A0: V of this tile, then each chunk's offsets one tile on ----")
    for n in range(NCH):
        load(2, "vw", n, "v_cache", f"vof{n}")
    e(2, "if tile < last:")
    emit_offsets_advance(e, NCH, KSTEP, TILE_KEYS)

    e(2, "# ---- A: K16 slice sums u, 4 rows x 4 keys of one slice a warp, ascending i ----")
    e(2, f"for ps in range({NPASS}):")
    e(3, "sl = ps * 8 + warp")
    e(3, "_zero16(u)")
    e(3, f"qa = {QS} + sl * {QS_SL} + 4 * srg")
    e(3, f"ka = {KS} + sl * {KS_SL} + 4 * kg")
    e(3, "q0_0, q0_1, q0_2, q0_3 = lds4(sm, qa)")
    e(3, "k0_0, k0_1, k0_2, k0_3 = lds4(sm, ka)")
    e(3, "it = np.int32(0)" if loop32 else "it = 0")
    e(3, f"while {'lt32(it, ns)' if loop32 else 'it < ns'}:         # {16 // SS} x {SS} K16 steps; "
         "operands one step ahead")
    more = "lt32(add32(it, 1), ns)" if loop32 else "it + 1 < ns"
    e(4, f"nqa = qa + {SS * RC} if {more} else qa")
    e(4, f"nka = ka + {SS * TILE_KEYS} if {more} else ka")
    for ii in range(SS):
        st = (ii + 1) % 2
        qa_n = f"qa + {(ii + 1) * RC}" if ii < SS - 1 else "nqa"
        ka_n = f"ka + {(ii + 1) * TILE_KEYS}" if ii < SS - 1 else "nka"
        e(4, f"q{st}_0, q{st}_1, q{st}_2, q{st}_3 = lds4(sm, {qa_n})")
        e(4, f"k{st}_0, k{st}_1, k{st}_2, k{st}_3 = lds4(sm, {ka_n})")
        emit_fma16(e, 4, "u", f"q{ii % 2}_", f"k{ii % 2}_")
    e(4, "qa = nqa")
    e(4, "ka = nka")
    e(4, "it = add32(it, 1)" if loop32 else "it += 1")
    if u_pack:
        e(3, f"_store_u16_rot(sm, {UV} + sl * {U_SL} + {4 * U_PACK_RS} * srg, uc0, uc1, u)")
    else:
        e(3, f"_store_u16(sm, {UV} + sl * {U_SL} + 4 * srg * {U_RS} + 4 * kg, u)")
    e(2, "cuda.syncthreads()                               # S1")

    emit_kahan(e, D, L, U_RS, XRS, vis_names=True, key_step=16, row_shift=False,
               u_rot=u_rot_256("r") if u_pack else None)

    emit_tile_max(e, L, XRS)
    for m in range(2):
        e(2, f"ex{m} = np.float32(math.exp(max(x{m} - mnew, EXP_CLAMP)))")
        e(2, f"p{m} = ex{m} if vis{m} else F32_ZERO")
        e(2, f"hi{m} = np.float32(np.float16(p{m}))")
        e(2, f"lo{m} = np.float32(np.float16((p{m} - hi{m}) * RESIDUAL_SCALE))")
        e(2, f"st1(sm, {HS} + (kq + {16 * m}) * {HRS} + r, hi{m} * HI_SCALE)")
        e(2, f"st1(sm, {LS} + (kq + {16 * m}) * {HRS} + r, lo{m} * LO_SCALE)")
    e(2, f"st1(sm, {T1} + r * 16 + kq, p0 + p1)            # tree level 1: p_kq + p_(kq+16)")
    e(2, "if kq == 0:")
    e(3, "seen = min(max(my_len - key0, -1), 33)")
    e(3, f"st1(sm, {SEEN} + r, np.float32(seen))")
    e(2, "# decode V of this tile (the u space is free)")
    e(2, "if tid == 0:")
    e(3, f"st1(sm, {NANV} + ((tile + 1) & 1), F32_ZERO)")
    decode(2, "vw", True, "vnan")
    e(2, "if vnan != U0:")
    e(3, f"st1(sm, {NANV} + (tile & 1), F32_ONE)")
    e(2, "cuda.syncthreads()                               # S3")

    emit_tree_update(e, L, level1=True)

    e(2, "# ---- D: K of the next tile, PV into T, then that K decoded ----")
    e(2, "if tile < last:")
    for n in range(NCH):
        load(3, "kw", n, "k_cache", f"kof{n}")
    e(2, "_zero16(t)")
    e(2, f"vb = {UV} + 4 * pcg")
    e(2, f"hb = {HS} + 4 * prg")
    e(2, f"lb = {LS} + 4 * prg")
    e(2, f"if key0 + {TILE_KEYS} <= min_len or ld1(sm, {NANV} + (tile & 1)) == F32_ZERO:")
    e(3, "# every row sees every key, or V is finite (p = 0 then adds an exact 0):")
    e(3, "# hi over keys 0..15, lo over 0..15, hi over 16..31, lo over 16..31")
    e(3, "va = vb")
    e(3, "ha = hb")
    e(3, "v0_0, v0_1, v0_2, v0_3 = lds4(sm, va)")
    e(3, "h0_0, h0_1, h0_2, h0_3 = lds4(sm, ha)")
    e(3, "it = np.int32(0)" if loop32 else "it = 0")
    e(3, f"while {'lt32(it, npv)' if loop32 else 'it < npv'}:       # {4 * G} x {PK} keys: (half, "
         f"hi / lo, {PK} keys); operands one key ahead")
    emit_pv_next(e, 4, loop32, G, PK, VRS, HRS)
    for jj in range(PK):
        st = (jj + 1) % 2
        va_n = f"va + {(jj + 1) * VRS}" if jj < PK - 1 else "nva"
        ha_n = f"ha + {(jj + 1) * HRS}" if jj < PK - 1 else "nha"
        e(4, f"v{st}_0, v{st}_1, v{st}_2, v{st}_3 = lds4(sm, {va_n})")
        e(4, f"h{st}_0, h{st}_1, h{st}_2, h{st}_3 = lds4(sm, {ha_n})")
        emit_fma16(e, 4, "t", f"h{jj % 2}_", f"v{jj % 2}_")
    e(4, "va = nva")
    e(4, "ha = nha")
    e(4, "it = add32(it, 1)" if loop32 else "it += 1")
    e(2, "else:")
    e(3, "# a boundary tile with a NaN code in V: frozen's V = 0 for keys a row does not see")
    e(3, f"sa = {SEEN} + 4 * prg")
    e(3, "for half in range(2):")
    e(4, "for jj in range(16):")
    e(5, "j = 16 * half + jj")
    e(5, f"_pv_masked16(sm, vb + j * {VRS}, hb + j * {HRS}, sa, np.float32(j), t)")
    e(4, "for jj in range(16):")
    e(5, "j = 16 * half + jj")
    e(5, f"_pv_masked16(sm, vb + j * {VRS}, lb + j * {HRS}, sa, np.float32(j), t)")
    e(2, "if tile < last:                                  # (K is read before S1 only)")
    decode(3, "kw", False, "nf")
    e(2, "cuda.syncthreads()                               # S4")
    e(2, "# ---- O = fma(O, alpha, T): this tile's alpha is visible from S4 on ----")
    e(2, f"_o_update16(sm, {AS} + (tile & 1) * {RC} + 4 * prg, o, t)")

    emit_record(e, L, last_o_update=False, rows=4, guarded=False)
    return src.text()


exec_source(_helpers_source(), "<dflash2_numba.attention.tiled_wide helpers>", globals())


def _make_split_kernel(VEC, **options):
    """The split kernel's Python function (``options``: :func:`_source`'s schedule options)."""
    ns = dict(globals())
    tag = " ".join(f"{k}={v}" for k, v in sorted(options.items()))
    exec_source(_source(VEC, **options),
                f"<dflash2_numba.attention.tiled_wide split {'vec' if VEC else 'bytes'} {tag}>", ns)
    return ns["split_kernel"]


def smem_bytes(u_pack=False, **_schedule):
    """Dynamic shared memory of a split kernel built with ``_source``'s options."""
    return 4 * smem_layout(u_pack)["TOTAL"]


# the registered forms: from compute capability 8.0 on (two_cta) the padded u, below it the
# packed one (a V100 gives a CTA at most 96 KB)
SMEM_BYTES = {two: smem_bytes(u_pack=not two) for two in (True, False)}
_pyfuncs = {(vec, two): _make_split_kernel(vec, u_pack=not two)
            for vec in (True, False) for two in (True, False)}
_kernels = {(vec, two): jit_bounded(f, LAUNCH_BOUNDS if two else SM70_LAUNCH_BOUNDS)
            for (vec, two), f in _pyfuncs.items()}


def _split_name(vec, two_cta=True):
    return (f"attention.tiled_wide.split.d{D_WIDE}" + ("" if vec else ".bytes")
            + ("" if two_cta else ".sm70"))


def supports(plan: dict) -> None:
    tiled.check_rows(plan, "tiled_wide")
    if plan["D"] != D_WIDE:
        raise UnsupportedShape(f"tiled_wide: head dim {plan['D']}; built for {D_WIDE} only")
    tiled.check_shared_fits("tiled_wide", SMEM_BYTES[not tiled.sm70_form_here()])


def split_launch(plan, kernels=None, options=None, two_cta=None):
    """(name, kernel, grid, args) of the plan's split launch (``kernels``: vec -> jitted
    kernel, for measurements, built with generator ``options``, which set the shared-memory
    size; default the registered form ``two_cta``, itself by default the current device's)."""
    _, vec, grid, args = tiled.split_operands(plan)
    two = (not tiled.sm70_form_here()) if two_cta is None else bool(two_cta)
    kern = kernels[vec] if kernels is not None else _kernels[vec, two]
    smem = SMEM_BYTES[two] if options is None else smem_bytes(**options)
    return _split_name(vec, two), DynShared(kern, smem), grid, args


def run(plan, stream) -> None:
    name, kern, grid, args = plan.launch_setup("tiled_wide.split", split_launch)
    launch(name, kern, grid, NT, stream, *args)
    combine_batched.launch_combine(plan, stream, "tiled_wide")


VARIANT = register(Variant(
    name="tiled_wide",
    family="attention",
    description="tiled_compact's arithmetic on 256-thread CTAs (16 warps an SM) with 4x4 "
                "register tiles for the score and PV, two keys a thread in the softmax, "
                "two 16-byte chunks a thread in the decode; D = 256 only; the batched combine",
    contract="A (q8 verification attention), bit-identical to frozen",
    kernels=tuple(
        KernelSpec(_split_name(vec, two), _pyfuncs[vec, two],
                   ((tiled._sig_vec if vec else tiled._sig_byte),),
                   launch_bounds=LAUNCH_BOUNDS if two else SM70_LAUNCH_BOUNDS,
                   **tiled.form_cc_range(not two))
        for two in (True, False) for vec in (True, False)
    ) + combine_batched.combine_specs("tiled_wide"),
    run=run,
    supports=supports,
    bitwise_reference="frozen",
))
