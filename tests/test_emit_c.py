"""The C printer: loop IR -> C text, compiled by gcc and compared with numpy.

Hand-written LoweredFuncs stand in for the lowering: each test builds the loop nest a
schedule would produce and checks both the text (where the text is the point: parentheses,
pragmas, vector types) and the numbers (always, against numpy).
"""
import platform
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.errors import BuildError
from tdsl.emit_c import BuildCache, HostC, build_kernel, emit_c
from tdsl.lowering import te
from tdsl.lowering.loop_ir import (Allocate, Barrier, Broadcast, Buffer, BufferLoad, For, ForKind,
                                   If, LetStmt, LoweredFunc, Ramp, Seq, Store)
from tdsl.target import Target

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
rng = np.random.default_rng(0)


def c(value, dtype="i64"):
    return te.Const(value, dtype)


def load(buf, *indices):
    return BufferLoad(buf, tuple(indices), buf.dtype)


def loop(var, extent, body, kind=ForKind.SERIAL, start=0):
    return For(var, c(start), extent, kind, body)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return BuildCache(tmp_path_factory.mktemp("cache") / "tdsl")


def elementwise(fn, in_dtypes, out_dtype, name="ew", kind=ForKind.SERIAL):
    """out[i] = fn(in0[i], in1[i], ...) over a symbolic length n."""
    n, i = te.Var("n"), te.Var("i")
    ins = [Buffer(f"x{k}", dt, (n,)) for k, dt in enumerate(in_dtypes)]
    out = Buffer("out", out_dtype, (n,))
    body = loop(i, n, Store(out, (i,), fn(*[load(b, i) for b in ins])), kind)
    return LoweredFunc(name, (*ins, out), body, (n,), len(ins))


# ------------------------------------------------------------------ the loop-nest dump

def test_loop_printer_reads_like_a_loop_nest():
    m, n = te.Var("M"), te.Var("N")
    a, out = Buffer("A", "f32", (m, n)), Buffer("C", "f32", (m, n))
    io, ji, t = te.Var("i.o"), te.Var("j.i"), te.Var("t")
    tmp = Buffer("T", "f32", (c(16),), scope="local")
    body = loop(io, m, Allocate(tmp, loop(ji, n, Seq((
        LetStmt(t, io * 2, Store(out, (io, ji), load(a, io, ji) * c(2.0, "f32"))),
        If(te.binary("<", ji, c(3)), Store(tmp, (ji,), c(0.0, "f32")),
           Store(tmp, (c(0),), c(1.0, "f32"), predicate=te.binary(">", t, c(0))))),
    ), ForKind.VECTORIZED)), ForKind.PARALLEL)
    func = LoweredFunc("scale", (a, out), body, (m, n), 1)
    assert str(func) == """\
func scale(A: f32[M, N]) -> C: f32[M, N]:  # sizes: M, N
  parallel i.o in [0, M):
    allocate T: f32[16] in local
    vectorized j.i in [0, N):
      let t = i.o * 2
      C[i.o, j.i] = A[i.o, j.i] * 2.0
      if j.i < 3:
        T[j.i] = 0.0
      else:
        T[0] = 1.0 if t > 0"""
    vec = Store(out, (Ramp(c(0), c(1), 16, "i64x16"),),
                Broadcast(load(a, c(1) + c(2)), 16, "f32x16"))
    assert str(vec) == "C[ramp(0, 1, 16)] = x16(A[1 + 2])"


# ------------------------------------------------------------------ precedence

SCALARS = tuple(Buffer(name, "f64", ()) for name in "abc")
a, b, cc = (load(buf) for buf in SCALARS)


def _expr_text(e):
    func = LoweredFunc("f", (*SCALARS, Buffer("out", "f64", (c(1),))), Seq(()), (), 3)
    return HostC(func).expr(e)


@pytest.mark.parametrize("expr, text", [
    ((a + b) * cc, "(a + b) * c"),
    (a - (b - cc), "a - (b - c)"),
    (a - b - cc, "a - b - c"),
    (a / (b * cc), "a / (b * c)"),
    (a * b / cc, "a * b / c"),
    (a + b * cc, "a + b * c"),
    (-(-a), "-(-a)"),
    (a * -(b + cc), "a * -(b + c)"),
    (te.select(te.binary("<", a, b), a + b, te.select(te.binary(">", b, cc), b, cc)),
     "a < b ? a + b : b > c ? b : c"),
    (te.Logical("or", te.binary("<", a, b), te.Logical("and", te.binary("<", b, cc),
                                                      te.binary("<", a, cc))),
     "a < b || b < c && a < c"),
    (te.Logical("and", te.Logical("or", te.binary("<", a, b), te.binary("<", b, cc)),
                te.binary("<", a, cc)), "(a < b || b < c) && a < c"),
    (te.Cast(a + b, "f32"), "(float)(a + b)"),
    (te.intrinsic("rsqrt", a + b), "1.0 / sqrt(a + b)"),
])
def test_precedence_gives_minimal_parentheses(expr, text):
    assert _expr_text(expr) == text


