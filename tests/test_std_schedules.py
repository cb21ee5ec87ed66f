"""The standard library's hand-written CPU schedules: each builds, with sizes taken at call
time or fixed at build time, and matches the reference on sizes no tile divides."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl

SIZES = st.sampled_from([1, 2, 3, 5, 7, 13, 17, 33])


def _check(op, arrays, fixed: bool):
    shapes = op.sizes_of(*arrays) if fixed else None
    kernel = op.build(shapes=shapes)
    np.testing.assert_allclose(kernel(*arrays), op.reference(*arrays), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["matmul", "batch_matmul"])
def test_hand_schedule_is_the_default(name):
    op = tdsl.stdlib[name]
    assert "default" in op.schedule_names()
    # the register tile shows in the C: named vector accumulators, no array of them
    source = op.build(shapes=op.sizes_of(*_arrays(name, 2, 24, 8, 40))).source
    assert "tdsl_f32x16 CL_0" in source


def _arrays(name, b, m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    if name == "matmul":
        return (rng.standard_normal((m, k), dtype=np.float32),
                rng.standard_normal((k, n), dtype=np.float32))
    return (rng.standard_normal((b, m, k), dtype=np.float32),
            rng.standard_normal((b, k, n), dtype=np.float32))


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(["matmul", "batch_matmul"]), b=st.sampled_from([1, 3]), m=SIZES,
       k=SIZES, n=SIZES, fixed=st.booleans())
def test_hand_schedules_match_reference(name, b, m, k, n, fixed):
    _check(tdsl.stdlib[name], _arrays(name, b, m, k, n), fixed)


@settings(max_examples=8, deadline=None)
@given(n=SIZES, k=SIZES, m=SIZES, fixed=st.booleans())
def test_dense_hand_schedule_matches_reference(n, k, m, fixed):
    rng = np.random.default_rng(n * 100 + k * 10 + m)
    x, w = rng.standard_normal((n, k), dtype=np.float32), rng.standard_normal((m, k),
                                                                            dtype=np.float32)
    _check(tdsl.stdlib["dense"], (x, w, rng.standard_normal(m, dtype=np.float32)), fixed)


@pytest.mark.parametrize("ti,tj", [(4, 16), (6, 64), (8, 48)])
def test_matmul_knobs(ti, tj):
    op = tdsl.stdlib["matmul"]
    a, b = _arrays("matmul", 1, 29, 11, 70)
    kernel = op.build(config={"ti": ti, "tj": tj})
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_unknown_knob_value_is_a_schedule_error():
    with pytest.raises(tdsl.ScheduleError, match="ti"):
        tdsl.stdlib["matmul"].build(config={"ti": 5})


@settings(max_examples=10, deadline=None)
@given(n=st.sampled_from([1, 2]), c=st.sampled_from([1, 3, 5]), f=st.sampled_from([1, 4, 13]),
       h=st.sampled_from([3, 7, 10]), w=st.sampled_from([3, 9, 17]),
       k=st.sampled_from([1, 3]), stride=st.sampled_from([1, 2]),
       padding=st.sampled_from([0, 1, 2]), dilation=st.sampled_from([1, 2]),
       fixed=st.booleans())
def test_conv2d_hand_schedule_matches_reference(n, c, f, h, w, k, stride, padding, dilation,
                                                fixed):
    op = tdsl.stdlib["conv2d"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((f, c, k, k), dtype=np.float32)
    attrs = dict(stride=stride, padding=padding, dilation=dilation)
    if h + 2 * padding < dilation * (k - 1) + 1 or w + 2 * padding < dilation * (k - 1) + 1:
        return                               # no output position: nothing to compare
    shapes = op.sizes_of(x, wt, **attrs) if fixed else None
    kernel = op.build(shapes=shapes, **attrs)
    np.testing.assert_allclose(kernel(x, wt), op.reference(x, wt, **attrs), rtol=1e-4,
                               atol=1e-4)
