"""Compact-code register-tiled q8 attention ("tiled_compact"): ``tiled``'s arithmetic with
the instruction stream and the shared-memory traffic reshaped after its H200 profile.

Keeps: contract A bit for bit, by the same argument as ``tiled.py`` (its docstring): every
FP32 value the contract defines is produced by the same sequence of roundings as
``frozen.py``; the power-of-two factors folded into the decoded K/V and into q, hi and lo
are the same; the K16 slice sums, the Kahan step, the tile max, the probabilities, the
pairwise tree, the (m, l, alpha) update and the PV chain (hi_0..15, lo_0..15, hi_16..31,
lo_16..31 per (row, column)) run in the same order. The combine is
``combine_batched``'s: frozen's combine with its workspace loads batched, the same bits.

What differs from ``tiled`` (the schedule and the memory layout only):
  * Rolled, software-pipelined inner loops. The score (8 K16 steps per iteration, two
    iterations per slice) and PV (8 keys per iteration, eight iterations: half x hi/lo x
    8 keys) run as loops whose trip count the compiler cannot see (a run-time 0 is added
    to it): their FFMA instructions are about a quarter of ``tiled``'s (725 in the sm_90
    kernel against 2,773; the whole machine code is 9,264 instructions against 10,824,
    CUDA 12.9 ptxas), where the profile had shown ~20 % "no instruction" stalls throughout
    ``tiled``'s straight-line FFMA code.
    Each step's shared-memory operands are loaded one step ahead, across the loop's back
    edge too (the last iteration re-reads its own first operands, so nothing outside the
    tile's data is read). PV reloads V from shared memory for the lo pass instead of
    holding 16 rows of it in 64 registers.
  * Incremental cache addressing: each thread keeps, per 16-byte chunk it loads, the byte
    offset of that chunk in the K and in the V cache (from the caches' byte strides) and
    adds 32 rows' stride per tile while none of its chunks can have crossed a page (its
    first chunk's slot, kept unwrapped, tells); otherwise it recomputes every chunk's page
    from the block table (``tiled`` recomputed a 4-D address and re-read the block table
    for every chunk of every tile: about a tenth of its run time). The offset is -1 when
    the key is past T, the block-table column past W or the page id outside
    [0, num_pages): those chunks load zeros, as in ``tiled``. Strides are never negative
    (the API refuses them), so an offset is never -1 otherwise.
  * Bank-conflict-free shared stores: the load role maps lane bits so that each 8-lane
    phase of a 16-byte V store covers 4 keys x 2 chunk parities, and V rows are padded to
    D + 4 floats; K's scalar stores then hit 32 distinct banks; hi/lo rows are padded to
    20 floats and the score rows to 40. (``tiled``'s V stores ran at 4x their ideal
    wavefronts, its K and hi/lo stores at 2x and 4x.)
  * One NaN-code test per 16-byte chunk (the plain bit-move decode otherwise), and the
    probability computed without a branch (its exponential is formed for every key and
    replaced by 0 for a key the row does not see, which is the same value).

Two schedules, one per target (same arithmetic, same bytes): from compute capability 8.0 on
(the H200, and the simulator) O = fma(O, alpha, T) is deferred to the next tile's PV as in
``tiled``; the sm_70 form (kernel names ending ``.sm70``) applies it right after the tile's
last barrier, because ptxas spills the deferred form at D = 256 for sm_70, and keeps the
slice sums u packed (rows of 32 floats, each row's keys rotated: ``_source``'s ``u_pack``),
which brings its dynamic shared memory at D = 256 from 100,112 to 91,408 bytes, inside a
V100's 96 KB a CTA. A plan on a device whose opt-in limit is below its form's size is
refused before any launch.
"""
from __future__ import annotations

import math  # noqa: F401  (the generated source calls math.exp)

import numpy as np

