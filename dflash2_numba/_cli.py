"""Argument types the command-line tools share (argparse ``type=`` callables: what they
refuse is a usage error, exit status 2, before any work)."""
from __future__ import annotations

import argparse
import os


def output_path(text: str) -> str:
    """An output file: its folder must exist and be writable now, so that a long run is not
    lost at its end to a path that cannot be written."""
    if not text or os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"expected a file path, got {text!r}")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: no writable folder {folder!r}")
    return text


def compute_capability(text: str) -> tuple:
    """``"7.0"`` -> ``(7, 0)``."""
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected MAJOR.MINOR, e.g. 7.0, got {text!r}")
    return int(parts[0]), int(parts[1])