@needs_gcc
def test_random_expressions_match_numpy(cache):
    """Random trees of + - * // % over i64 (with wrapping, negatives, division by zero) and
    of + - * / over f64, printed and compiled once, must equal the same tree evaluated by
    numpy: a misplaced parenthesis changes the numbers."""
    ops = {"i64": ["+", "-", "*", "//", "%"], "f64": ["+", "-", "*", "/"]}
    n, i = te.Var("n"), te.Var("i")

    def tree(dtype, leaves, depth):
        if depth == 0 or rng.random() < 0.2:
            k = rng.integers(len(leaves) + 1)
            if k == len(leaves):
                value = int(rng.integers(-5, 6)) if dtype == "i64" else float(rng.normal())
                return c(value, dtype), np.asarray(value, dtype=dtype.replace("i", "int")
                                                   .replace("f", "float"))
            return load(leaves[k][0], i), leaves[k][1]
        op = ops[dtype][rng.integers(len(ops[dtype]))]
        (ea, va), (eb, vb) = tree(dtype, leaves, depth - 1), tree(dtype, leaves, depth - 1)
        ref = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide,
               "//": np.floor_divide, "%": np.remainder}[op](va, vb)
        return te.Binary(op, ea, eb, dtype), ref

    for dtype, np_dtype in (("i64", np.int64), ("f64", np.float64)):
        size = 64
        data = [rng.integers(-9, 10, size).astype(np_dtype) for _ in range(3)]
        ins = [Buffer(f"x{k}", dtype, (n,)) for k in range(3)]
        outs = [Buffer(f"y{k}", dtype, (n,)) for k in range(24)]
        stmts, refs = [], []
        with np.errstate(all="ignore"):
            for out in outs:
                e, ref = tree(dtype, list(zip(ins, data)), 4)
                stmts.append(Store(out, (i,), e))
                refs.append(np.broadcast_to(ref, (size,)))
        func = LoweredFunc(f"rand_{dtype}", (*ins, *outs), loop(i, n, Seq(tuple(stmts))),
                           (n,), 3)
        results = build_kernel(func, cache=cache)(*data)
        for got, ref in zip(results, refs):
            if dtype == "i64":
                np.testing.assert_array_equal(got, ref)
            else:   # gcc may contract a*b+c into an FMA: not bit-identical, but close
                np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------ whole kernels

@needs_gcc
def test_vector_add(cache):
    k = build_kernel(elementwise(lambda x, y: x + y, ("f32", "f32"), "f32"), cache=cache)
    x, y = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    np.testing.assert_array_equal(k(x, y), x + y)
    assert "(const float* restrict x0, const float* restrict x1, " \
           "float* restrict out, int64_t n)" in k.source


def matmul_func(kind=ForKind.PARALLEL):
    m, n, kk = te.Var("M"), te.Var("N"), te.Var("K")
    a, b = Buffer("A", "f32", (m, kk)), Buffer("B", "f32", (kk, n))
    out = Buffer("C", "f32", (m, n))
    i, j, k = te.Var("i"), te.Var("j"), te.Var("k")
    update = Store(out, (i, j), load(out, i, j) + load(a, i, k) * load(b, k, j))
    body = loop(i, m, loop(j, n, Seq((Store(out, (i, j), c(0.0, "f32")), loop(k, kk, update)))),
                kind)
    return LoweredFunc("matmul", (a, b, out), body, (m, n, kk), 2)


@needs_gcc
def test_matmul_with_reduction_and_parallel_loop(cache):
    k = build_kernel(matmul_func(), cache=cache)
    assert "#pragma omp parallel for schedule(static) if(M > 1)" in k.source
    a = rng.random((37, 19), dtype=np.float32)
    b = rng.random((19, 23), dtype=np.float32)
    np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-5)
    one = rng.random((1, 19), dtype=np.float32)        # one row: no team is forked
    np.testing.assert_allclose(k(one, b), one @ b, rtol=1e-5)


@needs_gcc
def test_a_parallel_loop_of_little_work_runs_in_the_caller(cache):
    """Fixed sizes whose whole nest stores less than MIN_PARALLEL_WORK lanes fork no team;
    more work, or sizes known only at the call, keep the team."""
    from tdsl.emit_c.c import MIN_PARALLEL_WORK, static_work
    small = build_kernel(matmul_func(), shapes={"M": 16, "N": 16, "K": 16}, cache=cache)
    assert "#pragma omp parallel for schedule(static) if(0)" in small.source
    a, b = rng.random((16, 16), dtype=np.float32), rng.random((16, 16), dtype=np.float32)
    np.testing.assert_allclose(small(a, b), a @ b, rtol=1e-5)
    big = build_kernel(matmul_func(), shapes={"M": 128, "N": 128, "K": 32}, cache=cache)
    assert "#pragma omp parallel for" in big.source and "if(0)" not in big.source
    m, n, k = matmul_func().shape_vars
    assert static_work(matmul_func().body, {m: 128, n: 128, k: 32}) == 128 * 128 * 33 \
        >= MIN_PARALLEL_WORK
    assert static_work(matmul_func().body) is None       # symbolic sizes: decided at the call


