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
- Link (no GPU; the dispatcher's own compile and link, device lookups stubbed): under the
  package's flags the cubin is linked from that PTX, not through nvJitLink's LTO (which
  fuses the pair again: the cause of session 39's 256 fused elements), and its SASS
  (nvdisasm, sm_90a) has FMUL + FADD where the LTO link and numba's default have one
  FFMA; the switch is scoped to ``exact_fp32``.
"""
import numpy as np
import pytest

from dflash2_numba import _registry
from bench.fma_contraction_probe import FORMS, a_times_b_plus_c, fusing_inputs, listing, probe
from dflash2_numba._compat import SIMULATOR, cuda
from tests.missing_tools import missing
from tests.nvvm_child import OFFLINE_BUILD_PREAMBLE, child_json

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
        f"launched kernel's PTX: {listing(kernel, 'asm', 'package')}; bench/fma_contraction_probe.py "
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
    """``bench/fma_contraction_probe.py`` on the simulator: every build gives the two-rounding
    result everywhere (the simulator has no contraction) and there is no PTX to list."""
    found = probe()
    for how in FORMS:
        assert found[how]["two_roundings"] == found[how]["of"] == 256, found
        assert "unavailable" in found[how]["ptx"], found


# The dispatcher's own build and link, as a launch does it, without a GPU
# (``OFFLINE_BUILD_PREAMBLE``).
LINK_CHILD = OFFLINE_BUILD_PREAMBLE + r"""
from numba import cuda, types
from dflash2_numba._compat import target_cc
from bench.fma_contraction_probe import FORMS, a_times_b_plus_c, build_switches

found = {"nvdisasm": nvdisasm}
for how in FORMS:
    kernel = cuda.jit(a_times_b_plus_c)
    sig = (types.float32[::1],) * 4
    with target_cc(CC), build_switches(how):
        cubin = kernel.compile(sig).library.get_cubin(cc=CC + ("a",))
    found[how] = dict(links[-1], sass=sass_ops(cubin))
print("LINK" + json.dumps(found))
"""


def test_package_links_from_ptx_and_its_sass_keeps_two_roundings():
    """The cause session 40 found offline for the H100's 256 fused elements: numba links a
    kernel through nvJitLink's LTO where nvJitLink is installed, and the LTO code generation
    fuses ``a*b + c`` although NVVM compiled the LTO-IR under ``-fma=0``. Under
    ``exact_fp32`` the package links the kernel from its PTX (``mul.rn`` + ``add.rn``, which
    ptxas never contracts), and the SASS (nvdisasm, sm_90a) has FMUL + FADD; the LTO link of
    the same build and numba's default have one FFMA (the control: the SASS check can see a
    contraction). The dispatcher's own compile and link, no GPU."""
    found = child_json(LINK_CHILD, "LINK", timeout=600)
    package, lto, default = found["package"], found["package_lto"], found["numba_default"]
    assert package["lto"] is False and package["objects"] == ["ptx"], found
    assert package["ptx"]["mul.rn.f32"] == 1 and package["ptx"]["add.rn.f32"] == 1, found
    assert package["ptx"]["fma.rn.f32"] == 0, found
    assert lto["lto"] is True and lto["objects"] == ["ltoir"], found
    assert default["lto"] is True, found
    if found["nvdisasm"] is None:
        missing("no nvdisasm (the cuda12 extra installs nvidia-cuda-nvdisasm): the PTX passed, the SASS is unchecked")
    assert package["sass"] == {"FFMA": 0, "FMUL": 1, "FADD": 1}, found
    assert lto["sass"]["FFMA"] == 1 and lto["sass"]["FMUL"] == 0, found
    assert default["sass"]["FFMA"] == 1 and default["sass"]["FMUL"] == 0, found


LTO_SWITCH_CHILD = r"""
    from numba.cuda.cudadrv import driver
    from dflash2_numba._compat import allow_lto_link, exact_fp32

    got = {"outside": driver._Linker(cc=(9, 0), lto=True).lto}
    with exact_fp32():
        got["exact"] = driver._Linker(cc=(9, 0), lto=True).lto
        got["exact_positional"] = driver._Linker(None, False, (9, 0), True).lto
        with allow_lto_link():
            got["exact_allowed"] = driver._Linker(cc=(9, 0), lto=True).lto
    got["after"] = driver._Linker(cc=(9, 0), lto=True).lto
    print("LTO" + json.dumps(got))
"""


def test_lto_is_refused_only_under_exact_fp32():
    """The link switch is scoped like NVVM's ``-fma=0``: only links inside ``exact_fp32``
    (and outside ``allow_lto_link``) lose LTO, however the argument is passed; other numba
    users keep numba's default (numba's real driver module, no GPU needed)."""
    got = child_json(LTO_SWITCH_CHILD, "LTO", timeout=300)
    assert got == {"outside": True, "exact": False, "exact_positional": False,
                   "exact_allowed": True, "after": True}, got
