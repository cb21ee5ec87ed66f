"""The dtypes u16, u32, u64 (unsigned, wrapping as numpy) and f16 (stored as IEEE half,
computed in f32, rounded on each store) on the reference, the interpreter and host C
(issue 23): arithmetic against numpy, casts between every pair of dtypes, wrapping,
float-to-unsigned saturation, one rounding per store, the f32 accumulator of an f16
reduction, the checker's rules and the backends that refuse f16."""
import shutil
import warnings

import numpy as np
import pytest

import tdsl
from tdsl.arrays import random_array
from tdsl.errors import BuildError, CheckError
from tdsl.lowering import interp
from tdsl.lowering.dtypes import DTYPES, cast_array, is_float, to_numpy

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

UNSIGNED = ("u16", "u32", "u64")


def _everywhere(op, *args):
    """The op's outputs on the reference, the interpreter and C, each checked equal
    (bit for bit, NaN equal to NaN): returns the reference's."""
    ref = op.reference(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    got_i = interp.run(op.lower(), list(args))
    got_c = op.build()(*args)
    got_c = got_c if isinstance(got_c, tuple) else (got_c,)
    for k, (r, i, c) in enumerate(zip(ref, got_i, got_c)):
        for name, g in (("interp", i), ("C", c)):
            assert g.dtype == r.dtype, (k, name, g.dtype, r.dtype)
            np.testing.assert_array_equal(g, r, err_msg=f"output {k} on {name}")
    return ref


UNSIGNED_OPS = """
op uops_{t}(X: {t}[N], Y: {t}[N]) -> (A: {t}[N], S: {t}[N], M: {t}[N], D: {t}[N],
        R: {t}[N], Lo: {t}[N], Hi: {t}[N], L: bool[N], B: {t}[N], Sh: {t}[N], Sr: {t}[N],
        Ab: {t}[N], Ng: {t}[N]) {{
    A[i] = X[i] + Y[i]
    S[i] = X[i] - Y[i]
    M[i] = X[i] * Y[i]
    D[i] = X[i] // Y[i]
    R[i] = X[i] % Y[i]
    Lo[i] = min(X[i], Y[i])
    Hi[i] = max(X[i], Y[i])
    L[i] = X[i] < Y[i]
    B[i] = bitxor(bitand(X[i], Y[i]), bitnot(Y[i]))
    Sh[i] = shl(X[i], Y[i] % 70)
    Sr[i] = shr(X[i], Y[i] % 70)
    Ab[i] = abs(X[i])
    Ng[i] = -X[i]
}}
"""


def _unsigned_inputs(t, n=64, seed=0):
    rng = np.random.default_rng(seed)
    dt = to_numpy(t)
    top = np.iinfo(dt).max
    edges = np.array([0, 1, 2, top, top - 1, top // 2, top // 2 + 1, 255, 256, 65535],
                     dtype=np.uint64).astype(dt)
    x = np.concatenate([edges, rng.integers(0, top, n - len(edges), dtype=dt,
                                            endpoint=True)])
    y = np.concatenate([edges[::-1], rng.integers(0, top, n - len(edges), dtype=dt,
                                                  endpoint=True)])
    y[5] = 0                                       # a zero divisor gives 0
    return x, y


@needs_gcc
@pytest.mark.parametrize("t", UNSIGNED)
def test_unsigned_arithmetic_wraps_as_numpy(t):
    op = tdsl.loads(UNSIGNED_OPS.format(t=t))[f"uops_{t}"]
    x, y = _unsigned_inputs(t)
    A, S, M, D, R, Lo, Hi, L, B, Sh, Sr, Ab, Ng = _everywhere(op, x, y)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(A, x + y)
        np.testing.assert_array_equal(S, x - y)
        np.testing.assert_array_equal(M, x * y)
        safe = np.where(y == 0, 1, y).astype(x.dtype)
        np.testing.assert_array_equal(D, np.where(y == 0, 0, x // safe))
        np.testing.assert_array_equal(R, np.where(y == 0, 0, x % safe))
        np.testing.assert_array_equal(Lo, np.minimum(x, y))
        np.testing.assert_array_equal(Hi, np.maximum(x, y))
        np.testing.assert_array_equal(L, x < y)
        np.testing.assert_array_equal(B, (x & y) ^ ~y)
        bits = x.dtype.itemsize * 8
        n = y % x.dtype.type(70)
        big = n >= bits
        s = np.where(big, 0, n).astype(x.dtype)
        np.testing.assert_array_equal(Sh, np.where(big, 0, x << s))
        np.testing.assert_array_equal(Sr, np.where(big, 0, x >> s))
        np.testing.assert_array_equal(Ab, x)
        np.testing.assert_array_equal(Ng, -x)


@needs_gcc
def test_wrapping_at_the_edges():
    m = tdsl.loads("""
op wrap(A: u16[N], B: u32[N], C: u64[N]) -> (X: u16[N], Y: u32[N], Z: u64[N], W: u16[N]) {
    X[i] = A[i] * A[i] + 1
    Y[i] = B[i] - 1
    Z[i] = C[i] * 3 + 18446744073709551615
    W[i] = u16(B[i]) + u16(C[i])
}
""")
    a = np.array([65535, 0, 256, 1], np.uint16)
    b = np.array([0, 1, 4294967295, 65536 + 7], np.uint32)
    c = np.array([2**64 - 1, 2**63, 0, 2**32 + 5], np.uint64)
    X, Y, Z, W = _everywhere(m["wrap"], a, b, c)
    assert X.tolist() == [2, 1, 1, 2]              # 65535 * 65535 wraps to 1, not UB
    assert Y.tolist() == [4294967295, 0, 4294967294, 65542]
    assert Z.tolist() == [(int(v) * 3 - 1) % 2**64 for v in c]
    assert W.tolist() == [65535, 1, 65535, 12]


F16_OPS = """
op h(X: f16[N], Y: f16[N], Z: f32[N]) -> (A: f16[N], B: f16[N], C: f16[N], D: f32[N],
        E: bool[N], F: f16[N], G: f16[N]) {
    A[i] = X[i] + Y[i]
    B[i] = X[i] * Y[i] - 0.1
    C[i] = X[i] / Y[i]
    D[i] = f32(X[i]) * Z[i]
    E[i] = X[i] < Y[i]
    F[i] = select(X[i] > 0, sqrt(X[i]), exp(Y[i]))
    G[i] = f16(Z[i])
}
"""


@needs_gcc
def test_f16_ops_are_f32_ops_rounded_once():
    op = tdsl.loads(F16_OPS)["h"]
    rng = np.random.default_rng(1)
    x = rng.standard_normal(50).astype(np.float16)
    y = rng.standard_normal(50).astype(np.float16)
    z = (rng.standard_normal(50) * 3e4).astype(np.float32)   # some past f16's 65504
    x[:3] = [np.inf, -0.0, 65504]
    A, B, C, D, E, F, G = _everywhere(op, x, y, z)
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    f16 = np.float16
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(A, x + y)           # one op: numpy's float16 too
        np.testing.assert_array_equal(B, (xf * yf - np.float32(f16(0.1))).astype(f16))
        np.testing.assert_array_equal(C, x / y)
        np.testing.assert_array_equal(D, xf * z)
        np.testing.assert_array_equal(E, x < y)
        want_f = np.where(xf > 0, np.sqrt(xf), np.exp(yf)).astype(f16)
        np.testing.assert_allclose(F.astype(np.float32), want_f, rtol=1e-3)
        np.testing.assert_array_equal(G, z.astype(f16))


@needs_gcc
def test_f16_rounds_on_each_store_and_not_between():
    m = tdsl.loads("""
op fused(X: f16[N], Y: f16[N], Z: f16[N]) -> A: f16[N] { A[i] = X[i] * Y[i] + Z[i] }
op staged(X: f16[N], Y: f16[N], Z: f16[N]) -> A: f16[N] {
    T: f16[N]
    T[i] = X[i] * Y[i]
    A[i] = T[i] + Z[i]
}
""")
    rng = np.random.default_rng(2)
    x, y, z = (rng.standard_normal(4000).astype(np.float16) for _ in range(3))
    xf, yf, zf = (v.astype(np.float32) for v in (x, y, z))
    fused = _everywhere(m["fused"], x, y, z)[0]
    staged = _everywhere(m["staged"], x, y, z)[0]
    np.testing.assert_array_equal(fused, (xf * yf + zf).astype(np.float16))
    np.testing.assert_array_equal(staged, x * y + z)       # numpy rounds after each op
    assert (fused != staged).any()                          # the two roundings differ


@needs_gcc
def test_an_f16_sum_accumulates_in_f32():
    op = tdsl.loads("op total(X: f16[N]) -> S: f16 { S = sum[k](X[k]) }")["total"]
    x = np.ones(3000, np.float16)
    s = _everywhere(op, x)[0]
    assert s == 3000           # an f16 accumulator would stop at 2048 (2048 + 1 rounds back)


@needs_gcc
def test_an_f16_scalar_parameter_and_random_arrays():
    op = tdsl.loads("op scale(X: f16[N], s: f16) -> Y: f16[N] { Y[i] = X[i] * s }")["scale"]
    x = np.array([1, 2, -3, 0.5], np.float16)
    for s in (np.float16(1.5), 1.5):
        np.testing.assert_array_equal(op.build()(x, s), x * np.float16(1.5))
    np.testing.assert_array_equal(op.reference(x, np.float16(1.5)), x * np.float16(1.5))
    rng = np.random.default_rng(0)
    for t in ("f16", *UNSIGNED):
        a = random_array((100,), t, rng)
        assert a.dtype == to_numpy(t) and np.isfinite(a.astype(np.float64)).all()


# ------------------------------------------------------------------ casts, every pair

NUMERIC = [d for d in DTYPES if d != "bool"]


def _cast_source(t):
    if is_float(t):
        v = [0.0, -0.0, 0.5, -0.5, 1.7, -2.5, 100.25, 255.5, 300.0, -300.0, 65504.0,
             65520.0, 7e4, 3e9, -3e9, 5e18, 2e19, 1e30, 1e-8, np.inf, -np.inf, np.nan]
        with np.errstate(all="ignore"):
            return np.array(v, np.float64).astype(to_numpy(t))
    info = np.iinfo(to_numpy(t))
    v = [0, 1, -1, 127, 128, 255, 256, 300, -300, 32767, 65535, 65536, 70000, 2**31 - 1,
         2**31, 2**32 + 3, 2**53 + 1, 2**63 - 1, info.min, info.max, 2049, -2049]
    return np.array([x % 2**info.bits for x in v], np.uint64).astype(to_numpy(t))  # wraps


def _cast_op():
    params = ", ".join(f"X{s}: {s}[N]" for s in DTYPES)
    outs = ", ".join(f"Y{s}_{d}: {d}[N]" for s in DTYPES for d in DTYPES)
    body = "\n".join(f"    Y{s}_{d}[i] = {d}(X{s}[i])" for s in DTYPES for d in DTYPES)
    return tdsl.loads(f"op casts({params}) -> ({outs}) {{\n{body}\n}}")["casts"]


@needs_gcc
def test_casts_between_every_pair_of_dtypes():
    op = _cast_op()
    srcs = {s: _cast_source(s) if s != "bool" else
            np.array([True, False] * 11) for s in DTYPES}
    got = _everywhere(op, *srcs.values())
    k = 0
    for s in DTYPES:
        for d in DTYPES:
            x = srcs[s]
            if d == "bool":
                want = x != 0
            else:
                with np.errstate(all="ignore"):
                    want = cast_array(x, d)          # float -> int saturates, else numpy
            np.testing.assert_array_equal(got[k], want, err_msg=f"{s} -> {d}")
            k += 1
    # the saturation rule on the unsigned types: the range's ends, NaN -> 0
    for d in UNSIGNED:
        top = np.iinfo(to_numpy(d)).max
        y = got[DTYPES.index("f32") * len(DTYPES) + DTYPES.index(d)]
        x = srcs["f32"]
        assert (y[x <= 0] == 0).all() and (y[np.isnan(x)] == 0).all()
        assert y[x == np.inf][0] == top and y[x == np.float32(1e30)][0] == top


# ------------------------------------------------------------------ the checker

@pytest.mark.parametrize("src, message", [
    ("op bad(X: f16[N], Y: f32[N]) -> Z: f32[N] { Z[i] = X[i] + Y[i] }",
     "different dtypes: f16 and f32"),
    ("op bad(X: u32[N], Y: u64[N]) -> Z: u64[N] { Z[i] = X[i] + Y[i] }",
     "different dtypes: u32 and u64"),
    ("op bad(X: u16[N]) -> Z: u16[N] { Z[i] = X[i] * 1.5 }", "float literal can't be used as u16"),
    ("op bad(X: f16[N]) -> Z: f32[N] { Z[i] = X[i] }", "has dtype f16 but f32 is needed"),
    ("op bad(X: u32[N]) -> Z: u32[N] { Z[i] = X[i] / X[i] }", "needs a float operand, got u32"),
])
def test_no_implicit_conversions(src, message):
    with pytest.raises(CheckError, match=message):
        tdsl.loads(src)["bad"].function()


def test_literals_adapt_and_out_of_range_ones_warn():
    tdsl.loads("op ok(X: f16[N], U: u64[N]) -> (A: f16[N], B: u64[N]) "
               "{ A[i] = X[i] * 2 + 0.5\n B[i] = U[i] + 18446744073709551615 }")["ok"].function()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tdsl.loads("op w(U: u16[N]) -> B: u16[N] { B[i] = U[i] + 70000 }")["w"].function()
    assert any("does not fit in u16" in str(x.message) for x in w)


def test_f16_is_refused_on_the_device_backends():
    f = tdsl.loads("op h(X: f16[N]) -> Y: f16[N] { Y[i] = X[i] * 2 }")["h"].lower()
    from tdsl.emit_cuda.build import emit_cuda
    from tdsl.emit_opencl.build import emit_opencl
    for emit, name in ((emit_opencl, "OpenCL"), (emit_cuda, "CUDA")):
        with pytest.raises(BuildError, match=f"tensors of X: f16, Y: f16 are not supported "
                                             f"on {name}"):
            emit(f)


@needs_gcc
@pytest.mark.parametrize("fuse", [True, False])
def test_a_graph_of_f16_and_u32_ops_rounds_at_each_op(fuse):
    g = tdsl.loads("""
op half_mul(X: f16[N], W: f16[N]) -> Y: f16[N] { Y[i] = X[i] * W[i] + 1 }
op widen(X: f16[N], U: u32[N]) -> Y: f32[N] { Y[i] = f32(X[i]) + f32(U[i]) }
graph g(x: f16[N], u: u32[N]) -> y: f32[N] {
    param w: f16[N]
    h = half_mul(x, w)
    y = widen(h, u)
}
""")["g"]
    x = np.array([1.5, -2, 3.25, 1000, 0.1], np.float16)
    u = np.array([1, 2, 4294967295, 7, 0], np.uint32)
    w = np.array([0.1, 0.2, 0.3, 70, 0.3], np.float16)
    with np.errstate(over="ignore"):
        h = (x.astype(np.float32) * w + 1).astype(np.float16)   # rounded: an op's output
    want = h.astype(np.float32) + u.astype(np.float32)
    np.testing.assert_array_equal(g.reference(x, u, params={"w": w}), want)
    np.testing.assert_array_equal(g.build(params={"w": w}, fuse=fuse)(x, u), want)


@needs_gcc
def test_folded_constants_wrap_everywhere():
    op = tdsl.loads("""
op cf(X: u32[N], Y: i32[N], Z: u64[N]) -> (A: u32[N], B: u32[N], C: i32[N], D: u64[N],
        E: u16[N]) {
    A[i] = X[i] + (u32(4294967295) + u32(1))
    B[i] = X[i] + (u32(0) - u32(1))
    C[i] = Y[i] + (i32(2147483647) + i32(1))
    D[i] = Z[i] + u64(18446744073709551615) * u64(3)
    E[i] = u16(X[i]) + u16(65535) * u16(65535)
}
""")["cf"]
    x, y, z = np.array([0, 5], np.uint32), np.array([0, 5], np.int32), np.array([0, 5], np.uint64)
    A, B, C, D, E = _everywhere(op, x, y, z)
    assert A.tolist() == [0, 5] and B.tolist() == [4294967295, 4]
    assert C.tolist() == [-2**31, -2**31 + 5] and D.tolist() == [2**64 - 3, 2]
    assert E.tolist() == [1, 6]
