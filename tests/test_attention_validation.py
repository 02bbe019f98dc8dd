"""Every bad argument to verify_attention raises TypeError/ValueError naming it, before any
launch, and leaves caller buffers untouched."""
import re

import numpy as np
import pytest

import dflash2_numba as d2
from dflash2_numba.attention.api import _check_grid_dims
from dflash2_numba.contract import MAX_LOGICAL_SPLITS, SENTINEL
from tests.array_helpers import device_copies
from tests.attention_helpers import case


@pytest.fixture(scope="module")
def good():
    rng = np.random.default_rng(0)
    return case(rng, B=2, Q=2, Hq=2, Hkv=1, D=64, page_size=8, seq_lens=[20, 9], strided=False)


def _bad(good, match, exc=(ValueError, TypeError), **changes):
    args = dict(good)
    args.update(changes)
    ws = d2.AttentionWorkspace(batch=2, q_len=2, heads=2, head_dim=64, splits=4)
    ws.fill_sentinel()
    args.setdefault("workspace", ws)
    args.setdefault("splits", 4)
    d2.route_counters(reset=True)
    with pytest.raises(exc, match=match):
        d2.verify_attention(**args)
    assert d2.route_counters() == {}, "a kernel was launched"
    if args["workspace"] is ws:
        assert np.all(ws.partial.copy_to_host() == SENTINEL)
        assert np.all(ws.lse.copy_to_host() == SENTINEL)
        assert np.all(ws.out.copy_to_host() == SENTINEL)
        assert ws.guards_intact()


def test_q_dtype(good):
    _bad(good, "q", exc=TypeError, q=good["q"].astype(np.float32))


def test_q_shape_and_limits(good):
    _bad(good, "q", q=good["q"][0])
    _bad(good, "q", q=np.zeros((2, 9, 2, 64), np.float16), workspace=None)
    _bad(good, "q", q=np.zeros((2, 2, 2, 48), np.float16), workspace=None)
    _bad(good, "q", q=np.zeros((2, 2, 9, 64), np.float16), workspace=None)   # G > 8


def test_cache_dtype_shape_stride(good):
    _bad(good, "k_cache", exc=TypeError, k_cache=good["k_cache"].astype(np.int8))
    _bad(good, "v_cache", v_cache=good["v_cache"][:-1])
    _bad(good, "k_cache", k_cache=good["k_cache"][..., :32])
    _bad(good, "k_cache", k_cache=np.zeros((4, 8, 1, 128), np.uint8)[..., ::2])


def test_block_table(good):
    _bad(good, "block_table", exc=TypeError, block_table=good["block_table"].astype(np.int64))
    bt = good["block_table"].copy()
    bt[0, 0] = good["k_cache"].shape[0]
    _bad(good, "block_table", block_table=bt)
    bt = good["block_table"].copy()
    bt[1, 0] = -1
    _bad(good, "block_table", block_table=bt)
    _bad(good, "block_table", block_table=good["block_table"][:1])


def test_unreached_table_entries_are_not_checked(good):
    """A table entry past a request's last page is never read: a bad value there is taken,
    and the result is the untouched table's, byte for byte."""
    bt = good["block_table"].copy()
    bt[1, -1] = -1          # request 1 (9 tokens, page 8) reaches columns 0 and 1 only
    assert bt.shape[1] >= 3
    spaces = []
    for table in (bt, good["block_table"]):
        ws = d2.AttentionWorkspace(batch=2, q_len=2, heads=2, head_dim=64, splits=4)
        ws.fill_sentinel()                  # splits a request does not reach stay the sentinel
        d2.verify_attention(**dict(good, block_table=table, splits=4, workspace=ws))
        spaces.append(ws)
    got, want = spaces
    for part in ("out", "partial", "lse"):
        assert getattr(got, part).copy_to_host().tobytes() == \
            getattr(want, part).copy_to_host().tobytes(), part


