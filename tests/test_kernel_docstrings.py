"""Every kernel the registry knows documents the contract it keeps: the Python function
behind it (the generated kernels' included) has a docstring that names its part of
``contract.md`` (A for attention, B for GDN) and, for a variant that must match another
bitwise, that reference's kernel. Runs on the simulator: nothing is compiled."""
import inspect

import pytest

from dflash2_numba import _registry   # (the package's import registers every variant)

PART = {"attention": "part A", "gdn": "part B"}


def _python_function(obj):
    """The Python function of a kernel object: a dispatcher's (or the simulator kernel's)
    ``py_func`` / ``fn``, else the object itself (the registry keeps plain functions)."""
    for attr in ("py_func", "fn"):
        inner = getattr(obj, attr, None)
        if inspect.isfunction(inner):
            return inner
    return obj


def _specs():
    return [(family, vname, spec) for family, vname, spec in _registry.all_kernel_specs()]


def _reference_functions(family, vname):
    """The Python functions of the kernels of ``vname``'s bitwise reference (empty for a
    variant that is its own reference)."""
    ref = _registry.variants(family)[vname].bitwise_reference
    if not ref or ref == vname:
        return []
    return [_python_function(k.pyfunc) for k in _registry.variants(family)[ref].kernels]


def test_the_registry_lists_kernels_of_both_families():
    families = {family for family, _, _ in _specs()}
    assert families == {"attention", "gdn"}, families


@pytest.mark.parametrize("family,vname,spec", _specs(),
                         ids=[f"{v}:{s.name}" for _, v, s in _specs()])
def test_kernel_docstring_names_its_contract(family, vname, spec):
    fn = _python_function(spec.pyfunc)
    assert inspect.isfunction(fn), (spec.name, fn)
    doc = inspect.getdoc(fn) or ""
    assert doc.strip(), f"{spec.name} ({fn.__module__}.{fn.__name__}) has no docstring"
    assert "contract.md" in doc, f"{spec.name}: the docstring does not name contract.md"
    assert PART[family] in doc, f"{spec.name}: the docstring does not name {PART[family]}"
    refs = _reference_functions(family, vname)
    if not refs or fn in refs:
        # a reference kernel itself: it says so
        assert "frozen" in doc, f"{spec.name}: a reference kernel not called frozen"
    else:
        names = sorted({r.__name__ for r in refs})
        assert any(name in doc for name in names), \
            f"{spec.name}: the docstring names none of its reference's kernels {names}"
