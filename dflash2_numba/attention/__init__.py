"""q8 verification attention (contract part A): API and registered variants."""
from . import frozen  # noqa: F401  (registers "frozen")
from . import tiled  # noqa: F401  (registers "tiled")
from . import tiled_compact  # noqa: F401  (registers "tiled_compact")
from . import tiled_wide  # noqa: F401  (registers "tiled_wide")
from . import tiled_perm  # noqa: F401  (registers "tiled_perm")
from .api import AttentionPlan, AttentionResult, plan_attention, verify_attention

__all__ = ["AttentionPlan", "AttentionResult", "plan_attention", "verify_attention"]
