"""Every standard-library op's reference (``tdsl.stdlib[name].reference``) against an
independent numpy implementation (`numpy_ref`), on awkward shapes chosen by hypothesis,
plus the errors a caller gets for bad arguments and attributes.

Inputs are float32 from a numpy RNG seeded by hypothesis (shapes and seeds shrink; arrays of
up to 13**4 elements would be slow to draw element by element). `numpy_ref` computes in
float64 and rounds once, so the tolerances below bound the float32 error of tdsl's reference.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import numpy_ref as ref
import quant_reference
import tdsl

STD = tdsl.stdlib
F32 = np.float32
RTOL = ATOL = 1e-5
HYP = settings(max_examples=25, deadline=None)

# Sizes: ones, primes and everything else up to 13.
dims = st.one_of(st.sampled_from([1, 2, 3, 5, 7, 11, 13]), st.integers(1, 13))
small = st.integers(1, 4)           # batch / channel counts, to keep the runtime down
seeds = st.integers(0, 2**32 - 1)


def rand(rng, shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(F32)


def call(name, *arrays, **attrs):
    """The tdsl reference, with its inputs checked to be left untouched."""
    before = [a.copy() for a in arrays]
    out = STD[name].reference(*arrays, **attrs)
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(a, b, err_msg=f"{name} modified an argument")
    return out


def check(actual, expected, rtol=RTOL, atol=ATOL):
    assert isinstance(actual, np.ndarray), type(actual)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert expected.dtype == np.float32 or rtol == atol == 0, "integers compare exactly"
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def both(name, *arrays, rtol=RTOL, atol=ATOL, **attrs):
    """Run tdsl and numpy_ref on the same inputs and compare."""
    actual = call(name, *arrays, **attrs)
    expected = getattr(ref, name)(*arrays, **attrs)
    check(actual, expected, rtol, atol)
    return actual


def given_attrs(**maybe):
    """The attributes that were drawn (None means: leave it to the op's default)."""
    return {k: v for k, v in maybe.items() if v is not None}


# ------------------------------------------------------------------------------ coverage

TESTED = {
    "add", "sub", "mul", "div", "relu", "sigmoid", "tanh", "exp", "gelu", "leaky_relu",
    "clip", "bias_add", "matmul", "batch_matmul", "dense", "softmax", "log_softmax",
    "layer_norm", "batch_norm", "scale_shift", "conv2d", "depthwise_conv2d", "max_pool2d", "avg_pool2d",
    "global_avg_pool2d", "transpose", "reduce_sum", "reduce_max", "reduce_mean", "pad2d",
    "flatten", "concat", "to_nchwc", "from_nchwc", "pack_conv_weights", "pack_channels",
    "pack_depthwise_weights", "conv2d_nchwc", "conv2d_nchwc_valid", "depthwise_conv2d_nchwc",
    "bias_add_nchwc", "batch_norm_nchwc", "scale_shift_nchwc", "max_pool2d_nchwc", "global_avg_pool2d_nchwc",
    "subsample_nchwc",
    "pack_dense_weights", "dense_packed", "winograd_weights", "conv2d_winograd_nchwc",
    "winograd4_weights", "conv2d_winograd4_nchwc", "qlinear_conv2d", "qlinear_conv2d_nchwc",
    "pack_qconv_weights", "pack_channels_i32", "to_nchwc_u8", "from_nchwc_u8",
    "max_pool2d_u8", "max_pool2d_nchwc_u8", "conv2d_i16", "conv2d_nchwc_i16",
    "pack_conv_weights_i16", "to_nchwc_i16", "from_nchwc_i16", "to_nchwc_i32", "from_nchwc_i32",
}


def test_every_std_op_has_a_numpy_reference_and_a_test():
    # the int8 ops have their own independent reference and tests (test_quant.py)
    ops = set(STD) - set(quant_reference.OPS)
    assert ops - set(ref.ALL) == set(), "std ops without a numpy_ref implementation"
    assert ops - TESTED == set(), "std ops without a test here"
    assert TESTED - ops == set(), "tests for ops that std no longer has"


# --------------------------------------------------------------------------- elementwise

def elementwise_values(rng, shape, lo, hi):
    """Uniform values plus a sprinkling of awkward ones (signed zeros, the range ends,
    tiny and subnormal values, values near 0 on both sides)."""
    x = rand(rng, shape, lo, hi)
    if x.size:
        special = np.array([0.0, -0.0, lo, hi, 1e-7, -1e-7, 1e-40, -1e-40, 0.5, -0.5],
                           dtype=F32)
        special = special[(special >= lo) & (special <= hi)]
        k = rng.integers(0, x.size + 1)
        idx = rng.choice(x.size, size=min(k, x.size), replace=False)
        x.flat[idx] = rng.choice(special, size=len(idx))
    return x


# (lo, hi) input range per op: exp stays below float32 overflow (88.7).
UNARY = {"relu": (-100, 100), "sigmoid": (-30, 30), "tanh": (-10, 10), "exp": (-80, 80),
         "gelu": (-8, 8)}
BINARY = ["add", "sub", "mul", "div"]
RANKS = [1, 2, 3, 4]


def shapes(rank):
    # At rank 4, a 13**4 array is fine for numpy but keep some headroom on the runtime.
    d = dims if rank < 4 else st.one_of(st.sampled_from([1, 2, 3, 5, 7]), st.integers(1, 9))
    return st.lists(d, min_size=rank, max_size=rank).map(tuple)


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("name", sorted(UNARY))
@HYP
@given(data=st.data(), seed=seeds)
def test_unary(name, rank, data, seed):
    shape = data.draw(shapes(rank), label="shape")
    rng = np.random.default_rng(seed)
    x = elementwise_values(rng, shape, *UNARY[name])
    both(name, x)


@pytest.mark.parametrize("rank", RANKS)
@pytest.mark.parametrize("name", BINARY)
@HYP
@given(data=st.data(), seed=seeds)
def test_binary(name, rank, data, seed):
    shape = data.draw(shapes(rank), label="shape")
    rng = np.random.default_rng(seed)
    x = elementwise_values(rng, shape, -1e3, 1e3)
    y = elementwise_values(rng, shape, -1e3, 1e3)
    if name == "div":
        # IEEE division by zero (inf, nan) is what both sides compute, but it says nothing
        # about the op: keep denominators away from 0.
        y = np.where(np.abs(y) < 1e-3, F32(1.5), y).astype(F32)
    both(name, x, y)


@pytest.mark.parametrize("rank", RANKS)
@HYP
@given(data=st.data(), seed=seeds,
       alpha=st.none() | st.floats(-2, 2, allow_nan=False, width=32))
def test_leaky_relu(rank, data, seed, alpha):
    shape = data.draw(shapes(rank), label="shape")
    x = elementwise_values(np.random.default_rng(seed), shape, -50, 50)
    both("leaky_relu", x, **given_attrs(alpha=alpha))


bounds = st.none() | st.floats(-5, 5, allow_nan=False, width=32)


@pytest.mark.parametrize("rank", RANKS)
@HYP
@given(data=st.data(), seed=seeds, lo=bounds, hi=bounds)
def test_clip(rank, data, seed, lo, hi):
    # lo > hi is allowed and gives hi everywhere (ONNX Clip, torch.clamp).
    shape = data.draw(shapes(rank), label="shape")
    x = elementwise_values(np.random.default_rng(seed), shape, -10, 10)
    both("clip", x, **given_attrs(lo=lo, hi=hi))


@pytest.mark.parametrize("rank", RANKS)
def test_clip_defaults_are_infinite(rank):
    x = np.array([-np.inf, -3e38, -1.0, 0.0, 1.0, 3e38, np.inf], F32).reshape(
        (7,) + (1,) * (rank - 1))
    out = call("clip", x)
    check(out, ref.clip(x))
    np.testing.assert_array_equal(out, x)


def test_elementwise_known_values():
    """A few exact values, independent of numpy_ref."""
    x = np.array([-2.0, -0.0, 0.0, 1.0, 3.0], F32)
    np.testing.assert_array_equal(call("relu", x), [0, 0, 0, 1, 3])
    np.testing.assert_allclose(call("leaky_relu", x, alpha=0.5), [-1, 0, 0, 1, 3])
    np.testing.assert_allclose(call("clip", x, lo=-1.0, hi=2.0), [-1, 0, 0, 1, 2])
    np.testing.assert_allclose(call("sigmoid", x)[1:3], [0.5, 0.5])
    # gelu(x) = x * Phi(x); Phi(1) = 0.8413447460685429
    np.testing.assert_allclose(call("gelu", x)[3], 0.8413447460685429, rtol=1e-6)
    np.testing.assert_allclose(call("gelu", x)[0], -2 * 0.022750131948179195, rtol=1e-5)


@HYP
@given(n=small, c=dims, h=dims, w=dims, seed=seeds)
def test_bias_add(n, c, h, w, seed):
    rng = np.random.default_rng(seed)
    both("bias_add", rand(rng, (n, c, h, w)), rand(rng, (c,)))


# -------------------------------------------------------------------------------- linalg

@HYP
@given(m=dims, k=dims, n=dims, seed=seeds)
def test_matmul(m, k, n, seed):
    rng = np.random.default_rng(seed)
    both("matmul", rand(rng, (m, k)), rand(rng, (k, n)))


@HYP
@given(b=small, m=dims, k=dims, n=dims, seed=seeds)
def test_batch_matmul(b, m, k, n, seed):
    rng = np.random.default_rng(seed)
    both("batch_matmul", rand(rng, (b, m, k)), rand(rng, (b, k, n)))


@HYP
@given(n=dims, k=dims, m=dims, seed=seeds)
def test_dense(n, k, m, seed):
    rng = np.random.default_rng(seed)
    both("dense", rand(rng, (n, k)), rand(rng, (m, k)), rand(rng, (m,)))


def test_dense_is_x_times_w_transposed():
    # Distinguishes W[out, in] from W[in, out] on a case where both shapes are legal.
    x = np.array([[1, 2]], F32)
    w = np.array([[1, 0], [0, 1], [1, 1]], F32)        # 3 outputs, 2 inputs
    b = np.array([10, 20, 30], F32)
    np.testing.assert_array_equal(call("dense", x, w, b), [[11, 22, 33]])


def test_matmul_256():
    """A big product must evaluate (correctness only: timings belong to benchmarks/)."""
    rng = np.random.default_rng(0)
    a, b = rand(rng, (256, 256), -1, 1), rand(rng, (256, 256), -1, 1)
    # 256-term float32 sums: the rounding error grows with K (and numpy may sum in any
    # order), so allow 1e-4 rather than 1e-5.
    both("matmul", a, b, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------- norm

@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@HYP
@given(n=dims, d=dims, seed=seeds, scale=st.sampled_from([1.0, 10.0, 100.0]),
       offset=st.sampled_from([0.0, 1000.0, -1000.0]))
def test_softmaxes(name, n, d, seed, scale, offset):
    # Large scales and offsets: a softmax that does not subtract the row maximum overflows
    # (exp(1000) is inf in float32) and gives nan.
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, d)) * scale + offset).astype(F32)
    out = both(name, x)
    assert np.all(np.isfinite(out))
    if name == "softmax":
        np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)