@needs_gcc
@pytest.mark.parametrize("stride", [1, 2])
def test_a_one_iteration_parallel_loop_runs_in_the_caller_and_stays_right(stride):
    """A parallel loop of one iteration forks no team (``if(0)``) but stays a parallel
    region: as a plain loop in the kernel, gcc 12.2 -O3 compiled conv2d_nchwc's padded copy
    at CB = 1 with a wrong mask and the answers were wrong (test_std_templates found it)."""
    op = tdsl.stdlib["conv2d_nchwc"]
    sizes = {"N": 2, "CB": 1, "IH": 3, "IW": 8, "CI": 2, "FB": 1, "KH": 3, "KW": 3, "FI": 1}
    config = {"nb": 1, "tx": 2, "ty": 1, "order": "crs", "rows": False}
    x = rng.standard_normal((2, 1, 3, 8, 2), dtype=np.float32)
    w = rng.standard_normal((1, 1, 3, 3, 2, 1), dtype=np.float32)
    k = op.build(shapes=sizes, config=config, padding=1, stride=stride)
    assert "#pragma omp parallel for schedule(static) if(0)" in k.source
    np.testing.assert_allclose(k(x, w), op.reference(x, w, padding=1, stride=stride),
                               rtol=1e-5, atol=1e-5)



def saxpy_vector_func():
    """out[16*io + l] = alpha * x[16*io + l] + y[16*io + l], vectorized 16 wide."""
    n, io = te.Var("n"), te.Var("io")
    x, y, out = (Buffer(name, "f32", (n,)) for name in ("x", "y", "out"))
    alpha = Buffer("alpha", "f32", ())
    index = Ramp(io * 16, c(1), 16, "i64x16")
    value = Broadcast(load(alpha), 16, "f32x16") * BufferLoad(x, (index,), "f32x16") + \
        BufferLoad(y, (index,), "f32x16")
    body = loop(io, n // 16, Store(out, (index,), value), ForKind.PARALLEL)
    return LoweredFunc("saxpy", (alpha, x, y, out), body, (n,), 3)


@needs_gcc
def test_vectorized_ramp_and_broadcast_use_gnu_vector_types(cache):
    k = build_kernel(saxpy_vector_func(), cache=cache)
    assert "typedef float tdsl_f32x16 __attribute__((vector_size(64)));" in k.source
    assert "tdsl_store_f32x16(&out[io * 16], tdsl_bcast_f32x16(alpha) * " \
           "tdsl_load_f32x16(&x[io * 16]) + tdsl_load_f32x16(&y[io * 16]));" in k.source
    x = rng.random(64, dtype=np.float32)[1:49]      # misaligned start: loads are unaligned
    y = rng.random(48, dtype=np.float32)
    np.testing.assert_allclose(k(np.float32(2.5), x, y), 2.5 * x + y, rtol=1e-6)


@needs_gcc
def test_vector_accumulator_lives_in_a_named_vector_variable(cache):
    n, io = te.Var("n"), te.Var("io")
    x, out = Buffer("x", "f32", (n,)), Buffer("out", "f32", (n,))
    acc = te.Var("acc", "f32x16")
    index = Ramp(io * 16, c(1), 16, "i64x16")
    body = loop(io, n // 16, LetStmt(acc, BufferLoad(x, (index,), "f32x16"),
                                     Store(out, (index,), acc * acc + acc)))
    k = build_kernel(LoweredFunc("sq", (x, out), body, (n,), 1), cache=cache)
    assert "const tdsl_f32x16 acc = tdsl_load_f32x16(&x[io * 16]);" in k.source
    x = rng.random(32, dtype=np.float32)
    np.testing.assert_allclose(k(x), x * x + x, rtol=1e-6)


# A guarded load that would fault if evaluated: 2**28 elements (1 GiB) per lane past the
# array, a canonical address (a non-canonical one faults even under an AVX-512 mask).
FAR = 2**28


@needs_gcc
def test_vector_select_guards_its_loads_lane_by_lane(cache):
    """out[l] = select(l < n, x[l * FAR], -1) for l in [0, 16): lanes past n never load."""
    n = te.Var("n")
    x, out = Buffer("x", "f32", (n,)), Buffer("out", "f32", (c(16),))
    lanes = Ramp(c(0), c(1), 16, "i64x16")
    cond = te.Compare("<", lanes, Broadcast(n, 16, "i64x16"), "boolx16")
    guarded = BufferLoad(x, (Ramp(c(0), c(FAR), 16, "i64x16"),), "f32x16")
    value = te.Select(cond, guarded, Broadcast(c(-1.0, "f32"), 16, "f32x16"), "f32x16")
    k = build_kernel(LoweredFunc("guard", (x, out), Store(out, (lanes,), value), (n,), 1),
                     cache=cache)
    assert "for (int64_t lane = 0; lane < 16; ++lane)" in k.source
    assert "lane < n ? x[268435456 * lane] : -1.0f" in k.source
    x = np.array([4.0], np.float32)
    np.testing.assert_array_equal(k(x), [4.0] + [-1.0] * 15)


@needs_gcc
def test_scalar_select_does_not_evaluate_the_untaken_load(cache):
    n, i = te.Var("n"), te.Var("i")
    x, out = Buffer("x", "i32", (n,)), Buffer("out", "i32", (n + 8,))
    value = te.select(te.binary("<", i, n), load(x, i * FAR), c(7, "i32"))
    func = LoweredFunc("pad", (x, out), loop(i, n + 8, Store(out, (i,), value)), (n,), 1)
    got = build_kernel(func, cache=cache)(np.array([3], np.int32))
    np.testing.assert_array_equal(got, [3] + [7] * 8)


