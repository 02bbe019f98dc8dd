"""oracle: exact references for the dflash2-numba contracts (shared/design/contract.md).

Plain numpy / scipy / mpmath; never imports numba or ``dflash2_numba``.

* :func:`attention_reference` - contract A, exact verification attention (fp64 or mpmath).
* :func:`gdn_reference` - contract B, the gated delta rule token recurrence (fp64 or mpmath);
  :func:`gdn_reference_chunked` - contract B, the FP64 chunked algebra.
* :func:`rel_l2`, :func:`max_abs`, :func:`first_mismatch` - contract C comparisons;
  :func:`fp16_rel_l2_bound`, :func:`fp16_excess` - the FP16 output's bounds.
* :func:`run_selfcheck` - the oracle's own checks (``python -m oracle.selfcheck``).
"""
from .attention import (E4M3_TABLE, attention_reference, attention_reference_mp, decode_e4m3,
                        decode_e4m3_bits, qk_scale_f32, row_lengths_of)
from .gdn import gdn_reference, gdn_reference_chunked, gdn_reference_mp
from .metrics import (Mismatch, first_mismatch, fp16_excess, fp16_rel_l2_bound, max_abs,
                      max_abs_bound, rel_l2, ulp16)


def run_selfcheck(verbose=True) -> bool:
    """Run the oracle self-checks (see :mod:`oracle.selfcheck`); True when all pass."""
    from .selfcheck import run_selfcheck as _run

    return _run(verbose=verbose)


def __getattr__(name):
    # The case generators live in oracle.selfcheck, imported lazily so that
    # ``python -m oracle.selfcheck`` does not find the module pre-imported.
    if name in ("random_attention_case", "random_gdn_case"):
        from . import selfcheck

        return getattr(selfcheck, name)
    raise AttributeError(f"module 'oracle' has no attribute {name!r}")

__all__ = [
    "attention_reference", "attention_reference_mp", "gdn_reference", "gdn_reference_mp",
    "gdn_reference_chunked", "rel_l2", "max_abs", "first_mismatch", "Mismatch",
    "ulp16", "max_abs_bound", "fp16_rel_l2_bound", "fp16_excess",
    "run_selfcheck", "random_attention_case", "random_gdn_case",
    "E4M3_TABLE", "decode_e4m3", "decode_e4m3_bits", "qk_scale_f32", "row_lengths_of",
]