@HYP
@given(n=dims, d=dims, seed=seeds, eps=st.none() | st.sampled_from([1e-5, 1e-3, 0.1, 1.0]),
       offset=st.floats(-3, 3))
def test_layer_norm(n, d, seed, eps, offset):
    rng = np.random.default_rng(seed)
    x = (rand(rng, (n, d)) + F32(offset)).astype(F32)
    gamma = rand(rng, (d,))
    # Normalising is ill-conditioned when a row's spread is small next to its values: the
    # float32 mean is off by ~d ulps of max|x|, and (x - mean) is then divided by
    # sqrt(var + eps). Widen atol by that amount (it is ~0 for well-spread rows; it matters
    # for e.g. d = 2 with two nearly equal values).
    x64 = x.astype(np.float64)
    std = np.sqrt(x64.var(axis=1) + (1e-5 if eps is None else eps))
    cond = np.max(np.abs(x64).max(axis=1) / std) * np.abs(gamma).max()
    atol = ATOL + 4 * d * 2.0**-24 * cond
    both("layer_norm", x, gamma, rand(rng, (d,)), atol=atol, **given_attrs(eps=eps))


def test_layer_norm_constant_rows_give_beta():
    # Zero variance: eps inside the square root keeps it finite, (x - mu) is 0.
    x = np.full((3, 5), 7.0, F32)
    gamma, beta = np.arange(5, dtype=F32), np.linspace(-1, 1, 5).astype(F32)
    np.testing.assert_allclose(call("layer_norm", x, gamma, beta), np.tile(beta, (3, 1)),
                               atol=1e-6)


