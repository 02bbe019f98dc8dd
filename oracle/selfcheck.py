"""Self-check of the oracle (contract parts A, B and C), runnable without a GPU.

``run_selfcheck()`` checks the FP64 references against mpmath (50 digits) on small random
cases, the chunked GDN algebra against the token recurrence, and a set of hand-checkable
cases; it prints one line per check and returns True when every check passes.
``python -m oracle.selfcheck`` runs it and exits non-zero on failure.

The case generators :func:`random_attention_case` and :func:`random_gdn_case` are public so
that tests and the screen can build the same kind of inputs.
"""
from __future__ import annotations

import math
import sys
import time

import ml_dtypes
import numpy as np

from .attention import E4M3_TABLE, attention_reference, decode_e4m3_bits
from .gdn import gdn_reference, gdn_reference_chunked
from .metrics import first_mismatch, max_abs, rel_l2

__all__ = ["run_selfcheck", "random_attention_case", "random_gdn_case", "encode_e4m3", "main"]


def encode_e4m3(x) -> np.ndarray:
    """float -> uint8 E4M3FN codes (round to nearest even, clipped to +-448, never a NaN code).

    float64 input is rounded once, from its float64 value (not through float32).
    """
    a = np.asarray(x)
    a = a.astype(np.float64 if a.dtype.kind == "f" and a.dtype.itemsize >= 8 else np.float32)
    a = np.clip(a, -448.0, 448.0)
    c = a.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    if ((c & 0x7F) == 0x7F).any():  # pragma: no cover - clipping rules this out
        raise ValueError("x: produced a NaN code")
    return c


