"""The front end on correct programs: every construct of docs/language.md becomes the
expected tensor expression, the doc's own examples check, and the standard library has the
ops and attributes it promises.

Tensor expressions are compared through their printed form (`te_printer`), which reads like
the source: ``sum[k: K](...)`` shows the range the checker gave a reduction axis.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tdsl
from tdsl.errors import CheckError, ErrorList, ParseError
from tdsl.frontend import ast
from tdsl.frontend.parse import parse
from tdsl.lowering import te

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "language.md"
EXAMPLES = ROOT / "examples"


def body(op) -> list[str]:
    """The stage lines of an op's function, as printed, without the header and brace."""
    return [line.strip() for line in str(op).splitlines()[1:-1]]


def fn(src: str, name: str | None = None, ranks=None, **attrs) -> te.Function:
    mod = tdsl.loads(textwrap.dedent(src))
    name = name or mod.own_ops()[-1]
    return mod[name].function(ranks, **attrs)


def header(f: te.Function) -> str:
    return str(f).splitlines()[0]


# ---------------------------------------------------------------------------- the doc

def _doc_blocks():
    text = DOC.read_text()
    out = []
    for m in re.finditer(r"^```([\w-]*)\n(.*?)^```", text, re.S | re.M):
        lang, code = m.group(1), m.group(2)
        line = text[:m.start()].count("\n") + 1
        if lang in ("tdsl", "tdsl-error", "python"):
            out.append(pytest.param(lang, code, id=f"{lang}-line{line}"))
    return out


DOC_BLOCKS = _doc_blocks()


@pytest.fixture
def doc_dir(tmp_path, monkeypatch):
    """A directory holding every doc block marked ``# file: NAME`` (the doc's imports)."""
    for p in DOC_BLOCKS:
        lang, code = p.values
        m = re.match(r"# file: (\S+)", code)
        if lang == "tdsl" and m:
            (tmp_path / m.group(1)).write_text(code)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_doc_has_examples_of_each_kind():
    langs = [p.values[0] for p in DOC_BLOCKS]
    assert langs.count("tdsl") >= 15 and langs.count("tdsl-error") >= 5
    assert "python" in langs


@pytest.mark.parametrize("lang, code", DOC_BLOCKS)
def test_doc_example(lang, code, doc_dir):
    """Every ```tdsl block checks, every ```tdsl-error block fails with its message, and
    every ```python block runs."""
    path = doc_dir / "example.tdsl"
    path.write_text(code)
    if lang == "tdsl":
        mod = tdsl.load(path)
        for name in mod.own_ops():
            op = mod[name]
            attrs = {a.name: 2 for a in op.ast.attrs if a.default is None and a.kind == "int"}
            assert op.function(**attrs).outputs
    elif lang == "tdsl-error":
        with pytest.raises(tdsl.TdslError) as info:
            tdsl.load(path)
        m = re.match(r"# error: (.*)", code)
        assert m, "a tdsl-error block starts with `# error: MESSAGE`"
        assert m.group(1) in str(info.value)
    else:
        exec(compile(code, str(DOC), "exec"), {"__name__": "doc_example"})


def test_doc_lists_every_error_file_message():
    """The doc's error list names each kind of mistake tests/errors/ holds (spot check)."""
    text = DOC.read_text()
    for msg in ["unknown name 'Bx'", "reduction axis 'k' has no range", "import cycle",
                "circular definition", "op matmul takes 2 arguments, got 1",
                "schedule for unknown op", "size 'K' can't be inferred"]:
        assert msg in text


# ---------------------------------------------------------------------------- ops and stages

def test_matmul_stage_and_inferred_range():
    f = fn("""
        op matmul(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N] {
            C[i, j] = sum[k](A[i, k] * B[k, j])
        }""")
    assert header(f) == "op matmul(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N] {"
    assert body(f) == ["C[i, j] = sum[k: K](A[i, k] * B[k, j])"]
    assert [v.name for v in f.shape_vars] == ["M", "K", "N"]
    (c,) = f.outputs
    assert isinstance(c.op, te.Compute) and [ax.var.name for ax in c.op.axes] == ["i", "j"]
    red = c.op.body
    assert isinstance(red, te.Reduce) and red.combiner == "sum" and red.dtype == "f32"
    assert red.axes[0].kind == "reduce" and str(red.axes[0].extent) == "K"


def test_several_outputs_and_scalar_params():
    f = fn("""
        op scale_shift(X: f32[N], s: f32, t: f32[]) -> (Y: f32[N], Z: f32[N]) {
            Y[i] = s * X[i]
            Z[i] = X[i] + t
        }""")
    assert [t.name for t in f.outputs] == ["Y", "Z"]
    assert [t.shape for t in f.inputs[1:]] == [(), ()]
    assert body(f) == ["Y[i] = s * X[i]", "Z[i] = X[i] + t"]


def test_scalar_output_and_rank0_stage():
    f = fn("""
        op dot(X: f32[N], Y: f32[N]) -> D: f32 {
            D = sum[i](X[i] * Y[i])
        }""")
    assert f.outputs[0].shape == ()
    assert body(f) == ["D = sum[i: N](X[i] * Y[i])"]
    f = fn("op e(s: f32) -> Y: f32 { Y = exp(s) }")        # `Y = f(x)`: a rank-0 stage
    assert body(f) == ["Y = exp(s)"]


def test_size_arithmetic_in_shapes():
    f = fn("""
        op sizes(X: f32[N, M]) -> Y: f32[N + 2, M * 2 - 1, N // 2, N % 3 + 1, min(N, M),
                                         max(N, 4)] {
            Y[a, b, c, d, e, f] = 0.0
        }""")
    assert header(f).endswith(
        "-> Y: f32[N + 2, 2 * M - 1, N // 2, N % 3 + 1, min(N, M), max(N, 4)] {")