def test_seq_lens_and_row_lengths(good):
    _bad(good, "seq_lens", exc=TypeError, seq_lens=good["seq_lens"].astype(np.int64))
    _bad(good, "seq_lens", seq_lens=np.array([10_000, 9], np.int32))
    _bad(good, "seq_lens", seq_lens=np.array([20], np.int32))
    _bad(good, "row_lengths", row_lengths=np.zeros((2, 3), np.int32))
    _bad(good, "row_lengths", row_lengths=np.full((2, 2), 10_000, np.int32))
    _bad(good, "row_lengths", exc=TypeError, row_lengths=np.zeros((2, 2), np.float32))


def test_scales(good):
    _bad(good, "scale", scale=float("nan"))
    _bad(good, "scale", scale=float("inf"))
    _bad(good, "k_scale", k_scale=0.0)
    _bad(good, "v_scale", v_scale=-1.0)
    _bad(good, "v_scale", exc=TypeError, v_scale="1")
    _bad(good, "scale", scale=1e30, k_scale=1e30)
    # an int past Python's 4300-digit str limit is still named (the message gave the digits)
    _bad(good, "^scale: must be finite in float32, got about 2\\*\\*16609", scale=10 ** 5000)
    # numpy makes timedelta64 an integer subclass: it is no scale and no count
    _bad(good, "^scale: expected a real number", exc=TypeError, scale=np.timedelta64(1))
    _bad(good, "^v_scale: expected a real number", exc=TypeError, v_scale=np.timedelta64(1, "s"))
    _bad(good, "^splits: expected an int", exc=TypeError, splits=np.timedelta64(2))


def test_a_scale_whose_scores_can_leave_the_contracts_range_is_refused(good):
    """``|scale * k_scale| * sum|q| * 448`` bounds every score; at 1e20 and past it a key
    could score below the masked keys' -1e30 or the scores overflow (contract A's own
    arithmetic then gives zeros where the FP64 oracle gives the softmax): refused naming
    ``scale``, the row and the bound. Just below the bound the call runs and matches the
    oracle."""
    import oracle
    from dflash2_numba.attention.api import SCORE_LIMIT
    from dflash2_numba.e4m3 import E4M3_MAX

    l1 = np.abs(good["q"].astype(np.float64)).sum(axis=-1)
    row = tuple(int(i) for i in np.unravel_index(int(np.argmax(l1)), l1.shape))
    edge = SCORE_LIMIT / (float(l1.max()) * E4M3_MAX)
    _bad(good, rf"^scale: scale \* k_scale = .* with q row {re.escape(str(row))} \(sum \|q\| "
               rf"= .*past the 1e\+20", scale=edge * 1.01)
    _bad(good, "^scale: ", scale=1.0, k_scale=edge * 1.01)
    _bad(good, "^scale: ", scale=-edge * 1.01)
    # what the check keeps out: there the contract's own arithmetic (the frozen kernel's
    # bits, emulated) is far from the FP64 softmax (scores overflow: some rows give zeros)
    from dflash2_numba.attention.emulate import emulate_attention

    huge = dict(good, scale=1e37)
    em = emulate_attention(**huge, splits=4, out_dtype="float32")
    assert oracle.rel_l2(em.out, oracle.attention_reference(**huge)) > 0.1
    assert (em.out == 0).all(axis=-1).any()
    ok = dict(good, scale=edge * 0.99)
    res = d2.verify_attention(**ok, splits=4, out_dtype="float32")
    assert oracle.rel_l2(res.out, oracle.attention_reference(**ok)) < 1e-5


def test_splits_variant_out_dtype(good):
    _bad(good, "splits", splits=0, workspace=None)
    _bad(good, "splits: must be <= 65536", exc=ValueError, splits=MAX_LOGICAL_SPLITS + 1, workspace=None)
    _bad(good, "splits: must be <= 65536", exc=ValueError, splits=2 ** 31, workspace=None)
    _bad(good, "variant", variant="nope")
    _bad(good, "variant: expected a str", exc=TypeError, variant=["frozen"])
    _bad(good, "out_dtype", exc=TypeError, out_dtype="bfloat16")
    # what numpy cannot read at all is named too (numpy's own message does not name it)
    _bad(good, "out_dtype", exc=TypeError, out_dtype="bogus")
    _bad(good, "out_dtype", exc=TypeError, out_dtype=5)


