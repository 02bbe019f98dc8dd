"""``gdn_prefill``: argument checks, the launch plan, and results in the caller's kind.

Every check runs before anything is copied to the device or launched; a failure raises
``TypeError`` (kind / dtype) or ``ValueError`` (shape, stride, range, value) naming the
argument, and no caller buffer is written.

Values
------
* ``scale`` must be finite in FP32 (default ``K ** -0.5`` rounded to FP32).
* ``g`` must be finite and ``<= 0`` (log decay) and ``beta`` finite. These are checked on
  the host (device arrays are copied to the host for it) unless ``check_values=False``;
  the kernels read ``min(g, 0)`` in any case, so they never exponentiate a positive
  number. q, k, v and the initial states (``initial_state``, or the ``state_cache`` rows
  that ``state_indices`` names) must be finite too, checked the same way; with
  ``check_values=False`` non-finite values propagate.

Layouts
-------
Device q, k, v, g and beta may be strided (non-negative strides) for ``chunked`` and
``serial``; the other variants read them as flat C-contiguous arrays (their pre-pass
loads 16 bytes at a time) and refuse any other layout by name (``Variant.flat_inputs``).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import _devices, _registry
from .._arrays import (KIND_NUMPY, ArrayArg, allocate, as_array_arg, check_all_finite,
                       check_contiguous, check_disjoint, check_dtype, check_elements_disjoint,
                       check_finite_scalar, check_int_range, check_ndim, check_nonnegative_strides,
                       check_shape, check_writable, check_writable_output, compact_host,
                       first_offender, is_numba_c_layout, memory_named, parse_dtype,
                       resolve_stream, result_like)
from .._compat import cuda
from ..contract import GDN_DIMS
from ._common import VB, GdnPlan

_IN_DTYPES = (np.float16, np.float32)


def _bool_arg(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return bool(value)


def _to_device(a: ArrayArg, stream):
    """Device view of an argument (numpy: a C-contiguous copy on the device)."""
    if a.kind == KIND_NUMPY:
        return cuda.to_device(compact_host(a.obj), stream=stream)
    return a.device(stream)


_SKIP = " (pass check_values=False to skip this check)"


def _check_cache_rows(sca: ArrayArg, idx_host: np.ndarray) -> None:
    """The ``state_cache`` rows ``state_indices`` names (the initial states) are finite;
    only those rows are read (one copy a row for device caches)."""
    for n, slot in enumerate(idx_host.tolist()):
        rows = np.asarray(sca.obj[slot] if sca.kind == KIND_NUMPY
                          else sca.device()[slot].copy_to_host())
        found = first_offender(rows, np.isfinite(rows))
        if found is not None:
            raise ValueError(f"state_cache: the initial state of sequence {n} (slot {slot}) must be "
                             f"finite; found {found[1]!r} at index {(slot,) + found[0]}{_SKIP}")


# a row sum of squares at or past this (FP64) may round past FP32's largest value in the
# kernels' FP32 chain (K = 128 roundings of relative size 2^-24 each stay far inside 2^-16)
_NORM_LIMIT = float(np.finfo(np.float32).max) * (1.0 - 2.0 ** -16)


def _check_norm_range(values: np.ndarray, name: str) -> None:
    """With ``use_qk_l2norm``: no row of float32 q / k whose sum of squares overflows FP32.
    The contract's norm (``ss = fma(x, x, ss)`` in FP32, then ``x / sqrt(ss + 1e-6)``) gives
    such a row (finite values of size about 1e19 / sqrt(K)) as zeros, where the FP64 oracle
    normalises it: a silent wrong answer, so the call refuses it. FP16 rows cannot reach it."""
    if values.dtype != np.float32 or values.size == 0:
        return
    K = values.shape[-1]
    amax = float(np.max(np.abs(values)))
    if amax * amax * K < _NORM_LIMIT:
        return
    ss = np.sum(np.square(values, dtype=np.float64), axis=-1)
    found = first_offender(ss, ss < _NORM_LIMIT)
    if found is not None:
        raise ValueError(
            f"{name}: with use_qk_l2norm, row {found[0]} has a sum of squares of {found[1]:.4g}, "
            f"past float32's range: the FP32 norm would give zeros; scale the input (values "
            f"below about {np.sqrt(_NORM_LIMIT / K):.3g} in size){_SKIP}")


def _check_values(g: ArrayArg, beta: ArrayArg, *finite: ArrayArg, norm_rows=()) -> None:
    """g finite and <= 0, and beta and every array in ``finite`` (q, k, v, initial state)
    finite: non-finite inputs the caller controls are an error, not a NaN output; the
    arrays in ``norm_rows`` (q and k under ``use_qk_l2norm``) also within the norm's range
    (:func:`_check_norm_range`)."""
    for a in finite + (beta,):
        if a is not None:
            values = check_all_finite(a, _SKIP)
            if any(a is b for b in norm_rows):
                _check_norm_range(values, a.name)
    gv = np.asarray(g.host_values(), dtype=np.float32)
    found = first_offender(gv, np.isfinite(gv) & (gv <= 0))
    if found is not None:
        raise ValueError(f"g: the log decay must be finite and <= 0; found {found[1]!r} at index "
                         f"{found[0]}{_SKIP}")


def _sequences(B: int, T: int, cu: Optional[ArrayArg]) -> np.ndarray:
    """int32 [N, 3] rows (batch row, first token, length)."""
    if cu is None:
        seqs = np.zeros((B, 3), dtype=np.int64)
        seqs[:, 0] = np.arange(B)
        seqs[:, 2] = T
    else:
        vals = np.asarray(cu.host_values()).astype(np.int64)
        if vals[0] != 0:
            raise ValueError(f"cu_seqlens: must start at 0, got {int(vals[0])}")
        d = np.diff(vals)
        if np.any(d < 0):
            i = int(np.flatnonzero(d < 0)[0])
            raise ValueError(f"cu_seqlens: must be non-decreasing; cu_seqlens[{i + 1}] = "
                             f"{int(vals[i + 1])} < cu_seqlens[{i}] = {int(vals[i])}")
        if vals[-1] != T:
            raise ValueError(f"cu_seqlens: must end at T = {T}, got {int(vals[-1])}")
        N = vals.shape[0] - 1
        seqs = np.zeros((N, 3), dtype=np.int64)
        seqs[:, 1] = vals[:-1]
        seqs[:, 2] = d
    return seqs.astype(np.int32)


def _work_table(seqs: np.ndarray, HV: int, V: int) -> np.ndarray:
    """int32 [N * HV * V/VB, 3] rows (sequence, value head, first column), longest first."""
    N = seqs.shape[0]
    nvb = V // VB
    order = np.argsort(-seqs[:, 2].astype(np.int64), kind="stable")
    n = np.repeat(order, HV * nvb)
    hv = np.tile(np.repeat(np.arange(HV), nvb), N)
    c0 = np.tile(np.arange(nvb) * VB, N * HV)
    return np.stack([n, hv, c0], axis=1).astype(np.int32)


class GdnCall:
    """A validated, device-bound gdn_prefill call: :meth:`launch` only launches kernels
    (no checks, transfers or allocations), so it can be captured in a CUDA graph;
    :meth:`results` returns ``(o, final_state)`` in the caller's kind of array."""

    def __init__(self, plan, variant, stream, kind, d_o, final, dcache, sca, idx_host, state_cache,
                 out_arg=None, out_obj=None, device=None):
        self.plan, self.variant, self.stream, self.kind = plan, variant, stream, kind
        self.device = device        # the CUDA device of every buffer (None: the simulator)
        self._launch_streams = _devices.LaunchStreams(stream, device)
        self._d_o, self._final, self._dcache = d_o, final, dcache
        self._sca, self._idx_host, self._state_cache = sca, idx_host, state_cache
        self._out, self._out_obj = out_arg, out_obj   # the caller's ``out``, if one was given

    def launch(self, stream=None) -> None:
        """Launch the variant's kernels on ``stream`` (default the plan's): no checks,
        transfers or allocations, so it can be captured in a CUDA graph and replayed. Each
        launch reads q, k, v, g, beta and the initial states as they are then (numpy inputs:
        the plan's device copies); the sequences (``cu_seqlens``) and the slots
        (``state_indices``) are the values the plan was made with. They run on the plan's
        device (its context made current for them); a ``stream`` given here must be one of
        that device."""
        with _devices.on_device(self.device):
            self.variant.run(self.plan, self._launch_streams.resolve(stream))

    def _write_final_state_to(self, buffer) -> None:
        """Make ``buffer`` (a device FP32 array of the final state's shape, on the plan's
        device) the plain form's final state: later launches write it and :meth:`results`
        returns it. For the screen, which gives its own sentinel-filled, guarded buffer
        instead of the plan's uninitialised one. A call with a state cache (its state is the
        cache) or without a final state has none to replace."""
        if self._final is None:
            raise ValueError("buffer: this call has no plain-form final state to replace")
        if tuple(buffer.shape) != tuple(self._final.shape) or \
                np.dtype(buffer.dtype) != np.dtype(self._final.dtype):
            raise ValueError(f"buffer: {np.dtype(buffer.dtype)}{tuple(buffer.shape)}, the final "
                             f"state is {np.dtype(self._final.dtype)}{tuple(self._final.shape)}")
        self.plan.hT = self._final = buffer

    def results(self):
        """``(o, final_state)`` of the last launch in the kind of array ``q`` came in: a
        numpy call gets copies (a caller's numpy ``out`` filled and returned, the named
        rows of a numpy ``state_cache`` written back); a device call gets the plan's own
        buffers (the next launch overwrites them), the caller's device ``out`` /
        ``state_cache`` when given. ``final_state`` is ``state_cache`` when one was given,
        ``None`` when ``output_final_state`` was false."""
        with _devices.on_device(self.device):
            return self._results()

    def _results(self):
        st, kind, sca = self.stream, self.kind, self._sca
        if self._out is None:
            o_out = result_like(kind, self._d_o, stream=st)
        else:                        # the caller's own buffer (a numpy one filled here)
            if self._out.kind == KIND_NUMPY:
                self._out.obj[...] = self._d_o.copy_to_host(stream=st)
                if st != 0:
                    st.synchronize()
            o_out = self._out_obj
        if sca is not None:
            if sca.kind == KIND_NUMPY:
                host = self._dcache.copy_to_host(stream=st)
                if st != 0:
                    st.synchronize()
                sca.obj[self._idx_host] = host[self._idx_host]
            state_out = self._state_cache
        elif self._final is not None:
            state_out = result_like(kind, self._final, stream=st)
        else:
            state_out = None
        if kind == KIND_NUMPY and st != 0:
            st.synchronize()
        return o_out, state_out


