"""Every GDN kernel compiles for sm_70 for every listed signature (real numba typing and
NVVM, not the simulator), with no FP64 arithmetic, no local memory and no register spills
(ptxas 12.9 of the cuda12 extra); the warp-specialised state pass of ``chunked_wsr`` uses
only the barrier that warps may reach at different instructions; ``Variant.flat_inputs``
is the set of variants whose kernels do not type with strided inputs.

The compiles run in child processes without NUMBA_ENABLE_CUDASIM: the first test reads
the session's PTX report, the second skips when numba cannot find libNVVM."""
import textwrap

from tests.nvvm_child import child_json

# the GDN kernels the report leaves out at sm_70 (their variants launch another form
# there): the same rows, compiled and assembled for sm_70 all the same
NOT_LAUNCHED_CHILD = textwrap.dedent(r"""
    from dataclasses import asdict
    from dflash2_numba.ptx import build_reports
    rows = build_reports((7, 0), "gdn", launched=False)
    print("ROWS" + json.dumps([asdict(r) for r in rows]))
""")


def test_gdn_kernels_compile_for_sm70(sm70_ptx_report):
    """The GDN rows of the session's sm_70 PTX report (``conftest.sm70_ptx_report``), and
    the same rows of the kernels it leaves out at sm_70: every kernel of every variant,
    every signature, compiled as the package builds it (with its launch bounds)."""
    proc, report_rows = sm70_ptx_report
    assert report_rows is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    launched = [r for r in report_rows if r["family"] == "gdn"]
    not_launched = child_json(NOT_LAUNCHED_CHILD, "ROWS")
    assert {r["kernel"] for r in not_launched} >= {"gdn_chunk_out_pipe", "gdn_chunk_out_wide"}
    names = {(r["variant"], r["kernel"]) for r in launched}
    assert {("serial", "gdn_serial_fwd"), ("chunked", "gdn_chunked_fwd")} <= names
    assert ("chunked_wsr", "gdn_wsr_state") in names
    for r in launched + not_launched:
        assert not r["error"], r
        assert r["fp64_instructions"] == 0, r
        assert r["local_refs"] == 0 and r["registers"] > 0, r
        if r["kernel"] in ("gdn_state_gather", "gdn_state_scatter"):
            assert r["fma_f32"] == 0, r              # chunked_overlap's state copies: no arithmetic
        else:
            assert r["fma_f32"] > 0, r
        if r["kernel"] == "gdn_wsr_state":
            # separate copy / compute loops: only the barrier threads may reach at different
            # instructions (the aligned bar.sync is undefined there; synccheck flags it)
            assert r["aligned_barriers"] == 0 and r["any_site_barriers"] >= 3, r
    for r in launched:
        # what runs at sm_70 keeps every value in registers; the forms for newer devices,
        # held to their register bound there, may spill a word at sm_70, where they never run
        assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0, r
        assert r["stack_bytes"] == 0, r


LAYOUT_CHILD = textwrap.dedent(r"""
    from numba import types as t
    import dflash2_numba.gdn  # noqa: F401  (registers the variants)
    from dflash2_numba import _registry
    from dflash2_numba._compat import compile_ptx_cc

    def strided(sig):
        # q, k, v (4-d) and g, beta (3-d) as any-layout arrays, as a strided device view types
        return tuple(t.Array(a.dtype, a.ndim, "A")
                     if isinstance(a, t.Array) and a.ndim >= 3 and a.dtype in (t.float16, t.float32)
                     else a for a in sig)

    out = {}
    for name, v in _registry.variants("gdn").items():
        typed = True
        for spec in v.kernels:
            try:
                compile_ptx_cc(spec.pyfunc, strided(spec.signatures[0]), cc=(7, 0))
            except Exception as e:
                if "TypingError" not in type(e).__name__:
                    raise
                typed = False
                break
        out[name] = {"flat_inputs": v.flat_inputs, "strided_compiles": typed}
    print("LAYOUT" + json.dumps(out))
""")


def test_flat_inputs_flag_matches_what_compiles():
    """``Variant.flat_inputs`` (the API's refusal of strided device inputs) is exactly the
    set of variants whose kernels do not type with any-layout q, k, v, g, beta at sm_70:
    the frozen and serial kernels accept strided views, the pre-pass variants do not."""
    found = child_json(LAYOUT_CHILD, "LAYOUT")
    assert {"chunked", "serial"} <= set(found)
    for name, r in found.items():
        assert r["flat_inputs"] == (not r["strided_compiles"]), (name, r)