def test_grid_dimensions(good):
    """B * Hkv and Hq * ceil(D / 64) sit on grid dimensions limited to 65535 (the register-
    tiled splits and the batched combine): refused, naming q, for every variant alike."""
    q = np.zeros((2, 2, 32768, 64), np.float16)
    k = np.zeros((1, 8, 32768, 64), np.uint8)          # B * Hkv = 65536
    for variant in ("frozen", "tiled_perm"):
        _bad(good, "q: batch x KV heads", exc=ValueError, q=q, k_cache=k, v_cache=k,
             variant=variant)
    _check_grid_dims(1, 65535, 65535, 64)              # at the limit: accepted
    _check_grid_dims(2, 32767, 16383, 256)
    for args in [(65536, 1, 1, 64), (1, 65536, 65536, 64), (1, 16384, 16384, 256),
                 (1, 32768, 32768, 128)]:
        with pytest.raises(ValueError, match="q: batch x KV heads"):
            _check_grid_dims(*args)


def test_workspace_and_out(good):
    _bad(good, "workspace", workspace=d2.AttentionWorkspace(batch=2, q_len=2, heads=2, head_dim=64, splits=5))
    _bad(good, "workspace", exc=TypeError, workspace=object())
    out = np.full((2, 2, 2, 32), 7, np.float16)
    _bad(good, "out", out=out)
    assert np.all(out == 7)
    out = np.full((2, 2, 2, 64), 7, np.float32)
    _bad(good, "out", exc=TypeError, out=out)
    assert np.all(out == 7)


def test_not_an_array(good):
    _bad(good, "block_table", exc=TypeError, block_table=[[0, 1]])
    _bad(good, "q", exc=TypeError, q=None)


def test_non_finite_q_is_an_error(good):
    q = good["q"].copy()
    q[1, 0, 1, 5] = np.nan
    _bad(good, "q: must be finite", q=q)
    q[1, 0, 1, 5] = np.inf
    _bad(good, "q: must be finite", q=q)


def test_empty_cache_dimensions_are_named_as_such(good):
    """numpy gives an empty array zero strides: the reason is the empty dimension, not the
    stride."""
    for shape in [(0, 8, 1, 64), (4, 0, 1, 64), (4, 8, 0, 64)]:
        empty = np.zeros(shape, np.uint8)
        _bad(good, r"^k_cache: every dimension must be >= 1", k_cache=empty, v_cache=empty)
    _bad(good, r"^v_cache: every dimension must be >= 1", v_cache=np.zeros((0, 8, 1, 64), np.uint8))


def test_inputs_the_call_cannot_copy_name_themselves(good):
    """A numpy cache or block table the call cannot copy to the device (broadcast views of
    2**40 pages / 2**46 columns: no memory of their own) is a ValueError naming it, not a
    bare MemoryError. Each copy is 512 TiB, past any x86-64 process's 128 TiB of address
    space, so no host's overcommit policy lets it be mapped (and then killed when written)."""
    big = np.broadcast_to(np.zeros((1, 1, 1, 64), np.uint8), (2 ** 40, 8, 1, 64))
    _bad(good, r"^k_cache: not enough memory for its device copy \(MemoryError",
         k_cache=big, v_cache=big, workspace=None)
    wide = np.broadcast_to(np.zeros((1, 1), np.int32), (2, 2 ** 46))
    _bad(good, r"^block_table: not enough memory for its device copy", block_table=wide,
         workspace=None)


def test_workspace_sizes_past_int64_and_streams():
    """Workspace sizes are counted in Python ints (np.prod wrapped past int64 and told a
    wrong byte count); an int past 4300 digits is named by its size; ``fill_sentinel``
    checks its stream like every call does."""
    for kw, msg in [(dict(batch=2 ** 63 - 1), r"needs 24202128224706931718848 bytes"),
                    (dict(batch=2 ** 40, heads=2 ** 24), r"needs \d{22,} bytes"),
                    (dict(batch=10 ** 5000), r"needs about 2\*\*16620 bytes")]:
        args = dict(batch=1, q_len=2, heads=2, head_dim=64, splits=2)
        args.update(kw)
        with pytest.raises(ValueError, match="^batch, splits, q_len, heads, head_dim: the "
                                             "workspace " + msg):
            d2.AttentionWorkspace(**args)
    with pytest.raises(TypeError, match="^batch: expected an int"):
        d2.AttentionWorkspace(batch=np.timedelta64(1), q_len=2, heads=2, head_dim=64)
    ws = d2.AttentionWorkspace(batch=1, q_len=2, heads=2, head_dim=64, splits=2)
    for bad in ("x", 1.5, True, object()):
        with pytest.raises(TypeError, match="^stream: "):
            ws.fill_sentinel(stream=bad)
    with pytest.raises(ValueError, match="^stream: "):
        ws.fill_sentinel(stream=-1)
    ws.fill_sentinel(stream=None)
    assert ws.guards_intact() and (ws.partial.copy_to_host() == SENTINEL).all()


