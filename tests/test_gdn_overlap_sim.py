"""chunked_overlap on the simulator: the segment tables (every chunk of every sequence in
exactly one segment, in order, each part starting from the state row the part before it
ended in), and the bytes of chunked under every segment count, in the packed, state-cache
and no-state forms (the generic variant tests run the default segment count)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from dflash2_numba import _registry
from dflash2_numba._compat import cuda
from dflash2_numba.gdn import gdn_prefill
from dflash2_numba.gdn._common import C
from dflash2_numba.gdn.chunked_overlap import segment_tables


def _check_tables(lengths, nseg, HV=3, V=32, w=12):
    N = len(lengths)
    seqs = np.array([(0, sum(lengths[:n]), ln) for n, ln in enumerate(lengths)], np.int64)
    bounds, segs, src_row, n_rows = segment_tables(seqs, nseg, HV, V, w)
    nch = [-(-ln // C) for ln in lengths]
    nslots = sum(nch)
    S = len(segs)
    assert S == max(1, min(nseg, nslots))
    assert bounds[0] == 0 and bounds[-1] == nslots and len(bounds) == S + 1
    assert all(a < b for a, b in zip(bounds, bounds[1:])) or nslots == 0
    assert n_rows == 2 * N + S - 1
    parts = {n: [] for n in range(N)}           # per sequence: (segment, first token, length, in, out)
    slot0 = np.concatenate([[0], np.cumsum(nch)[:-1]]).astype(int)
    for s, (sub, rin, rout, items) in enumerate(segs):
        assert sub.shape[0] == rin.shape[0] == rout.shape[0]
        for j in range(sub.shape[0]):
            bos, ln = int(sub[j, 1]), int(sub[j, 2])
            n = int(np.searchsorted(seqs[:, 1] + seqs[:, 2], bos, side="right"))
            while seqs[n, 2] == 0:
                n += 1
            parts[n].append((s, bos, ln, int(rin[j]), int(rout[j])))
            # the part's items: every value head and column group, its first slot
            its = items[items[:, 0] == j]
            assert its.shape[0] == HV * -(-V // w)
            first_slot = slot0[n] + (bos - seqs[n, 1]) // C
            assert (its[:, 4] == first_slot).all()
            assert bounds[s] <= first_slot < bounds[s + 1]
        lens = [int(sub[items[i, 0], 2]) for i in range(items.shape[0])]
        assert lens == sorted(lens, reverse=True)                  # longest parts first
    for n in range(N):
        ps = parts[n]
        if lengths[n] == 0:
            assert ps == [] and src_row[n] == n
            continue
        # the parts tile the sequence's tokens in order, in increasing segments
        assert ps[0][1] == seqs[n, 1] and sum(p[2] for p in ps) == lengths[n]
        for p, q in zip(ps, ps[1:]):
            assert q[1] == p[1] + p[2] and q[0] == p[0] + 1 and p[2] % C == 0
            assert p[4] == q[3] == 2 * N + q[0] - 1                 # the boundary's row
        assert ps[0][3] == n and ps[-1][4] == N + n and src_row[n] == N + n
    rows_out = [p[4] for ps in parts.values() for p in ps]
    assert len(rows_out) == len(set(rows_out))                    # no row written twice


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(0, 300), min_size=1, max_size=6),
       nseg=st.integers(1, 12))
def test_segment_tables_cover_every_chunk_once(lengths, nseg):
    _check_tables(lengths, nseg)


def test_segment_tables_examples():
    _check_tables([0, 0], 8)                       # no chunks: one empty segment
    _check_tables([1000], 8)                       # 16 slots, 8 segments of two
    _check_tables([64, 0, 65, 1], 3)               # cuts between and inside sequences
    _check_tables([130], 64)                       # more segments asked than slots


def _packed(seed, state=True):
    rng = np.random.default_rng(seed)
    cu = np.array([0, 70, 70, 200, 205], np.int32)                # 70, 0, 130, 5 tokens
    return oracle.random_gdn_case(rng, B=1, T=205, H=1, HV=2, K=32, V=32, dtype=np.float32,
                                  cu_seqlens=cu, with_state=state)


@pytest.mark.parametrize("nseg", ["1", "2", "3", "5", "64"])
def test_segment_count_does_not_change_bits(monkeypatch, nseg):
    """Packed batch with an empty sequence, initial states, final states: every segment
    count gives chunked's bytes (7 slots: boundaries inside and between sequences)."""
    case = _packed(121)
    ref_o, ref_s = gdn_prefill(**case, variant="chunked")
    monkeypatch.setenv("DFLASH2_GDN_SEGMENTS", nseg)
    o, s = gdn_prefill(**case, variant="chunked_overlap")
    assert oracle.first_mismatch(o, ref_o) is None
    assert oracle.first_mismatch(s, ref_s) is None


