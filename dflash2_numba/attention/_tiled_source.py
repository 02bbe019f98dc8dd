"""Kernel-source pieces shared by the register-tiled attention generators (``tiled.py`` and
``tiled_compact.py``): the phases both split kernels run with the same statements (kernel
head and thread roles, q staging and row lengths, the Kahan step, the tile max, the (m, l)
update, the split's record), emitted into a :class:`Source`. Each generator passes its own
shared-memory layout ``L`` and strides; the statements, and so the arithmetic, are one."""
from __future__ import annotations

import linecache

NT = 128                 # threads per CTA
RC = 16                  # query rows per CTA


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


def emit_head(e, D, after_smem=(), after_roles=()):
    """``def split_kernel(...)``, the CTA's split / request / KV head / row group and tile
    range, the shared buffer, then ``after_smem``, the score / softmax / PV thread roles and
    ``after_roles``."""
    CGN = D // 4
    e(0, "def split_kernel(q, k_cache, v_cache, block_table, seq_lens, row_lengths, use_rows,")
    e(0, "                 page_size, splits, qk_scale, v_scale, partial, lse):")
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
        "kg = (lane & 1) | (((lane >> 2) & 3) << 1)     # score role: keys 4kg..4kg+3",
        "srg = (lane >> 1) & 1                           # rows 8srg..8srg+7",
        "sb = lane >> 4                                  # slice parity",
        "r = tid >> 3                                    # softmax role: row r,",
        "kq = tid & 7                                    # keys kq + 8m",
        f"prg = tid // {CGN}                            # PV role: rows 8prg..8prg+7,",
        f"pcg = tid - prg * {CGN}                       # columns 4pcg..4pcg+3",
        *after_roles,
    ]:
        e(1, line)


def emit_q_and_lengths(e, D, L):
    """q * 2^112 into shared memory, this thread's row length, the CTA's shortest row, the
    NaN flags cleared, and the running (m, l)."""
    e(1, "# ---- q * 2^112 into shared memory (rows past G*Q: zeros) ----")
    e(1, f"for idx in range(tid, {RC * D}, {NT}):")
    e(2, f"rr = idx // {D}")
    e(2, f"i = idx - rr * {D}")
    e(2, "gr = rg * 16 + rr")
    e(2, "val = F32_ZERO")
    e(2, "if gr < GQ:")
    e(3, "g = gr // Q")
    e(3, "val = np.float32(q[b, gr - g * Q, hk * G + g, i]) * Q_SCALE")
    e(2, f"st1(sm, {L['QS']} + (i >> 4) * {L['QS_SL']} + (i & 15) * {RC} + rr, val)")
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


def emit_kahan(e, D, L, u_rs, xrs, vis_names=False, u_perm=False):
    """Phase B: Kahan over the K16 slice sums in ascending slice order, the scale, the
    visibility; x into shared memory (row stride ``xrs``). ``vis_names``: keep each key's
    visibility as ``vis{m}`` for a later phase. ``u_perm``: u holds key j of a row at
    4 (j mod 8) + j div 8, so this thread's keys kq + 8m come in one 16-byte load."""
    e(2, "# ---- B: Kahan across the slices in ascending order, scale, visibility ----")
    e(2, f"ubr = {L['UV']} + r * {u_rs} + 16 * (r >> 3) + {'4 * kq' if u_perm else 'kq'}")
    for m in range(4):
        e(2, f"s{m} = F32_ZERO")
        e(2, f"c{m} = F32_ZERO")
    e(2, f"for sl in range({D // 16}):")
    e(3, f"ua = ubr + sl * {L['U_SL']}")
    if u_perm:
        e(3, "us0, us1, us2, us3 = lds4(sm, ua)")
    for m in range(4):
        e(3, f"y{m} = {f'us{m}' if u_perm else f'ld1(sm, ua + {8 * m})'} - c{m}")
        e(3, f"w{m} = s{m} + y{m}")
        e(3, f"c{m} = (w{m} - s{m}) - y{m}")
        e(3, f"s{m} = w{m}")
    for m in range(4):
        visible = f"key0 + kq + {8 * m} < my_len"
        if vis_names:
            e(2, f"vis{m} = {visible}")
            visible = f"vis{m}"
        e(2, f"x{m} = NEG_INF")
        e(2, f"if {visible}:")
        e(3, f"x{m} = (s{m} * U_UNSCALE) * qk_scale")
        e(2, f"st1(sm, {L['XS']} + r * {xrs} + kq + {8 * m}, x{m})")
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


def emit_tree_update(e, L):
    """Phase C2: pairwise-tree levels 3-5 and the (m, l, alpha) update."""
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


def emit_record(e, L, last_o_update):
    """After the tile loop: (``last_o_update``) the last tile's O = fma(O, alpha, T), then the
    split's partial and lse."""
    AS, LF = L["AS"], L["LF"]
    if last_o_update:
        e(1, "# ---- the last O update and the split's record ----")
        e(1, "if prg < 2:")
        e(2, f"_o_update(sm, {AS} + (last & 1) * {RC} + 8 * prg, o, t)")
    else:
        e(1, "# ---- the split's record ----")
        e(1, "if prg < 2:")
    for rr in range(8):
        e(2, f"gr = rg * 16 + 8 * prg + {rr}")
        e(2, "if gr < GQ:")
        e(3, "g = gr // Q")
        e(3, "tt = gr - g * Q")
        e(3, "hh = hk * G + g")
        e(3, f"f = v_scale if ld1(sm, {LF} + 8 * prg + {rr}) > F32_ZERO else F32_ZERO")
        for cc in range(4):
            e(3, f"partial[b, s, tt, hh, 4 * pcg + {cc}] = o[{4 * rr + cc}] * f")
    e(1, "if kq == 0 and gr_s < GQ:")
    e(2, "g = gr_s // Q")
    e(2, "tt = gr_s - g * Q")
    e(2, "hh = hk * G + g")
    e(2, "lse[b, s, tt, hh, 0] = m_run if l_run > F32_ZERO else NEG_INF")
    e(2, "lse[b, s, tt, hh, 1] = l_run")


def emit_fma_tile(e, ind, acc, a, b):
    """The 8 x 4 fused steps acc[4r + c] = fma(a_r, b_c, acc[4r + c]) (``a``, ``b``: name
    prefixes of the operand registers, e.g. ``q0_`` and ``k0_``)."""
    for rr in range(8):
        for cc in range(4):
            e(ind, f"{acc}[{4 * rr + cc}] = cuda.fma({a}{rr}, {b}{cc}, {acc}[{4 * rr + cc}])")


__all__ = ["NT", "RC", "Source", "exec_source", "emit_head", "emit_q_and_lengths",
           "emit_kahan", "emit_tile_max", "emit_tree_update", "emit_record", "emit_fma_tile"]
