"""Argument types the command-line tools share (argparse ``type=`` callables: what they
refuse is a usage error, exit status 2, before any work)."""
from __future__ import annotations

import argparse
import os
import re
from typing import List, Optional, Sequence


def _separators() -> tuple:
    return tuple(sep for sep in (os.sep, os.altsep) if sep)


def output_path(text: str) -> str:
    """An output file: its folder must exist and be writable now, and the path must name a
    file (not end in a separator, not be a folder, not be an existing file that cannot be
    written), so that a long run is not lost at its end to a path that cannot be written.
    A regular file (or a path to none yet) is opened for appending now, which nothing about
    its contents changes (a file made by the probe is removed again): that also refuses what
    the permission bits do not show, such as a link into a missing folder or a path under
    ``/proc``."""
    if not text or text.endswith(_separators()) or os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"expected a file path, got {text!r}")
    if os.path.exists(text) and not os.access(text, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: the file exists and is not writable")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: no writable folder {folder!r}")
    if os.path.exists(text) and not os.path.isfile(text):
        return text                 # (a device such as /dev/null: not probed)
    made = not os.path.lexists(text)
    try:
        with open(text, "a"):
            pass
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {e.strerror or e}") from None
    if made:
        os.remove(text)
    return text


def plot_path(text: str) -> str:
    """An output image for matplotlib: :func:`output_path`, ending in a format matplotlib
    writes (``.png``, ``.pdf``, ``.svg``, ...): a path without one would be written with
    ``.png`` added, one matplotlib cannot write would fail at the end of the run."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    ext = os.path.splitext(text)[1].lstrip(".").lower()
    if ext not in formats:
        raise argparse.ArgumentTypeError(
            f"expected an image file ending in one of .{', .'.join(formats)}, got {text!r}")
    return output_path(text)


def output_folder(text: str) -> str:
    """An output folder (``--dump``): not empty, not an existing file; made now (with its
    parents) and writable, so that nothing is compiled before a bad folder is refused."""
    if not text:
        raise argparse.ArgumentTypeError("expected a folder path, got ''")
    if os.path.lexists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"expected a folder, but {text!r} exists and is not one")
    try:
        os.makedirs(text, exist_ok=True)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot make the folder {text!r}: {e.strerror or e}") from None
    if not os.access(text, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write into the folder {text!r}")
    return text


def compute_capability(text: str) -> tuple:
    """``"7.0"`` -> ``(7, 0)``."""
    parts = text.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected MAJOR.MINOR, e.g. 7.0, got {text!r}")
    return int(parts[0]), int(parts[1])


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask; the machine's count where the
    platform has no mask)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:          # pragma: no cover (no sched_getaffinity: not Linux)
        return max(1, os.cpu_count() or 1)


def positive_int(text: str) -> int:
    """An int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def seed(text: str) -> int:
    """A random seed numpy's generators take: an int >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite float > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def positive_int_list(text: str, hi: Optional[int] = None) -> List[int]:
    """A comma-separated, non-empty list of positive ints (contexts, lengths), written in
    plain decimal digits (not ``1_0``, ``+5`` or ``0x10``), each at most ``hi`` when given;
    a value given twice is kept once, where it first stands."""
    items = [x.strip() for x in text.split(",")]
    values = [int(x) for x in items if re.fullmatch(r"[0-9]+", x)]
    if len(values) != len(items) or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers, got {text!r}")
    if hi is not None and any(v > hi for v in values):
        raise argparse.ArgumentTypeError(
            f"expected values of at most {hi}, got {max(values)} in {text!r}")
    return list(dict.fromkeys(values))


def int_list_upto(hi: int):
    """An argparse type: :func:`positive_int_list` with each value at most ``hi``."""
    def parse(text: str) -> List[int]:
        return positive_int_list(text, hi)

    parse.__name__ = f"positive integers up to {hi}"
    return parse


def variant_list(spec: str, known: Sequence[str]) -> List[str]:
    """``--variants``: ``all`` (every name in ``known``) or a non-empty comma-separated list
    of names in ``known``; ``ValueError`` with the message otherwise (the tool makes it a
    usage error, exit status 2)."""
    if spec.strip().lower() == "all":
        return list(known)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        what = f"unknown: {', '.join(unknown)}" if unknown else f"no name in {spec!r}"
        raise ValueError(f"{what}; known: {', '.join(known)}")
    return names
