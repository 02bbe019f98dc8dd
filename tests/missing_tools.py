"""What a test does when something it needs beyond the package is missing: a tool of the
cuda12 extra (a ptxas that targets sm_70, libNVVM, nvdisasm) or, on a GPU host, torch or cupy.

The README's test command installs the cuda12 extra, so there a missing tool is a broken
install: the test fails, naming what is missing, instead of adding to a skip count nobody
reads. ``DFLASH2_SKIP_MISSING=1`` (an install without the cuda12 extra, a GPU host without
torch or cupy) turns those failures into skips."""
import importlib
import os

import pytest

SKIP_MISSING = os.environ.get("DFLASH2_SKIP_MISSING", "0") == "1"


def missing(what: str):
    """End the running test because ``what`` is missing: a failure, or with
    ``DFLASH2_SKIP_MISSING=1`` a skip."""
    if SKIP_MISSING:
        pytest.skip(what)
    pytest.fail(f"{what} (DFLASH2_SKIP_MISSING=1 skips such tests instead)", pytrace=False)


def module(name: str):
    """``name`` imported, or the test ends as ``missing`` says."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"needs {name}: {e}")
