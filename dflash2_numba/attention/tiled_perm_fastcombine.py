"""``tiled_perm``'s split kernel followed by the batched combine ("tiled_perm_fastcombine").

Keeps: contract A bit for bit. The split kernels are ``tiled_perm``'s (the same compiled
kernels, launched under this variant's names; both forms, ``tiled_compact``'s sm_70 one
below compute capability 8.0), and the combine is ``combine_batched``'s, which forms every
value of frozen's combine with the same expressions in the same order
(``combine_batched``'s docstring).

Why a variant of its own: the combine is the only change, so one benchmark run of this and
``tiled_perm`` side by side measures what the batched combine saves per layer. Prediction
(``bench/attention_fast_notes.md``, tenth round; not measured): frozen's combine is, by
estimate, a chain of 100-240 load latencies at A = 80 (the graph replay leaves about 38 us a
layer beside the split kernel's ncu time), and the batched one needs about 8 (one for
``lse``, five batches of ``partial``, the launch), about 4 us: some 0.4-0.5 ms less per 16
layers at 261888 tokens.
"""
from __future__ import annotations

from .._registry import KernelSpec, Variant, launch, register
from . import combine_batched
from . import tiled_compact as TC
from . import tiled_perm as TP
from .frozen import _combine_sigs

NAME = "tiled_perm_fastcombine"


def supports(plan: dict) -> None:
    TP.supports(plan, NAME)
    combine_batched.check_splits(plan, NAME)


def run(plan, stream) -> None:
    name, kern, grid, args = plan.launch_setup(
        f"{NAME}.split", lambda p: TP.split_launch(p, variant=NAME))
    launch(name, kern, grid, TC.NT, stream, *args)
    combine_batched.launch_combine(plan, stream, f"attention.{NAME}.combine")


VARIANT = register(Variant(
    name=NAME,
    family="attention",
    description="tiled_perm's split kernel, then a combine that stages each row's lse in "
                "shared memory and loads partial 16 splits at a time (64-thread CTAs per "
                "64 output columns) instead of one load per loop step",
    contract="A (q8 verification attention), bit-identical to frozen",
    kernels=TP.split_specs(NAME) + (KernelSpec(f"attention.{NAME}.combine",
                                               combine_batched.combine_pyfunc, _combine_sigs),),
    run=run,
    supports=supports,
    bitwise_reference="frozen",
))