@needs_gcc
def test_strided_vector_load_is_a_gather(cache):
    m, io = te.Var("m"), te.Var("io")
    x, out = Buffer("x", "f64", (m,)), Buffer("out", "f64", (m // 2,))
    value = BufferLoad(x, (Ramp(io * 16, c(2), 8, "i64x8"),), "f64x8")
    body = loop(io, m // 16, Store(out, (Ramp(io * 8, c(1), 8, "i64x8"),), value))
    k = build_kernel(LoweredFunc("evens", (x, out), body, (m,), 1), cache=cache)
    x = rng.random(32)
    np.testing.assert_array_equal(k(x), x[::2])


@needs_gcc
@pytest.mark.parametrize("dtype", ["i8", "i32", "i64"])
def test_floor_division_and_modulo_on_negative_integers(cache, dtype):
    np_dtype = np.dtype({"i8": np.int8, "i32": np.int32, "i64": np.int64}[dtype])
    lo = np.iinfo(np_dtype).min
    x = np.array([7, -7, 7, -7, 0, lo, lo, 5, -5, 3], np_dtype)
    y = np.array([2, 2, -2, -2, 3, -1, 1, 0, 0, 1], np_dtype)
    for op, ref in (("//", np.floor_divide), ("%", np.remainder)):
        func = elementwise(lambda a, b: te.Binary(op, a, b, dtype), (dtype, dtype), dtype,
                           name="div" if op == "//" else "mod")
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(build_kernel(func, cache=cache)(x, y), ref(x, y))


@needs_gcc
def test_floor_division_by_a_constant_uses_plain_c_only_when_nonnegative(cache):
    func = elementwise(lambda a: te.Binary("//", a, c(4, "i64"), "i64") +
                       te.Binary("%", te.Var("i"), c(4), "i64"), ("i64",), "i64")
    k = build_kernel(func, cache=cache)
    assert "tdsl_floordiv_i64(x0[i], 4) + i % 4" in k.source
    x = np.arange(-9, 9, dtype=np.int64)
    np.testing.assert_array_equal(k(x), x // 4 + np.arange(18) % 4)


@needs_gcc
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_float_floor_division_and_modulo_follow_numpy(cache, dtype):
    np_dtype = np.float32 if dtype == "f32" else np.float64
    x = np.array([7.5, -7.5, 7.5, -7.5, 0.0, 5.0, 1e-3], np_dtype)
    y = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 0.0, 7.0], np_dtype)
    for op, ref in (("//", np.floor_divide), ("%", np.remainder)):
        func = elementwise(lambda a, b: te.Binary(op, a, b, dtype), (dtype, dtype), dtype)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(build_kernel(func, cache=cache)(x, y), ref(x, y))


UNARY_REFS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "abs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "sin": np.sin, "cos": np.cos,
}
BINARY_REFS = {"min": np.minimum, "max": np.maximum, "pow": np.power}


def _erf(x):
    from math import erf
    return np.array([erf(v) for v in x.astype(np.float64)])


@needs_gcc
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", [*UNARY_REFS, *BINARY_REFS, "erf"])
def test_float_intrinsics_match_numpy(cache, dtype, name):
    np_dtype = np.float32 if dtype == "f32" else np.float64
    x = (rng.random(257) * 6 - 3).astype(np_dtype)
    x[:4] = [0.5, 1.5, 2.5, -0.5]           # round() halves go to even, as numpy's do
    y = (rng.random(257) * 3).astype(np_dtype)
    if name in ("log", "sqrt", "rsqrt", "pow"):
        x = np.abs(x) + np_dtype(0.1)
    if name in BINARY_REFS:
        func = elementwise(lambda a, b: te.intrinsic(name, a, b), (dtype, dtype), dtype)
        got, ref = build_kernel(func, cache=cache)(x, y), BINARY_REFS[name](x, y)
    else:
        func = elementwise(lambda a: te.intrinsic(name, a), (dtype,), dtype)
        got = build_kernel(func, cache=cache)(x)
        ref = _erf(x) if name == "erf" else UNARY_REFS[name](x)
    tol = 2e-6 if dtype == "f32" else 1e-14
    np.testing.assert_allclose(got, ref.astype(np_dtype), rtol=tol, atol=tol)


@needs_gcc
def test_min_max_propagate_nan_like_numpy(cache):
    x = np.array([np.nan, 1.0, 2.0, np.nan], np.float32)
    y = np.array([1.0, np.nan, 1.0, np.nan], np.float32)
    for name, ref in BINARY_REFS.items():
        if name != "pow":
            func = elementwise(lambda a, b: te.intrinsic(name, a, b), ("f32", "f32"), "f32")
            np.testing.assert_array_equal(build_kernel(func, cache=cache)(x, y), ref(x, y))


@needs_gcc
@pytest.mark.parametrize("target", ["c", "c -march=x86-64-v3"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_vector_min_max_are_the_scalar_ones_bit_for_bit(target, dtype):
    """The vector min/max (vminps/vmaxps and a NaN pick with AVX-512 or AVX) give the
    scalar helpers' results: a NaN on either side, and a on a tie of +0 and -0."""
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the x86 vector forms; this host is not x86")
    special = np.array([np.nan, -np.inf, np.inf, 0.0, -0.0, 1.0, -1.0, 2.5])
    a = np.resize(np.repeat(special, len(special)), 128).astype(dtype.replace("f", "float"))
    b = np.resize(np.tile(special, len(special)), 128).astype(a.dtype)
    for name in ("min", "max"):
        op = tdsl.loads(f"op c(A: {dtype}[N], B: {dtype}[N]) -> Y: {dtype}[N] "
                        f"{{ Y[i] = {name}(A[i], B[i]) }}")["c"]
        vec = op.build(target=target, shapes=dict(N=128))
        scalar = op.build(target=target, schedule=op.schedule("naive"), shapes=dict(N=128))
        assert f"tdsl_{name}_{dtype}x" in vec.source
        got, want = vec(a, b), scalar(a, b)
        nan = np.isnan(a) | np.isnan(b)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(np.isnan(want), nan)
        bits = f"u{a.itemsize}"                          # -0.0 and 0.0 told apart
        np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))


@needs_gcc
@pytest.mark.parametrize("dtype", ["i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64"])
def test_integer_vector_min_max(dtype):
    """Integer min/max vectorize (a u8 max pool's taps) through the compare's mask and give
    numpy's minimum and maximum, the type's extremes and signedness included."""
    info = np.iinfo(dtype.replace("i", "int").replace("u", "uint"))
    rng = np.random.default_rng(0)
    special = np.array([info.min, info.max, 0, 1, info.max // 2, info.min // 2 or 3, 7, 7],
                       info.dtype)

    def values(pairs):
        return np.concatenate([pairs, rng.integers(info.min, info.max, 64, info.dtype, True)])
    a, b = values(np.repeat(special, 8)), values(np.tile(special, 8))
    for name, want in (("min", np.minimum), ("max", np.maximum)):
        op = tdsl.loads(f"op c(A: {dtype}[N], B: {dtype}[N]) -> Y: {dtype}[N] "
                        f"{{ Y[i] = {name}(A[i], B[i]) }}")["c"]
        vec = op.build(shapes=dict(N=128))
        assert f"tdsl_{name}_{dtype}x" in vec.source
        np.testing.assert_array_equal(vec(a, b), want(a, b), err_msg=name)


@needs_gcc
@pytest.mark.parametrize("dtype", ["i8", "u8", "i32", "i64"])
def test_integer_intrinsics_and_wrapping_arithmetic(cache, dtype):
    np_dtype = np.dtype({"i8": "int8", "u8": "uint8", "i32": "int32", "i64": "int64"}[dtype])
    info = np.iinfo(np_dtype)
    x = np.array([info.min, info.max, 0, 1, -1 if info.min else 2, 100, info.max], np_dtype)
    y = np.array([1, 1, info.max, info.min, 3, 100, 3], np_dtype)
    cases = {
        "min": (lambda a, b: te.intrinsic("min", a, b), np.minimum),
        "max": (lambda a, b: te.intrinsic("max", a, b), np.maximum),
        "abs": (lambda a, b: te.intrinsic("abs", a), lambda a, b: np.abs(a)),
        "add": (lambda a, b: a + b, np.add),
        "sub": (lambda a, b: a - b, np.subtract),
        "mul": (lambda a, b: a * b, np.multiply),
        "neg": (lambda a, b: -a, lambda a, b: -a),
        # wraps before dividing: C computes a + b in int, numpy in the narrow type
        "sum_div": (lambda a, b: (a + b) // te.Const(3, dtype), lambda a, b: (a + b) // 3),
    }
    with np.errstate(all="ignore"):
        for name, (fn, ref) in cases.items():
            func = elementwise(fn, (dtype, dtype), dtype, name=name)
            np.testing.assert_array_equal(build_kernel(func, cache=cache)(x, y), ref(x, y),
                                          err_msg=name)


@needs_gcc
def test_bool_logic_compares_and_casts(cache):
    func = elementwise(lambda a, b: te.Logical("or", te.Unary("not", a, "bool"),
                                               te.Logical("and", a, b)), ("bool", "bool"), "bool")
    x, y = np.array([True, True, False, False]), np.array([True, False, True, False])
    np.testing.assert_array_equal(build_kernel(func, cache=cache)(x, y), ~x | (x & y))
    casts = elementwise(lambda a: te.Cast(te.Cast(a, "i32"), "f64") +
                        te.Cast(te.binary(">", a, c(0.0, "f32")), "f64"), ("f32",), "f64")
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7], np.float32)
    got = build_kernel(casts, cache=cache)(x)
    np.testing.assert_array_equal(got, x.astype(np.int32).astype(np.float64) + (x > 0))


@needs_gcc
def test_allocations_on_stack_and_heap(cache):
    """T (global, symbolic size) is heap workspace; S (local, 8 floats) is on the stack,
    declared as a whole 64-byte line (masked vector loads never reach past it)."""
    n, i, j = te.Var("n"), te.Var("i"), te.Var("j")
    x, out = Buffer("x", "f32", (n,)), Buffer("out", "f32", (n,))
    t = Buffer("T", "f32", (n,))
    s = Buffer("S", "f32", (c(8),), scope="local")
    body = Allocate(t, Seq((
        loop(i, n, Store(t, (i,), load(x, i) * c(2.0, "f32"))),
        loop(i, n, Allocate(s, Seq((
            loop(j, c(8), Store(s, (j,), te.Cast(j, "f32")), ForKind.UNROLLED),
            Store(out, (i,), load(t, i) + load(s, te.Binary("%", i, c(8), "i64")))))),
            ForKind.PARALLEL))))
    k = build_kernel(LoweredFunc("two_stage", (x, out), body, (n,), 1), cache=cache)
    assert "float* restrict T = (float*)tdsl_alloc(n, sizeof(float), &tdsl_status);" in k.source
    assert "float S[16] __attribute__((aligned(64)));" in k.source
    assert "#pragma GCC unroll 8" in k.source
    x = rng.random(21, dtype=np.float32)
    np.testing.assert_allclose(k(x), 2 * x + np.arange(21) % 8, rtol=1e-6)


@needs_gcc
def test_awkward_names_become_distinct_c_identifiers(cache):
    n = te.Var("int")
    a1, a2 = Buffer("exp", "f32", (n,)), Buffer("exp", "f32", (n,))
    out = Buffer("free", "f32", (n,))
    i_dot, i_us = te.Var("i.o"), te.Var("i_o")
    body = loop(i_dot, n, LetStmt(i_us, i_dot, Store(out, (i_us,), te.intrinsic(
        "exp", load(a1, i_dot)) + load(a2, i_us))))
    k = build_kernel(LoweredFunc("tdsl_fn", (a1, a2, out), body, (n,), 2), cache=cache)
    x, y = rng.random(9, dtype=np.float32), rng.random(9, dtype=np.float32)
    np.testing.assert_allclose(k(x, y), np.exp(x) + y, rtol=1e-6)


@needs_gcc
def test_constants_wide_literals_and_nonfinite(cache):
    big = te.Binary("*", c(3), c(1_000_000_000), "i64")        # overflows a C int
    func = elementwise(lambda a: a + big + c(2**40) + c(-2**63) - c(-2**63), ("i64",), "i64")
    x = np.arange(3, dtype=np.int64)
    np.testing.assert_array_equal(build_kernel(func, cache=cache)(x), x + 3 * 10**9 + 2**40)
    func = elementwise(lambda a: te.intrinsic("min", a, c(float("inf"), "f64")) +
                       te.intrinsic("max", a, c(-float("inf"), "f64")), ("f64",), "f64")
    np.testing.assert_array_equal(build_kernel(func, cache=cache)(np.ones(2)), [2.0, 2.0])


@needs_gcc
def test_odd_lane_counts_print_lane_by_lane(cache):
    n, io = te.Var("n"), te.Var("io")
    x, out = Buffer("x", "f32", (n,)), Buffer("out", "f32", (n,))
    index = Ramp(io * 3, c(1), 3, "i64x3")
    v = te.Var("v", "f32x3")
    twice = BufferLoad(x, (index,), "f32x3") * Broadcast(c(2.0, "f32"), 3, "f32x3")
    body = loop(io, n // 3, LetStmt(v, twice, Store(out, (index,), te.intrinsic("exp", v) + v)))
    k = build_kernel(LoweredFunc("odd", (x, out), body, (n,), 1), cache=cache)
    assert "float v[3];" in k.source
    x = rng.random(9, dtype=np.float32)
    np.testing.assert_allclose(k(x), np.exp(2 * x) + 2 * x, rtol=1e-6)


@needs_gcc
@pytest.mark.parametrize("name", ["omp_get_thread_num", "_init", "_fini", "malloc", "main",
                                  "tdsl_floordiv_i64"])
def test_ops_named_like_library_symbols_build_and_run(name):
    """The function is static tdsl_<op>_<digest>, exported as <op>_run: no name an op may
    have meets libc, the C runtime, OpenMP or tdsl's own helpers."""
    import tdsl
    op = tdsl.loads(f"op {name}(X: f32[N]) -> Y: f32[N] {{ Y[i] = X[i] * 2.0 }}")[name]
    x = np.arange(4096, dtype=np.float32)
    np.testing.assert_array_equal(op.build()(x), x * 2)


@needs_gcc
def test_the_library_exports_one_stable_name_whatever_the_op_becomes():
    """C that links a kernel's library calls <op>_run, as it does an embedded build's: the
    content-hashed function (which changes with every edit of the op) stays internal."""
    import subprocess
    import tdsl
    names = []
    for scale in ("2.0", "3.0"):
        op = tdsl.loads(f"op twice(X: f32[N]) -> Y: f32[N] {{ Y[i] = X[i] * {scale} }}")["twice"]
        kernel = op.build(specialize=False)
        assert "int twice_run(const float* restrict X, float* restrict Y, int64_t N);" \
            in kernel.header
        nm = subprocess.run(["nm", "-D", "--defined-only", str(kernel.lib_path)],
                            capture_output=True, text=True, check=True).stdout
        names.append(sorted(line.split()[-1] for line in nm.splitlines()
                            if line.split()[-2] == "T"))
    assert names[0] == names[1] == ["twice_run"]


def test_fixed_sizes_become_constants():
    module = emit_c(matmul_func(), shapes={"K": 64})
    assert module.name == "matmul_run"
    assert module.prototype == (f"int {module.name}(const float* restrict A, "
                                "const float* restrict B, "
                                "float* restrict C, int64_t M, int64_t N)")
    assert "const int64_t K = 64;" in module.source
    assert module.prototype + ";" in module.header
    with pytest.raises(BuildError, match="no size called Q"):
        emit_c(matmul_func(), shapes={"Q": 1})


def test_vectorized_loops_get_simd_and_no_threads_inside():
    func = matmul_func(kind=ForKind.VECTORIZED)
    inner = For(te.Var("p"), c(0), c(4), ForKind.PARALLEL, func.body)
    text = emit_c(LoweredFunc("m", func.params, inner, func.shape_vars, 2)).source
    assert text.count("#pragma omp parallel for") == 1 and "#pragma omp simd" in text
    nested = For(te.Var("p"), c(0), c(4), ForKind.VECTORIZED, func.body)
    text = emit_c(LoweredFunc("m", func.params, nested, func.shape_vars, 2)).source
    assert "#pragma omp parallel for" not in text     # OpenMP forbids it inside simd


@pytest.mark.parametrize("make, message", [
    (lambda out, i: Barrier(), "has no shared-memory barrier"),
    (lambda out, i: For(i, c(0), c(4), ForKind.THREAD_BINDING, Store(out, (i,), c(0.0, "f32")),
                        thread_tag="threadIdx.x"), "cannot bind loop i to threadIdx.x"),
    (lambda out, i: Allocate(Buffer("sh", "f32", (c(4),), scope="shared"), Seq(())),
     "no shared memory"),
    (lambda out, i: Store(out, (c(0),), load(out, te.Var("q"))), "variable q is used"),
    (lambda out, i: Store(out, (c(0),), te.Cast(te.intrinsic("exp", c(1)), "f32")),
     "exp needs a float argument"),
    (lambda out, i: Store(out, (c(0),), load(Buffer("ghost", "f32", (c(1),)), c(0))),
     "buffer ghost is used"),
    (lambda out, i: Store(out, (c(0),), te.Load(te.placeholder("P", (1,)), (c(0),), "f32")),
     "cannot print Load"),
])
def test_constructs_host_c_cannot_express_are_build_errors(make, message):
    out = Buffer("out", "f32", (c(4),))
    func = LoweredFunc("bad", (out,), make(out, te.Var("i")), (), 0)
    with pytest.raises(BuildError, match=message):
        emit_c(func)


def test_stores_into_inputs_are_refused():
    x = Buffer("x", "f32", (c(4),))
    func = LoweredFunc("bad", (x, Buffer("y", "f32", (c(4),))),
                       Store(x, (c(0),), c(1.0, "f32")), (), 1)
    with pytest.raises(BuildError, match="stores into its input x"):
        emit_c(func)


@needs_gcc
def test_f32_erf_is_accurate_on_a_dense_grid_and_vectorizable(cache):
    """f32 erf is tdsl's own branch-free helper (libm's erff is a call that blocks
    vectorization): within 2e-6 of float64 erf everywhere, exact at the special values."""
    func = elementwise(lambda a: te.intrinsic("erf", a), ("f32",), "f32",
                       kind=ForKind.VECTORIZED)
    source = emit_c(func).source
    assert "tdsl_erf_f32(" in source and "erff(" not in source
    x = np.linspace(-8, 8, 400_001).astype(np.float32)
    got = build_kernel(func, cache=cache)(x)
    assert np.abs(got - _erf(x)).max() <= 2e-6
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30], np.float32)
    got = build_kernel(func, cache=cache)(special)
    np.testing.assert_array_equal(got[:2], [1.0, -1.0])
    assert np.isnan(got[2]) and got[3] == 0 and np.signbit(got[4])
    np.testing.assert_allclose(got[5], 1.1283791e-30, rtol=1e-6)


