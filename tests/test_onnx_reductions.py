"""The reductions family of the ONNX importer (tdsl/onnx_import/reductions.py) on
configurations ONNX's conformance cases lack: axes as an attribute (opset 13), integer
dtypes, noop_with_empty_axes on a transforming reduction, infinities and NaN, ties, the
opset-11 Hardmax that flattens, 3-D cumulative and top-k along a middle axis. Each is checked
against onnx.reference.ReferenceEvaluator."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tdsl  # noqa: E402
from tdsl.errors import TdslError  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

_TP = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
       np.int64: TensorProto.INT64, np.int32: TensorProto.INT32, np.int8: TensorProto.INT8,
       np.uint8: TensorProto.UINT8, np.bool_: TensorProto.BOOL}


def _model(op, x, opset, outputs=1, consts=None, **attrs):
    """A one-node model of ``op`` on graph input ``x`` and constant inputs ``consts``
    (name -> array, or None for an absent optional input)."""
    consts = consts or {}
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items() if v is not None]
    names = ["x"] + [k if v is not None else "" for k, v in consts.items()]
    outs = [f"y{k}" for k in range(outputs)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", _TP[x.dtype.type], x.shape)],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, x):
    want = ReferenceEvaluator(model).run(None, {"x": x})
    text, params = convert_model(model, "net")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = tdsl.loads(text)["net"].build("c", params=params)(x)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)
    return text


rng = np.random.default_rng(7)
X3 = rng.standard_normal((3, 4, 5)).astype(np.float32)
I3 = rng.integers(-5, 6, (3, 4, 5)).astype(np.int32)


def test_reduce_mean_axes_attribute_opset13():
    _check(_model("ReduceMean", X3, 13, axes=[-1, 0], keepdims=0), X3)


def test_reduce_sum_int32_several_axes():
    text = _check(_model("ReduceSum", I3, 13, consts={"axes": np.array([2, 0], np.int64)}),
                  I3)
    assert "sum[r0: 3, r2: 5]" in text          # one reduction over both axes


def test_reduce_sum_int8_wraps():
    x = np.full((2, 40), 7, np.int8)
    _check(_model("ReduceSum", x, 13, consts={"axes": np.array([1], np.int64)}), x)


def test_reduce_max_int64_all_axes_to_a_scalar():
    x = rng.integers(-10**12, 10**12, (3, 4)).astype(np.int64)
    _check(_model("ReduceMax", x, 18, keepdims=0), x)


def test_reduce_l2_noop_with_empty_axes_is_elementwise():
    _check(_model("ReduceL2", X3, 18, noop_with_empty_axes=1), X3)


def test_reduce_sum_square_and_l1_u8():
    x = rng.integers(0, 255, (4, 6)).astype(np.uint8)
    for op in ("ReduceL1", "ReduceProd", "ReduceMin"):
        _check(_model(op, x, 18, consts={"axes": np.array([-1], np.int64)}), x)
    # the reference's sum of squares of u8 is u64 (numpy's promotion), not the schema's T:
    # tdsl's is u8, wrapping
    text, _ = convert_model(_model("ReduceSumSquare", x, 18,
                                   consts={"axes": np.array([-1], np.int64)}), "net")
    got = tdsl.loads(text)["net"].build("c")(x)
    np.testing.assert_array_equal(got, np.sum(x * x, axis=-1, keepdims=True, dtype=np.uint8))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")      # the reference's inf - inf
def test_reduce_log_sum_exp_with_infinities():
    x = X3.copy()
    x[0, 0, :] = -np.inf
    x[1, 2, 3] = np.inf
    _check(_model("ReduceLogSumExp", x, 18, consts={"axes": np.array([2], np.int64)}), x)


def test_argmin_ties_last_index_int32():
    x = np.array([[[1, 0, 0], [0, 2, 0]], [[3, 3, 1], [3, 3, 1]]], np.int32)
    _check(_model("ArgMin", x, 13, axis=-2, keepdims=0, select_last_index=1), x)
    _check(_model("ArgMin", x, 13, axis=2, keepdims=1), x)


def test_argmax_and_hardmax_with_nan_answer_the_first_nan():
    x = np.array([[1, np.nan, 3, np.nan], [4, 2, 4, 1]], np.float32)
    _check(_model("ArgMax", x, 13, axis=1), x)
    _check(_model("Hardmax", x, 13, axis=1), x)


def test_cumsum_middle_axis_reverse_exclusive_int64():
    x = rng.integers(-9, 9, (2, 5, 3)).astype(np.int64)
    _check(_model("CumSum", x, 14, consts={"axis": np.array(1, np.int64)}, reverse=1,
                  exclusive=1), x)


def test_cumprod_last_axis():
    x = (rng.standard_normal((3, 4)) + 1).astype(np.float32)
    _check(_model("CumProd", x, 26, consts={"axis": np.array(-1, np.int32)}), x)


def test_topk_smallest_ties_middle_axis_int32():
    x = np.array([[[2, 1], [1, 1], [2, 0], [1, 3]]], np.int32)
    _check(_model("TopK", x, 11, outputs=2, consts={"k": np.array([3], np.int64)}, axis=1,
                  largest=0), x)


def test_topk_largest_with_nan_and_ties():
    x = np.array([[1, np.nan, 3, 3, np.nan, -1], [0, 0, 0, 0, 0, 0]], np.float32)
    _check(_model("TopK", x, 11, outputs=2, consts={"k": np.array([4], np.int64)}), x)
    _check(_model("TopK", x.astype(np.float64), 11, outputs=2,
                  consts={"k": np.array([4], np.int64)}, largest=0), x.astype(np.float64))


def test_hardmax_before_opset13_flattens():
    # opsets 1-12: the input as 2-D [prod(shape[:axis]), prod(shape[axis:])], one hardmax
    # per row (the reference evaluator has only opset 13's, along the axis)
    x = np.array([[[1, 5], [2, 0]], [[0, 0], [7, 7]]], np.float32)
    text, _ = convert_model(_model("Hardmax", x, 11, axis=1), "net")
    got = tdsl.loads(text)["net"].build("c")(x)
    rows = x.reshape(2, 4)
    want = (np.arange(4) == rows.argmax(1)[:, None]).astype(np.float32).reshape(x.shape)
    np.testing.assert_array_equal(got, want)
    _check(_model("Hardmax", x, 13, axis=1), x)      # from 13: along the axis (differs here)


def test_refusals_are_tdsl_errors():
    x = np.ones((2, 3), np.int32)
    with pytest.raises(TdslError, match="integer"):
        convert_model(_model("ReduceLogSumExp", x, 18), "net")
    with pytest.raises(TdslError, match="k = 4"):
        convert_model(_model("TopK", x, 11, outputs=2, consts={"k": np.array([4], np.int64)}),
                      "net")


def test_static_reductions_are_computed_at_import():
    # Reshape(x, ReduceProd(Shape(x))): the shape arithmetic of exported models
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ReduceProd", ["s"], ["n"], keepdims=1),
             helper.make_node("Reshape", ["x", "n"], ["y0"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, X3.shape)],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)])
    _check(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), X3)
    from tdsl.onnx_import.reductions import _reduce_static
    v = rng.standard_normal((3, 4)).astype(np.float32)
    for op, kind in (("ReduceL2", "l2"), ("ReduceLogSumExp", "logsumexp"),
                     ("ReduceMean", "mean"), ("ReduceMin", "min")):
        m = _model(op, v, 18, consts={"axes": np.array([1], np.int64)}, keepdims=0)
        want = ReferenceEvaluator(m).run(None, {"x": v})[0]
        got = _reduce_static(v, [1], False, kind)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_trailing_f32_reductions_call_std():
    text = _check(_model("ReduceMean", X3, 13, axes=[-1], keepdims=1), X3)
    assert "= reduce_mean(" in text
    x = X3.reshape(12, 5)
    text = _check(_model("ReduceMax", x, 13, axes=[1], keepdims=0), x)
    assert "y0 = reduce_max(x)" in text
