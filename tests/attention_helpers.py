"""Shared helpers for the attention test suites (simulator and GPU)."""
from __future__ import annotations

import numpy as np

import oracle
from dflash2_numba.contract import FP32_REL_L2_BOUND
from dflash2_numba.screen.variant_steps import fp16_oracle_problems


def attention_variants_accepting(D):
    """The registered attention variants (frozen included) whose ``supports`` accepts head
    dim ``D`` in a production-like row layout (Q = 8, G = 6), in registration order: what a
    test over every variant may run on its cases of that head dim."""
    from dflash2_numba import _registry
    from dflash2_numba._registry import UnsupportedShape

    shape = dict(B=1, Q=8, Hq=6, Hkv=1, D=D, page_size=16, splits=4)
    names = []
    for name, v in _registry.variants("attention").items():
        try:
            v.supports(shape)
        except UnsupportedShape:
            continue
        names.append(name)
    return names


def case(rng, **kw):
    """Keyword arguments for verify_attention / attention_reference (oracle's generator)."""
    return oracle.random_attention_case(rng, **kw)


def tiny_case():
    """One request of six keys in four-key pages, Q = 2, one head of D = 64 and a spare
    page: the smallest call the argument-check tests launch."""
    return oracle.random_attention_case(np.random.default_rng(0), B=1, Q=2, Hq=1, Hkv=1, D=64,
                                        page_size=4, seq_lens=[6], strided=False, extra_pages=1)


def run(d2, c, **kw):
    args = {k: v for k, v in c.items()}
    args.update(kw)
    return d2.verify_attention(**args)


def sentinel_run(d2, c, variant, splits, out_dtype="float16"):
    """``(result, guards_intact)`` of ``verify_attention`` into a fresh workspace filled with
    the sentinel: the whole ``partial`` / ``lse`` then compare byte for byte between calls,
    the splits the contract leaves unwritten (s >= A) included, where a fresh device array
    would hold whatever its memory held before."""
    B, Q, Hq, D = c["q"].shape
    ws = d2.AttentionWorkspace(batch=B, q_len=Q, heads=Hq, head_dim=D, splits=splits,
                               out_dtype=out_dtype)
    ws.fill_sentinel()
    r = d2.verify_attention(**c, splits=splits, variant=variant, workspace=ws,
                            out_dtype=out_dtype)
    return r, ws.guards_intact()


def decode_on_cpu(build_ir, words):
    """Run a decode IR builder (``_tiled_ops.decode_ir`` or ``plain_decode_ir``: i32 word ->
    four float32) through numba's CPU target over ``words``; returns float32 [n, 4]."""
    from numba import njit
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def dec(typingctx, w):
        sig = types.UniTuple(types.float32, 4)(w)

        def codegen(context, builder, sig, args):
            return context.make_tuple(builder, sig.return_type, build_ir(builder, args[0]))
        return sig, codegen

    @njit
    def run(ws, out):
        for i in range(ws.shape[0]):
            a, b, c, e = dec(ws[i])
            out[i, 0] = a
            out[i, 1] = b
            out[i, 2] = c
            out[i, 3] = e

    out = np.zeros((len(words), 4), np.float32)
    run(np.asarray(words, np.uint32), out)
    return out




def check_against_oracle(out32, out16, ref, rel_bound=FP32_REL_L2_BOUND):
    """The FP32 pre-cast output within rel L2 ``rel_bound`` of the FP64 oracle and, per
    element, within ``rel_bound * max|ref|`` (max abs); the FP16 output the RNE rounding of
    the FP32 one, and against the oracle within what one rounding of a result inside those
    bounds allows (``oracle.fp16_rel_l2_bound``, ``oracle.fp16_excess``: bounds derived
    from the FP32 bound, not from the FP32 result, so a wrong FP16 output fails)."""
    rel = oracle.rel_l2(out32, ref)
    assert rel <= rel_bound, f"rel L2 {rel:.3e} > {rel_bound}"
    abs_bound = oracle.max_abs_bound(ref, rel_bound)
    mx = oracle.max_abs(out32, ref)
    assert mx <= abs_bound, f"max abs {mx:.3e} > {abs_bound:.3e}"
    assert np.array_equal(out16, out32.astype(np.float16)), "FP16 output is not f16(FP32 output)"
    problems = fp16_oracle_problems(out16, ref, rel_bound)
    assert not problems, problems
    return rel