def _assert_exp_is_within_two_ulp(kernel):
    x = np.linspace(-110, 90, 800_001).astype(np.float32)
    got = kernel(x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    normal = (ref > np.finfo(np.float32).tiny) & (ref < np.finfo(np.float32).max)
    ulp = np.spacing(ref[normal].astype(np.float32)).astype(np.float64)
    assert (np.abs(got[normal] - ref[normal]) / ulp).max() <= 2
    tiny = np.finfo(np.float32).smallest_subnormal
    assert np.abs(got[~normal & (ref < 1)] - ref[~normal & (ref < 1)]).max() <= tiny
    assert np.isinf(got[ref >= np.finfo(np.float32).max]).all()
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -200.0, 89.0, -np.nan, 88.72], np.float32)
    got = kernel(np.tile(special, 8))[:8]      # whole vectors of them
    assert got[0] == np.inf and got[1] == 0 and np.isnan(got[2]) and got[3] == 1 and got[4] == 0
    assert got[5] == np.inf and np.isnan(got[6]) and np.isfinite(got[7])


@needs_gcc
def test_f32_exp_is_within_two_ulp_down_to_denormals_and_up_to_overflow(cache):
    func = elementwise(lambda a: te.intrinsic("exp", a), ("f32",), "f32",
                       kind=ForKind.VECTORIZED)
    assert "tdsl_exp_f32(" in emit_c(func).source
    _assert_exp_is_within_two_ulp(build_kernel(func, cache=cache))


