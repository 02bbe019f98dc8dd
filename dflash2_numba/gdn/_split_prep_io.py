"""Memory accesses of the ``chunked_split`` pre-pass (:mod:`._split_prep`) as single
instructions, with 32-bit offsets.

* ``view(a, base)``: the flat elements ``base ..`` of the C-contiguous global array ``a``
  (any rank) as a 1-D array (a chunk's first row of q / k / v, a slot of the scratch, one
  thread's column of them). On a GPU the
  new data pointer is computed once and hidden from the optimiser (an empty ``mov``), so
  that an access is that pointer plus a 32-bit offset (one wide multiply-add) instead of a
  64-bit sum rebuilt per access.
* ``ldx(a, off)`` (float16 / float32, widened to float32: ``fpext``, exact, the value
  ``np.float32(x)`` gives), ``ld4x`` / ``st4x`` (16-byte, float32), ``stx``: element
  ``off`` of such a view, as ld/st.global, ``0 <= off < 2**31`` (the offset is truncated
  to 32 bits; no wraparound logic).
* ``pfx1(a, off)``: ``prefetch.global.L1`` of the line holding element ``off`` of such a
  view (no value; a no-op on the simulator).
* ``st1(a, i, x)``: ``a[i] = x`` for a 1-D float32 (shared) array without wraparound (the
  store counterpart of ``_split_ops.ld1``).
* ``i32(x)``: ``x`` as an int32 (for index arithmetic the caller knows fits in 32 bits; it
  lets the compiler keep offset arithmetic 32-bit).

On the simulator they are plain Python on numpy views. No value is computed here: every
function is a load, a store, a widening or an index conversion.
"""
from __future__ import annotations

import numpy as np

from .._compat import SIMULATOR

if SIMULATOR:
    _F32 = np.float32

    def view(a, base):
        # the GPU intrinsic types only layout "C"; numpy's reshape would copy a strided
        # array silently (a result here, a typing error on the GPU)
        # numba types an array with a zero stride as layout "A" even on an axis of size 1
        # (numpy calls it C-contiguous): on the GPU the intrinsic refuses it at typing
        if not a.flags.c_contiguous or (a.size and 0 in a.strides):
            raise TypeError("view: needs a C-contiguous array")
        return a.reshape(-1)[base:]

    def ldx(a, off):
        return _F32(a[off])

    def stx(a, off, x):
        a[off] = x

    # on numpy views a 16-byte access is the plain element-wise one of _split_ops
    from ._split_ops import ld4 as ld4x, st4 as st4x  # noqa: F401

    def st1(a, i, x):
        a[i] = x

    def i32(x):
        return x

    def pfx1(a, off):
        pass

