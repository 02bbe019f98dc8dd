"""The sm_70 PTX report: every registered kernel compiles and assembles for compute
capability 7.0 with no FP64 instruction, no spill and no local memory; FP64 work and local
memory are detected."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from dflash2_numba.ptx import (KernelReport, count_fp64, count_local, count_shl64_by31,
                               format_table, parse_ptxas_log)

needs_ptxas = pytest.mark.usefixtures("ptxas_path")   # fails without one (tests/missing_tools.py)


def _env():
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return env


@needs_ptxas
def test_report_exits_zero_and_covers_every_kernel(sm70_ptx_report):
    proc, rows = sm70_ptx_report
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    kernels = {r["kernel"] for r in rows}
    assert {"attention.frozen.split", "attention.frozen.combine"} <= kernels
    assert {"gdn_chunked_fwd", "gdn_serial_fwd"} <= kernels
    for r in rows:
        assert r["ok"] and r["fp64_instructions"] == 0 and r["registers"] > 0
        assert r["shl64_by31"] == 0
        assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0
        assert r["stack_bytes"] == 0 and r["local_refs"] == 0 and r["status"] == "ok"


@needs_ptxas
def test_fp64_detector():
    code = r"""
import math
import numpy as np
from numba import types
from dflash2_numba._compat import cuda, compile_ptx_cc
from dflash2_numba.ptx import count_fp64
def k32(a):
    a[0] = a[0] * np.float32(1.5)
def k64(a):
    a[0] = math.sqrt(a[0] * 0.1 + a[1])   # a bare Python float: FP64 arithmetic
sig = (types.float32[::1],)
print(count_fp64(compile_ptx_cc(k32, sig)[0]), count_fp64(compile_ptx_cc(k64, sig)[0]))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    n32, n64 = map(int, proc.stdout.split())
    assert n32 == 0 and n64 > 0


def test_count_fp64_on_text():
    assert count_fp64("\tmul.rn.f64 \t%fd1, %fd2, %fd3;\n\tadd.f32 %f1, %f2, %f3;\n") == 1
    assert count_fp64("\tcvt.f64.f32 \t%fd1, %f1;\n") == 1
    assert count_fp64("\tfma.rn.f32 \t%f1, %f2, %f3, %f4;\n") == 0


@needs_ptxas
def test_report_of_one_variant_dumps_its_ptx(tmp_path, sm70_ptx_report):
    """``--variant`` keeps one variant's kernels; ``--dump`` writes each signature's PTX
    (the file a later run on another toolchain is diffed against). Compiled in this
    process (``--jobs 1``), its rows are the two-job session report's rows of that variant,
    figure for figure and in the same order."""
    dump = tmp_path / "ptx"
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "dflash2_numba.ptx", "--cc", "7.0", "--variant",
                           "serial", "--dump", str(dump), "--json", str(out), "--jobs", "1"],
                          capture_output=True, text=True, env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = json.loads(out.read_text())
    assert rows and {r["variant"] for r in rows} == {"serial"}
    assert sm70_ptx_report[1] is not None, sm70_ptx_report[0].stderr[-3000:]
    assert rows == [r for r in sm70_ptx_report[1] if r["variant"] == "serial"]
    files = sorted(p.name for p in dump.iterdir())
    assert len(files) == len(rows)
    assert all(f.startswith("serial.") and f.endswith(".sm70.ptx") for f in files)
    assert all(".target sm_70" in (dump / f).read_text() for f in files)
    # every serial kernel is launched at sm_70: no other variant's kernels are listed
    assert "not launched" not in proc.stdout


def test_count_shl64_by31_on_text():
    """The PTX shape of ``I32(V // 2)`` for a 64-bit V, which ptxas 12.9 and 13.0 lowered
    wrongly in gdn_chunk_out_pipe (bench/RESULTS.md, GDN eleventh round)."""
    assert count_shl64_by31("\tshl.b64 \t%rd278, %rd177, 31;\n\tand.b64 %rd76, %rd278, -4294967296;\n") == 1
    assert count_shl64_by31("\t@%p3 shl.b64 %rd1, %rd2, 31;\n") == 1
    assert count_shl64_by31("\tshl.b64 \t%rd1, %rd2, 32;\n\tshl.b32 %r1, %r2, 31;\n") == 0


# --- local memory: a stack frame or .local in the PTX fails the report -----------------

def _row(**kw):
    base = dict(registers=40, stack_bytes=0, spill_store_bytes=0, spill_load_bytes=0, shared_bytes=0,
                fp64_instructions=0, shl64_by31=0, local_refs=0)
    base.update(kw)
    return KernelReport("gdn", "v", "k", "f32[1C]", **base)


def test_a_stack_frame_or_local_accesses_are_not_ok():
    assert _row().ok and _row().status == "ok"
    for row in (_row(stack_bytes=256, local_refs=17), _row(stack_bytes=256), _row(local_refs=2)):
        assert not row.ok and row.status == "LOCAL"
        assert row.status in format_table([row])
    assert _row(stack_bytes=64, spill_store_bytes=8).status == "SPILLS"
    assert not _row(stack_bytes=None).ok        # a figure ptxas did not give is no pass


def test_count_local_on_text():
    ptx = textwrap.dedent("""\
        // .local in a comment does not count
        .visible .entry k(
        {
        \t.local .align 4 .b8 \t__local_depot0[256];
        \t.reg .b64 \t%SP;
        \tmov.u64 \t%SPL, __local_depot0;
        \tcvta.local.u64 \t%SP, %SPL;
        \tst.local.f32 \t[%rd2], %f1;
        \tld.local.f32 \t%f2, [%rd3];
        \tld.global.f32 \t%f3, [%rd4];
        }
        """)
    assert count_local(ptx) == 4
    assert count_local("\tld.global.f32 %f1, [%rd1];\n\tst.shared.f32 [%r1], %f1;\n"
                       "\tmov.u64 %rd1, _ZN5local4fooE;\n") == 0


