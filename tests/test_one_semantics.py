"""Builds and calls that the reference refuses are refused by kernels too, at build time
where the mistake is already visible then (issue 9): a schedule applied to another op,
attributes that make a size undefined."""
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.errors import CallError, ScheduleError

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

TWO_OPS = """
op negate(X: f32[N]) -> Y: f32[N] { Y[i] = -X[i] }
op double(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * 2.0 }
"""


def test_a_schedule_belongs_to_its_op():
    m = tdsl.loads(TWO_OPS)
    with pytest.raises(ScheduleError, match="made for op double, not for negate"):
        m["negate"].lower(schedule=m["double"].schedule())


def test_a_schedule_belongs_to_its_attributes():
    op = tdsl.stdlib["max_pool2d"]
    s = op.schedule(kernel=2, stride=2)
    op.lower(schedule=s)                         # the schedule's own attributes
    op.lower(schedule=s, kernel=2, stride=2)
    with pytest.raises(ScheduleError, match="other attributes"):
        op.lower(schedule=s, kernel=2, stride=1)


@pytest.mark.parametrize("name, attrs, shape", [
    ("max_pool2d", {"kernel": 2, "stride": 0}, (1, 1, 4, 4)),
    ("conv2d", {"stride": 0}, None)])
def test_stride_zero_is_refused_at_build_with_the_reference_error(name, attrs, shape):
    op = tdsl.stdlib[name]
    args = [np.ones(shape, np.float32)] if shape else \
        [np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)]
    with pytest.raises(CallError, match="divides by zero"):
        op.reference(*args, **attrs)
    with pytest.raises(CallError, match="divides by zero"):
        op.lower(**attrs)


BOOLS = """
op to_int(M: bool[N]) -> Y: i32[N] { Y[i] = i32(M[i]) }
op same(M: bool[N], Q: bool[N]) -> Y: bool[N] { Y[i] = M[i] == Q[i] }
"""


@needs_gcc
def test_bool_bytes_other_than_0_and_1_mean_true_everywhere():
    m = tdsl.loads(BOOLS)
    raw = np.array([0, 1, 2, 255, 2, 0, 128, 1] * 4, np.uint8)
    mask, truth = raw.view(np.bool_), raw != 0
    for name, args, want in [("to_int", (mask,), truth.astype(np.int32)),
                             ("same", (mask, np.ones(32, bool)), truth)]:
        np.testing.assert_array_equal(m[name].reference(*args), want)
        np.testing.assert_array_equal(m[name].build()(*args), want)


SUBTRACTED = """
op conv1d_valid(X: f32[N], Wt: f32[K]) -> Y: f32[N - K + 1] {
    Y[i] = sum[k](X[i + k] * Wt[k])
}
op halves(X: f32[N]) -> (Lo: f32[N // 2], Hi: f32[N - N // 2]) {
    Lo[i] = X[i]
    Hi[i] = X[N // 2 + i]
}
"""


@needs_gcc
def test_one_size_binder_for_subtracted_and_halved_sizes():
    """The docs' examples: random inputs (tdsl run/test/tune), kernels, the interpreter and
    the reference all bind N - K + 1 and N - N // 2 (three binders used to disagree)."""
    from tdsl.arrays import random_arguments
    from tdsl.lowering import interp
    m = tdsl.loads(SUBTRACTED)
    for name, sizes in [("conv1d_valid", {"N": 9, "K": 3}), ("halves", {"N": 7})]:
        op = m[name]
        args = random_arguments(op, sizes, {})
        want = op.reference(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = op.build()(*args)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5)
        for g, w in zip(interp.run(op.lower(), args), want):
            np.testing.assert_allclose(g, w, rtol=1e-5)


@needs_gcc
def test_kernel_and_reference_refuse_sizes_with_the_same_words():
    m = tdsl.loads(SUBTRACTED)
    bad = (np.ones(4, np.float32), np.ones(6, np.float32))
    with pytest.raises(CallError) as ref:
        m["conv1d_valid"].reference(*bad)
    with pytest.raises(CallError) as got:
        m["conv1d_valid"].build()(*bad)
    assert "negative" in str(ref.value) and "negative" in str(got.value)


@needs_gcc
@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("kernel, stride, height", [(2, None, 1), (3, 1, 2), (4, 1, 2),
                                                    (3, 2, 2)])
def test_a_pool_input_smaller_than_its_kernel_is_refused(name, kernel, stride, height):
    """At stride 1 the output size ``(IH - kernel) // 1 + 1`` would be 0 for IH = kernel - 1,
    an empty array; the reference and the kernel refuse it in the same words, before any
    output is allocated."""
    op = tdsl.stdlib[name]
    attrs = {"kernel": kernel} if stride is None else {"kernel": kernel, "stride": stride}
    x = np.ones((1, 1, height, 4), np.float32)
    with pytest.raises(CallError, match="smaller than a window") as ref:
        op.reference(x, **attrs)
    with pytest.raises(CallError, match="smaller than a window") as got:
        op.build(**attrs)(x)
    assert str(got.value) == str(ref.value)
    assert op.reference(np.ones((1, 1, kernel, kernel), np.float32), **attrs).shape == \
        (1, 1, 1, 1)                                # a window that just fits is one output


@needs_gcc
def test_an_output_larger_than_memory_is_refused_before_allocation(monkeypatch):
    from tdsl.lowering import sizes
    monkeypatch.setattr(sizes, "memory_bytes", lambda: 1 << 20)
    op = tdsl.loads(TWO_OPS)["double"]
    x = np.ones(1 << 19, np.float32)            # 2 MiB in, 2 MiB out
    with pytest.raises(CallError, match="more than this machine"):
        op.reference(x)
    with pytest.raises(CallError, match="more than this machine"):
        op.build()(x)


@needs_gcc
def test_a_rank_generic_op_builds_without_naming_the_rank():
    """One kernel per argument ranks, built on first call and kept (as a jit does)."""
    kernel = tdsl.stdlib["relu"].build(target="c")
    rng = np.random.default_rng(0)
    for shape in [(5,), (2, 3), (2, 3, 4), (4, 1)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(kernel(x), np.maximum(x, 0))
    assert sorted(kernel.kernels) == [(1,), (2,), (3,)]
    with pytest.raises(CallError, match="takes 1 argument"):
        kernel()


@pytest.mark.parametrize("value", ["4", 4.7, -1, True, None])
def test_sizes_given_by_name_are_checked(value):
    with pytest.raises(CallError, match=r"shapes\['N'\] must be a non-negative integer"):
        tdsl.loads(TWO_OPS)["double"].lower(shapes={"N": value})