def test_workspace_arguments():
    for kw, name in [(dict(batch=0), "batch"), (dict(q_len=-1), "q_len"), (dict(heads=1.5), "heads"),
                     (dict(head_dim=True), "head_dim"), (dict(splits=0), "splits")]:
        args = dict(batch=1, q_len=2, heads=2, head_dim=64, splits=4)
        args.update(kw)
        with pytest.raises((TypeError, ValueError), match=name):
            d2.AttentionWorkspace(**args)
    for odt in ("int8", "bogus", 5):
        with pytest.raises(TypeError, match="out_dtype"):
            d2.AttentionWorkspace(batch=1, q_len=2, heads=2, head_dim=64, out_dtype=odt)
    for splits in (MAX_LOGICAL_SPLITS + 1, 2 ** 40):           # refused before any allocation
        with pytest.raises(ValueError, match="splits: must be <= 65536"):
            d2.AttentionWorkspace(batch=1, q_len=2, heads=2, head_dim=64, splits=splits)
    for kw, msg in [(dict(q_len=9), "q_len: must be <= 8"),
                    (dict(head_dim=65), "head_dim: must be one of"),
                    (dict(guard=2 ** 62), "guard: must be <= "),
                    (dict(batch=2 ** 20, heads=2 ** 10, splits=80),
                     "batch, splits, q_len, heads, head_dim: the workspace needs")]:
        args = dict(batch=1, q_len=2, heads=2, head_dim=64, splits=4)
        args.update(kw)
        with pytest.raises(ValueError, match=msg):
            d2.AttentionWorkspace(**args)


def test_numpy_out_is_filled_by_results_whatever_q_is(good):
    """A numpy ``out``: ``plan.launch()`` writes the device buffers only, ``plan.results()``
    (and so verify_attention, with numpy or device q) fills it and returns it as ``out``."""
    want = d2.verify_attention(**good, splits=4).out
    for args in (good, device_copies(good)):
        out = np.full(want.shape, 7, np.float16)
        plan = d2.plan_attention(**args, splits=4, out=out)
        plan.launch()
        assert (out == 7).all()
        res = plan.results()
        assert res.out is out and np.array_equal(out, want)
        out[...] = 7
        res = d2.verify_attention(**args, splits=4, out=out)
        assert res.out is out and np.array_equal(out, want)


def test_check_inputs_rechecks_values_changed_in_place(good):
    """A plan reads its arrays' values at every launch; ``check_inputs`` runs the plan-time
    value checks again on what they hold now and names what no longer passes."""
    dev = device_copies(good)
    plan = d2.plan_attention(**dev, splits=4)
    plan.check_inputs()                                        # unchanged: passes
    W, page = good["block_table"].shape[1], good["k_cache"].shape[1]
    grown = good["seq_lens"].copy()
    grown[0] = W * page + 2                                    # past what the table names
    dev["seq_lens"].copy_to_device(grown)
    with pytest.raises(ValueError, match=r"^seq_lens: value"):
        plan.check_inputs()
    dev["seq_lens"].copy_to_device(good["seq_lens"])
    table = good["block_table"].copy()
    table[1, 0] = good["k_cache"].shape[0]                     # a page that does not exist
    dev["block_table"].copy_to_device(table)
    with pytest.raises(ValueError, match=r"^block_table\[1\]"):
        plan.check_inputs()
    dev["block_table"].copy_to_device(good["block_table"])
    q = good["q"].copy()
    q[0, 1, 0, 3] = np.nan
    dev["q"].copy_to_device(q)
    with pytest.raises(ValueError, match=r"^q: must be finite"):
        plan.check_inputs()


