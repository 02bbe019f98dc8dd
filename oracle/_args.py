"""The oracle's one array conversion for arguments (plain numpy; no numba)."""
from __future__ import annotations

import numpy as np


def as_array(name, x) -> np.ndarray:
    """``np.asarray(x)``, or a ``TypeError`` naming the argument for what numpy cannot read
    as one array (a ragged list: numpy's own message names nothing)."""
    try:
        return np.asarray(x)
    except Exception as exc:  # noqa: BLE001  (numpy: ValueError for ragged nesting)
        raise TypeError(f"{name}: cannot be read as an array ({exc})") from None
