"""The sm_70 PTX report: every registered kernel compiles and assembles for compute
capability 7.0 with no FP64 instruction and no spill; FP64 work is detected."""
import json
import os
import subprocess
import sys

import pytest

from dflash2_numba.ptx import count_fp64, count_shl64_by31, find_ptxas

pytestmark = pytest.mark.skipif(find_ptxas() is None, reason="needs the cuda12 extra's ptxas")


def _env():
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return env


def test_report_exits_zero_and_covers_every_kernel(tmp_path):
    out = tmp_path / "ptx.json"
    proc = subprocess.run([sys.executable, "-m", "dflash2_numba.ptx", "--cc", "7.0", "--json", str(out)],
                          capture_output=True, text=True, env=_env(), timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = json.loads(out.read_text())
    kernels = {r["kernel"] for r in rows}
    assert {"attention.frozen.split", "attention.frozen.combine"} <= kernels
    assert {"gdn_chunked_fwd", "gdn_serial_fwd"} <= kernels
    for r in rows:
        assert r["ok"] and r["fp64_instructions"] == 0 and r["registers"] > 0
        assert r["shl64_by31"] == 0
        assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0


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


def test_report_of_one_variant_dumps_its_ptx(tmp_path):
    """``--variant`` keeps one variant's kernels; ``--dump`` writes each signature's PTX
    (the file a later run on another toolchain is diffed against)."""
    dump = tmp_path / "ptx"
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "dflash2_numba.ptx", "--cc", "7.0", "--variant",
                           "serial", "--dump", str(dump), "--json", str(out)],
                          capture_output=True, text=True, env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = json.loads(out.read_text())
    assert rows and {r["variant"] for r in rows} == {"serial"}
    files = sorted(p.name for p in dump.iterdir())
    assert len(files) == len(rows)
    assert all(f.startswith("serial.") and f.endswith(".sm70.ptx") for f in files)
    assert all(".target sm_70" in (dump / f).read_text() for f in files)


def test_count_shl64_by31_on_text():
    """The PTX shape of ``I32(V // 2)`` for a 64-bit V, which ptxas 12.9 and 13.0 lowered
    wrongly in gdn_chunk_out_pipe (bench/RESULTS.md, GDN eleventh round)."""
    assert count_shl64_by31("\tshl.b64 \t%rd278, %rd177, 31;\n\tand.b64 %rd76, %rd278, -4294967296;\n") == 1
    assert count_shl64_by31("\t@%p3 shl.b64 %rd1, %rd2, 31;\n") == 1
    assert count_shl64_by31("\tshl.b64 \t%rd1, %rd2, 32;\n\tshl.b32 %r1, %r2, 31;\n") == 0