def test_input_dimension_expression_of_bound_sizes():
    f = fn("""
        op concat_same(X: f32[N], Y: f32[N + 1]) -> Z: f32[2 * N + 1] {
            Z[i] = select(i < N, X[min(i, N - 1)], Y[max(i - N, 0)])
        }""")
    assert [str(s) for s in f.inputs[1].shape] == ["N + 1"]
    assert [v.name for v in f.shape_vars] == ["N"]


def test_intermediates_and_stage_order():
    f = fn("""
        op sq1(X: f32[N]) -> Y: f32[N] {
            Y[i] = T[i] + 1.0          # uses T before its stage: order is free
            T: f32[N]
            T[i] = X[i] * X[i]
        }""")
    assert body(f) == ["T: f32[N]", "T[i] = X[i] * X[i]", "Y[i] = T[i] + 1.0"]
    assert [t.name for t in f.stages()] == ["T", "Y"]


def test_index_expressions():
    f = fn("""
        op idx(X: f32[N, M]) -> Y: f32[N, M] {
            Y[i, j] = X[N - 1 - i, (j + 1) % M] + X[i // 2, j]
        }""")
    assert body(f) == ["Y[i, j] = X[N - 1 - i, (j + 1) % M] + X[i // 2, j]"]


def test_comments_are_ignored():
    f = fn("""
        # leading comment
        op c(X: f32[N]) -> Y: f32[N] {   # after the brace
            # a whole line
            Y[i] = X[i]   # after a statement
        }   # after the op""")
    assert body(f) == ["Y[i] = X[i]"]


# ---------------------------------------------------------------------------- expressions

@pytest.mark.parametrize("expr, printed", [
    ("not X[i] > 0.0 or X[i] < 1.0 and X[i] != 2.0",
     "not X[i] > 0.0 or X[i] < 1.0 and X[i] != 2.0"),
    ("(X[i] > 0.0 or X[i] < 1.0) and true", "(X[i] > 0.0 or X[i] < 1.0) and true"),
    ("X[i] >= 0.0 and X[i] <= 1.0 and X[i] == X[i]",
     "X[i] >= 0.0 and X[i] <= 1.0 and X[i] == X[i]"),
    ("not (X[i] > 0.0)", "not X[i] > 0.0"),
])
def test_logic_and_comparisons(expr, printed):
    f = fn(f"op l(X: f32[N]) -> Y: bool[N] {{ Y[i] = {expr} }}")
    assert body(f) == [f"Y[i] = {printed}"]
    assert f.outputs[0].op.body.dtype == "bool"


@pytest.mark.parametrize("expr, printed", [
    ("-X[i] * (X[i] + 1.0) - (X[i] - X[i]) / 2.0", "-X[i] * (X[i] + 1.0) - (X[i] - X[i]) / 2.0"),
    ("X[i] - (X[i] - X[i])", "X[i] - (X[i] - X[i])"),
    ("X[i] - X[i] - X[i]", "X[i] - X[i] - X[i]"),
    ("X[i] / (X[i] * X[i])", "X[i] / (X[i] * X[i])"),
    ("select(X[i] > 0.0, X[i], -X[i])", "select(X[i] > 0.0, X[i], -X[i])"),
    ("X[i] * pi + inf", "X[i] * 3.141592653589793 + inf"),
    ("-inf", "-inf"),
    ("2 * 3 + 1.5 / 2", "6.75"),                 # literal arithmetic is folded
    ("X[i] * 2", "X[i] * 2.0"),                  # an int literal adapts to f32
    ("f32(i) / f32(N)", "f32(i) / f32(N)"),
])
def test_float_arithmetic(expr, printed):
    f = fn(f"op a(X: f32[N]) -> Y: f32[N] {{ Y[i] = {expr} }}")
    assert body(f) == [f"Y[i] = {printed}"]


def test_integer_arithmetic_floors():
    f = fn("op ints(I: i32[N]) -> Y: i32[N] { Y[i] = I[i] // 2 + I[i] % 3 - i32(i) }")
    assert body(f) == ["Y[i] = I[i] // 2 + I[i] % 3 - i32(i)"]
    out = tdsl.loads("op d(I: i32[N]) -> (Q: i32[N], R: i32[N]) { Q[i] = I[i] // 3\n"
                     " R[i] = I[i] % 3 }")["d"].reference(np.array([-7, 7, -1], np.int32))
    assert out[0].tolist() == [-3, 2, -1] and out[1].tolist() == [2, 1, 2]     # floor, as Python


def test_casts():
    f = fn("""
        op casts(X: f32[N]) -> (A: i32[N], B: f64[N], C: bool[N], D: f32[N], E: u8[N]) {
            A[i] = i32(X[i])
            B[i] = f64(X[i])
            C[i] = bool(X[i])
            D[i] = f32(i) + f32(N)
            E[i] = u8(A[i])
        }""")
    assert body(f) == ["A[i] = i32(X[i])", "B[i] = f64(X[i])", "C[i] = bool(X[i])",
                       "D[i] = f32(i) + f32(N)", "E[i] = u8(A[i])"]
    cast = f.outputs[0].op.body
    assert isinstance(cast, te.Cast) and cast.dtype == "i32"


def test_literals_adapt_to_each_dtype():
    f = fn("""
        op lits(X: f64[N], I: i8[N], U: u8[N], L: i64[N]) -> (A: f64[N], B: i8[N], C: u8[N],
                                                              D: i64[N]) {
            A[i] = X[i] * 2 + 0.5
            B[i] = I[i] + 1
            C[i] = U[i] * 3
            D[i] = L[i] + i
        }""")
    assert [t.op.body.dtype for t in f.outputs] == ["f64", "i8", "u8", "i64"]
    assert body(f)[0] == "A[i] = X[i] * f64(2.0) + f64(0.5)"