from .._compat import cuda
from .._dynshared import DynShared
from .._registry import KernelSpec, Variant, launch, register
from ..contract import EXP_CLAMP, NEG_INF, RESIDUAL_SCALE, TILE_KEYS  # noqa: F401
from . import combine_batched, tiled
from ._device import active_split_count, request_keys, row_length, split_first_tile, split_tile_count  # noqa: F401
from ._tiled_ops import (SHARED_ALIGN, add32, and32, e4m3x4, e4m3x4_plain, ld1,  # noqa: F401
                         ldb4_at, ldg4_at, lds4, lt32, mul32, nan_bytes, opaque32, shr32, st1,
                         sts4)
from ._tiled_source import (NT, RC, U_PACK_RS, Source, emit_cache_load, emit_chunk_offsets,
                            emit_decode_chunk, emit_decode_once, emit_fma_tile, emit_head, emit_kahan, emit_mul_tile, emit_offsets_advance, emit_pv_next,
                            emit_q_and_lengths, emit_record, emit_tile_max, emit_tree_update,
                            exec_source, finish_layout, u_pack_store_columns, u_rot_128,
                            u_slice_floats)
from .tiled import (_SMEM_DT, F32_ONE, F32_ZERO, HI_SCALE, LO_SCALE, Q_SCALE, U0, U_RS,  # noqa: F401
                    U_UNSCALE, _o_update, _pv_masked, _store_u, _store_u_rot, _zero32)

HRS = 20                 # hi / lo: key stride (16 rows + 4): conflict-free stores
XRS = 40                 # x: row stride (32 keys + 8): conflict-free stores


def _smem_layout(D, k_perm=False, u_pack=False):
    """Offsets (in float32 elements) into the dynamic shared buffer; all multiples of 4.
    ``k_perm`` (``_source``'s option): K's slice stride padded by 16 instead of 4, which
    makes its 16-byte decode stores conflict-free. ``u_pack``: the u scratch packed (rows of
    32, keys rotated per row; the sm_70 form's layout, 91,408 instead of 100,112 bytes at
    D = 256: a V100 gives a CTA at most 96 KB)."""
    NSL = D // 16
    L = {"VRS": D + 4}                       # V row stride: 8-lane phases hit 8 bank groups
    L["QS_SL"] = 16 * RC + 4                 # q * 2^112 [slice][ii][row]
    L["QS"] = 0
    L["KS_SL"] = 16 * TILE_KEYS + (16 if k_perm else 4)   # K * 2^-120 [slice][ii][key]
    L["KS"] = L["QS"] + NSL * L["QS_SL"]
    L["U_SL"] = u_slice_floats(u_pack, U_RS, 16)   # u [slice][row][key]; rows >= 8 shifted by 16
    L["UV"] = L["KS"] + NSL * L["KS_SL"]     # u, then V * 2^-120 [key][d] (same space)
    uv = max(NSL * L["U_SL"], TILE_KEYS * L["VRS"])
    L["HS"] = L["UV"] + uv                   # hi * 2^120 [key][row]
    L["LS"] = L["HS"] + TILE_KEYS * HRS      # lo * 2^109 [key][row]
    L["XS"] = L["LS"] + TILE_KEYS * HRS      # x [row][key]
    L["T2"] = L["XS"] + RC * XRS             # pairwise-tree level 2 [row][8]
    return finish_layout(L, L["T2"] + RC * 8)


def load_role_bits(D):
    """The load role's (lc, lk0) as sums of thread-index bits: lc (the 16-byte column) takes
    bits 0, 3, 4, 5 (as many as it needs), the key lk0 the rest in order, so an 8-lane phase
    (bits 0..2) covers 2 column parities x 4 keys."""
    CPK = D // 16
    nlc = CPK.bit_length() - 1
    lc_bits = [0, 3, 4, 5][:nlc]
    lk_bits = [b for b in range(7) if b not in lc_bits]
    return lc_bits, lk_bits


def _bits_expr(bits):
    return " + ".join(f"(((tid >> {b}) & 1) << {i})" for i, b in enumerate(bits))


def _plus(name, offset):
    """``name + offset`` as source (just ``name`` for 0)."""
    return f"{name} + {offset}" if offset else name


