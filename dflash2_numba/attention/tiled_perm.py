"""Register-tiled q8 attention with K in permuted key order ("tiled_perm"): ``tiled_compact``'s
kernel built with three of its generator's layout / schedule options, chosen by measurement.

Keeps: contract A bit for bit, by ``tiled_compact``'s argument (``tiled.py``'s docstring):
the options move values between shared-memory addresses and registers and reorder loads,
never an arithmetic operation, its operands or its order. The combine is
``combine_batched``'s: frozen's combine with its workspace loads batched, the same bits.

The options (``tiled_compact._source``; all three byte-checked against the registered
kernel in the simulator and on the GPU):
  * ``k_perm``: K and the slice sums u hold a tile's keys in the order (j mod 8, j div 8),
    so a softmax thread's four keys kq + 8m are adjacent (one 16-byte load per slice in the
    Kahan step instead of four) and, at D = 256, a load thread's four chunks land in
    adjacent words (one 16-byte decode store per K value row instead of four);
  * ``nan_once``: one NaN-code test over all of a thread's V words (and K words) of a tile
    behind an opaque move, then one straight decode path, instead of a test and a branch per
    word;
  * ``k_late``: the next tile's K is loaded from global memory at the start of this tile's
    PV and decoded after it, so its words are not live across the score loop.

Measured (H100 80GB HBM3, one layer's split kernel at 261888 tokens, interleaved A/B against
the registered ``tiled_compact`` kernel, ``bench/profile_kernels.py attn-ab``; RESULTS.md,
"Attention, session 30"): 0.777 against 0.837 ms (medians of 7 rounds). ``pv_pairs`` and
``loop32`` were each slower alone and added nothing together with these; ``q_batch``,
``u_mul_first`` and ``loop32`` on top of these three were slower too (session 32). The
whole 16-layer step (CUDA graph, H100, session 32): 12.19 ms at 261888 tokens with the
batched combine, 12.57 ms with frozen's, in one run. Those were contracted builds (every GPU
build before session 40 fused ``a*b + c``); built as the contract says, 12.49 ms on an H100
(``bench/RESULTS.md``, "Validation, session 40").

Below compute capability 8.0 the variant launches ``tiled_compact``'s sm_70 kernels (O
updated after the tile's last barrier, u packed: 91,408 bytes at D = 256, inside a V100's
96 KB a CTA) under its own names: ``k_perm``'s padded K rows would not fit a V100 at D = 256.
"""
from __future__ import annotations

from .._compat import cuda
from .._dynshared import DynShared
from .._registry import KernelSpec, Variant, launch, register
from . import combine_batched, tiled
from . import tiled_compact as TC

OPTIONS = dict(k_perm=True, nan_once=True, k_late=True)     # with tiled_compact's defer_o
_SMEM_BYTES = {(D, perm): (TC.smem_bytes(D, **OPTIONS) if perm else TC._SMEM_BYTES[D, False])
               for D in (64, 128, 256) for perm in (True, False)}
_pyfuncs = {}
_kernels = {}
for _D in (64, 128, 256):
    for _vec in (True, False):
        _pyfuncs[_D, _vec, True] = TC._make_split_kernel(_D, _vec, defer_o=True, **OPTIONS)
        _kernels[_D, _vec, True] = cuda.jit(_pyfuncs[_D, _vec, True])
        _pyfuncs[_D, _vec, False] = TC._pyfuncs[_D, _vec, False]
        _kernels[_D, _vec, False] = TC._kernels[_D, _vec, False]


def _split_name(D, vec, perm=True):
    return (f"attention.tiled_perm.split.d{D}" + ("" if vec else ".bytes")
            + ("" if perm else ".sm70"))


def perm_here() -> bool:
    """The permuted form except where the sm_70 forms run (``tiled.sm70_form_here``)."""
    return not tiled.sm70_form_here()


def supports(plan: dict) -> None:
    tiled.check_rows(plan, "tiled_perm")
    tiled.check_shared_fits("tiled_perm", _SMEM_BYTES[plan["D"], perm_here()])


def split_launch(plan, perm=None):
    """(name, kernel, grid, args) of the plan's split launch; ``perm``: the form (default the
    current device's)."""
    D, vec, grid, args = tiled.split_operands(plan)
    perm = perm_here() if perm is None else bool(perm)
    return (_split_name(D, vec, perm), DynShared(_kernels[D, vec, perm], _SMEM_BYTES[D, perm]),
            grid, args)


def run(plan, stream) -> None:
    name, kern, grid, args = plan.launch_setup("tiled_perm.split", split_launch)
    launch(name, kern, grid, TC.NT, stream, *args)
    combine_batched.launch_combine(plan, stream, "tiled_perm")


VARIANT = register(Variant(
    name="tiled_perm",
    family="attention",
    description="tiled_compact's split kernel with K and the slice sums in (j mod 8, j div 8) "
                "key order (16-byte Kahan loads and K decode stores), one NaN-code test per "
                "tile and the next tile's K loaded at PV; tiled_compact's sm_70 form below "
                "cc 8.0; the batched combine",
    contract="A (q8 verification attention), bit-identical to frozen",
    kernels=tuple(
        KernelSpec(_split_name(D, vec, perm), _pyfuncs[D, vec, perm],
                   ((tiled._sig_vec if vec else tiled._sig_byte),),
                   **tiled.form_cc_range(not perm))
        for perm in (True, False) for D in (256, 128, 64) for vec in (True, False)
    ) + combine_batched.combine_specs("tiled_perm"),
    run=run,
    supports=supports,
    bitwise_reference="frozen",
))