@pytest.mark.parametrize("nseg", ["2", "4"])
def test_segments_in_place_state_cache(monkeypatch, nseg):
    """The server form (initial and final states in one cache, read and written in place,
    slots not named untouched) with segment boundaries inside sequences."""
    case = _packed(122)
    h0 = case.pop("initial_state")
    idx = np.array([5, 0, 3, 1], np.int32)
    cache = np.full((7, 2, 32, 32), np.float32(-777.0), np.float32)
    cache[idx] = h0
    ref = cache.copy()
    ref_o, _ = gdn_prefill(**case, state_cache=ref, state_indices=idx, variant="chunked")
    monkeypatch.setenv("DFLASH2_GDN_SEGMENTS", nseg)
    dcache = cuda.to_device(cache)
    o, _ = gdn_prefill(**case, state_cache=dcache, state_indices=cuda.to_device(idx),
                       variant="chunked_overlap")
    assert oracle.first_mismatch(o, ref_o) is None
    assert oracle.first_mismatch(np.asarray(dcache.copy_to_host()), ref) is None


def test_segments_without_states(monkeypatch):
    """No initial state (zeros) and no final state asked for."""
    case = _packed(123, state=False)
    ref_o, _ = gdn_prefill(**case, variant="chunked", output_final_state=False)
    monkeypatch.setenv("DFLASH2_GDN_SEGMENTS", "3")
    o, s = gdn_prefill(**case, variant="chunked_overlap", output_final_state=False)
    assert s is None
    assert oracle.first_mismatch(o, ref_o) is None


def test_segment_count_rule(monkeypatch):
    """The default segment count on a GPU of 132 SMs: at most one pre-pass wave (264 CTAs)
    a segment, at most 16 segments; one segment where no pre-pass CTA fits beside the
    recurrence. Whether one fits follows the two kernels' shared memory: at K = 128 an
    H200 SM (228 KB) holds both, a V100 SM (96 KB) does not."""
    from dflash2_numba.gdn import chunked_overlap as OV

    monkeypatch.setattr(OV, "SIMULATOR", False)
    monkeypatch.setattr(OV, "default_max_ctas", lambda: 132)
    assert OV.segment_count(1024, 4) == 16          # T = 65536: 16 x 256 CTAs
    assert OV.segment_count(512, 4) == 8            # T = 32768: 8 x 256
    assert OV.segment_count(64, 4) == 1             # T = 4096: 256 CTAs, one wave
    assert OV.segment_count(1020, 4) == 16          # 16 x 255
    assert OV.segment_count(4096, 4) == 16          # capped
    assert OV.segment_count(0, 4) == 1
    assert OV.segment_count(1024, 4, beside=False) == 1
    for n, h in ((1024, 4), (512, 4), (300, 3), (7, 1), (1000, 12), (130, 4)):
        s = OV.segment_count(n, h)
        assert -(-n // s) * h <= 264 or s == OV.DEFAULT_SEGMENTS      # largest segment: one wave
    assert OV.prep_fits_beside_rec(128, 228 * 1024)
    assert not OV.prep_fits_beside_rec(128, 96 * 1024)


def test_split_pre_pass_form(monkeypatch):
    """DFLASH2_GDN_OVERLAP_PREP=split runs chunked_split's pre-pass in the segments (the
    same scratch bits): chunked's bytes; an unknown form is refused at plan time."""
    case = _packed(124)
    ref_o, ref_s = gdn_prefill(**case, variant="chunked")
    monkeypatch.setenv("DFLASH2_GDN_SEGMENTS", "3")
    monkeypatch.setenv("DFLASH2_GDN_OVERLAP_PREP", "split")
    _registry.route_counters(reset=True)
    o, s = gdn_prefill(**case, variant="chunked_overlap")
    assert _registry.route_counters(reset=True).get("gdn_split_prep") == 3
    assert oracle.first_mismatch(o, ref_o) is None
    assert oracle.first_mismatch(s, ref_s) is None
    monkeypatch.setenv("DFLASH2_GDN_OVERLAP_PREP", "tiles")
    with pytest.raises(ValueError, match="DFLASH2_GDN_OVERLAP_PREP"):
        gdn_prefill(**case, variant="chunked_overlap")


@pytest.mark.parametrize("schedule, launches", [("end", 1), ("segments", 3), ("", 1)])
def test_output_schedules(monkeypatch, schedule, launches):
    """DFLASH2_GDN_OVERLAP_OUT: ``end`` (the default, also when unset) launches the output
    kernel once over every slot after the last recurrence, ``segments`` once a segment after
    its own recurrence: chunked's bytes either way; an unknown schedule is refused at plan
    time."""
    from dflash2_numba.gdn import chunked_rec as RC
    from dflash2_numba.gdn import chunked_rec_pipe as RP

    case = _packed(125)
    ref_o, ref_s = gdn_prefill(**case, variant="chunked")
    monkeypatch.setenv("DFLASH2_GDN_SEGMENTS", "3")
    monkeypatch.setenv("DFLASH2_GDN_OVERLAP_OUT", schedule)
    _registry.route_counters(reset=True)
    o, s = gdn_prefill(**case, variant="chunked_overlap")
    counts = _registry.route_counters(reset=True)
    out_kernels = (RC.OUT_NAME, RP.OUT_NAME, RP.WIDE_NAME)
    assert sum(v for k, v in counts.items() if k in out_kernels) == launches, counts
    assert oracle.first_mismatch(o, ref_o) is None
    assert oracle.first_mismatch(s, ref_s) is None


def test_unknown_output_schedule_is_refused(monkeypatch):
    monkeypatch.setenv("DFLASH2_GDN_OVERLAP_OUT", "later")
    with pytest.raises(ValueError, match="DFLASH2_GDN_OVERLAP_OUT"):
        gdn_prefill(**_packed(126), variant="chunked_overlap")