@pytest.mark.parametrize("name, arity", [
    ("exp", 1), ("log", 1), ("sqrt", 1), ("rsqrt", 1), ("tanh", 1), ("sigmoid", 1), ("erf", 1),
    ("abs", 1), ("floor", 1), ("ceil", 1), ("round", 1), ("sin", 1), ("cos", 1),
    ("min", 2), ("max", 2), ("pow", 2)])
def test_intrinsics(name, arity):
    args = ", ".join(["X[i]"] * arity)
    f = fn(f"op g(X: f32[N]) -> Y: f32[N] {{ Y[i] = {name}({args}) }}")
    e = f.outputs[0].op.body
    assert isinstance(e, te.Intrinsic) and e.name == name and len(e.args) == arity
    assert e.dtype == "f32"


def test_integer_intrinsics_keep_their_dtype():
    f = fn("op g(I: i16[N]) -> Y: i16[N] { Y[i] = abs(I[i]) + min(I[i], 1) + max(I[i], 0) }")
    assert body(f) == ["Y[i] = abs(I[i]) + min(I[i], 1) + max(I[i], 0)"]


def test_float_intrinsic_of_integer_literal_is_f32():
    f = fn("op g(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * exp(2) }")
    assert body(f) == ["Y[i] = X[i] * exp(2.0)"]


@pytest.mark.parametrize("dtype", ["f32", "f64", "i8", "i16", "i32", "i64", "u8", "bool"])
def test_every_dtype_can_be_a_parameter_and_output(dtype):
    f = fn(f"op copy(X: {dtype}[N]) -> Y: {dtype}[N] {{ Y[i] = X[i] }}")
    assert f.inputs[0].dtype == f.outputs[0].dtype == dtype


def test_select_with_bool_tensor_and_attribute():
    f = fn("""
        op pick(C: bool[N], X: f32[N]; flip: bool = false) -> Y: f32[N] {
            Y[i] = select(C[i] != flip, X[i], 0.0)
        }""", flip=True)
    assert body(f) == ["Y[i] = select(C[i] != true, X[i], 0.0)"]


# ---------------------------------------------------------------------------- reductions

def test_reductions_of_each_kind():
    f = fn("""
        op rk(X: f32[N, M]) -> (S: f32[N], A: f32[N], B: f32, P: f32[M]) {
            S[i] = sum[j](X[i, j])
            A[i] = max[j](X[i, j]) - min[j](X[i, j])
            B = sum[i, j](X[i, j])
            P[j] = prod[i: N](X[i, j])
        }""")
    assert body(f) == ["S[i] = sum[j: M](X[i, j])",
                       "A[i] = max[j: M](X[i, j]) - min[j: M](X[i, j])",
                       "B = sum[i: N, j: M](X[i, j])",
                       "P[j] = prod[i: N](X[i, j])"]


def test_reduction_range_inferred_from_plain_use_beside_expressions():
    # k is plain in Wt[k], so its range is K even though X[i + k] uses it in an expression
    f = fn("""
        op conv1d(X: f32[N], Wt: f32[K]) -> Y: f32[N - K + 1] {
            Y[i] = sum[k](X[i + k] * Wt[k])
        }""")
    assert body(f) == ["Y[i] = sum[k: K](X[i + k] * Wt[k])"]


def test_reduction_ranges_agree_when_equal_expressions():
    f = fn("""
        op d(X: f32[N], A: f32[N + 1], B: f32[1 + N]) -> D: f32 {
            D = sum[k](A[k] * B[k])
        }""")
    assert body(f) == ["D = sum[k: N + 1](A[k] * B[k])"]


def test_explicit_reduction_ranges_with_attributes():
    f = fn("""
        op box(X: f32[N]; w: int = 3) -> Y: f32[N - w + 1] {
            Y[i] = sum[k: w](X[i + k]) / f32(w)
        }""", w=5)
    assert header(f).endswith("-> Y: f32[N - 4] {")
    assert body(f) == ["Y[i] = sum[k: 5](X[i + k]) / 5.0"]


def test_nested_reductions():
    f = fn("""
        op norm(X: f32[N, M]) -> Y: f32 {
            Y = max[i](sqrt(sum[j](X[i, j] * X[i, j])))
        }""")
    assert body(f) == ["Y = max[i: N](sqrt(sum[j: M](X[i, j] * X[i, j])))"]


def test_integer_reductions_keep_dtype():
    f = fn("op c(X: f32[N]) -> Y: i32 { Y = sum[k](i32(X[k] > 0.0)) }")
    assert f.outputs[0].op.body.dtype == "i32"


# ---------------------------------------------------------------------------- bounds

@pytest.mark.parametrize("src", [
    "op g(X: f32[N]) -> Y: f32[N] { Y[i] = select(i + 1 < N, X[i + 1], X[i]) }",
    "op g(X: f32[N]) -> Y: f32[N] { Y[i] = select(i >= 1, X[i - 1], 0.0) }",
    "op g(X: f32[N]) -> Y: f32[N] { Y[i] = select(i < 1 or i >= N - 1, 0.0, X[i + 1] - X[i - 1]) }",
    "op g(X: f32[N]) -> Y: f32[N - 1] { Y[i] = X[i + 1] - X[i] }",
    "op g(X: f32[N]) -> Y: f32[N] { Y[i] = X[N - 1 - i] }",
    "op g(X: f32[N], I: i32[M]) -> Y: f32[M] { Y[j] = X[I[j]] }",       # undecidable: ok
    "op g(X: f32[N]; p: int) -> Y: f32[N + 2 * p] { "
    "Y[i] = select(i >= p and i < N + p, X[i - p], 0.0) }",
])
def test_reads_that_are_in_bounds_or_undecidable_check(src):
    op = tdsl.loads(src)["g"]
    assert op.function(**({"p": 1} if "p: int" in src else {})).outputs


