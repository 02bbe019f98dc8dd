"""Register-tiled q8 verification attention ("tiled"): frozen's arithmetic, rescheduled.

Keeps: contract A bit for bit -- every FP32 value the contract defines (scores, tile
maxima, probabilities and their FP16 hi/lo split, the pairwise tile sum, (m, l), the PV
accumulator T and the numerator O, the workspace and the output) is produced by the same
sequence of roundings as ``frozen.py``. The combine is ``combine_batched``'s: frozen's
combine with its workspace loads batched, the same bits.

What changes (the schedule only; all parallelism is across independent scalars):
  * One CTA of 128 threads per (split, request, KV head, group of 16 query rows), where
    the rows of a KV head are its G query heads x Q tokens (production: 48 rows -> three
    CTAs per split, 240 CTAs; each decodes K/V once for its 16 rows).
  * K/V bytes are loaded 16 bytes at a time (when the caches' base and strides are 16-byte
    aligned; a byte path otherwise) and decoded ONCE per CTA into shared memory by integer
    bit moves: an E4M3 byte's bits placed in a float32 give the value times 2^-120 exactly
    (subnormals included; 0x7F/0xFF patched to the table's NaN).  Power-of-two factors are
    folded into the other multiplicand, which leaves every exact product unchanged:
      - V is stored as V * 2^-120 and multiplied by hi * 2^120 and lo * 2^-11 * 2^120;
      - K is stored as K * 2^-120 and multiplied by q * 2^112 (no overflow: |q| <= 65504),
        so every K16 slice sum is u * 2^-8 exactly (all u are multiples of 2^-33, so the
        scaled values stay normal and every rounding scales with them); the Kahan step
        runs on those scaled sums (equally exact) and the score is (s * 2^8) * qk_scale.
  * Scores: each thread owns 8 rows x 4 keys of one K16 slice (two slices in turn), the
    32 slice sums u in registers (16 fused steps each, ascending i), parked in shared
    memory; the Kahan step over the D/16 slices runs in ascending slice order per
    (row, key) in a second role (thread = one row x keys c, c+8, c+16, c+24).
  * The tile max is frozen's max() in frozen's order; probabilities, hi/lo, the pairwise
    tree and the (m, l, alpha) update are frozen's expressions; the first two tree levels
    run inside a thread (it owns keys c, c+8, c+16, c+24), the last three from shared memory.
  * PV: each thread owns 8 rows x 4 columns (32 accumulators T and 32 numerators O in
    registers); T runs hi_j*V then lo_j*Vr over j = 0..15, then j = 16..31, exactly
    frozen's order; the 16 V values of a half stay in registers for the lo pass.
    O = fma(O, alpha, T) is applied at the start of the next tile (or after the last).
  * 4 block barriers per 32-key tile; shared memory is dynamic, 98,832 bytes at D = 256
    (two CTAs per SM on an H200; the kernel raises its dynamic shared-memory limit once).
    Below compute capability 8.0 the kernels (names ending ``.sm70``) keep the slice sums u
    packed (rows of 32 floats, each row's keys rotated so the stores and the Kahan reads
    still hit distinct banks): 89,616 bytes, inside a V100's 96 KB a CTA. A plan on a device
    whose opt-in limit is below its form's size is refused before any launch.
  * Register work is written out by a small source generator (device functions with
    constant indices, inlined by NVVM), so nothing lands in local memory.
"""
from __future__ import annotations

import math

import numpy as np
from numba import types

from .._compat import SIMULATOR, cuda, device_cc_at_least, emulated_cc
from .._dynshared import DynShared, require_shared
from .._registry import KernelSpec, UnsupportedShape, Variant, launch, register
from ..contract import EXP_CLAMP, MAX_GROUP, MAX_Q, NEG_INF, RESIDUAL_SCALE, TILE_KEYS  # noqa: F401
from . import combine_batched
from ._device import active_split_count, request_keys, row_length, split_first_tile, split_tile_count
from ._tiled_ops import SHARED_ALIGN, e4m3x4, ld1, ldb4, ldg4, lds4, nan_bytes, st1, sts4
from ._tiled_source import (NT, RC, U_PACK_RS, Source, emit_head, emit_kahan, emit_q_and_lengths,
                            emit_record, emit_row_tile_helpers, emit_tile_max, emit_tree_update,
                            exec_source, finish_layout, u_pack_store_columns, u_rot_128,
                            u_slice_floats)
