"""Device helpers for the register-tiled attention variants (``tiled``, ``tiled_compact``,
``tiled_wide``; ``tiled_perm`` through ``tiled_compact``).

On a GPU each is a numba intrinsic emitting a handful of LLVM operations:
  * ``ld1(a, i)`` / ``st1(a, i, x)``: one float32 element of a 1-D C-contiguous (shared)
    array, with no negative-index wraparound (so constant offsets fold into addresses);
  * ``lds4(a, i)`` / ``sts4(a, i, x0, x1, x2, x3)``: one 16-byte load / store of
    ``a[i..i+3]`` (``ld.shared.v4.f32`` / ``st.shared.v4.f32``; ``i`` a multiple of 4,
    the array 16-byte aligned);
  * ``ldg4(a, i0, i1, i2, i3)``: one 16-byte load of ``a[i0, i1, i2, i3..i3+3]`` from a
    4-D uint32 array (the caller guarantees 16-byte alignment);
  * ``ldb4(a, i0, i1, i2, i3)``: the four bytes ``a[i0, i1, i2, i3..i3+3]`` of a 4-D uint8
    array as one little-endian uint32 (four byte loads, one address computation);
  * ``ldg4_at(a, off)`` / ``ldb4_at(a, off)``: the same 16-byte / 4-byte loads at a byte
    offset ``off`` from the start of ``a``'s data (the caller computes ``off`` from the
    array's byte strides and range-checked indices; no index arithmetic per load);
  * ``nan_bytes(w)``: nonzero exactly when a byte of ``w`` is an E4M3 NaN code (0x7F/0xFF);
  * ``e4m3x4(w)``: the four E4M3FN bytes of a uint32 word (byte 0 first) as float32 values
    times 2^-120, exactly: the byte's 7 magnitude bits placed at float32 bits 20..26 and its
    sign at bit 31 ARE that value (a float32 subnormal when the E4M3 exponent is 0);
    0x7F / 0xFF become the decode table's NaN (0x7FC00000 with the sign). Per byte: one
    shift to bring it to bits 24..31, an arithmetic shift right by 4 and one mask (plus a
    per-word NaN test); 32-bit integer operations only, no rounding anywhere.
    ``e4m3x4_plain(w)`` is the same without the NaN patch: equal to ``e4m3x4`` for every
    word with no NaN code (the caller tests ``nan_bytes`` first);
  * ``add32(a, b)``, ``mul32``, ``shr32`` (arithmetic), ``and32`` and ``lt32``: 32-bit
    integer operations on values that fit in 32 bits (numba widens every integer sum to 64
    bits; a loop counter kept in 32 bits saves its carries and two-word compares);
  * ``opaque32(w)``: the low 32 bits of ``w`` unchanged (as uint32), through an inline-assembly move the compiler
    cannot see into: a test on it cannot be correlated with tests on the values it was
    computed from (so a branch on "no word holds a NaN code" stays one branch instead of
    being dissolved into the per-word tests inside the patched decode).
Under the CUDA simulator they are plain Python with the same results, so the kernel
source runs unchanged on both.  :func:`decode_ir` builds ``e4m3x4``'s IR and is shared
with a CPU check in the tests.
"""
from __future__ import annotations

import numpy as np
import ctypes

from llvmlite import ir

from .._compat import SIMULATOR

_I32 = ir.IntType(32)


def _c(v):
    return ir.Constant(_I32, v)


def nan_flag_ir(builder, w):
    """IR for :func:`nan_bytes`: bit 7 of each byte of the i32 ``w`` set where that byte is
    an E4M3 NaN code (0x7F / 0xFF), all else 0."""
    return builder.and_(builder.add(builder.and_(w, _c(0x7F7F7F7F)), _c(0x01010101)),
                        _c(0x80808080 - (1 << 32)))


