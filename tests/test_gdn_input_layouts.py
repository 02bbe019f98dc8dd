"""gdn_prefill input layouts: strided device inputs where a variant reads them element by
element, a refusal naming the argument where it reads them as flat arrays, and numpy's
contiguity rule (strides of size-1 dimensions are never read) for the states."""
import numpy as np
import pytest

import oracle
from dflash2_numba import _registry
from dflash2_numba._compat import cuda
from dflash2_numba.gdn import gdn_prefill

INPUTS = ("q", "k", "v", "g", "beta")


def _case(with_state=False):
    return oracle.random_gdn_case(np.random.default_rng(3), B=1, T=6, H=1, HV=2, K=32, V=32,
                                  dtype=np.float16, with_state=with_state)


def _strided_on_device(a: np.ndarray):
    """``a`` on the device as a view with a non-unit last stride (every other element of an
    array twice as wide), the layout a slice of a fused projection gives."""
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), dtype=a.dtype)
    wide[..., ::2] = a
    # (numba's device arrays take no Ellipsis on a GPU: the simulator's numpy ones do)
    view = cuda.to_device(wide)[(slice(None),) * (a.ndim - 1) + (slice(None, None, 2),)]
    assert view.strides[-1] == 2 * a.itemsize
    return view


def _flat_variants():
    return sorted(n for n, v in _registry.variants("gdn").items() if v.flat_inputs)


def test_flat_variants_are_the_prepass_ones():
    """Every variant with a pre-pass reads its inputs flat; the frozen kernel and the serial
    one index them element by element."""
    named = {n: v.flat_inputs for n, v in _registry.variants("gdn").items()}
    assert named["chunked"] is False and named["serial"] is False
    assert all(named[n] for n in named if n not in ("chunked", "serial"))


@pytest.mark.parametrize("variant", ["chunked", "serial"])
def test_strided_device_inputs_give_the_contiguous_bits(variant):
    case = _case()
    o_ref, s_ref = gdn_prefill(**case, variant=variant)
    strided = {n: _strided_on_device(case[n]) for n in INPUTS}
    o, s = gdn_prefill(**{**case, **strided}, variant=variant)
    assert oracle.first_mismatch(o.copy_to_host(), o_ref) is None
    assert oracle.first_mismatch(s.copy_to_host(), s_ref) is None


@pytest.mark.parametrize("name", INPUTS)
def test_flat_variant_refuses_strided_input_by_name(name):
    case = _case()
    case = {**case, **{n: cuda.to_device(case[n]) for n in INPUTS}}
    case[name] = _strided_on_device(case[name].copy_to_host())
    _registry.route_counters(reset=True)
    with pytest.raises(ValueError, match=rf"^{name}: variant 'chunked_ahead' reads q, k, v, g "
                                         rf"and beta as C-contiguous"):
        gdn_prefill(**case, variant="chunked_ahead")
    assert _registry.route_counters() == {}


@pytest.mark.parametrize("variant", _flat_variants())
def test_every_flat_variant_refuses_strided_q(variant):
    case = _case()
    case["q"] = _strided_on_device(case["q"])
    with pytest.raises(ValueError, match=r"^q: variant"):
        gdn_prefill(**case, variant=variant)


def test_strided_numpy_inputs_are_copied_for_flat_variants():
    """numpy inputs are copied compactly to the device, so any layout serves every variant."""
    case = _case()
    o_ref, s_ref = gdn_prefill(**case)
    strided = {n: np.asfortranarray(case[n]) for n in INPUTS}
    o, s = gdn_prefill(**{**case, **strided}, variant="chunked_ahead")
    assert oracle.first_mismatch(o, o_ref) is None
    assert oracle.first_mismatch(s, s_ref) is None


def test_states_with_unread_size1_strides_are_contiguous():
    """An initial state or a one-slot cache whose size-1 dimension has a stride numpy does not
    read (numpy calls it C-contiguous) is accepted and gives the bits of a compact copy."""
    case = _case(with_state=True)
    h0 = case.pop("initial_state")                            # [1, HV, K, V]
    odd = np.zeros((2,) + h0.shape[1:], np.float32)[::2]      # stride of dim 0: two states
    odd[...] = h0
    assert odd.flags.c_contiguous and odd.strides[0] != h0.nbytes
    o_ref, s_ref = gdn_prefill(**case, initial_state=h0)
    o, s = gdn_prefill(**case, initial_state=odd)
    assert oracle.first_mismatch(o, o_ref) is None and oracle.first_mismatch(s, s_ref) is None
    cache = np.zeros((2,) + h0.shape[1:], np.float32)[::2]
    cache[...] = h0
    o, s = gdn_prefill(**case, state_cache=cache, state_indices=np.zeros(1, np.int32))
    assert s is cache
    assert oracle.first_mismatch(o, o_ref) is None and oracle.first_mismatch(cache, s_ref) is None


def test_numpy_states_of_any_layout_are_copied_compactly():
    """A numpy ``initial_state`` in Fortran order or strided, and a strided numpy
    ``state_cache``, are copied compactly like the other numpy inputs: the bits of the
    contiguous call, with the cache's named rows written back into the caller's strided
    array and its other slots untouched. A device state must be C-contiguous (it is read
    in place): refused by name."""
    case = _case(with_state=True)
    h0 = case.pop("initial_state")                            # [1, HV, K, V]
    o_ref, s_ref = gdn_prefill(**case, initial_state=h0)
    wide = np.zeros(h0.shape[:-1] + (2 * h0.shape[-1],), np.float32)
    wide[..., ::2] = h0
    for state in (np.asfortranarray(h0), wide[..., ::2]):
        assert not state.flags.c_contiguous
        o, s = gdn_prefill(**case, initial_state=state)
        assert oracle.first_mismatch(o, o_ref) is None and oracle.first_mismatch(s, s_ref) is None
    sentinel = np.float32(-777.0)
    cache_wide = np.full((3,) + h0.shape[1:-1] + (2 * h0.shape[-1],), sentinel, np.float32)
    cache = cache_wide[..., ::2]                              # slots 0..2, every other column
    cache[1] = h0[0]
    o, s = gdn_prefill(**case, state_cache=cache, state_indices=np.array([1], np.int32))
    assert s is cache
    assert oracle.first_mismatch(o, o_ref) is None
    assert oracle.first_mismatch(cache[1:2], s_ref) is None
    assert (cache[[0, 2]] == sentinel).all() and (cache_wide[..., 1::2] == sentinel).all()
    dev_cache = cuda.to_device(np.zeros((2,) + h0.shape[1:-1] + (2 * h0.shape[-1],), np.float32))
    with pytest.raises(ValueError, match=r"^state_cache:"):
        gdn_prefill(**case, state_cache=dev_cache[:, :, :, ::2],
                    state_indices=np.array([0], np.int32))
