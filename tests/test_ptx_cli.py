"""The PTX report's usage errors (exit status 2, before any compile): a malformed ``--cc``,
an unwritable ``--json``, a ``--variant`` no family (or not the named family) registers.
Needs no toolchain: nothing gets as far as compiling."""
import os
import subprocess
import sys

import pytest


def _run(*args):
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, "-m", "dflash2_numba.ptx", *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("args,said", [
    (("--cc", "7"), "--cc"),
    (("--cc", "abc"), "--cc"),
    (("--cc", "7.0.1"), "--cc"),
    (("--json", "/nonexistent_dir/p.json"), "--json"),
    (("--variant", "bogus"), "no attention or gdn variant 'bogus'"),
    (("--family", "gdn", "--variant", "frozen"), "no gdn variant 'frozen'"),
])
def test_usage_errors(args, said):
    proc = _run(*args)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert said in proc.stderr
    assert "kernel signatures" not in proc.stdout            # nothing was compiled


def test_help_states_the_whole_first_sentence():
    proc = _run("--help")
    assert proc.returncode == 0
    assert "compile every kernel of every registered variant to PTX" in " ".join(proc.stdout.split())