def decode_ir(builder, w):
    """IR for :func:`e4m3x4` on the i32 value ``w``; returns four float IR values."""
    nanflag = nan_flag_ir(builder, w)
    parts = []
    for k in range(4):
        t = builder.shl(w, _c(24 - 8 * k)) if k < 3 else w      # byte k in bits 24..31
        sgn = builder.and_(t, _c(-(1 << 31)))
        # arithmetic shift: the sign lands in bits 27..31, the magnitude in bits 20..26
        bits = builder.and_(builder.ashr(t, _c(4)), _c(0x87F00000 - (1 << 32)))
        parts.append((t, sgn, bits))
    anynan = builder.icmp_unsigned("!=", nanflag, _c(0))
    bb_from = builder.block
    bb_fix = builder.append_basic_block("e4m3_nan")
    bb_end = builder.append_basic_block("e4m3_done")
    builder.cbranch(anynan, bb_fix, bb_end)
    builder.position_at_end(bb_fix)
    fixed = []
    for t, sgn, bits in parts:
        isnan = builder.icmp_unsigned("==", builder.and_(t, _c(0x7F000000)), _c(0x7F000000))
        fixed.append(builder.select(isnan, builder.or_(sgn, _c(0x7FC00000)), bits))
    bb_fix_end = builder.block
    builder.branch(bb_end)
    builder.position_at_end(bb_end)
    phis = []
    for (t, sgn, bits), fx in zip(parts, fixed):
        phi = builder.phi(_I32)
        phi.add_incoming(bits, bb_from)
        phi.add_incoming(fx, bb_fix_end)
        phis.append(phi)
    return [builder.bitcast(phi, ir.FloatType()) for phi in phis]


def e4m3x4_py(w):
    """Reference (and simulator) rendering of :func:`e4m3x4`."""
    w = int(w) & 0xFFFFFFFF
    out = []
    for k in range(4):
        t = (w << (24 - 8 * k)) & 0xFFFFFFFF
        sgn = t & 0x80000000
        bits = ((t >> 4) & 0x07F00000) | sgn
        if (t & 0x7F000000) == 0x7F000000:
            bits = sgn | 0x7FC00000
        out.append(np.uint32(bits).view(np.float32))
    return out[0], out[1], out[2], out[3]


def e4m3x4_plain_py(w):
    """:func:`e4m3x4_py` without the NaN patch (right for words with no NaN code)."""
    w = int(w) & 0xFFFFFFFF
    out = []
    for k in range(4):
        t = (w << (24 - 8 * k)) & 0xFFFFFFFF
        out.append(np.uint32(((t >> 4) & 0x07F00000) | (t & 0x80000000)).view(np.float32))
    return out[0], out[1], out[2], out[3]


def plain_decode_ir(builder, w):
    """IR for :func:`e4m3x4_plain` on the i32 value ``w``; returns four float IR values."""
    out = []
    for k in range(4):
        t = builder.shl(w, _c(24 - 8 * k)) if k < 3 else w
        bits = builder.and_(builder.ashr(t, _c(4)), _c(0x87F00000 - (1 << 32)))
        out.append(builder.bitcast(bits, ir.FloatType()))
    return out


if SIMULATOR:
    SHARED_ALIGN = None          # the simulator refuses an explicit alignment

    def ld1(a, i):
        return a[i]

    def st1(a, i, x):
        a[i] = x

    def lds4(a, i):
        return a[i], a[i + 1], a[i + 2], a[i + 3]

    def sts4(a, i, x0, x1, x2, x3):
        a[i] = x0
        a[i + 1] = x1
        a[i + 2] = x2
        a[i + 3] = x3

    def ldg4(a, i0, i1, i2, i3):
        return a[i0, i1, i2, i3], a[i0, i1, i2, i3 + 1], a[i0, i1, i2, i3 + 2], a[i0, i1, i2, i3 + 3]

    def ldb4(a, i0, i1, i2, i3):
        return np.uint32(int(a[i0, i1, i2, i3]) | (int(a[i0, i1, i2, i3 + 1]) << 8)
                         | (int(a[i0, i1, i2, i3 + 2]) << 16) | (int(a[i0, i1, i2, i3 + 3]) << 24))

    e4m3x4 = e4m3x4_py
    e4m3x4_plain = e4m3x4_plain_py

    def _data_bytes(a):
        """The bytes of a (simulated) device array from its first element on."""
        item = a.__dict__.get("_item", a)
        arr = getattr(item, "_ary", item)
        span = sum((n - 1) * st for n, st in zip(arr.shape, arr.strides)) + arr.itemsize
        ptr = arr.__array_interface__["data"][0]
        return (ctypes.c_uint8 * span).from_address(ptr)

    def ldg4_at(a, off):
        raw = bytes(_data_bytes(a)[off:off + 16])
        w = np.frombuffer(raw, dtype="<u4")
        return np.uint32(w[0]), np.uint32(w[1]), np.uint32(w[2]), np.uint32(w[3])

    def ldb4_at(a, off):
        return np.uint32(int.from_bytes(bytes(_data_bytes(a)[off:off + 4]), "little"))

    def nan_bytes(w):
        w = int(w)
        return np.uint32((((w & 0x7F7F7F7F) + 0x01010101) & 0x80808080))

    def add32(a, b):
        return np.int32(int(a) + int(b))

    def mul32(a, b):
        return np.int32(int(a) * int(b))

    def shr32(a, b):
        return np.int32(int(a) >> int(b))

    def and32(a, b):
        return np.int32(int(a) & int(b))

    def lt32(a, b):
        return int(a) < int(b)

    def opaque32(w):
        return np.uint32(w)