def _pv_pair_roles(D, pv_pairs):
    """The PV role redefined with paired row groups (``_source``'s ``pv_pairs``): thread
    index bit 0 is the row group, the rest the column group; threads past 2 x D / 4 get a row
    group of 2 or more (no PV work), as with the default roles."""
    if not pv_pairs:
        return []
    CGN = D // 4
    if 2 * CGN == NT:
        return ["prg = tid & 1                                   # PV role (pairs): rows 8prg..,",
                "pcg = tid >> 1                                  # columns 4pcg..4pcg+3"]
    return [f"prg = (tid & 1) + 2 * (tid // {2 * CGN})       # PV role (pairs): rows 8prg..,",
            f"pcg = (tid >> 1) - {CGN} * (tid // {2 * CGN})   # columns 4pcg..4pcg+3"]


def _source(D, VEC, defer_o=True, score_steps=8, pv_keys=8, score_depth=2, pv_depth=2,
            k_late=False, pv_pairs=False, k_perm=False, loop32=False, nan_once=False,
            u_pack=False, q_batch=0, u_mul_first=False):
    """Python source of the split kernel for head dim D; ``VEC``: 16-byte cache loads (else
    four 4-byte loads per chunk). Both share every other line. ``defer_o`` (a schedule
    option, same bits): apply O = fma(O, alpha, T) at the start of the next tile's PV, as
    ``tiled`` does (the form launched from compute capability 8.0 on); False applies it right
    after the tile's last barrier, which frees T's 32 registers outside PV (the sm_70 form:
    no spill there) but measured 1.2 % slower on the H200 (``bench/profile_kernels.py
    attn-ab``, bench/RESULTS.md). ``score_steps`` / ``pv_keys``: K16 steps per score-loop
    iteration and keys per PV-loop iteration (4, 8 or 16; the registered kernels use 8 and 8),
    for measurements; the order of every accumulation is the same for all of them.
    ``score_depth`` / ``pv_depth``: operand sets in flight in the score / PV loop (2: each
    step's shared-memory operands are loaded one step ahead; 4: three steps ahead, 24 more
    registers); a divisor of the loop's steps per iteration. ``k_late``: the next tile's K is
    loaded from global memory at the start of this tile's PV and decoded after it (before
    the tile's last barrier) instead of loaded at the tile's start and decoded beside V:
    its 16 words are then not live across the score loop. ``pv_pairs``: the PV role's lanes
    pair up the two 8-row groups (row group = thread index bit 0, column group = the rest)
    instead of giving each warp one row group: a warp's V load per key covers 16 column
    groups (2 shared-memory wavefronts instead of 4), its hi / lo loads two row groups (one
    wavefront each, as before). ``k_perm``: K and the slice sums u are kept in shared memory
    with the keys of a tile in the order (j mod 8, j div 8), so the four keys kq + 8m that a
    softmax thread sums are adjacent (one 16-byte load per slice in the Kahan step instead of
    four) and, at D = 256, a load thread's four chunks (keys lk0 + 8n) land in adjacent words
    (one 16-byte store per K value row instead of four 4-byte stores); a score thread's four
    keys are then kg + 8c. ``loop32``: the score and PV loop counters and the PV loop's
    next-operand offsets in 32-bit arithmetic (``add32`` etc.) instead of numba's 64-bit.
    ``nan_once``: one NaN-code test over all of a thread's V words (and K words) of a tile,
    then one straight decode path for all its chunks, instead of a test and a patch branch
    per chunk (which the compiler splits into one per word). ``u_pack``: the slice sums u in
    rows of 32 floats with row r's keys rotated by 8 (r mod 4) + 16 (r div 8) (still one
    bank each for the Kahan reads and the 16-byte stores), not in padded rows: the
    registered sm_70 form's layout (not with ``k_perm``). ``q_batch``: stage q with that many
    global loads in flight per thread (``emit_q_and_lengths``; 0, the registered kernels' loop
    with one load per iteration). ``u_mul_first``: each slice sum starts with u = q k (an
    FMUL) instead of u = 0 and u = fma(q, k, u): the score loop's first iteration is peeled
    and the 32 accumulators are not zeroed. It differs only in the sign of a sum whose
    products are all zero, which the Kahan step cannot pass on (s starts at +0 and is never
    -0, so c is +0 or non-zero, and y = u - c, s + y, (w - s) - y agree for either zero):
    the scores keep their bits (``bench/attention_fast_notes.md``, tenth round).
    Which products are formed and in what order does not change."""
    if score_steps not in (4, 8, 16) or pv_keys not in (4, 8, 16):
        raise ValueError("score_steps and pv_keys: 4, 8 or 16 (an even divisor of 16)")
    if score_depth not in (2, 4) or score_steps % score_depth:
        raise ValueError("score_depth: 2 or 4, a divisor of score_steps")
    if pv_depth not in (2, 4) or pv_keys % pv_depth:
        raise ValueError("pv_depth: 2 or 4, a divisor of pv_keys")
    if u_pack and k_perm:
        raise ValueError("u_pack and k_perm: one layout of u or the other")
    SS, PK, SD, PD = score_steps, pv_keys, score_depth, pv_depth
    NSL = D // 16
    NPASS = (NSL + 7) // 8
    CPK = D // 16                    # 16-byte chunks per key row
    NCH = (TILE_KEYS * CPK) // NT    # chunks per thread per tile (D / 64)
    KSTEP = NT // CPK                # tile-key step between a thread's chunks
    L = _smem_layout(D, k_perm, u_pack)
    QS, QS_SL, KS, KS_SL, VRS = L["QS"], L["QS_SL"], L["KS"], L["KS_SL"], L["VRS"]
    KVEC = k_perm and NCH == 4 and KSTEP == 8      # D = 256: a thread's chunks are adjacent
    UV, U_SL = L["UV"], L["U_SL"]
    HS, LS, T2, AS = L["HS"], L["LS"], L["T2"], L["AS"]
    SEEN, NANV = L["SEEN"], L["NANV"]
    lc_bits, lk_bits = load_role_bits(D)
    C4 = range(4)
    src = Source()
    e = src.e

    def score_loads(ind, st, qa, ka):
        """Operand set ``st`` of one K16 step: q for 8 rows, K for 4 keys."""
        e(ind, f"q{st}_0, q{st}_1, q{st}_2, q{st}_3 = lds4(sm, {qa})")
        e(ind, f"q{st}_4, q{st}_5, q{st}_6, q{st}_7 = lds4(sm, {qa} + 4)")
        e(ind, f"k{st}_0, k{st}_1, k{st}_2, k{st}_3 = lds4(sm, {ka})")

    def pv_loads(ind, st, va, ha):
        """Operand set ``st`` of one PV key: V for 4 columns, hi or lo for 8 rows."""
        e(ind, f"v{st}_0, v{st}_1, v{st}_2, v{st}_3 = lds4(sm, {va})")
        e(ind, f"h{st}_0, h{st}_1, h{st}_2, h{st}_3 = lds4(sm, {ha})")
        e(ind, f"h{st}_4, h{st}_5, h{st}_6, h{st}_7 = lds4(sm, {ha} + 4)")

    def load(ind, arr, n, cache, off):
        emit_cache_load(e, ind, VEC, arr, n, cache, off)

    geo = dict(UV=UV, VRS=VRS, KS=KS, KS_SL=KS_SL, KSTEP=KSTEP, NCH=NCH,
               kpos=(lambda n: f"kp{n}") if k_perm else (lambda n: f"lk0 + {KSTEP * n}"))

    def decode(ind, arr, n, is_v):
        emit_decode_chunk(e, ind, arr, n, is_v, geo)

    def decode_once(ind, arr, is_v, flag):
        emit_decode_once(e, ind, arr, is_v, flag, geo)

    def decode_v(ind, arr):
        """V of a tile into shared memory; ``vnan``: nonzero when one of its words holds a
        NaN code."""
        if nan_once:
            decode_once(ind, arr, True, "vnan")
            return
        e(ind, "vnan = U0")
        for n in range(NCH):
            decode(ind, arr, n, is_v=True)

    def decode_k(ind, arr):
        """K of a tile (all of this thread's chunks) into shared memory: with ``KVEC`` the
        four chunks' values of one K16 row index as one 16-byte store (one NaN test for the
        thread's 16 words); else chunk by chunk (``nan_once``: after one test)."""
        if not KVEC:
            if nan_once:
                decode_once(ind, arr, False, "nf")
                return
            for n in range(NCH):
                decode(ind, arr, n, is_v=False)
            return
        e(ind, "nf = " + " | ".join(f"nan_bytes({arr}[{i}])" for i in range(16)))
        for cond, dec in (("opaque32(nf) == U0" if nan_once else "nf == U0", "e4m3x4_plain"),
                          (None, "e4m3x4")):
            if cond:
                e(ind, f"if {cond}:")
            else:
                e(ind, "else:                                        # a NaN code: the patched decode")
            for m in C4:
                for n in range(4):
                    e(ind + 1, f"b{n}_0, b{n}_1, b{n}_2, b{n}_3 = {dec}({arr}[{4 * n + m}])")
                for k in C4:
                    e(ind + 1, f"sts4(sm, {KS} + lc * {KS_SL} + {(4 * m + k) * TILE_KEYS} + kp0, "
                               f"b0_{k}, b1_{k}, b2_{k}, b3_{k})")

    emit_head(e, D, after_smem=[
        "zr = W >> 40                  # 0 at run time, unknown to the compiler: loop trip counts",
        f"ns = {16 // SS} + zr                   # that it cannot unroll",
        f"npv = {64 // PK} + zr",
    ], after_roles=[
        f"lc = {_bits_expr(lc_bits)}     # load role: 16-byte column lc",
        f"lk0 = {_bits_expr(lk_bits)}    # of keys lk0 + {KSTEP}n",
        *_pv_pair_roles(D, pv_pairs),
        *([f"kp{n} = 4 * ((lk0 + {KSTEP * n}) & 7) + ((lk0 + {KSTEP * n}) >> 3)"
           f"    # chunk {n}'s key, permuted" for n in range(NCH)] if k_perm else []),
        "ks0 = k_cache.strides[0]", "ks1 = k_cache.strides[1]",
        "vs0 = v_cache.strides[0]", "vs1 = v_cache.strides[1]",
        "k_head = hk * k_cache.strides[2] + 16 * lc      # byte offset of the chunk in a row",
        "v_head = hk * v_cache.strides[2] + 16 * lc",
        f"k_tile = {TILE_KEYS} * ks1",
        f"v_tile = {TILE_KEYS} * vs1",
        "kw = cuda.local.array(16, np.uint32)",
        "vw = cuda.local.array(16, np.uint32)",
        "u = cuda.local.array(32, np.float32)",
        "o = cuda.local.array(32, np.float32)",
        "t = cuda.local.array(32, np.float32)",
        *(u_pack_store_columns(u_rot_128, lambda q: f"8 * srg + {q}", 4) if u_pack else []),
    ])
    emit_q_and_lengths(e, D, L, q_batch=q_batch)
    e(1, "# ---- the first tile: each chunk's page, cache offsets, K loads and decode ----")
    e(1, f"j0 = first * {TILE_KEYS} + lk0")
    e(1, "slot0 = j0 - (j0 // page_size) * page_size       # chunk 0's slot in its page")
    for n in range(NCH):
        emit_chunk_offsets(e, 1, n, f"j0 + {KSTEP * n}")
        load(1, "kw", n, "k_cache", f"kof{n}")
    decode_k(1, "kw")
    e(1, "_zero32(o)")
    e(1, "_zero32(t)")
    e(1, "cuda.syncthreads()")

    e(1, "for tile in range(first, last + 1):")
    e(2, f"key0 = tile * {TILE_KEYS}")
    e(2, "# ---- A0: V of this tile, then each chunk one tile on, K of the next tile ----")
    for n in range(NCH):
        load(2, "vw", n, "v_cache", f"vof{n}")
    e(2, "if tile < last:")
    emit_offsets_advance(e, NCH, KSTEP, TILE_KEYS)
    if not k_late:
        for n in range(NCH):
            load(3, "kw", n, "k_cache", f"kof{n}")

    e(2, "# ---- A: K16 slice sums u for 8 rows x 4 keys, ascending i (4 steps per pass) ----")
    e(2, f"for ps in range({NPASS}):")
    e(3, "sl = ps * 8 + 2 * warp + sb")
    e(3, f"if sl < {NSL}:")
    if not u_mul_first:
        e(4, "_zero32(u)")
    e(4, f"qa = {QS} + sl * {QS_SL} + 8 * srg")
    e(4, f"ka = {KS} + sl * {KS_SL} + 4 * kg")
    for d in range(SD - 1):
        score_loads(4, d, _plus("qa", d * RC), _plus("ka", d * TILE_KEYS))
    e(4, "it = np.int32(0)" if loop32 else "it = 0")
    more = "lt32(add32(it, 1), ns)" if loop32 else "it + 1 < ns"

    def score_iteration(ind, mul_first):
        """One iteration of the score loop: SS K16 steps (the first an FMUL if
        ``mul_first``), the next operands loaded SD - 1 steps ahead."""
        e(ind, f"nqa = qa + {SS * RC} if {more} else qa")
        e(ind, f"nka = ka + {SS * TILE_KEYS} if {more} else ka")
        for ii in range(SS):
            la = ii + SD - 1             # the step whose operands are loaded now
            if la < SS:
                score_loads(ind, la % SD, _plus("qa", la * RC), _plus("ka", la * TILE_KEYS))
            else:
                score_loads(ind, la % SD, _plus("nqa", (la - SS) * RC),
                            _plus("nka", (la - SS) * TILE_KEYS))
            if mul_first and ii == 0:
                emit_mul_tile(e, ind, "u", f"q{ii % SD}_", f"k{ii % SD}_")
            else:
                emit_fma_tile(e, ind, "u", f"q{ii % SD}_", f"k{ii % SD}_")
        e(ind, "qa = nqa")
        e(ind, "ka = nka")
        e(ind, "it = add32(it, 1)" if loop32 else "it += 1")

    if u_mul_first:
        e(4, "# the first iteration, peeled: u = q k, no zeroing")
        score_iteration(4, True)
    e(4, f"while {'lt32(it, ns)' if loop32 else 'it < ns'}:                # {16 // SS} x {SS} "
         f"K16 steps; operands {SD - 1} step(s) ahead")
    score_iteration(5, False)
    if u_pack:
        e(4, f"_store_u_rot(sm, {UV} + sl * {U_SL} + {8 * U_PACK_RS} * srg, uc0, uc1, uc2, uc3, u)")
    else:
        e(4, f"_store_u(sm, {UV} + sl * {U_SL} + 16 * srg + 4 * kg + 8 * srg * U_RS, u)")
    e(2, "cuda.syncthreads()                               # S1")

    emit_kahan(e, D, L, "U_RS", XRS, vis_names=True, u_perm=k_perm,
               u_rot=u_rot_128("r") if u_pack else None)

    emit_tile_max(e, L, XRS)
    for m in C4:
        e(2, f"ex{m} = np.float32(math.exp(max(x{m} - mnew, EXP_CLAMP)))")
        e(2, f"p{m} = ex{m} if vis{m} else F32_ZERO")
        e(2, f"hi{m} = np.float32(np.float16(p{m}))")
        e(2, f"lo{m} = np.float32(np.float16((p{m} - hi{m}) * RESIDUAL_SCALE))")
        e(2, f"st1(sm, {HS} + (kq + {8 * m}) * {HRS} + r, hi{m} * HI_SCALE)")
        e(2, f"st1(sm, {LS} + (kq + {8 * m}) * {HRS} + r, lo{m} * LO_SCALE)")
    e(2, f"st1(sm, {T2} + r * 8 + kq, (p0 + p2) + (p1 + p3))")
    e(2, "if kq == 0:")
    e(3, "seen = min(max(my_len - key0, -1), 33)")
    e(3, f"st1(sm, {SEEN} + r, np.float32(seen))")
    e(2, "# decode V of this tile (the u space is free) and K of the next tile")
    e(2, "if tid == 0:")
    e(3, f"st1(sm, {NANV} + ((tile + 1) & 1), F32_ZERO)")
    decode_v(2, "vw")
    if not k_late:
        e(2, "if tile < last:")
        decode_k(3, "kw")
    e(2, "if vnan != U0:")
    e(3, f"st1(sm, {NANV} + (tile & 1), F32_ONE)")
    e(2, "cuda.syncthreads()                               # S3")

    emit_tree_update(e, L)

    e(2, "# ---- D: PV into T ----")
    if k_late:
        e(2, "if tile < last:                                  # K of the next tile")
        for n in range(NCH):
            load(3, "kw", n, "k_cache", f"kof{n}")
    e(2, "if prg < 2:")
    if defer_o:
        e(3, "if tile > first:")
        e(4, f"_o_update(sm, {AS} + ((tile - 1) & 1) * {RC} + 8 * prg, o, t)")
    e(3, "_zero32(t)")
    e(3, f"vb = {UV} + 4 * pcg")
    e(3, f"hb = {HS} + 8 * prg")
    e(3, f"lb = {LS} + 8 * prg")
    e(3, f"if key0 + {TILE_KEYS} <= min_len or ld1(sm, {NANV} + (tile & 1)) == F32_ZERO:")
    e(4, "# every row sees every key, or V is finite (p = 0 then adds an exact 0):")
    e(4, "# hi over keys 0..15, lo over 0..15, hi over 16..31, lo over 16..31")
    e(4, "va = vb")
    e(4, "ha = hb")
    for d in range(PD - 1):
        pv_loads(4, d, _plus("va", d * VRS), _plus("ha", d * HRS))
    G = 16 // PK                       # iterations per (half, hi / lo) pass
    e(4, "it = np.int32(0)" if loop32 else "it = 0")
    e(4, f"while {'lt32(it, npv)' if loop32 else 'it < npv'}:          # {4 * G} x {PK} keys: "
         f"(half, hi / lo, {PK} keys); operands {PD - 1} key(s) ahead")
    emit_pv_next(e, 5, loop32, G, PK, VRS, HRS)
    for jj in range(PK):
        la = jj + PD - 1             # the key whose operands are loaded now
        if la < PK:
            pv_loads(5, la % PD, _plus("va", la * VRS), _plus("ha", la * HRS))
        else:
            pv_loads(5, la % PD, _plus("nva", (la - PK) * VRS), _plus("nha", (la - PK) * HRS))
        emit_fma_tile(e, 5, "t", f"h{jj % PD}_", f"v{jj % PD}_")
    e(5, "va = nva")
    e(5, "ha = nha")
    e(5, "it = add32(it, 1)" if loop32 else "it += 1")
    e(3, "else:")
    e(4, "# a boundary tile with a NaN code in V: frozen's V = 0 for keys a row does not see")
    e(4, f"sa = {SEEN} + 8 * prg")
    e(4, "for half in range(2):")
    e(5, "for jj in range(16):")
    e(6, "j = 16 * half + jj")
    e(6, f"_pv_masked(sm, vb + j * {VRS}, hb + j * {HRS}, sa, np.float32(j), t)")
    e(5, "for jj in range(16):")
    e(6, "j = 16 * half + jj")
    e(6, f"_pv_masked(sm, vb + j * {VRS}, lb + j * {HRS}, sa, np.float32(j), t)")
    if k_late:
        e(2, "if tile < last:                                  # (K is read before S1 only)")
        decode_k(3, "kw")
    e(2, "cuda.syncthreads()                               # S4")
    if not defer_o:
        e(2, "# ---- O = fma(O, alpha, T): this tile's alpha is visible from S4 on ----")
        e(2, "if prg < 2:")
        e(3, f"_o_update(sm, {AS} + (tile & 1) * {RC} + 8 * prg, o, t)")

    emit_record(e, L, last_o_update=defer_o)
    return src.text()