F32_ZERO = np.float32(0.0)
F32_ONE = np.float32(1.0)
Q_SCALE = np.float32(2.0 ** 112)     # q * 2^112 against K * 2^-120: every u is u * 2^-8
U_UNSCALE = np.float32(256.0)        # (s * 2^-8) * 2^8 = s exactly, then * qk_scale
HI_SCALE = np.float32(2.0 ** 120)    # hi * 2^120 against V * 2^-120
LO_SCALE = np.float32(2.0 ** 109)    # lo * 2^-11 * 2^120
U0 = np.uint32(0)
# inlined at the NVVM level (the simulator's jit takes no forceinline)
_devfn = cuda.jit(device=True) if SIMULATOR else cuda.jit(device=True, forceinline=True)
_SMEM_DT = np.dtype(np.float32) if SIMULATOR else np.float32   # the simulator wants a dtype
U_RS = 40                            # row stride of the u scratch (conflict-free Kahan reads)


def _smem_layout(D, u_pack=False):
    """Offsets (in float32 elements) into the dynamic shared buffer; all multiples of 4.
    ``u_pack``: the u scratch packed (rows of 32, keys rotated per row), the sm_70 form's
    layout: 89,616 instead of 98,832 bytes at D = 256, inside a V100's 96 KB a CTA."""
    NSL = D // 16
    L = {}
    L["QS_SL"] = 16 * RC + 4                 # q * 2^112 [slice][ii][row]
    L["QS"] = 0
    L["KS_SL"] = 16 * TILE_KEYS + 4          # K * 2^-120 [slice][ii][key]
    L["KS"] = L["QS"] + NSL * L["QS_SL"]
    L["U_RS"] = U_PACK_RS if u_pack else U_RS   # u [slice][row][key]; rows >= 8 shifted by 16
    L["U_SL"] = u_slice_floats(u_pack, U_RS, 16)    # (packed: rotated instead)
    L["UV"] = L["KS"] + NSL * L["KS_SL"]     # u, then V * 2^-120 [key][d] (same space)
    uv = max(NSL * L["U_SL"], TILE_KEYS * D)
    L["HS"] = L["UV"] + uv                   # hi * 2^120 [key][row]
    L["LS"] = L["HS"] + TILE_KEYS * RC       # lo * 2^109 [key][row]
    L["XS"] = L["LS"] + TILE_KEYS * RC       # x [row][key], row stride 36
    L["T2"] = L["XS"] + RC * 36              # pairwise-tree level 2 [row][8]
    return finish_layout(L, L["T2"] + RC * 8)


@cuda.jit(device=True, inline="always")
def _load_chunk_vec(cache, page, slot, hk, lc):
    """Chunk ``lc`` (bytes ``16 lc .. 16 lc + 15``) of one cache row as four words, one
    16-byte load (``cache``: the uint32 view of the E4M3 bytes)."""
    return ldg4(cache, page, slot, hk, 4 * lc)


@cuda.jit(device=True, inline="always")
def _load_word_bytes(cache, page, slot, hk, i):
    """Bytes ``i .. i + 3`` of one cache row as one little-endian word (byte loads)."""
    return ldb4(cache, page, slot, hk, i)


@cuda.jit(device=True, inline="always")
def _load_chunk_bytes(cache, page, slot, hk, lc):
    """:func:`_load_chunk_vec`'s four words from byte loads (caches not 16-byte aligned)."""
    i = 16 * lc
    return (ldb4(cache, page, slot, hk, i), ldb4(cache, page, slot, hk, i + 4),
            ldb4(cache, page, slot, hk, i + 8), ldb4(cache, page, slot, hk, i + 12))