else:
    from llvmlite import ir
    from numba.cuda import types as ntypes
    from numba.cuda.extending import intrinsic
    from numba.cuda.typing import signature

    _I32 = ir.IntType(32)
    _I64 = ir.IntType(64)
    _V4 = ir.VectorType(ir.FloatType(), 4)
    _IN = (ntypes.float16, ntypes.float32)

    def _flat1(a, dtypes):
        return (isinstance(a, ntypes.Array) and a.ndim == 1 and a.layout == "C"
                and a.dtype in dtypes)

    def _at(context, builder, aryty, ary, offty, off):
        """``&a[off]`` as a global pointer: ``data + sext(off32) * itemsize`` (an explicit
        ``mul.wide.s32`` and an add: one IMAD.WIDE; the offset is truncated to 32 bits, so
        the compiler keeps the offset arithmetic feeding it 32-bit too)."""
        arr = context.make_array(aryty)(context, builder, ary)
        o = builder.trunc(context.cast(builder, off, offty, ntypes.int64), _I32)
        size = ir.Constant(_I32, aryty.dtype.bitwidth // 8)
        asm = ir.InlineAsm(ir.FunctionType(_I64, [_I32, _I32]),
                           "mul.wide.s32 $0, $1, $2;", "=l,r,r", side_effect=False)
        p = builder.add(builder.ptrtoint(arr.data, _I64), builder.call(asm, [o, size]))
        return builder.inttoptr(p, ir.PointerType(arr.data.type.pointee, 1))

    @intrinsic
    def view(typingctx, a, base):
        """``a.reshape(-1)[base:]`` (``a`` C-contiguous, any rank)."""
        if not (isinstance(a, ntypes.Array) and a.layout == "C"
                and isinstance(base, ntypes.Integer)):
            return None
        rty = ntypes.Array(a.dtype, 1, "C")

        def codegen(context, builder, sig, args):
            aryty = sig.args[0]
            arr = context.make_array(aryty)(context, builder, args[0])
            b = context.cast(builder, args[1], sig.args[1], ntypes.int64)
            p = builder.gep(arr.data, [b], inbounds=True)
            asm = ir.InlineAsm(ir.FunctionType(_I64, [_I64]), "mov.b64 $0, $1;", "=l,l",
                               side_effect=False)
            p = builder.inttoptr(builder.call(asm, [builder.ptrtoint(p, _I64)]), p.type)
            n = ir.Constant(_I64, 1)
            for d in range(aryty.ndim):
                n = builder.mul(n, builder.extract_value(arr.shape, d))
            out = context.make_array(sig.return_type)(context, builder)
            itemsize = context.get_constant(ntypes.intp,
                                            context.get_abi_sizeof(context.get_data_type(
                                                aryty.dtype)))
            context.populate_array(out, data=p, shape=[builder.sub(n, b)], strides=[itemsize],
                                   itemsize=itemsize, meminfo=None)
            return out._getvalue()

        return signature(rty, a, base), codegen

    @intrinsic
    def ldx(typingctx, a, off):
        """``float32(a[off])`` (1-D float16 / float32; one load)."""
        if not (_flat1(a, _IN) and isinstance(off, ntypes.Integer)):
            return None

        def codegen(context, builder, sig, args):
            p = _at(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            val = builder.load(p, align=sig.args[0].dtype.bitwidth // 8)
            return context.cast(builder, val, sig.args[0].dtype, ntypes.float32)

        return signature(ntypes.float32, a, off), codegen

    @intrinsic
    def stx(typingctx, a, off, x):
        """``a[off] = x`` (1-D float32; one store)."""
        if not (_flat1(a, (ntypes.float32,)) and isinstance(off, ntypes.Integer)):
            return None

        def codegen(context, builder, sig, args):
            p = _at(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            builder.store(context.cast(builder, args[2], sig.args[2], ntypes.float32), p,
                          align=4)
            return context.get_dummy_value()

        return signature(ntypes.none, a, off, x), codegen

    @intrinsic
    def st4x(typingctx, a, off, x):
        """``a[off .. off+3] = x`` (a 4-tuple of float32) as one 16-byte store (the address
        must be 16-byte aligned)."""
        if not (_flat1(a, (ntypes.float32,)) and isinstance(off, ntypes.Integer)):
            return None

        def codegen(context, builder, sig, args):
            p = _at(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            vec = ir.Constant(_V4, ir.Undefined)
            for t in range(4):
                vec = builder.insert_element(vec, builder.extract_value(args[2], t),
                                             ir.Constant(_I32, t))
            builder.store(vec, builder.bitcast(p, _V4.as_pointer(p.type.addrspace)), align=16)
            return context.get_dummy_value()

        return signature(ntypes.none, a, off, x), codegen

    @intrinsic
    def ld4x(typingctx, a, off):
        """``a[off .. off+3]`` (1-D float32) as one 16-byte global load (the address must be
        16-byte aligned)."""
        if not (_flat1(a, (ntypes.float32,)) and isinstance(off, ntypes.Integer)):
            return None
        rty = ntypes.UniTuple(ntypes.float32, 4)

        def codegen(context, builder, sig, args):
            p = _at(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            vec = builder.load(builder.bitcast(p, _V4.as_pointer(1)), align=16)
            vals = [builder.extract_element(vec, ir.Constant(_I32, t)) for t in range(4)]
            return context.make_tuple(builder, rty, vals)

        return signature(rty, a, off), codegen

    @intrinsic
    def pfx1(typingctx, a, off):
        """``prefetch.global.L1`` of the line holding element ``off`` of such a view (float16
        / float32; no register result, no effect on any value)."""
        if not (_flat1(a, _IN) and isinstance(off, ntypes.Integer)):
            return None

        def codegen(context, builder, sig, args):
            p = _at(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [_I64]),
                               "prefetch.global.L1 [$0];", "l", side_effect=True)
            builder.call(asm, [builder.ptrtoint(p, _I64)])
            return context.get_dummy_value()

        return signature(ntypes.none, a, off), codegen

    @intrinsic
    def st1(typingctx, a, i, x):
        """``a[i] = x`` of a 1-D float32 array (one store, no wraparound)."""
        if not (isinstance(a, ntypes.Array) and a.ndim == 1 and a.dtype == ntypes.float32
                and isinstance(i, ntypes.Integer)):
            return None

        def codegen(context, builder, sig, args):
            arr = context.make_array(sig.args[0])(context, builder, args[0])
            idx = context.cast(builder, args[1], sig.args[1], ntypes.intp)
            p = builder.gep(arr.data, [idx], inbounds=True)
            builder.store(context.cast(builder, args[2], sig.args[2], ntypes.float32), p,
                          align=4)
            return context.get_dummy_value()

        return signature(ntypes.none, a, i, x), codegen

    @intrinsic
    def i32(typingctx, x):
        """``x`` truncated to int32."""
        if not isinstance(x, ntypes.Integer):
            return None

        def codegen(context, builder, sig, args):
            return context.cast(builder, args[0], sig.args[0], ntypes.int32)

        return signature(ntypes.int32, x), codegen