# ---------------------------------------------------------------------------- attributes

ATTR_SRC = """
op pool1d(X: f32[N]; kernel: int, stride: int = kernel, padding: int = 0, neg: bool = true,
          scale: float = 1.0)
    -> Y: f32[(N + 2 * padding - kernel) // stride + 1] {
    Y[i] = scale * max[r: kernel](select(i * stride + r >= padding
                                         and i * stride + r < N + padding,
                                         X[i * stride + r - padding], select(neg, -inf, 0.0)))
}
"""


def test_attributes_given_and_defaulted():
    op = tdsl.loads(ATTR_SRC)["pool1d"]
    f = op.function(kernel=3)                 # stride defaults to kernel, padding to 0
    assert header(f).endswith("-> Y: f32[(N - 3) // 3 + 1] {")
    assert dict(f.attrs) == {"kernel": 3, "stride": 3, "padding": 0, "neg": True, "scale": 1.0}
    f = op.function(kernel=3, stride=1, padding=1, neg=False, scale=2)
    # `// 1` stays: the size still says that N - 1 must not be negative (docs/semantics.md)
    assert header(f).endswith("-> Y: f32[(N - 1) // 1 + 1] {")
    assert body(f) == ["Y[i] = 2.0 * max[r: 3](select(i * 1 + r >= 1 and i * 1 + r < N + 1, "
                       "X[i * 1 + r - 1], select(false, -inf, 0.0)))"]
    assert dict(f.attrs)["scale"] == 2.0 and isinstance(dict(f.attrs)["scale"], float)


def test_attributes_numpy_scalars_are_accepted():
    op = tdsl.loads(ATTR_SRC)["pool1d"]
    assert dict(op.function(kernel=np.int64(2)).attrs)["kernel"] == 2


@pytest.mark.parametrize("attrs, message", [
    ({}, "needs attribute 'kernel' (int)"),
    ({"kernel": 2.0}, "attribute 'kernel' of op pool1d is int, got 2.0"),
    ({"kernel": True}, "attribute 'kernel' of op pool1d is int, got True"),
    ({"kernel": 2, "neg": 1}, "attribute 'neg' of op pool1d is bool, got 1"),
    ({"kernel": 2, "scale": "x"}, "attribute 'scale' of op pool1d is float, got 'x'"),
    ({"kernel": 2, "strid": 1}, "op pool1d has no attribute 'strid' (its attributes: kernel, "
                                "stride, padding, neg, scale)"),
])
def test_wrong_attributes_from_python(attrs, message):
    op = tdsl.loads(ATTR_SRC)["pool1d"]
    with pytest.raises(tdsl.CallError, match=re.escape(message)):
        op.function(**attrs)
    with pytest.raises(TypeError):            # a CallError is a TypeError too
        op.function(**attrs)


def test_attribute_without_default_is_checked_symbolically():
    f = tdsl.loads(ATTR_SRC).program.ops["pool1d"].instantiate(check_only=True)
    assert "kernel" in header(f) and "r: kernel" in body(f)[0]


def test_int_attribute_as_a_literal_of_every_numeric_dtype():
    src = """
    op sc(X: f32[N], I: i8[N]; k: int = 3) -> (Y: f32[N], J: i8[N]) {
        Y[i] = X[i] * k
        J[i] = I[i] * k
    }"""
    assert body(fn(src)) == ["Y[i] = X[i] * 3.0", "J[i] = I[i] * 3"]


# ---------------------------------------------------------------------------- rank-generic ops

GENERIC = """
op scale_any(X: f32[*S]; a: float = 2.0) -> Y: f32[*S] {
    Y[*i] = a * X[*i]
}
op sum_first(X: f32[N, *S]) -> Y: f32[*S] {
    Y[*i] = sum[n](X[n, *i])
}
"""


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_rank_generic_ops_at_each_rank(rank):
    mod = tdsl.loads(GENERIC)
    sizes = ", ".join(f"S{d}" for d in range(rank))
    idx = ", ".join(f"i{d}" for d in range(rank))
    f = mod["scale_any"].function([rank])
    assert header(f) == f"op scale_any(X: f32[{sizes}]) -> Y: f32[{sizes}] {{"
    assert body(f) == [f"Y[{idx}] = 2.0 * X[{idx}]"]
    f = mod["sum_first"].function([rank + 1])
    assert header(f) == f"op sum_first(X: f32[N, {sizes}]) -> Y: f32[{sizes}] {{"
    assert body(f) == [f"Y[{idx}] = sum[n: N](X[n, {idx}])"]
    x = np.arange(2 * 3 ** rank, dtype=np.float32).reshape((2,) + (3,) * rank)
    assert np.array_equal(mod["sum_first"].reference(x), x.sum(0))
    assert np.array_equal(mod["scale_any"].reference(x[0], a=0.5), 0.5 * x[0])


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_std_elementwise_any_rank(rank):
    x = np.linspace(-2, 2, 2 ** rank * 3, dtype=np.float32).reshape((2,) * rank + (3,))[..., 0]
    out = tdsl.stdlib["add"].reference(x, x)
    assert out.shape == x.shape and np.array_equal(out, x + x)
    assert np.array_equal(tdsl.stdlib["relu"].reference(x), np.maximum(x, 0))


# ---------------------------------------------------------------------------- op calls

def test_op_call_splices_callee_stages():
    f = fn("""
        import std
        op dense_relu(X: f32[N, K], W: f32[M, K], b: f32[M]) -> Y: f32[N, M] {
            D = dense(X, W, b)
            Y = relu(D)
        }""")
    # dense's own intermediates come along, renamed after the target
    assert body(f) == ["D_P: f32[N, M]",
                       "D_P[n, m] = sum[k: K](X[n, k] * W[m, k])",
                       "D: f32[N, M]",
                       "D[n, m] = D_P[n, m] + b[m]",
                       "Y[i0, i1] = max(D[i0, i1], 0.0)"]
    assert [t.name for t in f.inputs] == ["X", "W", "b"]


