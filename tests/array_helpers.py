"""Shared helpers for tests that pass a call's arguments as device arrays."""
from __future__ import annotations

import numpy as np


def device_copies(args: dict) -> dict:
    """``args`` with every numpy value replaced by a numba device copy of it (other values,
    scalars and None, as they are): the same call, zero-copy on the device."""
    from dflash2_numba._compat import cuda

    return {k: cuda.to_device(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