def _fn_source():
    """Device functions with every register loop written out (constant indices into small
    local arrays, which NVVM turns into registers once the calls are inlined)."""
    R8, C4 = range(8), range(4)
    out = []

    def e(ind, text):
        out.append("    " * ind + text)

    e(0, "@_devfn")
    e(0, "def _score_step(sm, qa, ka, u):")
    e(1, "q0, q1, q2, q3 = lds4(sm, qa)")
    e(1, "q4, q5, q6, q7 = lds4(sm, qa + 4)")
    e(1, "k0, k1, k2, k3 = lds4(sm, ka)")
    for rr in R8:
        for cc in C4:
            e(1, f"u[{4 * rr + cc}] = cuda.fma(q{rr}, k{cc}, u[{4 * rr + cc}])")
    e(0, "")
    for name, load_v in (("_pv_hi", True), ("_pv_lo", False)):
        e(0, "@_devfn")
        e(0, f"def {name}(sm, va, ha, vr, vo, t):")
        if load_v:
            e(1, "vr[vo], vr[vo + 1], vr[vo + 2], vr[vo + 3] = lds4(sm, va)")
        e(1, "h0, h1, h2, h3 = lds4(sm, ha)")
        e(1, "h4, h5, h6, h7 = lds4(sm, ha + 4)")
        for cc in C4:
            e(1, f"v{cc} = vr[vo + {cc}]")
        for rr in R8:
            for cc in C4:
                e(1, f"t[{4 * rr + cc}] = cuda.fma(h{rr}, v{cc}, t[{4 * rr + cc}])")
        e(0, "")
    emit_row_tile_helpers(e, 8, dict(masked="_pv_masked", o_update="_o_update", zero="_zero32",
                                     store_u="_store_u", store_u_rot="_store_u_rot"))
    return "\n".join(out) + "\n"