def test_op_call_with_attributes_and_intermediates():
    f = fn("""
        import std
        op conv_relu(X: f32[B, C, H, W, 4], Wt: f32[F, C, 3, 3, 4, 4]; stride: int = 1)
            -> Y: f32[B, F, (H - 1) // stride + 1, (W - 1) // stride + 1, 4] {
            Cv = conv2d_nchwc(X, Wt; stride=stride, padding=1)
            Y = relu(Cv)
        }""", stride=2)
    names = [t.name for t in f.stages()]
    # the callee's intermediate (its padded input) gets Cv_
    assert names == ["Cv_Xp", "Cv", "Y"]
    assert header(f).endswith("-> Y: f32[B, F, (H - 1) // 2 + 1, (W - 1) // 2 + 1, 4] {")
    assert "Cv_Xp: f32[B, C, H + 2, W + 2, 4]" in body(f)


def test_op_call_with_several_outputs():
    f = fn("""
        op two(X: f32[N]) -> (P: f32[N], Q: f32[N]) {
            P[i] = max(X[i], 0.0)
            Q[i] = min(X[i], 0.0)
        }
        op user(X: f32[N]) -> Y: f32[N] {
            A, B = two(X)
            Y[i] = A[i] - B[i]
        }""", "user")
    assert sorted(body(f)) == sorted(["A: f32[N]", "A[i] = max(X[i], 0.0)", "B: f32[N]",
                                      "B[i] = min(X[i], 0.0)", "Y[i] = A[i] - B[i]"])


def test_op_call_into_a_declared_tensor_and_a_chain_of_calls():
    f = fn("""
        op sq(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * X[i] }
        op quad(X: f32[N]) -> Y: f32[N] {
            T: f32[N]
            T = sq(X)
            Y = sq(T)
        }""", "quad")
    assert body(f) == ["T: f32[N]", "T[i] = X[i] * X[i]", "Y[i] = T[i] * T[i]"]


def test_op_call_binds_callee_sizes_to_caller_expressions():
    f = fn("""
        import std
        op pad_then_pool(X: f32[N, C, H, W]) -> Y: f32[N, C, H // 2 + 1, W // 2 + 1] {
            P = pad2d(X; padding=1)
            Y = max_pool2d(P; kernel=2)
        }""")
    assert body(f)[0] == "P: f32[N, C, H + 2, W + 2]"


def test_op_call_renames_callee_indices_that_meet_caller_sizes():
    # the caller's sizes are called n, m, k like dense's indices: they must stay apart
    f = fn("""
        import std
        op f(X: f32[n, k], W: f32[m, k], b: f32[m]) -> Y: f32[n, m] {
            Y = dense(X, W, b)
        }""")
    line = body(f)[1]                                # the spliced sum
    lhs_idx = [ax.var.name for ax in f.outputs[0].op.axes]
    assert not {"n", "m", "k"} & set(lhs_idx)
    assert "sum[k1: k]" in line
    x, w, b = np.ones((2, 3), np.float32), np.ones((4, 3), np.float32), np.zeros(4, np.float32)
    assert np.array_equal(tdsl.loads("import std\n" + "op f(X: f32[n, k], W: f32[m, k], "
                                     "b: f32[m]) -> Y: f32[n, m] { Y = dense(X, W, b) }")
                          ["f"].reference(x, w, b), x @ w.T)


def test_op_call_intermediate_names_stay_unique():
    # the caller already has a D_Xp, and calls conv2d_nchwc twice: every stage keeps its
    # own name
    f = fn("""
        import std
        op f(X: f32[N, C, H, W, 4], Wt: f32[F, C, 3, 3, 4, 4]) -> Y: f32[N, F, H, W, 4] {
            D_Xp: f32[N, C, H, W, 4]
            D_Xp[n, c, h, w, i] = X[n, c, h, w, i] * 2.0
            D = conv2d_nchwc(D_Xp, Wt; padding=1)
            E = conv2d_nchwc(D_Xp, Wt; padding=1)
            Y = add(D, E)
        }""")
    names = [t.name for t in f.stages()]
    assert len(names) == len(set(names)) == 6
    assert {"D_Xp", "D_Xp1", "E_Xp", "D", "E", "Y"} == set(names)


def test_op_call_equal_shapes_by_sampling_are_accepted():
    # H // 2 and (H - 2) // 2 + 1 are equal for every H, though not by algebra
    fn("""
        import std
        op pool(X: f32[N, C, H, W]) -> Y: f32[N, C, H // 2, W // 2] {
            Y = max_pool2d(X; kernel=2)
        }""")


def test_local_op_shadows_imported_one():
    f = fn("""
        import std
        op relu(X: f32[*S]) -> Y: f32[*S] { Y[*i] = max(X[*i], 1.0) }
        op user(X: f32[N]) -> Y: f32[N] { Y = relu(X) }""", "user")
    assert body(f) == ["Y[i0] = max(X[i0], 1.0)"]


# ---------------------------------------------------------------------------- imports

def test_import_relative_file_and_transitively(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "base.tdsl").write_text(
        "op sq(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * X[i] }\n")
    (tmp_path / "lib" / "mid.tdsl").write_text(
        'import "base.tdsl"\nop quad(X: f32[N]) -> Y: f32[N] { T = sq(X)\n Y = sq(T) }\n')
    (tmp_path / "main.tdsl").write_text(
        'import "lib/mid.tdsl"\nimport std\n'
        "op f(X: f32[N]) -> Y: f32[N] { Q = quad(X)\n S = sq(Q)\n Y = relu(S) }\n")
    mod = tdsl.load(tmp_path / "main.tdsl")
    assert mod.own_ops() == ["f"]
    assert {"sq", "quad", "relu", "matmul"} <= set(mod)
    x = np.array([1, 2], np.float32)
    assert np.array_equal(mod["f"].reference(x), x ** 8)
    assert np.array_equal(mod["quad"].reference(x), x ** 4)


