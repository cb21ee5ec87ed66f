"""The elementwise ONNX converters (tdsl/onnx_import/elementwise.py, activations.py) on
configurations ONNX's conformance cases lack (other dtypes, broadcasting, static operands,
edge values), checked against onnx.reference.ReferenceEvaluator; and the language's math,
fmod and bitwise functions those converters use, on C against numpy."""
from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tdsl  # noqa: E402
from tdsl.errors import TdslError  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

_TYPES = {np.float32: 1, np.uint8: 2, np.int8: 3, np.int16: 5, np.int32: 6, np.int64: 7,
          np.bool_: 9, np.float64: 11}


def _model(nodes, inputs, outputs, inits=(), opset=21):
    """inputs: {name: array} (their dtypes and shapes); outputs: names (types inferred)."""
    vi = [helper.make_tensor_value_info(n, _TYPES[a.dtype.type], a.shape)
          for n, a in inputs.items()]
    out = [helper.make_tensor_value_info(n, 0, None) for n in outputs]
    g = helper.make_graph(nodes, "g", vi, out,
                          [numpy_helper.from_array(a, n) for n, a in dict(inits).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, inputs, rtol=1e-5, atol=1e-6):
    """The graph's outputs equal ReferenceEvaluator's (dtype, shape and values)."""
    text, params = convert_model(model, "net")
    got = tdsl.loads(text)["net"].build(params=params)(*inputs.values())
    got = got if isinstance(got, tuple) else (got,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ReferenceEvaluator(model).run(None, inputs)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {k}")
    return text


N = helper.make_node
rng = np.random.default_rng(7)


def test_integer_arithmetic_truncates_wraps_and_broadcasts():
    x = rng.integers(-50, 50, (2, 3, 4)).astype(np.int32)
    y = rng.integers(-7, 8, (3, 1)).astype(np.int32)
    y[y == 0] = 3
    x8 = rng.integers(-128, 128, (3, 4)).astype(np.int8)
    model = _model([N("Div", ["x", "y"], ["div"]), N("Div", ["x", "k"], ["divk"]),
                    N("Mod", ["x", "y"], ["mod"]), N("Mod", ["x", "y"], ["fmod"], fmod=1),
                    N("Add", ["x8", "x8"], ["add8"]), N("Max", ["x", "y", "k"], ["max"]),
                    N("Sign", ["x8"], ["sign"]), N("Abs", ["x"], ["abs"]),
                    N("Clip", ["x", "lo", "hi"], ["clip"])],
                   {"x": x, "y": y, "x8": x8},
                   ["div", "divk", "mod", "fmod", "add8", "max", "sign", "abs", "clip"],
                   {"k": np.array(-4, np.int32), "lo": np.array(-9, np.int32),
                    "hi": np.array(20, np.int32)})
    text = _check(model, {"x": x, "y": y, "x8": x8})
    assert "// " in text and "% " in text


def test_float_mod_pow_of_mixed_dtypes_and_f64_math():
    a = (rng.standard_normal((3, 4)) * 5).astype(np.float64)
    b = np.array([2.5, -1.5, np.inf, -3.0], np.float64)
    base = rng.integers(0, 5, (3, 4)).astype(np.int64)     # no NaN to cast to an integer
    e = rng.uniform(0, 3, (4,)).astype(np.float32)
    f = rng.uniform(0.5, 2, (3, 4)).astype(np.float32)
    ie = rng.integers(0, 4, (3, 4)).astype(np.int32)
    model = _model([N("Mod", ["a", "b"], ["mod"], fmod=0), N("Mod", ["a", "b"], ["fmod"], fmod=1),
                    N("Pow", ["base", "e"], ["pow_ie"]), N("Pow", ["f", "ie"], ["pow_fi"]),
                    N("Pow", ["f", "two"], ["pow_f2"]), N("Atanh", ["t"], ["atanh"]),
                    N("Cosh", ["a"], ["cosh"]), N("Mean", ["a", "b", "a"], ["mean"]),
                    N("Round", ["a"], ["round"]), N("Reciprocal", ["a"], ["recip"])],
                   {"a": a, "b": b, "base": base, "e": e, "f": f, "ie": ie},
                   ["mod", "fmod", "pow_ie", "pow_fi", "pow_f2", "atanh", "cosh", "mean",
                    "round", "recip"],
                   {"two": np.array(2, np.int64), "t": np.array([0.5, -0.25], np.float64)})
    _check(model, {"a": a, "b": b, "base": base, "e": e, "f": f, "ie": ie})


def test_isinf_isnan_sign_on_special_values():
    x = np.array([[np.inf, -np.inf, np.nan, 0.0], [-2.0, 3.0, -0.0, 1e30]], np.float32)
    model = _model([N("IsInf", ["x"], ["neg"], detect_positive=0),
                    N("IsInf", ["x"], ["pos"], detect_negative=0),
                    N("IsNaN", ["x"], ["nan"]), N("Sign", ["x"], ["sign"]),
                    N("Equal", ["x", "x"], ["eq"]), N("LessOrEqual", ["x", "z"], ["le"])],
                   {"x": x}, ["neg", "pos", "nan", "sign", "eq", "le"],
                   {"z": np.array(0.0, np.float32)})
    _check(model, {"x": x})


def test_activations_on_f64_and_their_large_inputs():
    x = np.concatenate([rng.standard_normal(20) * 3, [-800.0, 800.0, 0.0, 40.0]])
    x = x.reshape(2, 3, 4).astype(np.float64)
    ops = [("Gelu", {"approximate": "tanh"}), ("Gelu", {}), ("Mish", {}), ("Softplus", {}),
           ("HardSwish", {}), ("Celu", {"alpha": 0.5}), ("Selu", {}), ("Elu", {"alpha": 0.3}),
           ("Softsign", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
           ("Swish", {"alpha": 1.5}), ("ThresholdedRelu", {"alpha": 0.7}),
           ("LeakyRelu", {"alpha": 0.2}), ("Shrink", {"bias": 0.5, "lambd": 1.0}),
           ("Relu", {}), ("Sigmoid", {}), ("Tanh", {})]
    nodes = [N(op, ["x"], [f"y{k}"], **attrs) for k, (op, attrs) in enumerate(ops)]
    model = _model(nodes, {"x": x}, [f"y{k}" for k in range(len(ops))], opset=24)
    # atol: the reference's Erf is float32 even on float64 (Gelu's exact form uses it)
    _check(model, {"x": x}, rtol=1e-6, atol=1e-7)


def test_prelu_slope_broadcast_and_shrink_on_integers():
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    slope = rng.standard_normal((3, 1, 1)).astype(np.float32)
    xi = rng.integers(-5, 6, (4, 5)).astype(np.int32)
    model = _model([N("PRelu", ["x", "slope"], ["p"]),
                    N("Shrink", ["xi"], ["s"], bias=1.0, lambd=1.5)],
                   {"x": x, "xi": xi}, ["p", "s"], {"slope": slope})
    _check(model, {"x": x, "xi": xi})


def test_static_values_fold_at_import_as_the_reference_computes():
    nodes = [N("Div", ["a", "b"], ["q"]), N("Mod", ["a", "b"], ["r"], fmod=1),
             N("BitShift", ["a", "s"], ["sh"], direction="RIGHT"), N("Where", ["c", "a", "b"], ["w"])]
    inits = {"a": np.array([-7, 7, -8, 9], np.int64), "b": np.array([2, -2, 3, 4], np.int64),
             "s": np.array([1, 70, 2, -1], np.int64), "c": np.array([True, False, True, False])}
    model = _model(nodes, {}, ["q", "r", "sh", "w"], inits)
    text, params = convert_model(model, "net")
    want = ReferenceEvaluator(model).run(None, {})
    assert [c.tolist() for c in params.values()] == [w.tolist() for w in want]


def test_float_operands_of_an_integer_only_operator_are_refused():
    x = np.zeros((2, 2), np.float32)
    model = _model([N("Mod", ["x", "x"], ["m"], fmod=1), N("BitwiseNot", ["m"], ["y"])],
                   {"x": x}, ["y"], opset=18)
    with pytest.raises(TdslError, match="BitwiseNot on f32"):
        convert_model(model, "net")


# ---------------------------------------------------------------------------- the language

def test_trigonometric_hyperbolic_and_fmod_functions_on_c():
    m = tdsl.loads("""
op math(X: f32[N], D: f64[N]) -> (A: f32[N], B: f64[N]) {
    A[i] = tan(X[i]) + asin(X[i]) + acos(X[i]) + atan(X[i]) + sinh(X[i]) + cosh(X[i])
         + asinh(X[i]) + atanh(X[i]) + acosh(X[i] + 2.0) + fmod(X[i] * 7.0, -0.75)
    B[i] = tan(D[i]) * acosh(abs(D[i]) + 1.0) + fmod(D[i] * 7.0, 0.75)
}
""")
    x = np.linspace(-0.95, 0.95, 33).astype(np.float32)
    d = x.astype(np.float64)
    a, b = m["math"].build("c")(x, d)
    want_a = (np.tan(x) + np.arcsin(x) + np.arccos(x) + np.arctan(x) + np.sinh(x) +
              np.cosh(x) + np.arcsinh(x) + np.arctanh(x) + np.arccosh(x + 2) +
              np.fmod(x * np.float32(7), np.float32(-0.75)))
    np.testing.assert_allclose(a, want_a, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(b, np.tan(d) * np.arccosh(np.abs(d) + 1) + np.fmod(d * 7, 0.75),
                               rtol=1e-13, atol=1e-13)
    ra, rb = m["math"].reference(x, d)
    np.testing.assert_allclose(ra, want_a, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dt", ["i8", "u8", "i32", "i64"])
def test_bitwise_functions_and_shifts_by_any_count(dt):
    npdt = np.dtype({"i8": np.int8, "u8": np.uint8, "i32": np.int32, "i64": np.int64}[dt])
    m = tdsl.loads(f"""
op bits(A: {dt}[N], B: {dt}[N]) -> (Y: {dt}[N], L: {dt}[N], R: {dt}[N]) {{
    Y[i] = bitxor(bitand(A[i], B[i]), bitor(A[i], 5)) + bitnot(A[i])
    L[i] = shl(A[i], B[i])
    R[i] = shr(A[i], B[i])
}}
""")
    info = np.iinfo(npdt)
    a = rng.integers(info.min, info.max, 100, dtype=npdt, endpoint=True)
    b = rng.integers(max(int(info.min), -3), min(int(info.max), 70), 100, dtype=npdt,
                     endpoint=True)
    y, left, right = m["bits"].build("c")(a, b)
    bits = npdt.itemsize * 8           # ONNX BitShift's reference: 0 or -1 past the width
    ok = (b >= 0) & (b < bits)
    u = np.dtype(f"u{npdt.itemsize}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want_l = np.where(ok, np.left_shift(a.astype(u), np.where(ok, b, 0).astype(u))
                          .astype(npdt), 0).astype(npdt)
        want_r = np.where(ok, np.right_shift(a, np.where(ok, b, 0).astype(npdt)),
                          np.where(a < 0, -1, 0)).astype(npdt)
        want_y = ((a & b) ^ (a | npdt.type(5))) + ~a
    assert (y == want_y).all() and (left == want_l).all() and (right == want_r).all()
    ref = m["bits"].reference(a, b)
    assert all((r == w).all() for r, w in zip(ref, (want_y, want_l, want_r)))


def test_bitwise_functions_need_integers():
    with pytest.raises(TdslError, match="bitand needs integer operands, got f32"):
        tdsl.loads("op f(X: f32[N]) -> Y: f32[N] {\n    Y[i] = bitand(X[i], X[i])\n}\n")


def _ffn(x_shape, ffn, d, extra=()):
    """MatMul + bias + GELU (the Erf form PyTorch exports) + MatMul + bias + a residual of
    the first layer's output, with constant weights: a transformer's feed-forward block."""
    rng = np.random.default_rng(3)
    w1 = (rng.standard_normal((d, ffn)) / np.sqrt(d)).astype(np.float32)
    w2 = (rng.standard_normal((ffn, d)) / np.sqrt(ffn)).astype(np.float32)
    b1, b2 = rng.standard_normal(ffn).astype(np.float32), rng.standard_normal(d).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Div", ["hb", "sqrt2"], ["s"]),
             helper.make_node("Erf", ["s"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["hb", "e1"], ["g0"]),
             helper.make_node("Mul", ["g0", "half"], ["g"]),
             helper.make_node("MatMul", ["g", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"]), *extra]
    inits = {"w1": w1, "w2": w2, "b1": b1, "b2": b2, "sqrt2": np.array(2 ** 0.5, np.float32),
             "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    x = rng.standard_normal(x_shape).astype(np.float32)
    outs = ["y"] + [n.output[0] for n in extra]
    return _model(nodes, {"x": x}, outs, inits), {"x": x}


def test_an_elementwise_chain_is_one_op_fused_into_its_dense_layer():
    """GELU's five nodes are one op reading its input once (it had two readers), written on
    the dense layer's rows, so the dense kernel computes bias + GELU as its epilogue; the
    ops the chain replaced are not in the graph."""
    model, inputs = _ffn((1, 64, 32), 512, 32)
    text = _check(model, inputs, rtol=1e-5, atol=1e-5)
    assert "erf(" in text and text.count(" = dense(") == 2
    graph = [line for line in text.splitlines() if line.startswith("    ") and " = " in line
             and "[" not in line.split(" = ")[0]]
    assert not any(line.split(" = ")[1].startswith(("div_", "erf_")) for line in graph)
    g = tdsl.loads(text)["net"]
    params = convert_model(model, "net")[1]
    compiled = g.build(params=params).compiled(inputs["x"])
    dense_groups = [[compiled.ir.nodes[i].op for i in grp.nodes] for grp in compiled.groups
                    if compiled.ir.nodes[grp.anchor].op == "dense_packed"]
    assert len(dense_groups) == 2 and all(len(ops) >= 2 for ops in dense_groups), dense_groups
    assert any(any("erf" in op or "mul" in op for op in ops[1:]) for ops in dense_groups)


def test_a_chain_value_read_twice_stays_an_op_of_its_own():
    """The first layer's output read by the chain and by a graph output is computed once,
    not written into both, and both results are right."""
    model, inputs = _ffn((2, 8, 16), 64, 16, extra=[helper.make_node("Mul", ["hb", "hb"], ["z"]),
                                                    helper.make_node("Identity", ["e"], ["ee"])])
    _check(model, inputs, rtol=1e-5, atol=1e-5)
