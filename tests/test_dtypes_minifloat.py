"""The storage floats narrower than f16 (bf16, f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz,
f4e2m1; lowering/dtypes.py, MINIFLOATS): held as their bits in C, computed in f32 and
rounded to nearest even on each store, as ml_dtypes (and ONNX's reference) converts. Every
code of each type is decoded exactly; rounding from f32 and f64 matches ml_dtypes bit for bit
on edge values and on hypothesis' floats; arithmetic rounds once per store; the rank-0
parameters, and the backends that refuse them."""
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl
from tdsl.errors import BuildError
from tdsl.lowering import interp
from tdsl.lowering.dtypes import MINIFLOATS, to_numpy

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed "
                                "(pip install ml_dtypes; onnx brings it)")
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
pytestmark = needs_gcc

TYPES = tuple(MINIFLOATS)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}")


def _same_values(got: np.ndarray, want: np.ndarray) -> None:
    """Equal as floats, the sign of zero included; any NaN equals any NaN."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w)
    assert np.array_equal(np.isnan(g), nan)
    np.testing.assert_array_equal(g[~nan], w[~nan])
    np.testing.assert_array_equal(np.signbit(g[~nan]), np.signbit(w[~nan]))


_SOURCE = "\n".join(
    f"op widen_{t}(X: {t}[N]) -> Y: f32[N] {{ Y[i] = f32(X[i]) }}\n"
    f"op round_{t}(X: f32[N]) -> Y: {t}[N] {{ Y[i] = {t}(X[i]) }}\n"
    f"op round64_{t}(X: f64[N]) -> Y: {t}[N] {{ Y[i] = {t}(X[i]) }}\n"
    f"op muladd_{t}(X: {t}[N], W: {t}[N], b: {t}) -> Y: {t}[N] {{ Y[i] = X[i] * W[i] + b }}"
    for t in TYPES)
_BUILT = {}


def _op(name: str):
    """The op ``name`` of `_SOURCE` and its C kernel, built once."""
    if name not in _BUILT:
        op = tdsl.loads(_SOURCE)[name]
        _BUILT[name] = op, op.build()
    return _BUILT[name]


def _edges(t: str) -> np.ndarray:
    info = ml_dtypes.finfo(to_numpy(t))
    top, tiny = float(info.max), float(info.smallest_subnormal)
    edge = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, top, -top, tiny, -tiny, tiny / 2,
            tiny * 0.75, 1e-30, 1.0, 1.5, 3.0, 1e30, 1e38]
    step = float(np.spacing(to_numpy(t).type(top)) if t == "bf16" else top / 8)
    edge += [top + step * f for f in (0.25, 0.5, 0.5001, 0.75, 1, 2)]
    edge += [-e for e in edge[-6:]]
    return np.array(edge, np.float64)


@pytest.mark.parametrize("t", TYPES)
def test_every_code_widens_exactly(t):
    op, kernel = _op(f"widen_{t}")
    dt = to_numpy(t)
    codes = np.arange(2 ** (8 * dt.itemsize), dtype=f"u{dt.itemsize}")
    if t == "f4e2m1":
        codes = codes[:16]
    x = codes.view(dt)
    want = x.astype(np.float32)
    _same_values(kernel(x), want)
    _same_values(op.reference(x), want)
    _same_values(interp.run(op.lower(), [x])[0], want)


@pytest.mark.parametrize("t", TYPES)
def test_rounding_of_edges_matches_ml_dtypes(t):
    x64 = _edges(t)
    for src, x in (("round", x64.astype(np.float32)), ("round64", x64)):
        _, kernel = _op(f"{src}_{t}")
        with np.errstate(all="ignore"):
            want = x.astype(to_numpy(t))
        got = kernel(x)
        assert got.dtype == to_numpy(t)
        _same_values(got, want)


@settings(max_examples=60, deadline=None)
@given(t=st.sampled_from(TYPES),
       xs=st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1,
                   max_size=40),
       scale=st.sampled_from([1e-6, 1e-3, 1.0, 1e3, 1e6]))
def test_rounding_matches_ml_dtypes(t, xs, scale):
    with np.errstate(all="ignore"):
        x = (np.array(xs, np.float32) * np.float32(scale)).astype(np.float32)
        want = x.astype(to_numpy(t))
    op, kernel = _op(f"round_{t}")
    got = kernel(x)
    _same_values(got, want)
    _same_values(op.reference(x), want)


@pytest.mark.parametrize("t", TYPES)
def test_arithmetic_is_f32_rounded_once(t):
    """``X * W + b`` of a storage float is computed in f32 and rounded once, at the store;
    the rank-0 ``b`` is passed as its bits."""
    rng = np.random.default_rng(1)
    dt = to_numpy(t)
    x, w = (rng.uniform(-2, 2, 50).astype(np.float32).astype(dt) for _ in range(2))
    b = dt.type(0.375)
    with np.errstate(all="ignore"):
        want = (x.astype(np.float32) * w.astype(np.float32) + np.float32(b)).astype(dt)
    op, kernel = _op(f"muladd_{t}")
    _same_values(kernel(x, w, b), want)
    _same_values(kernel(x, w, 0.375), want)            # a Python float, rounded to t
    _same_values(op.reference(x, w, b), want)
    _same_values(interp.run(op.lower(), [x, w, b])[0], want)


def test_wrong_dtype_is_a_clear_error():
    _, kernel = _op("widen_bf16")
    with pytest.raises(tdsl.CallError, match="bfloat16"):
        kernel(np.zeros(4, np.float16))


def test_backends_without_them_refuse():
    from tdsl.emit_c.embedded import emit_embedded
    from tdsl.emit_cuda.build import emit_cuda
    from tdsl.emit_opencl.build import emit_opencl
    f = _op("round_f8e4m3fn")[0].lower()
    for emit, name in ((emit_opencl, "OpenCL"), (emit_cuda, "CUDA"),
                       (emit_embedded, "c-embedded")):
        with pytest.raises(BuildError, match=f"Y: f8e4m3fn are not supported on {name}"):
            emit(f)


@pytest.mark.parametrize("t", ["f16", "bf16", "f8e4m3fn"])
def test_a_graphs_rank0_storage_float_input_is_passed_as_its_bits(t):
    """A graph reads a rank-0 input at each run; a storage float's must go as its bits
    (it went as its value: 2.0 became the code 2, a subnormal)."""
    g = tdsl.loads(f"""
op scale(X: {t}[N], S: {t}) -> Y: f32[N] {{ Y[i] = f32(X[i]) * f32(S) }}
graph net(x: {t}[4], s: {t}) -> (y: f32[4]) {{ y = scale(x, s) }}
""")["net"].build()
    dt = to_numpy(t)
    x = np.array([0.5, 1, -2, 3], np.float32).astype(dt)
    np.testing.assert_array_equal(g(x, np.asarray(2.0, np.float32).astype(dt)),
                                  x.astype(np.float32) * 2)
