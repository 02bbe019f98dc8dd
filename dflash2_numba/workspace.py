"""AttentionWorkspace: caller-owned device buffers for one verify_attention shape.

Holds the FP32 split workspace (``partial [B, S, Q, Hq, D]``, ``lse [B, S, Q, Hq, 2]``)
and the output (``out [B, Q, Hq, D]`` in ``out_dtype``). Each buffer is a view into a
larger flat allocation with ``guard`` elements on both sides; :meth:`fill_sentinel`
writes -777.0 everywhere, guards included, and :meth:`guards_intact` reports whether
every guard element still holds the sentinel (nothing wrote outside its buffer).
The buffers live on the device current when the workspace is built (``device``); a call
passes it only with arrays of that device, and its own methods run there.
"""
from __future__ import annotations

import math
from typing import Dict

import numpy as np

from ._arrays import check_dtype_choice, check_positive_int, int_text, resolve_stream
from . import _devices
from ._compat import cuda
from .contract import (ATTENTION_OUT_DTYPES, DEFAULT_SPLITS, HEAD_DIMS, MAX_LOGICAL_SPLITS, MAX_Q,
                       SENTINEL)

MAX_GUARD = 1 << 20      # guard elements on each side of a buffer (4 MiB of FP32)


class GuardedBuffer:
    """A device array ``view`` of ``shape`` inside a flat allocation with ``guard`` elements
    on each side: :meth:`fill` writes the sentinel everywhere, guards included, and
    :meth:`guards_intact` says whether every guard element still holds it."""

    def __init__(self, shape, dtype, guard: int, device=None):
        self.device = device
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.guard = int(guard)
        self.size = math.prod(self.shape)    # (Python ints: np.prod wraps past int64)
        self.flat = cuda.device_array(self.size + 2 * self.guard, dtype=self.dtype)
        self.view = self.flat[self.guard:self.guard + self.size].reshape(self.shape)
        self._host_sentinel = None

    def fill(self, stream=0) -> None:
        if self._host_sentinel is None:
            self._host_sentinel = np.full(self.flat.shape, SENTINEL, dtype=self.dtype)
        with _devices.on_device(self.device):
            self.flat.copy_to_device(self._host_sentinel, stream=stream)

    def guards_intact(self) -> bool:
        # the launches may be on any stream, a non-blocking one (torch, CuPy) included,
        # which a copy on the legacy default stream would not wait for: wait for them all
        with _devices.on_device(self.device):
            cuda.synchronize()
            host = self.flat.copy_to_host()
        sent = np.asarray(SENTINEL, dtype=self.dtype).tobytes()
        lo = host[:self.guard].tobytes()
        hi = host[self.guard + self.size:].tobytes()
        return lo == sent * self.guard and hi == sent * self.guard


class AttentionWorkspace:
    """Device buffers for ``verify_attention`` at one shape, with guard rows.

    ``partial``, ``lse`` and ``out`` are numba device arrays; pass the workspace as
    ``workspace=`` (its ``out`` is the combine's output when ``out_dtype`` matches and no
    device ``out`` is given; a numpy ``out`` then receives a copy of it).
    """

    def __init__(self, *, batch: int, q_len: int, heads: int, head_dim: int,
                 splits: int = DEFAULT_SPLITS, out_dtype="float16", guard: int | None = None):
        self.batch = check_positive_int(batch, "batch")
        self.q_len = check_positive_int(q_len, "q_len", hi=MAX_Q)
        self.heads = check_positive_int(heads, "heads")
        self.head_dim = check_positive_int(head_dim, "head_dim")
        if self.head_dim not in HEAD_DIMS:
            raise ValueError(f"head_dim: must be one of {HEAD_DIMS}, got {head_dim}")
        self.splits = check_positive_int(splits, "splits", hi=MAX_LOGICAL_SPLITS)
        self.out_dtype = check_dtype_choice(out_dtype, "out_dtype", ATTENTION_OUT_DTYPES)
        g = self.head_dim if guard is None else check_positive_int(guard, "guard", hi=MAX_GUARD)
        B, S, Q, H, D = self.batch, self.splits, self.q_len, self.heads, self.head_dim
        shapes = {"partial": ((B, S, Q, H, D), np.float32), "lse": ((B, S, Q, H, 2), np.float32),
                  "out": ((B, Q, H, D), self.out_dtype)}
        self.device = _devices.current_device()     # (None on the simulator)
        nbytes = sum((math.prod(sh) + 2 * g) * np.dtype(dt).itemsize
                     for sh, dt in shapes.values())
        try:
            self._buffers: Dict[str, GuardedBuffer] = {
                name: GuardedBuffer(sh, dt, g, self.device) for name, (sh, dt) in shapes.items()}
        except Exception as exc:   # noqa: BLE001  (numpy / the driver: out of memory)
            raise ValueError(f"batch, splits, q_len, heads, head_dim: the workspace needs "
                             f"{int_text(nbytes)} bytes, which cannot be allocated "
                             f"({type(exc).__name__})") from None

    @property
    def partial(self):
        return self._buffers["partial"].view

    @property
    def lse(self):
        return self._buffers["lse"].view

    @property
    def out(self):
        return self._buffers["out"].view

    def fill_sentinel(self, stream=0) -> "AttentionWorkspace":
        """-777.0 in every element of every buffer, guards included, copied on ``stream``
        (any stream ``verify_attention`` takes, of the workspace's device; ``TypeError`` /
        ``ValueError`` naming ``stream`` otherwise, before anything is written)."""
        with _devices.on_device(self.device):
            strm = resolve_stream(stream)
            _devices.check_stream(strm, self.device)
        for buf in self._buffers.values():
            buf.fill(strm)
        return self

    def guards_intact(self) -> bool:
        """True while no element outside the real buffers has been written. Waits for all
        work on the device first (``cuda.synchronize()``: launches on any stream, a
        non-blocking one included), so it is not for use inside a stream capture."""
        return all(buf.guards_intact() for buf in self._buffers.values())

    def guard_report(self) -> Dict[str, bool]:
        """``{buffer name: guards intact}`` for ``partial``, ``lse`` and ``out`` (waits for the
        device like :meth:`guards_intact`)."""
        return {name: buf.guards_intact() for name, buf in self._buffers.items()}

    def matches(self, B, S, Q, H, D) -> bool:
        """Whether the workspace was built for batch ``B``, ``S`` splits, ``Q`` new tokens,
        ``H`` query heads and head dim ``D`` (not its ``out_dtype``: a call of another output
        dtype uses the split records and leaves the ``out`` slot alone)."""
        return (self.batch, self.splits, self.q_len, self.heads, self.head_dim) == (B, S, Q, H, D)

    def __repr__(self) -> str:
        return (f"AttentionWorkspace(batch={self.batch}, q_len={self.q_len}, heads={self.heads}, "
                f"head_dim={self.head_dim}, splits={self.splits}, out_dtype={self.out_dtype})")
