"""Kernel-source pieces shared by the register-tiled attention generators (``tiled.py``,
``tiled_compact.py`` and ``tiled_wide.py``; ``combine_batched.py`` takes :class:`Source` and
``exec_source``): the phases the split kernels run with the same statements (kernel
head and thread roles, q staging and row lengths, the Kahan step, the tile max, the (m, l)
update, the split's record), emitted into a :class:`Source`. Each generator passes its own
shared-memory layout ``L`` and strides; the statements, and so the arithmetic, are one."""
from __future__ import annotations

import linecache

from ..contract import TILE_KEYS

NT = 128                 # threads per CTA
RC = 16                  # query rows per CTA


U_PACK_RS = 32           # packed u: a row of one slice's 32 key sums, no padding (``u_pack``)


def u_slice_floats(u_pack, u_rs, row_pad=0):
    """Floats of one slice of the u scratch [slice][row][key]: RC rows of ``u_rs`` (plus
    ``row_pad`` after them), or, packed, RC rows of 32 with each row's keys rotated (the
    forms that must fit a V100's 96 KB a CTA at D = 256)."""
    return RC * U_PACK_RS if u_pack else RC * u_rs + row_pad


def u_rot_128(row):
    """Source of the packed u layout's rotation of row ``row`` for the 128-thread score and
    softmax roles (``tiled``, ``tiled_compact``): 8 (r mod 4) + 16 (r div 8). A softmax warp's
    four rows (one r div 8) then read 32 distinct banks; a score thread's 16-byte stores,
    8 lanes a phase (4 key groups x the two row groups of one row index), 8 distinct bank
    groups."""
    return f"8 * (({row}) & 3) + 16 * (({row}) >> 3)"


def u_pack_store_columns(rot, row, periods):
    """Source lines defining ``uc0 .. uc{periods - 1}``: the packed u column of a score
    thread's first key (4 kg) in its tile row ``row(q)`` (source, q = 0 .. periods - 1); the
    thread's rows rr with rr mod ``periods`` = q share it (``rot`` keeps that true)."""
    return [f"uc{q} = (4 * kg + {rot(row(q))}) & 31            # packed u: rows rr = {q} mod {periods}"
            for q in range(periods)]


def finish_layout(L, start):
    """The shared-memory layout's common tail from offset ``start`` (float32 elements):
    alpha [tile parity][row], l [row], the keys of the tile each row sees, the "this tile's V
    holds a NaN code" flags [parity] and the total; every offset checked to be a multiple of
    4 (16-byte loads and stores)."""
    L["AS"] = start                          # alpha [tile parity][row]
    L["LF"] = L["AS"] + 2 * RC               # l [row]
    L["SEEN"] = L["LF"] + RC                 # keys of the tile each row sees, as float32
    L["NANV"] = L["SEEN"] + RC               # "this tile's V holds a NaN code" [parity]
    L["TOTAL"] = L["NANV"] + 4
    for k, v in L.items():
        assert v % 4 == 0, (k, v)
    return L


class Source:
    """Lines of Python source, four spaces per indentation level."""

    def __init__(self):
        self.lines = []

    def e(self, ind, text):
        self.lines.append("    " * ind + text)

    def text(self):
        return "\n".join(self.lines) + "\n"


def exec_source(src, filename, ns):
    """Run generated source in ``ns`` under ``filename`` (registered with linecache, so
    tracebacks and numba's error messages show the generated lines)."""
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)