def _source(D, prefetch=True, u_pack=False):
    """Python source of the split kernel for head dim D (constant loop bounds and shared
    memory offsets substituted; register work goes through the device functions above).
    ``prefetch`` (the 16-byte path): issue the tile's global loads before the score phase
    and keep each half's 16 V rows in registers for the lo pass. The byte path loads a word
    where it is decoded and reloads V for the lo pass, to stay clear of spills. ``u_pack``:
    the packed u layout (the sm_70 form; same values at other addresses)."""
    NSL = D // 16
    NPASS = (NSL + 7) // 8
    CPK = D // 16                    # 16-byte chunks per key row
    NCH = (TILE_KEYS * CPK) // NT    # chunks per thread per tile (D / 64)
    KSTEP = NT // CPK                # tile-key step between a thread's chunks
    L = _smem_layout(D, u_pack)
    QS, QS_SL, KS, KS_SL = L["QS"], L["QS_SL"], L["KS"], L["KS_SL"]
    UV, U_RS, U_SL = L["UV"], L["U_RS"], L["U_SL"]
    HS, LS, T2, AS = L["HS"], L["LS"], L["T2"], L["AS"]
    SEEN, NANV = L["SEEN"], L["NANV"]
    C4 = range(4)
    src = Source()
    e = src.e

    def chunk_page(ind, n, jexpr):
        e(ind, f"page{n} = -1")
        e(ind, f"if {jexpr} < T and pcol{n} < W:")
        e(ind + 1, f"page{n} = block_table[b, pcol{n}]")
        e(ind + 1, f"if page{n} >= num_pages:")
        e(ind + 2, f"page{n} = -1")

    def load_words(ind, arr, n, cache, page, slot):
        e(ind, f"if {page} >= 0:")
        e(ind + 1, f"{arr}[{4 * n}], {arr}[{4 * n + 1}], {arr}[{4 * n + 2}], {arr}[{4 * n + 3}] = "
                   f"load_chunk({cache}, {page}, {slot}, hk, lc)")
        e(ind, "else:")
        e(ind + 1, f"{arr}[{4 * n}] = U0; {arr}[{4 * n + 1}] = U0; {arr}[{4 * n + 2}] = U0; "
                   f"{arr}[{4 * n + 3}] = U0")

    def decode_k(ind, n):
        for mm in C4:
            e(ind, f"a0, a1, a2, a3 = e4m3x4(kw[{4 * n + mm}])")
            base = f"{KS} + lc * {KS_SL} + {4 * mm * TILE_KEYS} + lk0 + {KSTEP * n}"
            for k in C4:
                e(ind, f"st1(sm, {base} + {k * TILE_KEYS}, a{k})")

    emit_head(e, D, after_roles=[
        f"lk0 = tid // {CPK}                            # load role: keys lk0 + {KSTEP}n,",
        f"lc = tid - lk0 * {CPK}                        # 16-byte column lc",
        "kw = cuda.local.array(16, np.uint32)",
        "vw = cuda.local.array(16, np.uint32)",
        "u = cuda.local.array(32, np.float32)",
        "o = cuda.local.array(32, np.float32)",
        "t = cuda.local.array(32, np.float32)",
        "vr = cuda.local.array(64, np.float32)",
        *(u_pack_store_columns(u_rot_128, lambda q: f"8 * srg + {q}", 4) if u_pack else []),
    ])
    emit_q_and_lengths(e, D, L)
    e(1, "# ---- the first tile: chunk pages, K loads and decode ----")
    for n in range(NCH):
        e(1, f"j = first * {TILE_KEYS} + lk0 + {KSTEP * n}")
        e(1, f"pcol{n} = j // page_size")
        e(1, f"pslot{n} = j - pcol{n} * page_size")
        chunk_page(1, n, "j")
        e(1, f"vpage{n} = page{n}")
        e(1, f"vslot{n} = pslot{n}")
        load_words(1, "kw", n, "k_cache", f"page{n}", f"pslot{n}")
    for n in range(NCH):
        decode_k(1, n)
    e(1, "_zero32(o)")
    e(1, "_zero32(t)")
    e(1, "cuda.syncthreads()")

    e(1, "for tile in range(first, last + 1):")
    e(2, f"key0 = tile * {TILE_KEYS}")
    def global_loads(ind):
        for n in range(NCH):
            load_words(ind, "vw", n, "v_cache", f"vpage{n}", f"vslot{n}")
        e(ind, "if tile < last:")
        for n in range(NCH):
            e(ind + 1, f"pslot{n} += {TILE_KEYS}")
            e(ind + 1, f"while pslot{n} >= page_size:")
            e(ind + 2, f"pslot{n} -= page_size")
            e(ind + 2, f"pcol{n} += 1")
            chunk_page(ind + 1, n, f"key0 + {TILE_KEYS} + lk0 + {KSTEP * n}")
            e(ind + 1, f"vpage{n} = page{n}")
            e(ind + 1, f"vslot{n} = pslot{n}")
            load_words(ind + 1, "kw", n, "k_cache", f"page{n}", f"pslot{n}")

    if prefetch:
        e(2, "# ---- A0: global loads, V of this tile and K of the next (in flight during A, B) ----")
        global_loads(2)

    e(2, "# ---- A: K16 slice sums u for 8 rows x 4 keys, ascending i ----")
    e(2, f"for ps in range({NPASS}):")
    e(3, "sl = ps * 8 + 2 * warp + sb")
    e(3, f"if sl < {NSL}:")
    e(4, "_zero32(u)")
    e(4, f"qb = {QS} + sl * {QS_SL} + 8 * srg")
    e(4, f"kb = {KS} + sl * {KS_SL} + 4 * kg")
    for ii in range(16):
        e(4, f"_score_step(sm, qb + {ii * RC}, kb + {ii * TILE_KEYS}, u)")
    if u_pack:
        e(4, f"_store_u_rot(sm, {UV} + sl * {U_SL} + {8 * U_PACK_RS} * srg, uc0, uc1, uc2, uc3, u)")
    else:
        e(4, f"_store_u(sm, {UV} + sl * {U_SL} + 16 * srg + 4 * kg + 8 * srg * {U_RS}, u)")
    e(2, "cuda.syncthreads()                               # S1")

    emit_kahan(e, D, L, U_RS, 36, u_rot=u_rot_128("r") if u_pack else None)

    emit_tile_max(e, L, 36)
    for m in C4:
        e(2, f"p{m} = F32_ZERO")
        e(2, f"if key0 + kq + {8 * m} < my_len:")
        e(3, f"p{m} = np.float32(math.exp(max(x{m} - mnew, EXP_CLAMP)))")
        e(2, f"hi{m} = np.float32(np.float16(p{m}))")
        e(2, f"lo{m} = np.float32(np.float16((p{m} - hi{m}) * RESIDUAL_SCALE))")
        e(2, f"st1(sm, {HS} + (kq + {8 * m}) * {RC} + r, hi{m} * HI_SCALE)")
        e(2, f"st1(sm, {LS} + (kq + {8 * m}) * {RC} + r, lo{m} * LO_SCALE)")
    e(2, f"st1(sm, {T2} + r * 8 + kq, (p0 + p2) + (p1 + p3))")
    e(2, "if kq == 0:")
    e(3, "seen = min(max(my_len - key0, -1), 33)")
    e(3, f"st1(sm, {SEEN} + r, np.float32(seen))")
    e(2, "# decode V of this tile (the u space is free) and K of the next tile")
    e(2, "if tid == 0:")
    e(3, f"st1(sm, {NANV} + ((tile + 1) & 1), F32_ZERO)")
    e(2, "vnan = U0")
    if prefetch:
        for n in range(NCH):
            for mm in C4:
                e(2, f"vnan |= nan_bytes(vw[{4 * n + mm}])")
                e(2, f"a0, a1, a2, a3 = e4m3x4(vw[{4 * n + mm}])")
                e(2, f"sts4(sm, {UV} + (lk0 + {KSTEP * n}) * {D} + 16 * lc + {4 * mm}, a0, a1, a2, a3)")
        e(2, "if tile < last:")
        for n in range(NCH):
            decode_k(3, n)
    else:
        # byte path: load one word, decode it, store it; a block fence per chunk keeps the
        # scheduler from hoisting every byte load at once (few live registers, no spills)
        for n in range(NCH):
            e(2, "cuda.threadfence_block()")
            for mm in C4:
                e(2, "wd = U0")
                e(2, f"if vpage{n} >= 0:")
                e(3, f"wd = load_word(v_cache, vpage{n}, vslot{n}, hk, 16 * lc + {4 * mm})")
                e(2, "vnan |= nan_bytes(wd)")
                e(2, "a0, a1, a2, a3 = e4m3x4(wd)")
                e(2, f"sts4(sm, {UV} + (lk0 + {KSTEP * n}) * {D} + 16 * lc + {4 * mm}, a0, a1, a2, a3)")
        e(2, "if tile < last:")
        for n in range(NCH):
            e(3, f"pslot{n} += {TILE_KEYS}")
            e(3, f"while pslot{n} >= page_size:")
            e(4, f"pslot{n} -= page_size")
            e(4, f"pcol{n} += 1")
            chunk_page(3, n, f"key0 + {TILE_KEYS} + lk0 + {KSTEP * n}")
            e(3, f"vpage{n} = page{n}")
            e(3, f"vslot{n} = pslot{n}")
            e(3, "cuda.threadfence_block()")
            for mm in C4:
                e(3, "wd = U0")
                e(3, f"if page{n} >= 0:")
                e(4, f"wd = load_word(k_cache, page{n}, pslot{n}, hk, 16 * lc + {4 * mm})")
                e(3, "a0, a1, a2, a3 = e4m3x4(wd)")
                base = f"{KS} + lc * {KS_SL} + {4 * mm * TILE_KEYS} + lk0 + {KSTEP * n}"
                for k in C4:
                    e(3, f"st1(sm, {base} + {k * TILE_KEYS}, a{k})")
    e(2, "if vnan != U0:")
    e(3, f"st1(sm, {NANV} + (tile & 1), F32_ONE)")
    e(2, "cuda.syncthreads()                               # S3")

    emit_tree_update(e, L)

    e(2, "# ---- D: PV; first the previous tile's O = fma(O, alpha, T) ----")
    e(2, "if prg < 2:")
    e(3, "if tile > first:")
    e(4, f"_o_update(sm, {AS} + ((tile - 1) & 1) * {RC} + 8 * prg, o, t)")
    e(3, "_zero32(t)")
    e(3, f"vb = {UV} + 4 * pcg")
    e(3, f"hb = {HS} + 8 * prg")
    e(3, f"lb = {LS} + 8 * prg")
    e(3, "vbo = vb + (W >> 40)       # == vb; loads through it are not merged with vb's")
    e(3, f"if key0 + {TILE_KEYS} <= min_len or ld1(sm, {NANV} + (tile & 1)) == F32_ZERO:")
    e(4, "# every row sees every key, or V is finite (p = 0 then adds an exact 0)")
    for half in range(2):
        for jj in range(16):
            j = 16 * half + jj
            e(4, f"_pv_hi(sm, vb + {j * D}, hb + {j * RC}, vr, {4 * jj if prefetch else 0}, t)")
        for jj in range(16):
            j = 16 * half + jj
            if prefetch:    # the half's 16 V rows are still in registers
                e(4, f"_pv_lo(sm, vb, lb + {j * RC}, vr, {4 * jj}, t)")
            else:           # byte path: reload them (64 fewer live registers, no spills)
                e(4, f"_pv_hi(sm, vbo + {j * D}, lb + {j * RC}, vr, 0, t)")
    e(3, "else:")
    e(4, "# a boundary tile with a NaN code in V: frozen's V = 0 for keys a row does not see")
    e(4, f"sa = {SEEN} + 8 * prg")
    e(4, "for half in range(2):")
    e(5, "for jj in range(16):")
    e(6, "j = 16 * half + jj")
    e(6, f"_pv_masked(sm, vb + j * {D}, hb + j * {RC}, sa, np.float32(j), t)")
    e(5, "for jj in range(16):")
    e(6, "j = 16 * half + jj")
    e(6, f"_pv_masked(sm, vbo + j * {D}, lb + j * {RC}, sa, np.float32(j), t)")
    e(2, "cuda.syncthreads()                               # S4")

    emit_record(e, L, last_o_update=True)
    return src.text()


