"""FMA contraction is off where the package compiles (``_compat.exact_fp32``): ``a*b + c``
written as two operations stays two roundings, and only an explicit ``cuda.fma`` fuses.

Nothing else pins this. Frozen and every variant are compiled alike, so a contraction
that crept into all of them would leave every screen and bench byte check passing while
the kernels no longer keep the contract's operation order.

- PTX (no GPU; a child process without NUMBA_ENABLE_CUDASIM, skipped where numba finds
  no libNVVM; at sm_70, or at the device's capability on a GPU machine whose CUDA 13
  cannot target 7.0): under the package's flags ``a*b + c`` is ``mul.rn`` then ``add.rn`` and
  ``cuda.fma`` is ``fma.rn``; numba's default flags contract the same source into ``fma.rn``
  (the control: the check can see a contraction).
- At run time: a kernel launched through ``_registry.launch`` returns the two-rounding
  result on inputs where the fused one differs (on the simulator too, which never fuses);
  on a GPU the same source launched outside it returns the fused result (the control:
  that GPU's default compile does contract; ``gpu``-marked).
"""
import numpy as np
import pytest

from dflash2_numba import _registry
from bench.fma_contraction_probe import a_times_b_plus_c, fusing_inputs, listing, probe
from dflash2_numba._compat import SIMULATOR, cuda
from tests.nvvm_child import child_json

CHILD = r"""
    from numba import cuda, types
    from dflash2_numba._compat import compile_ptx_cc

    def two_roundings(a, b, c, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] * b[i] + c[i]

    def fused(a, b, c, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = cuda.fma(a[i], b[i], c[i])

    sig = (types.float32[::1],) * 4

    def ops(ptx):
        return {op: ptx.count(op) for op in ("fma.rn.f32", "mul.rn.f32", "add.rn.f32")}

    # sm_70 where the toolchain targets it (CUDA 12); else, on a GPU machine whose CUDA 13
    # cannot, the device's own capability: the PTX its launches would get
    cc = (7, 0)
    try:
        compile_ptx_cc(fused, sig, cc=cc)
    except Exception as exc:
        if "not supported" not in str(exc):
            raise
        cc = tuple(cuda.get_current_device().compute_capability)
    found = {
        "cc": list(cc),
        "package": ops(compile_ptx_cc(two_roundings, sig, cc=cc)[0]),
        "package_fma": ops(compile_ptx_cc(fused, sig, cc=cc)[0]),
        "numba_default": ops(cuda.compile_ptx(two_roundings, sig, cc=cc)[0]),
    }
    print("OPS" + json.dumps(found))
"""


def test_ptx_keeps_two_roundings_and_explicit_fma():
    found = child_json(CHILD, "OPS", timeout=600)
    assert found["package"] == {"fma.rn.f32": 0, "mul.rn.f32": 1, "add.rn.f32": 1}, found
    assert found["package_fma"]["fma.rn.f32"] == 1, found
    assert found["package_fma"]["mul.rn.f32"] == 0, found
    # numba's own default contracts the same source: the check above can see a contraction
    assert found["numba_default"]["fma.rn.f32"] == 1, found


def test_launch_keeps_two_roundings_on_the_device():
    a, b, c, two, one = fusing_inputs()
    out = cuda.to_device(np.zeros_like(a))
    kernel = cuda.jit(a_times_b_plus_c)
    _registry.launch("test.a_times_b_plus_c", kernel, 2, 128, 0,
                     cuda.to_device(a), cuda.to_device(b), cuda.to_device(c), out)
    got = out.copy_to_host()
    assert got.tobytes() == two.tobytes(), (
        f"{int(np.sum(got.view(np.uint32) == one.view(np.uint32)))} of {got.size} elements "
        f"are the fused result: _registry.launch compiled with FMA contraction on (the "
        f"launched kernel's PTX: {listing(kernel, 'asm')}; bench/fma_contraction_probe.py "
        f"says more)")


@pytest.mark.gpu
def test_default_compile_fuses_on_this_gpu():
    """The control for the test above: outside ``exact_fp32`` the same source does contract
    here, so the inputs can tell the two compilations apart."""
    a, b, c, two, one = fusing_inputs()
    out = cuda.to_device(np.zeros_like(a))
    cuda.jit(a_times_b_plus_c)[2, 128](cuda.to_device(a), cuda.to_device(b), cuda.to_device(c), out)
    assert out.copy_to_host().tobytes() == one.tobytes()


@pytest.mark.skipif(not SIMULATOR, reason="simulator: the GPU's answer is the probe's output")
def test_fma_probe_runs_and_the_simulator_never_fuses():
    """``bench/fma_contraction_probe.py`` on the simulator: both builds give the two-rounding
    result everywhere (the simulator has no contraction) and there is no PTX to list."""
    found = probe()
    for how in ("package", "package_ptxas_no_fmad", "numba_default"):
        assert found[how]["two_roundings"] == found[how]["of"] == 256, found
        assert "unavailable" in found[how]["ptx"], found


LINKER_CHILD = r"""
    import os
    from numba.cuda.cudadrv import driver
    from dflash2_numba._compat import PTXAS_NO_FMAD_ENV, exact_fp32

    linker = driver._Linker(cc=(9, 0))
    got = {}
    for env in ("0", "1"):
        os.environ[PTXAS_NO_FMAD_ENV] = env
        got["outside_" + env] = linker._get_linker_options(ptx=False).ptxas_options
        with exact_fp32():
            got["exact_" + env] = linker._get_linker_options(ptx=False).ptxas_options
    print("LINK" + json.dumps(got))
"""


def test_ptxas_no_fmad_only_under_exact_fp32_and_the_switch():
    """``DFLASH2_PTXAS_NO_FMAD=1`` adds ptxas ``--fmad=false`` to the link of kernels built
    under ``exact_fp32`` and nowhere else (numba's real driver module, no GPU needed)."""
    got = child_json(LINKER_CHILD, "LINK", timeout=300)
    assert got == {"outside_0": None, "exact_0": None, "outside_1": None,
                   "exact_1": ["--fmad=false"]}, got