def emit_head(e, D, after_smem=(), after_roles=(), roles=None):
    """``def split_kernel(...)`` with its docstring (the contract it keeps), the CTA's split
    / request / KV head / row group and tile range, the shared buffer, then
    ``after_smem``, the score / softmax / PV thread roles
    (``roles``: lines that define them; default the 128-thread roles of ``tiled`` and
    ``tiled_compact``) and ``after_roles``."""
    CGN = D // 4
    if roles is None:
        roles = [
            "kg = (lane & 1) | (((lane >> 2) & 3) << 1)     # score role: keys 4kg..4kg+3",
            "srg = (lane >> 1) & 1                           # rows 8srg..8srg+7",
            "sb = lane >> 4                                  # slice parity",
            "r = tid >> 3                                    # softmax role: row r,",
            "kq = tid & 7                                    # keys kq + 8m",
            f"prg = tid // {CGN}                            # PV role: rows 8prg..8prg+7,",
            f"pcg = tid - prg * {CGN}                       # columns 4pcg..4pcg+3",
        ]
    e(0, "def split_kernel(q, k_cache, v_cache, block_table, seq_lens, row_lengths, use_rows,")
    e(0, "                 page_size, splits, qk_scale, v_scale, partial, lse):")
    # the kernel's docstring (plain text: no triple quote or backslash inside it)
    e(1, '"""Split step of a register-tiled attention variant (generated source): keeps')
    e(1, "contract.md part A, sections Split schedule, E4M3FN decode, Score, N32 online")
    e(1, "softmax and PV, and Workspace. Its partial and lse must equal those of frozen.py's")
    e(1, 'split_kernel (attention.frozen.split) bit for bit; the generating module says how."""')
    for line in [
        "s = cuda.blockIdx.x", "bh = cuda.blockIdx.y", "rg = cuda.blockIdx.z", "tid = cuda.threadIdx.x",
        "Q = q.shape[1]", "Hq = q.shape[2]", "num_pages = k_cache.shape[0]", "Hkv = k_cache.shape[2]",
        "W = block_table.shape[1]", "G = Hq // Hkv", "GQ = G * Q", "b = bh // Hkv", "hk = bh - b * Hkv",
        "T = request_keys(seq_lens, row_lengths, use_rows, b, Q)",
        "A = active_split_count(T, splits)",
        "if s >= A:", "    return",
        "first = split_first_tile(T, A, s)",
        "last = first + split_tile_count(T, A, s) - 1",
        "sm = cuda.shared.array(0, _SMEM_DT, SHARED_ALIGN)",
        *after_smem,
        "lane = tid & 31", "warp = tid >> 5",
        *roles,
        *after_roles,
    ]:
        e(1, line)