@HYP
@given(n=small, c=dims, h=dims, w=dims, seed=seeds,
       eps=st.none() | st.sampled_from([1e-5, 1e-3, 0.1]))
def test_batch_norm(n, c, h, w, seed, eps):
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, c, h, w), -3, 3)
    gamma, beta, mean = rand(rng, (c,)), rand(rng, (c,)), rand(rng, (c,))
    var = rand(rng, (c,), 0.05, 3.0)
    both("batch_norm", x, gamma, beta, mean, var, **given_attrs(eps=eps))
    both("scale_shift", x, gamma, beta)


# ------------------------------------------------------------------------------ conv/pool

conv_attrs = st.fixed_dictionaries({
    "stride": st.none() | st.integers(1, 3),
    "padding": st.none() | st.integers(0, 2),
    "dilation": st.none() | st.integers(1, 2),
})


def conv_input_size(size, k, attrs):
    """The smallest input size with a non-empty output is d*(k-1)+1-2p; raise to that."""
    need = attrs.get("dilation", 1) * (k - 1) + 1 - 2 * attrs.get("padding", 0)
    return max(size, need)


@HYP
@given(n=st.integers(1, 2), c=small, f=small, h=dims, w=dims, kh=st.integers(1, 3),
       kw=st.integers(1, 3), attrs=conv_attrs, seed=seeds)