def test_import_diamond_is_fine(tmp_path):
    (tmp_path / "d.tdsl").write_text("op d(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] }\n")
    (tmp_path / "b.tdsl").write_text('import "d.tdsl"\n')
    (tmp_path / "c.tdsl").write_text('import "d.tdsl"\n')
    (tmp_path / "a.tdsl").write_text('import "b.tdsl"\nimport "c.tdsl"\n'
                                     "op a(X: f32[N]) -> Y: f32[N] { Y = d(X) }\n")
    assert "d" in tdsl.load(tmp_path / "a.tdsl")


def test_loads_imports_relative_to_current_directory(tmp_path, monkeypatch):
    (tmp_path / "lib.tdsl").write_text("op sq(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * X[i] }\n")
    monkeypatch.chdir(tmp_path)
    assert "sq" in tdsl.loads('import "lib.tdsl"\n')


def test_import_errors_point_into_the_imported_file(tmp_path):
    (tmp_path / "bad.tdsl").write_text("op b(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] + q }\n")
    (tmp_path / "main.tdsl").write_text(
        'import "bad.tdsl"\nop f(X: f32[N]) -> Y: f32[N] { Y = b(X) }\n')
    with pytest.raises(tdsl.TdslError) as info:
        tdsl.load(tmp_path / "main.tdsl")
    e = info.value
    assert not isinstance(e, ErrorList)              # the failed import only, no cascade
    assert e.span.source.name.endswith("bad.tdsl") and "unknown name 'q'" in e.message


def test_import_of_unreadable_file(tmp_path):
    (tmp_path / "bin.tdsl").write_bytes(b"\xff\xfe op")
    (tmp_path / "main.tdsl").write_text('import "bin.tdsl"\n')
    with pytest.raises(tdsl.TdslError, match="not UTF-8") as info:
        tdsl.load(tmp_path / "main.tdsl")
    assert info.value.span.line == 1


def test_files_that_never_end_are_refused():
    with pytest.raises(tdsl.TdslError, match="not a regular file"):
        tdsl.load("/dev/zero")


def test_a_huge_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from tdsl.frontend import program
    monkeypatch.setattr(program, "MAX_SOURCE_BYTES", 100)
    (tmp_path / "big.tdsl").write_text("# x\n" * 50)
    with pytest.raises(tdsl.TdslError, match="larger than"):
        tdsl.load(tmp_path / "big.tdsl")


def test_a_file_that_is_not_tdsl_is_never_quoted(tmp_path):
    secret = "API_TOKEN=hunter2-canary"
    (tmp_path / "environ").write_text(secret + "\n")
    (tmp_path / "main.tdsl").write_text('import "environ"\n')
    for path in (tmp_path / "environ", tmp_path / "main.tdsl"):
        with pytest.raises(tdsl.TdslError, match="is not a .tdsl file") as info:
            tdsl.load(path)
        assert "hunter2" not in str(info.value)


# ---------------------------------------------------------------------------- schedules and graphs

def test_schedules_and_graphs_parse_into_the_ast():
    mod = tdsl.loads("""
        import std
        op sq(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * X[i] }
        op two(X: f32[B, K]) -> (P: f32[B, K], Q: f32[B, K]) {
            P[b, k] = X[b, k]
            Q[b, k] = -X[b, k]
        }
        schedule sq for cpu as fast {
            knob t in [4, 8, 16] = 8
            io, ii = split(Y.i, t)
            vectorize(ii)
            parallel(io)
        }
        schedule relu for cuda { bind(Y.i0, "threadIdx.x") }
        graph g(x: f32[B, 8]) -> (y: f32[B, 8], z: f32[B, 8]) {
            param w: f32[8, 8]
            param b: f32[8]
            h = dense(x, w, b)
            y, z = two(h)
        }""")
    prog = mod.program
    s = prog.schedules[0]
    assert (s.op, s.target, s.name) == ("sq", "cpu", "fast")
    assert isinstance(s.body[0], ast.KnobDecl) and len(s.body[0].choices) == 3
    assert s.body[1] == ast.SchedCall(("io", "ii"), "split",
                                      (ast.Member("Y", "i"), ast.Name("t")))
    assert prog.schedules[1].name == "default"
    g = prog.graphs["g"]
    assert [p.name for p in g.params] == ["x"] and [o.name for o in g.outputs] == ["y", "z"]
    assert isinstance(g.body[0], ast.GraphParam) and isinstance(g.body[-1], ast.CallStage)


# ---------------------------------------------------------------------------- the AST

def test_ast_nodes_carry_spans():
    m = parse("op f(X: f32[N]) -> Y: f32[N] {\n    Y[i] = X[i] + 1.0\n}\n", "f.tdsl")
    op = m.items[0]
    assert (op.span.line, op.span.col) == (1, 1)
    st = op.body[0]
    assert isinstance(st, ast.Stage) and (st.span.line, st.span.col) == (2, 5)
    assert (st.expr.span.line, st.expr.span.col, st.expr.span.end_col) == (2, 12, 22)
    assert str(st.expr.right.span) == "f.tdsl:2:19"


def test_errors_are_frontend_types():
    with pytest.raises(ParseError):
        tdsl.loads("op")
    with pytest.raises(CheckError):
        tdsl.loads("op f(X: f32[N]) -> Y: f32[N] { Y[i] = Z[i] }")


# ---------------------------------------------------------------------------- the standard library

