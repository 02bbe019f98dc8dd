"""The tools that traced the H200-only ``hb`` mismatch (bench/hb_mismatch_probe.py,
bench/hb_toolchain_probe.py): their kernel edits apply to today's kernel source, the PTX
entry renaming that the cubin swap relies on, and the pattern summary. What each edited form
computes (its bytes) is the probe's own measurement on the GPU, at the production shape;
these tests do not launch the forms."""
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import hb_mismatch_probe as HB  # noqa: E402
import hb_toolchain_probe as TC  # noqa: E402

PTX = """.version 7.0
.target sm_70
.address_size 64

.visible .entry {name}(
\t.param .u64 {name}_param_0
)
{{
\tret;
}}
"""


def test_every_probe_form_edits_the_kernel_source():
    """Each spelling and each bisection form is one exact edit of the shipped kernel (an edit
    that no longer applies raises), and names its own kernel."""
    forms = list(HB.FORMS) + list(HB.bisect_forms())
    assert {"hb2@p1", "hb2@p2", "hb2@tail", "hb2@st", "hb2@all", "p1=minus3"} <= set(forms)
    names = set()
    for form in forms:
        kern = HB.out_kernel(form)
        names.add(getattr(kern, "py_func", kern).__name__)
    assert len(names) == len(forms)


def test_bisect_all_uses_the_second_offset_everywhere():
    edits = HB.bisect_forms()["hb2@all"]
    new_text = "\n".join(new for _, new in edits[1:])
    assert "hb," not in new_text and "+ hb," not in new_text and "hb2" in new_text
    assert edits[0][1].endswith("hb2 = I32(V // 2)")


def test_entry_name_and_rename():
    assert TC.entry_name(PTX.format(name="kern_a")) == "kern_a"
    with pytest.raises(RuntimeError):
        TC.entry_name(PTX.format(name="a") + PTX.format(name="b"))


def test_assemble_renames_the_entry(tmp_path, ptxas_path):
    cubin = TC.assemble(PTX.format(name="kern_a"), "numba_entry_x", ptxas_path, "sm_70", 3,
                        tmp_path / "k.cubin")
    assert b"numba_entry_x" in cubin and b"kern_a" not in cubin


def test_pattern_locates_wrong_values():
    rng = np.random.default_rng(0)
    want = rng.standard_normal(2 * 64 * 12 * 128).astype(np.float16).view(np.uint16)
    got = want.copy()
    got[(64 + 5) * 12 * 128 + 3 * 128 + 70] ^= 1         # chunk 1, row 5, head 3, column 70
    text = HB.pattern(got, want)
    rows = text.split("\n")[0]
    assert rows.endswith(str([0] * 5 + [1] + [0] * 58))
    assert "value heads: " + str([0, 0, 0, 1] + [0] * 8) in text
    assert "chunks: [0, 1]" in text
    assert HB.describe(got, want).startswith("1 wrong values")
    assert HB.describe(want, want) == "same bytes as chunked"


def test_mismatch_probe_arguments_are_parsed_with_usage_errors(tmp_path, capsys):
    """``--help`` lists the modes (it raised an IndexError before the probe had a parser); a
    missing or non-positive token count, an unknown form or mode, and a malformed capability
    are usage errors (exit 2) before any input is made."""
    with pytest.raises(SystemExit) as exc:
        HB.main(["--help"])
    assert exc.value.code == 0
    shown = capsys.readouterr().out
    assert all(mode in shown for mode in ("check", "bisect", "fill", "once", "pattern",
                                          "repeat", "cubin"))
    for bad in (["once", "40"], ["check", "0"], ["once", "40", "nope"], ["sweep", "40"],
                ["cubin", str(tmp_path / "c"), "nine"], []):
        with pytest.raises(SystemExit) as exc:
            HB.main(bad)
        assert exc.value.code == 2, bad
    args = HB._parse(["pattern", "64", "hb2@tail"])
    assert (args.mode, args.T, args.FORM) == ("pattern", 64, "hb2@tail")
    assert HB._parse(["cubin", str(tmp_path / "d")]).CC == (9, 0)
    assert HB._parse(["cubin", str(tmp_path / "d"), "7.0"]).CC == (7, 0)
