"""GDN (gated delta rule) prefill: the ``serial`` and ``chunked`` (frozen) families.

``gdn_prefill`` is the public entry point (:mod:`.api`); each family lives in its own
module with its FP32 operation order in the docstring (:mod:`.serial`, :mod:`.chunked`)
and registers itself as a ``gdn`` variant; :mod:`.emulate` is the same operation order in
numpy (bit-exact on the simulator).
"""
from . import chunked, serial  # noqa: F401  (register the variants)
from . import chunked_pipe, chunked_split, chunked_ws, chunked_wsr  # noqa: F401,E402  (optimised chunked variants)
from . import chunked_smprep, chunked_wsr_two_loop  # noqa: F401,E402
from . import chunked_rec, chunked_rec_pipe  # noqa: F401,E402
from . import chunked_ahead, chunked_overlap  # noqa: F401,E402
from .api import GdnCall, gdn_prefill, plan_gdn

__all__ = ["GdnCall", "gdn_prefill", "plan_gdn"]
