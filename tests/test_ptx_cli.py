"""The PTX report's usage errors (exit status 2, before any compile): a malformed ``--cc``,
an unwritable ``--json``, a ``--variant`` no family (or not the named family) registers.
Needs no toolchain: nothing gets as far as compiling."""
import os
import shutil
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
    (("--jobs", "0"), "--jobs"),
    (("--jobs", "two"), "--jobs"),
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


# --- output paths (--json; the screen's --json / --plot use the same type) ---------------

def test_json_path_ending_in_a_separator_is_a_usage_error(tmp_path):
    """``newdir/`` is no file: refused before anything is compiled, not by a traceback at
    the end of the run."""
    target = str(tmp_path / "newdir") + os.sep
    proc = _run("--variant", "serial", "--json", target)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--json" in proc.stderr and "kernel signatures" not in proc.stdout
    assert not os.path.exists(target)


def test_output_path_refuses_folders_and_trailing_separators(tmp_path):
    import argparse

    from dflash2_numba._cli import output_path

    (tmp_path / "d").mkdir()
    for bad in ("", str(tmp_path / "d"), str(tmp_path / "d") + os.sep, str(tmp_path / "new") + os.sep):
        with pytest.raises(argparse.ArgumentTypeError):
            output_path(bad)
    assert output_path(str(tmp_path / "d" / "rows.json")) == str(tmp_path / "d" / "rows.json")
    (tmp_path / "old.json").write_text("[]")                  # an existing writable file is fine
    assert output_path(str(tmp_path / "old.json")) == str(tmp_path / "old.json")


# the check, run as a user who may write the folder but not the file (root may write any
# file: the child drops to nobody after loading _cli, which needs only the standard library)
_READ_ONLY_CHILD = r"""
import importlib.util, os, sys, tempfile
spec = importlib.util.spec_from_file_location("cli_under_test", sys.argv[1])
cli = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cli)
import argparse
folder = tempfile.mkdtemp()
os.chmod(folder, 0o777)
path = os.path.join(folder, "rows.json")
with open(path, "w") as f:
    f.write("[]")
os.chmod(path, 0o444)
print("FOLDER", folder)
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
try:
    cli.output_path(path)
    print("ACCEPTED")
except argparse.ArgumentTypeError as e:
    print("REFUSED", e)
"""


def test_output_path_refuses_an_existing_file_it_cannot_write():
    cli = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "dflash2_numba", "_cli.py")
    proc = subprocess.run([sys.executable, "-c", _READ_ONLY_CHILD, cli], capture_output=True,
                          text=True, timeout=120)
    lines = proc.stdout.splitlines()
    folders = [ln.split(" ", 1)[1] for ln in lines if ln.startswith("FOLDER ")]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert lines[-1].startswith("REFUSED") and "not writable" in lines[-1], proc.stdout


# --- --dump ---------------------------------------------------------------------------

def test_dump_into_an_existing_file_is_a_usage_error(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("hi")
    proc = _run("--variant", "serial", "--dump", str(afile))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--dump" in proc.stderr and "kernel signatures" not in proc.stdout
    assert afile.read_text() == "hi"


def test_empty_dump_is_a_usage_error():
    proc = _run("--variant", "serial", "--dump", "")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--dump" in proc.stderr and "kernel signatures" not in proc.stdout


def test_dump_folder_is_made_when_the_arguments_are_read(tmp_path):
    """The folder (and its parents) exists before anything compiles: a run that stops on a
    later usage error has already made it."""
    target = tmp_path / "a" / "b"
    proc = _run("--dump", str(target), "--variant", "bogus")
    assert proc.returncode == 2 and "no attention or gdn variant 'bogus'" in proc.stderr
    assert target.is_dir()


# --- the command line the report re-runs itself with, and the simulator switch ----------

def test_empty_argv_is_not_replaced_by_the_processes_own(monkeypatch):
    """``main([])`` re-runs the report with no arguments, not with ``sys.argv`` (pytest's)."""
    from dflash2_numba import _compat, ptx

    calls = []
    monkeypatch.setattr(_compat, "SIMULATOR", True)
    monkeypatch.setattr(ptx.subprocess, "call", lambda cmd, env=None: calls.append((cmd, env)) or 0)
    monkeypatch.setattr(sys, "argv", ["host-script", "some_script_arg", "-k", "foo"])
    assert ptx.main([]) == 0
    assert calls and calls[0][0] == [sys.executable, "-m", "dflash2_numba.ptx"]
    assert "NUMBA_ENABLE_CUDASIM" not in calls[0][1]
    calls.clear()
    monkeypatch.setattr(sys, "argv", ["host-script", "--family", "gdn"])
    assert ptx.main() == 0                                  # None: the process's own arguments
    assert calls[0][0] == [sys.executable, "-m", "dflash2_numba.ptx", "--family", "gdn"]


_SWITCH_CHILD = r"""
import json, subprocess, sys, warnings
warnings.simplefilter("ignore")
calls = []
subprocess.call = lambda cmd, env=None: calls.append([cmd, sorted(env)]) or 0
import dflash2_numba
from dflash2_numba import ptx
from dflash2_numba._compat import SIMULATOR, cuda
rc = ptx.main(sys.argv[1:]) if sys.argv[1:] else None
print("JSON" + json.dumps({"simulator": SIMULATOR, "numba_sim": cuda.to_device.__module__.startswith(
    "numba.cuda.simulator"), "rc": rc, "calls": calls}))
"""


def _switch_child(value, *args):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM=value)
    proc = subprocess.run([sys.executable, "-c", _SWITCH_CHILD, *args], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    import json

    return json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("JSON")][-1][4:])


@pytest.mark.parametrize("value,on", [("1", True), ("01", True), ("true", False), ("0", False),
                                      ("", False)])
def test_simulator_switch_is_read_as_numba_reads_it(value, on):
    """``import dflash2_numba`` never dies on a value numba tolerates, and the package runs
    the simulator exactly when numba does."""
    got = _switch_child(value)
    assert got["simulator"] is on and got["numba_sim"] is on


def test_report_reruns_itself_without_the_simulator_for_any_spelling_of_on():
    got = _switch_child("01", "--variant", "serial")
    assert got["rc"] == 0 and len(got["calls"]) == 1
    cmd, env_keys = got["calls"][0]
    assert cmd[1:] == ["-m", "dflash2_numba.ptx", "--variant", "serial"]
    assert "NUMBA_ENABLE_CUDASIM" not in env_keys


# --- the "not launched at sm_XX" line ------------------------------------------------

def test_kernels_not_launched_are_those_of_the_chosen_variant_each_once():
    import dflash2_numba  # noqa: F401
    from dflash2_numba._registry import all_kernel_specs
    from dflash2_numba.ptx import kernels_not_for

    every = kernels_not_for((7, 0))
    assert every and len(every) == len(set(every))
    assert kernels_not_for((7, 0), variant="serial") == []
    by_variant = {}
    for fam, vname, spec in all_kernel_specs():
        by_variant.setdefault((fam, vname), []).append(spec)
    for (fam, vname), specs in by_variant.items():
        names = kernels_not_for((7, 0), fam, vname)
        assert len(names) == len(set(names)), (vname, names)
        own = {s.name for s in specs}
        assert set(names) <= own, (vname, set(names) - own)
        assert set(names) == {s.name for s in specs if tuple(s.min_cc) > (7, 0)} - {
            s.name for s in specs if tuple(s.min_cc) <= (7, 0) <= tuple(s.max_cc)}
