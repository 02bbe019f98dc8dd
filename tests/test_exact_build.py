"""Every kernel of the package is built with the exact-FP32 switches wherever it is compiled
(``_compat._install_exact_build_patch``), not only inside ``exact_fp32``.

The switches are per thread and numba keeps one build per signature, so before this a
package kernel first compiled outside the block (a user's direct launch of a module-level
dispatcher, ``inspect_asm`` / ``inspect_sass`` of a signature not built yet) cached a build
with ``a*b + c`` contracted, and every later launch ran it.

- The rule's reach (simulator or not): every registered kernel's Python function, and every
  kernel object a package module defines, counts as the package's (``builds_exact``); a
  kernel built from generated source keeps its module's name (the batched combine's did
  not).
- The build (no GPU; the dispatcher's own compile and link, device lookups stubbed): a
  kernel of the package compiled outside any switch has LTO off (so numba's assembly dump
  works for it), is linked from PTX with ``mul.rn`` + ``add.rn``, and its SASS (nvdisasm,
  sm_90a) has FMUL + FADD; its PTX for another capability, generated later and lazily (as
  ``inspect_asm`` does), keeps the two roundings too; the
  same source outside the package gets numba's default (LTO link, one FFMA: the control);
  a real registered kernel (frozen's split kernel) built outside the block has the exact
  build's PTX operations, where numba's default leaves its multiplies and adds without a
  rounding mode, free to be fused.
"""
import importlib
import pkgutil
import textwrap

import dflash2_numba
from dflash2_numba import _registry
from dflash2_numba._compat import builds_exact
from tests.missing_tools import missing
from tests.nvvm_child import OFFLINE_BUILD_PREAMBLE, child_json


def test_every_registered_kernel_is_the_packages():
    specs = list(_registry.all_kernel_specs())
    assert specs
    outside = [(family, variant, spec.name, spec.pyfunc.__module__)
               for family, variant, spec in specs if not builds_exact(spec.pyfunc)]
    assert outside == []


def _kernel_function(obj):
    """The Python function of a ``cuda.jit`` object (a dispatcher, or the simulator's
    kernel), else None."""
    kind = type(obj).__name__
    if kind == "FakeCUDAKernel":
        return getattr(obj, "fn", None)
    if kind.endswith("Dispatcher"):
        return getattr(obj, "py_func", None)
    return None


def test_every_kernel_object_in_the_package_is_the_packages():
    found, outside = 0, []
    for info in pkgutil.walk_packages(dflash2_numba.__path__, "dflash2_numba."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for attr, obj in vars(module).items():
            fn = _kernel_function(obj)
            if fn is None:
                continue
            found += 1
            if not builds_exact(fn):
                outside.append((info.name, attr, getattr(fn, "__module__", None)))
    assert found > 20, found
    assert outside == []


def test_the_rule_is_the_module_name():
    def f():
        pass

    for module, expected in (("dflash2_numba", True), ("dflash2_numba.attention.tiled", True),
                             ("dflash2_numba_extra", False), ("bench.rec_loop_micro", False),
                             (None, False), ("__main__", False)):
        f.__module__ = module
        assert builds_exact(f) is expected, module


BUILD_CHILD = OFFLINE_BUILD_PREAMBLE + textwrap.dedent(r"""
    from numba import cuda, types
    from dflash2_numba import _registry
    from dflash2_numba._compat import compile_ptx_cc, target_cc
    from bench.fma_contraction_probe import a_times_b_plus_c

    def ops(ptx):
        return {op: ptx.count(op) for op in OPS}

    def copy_in(fn, module):
        new = pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__,
                                   fn.__defaults__, fn.__closure__)
        new.__module__ = module
        return new

    from numba.cuda.core import config as numba_config

    found = {"nvdisasm": nvdisasm}
    sig = (types.float32[::1],) * 4
    for how, module in (("package", "dflash2_numba.exact_build_check"),
                        ("outside", a_times_b_plus_c.__module__)):
        kernel = cuda.jit(copy_in(a_times_b_plus_c, module))
        # the package's link runs with numba's assembly dump on: an LTO-linked kernel's dump
        # asks for its PTX after LTO inside the cubin link, which a link from PTX cannot give
        numba_config.DUMP_ASSEMBLY = how == "package"
        with target_cc(CC):                      # no exact_fp32 here
            built = kernel.compile(sig)
            cubin = built.library.get_cubin(cc=CC + ("a",))
        numba_config.DUMP_ASSEMBLY = False
        link = links[-1]
        found[how] = {"link": {"lto": link["lto"], "objects": link["objects"]},
                      "sass": sass_ops(cubin),
                      "ptx_other_cc": ops(built.library.get_asm_str(cc=(8, 0)))}

    # a real registered kernel (frozen's split kernel), built outside the block and by the
    # PTX report's exact compile, at the same capability
    spec = next(s for f, v, s in _registry.all_kernel_specs()
                if f == "attention" and v == "frozen" and "split" in s.name)
    rsig = spec.signatures[0]
    with target_cc(CC):
        real = cuda.jit(spec.pyfunc).compile(rsig)
        real_ptx = real.library.get_asm_str(cc=CC)
        real_outside = cuda.jit(copy_in(spec.pyfunc, "outside_the_package")).compile(rsig)
        outside_ptx = real_outside.library.get_asm_str(cc=CC)
    found["real"] = {"name": spec.name, "built": ops(real_ptx),
                     "exact": ops(compile_ptx_cc(spec.pyfunc, rsig, cc=CC)[0]),
                     "outside": ops(outside_ptx)}
    print("BUILD" + json.dumps(found))
""")


def test_a_package_kernel_built_outside_the_block_keeps_two_roundings():
    found = child_json(BUILD_CHILD, "BUILD", timeout=900)
    package, outside, real = found["package"], found["outside"], found["real"]
    assert package["link"] == {"lto": False, "objects": ["ptx"]}, found
    assert package["ptx_other_cc"]["mul.rn.f32"] == 1, found
    assert package["ptx_other_cc"]["add.rn.f32"] == 1, found
    assert package["ptx_other_cc"]["fma.rn.f32"] == 0, found
    assert outside["link"]["lto"] is True, found
    assert outside["ptx_other_cc"]["fma.rn.f32"] == 1, found
    # the real kernel: the exact build's operations (each multiply and add with its own
    # rounding, which ptxas never contracts); numba's default writes the same steps without
    # one (``mul.f32`` / ``add.f32``, which ptxas and the LTO link may fuse)
    assert real["built"] == real["exact"], found
    assert real["built"]["mul.rn.f32"] > 0 and real["built"]["add.rn.f32"] > 0, found
    assert real["built"]["mul.f32"] == real["built"]["add.f32"] == 0, found
    assert real["outside"]["mul.f32"] == real["built"]["mul.rn.f32"], found
    assert real["outside"]["add.f32"] == real["built"]["add.rn.f32"], found
    if found["nvdisasm"] is None:
        missing("no nvdisasm (the cuda12 extra installs nvidia-cuda-nvdisasm): the PTX passed, the SASS is unchecked")
    assert package["sass"] == {"FFMA": 0, "FMUL": 1, "FADD": 1}, found
    assert outside["sass"]["FFMA"] == 1 and outside["sass"]["FMUL"] == 0, found