def _make_split_kernel(D, VEC, **options):
    """The split kernel's Python function (``options``: :func:`_source`'s schedule options)."""
    ns = dict(globals())
    tag = " ".join(f"{k}={v}" for k, v in sorted(options.items()))
    exec_source(_source(D, VEC, **options), f"<dflash2_numba.attention.tiled_compact split D={D} "
                 f"{'vec' if VEC else 'bytes'} {tag}>", ns)
    return ns["split_kernel"]


def smem_bytes(D, k_perm=False, u_pack=False, **_schedule):
    """Dynamic shared memory of a split kernel built with ``_source``'s options."""
    return 4 * _smem_layout(D, k_perm, u_pack)["TOTAL"]


# the registered forms' bytes: (D, defer_o) -> bytes; the sm_70 form (defer_o False) packs u
_SMEM_BYTES = {(D, defer): smem_bytes(D, u_pack=not defer) for D in (64, 128, 256)
               for defer in (True, False)}
# Two schedules of the same arithmetic (``defer_o``), one per target: the deferred O update
# (measured 1.2 % faster on the H200) for compute capability 8.0 and up; O updated after the
# tile's last barrier for sm_70, where ptxas 12.9 spills the deferred form at D = 256 (255
# registers, 8 B of spill stores and 76 B of loads) and not this one. The sm_70 form also
# packs the u scratch (``u_pack``), so that it fits a V100's 96 KB a CTA at D = 256. Which
# form a device gets: ``tiled.sm70_form_here``.
_kernels = {}
_pyfuncs = {}
for _D in (64, 128, 256):
    for _vec in (True, False):
        for _defer in (True, False):
            _f = _make_split_kernel(_D, _vec, defer_o=_defer, u_pack=not _defer)
            _pyfuncs[_D, _vec, _defer] = _f
            _kernels[_D, _vec, _defer] = cuda.jit(_f)