_X86_LEVELS = [f"c -march=x86-64-{v}" for v in ("v2", "v3", "v4")
               if Target().arch == "x86_64"
               and Target(f"c -march=x86-64-{v}").unrunnable_reason() is None]


@needs_gcc
@pytest.mark.parametrize("target", ["c", *_X86_LEVELS])
def test_vector_exp_is_as_accurate_as_the_scalar_one(target):
    """A vectorized loop over exp is whole-vector code (`tdsl_exp_f32xL`): the portable
    GNU-vector form, and with AVX-512 its vscalefps form, at the scalar helper's accuracy."""
    op = tdsl.loads("op vexp(X: f32[N]) -> Y: f32[N] { Y[i] = exp(X[i]) }\n"
                    "schedule vexp for cpu { io, il = split(Y.i, lanes)\n vectorize(il) }")["vexp"]
    lanes = tdsl.as_target(target).lanes

    def kernel(x):      # sizes fixed at build time: the vector loop and its tail apart
        k = op.build(target=target, shapes={"N": x.size})
        assert f"tdsl_exp_f32x{lanes}(" in k.source
        return k(x)
    _assert_exp_is_within_two_ulp(kernel)


@needs_gcc
@pytest.mark.parametrize("target", ["c", *_X86_LEVELS])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_vector_sqrt_and_rsqrt_are_whole_vector_code_rounded_as_numpy(target, dtype):
    """sqrt and rsqrt in a vectorized loop (a batch_norm's scale in a fused epilogue) are
    whole-vector code (`tdsl_sqrt_<dtype>xL`), not a lane loop the vectorizer gives up on,
    and give numpy's numbers: sqrt correctly rounded, rsqrt as 1 / sqrt (no estimate)."""
    source = (f"op vroot(X: {dtype}[N]) -> Y: {dtype}[N] {{ Y[i] = sqrt(X[i]) - rsqrt(X[i]) }}\n"
              "schedule vroot for cpu { io, il = split(Y.i, lanes)\n vectorize(il) }")
    op = tdsl.loads(source)["vroot"]
    n = 64 * 16 + 5                                     # whole vectors and a tail
    k = op.build(target=target, shapes={"N": n})
    assert f"tdsl_sqrt_{dtype}x" in k.source
    x = np.concatenate([np.random.default_rng(3).uniform(0, 1e6, n - 5),
                        [0.0, 1.0, 4.0, np.inf, np.nan]]).astype({"f32": np.float32,
                                                                 "f64": np.float64}[dtype])
    with np.errstate(divide="ignore"):
        want = np.sqrt(x) - 1 / np.sqrt(x)
    np.testing.assert_allclose(k(x), want, rtol=4 * np.finfo(x.dtype).eps)