exec_source(_fn_source(), "<dflash2_numba.attention.tiled device functions>", globals())


def _make_split_kernel(D, VEC, u_pack=False):
    ns = dict(globals())
    ns["load_chunk"] = _load_chunk_vec if VEC else _load_chunk_bytes
    ns["load_word"] = _load_word_bytes
    exec_source(_source(D, prefetch=VEC, u_pack=u_pack),
                f"<dflash2_numba.attention.tiled split D={D} {'vec' if VEC else 'bytes'}"
                f"{' u_pack' if u_pack else ''}>", ns)
    return ns["split_kernel"]


# Every register-tiled variant (tiled, tiled_compact, tiled_perm, tiled_wide) builds two forms
# of its split kernel: the one launched from compute capability 8.0 on (H100 / H200: the
# measured one) and the sm_70 form below it (a V100's 96 KB of shared memory a CTA, ptxas
# 12.9's sm_70 register allocation). Here the two differ in u's layout: padded from 8.0 on
# (98,832 B at D = 256), packed below (89,616 B).
SM70_FORM_BELOW_CC = (8, 0)


def sm70_form_here() -> bool:
    """Whether the current device gets the variants' sm_70 forms: below compute capability
    8.0 (the simulator runs the H200's forms; ``DFLASH2_EMULATE_CC`` overrides)."""
    return not device_cc_at_least(SM70_FORM_BELOW_CC)


