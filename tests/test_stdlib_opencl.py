"""Every standard-library op, built for OpenCL with its GPU schedule (the automatic one where
the op has no `for gpu`/`for opencl` block), run on the OpenCL driver here (PoCL in CI),
matches its numpy reference on awkward sizes (primes, 1, sizes that no tile divides).

PoCL compiles each kernel program once per process (and caches it on disk), so the examples
are few and the sizes stay symbolic: one driver build per op and rank."""
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tdsl
import tdsl.testing as tt
from tdsl.emit_opencl import unavailable_reason

from test_stdlib_c import ATTRS, TOLERANCE

pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=f"OpenCL: {unavailable_reason()}")


@pytest.mark.parametrize("name", sorted(tdsl.stdlib))
def test_std_op_built_for_opencl_matches_reference(name):
    op = tdsl.stdlib[name]
    attrs = ATTRS.get(name, {})

    @settings(max_examples=3, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(tt.cases(op, attrs, max_size=9, schedules_too=False))
    def check(case):
        tt.check_case(op, case, attrs, *TOLERANCE.get(name, ()), target="opencl")

    check()


def test_opencl_matmul_at_sizes_no_tile_divides():
    op = tdsl.stdlib["matmul"]
    kernel = op.build(target="opencl")
    rng = np.random.default_rng(0)
    for m, k, n in [(1, 1, 1), (67, 13, 131), (128, 64, 96)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def _random_gpu_schedules(name, examples):
    op = tdsl.stdlib[name]
    attrs = ATTRS.get(name, {})

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(tt.cases(op, attrs, max_size=9, target="opencl"))
    def check(case):
        tt.check_case(op, case, attrs, *TOLERANCE.get(name, ()), target="opencl")

    check()


@pytest.mark.parametrize("name", ["matmul", "softmax", "conv2d", "transpose"])
def test_random_gpu_schedules_match_reference_on_opencl(name):
    """Random tiles and thread bindings (tdsl.testing.gpu_schedules) never change results.
    Each example is a new kernel for the driver to compile: few of them by default."""
    _random_gpu_schedules(name, 2)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(tdsl.stdlib))
def test_random_gpu_schedules_of_every_std_op_on_opencl(name):
    _random_gpu_schedules(name, 6)


# ---------------------------------------------------------------------------- hand GPU templates

# the standard library's hand-written GPU schedules with shared-memory tiles or cross-thread
# reductions (matmul's family is covered above and in test_random_gpu_schedules...)
GPU_TEMPLATES = ["conv2d", "depthwise_conv2d", "max_pool2d", "avg_pool2d",
                 "global_avg_pool2d", "softmax", "layer_norm"]


@st.composite
def _template_cases(draw, op, attrs):
    """Awkward sizes and inputs, and the op's GPU block at a random configuration of its
    knobs (tiles, threads per block, register tiles, tap blocks)."""
    case = draw(tt.cases(op, attrs, max_size=9, schedules_too=False, target="opencl"))
    blocks = op.schedule_names("opencl")
    sched, config, steps = draw(tt.block_schedules(op, blocks, "opencl", case.ranks,
                                                   case.sizes, attrs))
    return dataclasses.replace(case, schedule=sched, config=config, steps=steps)


def _template_knobs(name, examples):
    op = tdsl.stdlib[name]
    attrs = ATTRS.get(name, {})

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(_template_cases(op, attrs))
    def check(case):
        tt.check_case(op, case, attrs, *TOLERANCE.get(name, ()), target="opencl")

    check()


@pytest.mark.parametrize("name", GPU_TEMPLATES)
def test_gpu_template_at_random_knobs_matches_reference_on_opencl(name):
    """Each example is a new kernel for the driver to compile: one by default."""
    _template_knobs(name, 1)


@pytest.mark.slow
@pytest.mark.parametrize("name", GPU_TEMPLATES)
def test_gpu_template_at_many_random_knobs_matches_reference_on_opencl(name):
    _template_knobs(name, 8)


@pytest.mark.parametrize("name", ["conv2d", "depthwise_conv2d"])
def test_opencl_convolutions_at_sizes_no_tile_divides(name):
    """Larger than one block's tile, in every dimension, with tails: one kernel (sizes are
    symbolic) per set of attributes, run at several shapes; strides, dilations and kernels
    larger than a tap block (5x5 over 3x3 tap tiles)."""
    op = tdsl.stdlib[name]
    rng = np.random.default_rng(5)
    for attrs, shapes in [
            ({"padding": 1}, [(1, 11, 37, 45, 70, 3), (2, 3, 9, 70, 33, 3)]),
            ({"padding": 2, "stride": 2, "dilation": 2}, [(1, 9, 29, 23, 35, 5)])]:
        kernel = op.build(target="opencl", **attrs)
        for n, c, h, w, f, k in shapes:
            x = rng.standard_normal((n, c, h, w), dtype=np.float32)
            wt = rng.standard_normal((f, c, k, k) if name == "conv2d" else (c, 1, k, k),
                                     dtype=np.float32)
            np.testing.assert_allclose(kernel(x, wt), op.reference(x, wt, **attrs),
                                       rtol=1e-4, atol=1e-4)


def _chatty(real, fail=False):
    """A DeviceKernel that prints on fd 2 as PoCL's clang does while it compiles."""
    import os

    def make(*args, **kw):
        os.write(2, b"1 warning generated.\n")
        if fail:
            from tdsl.errors import BuildError
            raise BuildError("the OpenCL driver rejected the kernels of relu:\n(log)")
        return real(*args, **kw)
    return make


def test_driver_output_is_shown_only_on_failure_or_asked_for(monkeypatch, capfd):
    """Issue 28: "1 warning generated." leaked to the terminal at every OpenCL build."""
    import tdsl.emit_opencl.build as ocl
    import numpy as np
    op = tdsl.loads("op relu1(X: f32[N]) -> (Y: f32[N]) {\n    Y[i] = max(X[i], 0.0)\n}")["relu1"]
    monkeypatch.setattr(ocl, "DeviceKernel", _chatty(ocl.DeviceKernel))
    monkeypatch.delenv(ocl.LOG_ENV, raising=False)
    kernel = op.build(target="opencl")
    x = np.arange(-3, 3, dtype=np.float32)
    np.testing.assert_array_equal(kernel(x), np.maximum(x, 0))
    assert "warning generated" not in capfd.readouterr().err
    monkeypatch.setenv(ocl.LOG_ENV, "1")
    op.build(target="opencl", shapes={"N": 7})
    assert "1 warning generated." in capfd.readouterr().err
    monkeypatch.delenv(ocl.LOG_ENV)
    monkeypatch.setattr(ocl, "DeviceKernel", _chatty(ocl.DeviceKernel, fail=True))
    with pytest.raises(tdsl.TdslError, match="(?s)rejected.*the driver printed.*1 warning"):
        op.build(target="opencl", shapes={"N": 5})
    assert "warning generated" not in capfd.readouterr().err