@pytest.mark.parametrize("shape", [(3, 4, 5), (4, 16), (12, 9)])
def test_a_select_of_loads_in_a_short_inner_loop_is_right(shape):
    """gcc 12.2 at -O3 on AVX2 and AVX-512 if-converts a select reading a load in a short
    inner loop (`c ? B[i] : 0`, `c ? A[i] : A[i] * B[i]`, extents 3 to 16 under an outer
    loop) into masked loads with the wrong masks (ONNX's PRelu cases were wrong); the target
    turns loop if-conversion off for gcc < 13 there. Checked on every ISA the host runs."""
    import tdsl
    i = ", ".join(f"i{k}" for k in range(len(shape)))
    ty = f"f32[{', '.join(map(str, shape))}]"
    mod = tdsl.loads(f"""
op prelu(A: {ty}, B: {ty}) -> Y: {ty} {{
    Y[{i}] = select(A[{i}] > 0.0, A[{i}], A[{i}] * B[{i}])
}}
op guarded(A: {ty}, B: {ty}) -> Y: {ty} {{
    Y[{i}] = select(A[{i}] > 0.0, B[{i}], 0.0)
}}
""")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, *shape)).astype(np.float32)
    for spec in ("c", "c -march=x86-64-v3", "c -march=x86-64-v4"):
        target = tdsl.Target(spec)
        if target.unrunnable_reason() is not None:
            continue
        np.testing.assert_array_equal(mod["prelu"].build(target)(a, b), np.where(a > 0, a, a * b))
        np.testing.assert_array_equal(mod["guarded"].build(target)(a, b), np.where(a > 0, b, 0))