def form_cc_range(sm70: bool) -> dict:
    """``KernelSpec``'s ``min_cc`` / ``max_cc`` of a split kernel's form (the PTX report
    compiles each form only for the capabilities that launch it)."""
    if sm70:
        return dict(min_cc=(0, 0), max_cc=(SM70_FORM_BELOW_CC[0] - 1, 99))
    return dict(min_cc=SM70_FORM_BELOW_CC, max_cc=(99, 99))


_SMEM_BYTES = {(D, packed): 4 * _smem_layout(D, packed)["TOTAL"]
               for D in (64, 128, 256) for packed in (False, True)}
_kernels = {}
_pyfuncs = {}
for _D in (64, 128, 256):
    for _vec in (True, False):
        for _packed in (False, True):
            _f = _make_split_kernel(_D, _vec, u_pack=_packed)
            _pyfuncs[_D, _vec, _packed] = _f
            _kernels[_D, _vec, _packed] = cuda.jit(_f)


def _u32_view(arr):
    """The cache as uint32 [P, S, H, D/4] when 16-byte loads are legal, else None."""
    shape = tuple(arr.shape)
    strides = tuple(arr.strides)
    if strides[3] != 1 or shape[3] % 4 or any(st % 16 for st in strides[:3]):
        return None
    if SIMULATOR:
        try:
            return arr.view(np.uint32)
        except ValueError:
            return None
    if arr.__cuda_array_interface__["data"][0] % 16:
        return None
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray(shape=(shape[0], shape[1], shape[2], shape[3] // 4),
                         strides=(strides[0], strides[1], strides[2], 4),
                         dtype=np.dtype(np.uint32), stream=arr.stream, gpu_data=arr.gpu_data)


def check_rows(plan: dict, variant: str) -> None:
    """The register-tiled variants' shape limits: head dim 64 / 128 / 256, Q and G within
    the contract's range."""
    if plan["D"] not in (64, 128, 256):
        raise UnsupportedShape(f"{variant}: head dim {plan['D']} not in 64/128/256")
    if plan["Q"] > MAX_Q or plan["Hq"] // plan["Hkv"] > MAX_GROUP:
        raise UnsupportedShape(f"{variant}: Q or G out of range")


def supports(plan: dict) -> None:
    check_rows(plan, "tiled")
    check_shared_fits("tiled", _SMEM_BYTES[plan["D"], sm70_form_here()])


def split_operands(plan):
    """(D, vec, grid, args) of a register-tiled split launch (``tiled``, ``tiled_compact``,
    ``tiled_wide``): the caches as 16-byte views where legal (``vec``), else as bytes; one
    CTA per (split, request x KV head, group of RC query rows)."""
    B, Q, Hq, D = plan.q_shape
    Hkv = plan.k_cache.shape[2]
    G = Hq // Hkv
    kc = _u32_view(plan.k_cache)
    vc = _u32_view(plan.v_cache) if kc is not None else None
    vec = kc is not None and vc is not None
    if not vec:
        kc, vc = plan.k_cache, plan.v_cache
    grid = (plan.splits, B * Hkv, (G * Q + RC - 1) // RC)
    return D, vec, grid, (plan.q, kc, vc, plan.block_table, plan.seq_lens, plan.row_lengths,
                          plan.use_rows, plan.page_size, plan.splits, plan.qk_scale,
                          plan.v_scale, plan.partial, plan.lse)


def _split_launch(plan, packed=None):
    """(name, kernel, grid, args) of the plan's split launch (16-byte views of the caches
    where legal); ``packed``: the form (default the current device's)."""
    D, vec, grid, args = split_operands(plan)
    packed = sm70_form_here() if packed is None else bool(packed)
    return (_split_name(D, vec, packed), DynShared(_kernels[D, vec, packed], _SMEM_BYTES[D, packed]),
            grid, args)


def run(plan, stream) -> None:
    name, kern, grid, args = plan.launch_setup("tiled.split", _split_launch)
    launch(name, kern, grid, NT, stream, *args)
    combine_batched.launch_combine(plan, stream, "tiled")


def _split_name(D, vec, packed=False):
    return f"attention.tiled.split.d{D}" + ("" if vec else ".bytes") + (".sm70" if packed else "")


def check_shared_fits(variant, nbytes):
    """The split kernel's ``nbytes`` of dynamic shared memory against the device's opt-in
    limit, at plan time (``_dynshared.require_shared``). Not on the simulator, which runs the
    H200's forms, unless ``DFLASH2_EMULATE_CC`` names a device."""
    if SIMULATOR and emulated_cc() is None:
        return
    require_shared(f"{variant}: the split kernel", nbytes)


def _signatures():
    f16_4 = types.Array(types.float16, 4, "A")
    u8_4 = types.Array(types.uint8, 4, "A")
    u32_4 = types.Array(types.uint32, 4, "A")
    i32_1 = types.Array(types.int32, 1, "A")
    i32_2 = types.Array(types.int32, 2, "A")
    f32_5 = types.Array(types.float32, 5, "C")

    def sig(cache_t):
        return (f16_4, cache_t, cache_t, i32_2, i32_1, i32_2, types.int64, types.int64,
                types.int64, types.float32, types.float32, f32_5, f32_5)
    return sig(u32_4), sig(u8_4)


_sig_vec, _sig_byte = _signatures()

VARIANT = register(Variant(
    name="tiled",
    family="attention",
    description="register-tiled split kernel: 128-thread CTA per (split, request, KV head, "
                "16 query rows); K/V decoded once per CTA by bit moves into shared memory; "
                "8x4 (row, key) score tiles per K16 slice, Kahan in a second role; 8x4 "
                "(row, column) PV tiles in registers; the batched combine",
    contract="A (q8 verification attention), bit-identical to frozen",
    kernels=tuple(
        KernelSpec(_split_name(D, vec, packed), _pyfuncs[D, vec, packed],
                   ((_sig_vec if vec else _sig_byte),), **form_cc_range(packed))
        for packed in (False, True) for D in (256, 128, 64) for vec in (True, False)
    ) + combine_batched.combine_specs("tiled"),
    run=run,
    supports=supports,
    bitwise_reference="frozen",
))
