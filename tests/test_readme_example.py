"""The README's Python API example runs as written (its own asserts: a plan's launch gives
``verify_attention``'s bytes with the guard rows intact, and the state-cache form of
``plan_gdn`` returns the caller's ``out`` and cache, holding ``gdn_prefill``'s output and
final states in the named slots). The block is read from README.md, so the example cannot
drift from the API without this test failing."""
from __future__ import annotations

import re
from pathlib import Path

import dflash2_numba as d2

README = Path(__file__).resolve().parents[1] / "README.md"


def python_api_example() -> str:
    text = README.read_text()
    found = re.search(r"^## Python API\n\n```python\n(.*?)^```", text, re.S | re.M)
    assert found, "README.md has no python block right under '## Python API'"
    return found.group(1)


def test_readme_python_api_example_runs():
    code = python_api_example()
    names: dict = {}
    exec(compile(code, str(README) + ":Python API", "exec"), names)
    # the example's last results, checked here too so that a block whose asserts were
    # removed still has to produce them
    res, o, h, cache, slots = (names[n] for n in ("res", "o", "h", "cache", "slots"))
    assert res.out.shape == (1, 2, 2, 64) and res.out.dtype.name == "float16"
    assert res.partial.shape == (1, 2, 2, 2, 64) and res.lse.shape == (1, 2, 2, 2, 2)
    assert o.shape == (1, 40, 2, 32) and h.shape == (2, 2, 32, 32)
    assert cache[slots].tobytes() == h.tobytes()
    untouched = [i for i in range(cache.shape[0]) if i not in set(slots.tolist())]
    assert not cache[untouched].any()
    assert {"frozen", "chunked"} <= set(d2.attention_variants()) | set(d2.gdn_variants())


def test_readme_names_every_public_name():
    """Every name of ``dflash2_numba.__all__`` and ``oracle.__all__`` appears in README.md
    (its Python API section documents them), so a new public name cannot go undocumented."""
    import oracle

    text = README.read_text()
    for module in (d2, oracle):
        missing = [n for n in module.__all__ if not re.search(rf"\b{re.escape(n)}\b", text)]
        assert not missing, f"{module.__name__}: not named in README.md: {missing}"