def test_device_out_sharing_memory_with_an_input_or_the_records_is_refused(good):
    """A device ``out`` that shares device memory with ``q`` or with the workspace's split
    records is refused naming both, before any launch; the workspace's own ``out`` and a
    separate buffer are taken."""
    from dflash2_numba._compat import cuda

    dev = device_copies(good)
    ws = d2.AttentionWorkspace(batch=2, q_len=2, heads=2, head_dim=64, splits=4,
                               out_dtype="float32")
    ws.fill_sentinel()
    d2.route_counters(reset=True)
    q_before = dev["q"].copy_to_host()
    with pytest.raises(ValueError, match=r"^out: overlaps q in device memory"):
        d2.plan_attention(**dev, splits=4, out=dev["q"])
    with pytest.raises(ValueError, match=r"^out: overlaps workspace.partial in device memory"):
        d2.plan_attention(**dev, splits=4, out=ws.partial.reshape(-1)[:2 * 2 * 2 * 64].reshape(
            2, 2, 2, 64), workspace=ws, out_dtype="float32")
    assert d2.route_counters() == {} and ws.guards_intact()
    assert dev["q"].copy_to_host().tobytes() == q_before.tobytes()
    want = d2.verify_attention(**good, splits=4, out_dtype="float32").out
    for out in (ws.out, cuda.device_array(want.shape, np.float32)):
        r = d2.verify_attention(**dev, splits=4, out=out, workspace=ws, out_dtype="float32")
        assert r.out is out and r.out.copy_to_host().tobytes() == want.tobytes()


def test_numpy_inputs_are_bound_by_value(good):
    """numpy inputs are copied to the device at plan time: changing the caller's arrays
    afterwards changes neither the launches' result nor what ``check_inputs`` checks."""
    args = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in good.items()}
    plan = d2.plan_attention(**args, splits=4)
    plan.launch()
    before = plan.results().out
    args["q"][...] = np.nan                                    # the caller's arrays only
    args["seq_lens"][0] = good["block_table"].shape[1] * good["k_cache"].shape[1] + 2
    plan.check_inputs()                                        # the plan's copies still pass
    plan.launch()
    assert plan.results().out.tobytes() == before.tobytes()


def test_plan_names_a_workspace_it_cannot_allocate():
    """A call whose own workspace cannot be allocated is a ValueError naming what sizes it,
    as for an AttentionWorkspace, not a bare MemoryError."""
    B, Q, Hq, D = 1000, 8, 8, 256          # partial: 1000 x 65536 splits x 8 x 8 x 256 FP32
    big = case(np.random.default_rng(5), B=1, Q=1, Hq=1, Hkv=1, D=D, page_size=16,
               seq_lens=[3], strided=False)
    big.update(q=np.zeros((B, Q, Hq, D), np.float16), seq_lens=np.full(B, 10, np.int32),
               block_table=np.zeros((B, big["block_table"].shape[1]), np.int32))
    with pytest.raises(ValueError, match=r"^q, splits: the call needs a \d+-byte buffer"):
        d2.plan_attention(**big, splits=65536)


def test_launch_refuses_a_grid_past_cuda_limits():
    """The backstop under every variant: ``_registry.launch`` refuses a grid past CUDA's
    limits naming the kernel, and neither launches nor counts it."""
    from dflash2_numba import _registry

    class Kernel:
        calls = 0

        def __getitem__(self, config):
            Kernel.calls += 1
            return lambda *args: None

    d2.route_counters(reset=True)
    for grid in [(1, 65536, 1), (1, 1, 65536), 2 ** 31, (2 ** 31, 1, 1)]:
        with pytest.raises(ValueError, match="test.kernel: grid"):
            _registry.launch("test.kernel", Kernel(), grid, 32, 0)
    assert Kernel.calls == 0 and d2.route_counters() == {}
    _registry.launch("test.kernel", Kernel(), (2 ** 31 - 1, 65535, 65535), 32, 0)
    assert Kernel.calls == 1 and d2.route_counters(reset=True) == {"test.kernel": 1}
