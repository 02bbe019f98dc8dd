"""dflash2_numba: q8 verification attention and GDN prefill kernels (numba.cuda,
compute capability 7.0 features only), with variant registries for screening.

Public names only; see shared/design/api.md.
"""
from . import _compat  # noqa: F401  (numpy / NVVM / simulator shims first)
from ._registry import UnsupportedShape, route_counters
from .contract import DEFAULT_SPLITS, SENTINEL

__all__ = [
    "UnsupportedShape", "route_counters", "DEFAULT_SPLITS", "SENTINEL",
    "attention_variants", "gdn_variants",
]

from ._registry import variants as _variants


def attention_variants():
    """``{name: {"description", "contract", "kernels", "bitwise_reference"}}`` for every
    attention variant (``kernels``: the names its launches count under, comma-separated;
    ``bitwise_reference``: the variant it must equal byte for byte, itself for a frozen one)."""
    return {n: v.describe() for n, v in _variants("attention").items()}


def gdn_variants():
    """``{name: {"description", "contract", "kernels", "bitwise_reference"}}`` for every
    GDN variant (``kernels``: the names its launches count under, comma-separated;
    ``bitwise_reference``: the variant it must equal byte for byte, itself for a frozen one)."""
    return {n: v.describe() for n, v in _variants("gdn").items()}

from .attention import AttentionPlan, AttentionResult, plan_attention, verify_attention  # noqa: E402
from .workspace import AttentionWorkspace  # noqa: E402

__all__ += ["AttentionPlan", "AttentionResult", "plan_attention", "verify_attention",
            "AttentionWorkspace"]
from .gdn import GdnCall, gdn_prefill, plan_gdn  # noqa: E402

__all__ += ["GdnCall", "gdn_prefill", "plan_gdn"]
