"""ONNX import of control flow (If, Loop, Scan: tdsl/onnx_import/control.py), the signal
operators (DFT, STFT, windows: signal.py) and Det, TensorScatter, BitCast, in
configurations the conformance cases lack: a condition computed at run time selecting
between computed branches, a subgraph nested in a loop body reading outer values, scan
axes and directions, DFT lengths that crop and pad, a window computed by the graph; each
checked against onnx's reference implementation."""
from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tdsl  # noqa: E402
from tdsl.errors import TdslError  # noqa: E402
from tdsl.onnx_import import NeedsConstant, convert_model  # noqa: E402

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
F = TensorProto.FLOAT


def _vi(name, v):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype),
                                         v.shape)


def _model(nodes, inputs, outputs, inits=(), opset=20):
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs]
    g = helper.make_graph(nodes, "g", [_vi(n, v) for n, v in inputs.items()], outs,
                          [numpy_helper.from_array(v, n) for n, v in dict(inits).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def check(nodes, inputs, outputs, inits=(), opset=20, runs=None, rtol=1e-5, atol=1e-5):
    """Build once; for each input set (``runs``, default just ``inputs``) compare every
    output with the reference."""
    model = _model(nodes, inputs, outputs, inits, opset)
    text, params = convert_model(model, "net")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = tdsl.loads(text)["net"].build("c", params=params)
    for feed in runs or [inputs]:
        want = ReferenceEvaluator(model).run(None, dict(feed))
        got = module(*feed.values())
        got = got if isinstance(got, (tuple, list)) else [got]
        assert len(got) == len(want)
        for name, g, w in zip(outputs, got, want):
            g = np.asarray(g)
            assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape,
                                                               w.dtype, w.shape)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                       rtol=rtol, atol=atol, err_msg=name)
    return text


def _graph(name, nodes, ins, outs):
    return helper.make_graph(nodes, name, ins, outs)


R = np.random.default_rng(0)


@needs_gcc
def test_if_computed_condition_selects_computed_branches():
    x = R.standard_normal((3, 4)).astype(np.float32)
    then = _graph("t", [helper.make_node("Mul", ["x", "x"], ["a"])], [],
                  [helper.make_tensor_value_info("a", F, [3, 4])])
    else_ = _graph("e", [helper.make_node("Neg", ["x"], ["b"])], [],
                   [helper.make_tensor_value_info("b", F, [3, 4])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=else_)]
    inits = {"zero": np.array(0, np.float32)}
    check(nodes, {"x": x}, ["y"], inits,
          runs=[{"x": np.abs(x)}, {"x": -np.abs(x)}])


def test_if_computed_condition_branches_of_other_shapes_refused():
    then = _graph("t", [helper.make_node("Identity", ["x"], ["a"])], [],
                  [helper.make_tensor_value_info("a", F, None)])
    else_ = _graph("e", [helper.make_node("ReduceSum", ["x"], ["b"], keepdims=0)], [],
                   [helper.make_tensor_value_info("b", F, None)])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=then,
                                     else_branch=else_)],
                   {"c": np.array(True), "x": np.zeros(3, np.float32)}, ["y"])
    with pytest.raises(TdslError, match="depend on the data"):
        convert_model(model, "net")


@needs_gcc
def test_loop_body_with_nested_if_reading_outer_values():
    # y = y * w (iteration 0) or y + w (later), three times; the If reads the body's
    # iteration count and the graph's w
    w = R.standard_normal(4).astype(np.float32)
    y0 = R.standard_normal(4).astype(np.float32)
    then = _graph("t", [helper.make_node("Mul", ["y_in", "w"], ["m"])], [],
                  [helper.make_tensor_value_info("m", F, [4])])
    else_ = _graph("e", [helper.make_node("Add", ["y_in", "w"], ["p"])], [],
                   [helper.make_tensor_value_info("p", F, [4])])
    body = _graph("body", [
        helper.make_node("Less", ["i", "one"], ["first"]),
        helper.make_node("If", ["first"], ["y_out"], then_branch=then, else_branch=else_),
        helper.make_node("Identity", ["c_in"], ["c_out"]),
        helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=1)],
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", F, [4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_out", F, [4]),
         helper.make_tensor_value_info("s", F, [1])])
    inits = {"n": np.array(3, np.int64), "t": np.array(True), "one": np.array(1, np.int64)}
    check([helper.make_node("Loop", ["n", "t", "y0"], ["y", "ss"], body=body)],
          {"y0": y0, "w": w}, ["y", "ss"], inits)


