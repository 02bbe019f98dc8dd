"""Timing experiments built from the package's own device-function source: a copy of a
device function with exact text edits applied, compiled as a new device function, so the
experiment follows the kernel as it is today (an edit that no longer applies is an error,
not a silent no-op)."""
from __future__ import annotations

import inspect
import textwrap

from dflash2_numba._compat import cuda


def edited_function(module, fn_name, edits, new_name, extra=None):
    """``module.fn_name``'s source with each ``(old, new)`` of ``edits`` applied (each ``old``
    must occur exactly once), decorators dropped, executed in a copy of its defining module's
    namespace (plus the function's closure variables and ``extra``): the plain Python
    function ``new_name`` it defines (a kernel or device function to compile), and that
    namespace."""
    fn = getattr(module, fn_name)
    py = fn.py_func if hasattr(fn, "py_func") else fn
    src = textwrap.dedent(inspect.getsource(py))
    src = "\n".join(line for line in src.split("\n") if not line.startswith("@"))
    for old, new in edits:
        if src.count(old) != 1:
            raise RuntimeError(f"{fn_name} changed; cannot apply: {old[:60]!r}")
        src = src.replace(old, new)
    namespace = dict(py.__globals__)     # (the defining module's: a factory may live elsewhere)
    namespace.update(inspect.getclosurevars(py).nonlocals)   # (a factory-made function's)
    namespace.update(extra or {})
    exec(compile(src, f"<{new_name}>", "exec"), namespace)
    return namespace[new_name], namespace


def edited_device_function(module, fn_name, edits, new_name, extra=None):
    """:func:`edited_function`'s function as a numba device function, with its namespace."""
    fn, namespace = edited_function(module, fn_name, edits, new_name, extra)
    return cuda.jit(device=True)(fn), namespace