def gdn_prefill(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None,
                use_qk_l2norm=True, variant="chunked", output_final_state=True,
                state_cache=None, state_indices=None, out_dtype=None, out=None,
                check_values=True, stream=None, _max_ctas: int = 0, _threads: int = 0):
    """Gated delta rule prefill (contract B): ``(o, final_state)``; see :func:`plan_gdn`."""
    call = plan_gdn(q, k, v, g, beta, scale=scale, initial_state=initial_state,
                    cu_seqlens=cu_seqlens, use_qk_l2norm=use_qk_l2norm, variant=variant,
                    output_final_state=output_final_state, state_cache=state_cache,
                    state_indices=state_indices, out_dtype=out_dtype, out=out,
                    check_values=check_values, stream=stream, _max_ctas=_max_ctas,
                    _threads=_threads)
    call.launch()
    return call.results()


def plan_gdn(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None,
             use_qk_l2norm=True, variant="chunked", output_final_state=True,
             state_cache=None, state_indices=None, out_dtype=None, out=None,
             check_values=True, stream=None, _max_ctas: int = 0, _threads: int = 0) -> GdnCall:
    """Gated delta rule prefill (contract B), validated and bound: a :class:`GdnCall`.

    Arguments
        q, k: float16 or float32 ``[B, T, H, K]``; v: the same dtype, ``[B, T, HV, V]`` with
        ``HV % H == 0`` (value head ``i`` reads q/k head ``i // (HV // H)``);
        ``K, V in {32, 64, 128}``. g, beta: float32 ``[B, T, HV]`` (g = log decay <= 0).
        scale: FP32-finite number, default ``K ** -0.5``.
        initial_state: float32 ``[N, HV, K, V]`` (a device one C-contiguous; numpy of any
        layout is copied compactly), default zeros.
        cu_seqlens: int32 ``[N + 1]`` packed variable-length layout (needs ``B == 1``):
        starts at 0, non-decreasing, ends at ``T``; sequences of any length (0 included).
        Without it ``N = B`` sequences of length ``T``.
        use_qk_l2norm: normalise q and k rows (``x / sqrt(sum x^2 + 1e-6)``).
        variant: ``"chunked"`` (frozen, default), ``"serial"`` or any name in
        ``gdn_variants()``.
        output_final_state: return the final state (else ``None``).
        state_cache, state_indices: the server form. ``state_cache`` float32
        ``[slots, HV, K, V]`` (writable; a device one C-contiguous, a numpy one with no two
        elements in the same memory), ``state_indices`` int32 ``[N]``,
        distinct, in ``[0, slots)``: sequence ``n`` starts from ``state_cache[state_indices[n]]``
        and its final state is written back there in place; slots not named are never
        touched. ``initial_state`` must then be ``None``; the second result is
        ``state_cache`` itself (updated), whatever ``output_final_state`` says.
        out_dtype: ``None`` (v's dtype) or ``"float32"`` (the FP32 result before the cast).
        out: a caller-owned output ``[B, T, HV, V]`` of that dtype (C-contiguous, writable;
        numpy or device): the kernels write it (a numpy one is filled by ``results``), and
        it is the first result. A device ``out`` or ``state_cache`` must not share device
        memory with any input or with each other (``ValueError`` naming both).
        check_values: check on the host first that g is finite and ``<= 0``, that
        beta, q, k, v and the initial states (``initial_state`` or the named
        ``state_cache`` rows) are finite, and, with ``use_qk_l2norm``, that no float32 q or
        k row's sum of squares overflows FP32 (the contract's norm would make it zeros;
        values of size about ``1e19 / sqrt(K)``); device arrays are copied to the host for it.
        stream: numba / torch / cupy stream or raw handle (default stream if None), of the
        call's device.

    Every device array (inputs, ``out``, ``initial_state``, the state cache) must be on one
    CUDA device (``ValueError`` naming the first on another); the call runs there, whatever
    device is current (numpy inputs only: on the current device).

    ``gdn_prefill`` returns ``(o [B, T, HV, V], final_state float32 [N, HV, K, V] or None)``
    in the kind of array ``q`` came as (numpy in, numpy out; device arrays zero-copy).

    The plan reads the values of ``cu_seqlens`` and ``state_indices`` once, here: the
    launch schedule (which CTA runs which sequence and slot) is built from them on the host.
    Changing either array after planning changes nothing the launches do; plan again.
    A buffer the call cannot allocate raises ``ValueError`` naming the arguments that size it.
    """
    with _devices.CallDevice() as on_call_device:
        return _plan_gdn(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm,
                         variant, output_final_state, state_cache, state_indices, out_dtype,
                         out, check_values, stream, _max_ctas, _threads, on_call_device)