def test_conv2d(n, c, f, h, w, kh, kw, attrs, seed):
    attrs = given_attrs(**attrs)
    h, w = conv_input_size(h, kh, attrs), conv_input_size(w, kw, attrs)
    rng = np.random.default_rng(seed)
    both("conv2d", rand(rng, (n, c, h, w)), rand(rng, (f, c, kh, kw)), **attrs)


@HYP
@given(n=st.integers(1, 2), c=small, h=dims, w=dims, kh=st.integers(1, 3),
       kw=st.integers(1, 3), attrs=conv_attrs, seed=seeds)
def test_depthwise_conv2d(n, c, h, w, kh, kw, attrs, seed):
    attrs = given_attrs(**attrs)
    h, w = conv_input_size(h, kh, attrs), conv_input_size(w, kw, attrs)
    rng = np.random.default_rng(seed)
    both("depthwise_conv2d", rand(rng, (n, c, h, w)), rand(rng, (c, 1, kh, kw)), **attrs)


def test_conv2d_known_value():
    # All-ones 3x3 input and kernel, padding 1: each output counts its in-bounds neighbours.
    x = np.ones((1, 1, 3, 3), F32)
    wt = np.ones((1, 1, 3, 3), F32)
    np.testing.assert_array_equal(call("conv2d", x, wt, padding=1)[0, 0],
                                  [[4, 6, 4], [6, 9, 6], [4, 6, 4]])


def test_conv2d_resnet_layer():
    """1x64x56x56, 64 3x3 filters, padding 1: must evaluate (correctness only)."""
    rng = np.random.default_rng(1)
    x = rand(rng, (1, 64, 56, 56), -1, 1)
    wt = rand(rng, (64, 64, 3, 3), -0.1, 0.1)
    # 576-term float32 sums, summed in whatever order einsum picks: 1e-4, not 1e-5.
    out = both("conv2d", x, wt, padding=1, rtol=1e-4, atol=1e-4)
    assert out.shape == (1, 64, 56, 56)


@st.composite
def pool_case(draw):
    k = draw(st.integers(1, 3))
    stride = draw(st.none() | st.integers(1, 3))
    padding = draw(st.none() | st.integers(0, k - 1))
    p = padding or 0
    h = max(draw(dims), k - 2 * p)          # at least one output row / column
    w = max(draw(dims), k - 2 * p)
    n, c = draw(st.integers(1, 2)), draw(small)
    return (n, c, h, w), given_attrs(kernel=k, stride=stride, padding=padding)


@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
@HYP
@given(case=pool_case(), seed=seeds)
def test_pools(name, case, seed):
    shape, attrs = case
    x = rand(np.random.default_rng(seed), shape, -5, -1)   # all negative: padding must
    out = both(name, x, **attrs)                            # not win a max (0 would)
    assert np.all(np.isfinite(out))


def test_pool_stride_defaults_to_kernel():
    x = np.arange(36, dtype=F32).reshape(1, 1, 6, 6)
    np.testing.assert_array_equal(call("max_pool2d", x, kernel=2)[0, 0],
                                  [[7, 9, 11], [19, 21, 23], [31, 33, 35]])
    assert call("avg_pool2d", x, kernel=3).shape == (1, 1, 2, 2)


