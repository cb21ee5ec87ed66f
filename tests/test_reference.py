"""The numpy reference evaluator against independent numpy code.

Functions are built by hand with the te Python API. Tests of reductions run in three modes
(`paths` fixture): the fast paths (strided views, einsum), the plain grid path, and the grid
path chunked into tiny pieces, so all three must agree with numpy.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tdsl.errors import CallError, TdslError
from tdsl.lowering import te
from tdsl.lowering.reference import stage
from tdsl.lowering.reference.semantics import evaluate

HYP = settings(max_examples=40, deadline=None)
RNG = np.random.default_rng(1234)


# ---------------------------------------------------------------------------- helpers

def b(op, x, y):
    return te.binary(op, x, y)


def land(*conds):
    out = conds[0]
    for c in conds[1:]:
        out = b("and", out, c)
    return out


def red(kind, body, *axes):
    return te.reduce(kind, body, axes)


def rand(shape, dtype=np.float32, lo=-3, hi=3):
    if np.issubdtype(dtype, np.floating):
        return RNG.uniform(lo, hi, size=shape).astype(dtype)
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    info = np.iinfo(dtype)
    return RNG.integers(max(lo, info.min), min(hi, info.max) + 1, size=shape).astype(dtype)


@pytest.fixture(params=["fast", "grid", "chunked"])
def paths(request, monkeypatch):
    if request.param != "fast":
        monkeypatch.setattr(stage, "USE_EINSUM", False)
    if request.param == "chunked":
        monkeypatch.setattr(stage, "GRID_LIMIT", 5)
    return request.param


def matmul_fn(dtype="f32"):
    M, K, N = te.Var("M"), te.Var("K"), te.Var("N")
    A = te.placeholder("A", (M, K), dtype)
    B = te.placeholder("B", (K, N), dtype)
    k = te.reduce_axis(K, "k")
    C = te.compute("C", (M, N), lambda i, j: red("sum", A[i, k.var] * B[k.var, j], k))
    return te.Function("matmul", (A, B), (C,), (M, K, N))


def conv_fn(kh=3, kw=3, pad=1):
    N, C, H, W, F = (te.Var(n) for n in "NCHWF")
    X = te.placeholder("X", (N, C, H, W))
    Wt = te.placeholder("Wt", (F, C, kh, kw))
    Xp = te.compute(
        "Xp", (N, C, H + 2 * pad, W + 2 * pad),
        lambda n, c, y, x: te.select(
            land(b(">=", y, pad), b("<", y, H + pad), b(">=", x, pad), b("<", x, W + pad)),
            X[n, c, y - pad, x - pad], 0.0))
    c, r, s = te.reduce_axis(C, "c"), te.reduce_axis(kh, "r"), te.reduce_axis(kw, "s")
    Ho, Wo = H + 2 * pad - kh + 1, W + 2 * pad - kw + 1
    Y = te.compute("Y", (N, F, Ho, Wo), lambda n, f, y, x: red(
        "sum", Xp[n, c.var, y + r.var, x + s.var] * Wt[f, c.var, r.var, s.var], c, r, s))
    return te.Function("conv2d", (X, Wt), (Y,), (N, C, H, W, F))


def np_conv(x, w, pad):
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    ho, wo = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], ho, wo))
    for r in range(kh):
        for s in range(kw):
            out += np.einsum("nchw,fc->nfhw", x[:, :, r:r + ho, s:s + wo], w[:, :, r, s])
    return out


# ---------------------------------------------------------------------------- operators

@HYP
@given(st.integers(1, 9), st.integers(0, 9), st.integers(1, 9))
def test_matmul_f32(m, k, n):
    for mode in ("fast", "grid"):
        stage.USE_EINSUM = mode == "fast"
        try:
            a, bb = rand((m, k)), rand((k, n))
            (c,) = evaluate(matmul_fn(), [a, bb])
        finally:
            stage.USE_EINSUM = True
        assert c.dtype == np.float32 and c.shape == (m, n)
        np.testing.assert_allclose(c, a.astype(np.float64) @ bb, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,np_t", [("i32", np.int32), ("i8", np.int8), ("u8", np.uint8)])
def test_matmul_integers_wrap(paths, dtype, np_t):
    info = np.iinfo(np_t)
    a = RNG.integers(info.min, info.max + 1, (5, 7)).astype(np_t)
    bb = RNG.integers(info.min, info.max + 1, (7, 3)).astype(np_t)
    (c,) = evaluate(matmul_fn(dtype), [a, bb])
    want = (a.astype(object) @ bb.astype(object)) % (info.max - info.min + 1)
    want = np.array(want.tolist(), dtype=np.int64).astype(np_t)   # two's complement wrap
    assert c.dtype == np_t
    np.testing.assert_array_equal(c, want)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 2), st.integers(1, 4), st.integers(1, 7), st.integers(1, 7),
       st.integers(1, 4), st.sampled_from([(3, 3, 1), (1, 1, 0), (2, 3, 1), (5, 5, 2)]))
def test_conv2d_padded_stage(n, c, h, w, f, kernel):
    kh, kw, pad = kernel
    x, wt = rand((n, c, h, w)), rand((f, c, kh, kw))
    if h + 2 * pad < kh or w + 2 * pad < kw:
        return
    (y,) = evaluate(conv_fn(kh, kw, pad), [x, wt])
    np.testing.assert_allclose(y, np_conv(x, wt, pad), rtol=1e-4, atol=1e-4)


def test_literal_dimension_mismatch():
    with pytest.raises(CallError, match=r"argument 'Wt' \(2nd\): dimension 2 is 5 but must "
                                        r"be 3 \(f32\[F, C, 3, 3\]\)"):
        evaluate(conv_fn(), [rand((1, 2, 4, 4)), rand((3, 2, 5, 5))])


def test_conv2d_paths(paths):
    x, wt = rand((2, 3, 6, 5)), rand((4, 3, 3, 3))
    (y,) = evaluate(conv_fn(), [x, wt])
    np.testing.assert_allclose(y, np_conv(x, wt, 1), rtol=1e-4, atol=1e-4)


def concat_fn():
    C1, C2, M = te.Var("C1"), te.Var("C2"), te.Var("M")
    A = te.placeholder("A", (M, C1))
    B = te.placeholder("B", (M, C2))
    # B[i, j - C1] has a negative subscript where j < C1: the select must mask it.
    Cat = te.compute("Cat", (M, C1 + C2),
                     lambda i, j: te.select(b("<", j, C1), A[i, j], B[i, j - C1]))
    return te.Function("concat", (A, B), (Cat,), (M, C1, C2))


@HYP
@given(st.integers(0, 4), st.integers(0, 5), st.integers(0, 5))
def test_concat_via_select(m, c1, c2):
    a, bb = rand((m, c1)), rand((m, c2))
    (out,) = evaluate(concat_fn(), [a, bb])
    np.testing.assert_array_equal(out, np.concatenate([a, bb], axis=1))


def maxpool_fn():
    N, H, W = te.Var("N"), te.Var("H"), te.Var("W")
    X = te.placeholder("X", (N, H, W))
    Xp = te.compute("Xp", (N, H + 2, W + 2), lambda n, y, x: te.select(
        land(b(">=", y, 1), b("<=", y, H), b(">=", x, 1), b("<=", x, W)),
        X[n, y - 1, x - 1], te.const(-math.inf, "f32")))
    r, s = te.reduce_axis(3, "r"), te.reduce_axis(3, "s")
    Ho, Wo = (H - 1) // 2 + 1, (W - 1) // 2 + 1
    Y = te.compute("Y", (N, Ho, Wo), lambda n, y, x: red(
        "max", Xp[n, 2 * y + r.var, 2 * x + s.var], r, s))
    return te.Function("maxpool", (X,), (Y,), (N, H, W))


@HYP
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9))
def test_maxpool_neg_inf_padding(n, h, w):
    x = rand((n, h, w))
    (y,) = evaluate(maxpool_fn(), [x])
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    ho, wo = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    want = np.full((n, ho, wo), -np.inf, np.float32)
    for r in range(3):
        for s in range(3):
            want = np.maximum(want, xp[:, r:r + 2 * ho - 1:2, s:s + 2 * wo - 1:2])
    np.testing.assert_array_equal(y, want)


def test_maxpool_paths(paths):
    x = rand((2, 7, 6))
    (y,) = evaluate(maxpool_fn(), [x])
    assert y.shape == (2, 4, 3)
    assert y[0, 0, 0] == x[0, :2, :2].max()


def softmax_fn():
    M, N = te.Var("M"), te.Var("N")
    X = te.placeholder("X", (M, N))
    k1, k2 = te.reduce_axis(N, "k1"), te.reduce_axis(N, "k2")
    Mx = te.compute("Mx", (M,), lambda i: red("max", X[i, k1.var], k1))
    E = te.compute("E", (M, N), lambda i, j: te.intrinsic("exp", X[i, j] - Mx[i]))
    S = te.compute("S", (M,), lambda i: red("sum", E[i, k2.var], k2))
    Y = te.compute("Y", (M, N), lambda i, j: E[i, j] / S[i])
    return te.Function("softmax", (X,), (Y,), (M, N))


def test_softmax(paths):
    x = rand((5, 11), lo=-30, hi=30)
    (y,) = evaluate(softmax_fn(), [x])
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert y.dtype == np.float32


def test_reduce_nested_in_expressions(paths):
    M, N = te.Var("M"), te.Var("N")
    X = te.placeholder("X", (M, N))
    k, k2 = te.reduce_axis(N, "k"), te.reduce_axis(N, "k2")
    mean = te.compute("mean", (M,), lambda i: red("sum", X[i, k.var], k) / 4.0)
    # logsumexp in one expression: a max nested inside the body of a sum
    lse = te.compute("lse", (M,), lambda i: te.intrinsic("log", red(
        "sum", te.intrinsic("exp", X[i, k2.var] - red("max", X[i, k.var], k)), k2)))
    fn = te.Function("stats", (X,), (mean, lse), (M, N))
    x = rand((3, 6)).astype(np.float32)
    m, l = evaluate(fn, [x])
    # an f32 sum of six values of up to 3 rounds by up to 6 * 3 * 2**-24 in absolute terms: a
    # row summing to near 0 fails any relative tolerance (seen: -0.004163, 1.4e-5 off)
    np.testing.assert_allclose(m, x.astype(np.float64).sum(1) / 4, rtol=1e-6, atol=1e-6)
    x64 = x.astype(np.float64)
    want = np.log(np.exp(x64 - x64.max(1, keepdims=True)).sum(1)) + 0 * x64.max(1)
    np.testing.assert_allclose(l, want, rtol=1e-5)


def test_sum_of_body_without_the_axis_counts_extent(paths):
    N, K = te.Var("N"), te.Var("K")
    A = te.placeholder("A", (N,))
    B = te.placeholder("B", (N,))
    k = te.reduce_axis(K, "k")
    k2 = te.reduce_axis(K, "k2")
    S = te.compute("S", (N,), lambda i: red("sum", A[i] * B[i], k))     # einsum-shaped
    P = te.compute("P", (N,), lambda i: red("prod", A[i] + 0.0, k2))
    C = te.compute("C", (), lambda: red("sum", te.const(1, "i32"), k))
    fn = te.Function("f", (A, B), (S, P, C), (N, K))
    a, bb = rand(4), rand(4)
    s, p, c = evaluate(fn, [a, bb], shape_env={"K": 3})
    np.testing.assert_allclose(s, 3 * a * bb, rtol=1e-6)
    np.testing.assert_allclose(p, a ** 3, rtol=1e-5)
    assert c.shape == () and c.dtype == np.int32 and c == 3


def test_triangular_reduction(paths):
    N = te.Var("N")
    X = te.placeholder("X", (N,))
    # sum over k < i + 1: the extent depends on the outer axis (prefix sums)
    Y = te.compute("Y", (N,), lambda i: te.reduce(
        "sum", X[te.Var("k")], (te.IterVar(te.Var("k"), i + 1, "reduce"),)))
    x = rand(9)
    (y,) = evaluate(te.Function("cumsum", (X,), (Y,), (N,)), [x])
    np.testing.assert_allclose(y, np.cumsum(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- scalar semantics

def elementwise_fn(dtype, body, n_inputs=2, out_dtype=None):
    N = te.Var("N")
    ins = tuple(te.placeholder(f"X{q}", (N,), dtype) for q in range(n_inputs))
    Y = te.compute("Y", (N,), lambda i: body(*(x[i] for x in ins)))
    return te.Function("ew", ins, (Y,), (N,))


@HYP
@given(st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1)),
                min_size=1, max_size=20))
def test_int_floordiv_mod_are_floor(pairs):
    pairs = [(x, y) for x, y in pairs if y != 0] or [(-7, 2)]
    xs = np.array([p[0] for p in pairs], np.int32)
    ys = np.array([p[1] for p in pairs], np.int32)
    q, = evaluate(elementwise_fn("i32", lambda x, y: x // y), [xs, ys])
    r, = evaluate(elementwise_fn("i32", lambda x, y: x % y), [xs, ys])
    for x, y, qq, rr in zip(xs.tolist(), ys.tolist(), q.tolist(), r.tolist()):
        want_q = x // y if not (x == -2**31 and y == -1) else -2**31   # the one wrap
        assert (qq, rr) == (want_q, x % y)


def test_index_floordiv_mod_on_axis_vars():
    N = te.Var("N")
    Y = te.compute("Y", (N,), lambda i: (i - 7) // 3 * 100 + (i - 7) % 3)
    (y,) = evaluate(te.Function("f", (), (Y,), (N,)), [], shape_env={"N": 12})
    assert y.dtype == np.int64
    assert y.tolist() == [((i - 7) // 3) * 100 + (i - 7) % 3 for i in range(12)]


@pytest.mark.parametrize("dtype,np_t,op,pyop", [
    ("i32", np.int32, "+", lambda x, y: x + y),
    ("i32", np.int32, "*", lambda x, y: x * y),
    ("u8", np.uint8, "-", lambda x, y: x - y),
    ("i8", np.int8, "*", lambda x, y: x * y),
    ("i16", np.int16, "-", lambda x, y: x - y),
])
def test_integer_arithmetic_wraps(dtype, np_t, op, pyop):
    info = np.iinfo(np_t)
    x = RNG.integers(info.min, info.max + 1, 50).astype(np_t)
    y = RNG.integers(info.min, info.max + 1, 50).astype(np_t)
    (out,) = evaluate(elementwise_fn(dtype, lambda a, c: b(op, a, c)), [x, y])
    bits = info.bits
    want = [((pyop(int(p), int(q)) - info.min) % 2**bits) + info.min for p, q in zip(x, y)]
    assert out.dtype == np_t and out.tolist() == want


def test_f32_stays_f32():
    x = np.array([1e-8, 1.0, 3.0], np.float32)
    (y,) = evaluate(elementwise_fn("f32", lambda a: (a + 1.0) - 1.0, 1), [x])
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, (x + np.float32(1)) - np.float32(1))   # 1e-8 is lost


def test_casts():
    N = te.Var("N")
    X = te.placeholder("X", (N,), "f32")
    I = te.placeholder("I", (N,), "i32")
    outs = (
        te.compute("a", (N,), lambda i: te.Cast(X[i], "i32")),
        te.compute("b", (N,), lambda i: te.Cast(I[i], "f32")),
        te.compute("c", (N,), lambda i: te.Cast(X[i], "bool")),
        te.compute("d", (N,), lambda i: te.Cast(te.Cast(X[i], "bool"), "i32")),
        te.compute("e", (N,), lambda i: te.Cast(I[i], "i8")),
        te.compute("f", (N,), lambda i: te.Cast(te.Cast(X[i], "f64") * 3.0, "f32")),
    )
    fn = te.Function("casts", (X, I), outs, (N,))
    x = np.array([-2.7, -0.5, 0.0, 2.5, 3.9], np.float32)
    i = np.array([-129, 255, 16777217, 7, -1], np.int32)
    a, bb, c, d, e, f = evaluate(fn, [x, i])
    assert a.tolist() == [-2, 0, 0, 2, 3]                   # truncation toward zero
    assert bb.dtype == np.float32 and bb[2] == np.float32(16777217)
    assert c.dtype == np.bool_ and c.tolist() == [True, True, False, True, True]
    assert d.tolist() == [1, 1, 0, 1, 1]
    assert e.tolist() == [127, -1, 1, 7, -1]                # wraps like a C conversion
    np.testing.assert_array_equal(f, (x.astype(np.float64) * 3).astype(np.float32))


def test_bool_logic():
    fn = elementwise_fn("bool", lambda p, q: b("or", b("and", p, te.Unary("not", q, "bool")),
                                              b("==", p, q)))
    p = np.array([False, False, True, True])
    q = np.array([False, True, False, True])
    (y,) = evaluate(fn, [p, q])
    assert y.dtype == np.bool_ and y.tolist() == ((p & ~q) | (p == q)).tolist()


def test_compare_ops_on_floats():
    x, y = rand(30), rand(30)
    x[::3] = y[::3]
    for op, f in [("<", np.less), ("<=", np.less_equal), (">", np.greater),
                  (">=", np.greater_equal), ("==", np.equal), ("!=", np.not_equal)]:
        (out,) = evaluate(elementwise_fn("f32", lambda a, c: b(op, a, c)), [x, y])
        np.testing.assert_array_equal(out, f(x, y))


@pytest.mark.parametrize("name,ref", [
    ("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("tanh", np.tanh),
    ("sin", np.sin), ("cos", np.cos), ("abs", np.abs), ("floor", np.floor),
    ("ceil", np.ceil), ("round", np.round),
    ("rsqrt", lambda x: 1 / np.sqrt(x)), ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("erf", np.vectorize(math.erf)),
])
@pytest.mark.parametrize("dtype,np_t", [("f32", np.float32), ("f64", np.float64)])
def test_unary_intrinsics(name, ref, dtype, np_t):
    x = np.concatenate([RNG.uniform(-6, 6, 60), [-2.5, -0.5, 0.5, 1.5, 2.5, 0.0]]).astype(np_t)
    if name in ("log", "sqrt", "rsqrt"):
        x = np.abs(x) + np_t(0.01)
    (y,) = evaluate(elementwise_fn(dtype, lambda a: te.intrinsic(name, a), 1), [x])
    assert y.dtype == np_t
    tol = 2e-6 if dtype == "f32" else 1e-14
    np.testing.assert_allclose(y, ref(x.astype(np.float64)), rtol=tol, atol=tol)
    if name == "round":     # half to even, like C's rint
        assert y[-6:].tolist() == [-2.0, -0.0, 0.0, 2.0, 2.0, 0.0]


def test_erf_is_exact_in_f64():
    x = np.linspace(-7, 7, 2001)
    (y,) = evaluate(elementwise_fn("f64", lambda a: te.intrinsic("erf", a), 1), [x])
    assert y.tolist() == [math.erf(v) for v in x.tolist()]


@pytest.mark.parametrize("dtype,np_t", [("f32", np.float32), ("i32", np.int32)])
def test_binary_intrinsics(dtype, np_t):
    x, y = rand(40, np_t, -9, 9), rand(40, np_t, -9, 9)
    for name, f in [("min", np.minimum), ("max", np.maximum)]:
        (out,) = evaluate(elementwise_fn(dtype, lambda a, c: te.intrinsic(name, a, c)), [x, y])
        np.testing.assert_array_equal(out, f(x, y))
    if dtype == "f32":
        xa = np.abs(x) + np.float32(0.5)
        (out,) = evaluate(elementwise_fn(dtype, lambda a, c: te.intrinsic("pow", a, c)), [xa, y])
        np.testing.assert_allclose(out, np.power(xa.astype(np.float64), y), rtol=1e-5)


# ---------------------------------------------------------------------------- reductions

@pytest.mark.parametrize("kind,f32_id,i32_id", [
    ("sum", 0.0, 0), ("prod", 1.0, 1), ("max", -np.inf, -2**31), ("min", np.inf, 2**31 - 1)])
def test_reduce_over_empty_extent(paths, kind, f32_id, i32_id):
    for dtype, np_t, ident in [("f32", np.float32, f32_id), ("i32", np.int32, i32_id)]:
        M, K = te.Var("M"), te.Var("K")
        X = te.placeholder("X", (M, K), dtype)
        k = te.reduce_axis(K, "k")
        Y = te.compute("Y", (M,), lambda i: red(kind, X[i, k.var] * X[i, k.var], k))
        (y,) = evaluate(te.Function("r", (X,), (Y,), (M, K)), [np.zeros((3, 0), np_t)])
        assert y.dtype == np_t and y.tolist() == [ident] * 3


@pytest.mark.parametrize("kind,f", [("sum", np.sum), ("prod", np.prod),
                                    ("max", np.max), ("min", np.min)])
def test_reductions_multi_axis(paths, kind, f):
    A, B, C = te.Var("A"), te.Var("B"), te.Var("C")
    X = te.placeholder("X", (A, B, C))
    j, k = te.reduce_axis(B, "j"), te.reduce_axis(C, "k")
    Y = te.compute("Y", (A,), lambda i: red(kind, X[i, j.var, k.var], j, k))
    x = rand((4, 3, 5), lo=0.5, hi=1.5)
    (y,) = evaluate(te.Function("r", (X,), (Y,), (A, B, C)), [x])
    np.testing.assert_allclose(y, f(x.astype(np.float64), axis=(1, 2)), rtol=1e-5)


def test_full_reduction_to_scalar_and_passthrough_output():
    N = te.Var("N")
    X = te.placeholder("X", (N,), "i64")
    k = te.reduce_axis(N, "k")
    S = te.compute("S", (), lambda: red("sum", X[k.var] * X[k.var], k))
    x = np.arange(10, dtype=np.int64)
    s, xo = evaluate(te.Function("f", (X,), (S, X), (N,)), [x])
    assert s.shape == () and s == (x * x).sum()
    assert xo is not x and xo.tolist() == x.tolist()


# ---------------------------------------------------------------------------- loads

@settings(max_examples=80, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(-3, 3), st.integers(-3, 3),
       st.integers(-10, 20), st.integers(1, 25))
def test_affine_loads_match_python(m, n, ci, cj, c0, size):
    """Y[i, j] = X[ci*i + cj*j + c0]: a strided view when in range, else an error."""
    M, N, S = te.Var("M"), te.Var("N"), te.Var("S")
    X = te.placeholder("X", (S,))
    Y = te.compute("Y", (M, N), lambda i, j: X[ci * i + cj * j + c0])
    fn = te.Function("f", (X,), (Y,), (M, N, S))
    x = rand(size)
    idx = [[ci * i + cj * j + c0 for j in range(n)] for i in range(m)]
    if all(0 <= v < size for row in idx for v in row):
        (y,) = evaluate(fn, [x], shape_env={"M": m, "N": n})
        np.testing.assert_array_equal(y, x[np.array(idx)])
    else:
        with pytest.raises(TdslError, match="index out of bounds"):
            evaluate(fn, [x], shape_env={"M": m, "N": n})


def test_non_contiguous_inputs():
    a = rand((9, 6))[::-2, :].T          # negative and non-unit strides
    bb = np.asfortranarray(rand((5, 4)))
    (c,) = evaluate(matmul_fn(), [a, bb])
    np.testing.assert_allclose(c, a.astype(np.float64) @ bb, rtol=1e-5, atol=1e-5)


def test_data_dependent_gather():
    N, M = te.Var("N"), te.Var("M")
    X = te.placeholder("X", (M,))
    Idx = te.placeholder("Idx", (N,), "i64")
    Y = te.compute("Y", (N,), lambda i: X[Idx[i]], axis_names=["i"])
    fn = te.Function("take", (X, Idx), (Y,), (N, M))
    x = rand(6)
    (y,) = evaluate(fn, [x, np.array([5, 0, 3, 3])])
    np.testing.assert_array_equal(y, x[[5, 0, 3, 3]])
    with pytest.raises(TdslError, match=r"index out of bounds: X\[Idx\[i\]\].*reads X\[-1\]"):
        evaluate(fn, [x, np.array([0, -1])])


def shift_fn(offset):
    N = te.Var("N")
    X = te.placeholder("X", (N,))
    Y = te.compute("Y", (N,), lambda i: X[i + offset], axis_names=["i"])
    return te.Function("shift", (X,), (Y,), (N,))


@pytest.mark.parametrize("offset,bad", [(1, 4), (-1, -1)])
def test_out_of_bounds_is_an_error_not_a_wrap(offset, bad):
    with pytest.raises(TdslError) as info:
        evaluate(shift_fn(offset), [rand(4)])
    assert not isinstance(info.value, IndexError)
    msg = str(info.value)
    assert "index out of bounds" in msg and f"reads X[{bad}]" in msg and "shape (4,)" in msg
    assert "stage 'Y'" in msg and ("i=3" if offset == 1 else "i=0") in msg


def test_out_of_bounds_in_taken_select_branch_is_an_error():
    N = te.Var("N")
    X = te.placeholder("X", (N,))
    # guard is off by one: i = N - 1 takes the branch and reads X[N]
    Y = te.compute("Y", (N,), lambda i: te.select(b("<", i, N), X[i + 1], 0.0))
    with pytest.raises(TdslError, match="index out of bounds"):
        evaluate(te.Function("f", (X,), (Y,), (N,)), [rand(5)])


def test_out_of_bounds_inside_reduction():
    N, K = te.Var("N"), te.Var("K")
    X = te.placeholder("X", (K,))
    k = te.reduce_axis(K + 1, "k")
    Y = te.compute("Y", (N,), lambda i: red("sum", X[k.var] * X[k.var], k))
    with pytest.raises(TdslError, match=r"reads X\[3\].*k=3"):
        evaluate(te.Function("f", (X,), (Y,), (N, K)), [rand(3)], shape_env={"N": 2})


def test_untaken_branch_is_lazy_short_circuit_and_division():
    N = te.Var("N")
    X = te.placeholder("X", (N,))
    D = te.placeholder("D", (N,), "i32")
    # `and` short-circuits: X[i - 1] is never read at i = 0
    P = te.compute("P", (N,), lambda i: b("and", b(">", i, 0), b(">", X[i - 1], 0.0)))
    # division by zero in the untaken branch has no effect
    Q = te.compute("Q", (N,), lambda i: te.select(b("!=", D[i], 0), b("//", 100, D[i]), -1))
    fn = te.Function("f", (X, D), (P, Q), (N,))
    x = np.array([1.0, -1.0, 2.0], np.float32)
    p, q = evaluate(fn, [x, np.array([0, 7, -7], np.int32)])
    assert p.tolist() == [False, True, False] and q.tolist() == [-1, 14, -15]


# ---------------------------------------------------------------------------- arguments

def axpb_fn(dtype="f32"):
    N = te.Var("N")
    alpha = te.placeholder("alpha", (), dtype)
    X = te.placeholder("X", (N,), dtype)
    beta = te.placeholder("beta", (), dtype)
    Y = te.compute("Y", (N,), lambda i: alpha[()] * X[i] + beta[()])
    return te.Function("axpb", (alpha, X, beta), (Y,), (N,))


def test_scalar_params():
    x = rand(5)
    for alpha, beta in [(2.0, 1), (np.array(2.0, np.float32), np.float32(1.0))]:
        (y,) = evaluate(axpb_fn(), [alpha, x, beta])
        assert y.dtype == np.float32
        np.testing.assert_array_equal(y, np.float32(2) * x + np.float32(1))
    (y,) = evaluate(axpb_fn("i32"), [3, np.arange(4, dtype=np.int32), -1])
    assert y.tolist() == [-1, 2, 5, 8]


@pytest.mark.parametrize("args,match", [
    ([np.float64(2.0), "x", 1.0], r"argument 'alpha' \(1st\) has dtype float64, expected float32 \(f32\)"),
    ([2.0, "x", np.ones(1, np.float32)], r"argument 'beta' \(3rd\): expected a scalar"),
    ([2.0, "x", "1"], r"argument 'beta' \(3rd\): expected a f32 scalar"),
    ([2.0, [1.0, 2.0], 1.0], r"argument 'X' \(2nd\) must be a numpy.ndarray of float32"),
    ([2.0, np.ones((2, 2), np.float32), 1.0], r"argument 'X' \(2nd\): expected a 1-d array"),
    ([2.0, np.ones(3), 1.0], r"argument 'X' \(2nd\) has dtype float64, expected float32"),
    ([2.0, "x"], r"takes 3 argument\(s\) \(alpha, X, beta\) but 2 were given"),
])
def test_call_errors_name_the_parameter(args, match):
    args = [np.ones(3, np.float32) if isinstance(a, str) and a == "x" else a for a in args]
    with pytest.raises(CallError, match=match):
        evaluate(axpb_fn(), args)


@pytest.mark.parametrize("value,match", [(2.5, "expected a i32 scalar"),
                                         (2**31, "does not fit in i32"),
                                         (True, None)])
def test_python_scalars_are_checked(value, match):
    x = np.zeros(2, np.int32)
    if match is None:
        evaluate(axpb_fn("i32"), [value, x, 0])
        return
    with pytest.raises(CallError, match=match):
        evaluate(axpb_fn("i32"), [value, x, 0])


def test_inconsistent_sizes_message():
    with pytest.raises(CallError) as info:
        evaluate(matmul_fn(), [np.ones((3, 5), np.float32), np.ones((7, 2), np.float32)])
    assert "argument 'B' (2nd): dimension 0 is 7 but K = 5 from argument 'A' (1st)" in \
        str(info.value)
    assert isinstance(info.value, TdslError) and not isinstance(info.value, (IndexError,
                                                                              KeyError))


def padded_fn():
    H = te.Var("H")
    Xp = te.placeholder("Xp", (H + 2,))
    Y = te.compute("Y", (H,), lambda i: Xp[i] + Xp[i + 1] + Xp[i + 2])
    P = te.compute("P", ((H - 1) // 2 + 1,), lambda i: Xp[2 * i + 1])
    return te.Function("blur", (Xp,), (Y, P), (H,))


def test_symbolic_dim_expressions_are_solved_and_checked():
    x = rand(9)
    y, p = evaluate(padded_fn(), [x])                  # H + 2 = 9 binds H = 7
    np.testing.assert_allclose(y, x[:-2] + x[1:-1] + x[2:], rtol=1e-6)
    np.testing.assert_array_equal(p, x[1:8:2])
    with pytest.raises(CallError, match=r"dimension 0 is 9 but H \+ 2 = 7 \(H = 5 from "
                                        r"shape_env\)"):
        evaluate(padded_fn(), [x], shape_env={"H": 5})
    with pytest.raises(CallError, match=r"dimension 0 is 1, which H \+ 2 equals for no"):
        evaluate(padded_fn(), [rand(1)])


def test_sum_of_shape_vars_and_unbindable_vars():
    C1, C2 = te.Var("C1"), te.Var("C2")
    A = te.placeholder("A", (C1,))
    Cat = te.placeholder("Cat", (C1 + C2,))
    Y = te.compute("Y", (C2,), lambda i: Cat[i + C1])
    fn = te.Function("tail", (Cat, A), (Y,), (C1, C2))
    x = rand(7)
    (y,) = evaluate(fn, [x, rand(3)])                   # C1 from A, then C2 = 4
    np.testing.assert_array_equal(y, x[3:])
    H = te.Var("H")
    Z = te.placeholder("Z", ((H - 1) // 2 + 1,))
    fn2 = te.Function("g", (Z,), (te.compute("Y", (H,), lambda i: te.const(0.0, "f32")),), (H,))
    with pytest.raises(CallError, match=r"argument 'Z' \(1st\): cannot determine shape "
                                        r"variable\(s\) H"):
        evaluate(fn2, [rand(4)])
    (y,) = evaluate(fn2, [rand(4)], shape_env={"H": 7})
    assert y.shape == (7,)
    K = te.Var("K")
    fn3 = te.Function("h", (), (te.compute("Y", (K,), lambda i: i),), (K,))
    with pytest.raises(CallError, match="shape variable 'K' of 'h' is not determined"):
        evaluate(fn3, [])
    with pytest.raises(CallError, match="must be a non-negative integer"):
        evaluate(fn3, [], shape_env={"K": -1})


def test_negative_stage_size_is_a_call_error():
    N = te.Var("N")
    X = te.placeholder("X", (N,))
    Y = te.compute("Y", (N - 3,), lambda i: X[i])
    with pytest.raises(CallError, match=r"stage 'Y'.*N - 3 is -1"):
        evaluate(te.Function("f", (X,), (Y,), (N,)), [rand(2)])