def test_loop_computed_condition_refused():
    body = _graph("body", [
        helper.make_node("ReduceSum", ["y_in"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c_out"]),
        helper.make_node("Neg", ["y_in"], ["y_out"])],
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_in", F, [2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_out", F, [2])])
    model = _model([helper.make_node("Loop", ["n", "", "y0"], ["y"], body=body)],
                   {"y0": np.ones(2, np.float32)}, ["y"],
                   {"n": np.array(4, np.int64), "zero": np.array(0, np.float32)})
    with pytest.raises(TdslError, match="computed at run time"):
        convert_model(model, "net")


def test_loop_trip_count_from_a_graph_input_needs_a_constant():
    body = _graph("body", [helper.make_node("Identity", ["c_in"], ["c_out"]),
                           helper.make_node("Neg", ["y_in"], ["y_out"])],
                  [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                   helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                   helper.make_tensor_value_info("y_in", F, [2])],
                  [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                   helper.make_tensor_value_info("y_out", F, [2])])
    model = _model([helper.make_node("Loop", ["n", "", "y0"], ["y"], body=body)],
                   {"n": np.array(3, np.int64), "y0": np.ones(2, np.float32)}, ["y"])
    with pytest.raises(NeedsConstant) as e:
        convert_model(model, "net")
    assert e.value.input_name == "n"


@needs_gcc
def test_scan_axes_and_directions():
    # a running sum over axis 1 of x, read backwards; the scan output stacked on axis 1,
    # written backwards; a second scan input read forwards along axis 0
    x = R.standard_normal((2, 5, 3)).astype(np.float32)
    z = R.standard_normal((5, 2, 3)).astype(np.float32)
    body = _graph("body", [helper.make_node("Add", ["acc", "xt"], ["acc2"]),
                           helper.make_node("Mul", ["acc2", "zt"], ["out"])],
                  [helper.make_tensor_value_info("acc", F, [2, 3]),
                   helper.make_tensor_value_info("xt", F, [2, 3]),
                   helper.make_tensor_value_info("zt", F, [2, 3])],
                  [helper.make_tensor_value_info("acc2", F, [2, 3]),
                   helper.make_tensor_value_info("out", F, [2, 3])])
    node = helper.make_node("Scan", ["s0", "x", "z"], ["s", "y"], body=body,
                            num_scan_inputs=2, scan_input_axes=[1, 0],
                            scan_input_directions=[1, 0], scan_output_axes=[-1],
                            scan_output_directions=[1])
    # (onnx's reference implements no directions: numpy's)
    model = _model([node], {"s0": np.zeros((2, 3), np.float32), "x": x, "z": z},
                   ["s", "y"])
    text, params = convert_model(model, "net")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, y = tdsl.loads(text)["net"].build("c", params=params)(
            np.zeros((2, 3), np.float32), x, z)
    acc, outs = np.zeros((2, 3), np.float32), []
    for t in range(5):
        acc = acc + x[:, 4 - t]
        outs.append(acc * z[t])
    np.testing.assert_allclose(s, acc, rtol=1e-6)
    np.testing.assert_allclose(y, np.stack(outs[::-1], axis=-1), rtol=1e-6)


