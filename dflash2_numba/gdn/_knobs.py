"""The GDN variants' tuning knobs: the ``DFLASH2_GDN_*`` environment variables, their
names, and the readers that check a value before a variant uses it.

Every knob a ``chunked``-family variant reads is read through :func:`integer` or
:func:`choice` (or a variant's own parser built on :func:`raw` and :func:`refuse`) when a
plan is made, in the variant's ``prepare`` before its scratch is allocated, never at
import: a value the knob does not accept raises ``ValueError`` naming the variable, the
value and what it accepts, so ``plan_gdn`` / ``gdn_prefill`` refuse it before any launch
and nothing is written. Unset or empty means the knob's default; spaces around a value
are ignored. Nothing is clamped: a value that is accepted is used as given.

A module that reads a knob may keep an attribute for it (``chunked_split.COLS``,
``.STATE_THREADS``, ``.STAGE_KP``, ``chunked_ws.COPY_THREADS``,
``chunked_smprep.PREP_THREADS``) that a test or a bench script sets to override the
environment: ``None``, the default, means the environment; a value set there is checked
as the variable's would be (and a refusal names the variable).

The knobs, what they accept (unset or empty: the default in brackets) and who reads them;
the docstring of the module named says more:

* ``DFLASH2_GDN_SPLIT_COLS``: 4, 8 or 12 state columns per CTA [0: automatic]
  (:mod:`.chunked_split`; every variant built on its tables);
* ``DFLASH2_GDN_SPLIT_THREADS``: a multiple of 32 from 32 to 320 [0: the default]
  (:mod:`.chunked_split`, :mod:`.chunked_ws` and the variants built on it; GPU only);
* ``DFLASH2_GDN_STAGE_KP``: ``auto``, ``1``, ``0`` (``true`` / ``false``, ``True`` /
  ``False`` too) [``auto``] (the same variants);
* ``DFLASH2_GDN_WS_COPY_THREADS``: a multiple of 32 from 32 to 352, and at most 384
  with the compute threads [0: the default] (:mod:`.chunked_ws` and the variants built
  on it; GPU only);
* ``DFLASH2_GDN_PIPE_STAGES``: an integer of at least 1 [8] (:mod:`.chunked_pipe`; GPU
  only);
* ``DFLASH2_GDN_SMPREP_THREADS``: a multiple of 32 from 32 to 256 [0: 256, 64 on the
  simulator] (:mod:`.chunked_smprep`, :mod:`.chunked_rec`, :mod:`.chunked_rec_pipe`);
* ``DFLASH2_GDN_REC_THREADS``: ``compute,copy``, copy a multiple of 32 and at least 32,
  compute at least 1, at most 256 in all [128,128] (:mod:`.chunked_rec` and the variants
  built on it; GPU only);
* ``DFLASH2_GDN_REC_ROWS``: ``r1,r2``, r1 one of 0, 1, 2, 2p, 2s and r2 one of 0, 2, 4
  [2,0] (the same variants);
* ``DFLASH2_GDN_OUT_TILE``: ``8x8`` or ``4x8`` [8x8] (:mod:`.chunked_rec_pipe`,
  :mod:`.chunked_overlap`, :mod:`.chunked_ahead`; used from compute capability 8.0 on);
* ``DFLASH2_GDN_SEGMENTS``: an integer of at least 1, capped at the chunk slots
  [automatic] (:mod:`.chunked_overlap`, :mod:`.chunked_ahead`; so are the next four);
* ``DFLASH2_GDN_OVERLAP_PREP_THREADS``: a multiple of 32 from 32 to 256 [128] (GPU only);
* ``DFLASH2_GDN_OVERLAP_CARVEOUT``: an integer percent from 0 to 100, or ``none`` (any
  case: the driver's choice) [80];
* ``DFLASH2_GDN_OVERLAP_OUT``: ``end`` or ``segments`` [end];
* ``DFLASH2_GDN_OVERLAP_PREP``: ``smem`` or ``split`` [smem].

"GPU only": the simulator runs its own thread counts (one chunk a group for the stages)
whatever the knob says; the value is checked all the same.
"""
from __future__ import annotations

import os
import re
from typing import Callable, NoReturn, Optional, Sequence

