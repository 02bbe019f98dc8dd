"""The scratch a planned GDN call keeps between launches, found by walking the plan.

Used where a check must show that a launch rewrites what it reads: the scratch-fill tests
(every word overwritten after planning, the bytes unchanged) and the GDN bench's graph
check (the scratch NaN-filled before a replay, so a graph that skips a kernel cannot pass on
what the eager call left behind)."""
from dataclasses import is_dataclass
from types import SimpleNamespace

import numpy as np


def scratch_arrays(plan) -> list:
    """The FP32 device arrays a planned call keeps between calls (its scratch), found
    anywhere under ``plan.scratch`` through the containers plans build: namespaces,
    dataclass instances, lists, tuples and dicts. Nothing else is entered: a kernel, a
    stream or an event a namespace holds leads into numba's and Python's own objects (on a
    GPU, through their modules, to objects that answer any attribute)."""
    found, seen = [], set()

    def walk(x):
        if id(x) in seen:
            return
        seen.add(id(x))
        if hasattr(x, "copy_to_device") and isinstance(getattr(x, "dtype", None), np.dtype):
            if x.dtype == np.float32:
                found.append(x)
            return
        if isinstance(x, dict):
            items = x.values()
        elif isinstance(x, (list, tuple)):
            items = x
        elif isinstance(x, SimpleNamespace) or (is_dataclass(x) and not isinstance(x, type)):
            items = vars(x).values()
        else:
            return
        for item in items:
            walk(item)

    walk(plan.scratch)
    return found