else:
    from numba.cuda import cgutils
    from numba.cuda import types as ntypes
    from numba.cuda.extending import intrinsic
    from numba.cuda.typing import signature

    SHARED_ALIGN = 16

    def _ptr(context, builder, aryty, ary_val, inds):
        ary = context.make_array(aryty)(context, builder, ary_val)
        return cgutils.get_item_pointer(context, builder, aryty, ary, inds, wraparound=False)

    def _intp(context, builder, val, ty):
        return context.cast(builder, val, ty, ntypes.intp)

    def _load4(context, builder, p, elty, rettype):
        """One 16-byte load of four ``elty`` values at ``p`` (16-byte aligned), as a tuple."""
        vt = ir.VectorType(elty, 4)
        v = builder.load(builder.bitcast(p, vt.as_pointer(p.type.addrspace)), align=16)
        return context.make_tuple(builder, rettype, [builder.extract_element(v, _c(k)) for k in range(4)])

    def _word_of_bytes(builder, p):
        """The four bytes at ``p`` as one little-endian i32 (four byte loads)."""
        w = None
        for k in range(4):
            b = builder.zext(builder.load(builder.gep(p, [ir.Constant(ir.IntType(64), k)])), _I32)
            b = builder.shl(b, _c(8 * k)) if k else b
            w = b if w is None else builder.or_(w, b)
        return w

    def _f32_1d(a, i):
        return (isinstance(a, ntypes.Array) and a.ndim == 1 and a.dtype == ntypes.float32
                and isinstance(i, ntypes.Integer))

    @intrinsic
    def ld1(typingctx, a, i):
        if not _f32_1d(a, i):
            return None
        sig = signature(ntypes.float32, a, i)

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig.args[0], args[0],
                     [_intp(context, builder, args[1], sig.args[1])])
            return builder.load(p, align=4)

        return sig, codegen

    @intrinsic
    def st1(typingctx, a, i, x):
        if not _f32_1d(a, i):
            return None
        sig = signature(ntypes.none, a, i, ntypes.float32)

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig.args[0], args[0],
                     [_intp(context, builder, args[1], sig.args[1])])
            builder.store(args[2], p, align=4)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def lds4(typingctx, a, i):
        if not _f32_1d(a, i):
            return None
        sig = signature(ntypes.UniTuple(ntypes.float32, 4), a, i)

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig.args[0], args[0],
                     [_intp(context, builder, args[1], sig.args[1])])
            return _load4(context, builder, p, ir.FloatType(), sig.return_type)

        return sig, codegen

    @intrinsic
    def sts4(typingctx, a, i, x0, x1, x2, x3):
        if not _f32_1d(a, i):
            return None
        sig = signature(ntypes.none, a, i, ntypes.float32, ntypes.float32, ntypes.float32,
                        ntypes.float32)

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig.args[0], args[0],
                     [_intp(context, builder, args[1], sig.args[1])])
            vt = ir.VectorType(ir.FloatType(), 4)
            v = ir.Constant(vt, ir.Undefined)
            for k in range(4):
                v = builder.insert_element(v, args[2 + k], _c(k))
            builder.store(v, builder.bitcast(p, vt.as_pointer(p.type.addrspace)), align=16)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def ldg4(typingctx, a, i0, i1, i2, i3):
        if not (isinstance(a, ntypes.Array) and a.ndim == 4 and a.dtype == ntypes.uint32):
            return None
        sig = signature(ntypes.UniTuple(ntypes.uint32, 4), a, i0, i1, i2, i3)

        def codegen(context, builder, sig, args):
            inds = [_intp(context, builder, args[1 + k], sig.args[1 + k]) for k in range(4)]
            p = _ptr(context, builder, sig.args[0], args[0], inds)
            return _load4(context, builder, p, _I32, sig.return_type)

        return sig, codegen

    @intrinsic
    def ldb4(typingctx, a, i0, i1, i2, i3):
        if not (isinstance(a, ntypes.Array) and a.ndim == 4 and a.dtype == ntypes.uint8):
            return None
        sig = signature(ntypes.uint32, a, i0, i1, i2, i3)

        def codegen(context, builder, sig, args):
            inds = [_intp(context, builder, args[1 + k], sig.args[1 + k]) for k in range(4)]
            return _word_of_bytes(builder, _ptr(context, builder, sig.args[0], args[0], inds))

        return sig, codegen

    @intrinsic
    def nan_bytes(typingctx, w):
        if not (isinstance(w, ntypes.Integer) and w.bitwidth == 32):
            return None
        sig = signature(ntypes.uint32, w)

        def codegen(context, builder, sig, args):
            return nan_flag_ir(builder, args[0])

        return sig, codegen

    def _decode_intrinsic(build_ir):
        """An intrinsic (u32 word) -> four float32 whose IR ``build_ir`` writes."""
        @intrinsic
        def dec(typingctx, w):
            if not (isinstance(w, ntypes.Integer) and w.bitwidth == 32):
                return None
            sig = signature(ntypes.UniTuple(ntypes.float32, 4), w)

            def codegen(context, builder, sig, args):
                return context.make_tuple(builder, sig.return_type, build_ir(builder, args[0]))

            return sig, codegen
        return dec

    e4m3x4 = _decode_intrinsic(decode_ir)

    def _data_i8(context, builder, aryty, ary_val, off, offty):
        ary = context.make_array(aryty)(context, builder, ary_val)
        data = ary.data
        i8p = ir.IntType(8).as_pointer(data.type.addrspace)
        return builder.gep(builder.bitcast(data, i8p), [_intp(context, builder, off, offty)])

    @intrinsic
    def ldg4_at(typingctx, a, off):
        if not (isinstance(a, ntypes.Array) and a.dtype == ntypes.uint32
                and isinstance(off, ntypes.Integer)):
            return None
        sig = signature(ntypes.UniTuple(ntypes.uint32, 4), a, off)

        def codegen(context, builder, sig, args):
            p = _data_i8(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            return _load4(context, builder, p, _I32, sig.return_type)

        return sig, codegen

    @intrinsic
    def ldb4_at(typingctx, a, off):
        if not (isinstance(a, ntypes.Array) and a.dtype == ntypes.uint8
                and isinstance(off, ntypes.Integer)):
            return None
        sig = signature(ntypes.uint32, a, off)

        def codegen(context, builder, sig, args):
            return _word_of_bytes(builder, _data_i8(context, builder, sig.args[0], args[0],
                                                    args[1], sig.args[1]))

        return sig, codegen

    e4m3x4_plain = _decode_intrinsic(plain_decode_ir)

    def _as_i32(builder, v):
        w = v.type.width
        return v if w == 32 else (builder.trunc(v, _I32) if w > 32 else builder.sext(v, _I32))

    def _i32_op(emit, boolean=False):
        """An intrinsic (integer, integer) -> int32 (or boolean) whose two operands are cut
        or sign-extended to 32 bits and combined by ``emit(builder, a, b)``."""
        @intrinsic
        def op(typingctx, a, b):
            if not (isinstance(a, ntypes.Integer) and isinstance(b, ntypes.Integer)):
                return None
            sig = signature(ntypes.boolean if boolean else ntypes.int32, a, b)

            def codegen(context, builder, sig, args):
                return emit(builder, _as_i32(builder, args[0]), _as_i32(builder, args[1]))

            return sig, codegen
        return op

    add32 = _i32_op(lambda b, x, y: b.add(x, y))
    mul32 = _i32_op(lambda b, x, y: b.mul(x, y))
    shr32 = _i32_op(lambda b, x, y: b.ashr(x, y))
    and32 = _i32_op(lambda b, x, y: b.and_(x, y))
    lt32 = _i32_op(lambda b, x, y: b.icmp_signed("<", x, y), boolean=True)

    @intrinsic
    def opaque32(typingctx, w):
        if not isinstance(w, ntypes.Integer):
            return None
        sig = signature(ntypes.uint32, w)

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_I32]), "mov.b32 $0, $1;", "=r,r")
            return builder.call(asm, [_as_i32(builder, args[0])])

        return sig, codegen
