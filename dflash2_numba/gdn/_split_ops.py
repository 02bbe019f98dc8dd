"""Device building blocks shared by the optimised chunked-family kernels (the pre-passes,
state passes and output kernels of ``chunked_split`` onwards): the shared-memory layout
constants, and one-instruction loads / stores / fma groups.

On a GPU these are numba device functions and intrinsics (one ld/st instruction each, no
negative-index wraparound, 16-byte vector accesses where the caller guarantees alignment).
On the simulator they are plain Python with the same arithmetic (the simulator's per-call
module swap of device functions would dominate its run time); ``fma4`` there calls the
correctly rounded host fma that the simulator's own ``cuda.fma`` uses for float32 operands,
with its canonical NaN.
No value is computed here: every function is a load, a store, or ``cuda.fma`` itself.
"""
from __future__ import annotations

import threading

from .._compat import SIMULATOR, cuda
from ._common import C, MAXD

CP1 = C + 1      # row stride of Ms (S | G^T)
TS = C + 4       # row stride of Ts (D -> A, T^T): 16-byte rows
SW = 32          # columns of X (for W) or Y (for U) staged per slab
SW4 = SW // 4
XS = SW + 4      # row stride of the slab (16-byte rows, 4-way instead of 32-way conflicts)
                 # and of step 1's k / q rows staged in Xs / Ts
VS = 12          # most state columns one state CTA owns (w in {4, 8, 12})
N_MS = C * CP1   # shared array sizes (compile-time constants)
N_TS = C * TS
N_XS = C * XS
N_HS = MAXD * VS
N_VS = C * VS

if SIMULATOR:
    from .._simulator import fma32_gpu as _fma   # the simulator's cuda.fma for float32

    SHARED_ALIGN = None          # the simulator refuses an explicit alignment

    def _dev(fn):
        return fn

    def fma2(a, b, c):
        """``(fma(a, b0, c0), fma(a, b1, c1))``: two independent chains, one step each."""
        return (_fma(a, b[0], c[0]), _fma(a, b[1], c[1]))

    def fma4(a, b, c):
        """``(fma(a, b0, c0), .., fma(a, b3, c3))``: four independent chains, one step each."""
        return (_fma(a, b[0], c[0]), _fma(a, b[1], c[1]), _fma(a, b[2], c[2]),
                _fma(a, b[3], c[3]))

    def ld1(a, i):
        return a[i]

    def ld2(a, i):
        return (a[i], a[i + 1])

    def ld4(a, i):
        return (a[i], a[i + 1], a[i + 2], a[i + 3])

    def st4(a, i, x):
        a[i] = x[0]
        a[i + 1] = x[1]
        a[i + 2] = x[2]
        a[i + 3] = x[3]

    def pf1(a, i):
        pass

    def pf2(a, i):
        pass

    def opaque(i):
        return i

    def block_sync():
        # (the simulator's CTA barrier; its cuda.syncthreads is bound per kernel module)
        threading.current_thread().syncthreads()

