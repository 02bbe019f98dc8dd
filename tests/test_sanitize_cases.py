"""``bench/sanitize_cases.py``, the program ``bench/sanitize.sh`` runs under compute-sanitizer:
its ``--variants`` names are checked before any launch (a misspelt name used to run nothing,
which the sanitizer reported as a clean run), a selection that runs no variant-case exits 1,
and the cases launch through the public API (GDN's one-token case, on the simulator)."""
from __future__ import annotations

import ast

import pytest

from tests.bench_helpers import bench_importable, run_bench_script


@pytest.fixture
def sanitize_cases(monkeypatch):
    bench_importable(monkeypatch)
    import bench.sanitize_cases as S
    return S


BAD = [
    (["--variants", "tiled_prem"], "tiled_prem"),                       # misspelt
    (["--family", "gdn", "--variants", "tiled_perm"], "tiled_perm"),    # the other family's
    (["--family", "attention", "--variants", "frozen,chunked"], "chunked"),
    (["--variants", ","], "no name"),
    (["--variants", ""], "no name"),
]


@pytest.mark.parametrize("args,named", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_unregistered_variant_is_a_usage_error(args, named, tmp_path):
    proc = run_bench_script("sanitize_cases.py", args, tmp_path)    # on the simulator
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "error: --variants" in last and named in last and "known: " in last, last
    assert proc.stdout == ""                      # nothing ran


def test_every_registered_name_is_accepted(sanitize_cases):
    S = sanitize_cases
    import dflash2_numba as d2
    for family, names in (("attention", d2.attention_variants()), ("gdn", d2.gdn_variants())):
        for family_arg in (family, "all"):
            args = S.parse_args(["--family", family_arg, "--variants", ",".join(names)])
            assert args.wanted == set(names)
    assert S.parse_args([]).wanted == set(d2.attention_variants()) | set(d2.gdn_variants())
    assert S.parse_args(["--family", "gdn"]).wanted == set(d2.gdn_variants())


def test_gdn_one_token_case_runs_every_named_variant(sanitize_cases, monkeypatch, capsys):
    S = sanitize_cases
    cases = S.gdn_cases()
    assert [name for name, _ in cases] == ["T=1", "T=65", "varlen 1/63/66/130"]
    monkeypatch.setattr(S, "gdn_cases", lambda: cases[:1])
    assert S.main(["--family", "gdn", "--variants", "serial,chunked"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sorted(out[:2]) == ["gdn chunked          T=1", "gdn serial           T=1"]
    assert out[2].startswith("ran 2 variant-cases; launches: ")
    # this run's launches only, whatever the process launched before it
    assert ast.literal_eval(out[2].split("launches: ", 1)[1]) == {"gdn_chunked_fwd": 1, "gdn_serial_fwd": 1}


def test_a_selection_that_runs_nothing_exits_1(sanitize_cases, monkeypatch, capsys):
    """``tiled_wide`` is built for head dim 256 only: on the head-dim-128 batch case alone it
    refuses before any launch, so the run checked nothing and must not pass."""
    S = sanitize_cases
    batch = [c for c in S.attention_cases(False) if c[0] == "q8 batch 1/200/0-rows"]
    assert len(batch) == 1 and batch[0][1]["D"] == 128
    monkeypatch.setattr(S, "attention_cases", lambda large: batch)
    assert S.main(["--family", "attention", "--variants", "tiled_wide"]) == 1
    captured = capsys.readouterr()
    assert "attention tiled_wide       q8 batch 1/200/0-rows  (unsupported)" in captured.out
    assert "ran 0 variant-cases" in captured.out
    assert "error: no variant-case ran" in captured.err


def test_large_adds_only_the_boundary_case(sanitize_cases):
    S = sanitize_cases
    small, large = S.attention_cases(False), S.attention_cases(True)
    assert [c[0] for c in large[:-1]] == [c[0] for c in small] and len(small) == 9
    name, kw, splits = large[-1]
    assert name == "q8 T=262144 page=3296" and kw["seq_lens"] == [262144] and splits == 80


def test_an_unselected_family_builds_no_case(sanitize_cases, monkeypatch, capsys):
    """``--family all`` with GDN names only: no attention case is built (with ``--large``
    that would be a 262144-token cache for nothing), and the GDN case runs."""
    S = sanitize_cases

    def no_attention_case(large):
        raise AssertionError("an attention case was built with no attention variant selected")

    first_gdn_case = S.gdn_cases()[:1]
    monkeypatch.setattr(S, "attention_cases", no_attention_case)
    monkeypatch.setattr(S, "gdn_cases", lambda: first_gdn_case)
    assert S.main(["--large", "--variants", "chunked"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "gdn chunked          T=1"