def _plan_gdn(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm, variant,
              output_final_state, state_cache, state_indices, out_dtype, out, check_values,
              stream, _max_ctas, _threads, on_call_device: _devices.CallDevice) -> GdnCall:
    """:func:`plan_gdn`'s work; ``on_call_device`` is entered once the arrays are read,
    before the first device access (``cu_seqlens``' copy to the host)."""
    # ---- array kinds, dtypes, shapes
    qa = as_array_arg(q, "q")
    ka = as_array_arg(k, "k")
    va = as_array_arg(v, "v")
    ga = as_array_arg(g, "g")
    ba = as_array_arg(beta, "beta")
    check_dtype(qa, _IN_DTYPES)
    check_ndim(qa, 4, "[B, T, H, K]")
    B, T, H, K = qa.shape
    check_dtype(ka, [qa.dtype])
    check_shape(ka, (B, T, H, K), "[B, T, H, K]")
    check_dtype(va, [qa.dtype])
    check_ndim(va, 4, "[B, T, HV, V]")
    check_shape(va, (B, T, None, None), "[B, T, HV, V]")
    HV, V = va.shape[2], va.shape[3]
    if K not in GDN_DIMS:
        raise ValueError(f"q: head dim K = {K} is not supported; expected one of {GDN_DIMS}")
    if V not in GDN_DIMS:
        raise ValueError(f"v: head dim V = {V} is not supported; expected one of {GDN_DIMS}")
    if B * T > 2 ** 31 - 1:             # (the launch schedule's token offsets are int32)
        raise ValueError(f"q: B * T = {B * T} tokens; at most 2**31 - 1")
    if H < 1 or HV < 1 or HV % H != 0:
        raise ValueError(f"v: value heads HV = {HV} must be a positive multiple of q/k heads H = {H}")
    check_dtype(ga, [np.float32])
    check_shape(ga, (B, T, HV), "[B, T, HV]")
    check_dtype(ba, [np.float32])
    check_shape(ba, (B, T, HV), "[B, T, HV]")
    for a in (qa, ka, va, ga, ba):
        check_nonnegative_strides(a)

    # ---- flags and scalars
    l2 = _bool_arg(use_qk_l2norm, "use_qk_l2norm")
    want_state = _bool_arg(output_final_state, "output_final_state")
    values = _bool_arg(check_values, "check_values")
    var = _registry.get_variant("gdn", variant)
    scale32 = (np.float32(float(K) ** -0.5) if scale is None
               else check_finite_scalar(scale, "scale"))
    if out_dtype is None:
        odt = np.dtype(qa.dtype)
    else:
        odt = parse_dtype(out_dtype, "out_dtype", f"None, 'float32' or {qa.dtype}")
        if odt not in (np.dtype(np.float32), np.dtype(qa.dtype)):
            raise ValueError(f"out_dtype: expected None, 'float32' or {qa.dtype}, got {odt}")

    # ---- sequences
    cua = None
    if cu_seqlens is not None:
        cua = as_array_arg(cu_seqlens, "cu_seqlens")
        check_dtype(cua, [np.int32])
        check_ndim(cua, 1, "[N + 1]")
        check_nonnegative_strides(cua)   # (its values are copied to the host to be checked)
        if cua.shape[0] < 1:
            raise ValueError(f"cu_seqlens: expected shape [N + 1] with N >= 0, got {cua.shape}")
        if B != 1:
            raise ValueError(f"cu_seqlens: packed variable-length input needs B == 1, q has B = {B}")
    on_call_device.enter(_devices.call_device(
        [(a.name, a) for a in (qa, ka, va, ga, ba, cua) if a is not None]
        + [("initial_state", initial_state), ("state_cache", state_cache),
           ("state_indices", state_indices), ("out", out)]))
    seqs = _sequences(B, T, cua)
    N = seqs.shape[0]

    # ---- states
    isa = None
    if initial_state is not None:
        isa = as_array_arg(initial_state, "initial_state")
        check_dtype(isa, [np.float32])
        check_shape(isa, (N, HV, K, V), "[N, HV, K, V]")
        check_nonnegative_strides(isa)
        if isa.kind != KIND_NUMPY:        # numpy: copied compactly (_to_device)
            check_contiguous(isa)
    sca = sia = None
    idx_host = None
    if state_cache is not None or state_indices is not None:
        if state_cache is None:
            raise ValueError("state_cache: state_indices was given without state_cache")
        if state_indices is None:
            raise ValueError("state_indices: state_cache was given without state_indices")
        if isa is not None:
            raise ValueError("initial_state: must be None when state_cache is given "
                             "(the cache rows are the initial states)")
        sca = as_array_arg(state_cache, "state_cache")
        check_dtype(sca, [np.float32])
        check_shape(sca, (None, HV, K, V), "[slots, HV, K, V]")
        check_nonnegative_strides(sca)
        if sca.kind != KIND_NUMPY:        # numpy: copied compactly, named rows written back
            check_contiguous(sca)
        else:                             # (written back row by row: no two may share memory)
            check_elements_disjoint(sca)
        check_writable(sca)
        sia = as_array_arg(state_indices, "state_indices")
        check_dtype(sia, [np.int32])
        check_shape(sia, (N,), "[N]")
        check_nonnegative_strides(sia)
        idx_host = np.asarray(sia.host_values()).astype(np.int64)
        check_int_range(idx_host, "state_indices", 0, sca.shape[0] - 1)
        uniq, counts = np.unique(idx_host, return_counts=True)
        if np.any(counts > 1):
            dup = int(uniq[np.flatnonzero(counts > 1)[0]])
            raise ValueError(f"state_indices: must be distinct; slot {dup} is named more than once")

    if var.flat_inputs:
        for a in (qa, ka, va, ga, ba):
            # numba's layout rule: a zero stride, even on an axis of size 1, types as "A"
            if a.kind != KIND_NUMPY and not is_numba_c_layout(a):
                raise ValueError(
                    f"{a.name}: variant {var.name!r} reads q, k, v, g and beta as C-contiguous "
                    f"device arrays (no zero stride), got strides {a.strides} for shape "
                    f"{a.shape}; pass a "
                    f"contiguous copy or use variant 'chunked'")
    if values:
        with memory_named("q, k, v, g, beta", "the host value check (check_values=False skips it)"):
            _check_values(ga, ba, qa, ka, va, isa, norm_rows=(qa, ka) if l2 else ())
            if sca is not None:
                _check_cache_rows(sca, idx_host)

    oa = None
    if out is not None:
        oa = as_array_arg(out, "out")
        check_writable_output(oa, (B, T, HV, V), odt, "[B, T, HV, V]")
    # what the kernels write must not share device memory with what they read (a CTA would
    # read what another one already wrote) or with each other
    reads = [(a.name, a) for a in (qa, ka, va, ga, ba, isa, cua, sia) if a is not None]
    if oa is not None:
        check_disjoint("out", oa, reads + ([("state_cache", sca)] if sca is not None else []))
        if (sca is not None and oa.kind == KIND_NUMPY and sca.kind == KIND_NUMPY
                and np.shares_memory(oa.obj, sca.obj)):
            # results() fills both on the host, one after the other
            raise ValueError("out: overlaps state_cache in memory; pass separate buffers")
    if sca is not None:
        check_disjoint("state_cache", sca, reads)

    plan_probe = GdnPlan(None, None, None, None, None, None, None, None, None, None, None, None,
                         N * HV * (V // VB), scale32, np.int32(l2), B, T, H, HV, K, V, N,
                         np.dtype(qa.dtype), odt)
    try:
        var.supports(plan_probe)
    except _registry.UnsupportedShape as exc:
        # a shape this variant was not built for (another variant may take it)
        raise _registry.UnsupportedShape(f"variant: {exc}") from None

    # ---- everything checked: device arrays and launch
    sized_by = "q, k, v" + (", state_cache" if sca is not None else "")
    with memory_named(sized_by, "the call's device copies and scratch"):
        st = resolve_stream(stream)
        _devices.check_stream(st, on_call_device.device)
        dq, dk, dv = _to_device(qa, st), _to_device(ka, st), _to_device(va, st)
        dg, dbeta = _to_device(ga, st), _to_device(ba, st)
        if oa is not None and oa.kind != KIND_NUMPY:
            d_o = oa.device(st)
        else:
            d_o = allocate((B, T, HV, V), odt, st, "q, v")
        final = dcache = None
        if sca is not None:
            dcache = _to_device(sca, st)
            h0 = hT = dcache
            h0_idx = hT_idx = cuda.to_device(idx_host.astype(np.int32), stream=st)
        else:
            if isa is not None:
                h0 = _to_device(isa, st)
                h0_idx = cuda.to_device(np.arange(N, dtype=np.int32), stream=st)
            else:
                h0 = cuda.device_array((1, 1, 1, 1), dtype=np.float32, stream=st)
                h0_idx = cuda.to_device(np.full(N, -1, dtype=np.int32), stream=st)
            if want_state:
                final = allocate((N, HV, K, V), np.float32, st,
                                 "cu_seqlens, v" if cua is not None else "q, v")
                hT = final
                hT_idx = cuda.to_device(np.arange(N, dtype=np.int32), stream=st)
            else:
                hT = cuda.device_array((1, 1, 1, 1), dtype=np.float32, stream=st)
                hT_idx = cuda.to_device(np.full(N, -1, dtype=np.int32), stream=st)
        try:
            work = _work_table(seqs, HV, V)
        except MemoryError:
            raise ValueError(f"{'cu_seqlens' if cua is not None else 'q'}, v: the launch schedule "
                             f"of {N} sequences x {HV} value heads cannot be allocated") from None
        plan = GdnPlan(dq, dk, dv, dg, dbeta, d_o, h0, h0_idx, hT, hT_idx,
                       cuda.to_device(seqs, stream=st), cuda.to_device(work, stream=st),
                       work.shape[0], scale32, np.int32(l2), B, T, H, HV, K, V, N,
                       np.dtype(qa.dtype), odt, max_ctas=int(_max_ctas), threads=int(_threads))
        if var.prepare is not None:
            var.prepare(plan, st)
    return GdnCall(plan, var, st, qa.kind, d_o, final, dcache, sca, idx_host, state_cache,
                   out_arg=oa, out_obj=out, device=on_call_device.device)