STD_OPS = {
    "add": (["X", "Y"], []), "sub": (["X", "Y"], []), "mul": (["X", "Y"], []),
    "div": (["X", "Y"], []), "relu": (["X"], []), "sigmoid": (["X"], []), "tanh": (["X"], []),
    "exp": (["X"], []), "gelu": (["X"], []), "leaky_relu": (["X"], ["alpha"]),
    "clip": (["X"], ["lo", "hi"]), "bias_add": (["X", "b"], []), "matmul": (["A", "B"], []),
    "batch_matmul": (["A", "B"], []), "dense": (["X", "W", "b"], []),
    "conv2d": (["X", "W"], ["stride", "padding", "dilation"]),
    "depthwise_conv2d": (["X", "W"], ["stride", "padding", "dilation"]),
    "max_pool2d": (["X"], ["kernel", "stride", "padding"]),
    "avg_pool2d": (["X"], ["kernel", "stride", "padding"]),
    "global_avg_pool2d": (["X"], []), "softmax": (["X"], []), "log_softmax": (["X"], []),
    "layer_norm": (["X", "gamma", "beta"], ["eps"]),
    "batch_norm": (["X", "gamma", "beta", "mean", "var"], ["eps"]),
    "scale_shift": (["X", "scale", "shift"], []),
    "transpose": (["X"], []), "reduce_sum": (["X"], []), "reduce_max": (["X"], []),
    "reduce_mean": (["X"], []), "pad2d": (["X"], ["padding"]), "flatten": (["X"], []),
    "concat": (["X", "Y"], []),
}
# the int8 ops (tdsl/dsl/std/quant.tdsl; their values are checked in test_quant.py)
QUANT_OPS = {
    "qdense": (["X", "W", "bias"], ["x_zp", "w_zp", "y_zp", "scale"]),
    "qconv2d": (["X", "W", "bias"], ["stride", "padding", "x_zp", "w_zp", "y_zp", "scale"]),
    "qdepthwise_conv2d": (["X", "W", "bias"],
                          ["stride", "padding", "x_zp", "w_zp", "y_zp", "scale"]),
    "qadd": (["A", "B"], ["a_zp", "b_zp", "y_zp", "a_scale", "b_scale", "y_scale"]),
    "qrelu": (["X"], ["x_zp"]), "qclamp": (["X"], ["lo", "hi"]),
    "qmax_pool2d": (["X"], ["kernel", "stride", "padding"]),
    "qavg_pool2d": (["X"], ["kernel", "stride", "padding"]),
}


# onnxruntime's QLinearConv on u8 activations (quant.tdsl; values in test_stdlib_reference.py
# and test_int8_dot.py): (params, attrs, input dtypes, output dtype)
QLINEAR_OPS = {
    "qlinear_conv2d": (["X", "W", "B", "S"], ["stride", "padding", "dilation", "x_zp", "y_zp",
                                              "lo", "hi"], ["u8", "i8", "i32", "f32"], "u8"),
    "qlinear_conv2d_nchwc": (["X", "W", "B", "S"], ["stride", "padding", "dilation", "x_zp",
                                                    "y_zp", "lo", "hi"],
                             ["u8", "i8", "i32", "f32"], "u8"),
    "pack_qconv_weights": (["W"], ["in_block", "out_block"], ["i8"], "i8"),
    "pack_channels_i32": (["B"], ["block"], ["i32"], "i32"),
    "to_nchwc_u8": (["X"], ["block"], ["u8"], "u8"),
    "from_nchwc_u8": (["X"], [], ["u8"], "u8"),
    "max_pool2d_u8": (["X"], ["kernel", "stride", "padding"], ["u8"], "u8"),
    "max_pool2d_nchwc_u8": (["X"], ["kernel", "stride", "padding"], ["u8"], "u8"),
    # the i16 route of an int8 convolution (x86 without VNNI)
    "conv2d_i16": (["X", "W"], ["stride", "dilation"], ["i16", "i16"], "i32"),
    "conv2d_nchwc_i16": (["X", "W"], ["stride", "dilation"], ["i16", "i16"], "i32"),
    "pack_conv_weights_i16": (["W"], ["in_block", "out_block"], ["i16"], "i16"),
    "to_nchwc_i16": (["X"], ["block"], ["i16"], "i16"),
    "from_nchwc_i16": (["X"], [], ["i16"], "i16"),
    "to_nchwc_i32": (["X"], ["block"], ["i32"], "i32"),
    "from_nchwc_i32": (["X"], [], ["i32"], "i32"),
}


# the blocked-layout and packed-weight ops the graph layout pass rewrites to
# (conv_blocked.tdsl, linalg.tdsl; their values are checked in test_stdlib_reference.py)
BLOCKED_OPS = {
    "to_nchwc": (["X"], ["block"]), "from_nchwc": (["X"], []),
    "pack_conv_weights": (["W"], ["in_block", "out_block"]), "pack_channels": (["B"], ["block"]),
    "conv2d_nchwc": (["X", "W"], ["stride", "padding", "dilation"]),
    "depthwise_conv2d_nchwc": (["X", "W"], ["stride", "padding", "dilation"]),
    "conv2d_nchwc_valid": (["X", "W"], ["stride", "dilation"]),
    "pack_depthwise_weights": (["W"], ["block"]),
    "bias_add_nchwc": (["X", "B"], []),
    "batch_norm_nchwc": (["X", "gamma", "beta", "mean", "var"], ["eps"]),
    "scale_shift_nchwc": (["X", "scale", "shift"], []),
    "max_pool2d_nchwc": (["X"], ["kernel", "stride", "padding"]),
    "subsample_nchwc": (["X"], ["stride"]),
    "global_avg_pool2d_nchwc": (["X"], []),
    "pack_dense_weights": (["W"], ["block"]), "dense_packed": (["X", "Wp", "b"], []),
    "winograd_weights": (["W"], ["in_block", "out_block"]),
    "conv2d_winograd_nchwc": (["X", "U"], []),
    "winograd4_weights": (["W"], ["in_block", "out_block"]),
    "conv2d_winograd4_nchwc": (["X", "U"], []),
}