# chunked_split (and every variant built on its tables: all but chunked itself)
SPLIT_COLS = "DFLASH2_GDN_SPLIT_COLS"
SPLIT_THREADS = "DFLASH2_GDN_SPLIT_THREADS"
STAGE_KP = "DFLASH2_GDN_STAGE_KP"
# chunked_pipe
PIPE_STAGES = "DFLASH2_GDN_PIPE_STAGES"
# chunked_ws / chunked_wsr / chunked_wsr_two_loop / chunked_smprep
WS_COPY_THREADS = "DFLASH2_GDN_WS_COPY_THREADS"
# chunked_smprep's pre-pass (also chunked_rec's, chunked_rec_pipe's, and on the simulator
# chunked_overlap's and chunked_ahead's)
SMPREP_THREADS = "DFLASH2_GDN_SMPREP_THREADS"
# chunked_rec / chunked_rec_pipe / chunked_overlap / chunked_ahead
REC_THREADS = "DFLASH2_GDN_REC_THREADS"
REC_ROWS = "DFLASH2_GDN_REC_ROWS"
# chunked_rec_pipe / chunked_overlap / chunked_ahead
OUT_TILE = "DFLASH2_GDN_OUT_TILE"
# chunked_overlap / chunked_ahead
SEGMENTS = "DFLASH2_GDN_SEGMENTS"
OVERLAP_PREP_THREADS = "DFLASH2_GDN_OVERLAP_PREP_THREADS"
OVERLAP_CARVEOUT = "DFLASH2_GDN_OVERLAP_CARVEOUT"
OVERLAP_OUT = "DFLASH2_GDN_OVERLAP_OUT"
OVERLAP_PREP = "DFLASH2_GDN_OVERLAP_PREP"

NAMES = (SPLIT_COLS, SPLIT_THREADS, STAGE_KP, PIPE_STAGES, WS_COPY_THREADS, SMPREP_THREADS,
         REC_THREADS, REC_ROWS, OUT_TILE, SEGMENTS, OVERLAP_PREP_THREADS, OVERLAP_CARVEOUT,
         OVERLAP_OUT, OVERLAP_PREP)

_INT = re.compile(r"[+-]?[0-9]+\Z")


def raw(name: str, override=None) -> str:
    """The knob's value as given: ``override`` as text when it is not None, else the
    environment variable ``name`` (empty when unset)."""
    if override is None:
        return os.environ.get(name, "")
    return override if isinstance(override, str) else str(override)


def refuse(name: str, value: str, accepted: str) -> NoReturn:
    """Raise the ``ValueError`` of a refused knob: the variable, its value, what it
    accepts."""
    raise ValueError(f"{name}={value!r} is not accepted: expected {accepted}")


def parse_int(text: str) -> Optional[int]:
    """``text`` (spaces around it ignored) as a decimal integer, or None when it is not
    one."""
    text = text.strip()
    return int(text) if _INT.match(text) else None


def integer(name: str, default: int, accepted: str, ok: Callable[[int], bool],
            override=None) -> int:
    """Knob ``name`` as an integer: ``default`` when unset or empty, else the value if it
    is a decimal integer ``n`` with ``ok(n)``; otherwise refused (``accepted`` says what
    is accepted)."""
    value = raw(name, override)
    if not value.strip():
        return default
    n = parse_int(value)
    if n is None or not ok(n):
        refuse(name, value, accepted)
    return n


def warps(name: str, default: int, most: int, zero_is_default: bool = True,
          override=None) -> int:
    """Knob ``name`` as a thread count: whole warps (a multiple of 32) from 32 to
    ``most``; unset or empty (and ``0`` when ``zero_is_default``) give ``default``."""
    zero = " (0 or unset: the default)" if zero_is_default else " (unset: the default)"
    n = integer(name, default, f"a multiple of 32 from 32 to {most}{zero}",
                lambda n: (n == 0 and zero_is_default) or (32 <= n <= most and n % 32 == 0),
                override)
    return default if n == 0 else n


def choice(name: str, default: str, choices: Sequence[str], override=None) -> str:
    """Knob ``name`` as one of ``choices`` (exact text, spaces around it ignored):
    ``default`` when unset or empty; anything else refused."""
    value = raw(name, override)
    text = value.strip()
    if not text:
        return default
    if text not in choices:
        refuse(name, value, "one of " + ", ".join(repr(c) for c in choices) + " (unset: "
               + repr(default) + ")")
    return text
