"""Variant registries, launch accounting (the route audit) and the kernel list
that the PTX report compiles.

A *variant* is one implementation of one contract. It lists its kernels (with the
signatures the PTX report compiles for sm_70) and launches them through
:func:`launch`, which compiles with FMA contraction off and counts every launch by
kernel name, so the screen can prove which kernels actually ran.
"""
from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

from ._compat import exact_fp32
from .contract import MAX_GRID_YZ

_lock = threading.Lock()
_route_counts: "collections.Counter[str]" = collections.Counter()


class UnsupportedShape(ValueError):
    """A variant was asked for a shape it does not implement (it never falls back)."""


GRID_LIMITS = (2 ** 31 - 1, MAX_GRID_YZ, MAX_GRID_YZ)   # CUDA's grid dimension limits (x, y, z)


def launch(kernel_name: str, kernel, grid, block, stream, *args) -> None:
    """Launch one numba.cuda kernel under the exact-FP32 compile flags and count it. A grid
    past CUDA's limits is refused here, naming the kernel (a backstop: the public entry
    points refuse such shapes before any launch, e.g. attention's ``_check_grid_dims``)."""
    dims = grid if isinstance(grid, tuple) else (grid,)
    if any(int(d) > lim for d, lim in zip(dims, GRID_LIMITS)):
        raise ValueError(f"{kernel_name}: grid {dims} exceeds CUDA's limits {GRID_LIMITS}")
    with exact_fp32():
        kernel[grid, block, stream](*args)
    with _lock:
        _route_counts[kernel_name] += 1


def route_counters(reset: bool = False) -> Dict[str, int]:
    """Launch counts per kernel name since the last reset (``reset=True`` clears them)."""
    with _lock:
        snapshot = dict(_route_counts)
        if reset:
            _route_counts.clear()
    return snapshot


@dataclass(frozen=True)
class KernelSpec:
    """One kernel as the PTX report compiles it: a name, the Python function, and the
    numba signatures (tuples of argument types) that cover the shapes it serves."""

    name: str
    pyfunc: Callable
    signatures: Tuple[Tuple[Any, ...], ...]
    launch_bounds: Any = None       # as the variant's cuda.jit uses it (ptxas register cap)
    # the compute capabilities the variant launches this kernel on, inclusive (a variant may
    # pick a different schedule of the same arithmetic per target); the PTX report compiles
    # a kernel only for a capability in this range
    min_cc: Tuple[int, int] = (0, 0)
    max_cc: Tuple[int, int] = (99, 99)


@dataclass(frozen=True)
class Variant:
    name: str
    family: str          # "attention" or "gdn"
    description: str
    contract: str        # which contract it keeps, e.g. "A (q8 verification), bit-identical to frozen"
    kernels: Tuple[KernelSpec, ...]
    run: Callable        # family-specific launcher: run(plan, stream)
    supports: Callable = field(default=lambda plan: None)  # raises UnsupportedShape
    bitwise_reference: Optional[str] = None  # the frozen variant it must match byte for byte
    prepare: Optional[Callable] = None        # prepare(plan, stream): allocate scratch at plan time
    # its kernels read the GDN inputs (q, k, v, g, beta) as flat C-contiguous arrays: the
    # API refuses strided device inputs for it by name (numpy inputs are copied compactly)
    flat_inputs: bool = False

    def describe(self) -> Dict[str, str]:
        return {"description": self.description, "contract": self.contract,
                "kernels": ", ".join(k.name for k in self.kernels),
                "bitwise_reference": self.bitwise_reference or self.name}


_variants: Dict[str, Dict[str, Variant]] = {"attention": {}, "gdn": {}}


def register(variant: Variant) -> Variant:
    family = _variants.setdefault(variant.family, {})
    if variant.name in family:
        raise ValueError(f"variant {variant.name!r} is already registered for {variant.family}")
    family[variant.name] = variant
    return variant


def unregister(family: str, name: str) -> None:
    _variants.get(family, {}).pop(name, None)


def get_variant(family: str, name: str) -> Variant:
    """The registered variant ``name`` of ``family``; ``TypeError`` / ``ValueError`` naming
    the ``variant`` argument for a non-string or an unknown name."""
    if not isinstance(name, str):
        raise TypeError(f"variant: expected a str, got {type(name).__name__}")
    try:
        return _variants[family][name]
    except KeyError:
        known = ", ".join(sorted(_variants.get(family, {})))
        raise ValueError(f"variant: unknown {family} variant {name!r}; known: {known}") from None


def variants(family: str) -> Dict[str, Variant]:
    return dict(_variants.get(family, {}))


def variant_names(families) -> list:
    """The registered variant names of ``families``, family by family in registration order
    (what a tool's ``--variant(s)`` argument may name)."""
    return [n for f in families for n in _variants.get(f, {})]


def all_kernel_specs():
    for family, named in _variants.items():
        for vname, v in named.items():
            for k in v.kernels:
                yield family, vname, k
