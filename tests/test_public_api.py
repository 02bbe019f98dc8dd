"""The public names document themselves: every name in ``dflash2_numba.__all__`` that can
be called, and every public method of its classes, has a docstring, and the variant
listings hold exactly the keys their docstrings name."""
import inspect

import pytest

import dflash2_numba as d2


def _public_callables():
    for name in d2.__all__:
        obj = getattr(d2, name)
        if callable(obj):
            yield name, obj
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and callable(member):
                    yield f"{name}.{attr}", member


@pytest.mark.parametrize("name,obj", list(_public_callables()),
                         ids=[n for n, _ in _public_callables()])
def test_public_callable_has_a_docstring(name, obj):
    assert (inspect.getdoc(obj) or "").strip(), f"{name} has no docstring"


@pytest.mark.parametrize("listing,family", [(d2.attention_variants, "attention"),
                                            (d2.gdn_variants, "gdn")])
def test_variant_listings_hold_the_documented_keys(listing, family):
    got = listing()
    assert {"attention": "frozen", "gdn": "chunked"}[family] in got
    documented = {"description", "contract", "kernels", "bitwise_reference"}
    for key in documented:
        assert f'"{key}"' in listing.__doc__
    for name, entry in got.items():
        assert set(entry) == documented, (name, entry)
        assert entry["bitwise_reference"] in got, (name, entry)
        assert all(entry[k] for k in documented), (name, entry)


# the public modules of a family's folder that are not variants (everything else is one)
NOT_VARIANTS = {"attention": {"api", "emulate", "combine_batched"}, "gdn": {"api", "emulate"}}


@pytest.mark.parametrize("family", ["attention", "gdn"])
def test_every_variant_file_is_registered_under_its_name(family):
    """A variant is one file of its family's folder, registered under the file's name: the
    registry holds exactly those (a file left out of the family's imports, or registered
    under another name, fails here rather than skipping the tests that ask for it)."""
    from pathlib import Path

    from dflash2_numba import _registry

    folder = Path(d2.__file__).parent / family
    files = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}
    assert NOT_VARIANTS[family] <= files, sorted(files)
    assert set(_registry.variants(family)) == files - NOT_VARIANTS[family]