def test_stdlib_has_exactly_the_required_ops():
    assert len(STD_OPS) == 32 and len(QUANT_OPS) == 8 and len(BLOCKED_OPS) == 20
    assert len(QLINEAR_OPS) == 15
    assert sorted(tdsl.stdlib) == sorted({**STD_OPS, **QUANT_OPS, **BLOCKED_OPS,
                                          **QLINEAR_OPS})
    assert tdsl.load("std") is tdsl.stdlib


@pytest.mark.parametrize("name", sorted({**STD_OPS, **QUANT_OPS, **BLOCKED_OPS}))
def test_stdlib_op_parameters_and_attributes(name):
    op = tdsl.stdlib[name]
    params, attrs = {**STD_OPS, **QUANT_OPS, **BLOCKED_OPS}[name]
    assert op.param_names == params
    assert op.attr_names == attrs
    needed = {a.name: 2 for a in op.ast.attrs if a.default is None}
    f = op.function(**needed)
    if name in QUANT_OPS:
        assert f.outputs[0].dtype == "i8" and f.inputs[0].dtype == "i8"
    else:
        assert all(t.dtype == "f32" for t in (*f.inputs, *f.outputs))
    assert op.signature().startswith(f"{name}(")


@pytest.mark.parametrize("name", sorted(QLINEAR_OPS))
def test_qlinear_op_parameters_attributes_and_dtypes(name):
    op = tdsl.stdlib[name]
    params, attrs, in_dtypes, out_dtype = QLINEAR_OPS[name]
    assert op.param_names == params and op.attr_names == attrs
    f = op.function(**{a.name: 4 for a in op.ast.attrs if a.default is None})
    assert [t.dtype for t in f.inputs] == in_dtypes and f.outputs[0].dtype == out_dtype


def test_stdlib_signatures():
    s = tdsl.stdlib
    assert s["matmul"].signature() == "matmul(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]"
    assert s["leaky_relu"].signature() == \
        "leaky_relu(X: f32[*S]; alpha: float = 0.01) -> Y: f32[*S]"
    assert s["max_pool2d"].signature().startswith(
        "max_pool2d(X: f32[N, C, IH, IW]; kernel: int, stride: int = kernel, padding: int = 0)")


def test_std_files_and_examples_check():
    for path in [*sorted((ROOT / "tdsl" / "dsl" / "std").glob("*.tdsl")),
                 *sorted(EXAMPLES.glob("*.tdsl"))]:
        assert list(tdsl.load(path)), path


# ---------------------------------------------------------------------------- examples

def test_example_matmul():
    mod = tdsl.load(EXAMPLES / "matmul.tdsl")
    assert mod.own_ops() == ["matmul", "dense_relu", "dense_relu_inline"]
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4), np.float32), rng.standard_normal((4, 5), np.float32)
    w, bias = rng.standard_normal((5, 4), np.float32), rng.standard_normal(5, np.float32)
    np.testing.assert_allclose(mod["matmul"].reference(a, b), a @ b, rtol=1e-5, atol=1e-5)
    want = np.maximum(a @ w.T + bias, 0)
    np.testing.assert_allclose(mod["dense_relu"].reference(a, w, bias), want, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(mod["dense_relu_inline"].reference(a, w, bias), want,
                               rtol=1e-5, atol=1e-5)
    assert [t.name for t in mod["dense_relu"].function().stages()] == ["D_P", "D", "Y"]


def _attention(q, k, v, causal):
    s = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        s = np.where(np.arange(k.shape[0])[None] > np.arange(q.shape[0])[:, None], -np.inf, s)
    p = np.exp(s - s.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_example_attention(causal):
    mod = tdsl.load(EXAMPLES / "attention.tdsl")
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(s, np.float32) for s in [(5, 4), (7, 4), (7, 3)])
    np.testing.assert_allclose(mod["attention"].reference(q, k, v, causal=causal),
                               _attention(q, k, v, causal), rtol=1e-4, atol=1e-5)
    x = rng.standard_normal((6, 8), np.float32)
    ws = [rng.standard_normal(s, np.float32) for s in [(4, 8), (4,)] * 3]
    qkv = [x @ ws[2 * j].T + ws[2 * j + 1] for j in range(3)]
    np.testing.assert_allclose(mod["attention_head"].reference(x, *ws, causal=causal),
                               _attention(*qkv, causal), rtol=1e-4, atol=1e-5)


def test_example_files_listing():
    assert {"attention.tdsl", "matmul.tdsl"} <= {p.name for p in EXAMPLES.glob("*.tdsl")}


def test_an_integer_literal_too_large_for_the_type_warns_at_its_line():
    """Issue 28: ``X[i] + 300`` on i8 silently added 44."""
    import warnings
    from tdsl.errors import TdslWarning
    src = "op a(X: i8[N], U: u8[N]) -> (Y: i8[N], Z: u8[N]) {\n    Y[i] = X[i] + 300\n" \
          "    Z[i] = U[i] * 2\n}"
    with pytest.warns(TdslWarning) as record:
        op = tdsl.loads(src, "w.tdsl")["a"]
        x, u = np.zeros(2, np.int8), np.ones(2, np.uint8)
        y, _ = op.reference(x, u)
    text = [str(w.message) for w in record]
    assert any(t.startswith("w.tdsl:2:") and "the literal 300 does not fit in i8 "
               "(-128..127): it wraps to 44" in t for t in text), text
    assert y.tolist() == [44, 44]
    with warnings.catch_warnings():
        warnings.simplefilter("error", TdslWarning)     # in range: no warning
        tdsl.loads(src.replace("300", "100"), "ok.tdsl")["a"].reference(x, u)