def test_avg_pool_excludes_padding_from_the_count():
    x = np.ones((1, 1, 2, 2), F32)
    # Every window holds only ones: with count_include_pad = 0 every average is exactly 1.
    np.testing.assert_array_equal(call("avg_pool2d", x, kernel=3, stride=1, padding=1),
                                  np.ones((1, 1, 2, 2), F32))


# ------------------------------------------------------------- blocked layout (NCHW[x]c)

@HYP
@given(n=st.integers(1, 2), c=dims, h=st.integers(1, 5), w=st.integers(1, 5),
       block=st.integers(1, 4), seed=seeds)
def test_layout_transforms(n, c, h, w, block, seed):
    """Blocking keeps the first C // block * block channels; unblocking inverts it."""
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, c, h, w))
    xb = both("to_nchwc", x, block=block)
    assert xb.shape == (n, c // block, h, w, block)
    np.testing.assert_array_equal(call("from_nchwc", xb), x[:, :c // block * block])
    both("pack_channels", rand(rng, (c,)), block=block)


@HYP
@given(n=st.integers(1, 2), cq=st.integers(1, 2), ci=st.sampled_from([4, 8]),
       fb=st.integers(1, 2), fi=st.integers(1, 3), k=st.integers(1, 3),
       stride=st.integers(1, 2), padding=st.integers(0, 2), dilation=st.integers(1, 2),
       hw=st.integers(3, 6), zps=st.tuples(st.integers(0, 255), st.integers(0, 255)),
       clamp=st.tuples(st.integers(0, 100), st.integers(100, 255)), seed=seeds)
def test_int8_convolutions_and_their_layouts(n, cq, ci, fb, fi, k, stride, padding, dilation,
                                             hw, zps, clamp, seed):
    """qlinear_conv2d (plain and blocked) and the u8 layout and packing ops: tdsl's
    semantics against numpy, exactly."""
    rng = np.random.default_rng(seed)
    c, f = cq * ci, fb * fi
    hw = max(hw, dilation * (k - 1) + 1)
    x = rng.integers(0, 256, (n, c, hw, hw)).astype(np.uint8)
    w = rng.integers(-128, 128, (f, c, k, k)).astype(np.int8)
    b = rng.integers(-30000, 30000, f).astype(np.int32)
    s = rng.uniform(1e-4, 3e-3, f).astype(F32)
    attrs = dict(stride=stride, padding=padding, dilation=dilation, x_zp=zps[0], y_zp=zps[1],
                 lo=clamp[0], hi=clamp[1])
    exact = dict(rtol=0, atol=0)
    both("qlinear_conv2d", x, w, b, s, **exact, **attrs)
    xb = both("to_nchwc_u8", x, block=ci, **exact)
    np.testing.assert_array_equal(call("from_nchwc_u8", xb), x)
    wp = both("pack_qconv_weights", w, in_block=ci, out_block=fi, **exact)
    bb = both("pack_channels_i32", b, block=fi, **exact)
    sb = both("pack_channels", s, block=fi)
    both("qlinear_conv2d_nchwc", xb, wp, bb, sb, **exact, **attrs)


@HYP
@given(n=st.integers(1, 2), cq=st.integers(1, 2), ci=st.sampled_from([2, 4, 8]),
       fb=st.integers(1, 2), fi=st.integers(1, 3), k=st.integers(1, 3),
       stride=st.integers(1, 3), dilation=st.integers(1, 2), hw=st.integers(3, 7),
       seed=seeds)
def test_i16_convolutions_and_their_layouts(n, cq, ci, fb, fi, k, stride, dilation, hw, seed):
    """conv2d_i16 (plain and blocked: an int8 convolution's centred values, the importer's
    route without VNNI) and the i16 / i32 layout and packing ops, exactly; values over the
    whole of [-255, 255], the centred range."""
    rng = np.random.default_rng(seed)
    c, f = cq * ci, fb * fi
    hw = max(hw, dilation * (k - 1) + 1)
    x = rng.integers(-255, 256, (n, c, hw, hw)).astype(np.int16)
    w = rng.integers(-255, 256, (f, c, k, k)).astype(np.int16)
    exact = dict(rtol=0, atol=0)
    y = both("conv2d_i16", x, w, stride=stride, dilation=dilation, **exact)
    xb = both("to_nchwc_i16", x, block=ci, **exact)
    np.testing.assert_array_equal(call("from_nchwc_i16", xb), x)
    wp = both("pack_conv_weights_i16", w, in_block=ci, out_block=fi, **exact)
    yb = both("conv2d_nchwc_i16", xb, wp, stride=stride, dilation=dilation, **exact)
    np.testing.assert_array_equal(call("from_nchwc_i32", yb), y)
    np.testing.assert_array_equal(both("to_nchwc_i32", y, block=fi, **exact), yb)


@HYP
@given(f=small, c=small, kh=st.integers(1, 3), kw=st.integers(1, 3), ib=st.integers(1, 3),
       ob=st.integers(1, 3), seed=seeds)
def test_weight_packing(f, c, kh, kw, ib, ob, seed):
    rng = np.random.default_rng(seed)
    both("pack_conv_weights", rand(rng, (f, c, kh, kw)), in_block=ib, out_block=ob)
    both("pack_depthwise_weights", rand(rng, (c, 1, kh, kw)), block=ib)


@HYP
@given(n=small, m=dims, k=dims, block=st.integers(1, 5), seed=seeds)
def test_dense_on_packed_weights(n, m, k, block, seed):
    rng = np.random.default_rng(seed)
    x, w, b = rand(rng, (n, k)), rand(rng, (m, k)), rand(rng, (m,))
    wp = both("pack_dense_weights", w, block=block)
    both("dense_packed", x, wp, b)
    check(call("dense_packed", x, wp, b), call("dense", x, w, b))

@HYP
@given(n=st.integers(1, 2), cb=st.integers(1, 3), ci=st.integers(1, 4), fb=st.integers(1, 3),
       fi=st.integers(1, 4), h=dims, w=dims, kh=st.integers(1, 3), kw=st.integers(1, 3),
       attrs=conv_attrs, seed=seeds)
def test_blocked_convolutions(n, cb, ci, fb, fi, h, w, kh, kw, attrs, seed):
    attrs = given_attrs(**attrs)
    h, w = conv_input_size(h, kh, attrs), conv_input_size(w, kw, attrs)
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, cb, h, w, ci))
    both("conv2d_nchwc", x, rand(rng, (fb, cb, kh, kw, ci, fi)), **attrs)
    both("depthwise_conv2d_nchwc", x, rand(rng, (cb, kh, kw, ci)), **attrs)
    attrs.pop("padding", None)
    h, w = conv_input_size(h, kh, attrs), conv_input_size(w, kw, attrs)
    x = rand(rng, (n, cb, h, w, ci))
    both("conv2d_nchwc_valid", x, rand(rng, (fb, cb, kh, kw, ci, fi)), **attrs)


@pytest.mark.parametrize("weights, conv, relative", [
    ("winograd_weights", "conv2d_winograd_nchwc", False),
    ("winograd4_weights", "conv2d_winograd4_nchwc", True)])
@HYP
@given(n=st.integers(1, 2), cb=st.integers(1, 3), ci=st.integers(1, 4), fb=st.integers(1, 3),
       fi=st.integers(1, 4), h=dims, w=dims, seed=seeds)
def test_winograd_convolution(weights, conv, relative, n, cb, ci, fb, fi, h, w, seed):
    # odd sizes too: the last tile's last rows or columns are computed and not stored.
    # The same numbers as the direct sum up to the transforms' rounding: F(4x4)'s is about
    # 10x F(2x2)'s, so it is bounded against the largest output (tests/test_winograd4.py
    # says why)
    rng = np.random.default_rng(seed)
    x, wt = rand(rng, (n, cb, h, w, ci)), rand(rng, (fb * fi, cb * ci, 3, 3))
    direct = call("conv2d_nchwc", x, call("pack_conv_weights", wt, in_block=ci, out_block=fi),
                  padding=1)
    u = both(weights, wt, in_block=ci, out_block=fi)
    atol = 1e-4 * max(1.0, float(np.abs(direct).max())) if relative else 1e-4
    y = both(conv, x, u, atol=atol if relative else ATOL)
    check(y, direct, 1e-4, atol)


@HYP
@given(case=pool_case(), ci=st.integers(1, 4), seed=seeds)
def test_blocked_pools_and_bias(case, ci, seed):
    (n, c, h, w), attrs = case
    rng = np.random.default_rng(seed)
    x = rand(rng, (n, c, h, w, ci), -5, -1)
    both("max_pool2d_nchwc", x, **attrs)
    q = rng.integers(0, 256, x.shape).astype(np.uint8)      # u8's 0 pads: a max of 0s
    both("max_pool2d_nchwc_u8", q, rtol=0, atol=0, **attrs)
    both("max_pool2d_u8", call("from_nchwc_u8", q), rtol=0, atol=0, **attrs)
    both("global_avg_pool2d_nchwc", x)
    both("subsample_nchwc", x, stride=1 + seed % 3)
    both("bias_add_nchwc", x, rand(rng, (c, ci)))
    stats = [rand(rng, (c, ci)) for _ in range(3)] + [rand(rng, (c, ci), 0.05, 3.0)]
    both("batch_norm_nchwc", x, *stats)
    both("scale_shift_nchwc", x, *stats[:2])


@HYP
@given(n=small, c=dims, h=dims, w=dims, seed=seeds)
def test_global_avg_pool2d(n, c, h, w, seed):
    both("global_avg_pool2d", rand(np.random.default_rng(seed), (n, c, h, w)))


# --------------------------------------------------------------------------------- shape

@HYP
@given(m=dims, n=dims, seed=seeds)
def test_transpose(m, n, seed):
    x = rand(np.random.default_rng(seed), (m, n))
    out = both("transpose", x)
    np.testing.assert_array_equal(out, x.T)


@pytest.mark.parametrize("name", ["reduce_sum", "reduce_max", "reduce_mean"])
@HYP
@given(m=dims, n=st.one_of(dims, st.integers(14, 200)), seed=seeds)
def test_reductions(name, m, n, seed):
    # Up to 200-term rows; the values are in [-2, 2], so a float32 sum is off by at most
    # ~n * 2**-24 * 2 < 3e-5 in absolute terms: 1e-5 is too tight past ~80 terms.
    x = rand(np.random.default_rng(seed), (m, n))
    both(name, x, atol=1e-5 if n <= 13 else 5e-5)


@HYP
@given(n=small, c=small, h=dims, w=dims, padding=st.integers(0, 3), seed=seeds)
def test_pad2d(n, c, h, w, padding, seed):
    x = rand(np.random.default_rng(seed), (n, c, h, w))
    out = both("pad2d", x, padding=padding)
    np.testing.assert_array_equal(out[:, :, padding:padding + h, padding:padding + w], x)


@HYP
@given(n=small, c=dims, h=dims, w=dims, seed=seeds)
def test_flatten(n, c, h, w, seed):
    x = rand(np.random.default_rng(seed), (n, c, h, w))
    out = both("flatten", x)
    np.testing.assert_array_equal(out, x.reshape(n, -1))


@HYP
@given(n=small, c1=dims, c2=dims, h=dims, w=dims, seed=seeds)
def test_concat(n, c1, c2, h, w, seed):
    rng = np.random.default_rng(seed)
    x, y = rand(rng, (n, c1, h, w)), rand(rng, (n, c2, h, w))
    out = both("concat", x, y)
    np.testing.assert_array_equal(out[:, :c1], x)
    np.testing.assert_array_equal(out[:, c1:], y)


# ---------------------------------------------------------------------- degenerate sizes

ZERO_SIZE_CASES = [
    # Size-0 dimensions are legal: empty outputs, and an empty sum is 0.
    ("add", ((0, 3), (0, 3)), {}),
    ("relu", ((2, 0, 4),), {}),
    ("matmul", ((2, 0), (0, 3)), {}),
    ("batch_matmul", ((0, 2, 3), (0, 3, 4)), {}),
    ("dense", ((2, 0), (3, 0), (3,)), {}),
    ("reduce_sum", ((3, 0),), {}),
    ("softmax", ((0, 5),), {}),
    ("conv2d", ((1, 2, 5, 5), (0, 2, 3, 3)), {}),
    ("conv2d", ((1, 0, 5, 5), (2, 0, 3, 3)), {"padding": 1}),
    ("global_avg_pool2d", ((2, 0, 3, 3),), {}),
    ("flatten", ((2, 0, 3, 3),), {}),
    ("concat", ((1, 0, 2, 2), (1, 3, 2, 2)), {}),
    ("pad2d", ((1, 1, 0, 0),), {"padding": 1}),
]


@pytest.mark.parametrize("name, shapes_, attrs", ZERO_SIZE_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ZERO_SIZE_CASES)])
def test_zero_size_dimensions(name, shapes_, attrs):
    rng = np.random.default_rng(0)
    both(name, *(rand(rng, s) for s in shapes_), **attrs)