# ptxas -v's log for a PTX whose entry calls a function kept out of line, the function's
# block printed first (the order ptxas uses is not fixed)
_TWO_FUNCTION_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
    272 bytes stack frame, 16 bytes spill stores, 24 bytes spill loads
ptxas info    : Compiling entry function 'kern' for 'sm_70'
ptxas info    : Function properties for kern
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 2.344 ms
"""


def test_ptxas_log_is_read_for_every_function():
    res = parse_ptxas_log(_TWO_FUNCTION_LOG)
    assert res["registers"] == 24 and res["shared_bytes"] == 1024      # the entry's
    assert (res["stack_bytes"], res["spill_store_bytes"], res["spill_load_bytes"]) == (280, 16, 24)


# an entry that calls a recursive function (ptxas cannot inline it): the helper, not the
# entry, holds the local array and spills, and ptxas prints the entry's block first
_RECURSIVE_PTX = """\
.version 7.0
.target sm_70
.address_size 64

.func (.param .b32 retv) helper(.param .b32 pi);
.func (.param .b32 retv) helper(.param .b32 pi)
{
\t.local .align 4 .b8 buf[256];
\t.reg .pred %p<2>;
\t.reg .b32 %r<8>;
\t.reg .b64 %rd<8>;
\tld.param.u32 %r1, [pi];
\tmov.u64 %rd1, buf;
\tand.b32 %r2, %r1, 63;
\tmul.wide.u32 %rd2, %r2, 4;
\tadd.s64 %rd3, %rd1, %rd2;
\tst.local.u32 [%rd3], %r1;
\txor.b32 %r3, %r2, 7;
\tmul.wide.u32 %rd4, %r3, 4;
\tadd.s64 %rd5, %rd1, %rd4;
\tld.local.u32 %r4, [%rd5];
\tsetp.lt.u32 %p1, %r1, 3;
\t@%p1 bra DONE;
\tadd.s32 %r5, %r1, -3;
\t{
\t.param .b32 a1;
\tst.param.b32 [a1], %r5;
\t.param .b32 r1;
\tcall.uni (r1), helper, (a1);
\tld.param.b32 %r6, [r1];
\t}
\tadd.s32 %r4, %r4, %r6;
DONE:
\tst.param.b32 [retv], %r4;
\tret;
}

.visible .entry kern(.param .u64 pa)
{
\t.reg .b32 %r<8>;
\t.reg .b64 %rd<8>;
\tld.param.u64 %rd1, [pa];
\tcvta.to.global.u64 %rd2, %rd1;
\tmov.u32 %r1, %tid.x;
\t{
\t.param .b32 a0;
\tst.param.b32 [a0], %r1;
\t.param .b32 r0;
\tcall.uni (r0), helper, (a0);
\tld.param.b32 %r2, [r0];
\t}
\tmul.wide.u32 %rd3, %r1, 4;
\tadd.s64 %rd4, %rd2, %rd3;
\tst.global.u32 [%rd4], %r2;
\tret;
}
"""


@needs_ptxas
def test_assemble_counts_the_stack_and_spills_of_every_function(ptxas_path):
    from dflash2_numba.ptx import assemble

    res = assemble(ptxas_path, _RECURSIVE_PTX, (7, 0))
    assert res["registers"] > 0
    assert res["stack_bytes"] > 0                       # the helper's 256-byte array at least
    assert res["spill_store_bytes"] + res["spill_load_bytes"] > 0, res
    row = _row(registers=res["registers"], stack_bytes=res["stack_bytes"],
               spill_store_bytes=res["spill_store_bytes"], spill_load_bytes=res["spill_load_bytes"],
               local_refs=count_local(_RECURSIVE_PTX))
    assert not row.ok


# a throw-away variant, registered in the child only: its kernel indexes a local array at
# run time, which puts the array in local memory (a stack frame, ld/st.local) without spilling
_LOCAL_CHILD = r"""
import json
import numpy as np
from numba import types
import dflash2_numba  # noqa: F401
from dflash2_numba import _registry
from dflash2_numba._compat import cuda
from dflash2_numba.ptx import build_reports, format_table, main

def kern(a, idx):
    i = cuda.grid(1)
    buf = cuda.local.array(64, types.float32)
    for j in range(64):
        buf[j] = a[j] * np.float32(i)
    a[i] = buf[idx[i] & 63]

spec = _registry.KernelSpec("test.local_mem", kern, ((types.float32[::1], types.int32[::1]),))
_registry.register(_registry.Variant("test_local", "gdn", "test", "none", (spec,), run=None))
rows = build_reports((7, 0), "gdn", "test_local")
table = format_table(rows)
print(table)
rc = main(["--family", "gdn", "--variant", "test_local"])
r = rows[0]
print("JSON" + json.dumps(dict(ok=r.ok, status=r.status, stack=r.stack_bytes, local=r.local_refs,
                              spill=(r.spill_store_bytes, r.spill_load_bytes), rc=rc)))
"""


@needs_ptxas
def test_report_fails_a_kernel_that_uses_local_memory_without_spilling():
    proc = subprocess.run([sys.executable, "-c", _LOCAL_CHILD], capture_output=True, text=True,
                          env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("JSON")][-1][4:])
    assert got["spill"] == [0, 0]                       # it does not spill ...
    assert got["stack"] > 0 and got["local"] > 0        # ... but lives in local memory
    assert not got["ok"] and got["status"] == "LOCAL"
    assert got["rc"] == 1 and "0 ok, 1 failing" in proc.stdout
