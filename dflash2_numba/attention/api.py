"""verify_attention: validation, buffer binding and launch for every attention variant.

:func:`plan_attention` runs every check of ``api.md`` (dtypes, shapes, strides,
scales, every block-table entry a request can reach, lengths against the table
width, the caller's ``out`` / workspace) before anything is launched or written, and
returns an :class:`AttentionPlan` whose :meth:`~AttentionPlan.launch` only launches
kernels, so it can be captured into a CUDA graph and replayed (the kernels read ``q``,
``seq_lens``, ``row_lengths`` and the block table on the device each time; values changed
in place must still pass the plan's checks, which :meth:`~AttentionPlan.check_inputs`
runs again). :func:`verify_attention` is plan + launch + :meth:`~AttentionPlan.results`
in the caller's kind of array.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from .. import _arrays as A
from .. import _devices
from .._compat import cuda
from .._registry import UnsupportedShape, get_variant
from ..contract import (ATTENTION_OUT_DTYPES, DEFAULT_SPLITS, HEAD_DIMS, LIVE_M_THRESHOLD,
                        MAX_GRID_YZ, MAX_GROUP, MAX_LOGICAL_SPLITS, MAX_Q, ceil_div,
                        default_row_lengths)
from ..e4m3 import DECODE_TABLE, E4M3_MAX
from ..workspace import AttentionWorkspace
from .combine_batched import COLS as BATCHED_COMBINE_COLS

_decode_tables = {}      # device ordinal -> the E4M3 decode table in that device's memory


def _device_decode_table(device):
    """The E4M3 decode table on ``device`` (the current one), copied there once."""
    table = _decode_tables.get(device)
    if table is None:
        table = _decode_tables[device] = cuda.to_device(np.ascontiguousarray(DECODE_TABLE))
    return table


@dataclass
class AttentionResult:
    """One call's output and split records. Splits ``s >= A`` (inactive, contract A) of
    ``partial`` and ``lse`` are never written: they keep what the buffer held."""

    out: Any        # [B, Q, Hq, D], float16 or float32
    partial: Any    # float32 [B, S, Q, Hq, D]
    lse: Any        # float32 [B, S, Q, Hq, 2]: (max, sum)


@dataclass
class AttentionPlan:
    """Validated, device-bound arguments of one verify_attention call."""

    variant: Any
    q_shape: tuple
    page_size: int
    splits: int
    use_rows: int
    qk_scale: np.float32
    v_scale: np.float32
    q: Any
    k_cache: Any
    v_cache: Any
    block_table: Any
    seq_lens: Any
    row_lengths: Any
    decode_table: Any
    partial: Any
    lse: Any
    out: Any
    kind: str
    stream: Any = 0
    out_host: Any = None     # a caller's numpy ``out``, filled after the launch
    workspace: Any = None    # the caller's AttentionWorkspace, if one was given
    device: Optional[int] = None   # the CUDA device of every buffer (None: the simulator)
    # what a variant derives from the plan for its launches (kernel views of the caches,
    # the schedule for the device), computed at the first launch and reused
    launch_cache: dict = field(default_factory=dict, repr=False)
    # the plan-time checks on values, bound to this plan's arrays (check_inputs runs it)
    value_check: Any = field(default=None, repr=False)
    # the streams launches run on (the plan's own, or one a launch names: checked once)
    launch_streams: Any = field(init=False, repr=False)

    def __post_init__(self):
        self.launch_streams = _devices.LaunchStreams(self.stream, self.device)

    def launch_setup(self, key: str, build):
        """``build(self)`` the first time ``key`` is asked for, the same object after that:
        what a variant derives from the plan for its launches, paid once per plan."""
        got = self.launch_cache.get(key)
        if got is None:
            got = self.launch_cache[key] = build(self)
        return got

    def launch(self, stream=None) -> None:
        """Launch the variant's kernels (no checks, no transfers): graph-capturable. They
        write the device buffers only (``out``, ``partial``, ``lse``); a numpy ``out`` is
        filled by :meth:`results`. They run on the plan's device (its context made current
        for them); a ``stream`` given here must be one of that device."""
        with _devices.on_device(self.device):
            self.variant.run(self, self.launch_streams.resolve(stream))

    def results(self) -> AttentionResult:
        """``AttentionResult(out, partial, lse)`` of the last launch, in the kind of array
        ``q`` came in (numpy: copies; device: the plan's own buffers, which the next launch
        overwrites). A caller's numpy ``out`` is filled and returned as ``out`` whatever
        kind ``q`` is."""
        with _devices.on_device(self.device):
            return self._results()

    def _results(self) -> AttentionResult:
        kind, strm = self.kind, self.stream
        host_kind = kind == A.KIND_NUMPY
        if self.out_host is not None:
            self.out_host[...] = self.out.copy_to_host(stream=strm)
            out = self.out_host
        else:
            out = self.out.copy_to_host(stream=strm) if host_kind else A.result_like(kind, self.out)
        if host_kind:
            res = AttentionResult(out, self.partial.copy_to_host(stream=strm),
                                  self.lse.copy_to_host(stream=strm))
        else:
            res = AttentionResult(out, A.result_like(kind, self.partial),
                                  A.result_like(kind, self.lse))
        if strm != 0 and (host_kind or self.out_host is not None):
            strm.synchronize()
        return res

    def check_inputs(self) -> None:
        """Run the plan-time checks on values again, on what the launches read now.

        A plan binds arrays, not values: every launch reads ``q``, ``seq_lens``,
        ``row_lengths`` and the block table as they are then. Device arrays are bound
        zero-copy (the caller's memory); numpy arrays were copied to the device at plan
        time, and the launches read those copies, so changing a numpy array after planning
        changes nothing (plan again instead). Values changed in place must
        still pass these checks (q finite, lengths within what the table can name, every
        entry a request reaches naming a page); the kernels stay inside the caches whatever
        they read (pages outside the table are masked), but the result is defined only for
        values that pass. Call this after changing them and before launching, outside any
        graph capture (it copies device values to the host); ``ValueError`` names the
        argument."""
        with _devices.on_device(self.device):
            self.value_check()


def _check_cache(arg: A.ArrayArg, name_layout: str):
    A.check_dtype(arg, [np.uint8])
    A.check_ndim(arg, 4, name_layout)
    if any(n < 1 for n in arg.shape):     # (first: numpy gives an empty array zero strides)
        raise ValueError(f"{arg.name}: every dimension must be >= 1, got {arg.shape}")
    A.check_unit_last_stride(arg)
    A.check_nonnegative_strides(arg)


def _check_grid_dims(B: int, Hkv: int, Hq: int, D: int) -> None:
    """Every variant's launches fit CUDA's grid: the second and third grid dimensions are at
    most 65535, and they hold B (frozen's split), B * Hkv (the register-tiled splits), Hq
    (frozen's split and combine) and Hq * ceil(D / 64) (the batched combine). One rule for
    every variant, so that any shape one accepts, all accept."""
    cols = ceil_div(D, BATCHED_COMBINE_COLS)
    if B * Hkv > MAX_GRID_YZ or Hq * cols > MAX_GRID_YZ:
        raise ValueError(f"q: batch x KV heads ({B} x {Hkv}) and query heads x {cols} ({Hq} x "
                         f"{cols}) must each be <= {MAX_GRID_YZ} (a CUDA grid dimension)")


# The scores the contract keeps apart from its own markers: a masked key scores -1e30, and
# the combine takes a split as empty when its max is not above -1e20 (contract A).
SCORE_LIMIT = -float(LIVE_M_THRESHOLD)


def _check_score_range(q_values: np.ndarray, qk_scale: np.float32) -> None:
    """Every score stays below ``SCORE_LIMIT`` in size whatever the caches hold: ``|qk_scale|``
    times a row's ``sum |q|`` times 448 (the largest E4M3 value) bounds it, and the K16
    sums' partial results too. Past that bound (``scale * k_scale`` of about 1e10 or more
    at full-range FP16 q) a key could score below the masked keys' -1e30, the combine
    could drop a split, or the scores could overflow FP32 (the call then gives zeros),
    where the FP64 oracle gives the softmax."""
    if q_values.size == 0 or qk_scale == 0:
        return
    l1 = np.abs(q_values.astype(np.float64)).sum(axis=-1)
    bound = abs(float(qk_scale)) * float(l1.max()) * E4M3_MAX
    if bound >= SCORE_LIMIT:
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(l1)), l1.shape))
        raise ValueError(
            f"scale: scale * k_scale = {float(qk_scale):.4g} with q row {idx} (sum |q| = "
            f"{float(l1.max()):.4g}) can score a key {bound:.3g} in size, past the "
            f"{SCORE_LIMIT:.0e} the contract's scores keep below (masked keys score -1e30; "
            f"the combine drops a split whose max is below -1e20); use a smaller scale or q")


def _check_values(qa: A.ArrayArg, sl: A.ArrayArg, ra: Optional[A.ArrayArg], bt: A.ArrayArg,
                  page_size: int, num_pages: int, qk_scale: np.float32, stream=0) -> None:
    """The checks on values (not shapes): q finite and its scores within the contract's
    range (:func:`_check_score_range`), the lengths within what the block table can name,
    and every block-table entry a request reaches naming a page. Run at plan time and by
    :meth:`AttentionPlan.check_inputs` (host copies of device arrays, made on ``stream``:
    the plan's, on which its numpy inputs were uploaded)."""
    B, Q = qa.shape[0], qa.shape[1]
    max_keys = bt.shape[1] * page_size
    # NaN / inf in q is the caller's error, not a NaN output
    _check_score_range(A.check_all_finite(qa, stream=stream), qk_scale)
    if ra is not None:
        L = ra.host_values(stream).astype(np.int64)
        A.check_int_range(L, "row_lengths", -(2 ** 31), max_keys)
        A.check_int_range(sl.host_values(stream), "seq_lens", -(2 ** 31) + MAX_Q, 2 ** 31 - 1)
    else:
        sv = sl.host_values(stream).astype(np.int64)
        A.check_int_range(sv, "seq_lens", -(2 ** 31) + MAX_Q, max_keys + Q - 1)
        L = default_row_lengths(sv, Q)
        A.check_int_range(L, "seq_lens (as row lengths)", -(2 ** 31), max_keys)
    # every block-table entry a request reaches must name a page
    table = bt.host_values(stream)
    T = L.max(axis=1)
    for b in range(B):
        cols = ceil_div(int(T[b]), page_size) if T[b] > 0 else 0
        if cols:
            A.check_int_range(table[b, :cols], f"block_table[{b}]", 0, num_pages - 1)




def plan_attention(q, k_cache, v_cache, block_table, seq_lens, *, scale, k_scale=1.0,
                   v_scale=1.0, row_lengths=None, splits=DEFAULT_SPLITS, variant="frozen",
                   out=None, workspace: Optional[AttentionWorkspace] = None,
                   out_dtype="float16", stream=None) -> AttentionPlan:
    """q8 verification attention (contract part A), validated and bound: an
    :class:`AttentionPlan` whose :meth:`~AttentionPlan.launch` only launches kernels.

    Arguments
        q: float16 ``[B, Q, Hq, D]``, ``1 <= Q <= 8``, ``D`` in 64 / 128 / 256.
        k_cache, v_cache: uint8 E4M3 bytes ``[num_pages, page_size, Hkv, D]`` (unit last
        stride), ``Hq = G * Hkv`` with ``G`` in 1..8.
        block_table: int32 ``[B, W]``: request ``b``'s key ``j`` lives in page
        ``block_table[b, j // page_size]``; every entry a request reaches must name a page.
        seq_lens: int32 ``[B]``: keys of each request, the ``Q`` new ones included.
        scale, k_scale, v_scale: finite numbers (the scales positive); the QK scale is
        ``float32(scale * k_scale)``, and ``|QK scale| * sum|q| * 448`` of every q row must
        stay below 1e20 (no score can leave the contract's range whatever the caches hold;
        ``ValueError`` naming ``scale``).
        row_lengths: int32 ``[B, Q]`` keys each query row sees (a row with ``L <= 0`` gives
        +0); default the causal rows ``seq_lens - Q + 1 + t``.
        splits: logical splits ``S`` (1..65536); only the active ones (``A``, contract A)
        are written: ``partial`` / ``lse`` of splits ``s >= A`` keep what the buffer held.
        variant: any name in ``attention_variants()``; a shape the variant was not built
        for raises ``UnsupportedShape`` (a ``ValueError``) naming ``variant``.
        out: caller-owned ``[B, Q, Hq, D]`` of ``out_dtype`` (numpy or device).
        workspace: an :class:`AttentionWorkspace` of the call's shape (its split records,
        and its ``out`` when no device ``out`` is given and the dtype matches).
        out_dtype: ``"float16"`` or ``"float32"`` (the combine's FP32 result before the cast).
        stream: numba / torch / CuPy / ``__cuda_stream__`` stream, a raw handle, or None;
        a stream of the call's device.

    Every device array (inputs, ``out``, the workspace) must be on one CUDA device
    (``ValueError`` naming the first on another); the call runs there, whatever device
    is current (numpy inputs only: on the current device).

    Every check runs first (``TypeError`` / ``ValueError`` naming the argument, nothing
    written); then numpy inputs are copied to the device and the buffers bound.
    """
    with _devices.CallDevice() as on_call_device:
        return _plan_attention(q, k_cache, v_cache, block_table, seq_lens, scale, k_scale,
                               v_scale, row_lengths, splits, variant, out, workspace,
                               out_dtype, stream, on_call_device)


def _plan_attention(q, k_cache, v_cache, block_table, seq_lens, scale, k_scale, v_scale,
                    row_lengths, splits, variant, out, workspace, out_dtype, stream,
                    on_call_device: _devices.CallDevice) -> AttentionPlan:
    """:func:`plan_attention`'s work; ``on_call_device`` is entered once the arrays are
    read, before the first device access (the value checks' copies)."""
    var = get_variant("attention", variant)
    qa = A.as_array_arg(q, "q")
    A.check_dtype(qa, [np.float16])
    A.check_ndim(qa, 4, "[B, Q, Hq, D]")
    A.check_nonnegative_strides(qa)
    B, Q, Hq, D = qa.shape
    if B < 1:
        raise ValueError(f"q: batch must be >= 1, got shape {qa.shape}")
    if not 1 <= Q <= MAX_Q:
        raise ValueError(f"q: Q (new tokens) must be in 1..{MAX_Q}, got {Q}")
    if D not in HEAD_DIMS:
        raise ValueError(f"q: head dim D must be one of {HEAD_DIMS}, got {D}")

    ka = A.as_array_arg(k_cache, "k_cache")
    va = A.as_array_arg(v_cache, "v_cache")
    _check_cache(ka, "[num_pages, page_size, Hkv, D]")
    _check_cache(va, "[num_pages, page_size, Hkv, D]")
    num_pages, page_size, Hkv, Dk = ka.shape
    if Dk != D:
        raise ValueError(f"k_cache: head dim {Dk} does not match q's {D}")
    if va.shape != ka.shape:
        raise ValueError(f"v_cache: shape {va.shape} does not match k_cache {ka.shape}")
    if Hq % Hkv != 0 or not 1 <= Hq // Hkv <= MAX_GROUP:
        raise ValueError(f"q: Hq = {Hq} must be G * Hkv with G in 1..{MAX_GROUP} (Hkv = {Hkv})")
    _check_grid_dims(B, Hkv, Hq, D)

    bt = A.as_array_arg(block_table, "block_table")
    A.check_dtype(bt, [np.int32])
    A.check_ndim(bt, 2, "[B, W]")
    A.check_nonnegative_strides(bt)   # (its values are copied to the host to be checked)
    if bt.shape[0] != B or bt.shape[1] < 1:
        raise ValueError(f"block_table: expected shape [B={B}, W>=1], got {bt.shape}")
    sl = A.as_array_arg(seq_lens, "seq_lens")
    A.check_dtype(sl, [np.int32])
    A.check_shape(sl, (B,), "[B]")
    A.check_nonnegative_strides(sl)

    scale32 = A.check_finite_scalar(scale, "scale")
    ks32 = A.check_finite_scalar(k_scale, "k_scale", positive=True)
    vs32 = A.check_finite_scalar(v_scale, "v_scale", positive=True)
    with np.errstate(over="ignore"):
        qk_scale = np.float32(scale32 * ks32)
    if not np.isfinite(qk_scale):
        raise ValueError(f"scale: scale * k_scale overflows float32 ({scale!r} * {k_scale!r})")
    S = A.check_positive_int(splits, "splits", hi=MAX_LOGICAL_SPLITS)
    ra = None
    if row_lengths is not None:
        ra = A.as_array_arg(row_lengths, "row_lengths")
        A.check_dtype(ra, [np.int32])
        A.check_shape(ra, (B, Q), "[B, Q]")
        A.check_nonnegative_strides(ra)
    ws_buffers = ([("workspace", workspace.partial)]
                  if isinstance(workspace, AttentionWorkspace) else [])
    on_call_device.enter(_devices.call_device(
        [(a.name, a) for a in (qa, ka, va, bt, sl, ra) if a is not None]
        + [("out", out)] + ws_buffers))
    _check_values(qa, sl, ra, bt, page_size, num_pages, qk_scale)

    odt = A.check_dtype_choice(out_dtype, "out_dtype", ATTENTION_OUT_DTYPES)
    if workspace is not None:
        if not isinstance(workspace, AttentionWorkspace):
            raise TypeError(f"workspace: expected an AttentionWorkspace, got {type(workspace).__name__}")
        if not workspace.matches(B, S, Q, Hq, D):
            raise ValueError(f"workspace: built for {workspace!r}, the call needs batch={B}, "
                             f"splits={S}, q_len={Q}, heads={Hq}, head_dim={D}")
    inputs = [(a.name, a) for a in (qa, ka, va, bt, sl, ra) if a is not None]
    oa = None
    if out is not None:
        oa = A.as_array_arg(out, "out")
        A.check_writable_output(oa, (B, Q, Hq, D), odt, "[B, Q, Hq, D]")
    # the combine writes the workspace's out slot when no device out is given (a numpy out
    # then receives a copy of it) and the slot's dtype is the call's
    ws_out_is_output = (workspace is not None and workspace.out_dtype == odt
                        and (oa is None or oa.kind == A.KIND_NUMPY))
    if workspace is not None:
        # the split kernels write the records (and the combine the out slot, when it is the
        # output) while the inputs are read: no shared device memory with an input
        A.check_disjoint("workspace.partial", workspace.partial, inputs)
        A.check_disjoint("workspace.lse", workspace.lse, inputs)
        if ws_out_is_output:
            A.check_disjoint("workspace.out", workspace.out, inputs)
    if oa is not None:
        # the combine writes out while the split records are read: no shared device memory
        # with an input or the workspace's records (the workspace's own out is its slot)
        others = list(inputs)
        if workspace is not None:
            others += [("workspace.partial", workspace.partial), ("workspace.lse", workspace.lse)]
        A.check_disjoint("out", oa, others)

    try:
        var.supports(dict(B=B, Q=Q, Hq=Hq, Hkv=Hkv, D=D, page_size=page_size, splits=S))
    except UnsupportedShape as exc:
        # a shape this variant was not built for (another variant may take it)
        raise UnsupportedShape(f"variant: {exc}") from None

    # ---- every check passed: bind device memory ----
    strm = A.resolve_stream(stream)
    _devices.check_stream(strm, on_call_device.device)

    def device_of(a: A.ArrayArg):
        """``a`` on the device (numpy: a compact host copy, then the device's), or a
        ValueError naming ``a`` when there is not the memory for it."""
        with A.memory_named(a.name, "its device copy"):
            return a.device(strm)

    if workspace is not None:
        partial, lse = workspace.partial, workspace.lse
    else:
        partial = A.allocate((B, S, Q, Hq, D), np.float32, strm, "q, splits")
        lse = A.allocate((B, S, Q, Hq, 2), np.float32, strm, "q, splits")
    if oa is not None and oa.kind != A.KIND_NUMPY:
        out_dev = oa.device()         # (device memory already: bound, not copied)
    elif ws_out_is_output:
        out_dev = workspace.out
    else:
        out_dev = A.allocate((B, Q, Hq, D), odt, strm, "q")
    rows_dev = device_of(ra) if ra is not None else cuda.to_device(np.zeros((1, 1), np.int32), stream=strm)
    q_dev, bt_dev, sl_dev = device_of(qa), device_of(bt), device_of(sl)
    k_dev, v_dev = device_of(ka), device_of(va)
    # the checks on values re-run on what the launches read: the caller's arrays for
    # device inputs (bound zero-copy), the plan's own copies for numpy ones
    bound = {nm: A.as_array_arg(dev, nm) for nm, dev in
             (("q", q_dev), ("block_table", bt_dev), ("seq_lens", sl_dev), ("row_lengths", rows_dev))}
    return AttentionPlan(
        variant=var, q_shape=(B, Q, Hq, D), page_size=int(page_size), splits=S,
        use_rows=0 if ra is None else 1, qk_scale=qk_scale, v_scale=vs32,
        q=q_dev, k_cache=k_dev, v_cache=v_dev,
        block_table=bt_dev, seq_lens=sl_dev, row_lengths=rows_dev,
        decode_table=_device_decode_table(on_call_device.device), partial=partial, lse=lse, out=out_dev,
        kind=qa.kind, stream=strm,
        out_host=oa.obj if oa is not None and oa.kind == A.KIND_NUMPY else None,
        workspace=workspace, device=on_call_device.device,
        value_check=lambda: _check_values(bound["q"], bound["seq_lens"],
                                          bound["row_lengths"] if ra is not None else None,
                                          bound["block_table"], int(page_size), int(num_pages),
                                          qk_scale, strm))


def verify_attention(q, k_cache, v_cache, block_table, seq_lens, *, scale, k_scale=1.0,
                     v_scale=1.0, row_lengths=None, splits=DEFAULT_SPLITS, variant="frozen",
                     out=None, workspace=None, out_dtype="float16", stream=None) -> AttentionResult:
    """q8 verification attention (contract part A): :func:`plan_attention` (the arguments,
    the checks), one launch, and :meth:`AttentionPlan.results`.

    Returns ``AttentionResult(out, partial, lse)`` in the kind of array ``q`` came in.
    Without a ``workspace`` the split records are fresh allocations, so ``partial`` and
    ``lse`` of the inactive splits (``s >= A``, which the contract never writes) hold
    whatever that memory held; pass a workspace filled as you need to define them.
    """
    plan = plan_attention(q, k_cache, v_cache, block_table, seq_lens, scale=scale,
                          k_scale=k_scale, v_scale=v_scale, row_lengths=row_lengths,
                          splits=splits, variant=variant, out=out, workspace=workspace,
                          out_dtype=out_dtype, stream=stream)
    plan.launch()
    return plan.results()
