"""Every GDN kernel compiles for sm_70 for every listed signature (real numba typing and
NVVM, not the simulator), with no FP64 arithmetic, no local memory, and (when a ptxas
that targets sm_70 is installed) no register spills; the warp-specialised state pass of
``chunked_wsr`` uses only the barrier that warps may reach at different instructions.

Runs in a child process without NUMBA_ENABLE_CUDASIM; skipped when numba cannot find
libNVVM there."""
import textwrap

from tests.nvvm_child import child_json

CHILD = textwrap.dedent(r"""
    import dflash2_numba  # noqa: F401  (registers the variants)
    import dflash2_numba.gdn  # noqa: F401
    from dflash2_numba._compat import compile_ptx_cc
    from dflash2_numba._registry import all_kernel_specs
    try:
        from dflash2_numba.ptx import assemble, find_ptxas
        ptxas = find_ptxas()
    except Exception:
        ptxas = None
    FP64 = re.compile(r"^\s*(?:@%p\d+\s+)?[a-z]+(?:\.[a-z0-9]+)*\.f64\b", re.M)
    rows = []
    for fam, vname, spec in all_kernel_specs():
        if fam != "gdn":
            continue
        for i, sig in enumerate(spec.signatures):
            row = {"variant": vname, "kernel": spec.name, "sig": i}
            try:
                ptx, _ = compile_ptx_cc(spec.pyfunc, sig, cc=(7, 0))
                row["fp64"] = len(FP64.findall(ptx))
                row["local"] = ptx.count(".local")
                row["fma"] = ptx.count("fma.rn.f32")
                row["bar_aligned"] = len(re.findall(
                    r"\bbar(?:rier)?\.sync\.aligned\b|\bbar\.sync\b", ptx))
                row["bar_any_site"] = len(re.findall(r"\bbarrier\.sync\s", ptx))
                if ptxas:
                    row.update(assemble(ptxas, ptx, (7, 0)))
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:2000]
            rows.append(row)
    print("ROWS" + json.dumps(rows))
""")


def test_gdn_kernels_compile_for_sm70():
    rows = child_json(CHILD, "ROWS")
    names = {(r["variant"], r["kernel"]) for r in rows}
    assert {("serial", "gdn_serial_fwd"), ("chunked", "gdn_chunked_fwd")} <= names
    for r in rows:
        print(r)
        assert "error" not in r, r
        assert r["fp64"] == 0, r
        assert r["local"] == 0, r
        if r["kernel"] in ("gdn_state_gather", "gdn_state_scatter"):
            assert r["fma"] == 0, r              # chunked_overlap's state copies: no arithmetic
        else:
            assert r["fma"] > 0, r
        if r["kernel"] == "gdn_wsr_state":
            # separate copy / compute loops: only the barrier threads may reach at different
            # instructions (the aligned bar.sync is undefined there; synccheck flags it)
            assert r["bar_aligned"] == 0 and r["bar_any_site"] >= 3, r
        if "registers" in r:
            assert r.get("spill_store_bytes", 0) == 0 and r.get("spill_load_bytes", 0) == 0, r
            assert r.get("stack_bytes", 0) == 0, r


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