@needs_gcc
@pytest.mark.parametrize("target", ["c", *_X86_LEVELS])
def test_a_vector_read_only_through_a_conversion_is_declared(target):
    """An i32 vector loaded only inside a conversion to f32, summed into a promoted f32
    accumulator (an int8 ResNet-50's i32 sums requantized and pooled in one kernel, built
    for x86-64-v3), still has its type and load helper declared: gcc refused the kernel."""
    op = tdsl.loads("""
op pool_i32(X: i32[N, CB, H, W, CI], S: f32[CB, CI]) -> Y: f32[N, CB, CI] {
    R: f32[N, CB, CI]
    R[n, cb, ci] = sum[h, w](f32(X[n, cb, h, w, ci]) * S[cb, ci])
    Y[n, cb, ci] = R[n, cb, ci] / f32(H * W)
}
schedule pool_i32 for cpu {
    nc = fuse(R.n, R.cb)
    reorder(R.h, R.w, R.ci)
    vectorize(R.ci)
    parallel(nc)
}""")["pool_i32"]
    lanes = tdsl.as_target(target).lanes
    x = rng.integers(-1000, 1000, (2, 3, 5, 7, lanes)).astype(np.int32)
    s = rng.integers(-3, 4, (3, lanes)).astype(np.float32)   # sums exact in f32: any order
    k = op.build(target=target, shapes=dict(N=2, CB=3, H=5, W=7, CI=lanes))
    assert f"tdsl_load_i32x{lanes}(" in k.source
    np.testing.assert_array_equal(k(x, s), op.reference(x, s))
