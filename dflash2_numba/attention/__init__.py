"""q8 verification attention (contract part A): API and registered variants."""
from . import frozen  # noqa: F401  (registers "frozen")
from . import tiled  # noqa: F401  (registers "tiled")
from .api import AttentionPlan, AttentionResult, plan_attention, verify_attention

__all__ = ["AttentionPlan", "AttentionResult", "plan_attention", "verify_attention"]