else:
    from llvmlite import ir
    from numba.cuda import cgutils
    from numba.cuda import types as ntypes
    from numba.cuda.extending import intrinsic
    from numba.cuda.typing import signature

    SHARED_ALIGN = 16

    def _dev(fn):
        return cuda.jit(device=True)(fn)

    @cuda.jit(device=True)
    def fma2(a, b, c):
        """``(fma(a, b0, c0), fma(a, b1, c1))``: two independent chains, one step each."""
        return (cuda.fma(a, b[0], c[0]), cuda.fma(a, b[1], c[1]))

    @cuda.jit(device=True)
    def fma4(a, b, c):
        """``(fma(a, b0, c0), .., fma(a, b3, c3))``: four independent chains, one step each."""
        return (cuda.fma(a, b[0], c[0]), cuda.fma(a, b[1], c[1]), cuda.fma(a, b[2], c[2]),
                cuda.fma(a, b[3], c[3]))

    def _ok(a, i):
        return (isinstance(a, ntypes.Array) and a.ndim == 1 and a.dtype == ntypes.float32
                and isinstance(i, ntypes.Integer))

    def _ptr(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = context.cast(builder, args[1], sig.args[1], ntypes.intp)
        return cgutils.get_item_pointer(context, builder, aryty, ary, [idx], wraparound=False)

    _V4 = ir.VectorType(ir.FloatType(), 4)

    @intrinsic
    def ld1(typingctx, a, i):
        """``a[i]`` of a 1-D float32 array (one load, no wraparound)."""
        if not _ok(a, i):
            return None

        def codegen(context, builder, sig, args):
            return builder.load(_ptr(context, builder, sig, args), align=4)

        return signature(ntypes.float32, a, i), codegen

    def _vector_load(width):
        """An intrinsic ``(a, i) -> a[i .. i + width - 1]`` of a 1-D float32 array as one
        ``4 * width``-byte load (``i`` a multiple of ``width``, the array aligned to that)."""
        vty = ir.VectorType(ir.FloatType(), width)
        rty = ntypes.UniTuple(ntypes.float32, width)

        def load(typingctx, a, i):
            if not _ok(a, i):
                return None

            def codegen(context, builder, sig, args):
                p = _ptr(context, builder, sig, args)
                vec = builder.load(builder.bitcast(p, vty.as_pointer(p.type.addrspace)),
                                   align=4 * width)
                vals = [builder.extract_element(vec, ir.Constant(ir.IntType(32), t))
                        for t in range(width)]
                return context.make_tuple(builder, rty, vals)

            return signature(rty, a, i), codegen

        load.__name__ = f"ld{width}"
        return intrinsic(load)

    ld2 = _vector_load(2)     # one 8-byte load
    ld4 = _vector_load(4)     # one 16-byte load

    @intrinsic
    def st4(typingctx, a, i, x):
        """``a[i .. i+3] = x`` (a 4-tuple of float32) as one 16-byte store."""
        if not _ok(a, i):
            return None

        def codegen(context, builder, sig, args):
            p = _ptr(context, builder, sig, args)
            vec = ir.Constant(_V4, ir.Undefined)
            for t in range(4):
                vec = builder.insert_element(vec, builder.extract_value(args[2], t),
                                             ir.Constant(ir.IntType(32), t))
            builder.store(vec, builder.bitcast(p, _V4.as_pointer(p.type.addrspace)), align=16)
            return context.get_dummy_value()

        return signature(ntypes.none, a, i, x), codegen

    def _prefetch(level):
        """An intrinsic ``(a, i)``: ``prefetch.global.<level>`` of the line holding ``a[i]``
        (no register result, no effect on any value)."""
        def prefetch(typingctx, a, i):
            if not _ok(a, i):
                return None

            def codegen(context, builder, sig, args):
                p = _ptr(context, builder, sig, args)
                asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [p.type]),
                                   f"prefetch.global.{level} [$0];", "l", side_effect=True)
                builder.call(asm, [p])
                return context.get_dummy_value()

            return signature(ntypes.none, a, i), codegen

        prefetch.__name__ = f"pf_{level}"
        return intrinsic(prefetch)

    pf1 = _prefetch("L1")     # into L1
    pf2 = _prefetch("L2")     # into L2

    @intrinsic
    def block_sync(typingctx):
        """The CTA barrier as ``barrier.sync 0`` (PTX ISA 6.0, sm_70): the form that threads
        may reach at *different* barrier instructions (warp-specialised code, where copy
        and compute warps run separate loops), unlike ``cuda.syncthreads()``'s aligned
        ``bar.sync 0``, which every thread of the CTA must execute at the same
        instruction. A memory clobber keeps the compiler from moving shared-memory
        accesses across it; its ordering guarantees are the aligned barrier's."""
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "barrier.sync 0;",
                               "~{memory}", side_effect=True)
            builder.call(asm, [])
            return context.get_dummy_value()

        return signature(ntypes.none), codegen

    @intrinsic
    def opaque(typingctx, i):
        """``i`` (an int32) through one volatile ``mov``: the same value, but one the
        compiler cannot hoist out of a loop (so index arithmetic derived from it is redone
        where it is used instead of being kept in registers across the loop)."""
        if not (isinstance(i, ntypes.Integer) and i.bitwidth == 32):
            return None

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(32), [ir.IntType(32)]),
                               "mov.b32 $0, $1;", "=r,r", side_effect=True)
            return builder.call(asm, [args[0]])

        return signature(i, i), codegen

