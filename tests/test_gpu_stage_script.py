"""``bench/run_all_gpu.sh`` runs only on a GPU, so CI checks its shape: it parses as bash,
every stage its header documents has a case, every case is documented, and every bench
script a stage calls exists."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "run_all_gpu.sh"


def _header_stages(text: str) -> set:
    """The stage names of the header comment: the words outside parentheses after
    ``stages:`` (every description is in parentheses)."""
    head = text.split("\nset -u", 1)[0].split("stages:", 1)[1]
    flat = " ".join(line.lstrip("#") for line in head.splitlines())
    depth, outside = 0, []
    for ch in flat:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:
            outside.append(ch)
    assert depth == 0, "unbalanced parentheses in the header"
    return {w.strip() for w in "".join(outside).split(",") if w.strip()}


def _case_stages(text: str) -> set:
    return set(re.findall(r"^    ([a-z0-9-]+)\)\s*$", text, flags=re.M))


def test_documented_stages_are_the_cases():
    text = SCRIPT.read_text()
    header, cases = _header_stages(text), _case_stages(text)
    assert "overlap-knobs" in cases and "tests" in cases
    assert header == cases, (sorted(header - cases), sorted(cases - header))


def test_called_bench_scripts_exist():
    text = SCRIPT.read_text()
    called = set(re.findall(r"\b(bench/[A-Za-z0-9_]+\.(?:py|sh))\b", text))
    assert called, "no bench script found in the stages"
    root = SCRIPT.parents[1]
    missing = sorted(p for p in called if not (root / p).is_file())
    assert not missing, missing


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_parses_as_bash():
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