def emit_q_and_lengths(e, D, L, nt=NT, q_batch=0):
    """q * 2^112 into shared memory (``nt`` threads), this thread's row length, the CTA's
    shortest row, the NaN flags cleared, and the running (m, l). ``q_batch``: 0, a loop
    with one q load per iteration (the registered kernels); n > 0, the thread's
    ``RC * D / nt`` elements written out in groups of n: the group's n loads first, with no
    branch between them (a row past G*Q loads row G*Q - 1 and stores 0), then its values and
    stores, so n loads are in flight at once (the same values to the same addresses)."""
    e(1, "# ---- q * 2^112 into shared memory (rows past G*Q: zeros) ----")
    if not q_batch:
        e(1, f"for idx in range(tid, {RC * D}, {nt}):")
        e(2, f"rr = idx // {D}")
        e(2, f"i = idx - rr * {D}")
        e(2, "gr = rg * 16 + rr")
        e(2, "val = F32_ZERO")
        e(2, "if gr < GQ:")
        e(3, "g = gr // Q")
        e(3, "val = np.float32(q[b, gr - g * Q, hk * G + g, i]) * Q_SCALE")
        e(2, f"st1(sm, {L['QS']} + (i >> 4) * {L['QS_SL']} + (i & 15) * {RC} + rr, val)")
    else:
        if (RC * D) % nt or ((RC * D) // nt) % q_batch:
            raise ValueError(f"q_batch: a divisor of the {(RC * D) // nt} q elements a thread stages")
        per = (RC * D) // nt
        for k0 in range(0, per, q_batch):
            for k in range(k0, k0 + q_batch):      # the loads: no branch between them
                e(1, f"rr{k} = (tid + {nt * k}) // {D}")
                e(1, f"i{k} = tid + {nt * k} - rr{k} * {D}")
                e(1, f"gr{k} = rg * 16 + rr{k}")
                e(1, f"grc{k} = min(gr{k}, GQ - 1)             # a row that exists (GQ >= 1)")
                e(1, f"g{k} = grc{k} // Q")
                e(1, f"x{k} = q[b, grc{k} - g{k} * Q, hk * G + g{k}, i{k}]")
            for k in range(k0, k0 + q_batch):      # then the values (0 past G*Q) and stores
                e(1, f"val{k} = np.float32(x{k}) * Q_SCALE")
                e(1, f"if gr{k} >= GQ:")
                e(2, f"val{k} = F32_ZERO")
                e(1, f"st1(sm, {L['QS']} + (i{k} >> 4) * {L['QS_SL']} + (i{k} & 15) * {RC} + rr{k}, "
                     f"val{k})")
    e(1, "gr_s = rg * 16 + r")
    e(1, "my_len = 0")
    e(1, "if gr_s < GQ:")
    e(2, "g_s = gr_s // Q")
    e(2, "my_len = row_length(seq_lens, row_lengths, use_rows, b, gr_s - g_s * Q, Q)")
    e(1, "min_len = 1 << 62                               # shortest valid row of the CTA")
    e(1, "for rr in range(16):")
    e(2, "gr = rg * 16 + rr")
    e(2, "if gr < GQ:")
    e(3, "g = gr // Q")
    e(3, "min_len = min(min_len, row_length(seq_lens, row_lengths, use_rows, b, gr - g * Q, Q))")
    e(1, "if tid == 0:")
    e(2, f"st1(sm, {L['NANV']}, F32_ZERO)")
    e(2, f"st1(sm, {L['NANV']} + 1, F32_ZERO)")
    e(1, "m_run = NEG_INF")
    e(1, "l_run = F32_ZERO")


def emit_kahan(e, D, L, u_rs, xrs, vis_names=False, u_perm=False, key_step=8, row_shift=True,
               u_rot=None):
    """Phase B: Kahan over the K16 slice sums in ascending slice order, the scale, the
    visibility; x into shared memory (row stride ``xrs``). The thread's keys are kq +
    ``key_step`` m, m = 0 .. 32 / key_step - 1 (4 keys at the default 8, 2 at 16).
    ``vis_names``: keep each key's visibility as ``vis{m}`` for a later phase. ``u_perm``: u
    holds key j of a row at 4 (j mod 8) + j div 8, so this thread's keys kq + 8m come in one
    16-byte load. ``row_shift``: u's rows 8..15 sit 16 floats further on (the 128-thread
    score role's layout). ``u_rot``: the packed u layout (:data:`U_PACK_RS`, the layouts'
    ``u_pack``): rows of 32 floats, key j of row r at (j + rot(r)) mod 32, ``u_rot`` the
    source of rot(r) (a multiple of ``key_step``; ``u_rs`` and ``row_shift`` unused)."""
    nk = 32 // key_step
    e(2, "# ---- B: Kahan across the slices in ascending order, scale, visibility ----")
    if u_rot is not None:
        assert not u_perm, "u_rot: the packed layout holds keys in their own order"
        e(2, f"ubr = {L['UV']} + r * {U_PACK_RS}")
        e(2, f"urot = ({u_rot}) & 31                  # packed u: row r rotated by urot keys")
        for m in range(nk):
            e(2, f"uo{m} = kq + (({key_step * m} + urot) & 31)")
    else:
        shift = " + 16 * (r >> 3)" if row_shift else ""
        e(2, f"ubr = {L['UV']} + r * {u_rs}{shift} + {'4 * kq' if u_perm else 'kq'}")
    for m in range(nk):
        e(2, f"s{m} = F32_ZERO")
        e(2, f"c{m} = F32_ZERO")
    e(2, f"for sl in range({D // 16}):")
    e(3, f"ua = ubr + sl * {L['U_SL']}")
    if u_perm:
        e(3, "us0, us1, us2, us3 = lds4(sm, ua)")
    for m in range(nk):
        if u_rot is not None:
            e(3, f"y{m} = ld1(sm, ua + uo{m}) - c{m}")
        else:
            e(3, f"y{m} = {f'us{m}' if u_perm else f'ld1(sm, ua + {key_step * m})'} - c{m}")
        e(3, f"w{m} = s{m} + y{m}")
        e(3, f"c{m} = (w{m} - s{m}) - y{m}")
        e(3, f"s{m} = w{m}")
    for m in range(nk):
        visible = f"key0 + kq + {key_step * m} < my_len"
        if vis_names:
            e(2, f"vis{m} = {visible}")
            visible = f"vis{m}"
        e(2, f"x{m} = NEG_INF")
        e(2, f"if {visible}:")
        e(3, f"x{m} = (s{m} * U_UNSCALE) * qk_scale")
        e(2, f"st1(sm, {L['XS']} + r * {xrs} + kq + {key_step * m}, x{m})")
    e(2, "cuda.syncthreads()                               # S2")


def emit_tile_max(e, L, xrs):
    """The tile max in frozen's sequential order and mnew (start of phase C1)."""
    e(2, "# ---- C1: tile max (frozen's sequential order), p, hi/lo, tree levels 1-2 ----")
    e(2, f"xb = {L['XS']} + r * {xrs}")
    e(2, "z0, z1, z2, z3 = lds4(sm, xb)")
    e(2, "tmax = max(max(max(z0, z1), z2), z3)")
    for c4 in range(1, 8):
        e(2, f"z0, z1, z2, z3 = lds4(sm, xb + {4 * c4})")
        e(2, "tmax = max(max(max(max(tmax, z0), z1), z2), z3)")
    e(2, "mnew = max(m_run, tmax)")


def emit_tree_update(e, L, level1=False):
    """Phase C2: pairwise-tree levels 3-5 and the (m, l, alpha) update. ``level1``: shared
    memory holds the tree's first level (``L['T1']``, 16 per row, p_j + p_(j+16)) and its
    second, frozen's (p_j + p_(j+16)) + (p_(j+8) + p_(j+24)), is formed here; else it holds
    the second (``L['T2']``, 8 per row)."""
    if level1:
        e(2, "# ---- C2: tree levels 2-5 and the (m, l) update ----")
        for g in range(4):
            e(2, f"f{4 * g}, f{4 * g + 1}, f{4 * g + 2}, f{4 * g + 3} = "
                 f"lds4(sm, {L['T1']} + r * 16{f' + {4 * g}' if g else ''})")
        for j in range(8):
            e(2, f"e{j} = f{j} + f{j + 8}                    # frozen's (p_j + p_j+16) + (p_j+8 + p_j+24)")
    else:
        e(2, "# ---- C2: tree levels 3-5 and the (m, l) update ----")
        e(2, f"e0, e1, e2, e3 = lds4(sm, {L['T2']} + r * 8)")
        e(2, f"e4, e5, e6, e7 = lds4(sm, {L['T2']} + r * 8 + 4)")
    e(2, "tsum = ((e0 + e4) + (e2 + e6)) + ((e1 + e5) + (e3 + e7))")
    e(2, "alpha = F32_ONE")
    e(2, "if tsum > F32_ZERO:")
    e(3, "alpha = np.float32(math.exp(max(m_run - mnew, EXP_CLAMP)))")
    e(3, "l_run = cuda.fma(l_run, alpha, tsum)")
    e(3, "m_run = mnew")
    e(2, "if kq == 0:")
    e(3, f"st1(sm, {L['AS']} + (tile & 1) * {RC} + r, alpha)")
    e(3, f"st1(sm, {L['LF']} + r, l_run)")


def emit_record(e, L, last_o_update, rows=8, guarded=True):
    """After the tile loop: (``last_o_update``) the last tile's O = fma(O, alpha, T), then the
    split's partial (each PV thread's ``rows`` x 4 tile; ``guarded``: only threads whose row
    group ``prg`` is below 2 hold one) and lse."""
    AS, LF = L["AS"], L["LF"]
    if last_o_update:
        e(1, "# ---- the last O update and the split's record ----")
        e(1, "if prg < 2:")
        e(2, f"_o_update(sm, {AS} + (last & 1) * {RC} + 8 * prg, o, t)")
    else:
        e(1, "# ---- the split's record ----")
        if guarded:
            e(1, "if prg < 2:")
    ind = 2 if guarded else 1
    for rr in range(rows):
        e(ind, f"gr = rg * 16 + {rows} * prg + {rr}")
        e(ind, "if gr < GQ:")
        e(ind + 1, "g = gr // Q")
        e(ind + 1, "tt = gr - g * Q")
        e(ind + 1, "hh = hk * G + g")
        e(ind + 1, f"f = v_scale if ld1(sm, {LF} + {rows} * prg + {rr}) > F32_ZERO else F32_ZERO")
        for cc in range(4):
            e(ind + 1, f"partial[b, s, tt, hh, 4 * pcg + {cc}] = o[{4 * rr + cc}] * f")
    e(1, "if kq == 0 and gr_s < GQ:")
    e(2, "g = gr_s // Q")
    e(2, "tt = gr_s - g * Q")
    e(2, "hh = hk * G + g")
    e(2, "lse[b, s, tt, hh, 0] = m_run if l_run > F32_ZERO else NEG_INF")
    e(2, "lse[b, s, tt, hh, 1] = l_run")


def emit_cache_load(e, ind, vec, arr, n, cache, off):
    """Chunk n of ``arr`` (4 words) from the cache at byte offset ``off``: one 16-byte load
    (``vec``) or four 4-byte loads; zeros where ``off`` is -1."""
    words = ", ".join(f"{arr}[{4 * n + m}]" for m in range(4))
    e(ind, f"if {off} >= 0:")
    if vec:
        e(ind + 1, f"{words} = ldg4_at({cache}, {off})")
    else:
        for m in range(4):
            e(ind + 1, f"{arr}[{4 * n + m}] = ldb4_at({cache}, {off} + {4 * m})")
    e(ind, "else:")
    e(ind + 1, "; ".join(f"{arr}[{4 * n + m}] = U0" for m in range(4)))


def emit_chunk_offsets(e, ind, n, key):
    """kof/vof of chunk n, whose key is ``key``: -1 unless key < T and its block-table
    column and page id are valid; a division, so only on the first tile and where a chunk
    may cross a page."""
    e(ind, f"kof{n} = -1")
    e(ind, f"vof{n} = -1")
    e(ind, f"jn = {key}")
    e(ind, "if jn < T:")
    e(ind + 1, "pcol = jn // page_size")
    e(ind + 1, "if pcol < W:")
    e(ind + 2, "pg = block_table[b, pcol]")
    e(ind + 2, "if pg >= 0 and pg < num_pages:")
    e(ind + 3, "pslot = jn - pcol * page_size")
    e(ind + 3, f"kof{n} = pg * ks0 + pslot * ks1 + k_head")
    e(ind + 3, f"vof{n} = pg * vs0 + pslot * vs1 + v_head")


def emit_offsets_advance(e, nch, kstep, tile_keys):
    """Inside ``if tile < last:`` (the caller's line): each of the ``nch`` chunks' offsets one
    tile on, by one add while the thread's first chunk slot shows that none crossed a page,
    else recomputed from the block table."""
    e(3, f"slot0 += {tile_keys}")
    e(3, f"if slot0 + {kstep * (nch - 1)} < page_size:     # no chunk crossed a page: one add each")
    e(4, f"rem = T - key0 - {tile_keys}                 # next tile: key lk0 + {kstep}n < T iff < rem")
    for n in range(nch):
        e(4, f"if lk0 + {kstep * n} >= rem:")
        e(5, f"kof{n} = -1")
        e(5, f"vof{n} = -1")
        e(4, f"elif kof{n} >= 0:")
        e(5, f"kof{n} += k_tile")
        e(5, f"vof{n} += v_tile")
    e(3, "else:                                            # recompute from the block table")
    e(4, f"j0 = key0 + {tile_keys} + lk0")
    e(4, "slot0 = j0 - (j0 // page_size) * page_size")
    for n in range(nch):
        emit_chunk_offsets(e, 4, n, f"j0 + {kstep * n}")


def emit_decode_chunk(e, ind, arr, n, is_v, geo, dec=None):
    """Chunk n of ``arr`` (4 words of E4M3 bytes) decoded and stored into shared memory: V
    as 16-byte stores at [key][d], K as 4-byte stores at [slice][ii][key position]. With
    ``dec`` given (``e4m3x4_plain`` or ``e4m3x4``), by that decode alone (the caller has
    tested the words); else the chunk's own NaN test picks it (and, for V, ORs it into
    ``vnan``). ``geo``: the layout's UV, VRS, KS, KS_SL, the tile-key step KSTEP between a
    thread's chunks, and ``kpos(n)``, the source of chunk n's key position in K's rows."""
    C4 = range(4)
    ws = [f"{arr}[{4 * n + m}]" for m in C4]
    if dec is None:
        e(ind, "nf = " + " | ".join(f"nan_bytes({w})" for w in ws))
        if is_v:
            e(ind, "vnan |= nf")
    for m in C4:
        e(ind, f"a{4 * m}, a{4 * m + 1}, a{4 * m + 2}, a{4 * m + 3} = {dec or 'e4m3x4_plain'}({ws[m]})")
    if dec is None:
        e(ind, "if nf != U0:                                 # a NaN code: the patched decode")
        for m in C4:
            e(ind + 1, f"a{4 * m}, a{4 * m + 1}, a{4 * m + 2}, a{4 * m + 3} = e4m3x4({ws[m]})")
    if is_v:
        for m in C4:
            e(ind, f"sts4(sm, {geo['UV']} + (lk0 + {geo['KSTEP'] * n}) * {geo['VRS']} + 16 * lc + {4 * m}, "
                   f"a{4 * m}, a{4 * m + 1}, a{4 * m + 2}, a{4 * m + 3})")
    else:
        for m in C4:
            for k in C4:
                e(ind, f"st1(sm, {geo['KS']} + lc * {geo['KS_SL']} + {(4 * m + k) * TILE_KEYS} + {geo['kpos'](n)}, "
                       f"a{4 * m + k})")


def emit_decode_once(e, ind, arr, is_v, flag, geo):
    """All of this thread's ``geo['NCH']`` chunks of ``arr`` after one NaN test of all their
    words (``flag``: its result), read through ``opaque32`` so that the compiler keeps it one
    branch: each way one straight decode path (:func:`emit_decode_chunk`)."""
    nch = geo["NCH"]
    e(ind, f"{flag} = " + " | ".join(f"nan_bytes({arr}[{i}])" for i in range(4 * nch)))
    e(ind, f"if opaque32({flag}) == U0:              # (one branch: see opaque32)")
    for n in range(nch):
        emit_decode_chunk(e, ind + 1, arr, n, is_v, geo, dec="e4m3x4_plain")
    e(ind, "else:                                        # a NaN code: the patched decode")
    for n in range(nch):
        emit_decode_chunk(e, ind + 1, arr, n, is_v, geo, dec="e4m3x4")


def emit_pv_next(e, ind, loop32, G, PK, vrs, hrs):
    """The PV loop's next operand addresses ``nva`` / ``nha`` (iteration ``nx``: half,
    hi / lo pass, group of ``PK`` keys; ``G`` groups a pass), in numba's 64-bit integers or
    (``loop32``) in 32-bit ones."""
    lg = G.bit_length() - 1
    if loop32:
        e(ind, "nx = add32(it, 1) if lt32(add32(it, 1), npv) else it")
        for name, stride in (("dv", vrs), ("dh", hrs)):
            step = f"mul32(shr32(nx, {lg + 1}), {16 * stride})"
            if G > 1:
                step = f"add32({step}, mul32(and32(nx, {G - 1}), {PK * stride}))"
            e(ind, f"{name} = {step}")
        e(ind, "nva = vb + dv")
        e(ind, f"nha = (lb if and32(shr32(nx, {lg}), 1) != 0 else hb) + dh")
    else:
        e(ind, "nx = it + 1 if it + 1 < npv else it")
        g_v = f" + (nx & {G - 1}) * {PK * vrs}" if G > 1 else ""
        g_h = f" + (nx & {G - 1}) * {PK * hrs}" if G > 1 else ""
        e(ind, f"nva = vb + (nx >> {lg + 1}) * {16 * vrs}{g_v}")
        e(ind, f"nha = (lb if ((nx >> {lg}) & 1) != 0 else hb) + (nx >> {lg + 1}) * {16 * hrs}{g_h}")


def emit_row_tile_helpers(e, rows, names):
    """Device functions for a ``rows`` x 4 register tile (``@_devfn``, constant indices):
    ``names`` maps "masked" (one PV key of frozen's boundary tiles: a key the row does not
    see contributes V = 0), "o_update" (O = fma(O, alpha, T)), "zero" (the tile's
    accumulators to 0) and "store_u" (the tile's slice sums into shared memory, row stride
    ``U_RS``) to the function names; optionally "store_u_rot" (the same sums into the packed
    u layout: row rr at ``ub + 32 rr + uc(rr mod rows / 2)``, the columns from
    :func:`u_pack_store_columns`)."""
    R, C4 = range(rows), range(4)

    def quads(prefix, addr):
        for g in range(rows // 4):
            names_ = ", ".join(f"{prefix}{4 * g + i}" for i in C4)
            e(1, f"{names_} = lds4(sm, {addr}{f' + {4 * g}' if g else ''})")

    e(0, "@_devfn")
    e(0, f"def {names['masked']}(sm, va, ha, sa, jf, t):")
    e(1, "# frozen's boundary tiles: a key the row does not see contributes V = 0")
    e(1, "v0, v1, v2, v3 = lds4(sm, va)")
    quads("h", "ha")
    quads("s", "sa")
    for rr in R:
        for cc in C4:
            e(1, f"t[{4 * rr + cc}] = cuda.fma(h{rr}, v{cc} if jf < s{rr} else F32_ZERO, t[{4 * rr + cc}])")
    e(0, "")
    e(0, "@_devfn")
    e(0, f"def {names['o_update']}(sm, aa, o, t):")
    quads("h", "aa")
    for rr in R:
        for cc in C4:
            e(1, f"o[{4 * rr + cc}] = cuda.fma(o[{4 * rr + cc}], h{rr}, t[{4 * rr + cc}])")
    e(0, "")
    e(0, "@_devfn")
    e(0, f"def {names['zero']}(a):")
    for x in range(4 * rows):
        e(1, f"a[{x}] = F32_ZERO")
    e(0, "")
    e(0, "@_devfn")
    e(0, f"def {names['store_u']}(sm, ub, u):")
    for rr in R:
        e(1, f"sts4(sm, ub + {rr} * U_RS, u[{4 * rr}], u[{4 * rr + 1}], u[{4 * rr + 2}], u[{4 * rr + 3}])")
    if "store_u_rot" in names:
        P = rows // 2
        cols = ", ".join(f"uc{x}" for x in range(P))
        e(0, "")
        e(0, "@_devfn")
        e(0, f"def {names['store_u_rot']}(sm, ub, {cols}, u):")
        e(1, f"# packed u: the tile's row rr at ub + {U_PACK_RS} rr + uc(rr mod {P})")
        for rr in R:
            e(1, f"sts4(sm, ub + {rr * U_PACK_RS} + uc{rr % P}, u[{4 * rr}], u[{4 * rr + 1}], "
                 f"u[{4 * rr + 2}], u[{4 * rr + 3}])")


def emit_mul_tile(e, ind, acc, a, b):
    """The 8 x 4 products acc[4r + c] = a_r * b_c (FMULs: the first step of a sum that is not
    zeroed first; see ``tiled_compact._source``'s ``u_mul_first``)."""
    for rr in range(8):
        for cc in range(4):
            e(ind, f"{acc}[{4 * rr + cc}] = {a}{rr} * {b}{cc}")


def emit_fma_tile(e, ind, acc, a, b):
    """The 8 x 4 fused steps acc[4r + c] = fma(a_r, b_c, acc[4r + c]) (``a``, ``b``: name
    prefixes of the operand registers, e.g. ``q0_`` and ``k0_``)."""
    for rr in range(8):
        for cc in range(4):
            e(ind, f"{acc}[{4 * rr + cc}] = cuda.fma({a}{rr}, {b}{cc}, {acc}[{4 * rr + cc}])")


__all__ = ["NT", "RC", "U_PACK_RS", "u_slice_floats", "u_rot_128", "u_pack_store_columns",
           "finish_layout", "Source", "exec_source", "emit_head", "emit_q_and_lengths",
           "emit_kahan", "emit_tile_max", "emit_tree_update", "emit_record", "emit_cache_load",
           "emit_chunk_offsets", "emit_decode_chunk", "emit_decode_once", "emit_offsets_advance",
           "emit_pv_next", "emit_row_tile_helpers",
           "emit_fma_tile", "emit_mul_tile"]
