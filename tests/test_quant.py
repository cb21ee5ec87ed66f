"""int8 standard-library ops (tdsl/dsl/std/quant.tdsl): requantization as TFLite does it,
bit for bit, in the reference evaluator and in the host C backend, against the independent
numpy code of quant_reference.py on awkward shapes, zero points and scales.

A few hypothesis examples per op by default; ``-m slow`` runs many more.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tdsl
from tdsl.lowering.quantize import multiply_by_quantized_multiplier, quantize_multiplier

import quant_reference as qref

FAST = settings(max_examples=6, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

I32 = st.integers(-2 ** 31, 2 ** 31 - 1)
ZP = st.integers(-128, 127)
# real multipliers from underflowing to a left shift (scales of int8 models are ~1e-4..1)
SCALES = st.one_of(st.floats(1e-12, 8.0, allow_subnormal=False),
                   st.sampled_from([0.0, 0.5, 1.0, 2.0 ** -31, 2.0 ** -32, 0.9999999999,
                                    0.49999999999, 1.5 * 2.0 ** -20]))


# ----------------------------------------------------------------- the arithmetic itself

@given(st.floats(0.0, 2.0 ** 40, allow_subnormal=False))
@settings(max_examples=300, deadline=None, database=None)
def test_quantize_multiplier_matches_the_exact_definition(real):
    assert quantize_multiplier(real) == qref.quantize_multiplier(real)


def test_quantize_multiplier_known_values():
    assert quantize_multiplier(0.5) == (2 ** 30, 0)
    assert quantize_multiplier(1.0) == (2 ** 30, 1)
    assert quantize_multiplier(0.25) == (2 ** 30, -1)
    assert quantize_multiplier(2.0 ** -40) == (0, 0)           # underflows
    assert quantize_multiplier(1 - 2.0 ** -40) == (2 ** 30, 1)  # rounds up to 1.0
    with pytest.raises(ValueError):
        quantize_multiplier(-0.5)


@given(st.lists(I32, min_size=1, max_size=40), SCALES)
@settings(max_examples=200, deadline=None, database=None)
def test_multiply_by_quantized_multiplier_is_bit_exact(xs, real):
    m, s = quantize_multiplier(real)
    got = multiply_by_quantized_multiplier(np.asarray(xs, np.int32), m, s)
    want = [qref.scale_one(x, m, s) for x in xs]
    # the reference is exact arithmetic: a value out of int32 can only come from a left
    # shift's wrap, which both sides apply, and then the int32 result of the C code
    assert got.tolist() == [qref._wrap32(w) for w in want]


def test_rounding_ties():
    # multiplier 2^30, shift -1 is the real 0.25: the high multiply halves x (ties up), the
    # shift halves again (ties away from zero), so 5 * 0.25 = 1.25 rounds twice, to 2, as in
    # TFLite; 3 * 0.25 -> round(1.5) = 2 -> 1
    q = multiply_by_quantized_multiplier
    assert q(np.int32(3), 2 ** 30, -1).item() == 1
    assert q(np.int32(-3), 2 ** 30, -1).item() == -1        # -1.5 -> -1 -> -0.5 -> -1
    assert q(np.int32(-6), 2 ** 30, -2).item() == -1        # -3 -> -0.75 -> -1
    assert q(np.int32(-5), 2 ** 30, -1).item() == -1        # -2.5 -> -2 -> -1
    assert q(np.int32(5), 2 ** 30, -1).item() == 2          # 2.5 -> 3 -> 1.5 -> 2
    assert q(np.int32(2), 2 ** 30, -1).item() == 1          # 1 -> 0.5 -> 1
    assert q(np.int32(-2), 2 ** 30, -1).item() == -1
    assert q(np.int32(-2 ** 31), -2 ** 31, 0).item() == 2 ** 31 - 1   # the one saturation


# ----------------------------------------------------------------- ops: draws

def _i8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int64).astype(np.int8)


@st.composite
def op_case(draw, name):
    """(arrays, attrs) for op ``name``: small primes and ones for sizes, any zero points."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    dim = st.sampled_from([1, 2, 3, 5, 7])
    zps = dict(x_zp=draw(ZP), w_zp=draw(ZP), y_zp=draw(ZP))
    # scales of the size a real model has (accumulators are large, outputs spread over int8)
    scale = draw(st.one_of(st.floats(1e-5, 0.05), SCALES))
    if name == "qdense":
        n, k, m = draw(dim), draw(st.sampled_from([1, 3, 8, 17])), draw(dim)
        arrays = [_i8(rng, (n, k)), _i8(rng, (m, k)),
                  rng.integers(-20000, 20000, size=m).astype(np.int32)]
        return arrays, {**zps, "scale": scale}
    if name in ("qconv2d", "qdepthwise_conv2d"):
        n, c, f = draw(st.sampled_from([1, 2])), draw(dim), draw(dim)
        kh, kw = draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from([1, 3]))
        padding, stride = draw(st.integers(0, 2)), draw(st.integers(1, 3))
        ih = draw(st.integers(max(1, kh - 2 * padding), 9))
        iw = draw(st.integers(max(1, kw - 2 * padding), 9))
        if name == "qdepthwise_conv2d":
            f, wshape = c, (c, 1, kh, kw)
        else:
            wshape = (f, c, kh, kw)
        arrays = [_i8(rng, (n, c, ih, iw)), _i8(rng, wshape),
                  rng.integers(-20000, 20000, size=f).astype(np.int32)]
        return arrays, {**zps, "scale": scale, "stride": stride, "padding": padding}
    shape = tuple(draw(st.lists(dim, min_size=1, max_size=3)))
    if name == "qadd":
        scales = [draw(st.floats(1e-4, 1.0)) for _ in range(3)]
        return [_i8(rng, shape), _i8(rng, shape)], dict(
            a_zp=draw(ZP), b_zp=draw(ZP), y_zp=draw(ZP), a_scale=scales[0],
            b_scale=scales[1], y_scale=scales[2])
    if name == "qrelu":
        return [_i8(rng, shape)], {"x_zp": draw(ZP)}
    if name == "qclamp":
        lo = draw(ZP)
        return [_i8(rng, shape)], {"lo": lo, "hi": draw(st.integers(lo, 127))}
    kernel = draw(st.integers(1, 3))
    padding = draw(st.integers(0, (kernel - 1) // 2 + (kernel > 1)))
    padding = min(padding, kernel // 2)       # every window keeps an input element
    h, w = draw(st.integers(kernel, 9)), draw(st.integers(kernel, 9))
    return [_i8(rng, (draw(st.sampled_from([1, 2])), draw(dim), h, w))], dict(
        kernel=kernel, stride=draw(st.integers(1, 3)), padding=padding)


OPS = sorted(qref.OPS)


def _check_reference(name, case):
    arrays, attrs = case
    got = tdsl.stdlib[name].reference(*arrays, **attrs)
    want = qref.OPS[name](*arrays, **attrs)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", OPS)
@FAST
@given(data=st.data())
def test_reference_is_bit_exact(name, data):
    _check_reference(name, data.draw(op_case(name)))


@pytest.mark.slow
@pytest.mark.parametrize("name", OPS)
@SLOW
@given(data=st.data())
def test_reference_is_bit_exact_many(name, data):
    _check_reference(name, data.draw(op_case(name)))


def _check_host_c(name, case):
    arrays, attrs = case
    op = tdsl.stdlib[name]
    kernel = op.build(shapes=op.sizes_of(*arrays, **attrs), **attrs)
    np.testing.assert_array_equal(kernel(*arrays), qref.OPS[name](*arrays, **attrs))


@pytest.mark.parametrize("name", OPS)
@settings(max_examples=2, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_host_c_is_bit_exact(name, data):
    _check_host_c(name, data.draw(op_case(name)))


@pytest.mark.slow
@pytest.mark.parametrize("name", OPS)
@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_host_c_is_bit_exact_many(name, data):
    _check_host_c(name, data.draw(op_case(name)))


@pytest.mark.slow
@pytest.mark.parametrize("name", OPS)
@settings(max_examples=8, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_cortex_m4_is_bit_exact_many(name, data):
    """Drawn shapes, zero points and scales, built for an emulated Cortex-M4F."""
    from embedded_cases import target_or_skip
    target = target_or_skip("c-embedded -mcpu=cortex-m4")
    arrays, attrs = data.draw(op_case(name))
    op = tdsl.stdlib[name]
    kernel = op.build(target, shapes=op.sizes_of(*arrays, **attrs), **attrs)
    np.testing.assert_array_equal(kernel(*arrays), qref.OPS[name](*arrays, **attrs))


# ----------------------------------------------------------------- the language

def test_requantize_scale_becomes_integers_at_build_time():
    mod = tdsl.loads("op f(X: i32[N]; s: float = 0.3) -> Y: i32[N] "
                     "{ Y[i] = requantize(X[i], s * 2.0) }")
    fn = mod["f"].function(s=0.1)
    text = str(fn.outputs[0].op.body)
    m, s = quantize_multiplier(0.1 * 2.0)
    assert "requantize(" in text and str(m) in text and str(s) in text
    assert "0.2" not in text


@pytest.mark.parametrize("src, message", [
    ("Y[i] = requantize(f32(X[i]), 0.5)", "takes an i32 accumulator"),
    ("Y[i] = requantize(X[i], f32(X[i]))", "must be a constant"),
    ("Y[i] = requantize(X[i], -0.5)", "finite and >= 0"),
    ("Y[i] = requantize(X[i])", "takes 2 arguments"),
])
def test_requantize_mistakes_are_errors(src, message):
    with pytest.raises(tdsl.TdslError, match=message):
        tdsl.loads(f"op f(X: i32[N]) -> Y: i32[N] {{ {src} }}")