def random_attention_case(rng, *, B=2, Q=3, Hq=4, Hkv=2, D=16, page_size=4, seq_lens=None,
                          extra_pages=3, kv_std=2.0, q_std=1.0, strided=True, scale=None,
                          k_scale=1.0, v_scale=1.0, row_lengths=None):
    """Keyword arguments for :func:`oracle.attention_reference` (contract A shapes).

    Pages are assigned in a random order; with ``strided`` the caches are non-contiguous
    views (reversed page axis, padded head dim) so that stride handling is exercised.
    """
    if seq_lens is None:
        seq_lens = rng.integers(Q, Q + 3 * page_size, size=B)
    seq_lens = np.asarray(seq_lens, dtype=np.int32)
    W = max(1, int(-(-max(int(seq_lens.max()), 1) // page_size)))
    if row_lengths is not None:
        rl = np.asarray(row_lengths, dtype=np.int32)
        W = max(W, int(-(-max(int(rl.max()), 1) // page_size)))
    P = B * W + extra_pages
    pad = 5 if strided else 0

    def cache():
        base = encode_e4m3(rng.standard_normal((P, page_size, Hkv, D + pad)) * kv_std)
        c = base[..., :D]
        return c[::-1] if strided else c

    kc, vc = cache(), cache()
    block_table = rng.permutation(P)[: B * W].reshape(B, W).astype(np.int32)
    q = (rng.standard_normal((B, Q, Hq, D)) * q_std).astype(np.float16)
    if scale is None:
        scale = D ** -0.5
    case = dict(q=q, k_cache=kc, v_cache=vc, block_table=block_table, seq_lens=seq_lens,
                scale=scale, k_scale=k_scale, v_scale=v_scale)
    if row_lengths is not None:
        case["row_lengths"] = np.asarray(row_lengths, dtype=np.int32)
    return case


def random_gdn_case(rng, *, B=1, T=8, H=1, HV=2, K=4, V=4, dtype=np.float32, cu_seqlens=None,
                    g_low=-1.0, g_high=-0.01, with_state=True):
    """Keyword arguments for :func:`oracle.gdn_reference` (contract B shapes).

    ``g`` is uniform in ``[g_low, g_high]`` (log decay, <= 0), ``beta`` uniform in (0, 1);
    q, k, v are standard normal in ``dtype``; ``initial_state`` is N(0, 0.5^2) when
    ``with_state``.
    """
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    case = dict(
        q=rng.standard_normal((B, T, H, K)).astype(dtype),
        k=rng.standard_normal((B, T, H, K)).astype(dtype),
        v=rng.standard_normal((B, T, HV, V)).astype(dtype),
        g=rng.uniform(g_low, g_high, (B, T, HV)).astype(np.float32),
        beta=rng.uniform(0.0, 1.0, (B, T, HV)).astype(np.float32),
    )
    if with_state:
        case["initial_state"] = (rng.standard_normal((N, HV, K, V)) * 0.5).astype(np.float32)
    if cu_seqlens is not None:
        case["cu_seqlens"] = np.asarray(cu_seqlens, dtype=np.int32)
    return case


# --------------------------------------------------------------------------- checks

def _check_e4m3():
    bits = np.array([decode_e4m3_bits(c) for c in range(256)])
    nan = np.isnan(bits)
    ok = (np.array_equal(np.flatnonzero(nan), [0x7F, 0xFF])
          and np.array_equal(bits[~nan], E4M3_TABLE[~nan])
          and np.array_equal(np.signbit(bits[~nan]), np.signbit(E4M3_TABLE[~nan]))  # -0 at 0x80
          and np.isnan(E4M3_TABLE[nan]).all() and np.nanmax(E4M3_TABLE) == 448.0)
    return ok, "table == bit-field decode for all 256 codes"


def _check_attention_mp():
    rng = np.random.default_rng(1)
    worst = 0.0
    for (Hq, Hkv) in ((2, 2), (4, 2), (3, 1)):
        case = random_attention_case(rng, B=2, Q=3, Hq=Hq, Hkv=Hkv, D=8, page_size=3,
                                     seq_lens=[5, 9], k_scale=0.75, v_scale=1.25, scale=0.9)
        a = attention_reference(**case)
        b = attention_reference(**case, precision="mp")
        worst = max(worst, rel_l2(a, b))
    return worst <= 1e-12, f"fp64 vs mp rel_l2 = {worst:.2e} (GVA 1, 2, 3)"


def _check_attention_rows_mp():
    rng = np.random.default_rng(2)
    rl = [[0, 1, 7, 4], [3, -2, 0, 9]]
    case = random_attention_case(rng, B=2, Q=4, Hq=2, Hkv=1, D=8, page_size=4, seq_lens=[8, 9],
                                 row_lengths=rl)
    a = attention_reference(**case)
    b = attention_reference(**case, precision="mp")
    zero = np.array(rl) <= 0
    ok = rel_l2(a, b) <= 1e-12 and not a[zero].any() and np.isfinite(a).all()
    return ok, f"row_lengths with empty rows: rel_l2 = {rel_l2(a, b):.2e}, empty rows are 0"


def _check_attention_hand():
    D, ps = 16, 4
    rng = np.random.default_rng(3)
    k = encode_e4m3(rng.standard_normal((2, ps, 1, D)))
    v = encode_e4m3(rng.standard_normal((2, ps, 1, D)) * 3)
    q = (rng.standard_normal((1, 2, 1, D))).astype(np.float16)
    bt = np.array([[1, 0]], dtype=np.int32)
    # row 0 sees one key (token 0 = page 1 slot 0), row 1 sees nothing
    out = attention_reference(q, k, v, bt, np.array([1], np.int32), scale=0.3, v_scale=0.5,
                              row_lengths=np.array([[1, 0]], np.int32))
    one = np.array_equal(out[0, 0, 0], E4M3_TABLE[v[1, 0, 0]] * 0.5)
    none = np.array_equal(out[0, 1, 0], np.zeros(D))
    # zero query: all scores equal -> mean of the visible V
    qz = np.zeros((1, 1, 1, D), np.float16)
    outm = attention_reference(qz, k, v, bt, np.array([6], np.int32), scale=1.0)
    vals = E4M3_TABLE[np.concatenate([v[1, :, 0], v[0, :2, 0]])]
    mean = max_abs(outm[0, 0, 0], vals.mean(axis=0)) <= 1e-14
    return one and none and mean, "one key -> v*v_scale; no key -> 0; equal scores -> mean V"


def _check_gdn_mp():
    rng = np.random.default_rng(4)
    worst = 0.0
    for H, HV in ((1, 1), (1, 2), (2, 6)):
        for l2 in (True, False):
            case = random_gdn_case(rng, B=2, T=5, H=H, HV=HV, K=4, V=3)
            a = gdn_reference(**case, use_qk_l2norm=l2)
            b = gdn_reference(**case, use_qk_l2norm=l2, precision="mp")
            worst = max(worst, rel_l2(a[0], b[0]), rel_l2(a[1], b[1]))
    case = random_gdn_case(rng, B=1, T=7, H=1, HV=2, K=3, V=4, cu_seqlens=[0, 3, 3, 7])
    a = gdn_reference(**case)
    b = gdn_reference(**case, precision="mp")
    worst = max(worst, rel_l2(a[0], b[0]), rel_l2(a[1], b[1]))
    return worst <= 1e-12, f"fp64 recurrence vs mp rel_l2 = {worst:.2e} (GVA 1, 2, 3; varlen)"


def _check_gdn_hand():
    rng = np.random.default_rng(5)
    K, V, T = 4, 3, 3
    case = random_gdn_case(rng, B=1, T=T, H=1, HV=1, K=K, V=V)
    case["g"][:] = 0.0
    case["beta"][:] = 0.0
    o, h = gdn_reference(**case, scale=0.7, use_qk_l2norm=False)
    h0 = case["initial_state"][0, 0].astype(np.float64)
    keep = np.array_equal(h[0, 0], h0)
    want = np.einsum("kv,tk->tv", h0, 0.7 * case["q"][0, :, 0].astype(np.float64))
    out_ok = max_abs(o[0, :, 0], want) <= 1e-14
    # one token by hand, from a zero state: h = beta k v^T, o = beta (s q.k) v
    c1 = random_gdn_case(rng, B=1, T=1, H=1, HV=1, K=K, V=V, with_state=False)
    o1, h1 = gdn_reference(**c1, use_qk_l2norm=False)
    qv, kv, vv = (c1[x][0, 0, 0].astype(np.float64) for x in ("q", "k", "v"))
    bt = float(c1["beta"][0, 0, 0])
    one = (max_abs(h1[0, 0], bt * np.outer(kv, vv)) <= 1e-14
           and max_abs(o1[0, 0, 0], bt * (K ** -0.5 * qv @ kv) * vv) <= 1e-13)
    return keep and out_ok and one, "beta=0,g=0 keeps h0 and outputs h0^T(scale q); one token"


def _check_chunked():
    rng = np.random.default_rng(6)
    worst = 0.0
    finite = True
    for T in (1, 63, 64, 65, 130):
        for g_low, g_high in ((-0.2, -0.001), (-21.0, -19.0)):
            case = random_gdn_case(rng, B=1, T=T, H=1, HV=2, K=8, V=6, g_low=g_low, g_high=g_high)
            a = gdn_reference(**case)
            b = gdn_reference_chunked(**case)
            finite &= bool(np.isfinite(b[0]).all() and np.isfinite(b[1]).all())
            worst = max(worst, rel_l2(b[0], a[0]), rel_l2(b[1], a[1]))
    return worst <= 1e-12 and finite, f"chunked vs recurrence rel_l2 = {worst:.2e} (T=1..130, g~-20)"


def _check_varlen():
    rng = np.random.default_rng(7)
    cu = [0, 5, 6, 6, 13]
    case = random_gdn_case(rng, B=1, T=13, H=2, HV=4, K=5, V=3, cu_seqlens=cu)
    o, h = gdn_reference(**case)
    oc, hc = gdn_reference_chunked(**case, chunk=4)
    ok = rel_l2(oc, o) <= 1e-12 and rel_l2(hc, h) <= 1e-12
    for n in range(len(cu) - 1):
        s, e = cu[n], cu[n + 1]
        sub = {x: case[x][:, s:e] for x in ("q", "k", "v", "g", "beta")}
        os_, hs = gdn_reference(**sub, initial_state=case["initial_state"][n:n + 1])
        ok &= np.array_equal(os_, o[:, s:e]) and np.array_equal(hs[0], h[n])
    return bool(ok), "packed cu_seqlens == separate runs (incl. empty sequence)"


def _check_metrics():
    a = np.array([[1.0, -0.0], [np.nan, 2.0]], np.float32)
    b = np.array([[1.0, 0.0], [np.nan, 2.0]], np.float32)
    m = first_mismatch(a, b)
    ok = m is not None and m.index == (0, 1) and m.flat_index == 1
    ok &= first_mismatch(a, a.copy()) is None
    ok &= math.isinf(rel_l2([3.0, 4.0], [0.0, 0.0])) and rel_l2([0.0, -0.0], [0.0, 0.0]) == 0.0
    ok &= math.isclose(rel_l2([1.0, 1.0], [1.0, 2.0]), 1 / math.sqrt(5))
    ok &= math.isnan(rel_l2([np.nan], [1.0])) and max_abs([1.0, 5.0], [2.0, 2.0]) == 3.0
    return bool(ok), "rel_l2 / max_abs / first_mismatch on hand cases"


CHECKS = [
    ("e4m3-decode", _check_e4m3),
    ("attention-fp64-vs-mp", _check_attention_mp),
    ("attention-row-lengths", _check_attention_rows_mp),
    ("attention-hand", _check_attention_hand),
    ("gdn-fp64-vs-mp", _check_gdn_mp),
    ("gdn-hand", _check_gdn_hand),
    ("gdn-chunked-vs-recurrence", _check_chunked),
    ("gdn-varlen", _check_varlen),
    ("metrics", _check_metrics),
]


def run_selfcheck(verbose=True) -> bool:
    """Run every oracle self-check (contract A, B, C); one printed line each; True if all pass."""
    all_ok = True
    for name, fn in CHECKS:
        t0 = time.perf_counter()
        try:
            ok, detail = fn()
        except Exception as exc:  # a crash is a failure, reported on its line
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        all_ok &= bool(ok)
        if verbose:
            print(f"oracle {'PASS' if ok else 'FAIL'} {name:28s} {detail} "
                  f"[{time.perf_counter() - t0:.2f}s]")
    if verbose:
        print(f"oracle selfcheck: {'all passed' if all_ok else 'FAILED'}")
    return all_ok


def main(argv=None) -> int:
    return 0 if run_selfcheck(verbose=True) else 1


if __name__ == "__main__":
    sys.exit(main())