def _split_name(D, vec, defer_o=True):
    return (f"attention.tiled_compact.split.d{D}" + ("" if vec else ".bytes")
            + ("" if defer_o else ".sm70"))


def defer_o_here() -> bool:
    """The schedule for the current device: deferred O except in the sm_70 form."""
    return not tiled.sm70_form_here()


def supports(plan: dict) -> None:
    tiled.check_rows(plan, "tiled_compact")
    tiled.check_shared_fits("tiled_compact", _SMEM_BYTES[plan["D"], defer_o_here()])


def split_launch(plan, kernels=None, defer_o=None, options=None):
    """(name, kernel, grid, args) of the plan's split launch; ``kernels`` maps (D, vec) to
    jitted split kernels (default: the registered ones of the schedule ``defer_o``, itself by
    default the current device's; a measurement passes its own, and the generator
    ``options`` they were built with, which set the shared-memory size)."""
    D, vec, grid, args = tiled.split_operands(plan)
    defer = defer_o_here() if defer_o is None else bool(defer_o)
    kern = kernels[D, vec] if kernels is not None else _kernels[D, vec, defer]
    smem = _SMEM_BYTES[D, defer] if options is None else smem_bytes(D, **options)
    return _split_name(D, vec, defer), DynShared(kern, smem), grid, args


def run(plan, stream) -> None:
    name, kern, grid, args = plan.launch_setup("tiled_compact.split", split_launch)
    launch(name, kern, grid, NT, stream, *args)
    combine_batched.launch_combine(plan, stream, "tiled_compact")


VARIANT = register(Variant(
    name="tiled_compact",
    family="attention",
    description="tiled's split kernel with rolled score/PV loops (a quarter of tiled's FFMA "
                "instructions), per-chunk cache byte offsets advanced by one add per tile, "
                "bank-conflict-free decode stores (remapped load lanes, padded V rows), one "
                "NaN test per 16-byte chunk and a branch-free probability; the batched combine",
    contract="A (q8 verification attention), bit-identical to frozen",
    kernels=tuple(
        KernelSpec(_split_name(D, vec, defer), _pyfuncs[D, vec, defer],
                   ((tiled._sig_vec if vec else tiled._sig_byte),),
                   **tiled.form_cc_range(not defer))
        for defer in (True, False) for D in (256, 128, 64) for vec in (True, False)
    ) + combine_batched.combine_specs("tiled_compact"),
    run=run,
    supports=supports,
    bitwise_reference="frozen",
))