@needs_gcc
@pytest.mark.parametrize("inverse,onesided,length,complex_in", [
    (0, 0, 7, True),        # crops the axis of 9
    (0, 1, 12, False),      # rfft, zero-padded
    (1, 0, 9, True),
    (1, 1, 9, True),        # irfft of odd length
])
def test_dft_lengths(inverse, onesided, length, complex_in):
    n = 9 if not (inverse and onesided) else length // 2 + 1
    x = R.standard_normal((2, 3, n, 2 if complex_in else 1)).astype(np.float32)
    node = helper.make_node("DFT", ["x", "len", "axis"], ["y"], inverse=inverse,
                            onesided=onesided)
    check([node], {"x": x}, ["y"], {"len": np.array(length, np.int64),
                                     "axis": np.array(-2, np.int64)}, rtol=1e-4,
          atol=1e-4)


@needs_gcc
def test_stft_window_computed_by_the_graph():
    x = R.standard_normal((2, 40, 1)).astype(np.float32)
    nodes = [helper.make_node("HannWindow", ["wlen"], ["w0"]),
             helper.make_node("Mul", ["w0", "g"], ["w"]),
             helper.make_node("STFT", ["x", "step", "w"], ["y"])]
    check(nodes, {"x": x, "g": R.standard_normal(8).astype(np.float32)}, ["y"],
          {"wlen": np.array(8, np.int32), "step": np.array(5, np.int64)}, opset=17,
          rtol=1e-4, atol=1e-4)


def test_window_of_a_graph_input_size_needs_a_constant():
    model = _model([helper.make_node("BlackmanWindow", ["n"], ["y"])],
                   {"n": np.array(8, np.int32)}, ["y"], opset=17)
    with pytest.raises(NeedsConstant):
        convert_model(model, "net")


@needs_gcc
@pytest.mark.parametrize("m", [1, 2, 3])
def test_det(m):
    x = R.standard_normal((2, 3, m, m)).astype(np.float64)
    check([helper.make_node("Det", ["x"], ["y"])], {"x": x}, ["y"], opset=22)


def test_det_4x4_refused():
    model = _model([helper.make_node("Det", ["x"], ["y"])],
                   {"x": np.zeros((4, 4), np.float32)}, ["y"], opset=22)
    with pytest.raises(TdslError, match="4x4"):
        convert_model(model, "net")


@needs_gcc
def test_tensor_scatter_circular_wraps():
    past = R.standard_normal((3, 2, 5, 4)).astype(np.float32)
    upd = R.standard_normal((3, 2, 3, 4)).astype(np.float32)
    node = helper.make_node("TensorScatter", ["p", "u", "w"], ["y"], mode="circular")
    check([node], {"p": past, "u": upd, "w": np.array([4, 0, 3], np.int64)}, ["y"],
          opset=24)


@needs_gcc
def test_bitcast_int8_to_uint8_and_float_refused():
    x = np.array([-128, -1, 0, 1, 127], np.int8)
    check([helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.UINT8)], {"x": x},
          ["y"], opset=26)
    model = _model([helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.INT32)],
                   {"x": np.zeros(3, np.float32)}, ["y"], opset=26)
    with pytest.raises(TdslError, match="reinterpretation"):
        convert_model(model, "net")


@needs_gcc
def test_affine_grid_size_given_as_a_constant():
    theta = R.standard_normal((2, 2, 3)).astype(np.float32)
    size = np.array([2, 3, 4, 5], np.int64)
    model = _model([helper.make_node("AffineGrid", ["theta", "size"], ["grid"],
                                     align_corners=1)],
                   {"theta": theta, "size": size}, ["grid"])
    with pytest.raises(NeedsConstant) as e:
        convert_model(model, "net")
    assert e.value.input_name == "size"
    text, params = convert_model(model, "net", constants={"size": size})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = tdsl.loads(text)["net"].build("c", params=params)(theta)
    want = ReferenceEvaluator(model).run(None, {"theta": theta, "size": size})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