@pytest.mark.parametrize("name", sorted(UNARY) + ["leaky_relu", "clip"])
def test_unary_rank_0(name):
    x = np.array(-0.75, F32)
    both(name, x)


@pytest.mark.parametrize("name", BINARY)
def test_binary_rank_0(name):
    both(name, np.array(1.5, F32), np.array(-0.25, F32))


# -------------------------------------------------------------------------------- errors

def f32(*shape):
    return np.zeros(shape, F32)


ERROR_CASES = [
    # (description, op, arrays, attrs, the name the message must quote)
    ("float64 array", "matmul", lambda: (np.zeros((2, 3)), f32(3, 4)), {}, "A"),
    ("float64 second array", "add", lambda: (f32(2, 3), np.zeros((2, 3))), {}, "Y"),
    ("int32 array", "relu", lambda: (np.zeros(4, np.int32),), {}, "X"),
    ("wrong rank", "matmul", lambda: (f32(2, 3, 4), f32(4, 5)), {}, "A"),
    ("wrong rank, 4-d op", "conv2d", lambda: (f32(1, 3, 5, 5), f32(2, 3, 3)), {}, "W"),
    ("wrong rank, rank-generic", "add", lambda: (f32(2, 3), f32(2, 3, 1)), {}, "Y"),
    ("mismatched K", "matmul", lambda: (f32(2, 3), f32(4, 5)), {}, "B"),
    ("mismatched shapes", "add", lambda: (f32(2, 3), f32(2, 4)), {}, "Y"),
    ("mismatched channels", "conv2d", lambda: (f32(1, 3, 5, 5), f32(2, 4, 3, 3)), {}, "W"),
    ("mismatched bias", "dense", lambda: (f32(2, 3), f32(4, 3), f32(5)), {}, "b"),
    ("mismatched H", "concat", lambda: (f32(1, 2, 3, 3), f32(1, 2, 4, 3)), {}, "Y"),
    ("missing kernel", "max_pool2d", lambda: (f32(1, 1, 4, 4),), {}, "kernel"),
    ("missing kernel, avg", "avg_pool2d", lambda: (f32(1, 1, 4, 4),), {"stride": 2},
     "kernel"),
    ("missing padding", "pad2d", lambda: (f32(1, 1, 4, 4),), {}, "padding"),
    ("unknown attribute", "max_pool2d", lambda: (f32(1, 1, 4, 4),),
     {"kernel": 2, "bogus": 1}, "bogus"),
    ("unknown attribute, attr-less op", "relu", lambda: (f32(3),), {"alpha": 0.1}, "alpha"),
    ("float for an int attribute", "max_pool2d", lambda: (f32(1, 1, 4, 4),),
     {"kernel": 2.5}, "kernel"),
    ("bool for an int attribute", "conv2d", lambda: (f32(1, 1, 4, 4), f32(1, 1, 3, 3)),
     {"stride": True}, "stride"),
    ("str for a float attribute", "leaky_relu", lambda: (f32(3),), {"alpha": "x"}, "alpha"),
    ("array for a float attribute", "clip", lambda: (f32(3),), {"lo": np.zeros(3)}, "lo"),
]


@pytest.mark.parametrize("what, name, arrays, attrs, quoted", ERROR_CASES,
                         ids=[c[0] for c in ERROR_CASES])
def test_call_errors(what, name, arrays, attrs, quoted):
    with pytest.raises(tdsl.CallError, match=f"'{quoted}'") as info:
        STD[name].reference(*arrays(), **attrs)
    assert isinstance(info.value, tdsl.TdslError)


def test_wrong_argument_count_is_a_call_error():
    with pytest.raises(tdsl.CallError, match="2 argument"):
        STD["matmul"].reference(f32(2, 3))


def test_non_array_argument_is_a_call_error():
    with pytest.raises(tdsl.CallError, match="'X'"):
        STD["relu"].reference([1.0, 2.0])


def test_int_for_a_float_attribute_is_accepted():
    # An int is a fine float (as in Python); the result matches the float attribute.
    x = np.array([-2.0, 3.0], F32)
    np.testing.assert_array_equal(call("leaky_relu", x, alpha=1), call("leaky_relu", x,
                                                                         alpha=1.0))
    assert not math.isnan(call("clip", x, lo=0)[0])
