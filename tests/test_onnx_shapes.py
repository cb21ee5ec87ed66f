"""Symbolic input dimensions of ONNX models: bound by --dim / ``dims=`` at import, by each
call's arguments in `OnnxModule`, and never set to 1 silently; graph inputs given as
constants (--const). Compared with onnxruntime where it is installed, numpy otherwise."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tdsl  # noqa: E402
from tdsl import cli  # noqa: E402
from tdsl.errors import CallError, TdslError, TdslWarning  # noqa: E402
from tdsl.onnx_import import OnnxModule, convert_model, symbolic_dims  # noqa: E402

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
RNG = np.random.default_rng(0)
W = RNG.standard_normal((8, 4)).astype(np.float32)


def dynamic_model():
    """y = relu(x @ W + 1) with x: f32[N, S, 8], and the row count N * S through a
    Shape -> Gather -> Mul -> Reshape chain, as exporters write it."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "one"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["r"]),
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "i0"], ["n"]),
        helper.make_node("Gather", ["shp", "i1"], ["s"]),
        helper.make_node("Mul", ["n", "s"], ["ns"]),
        helper.make_node("Unsqueeze", ["ns", "ax0"], ["ns1"]),
        helper.make_node("Concat", ["ns1", "four"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"]),
    ]
    inits = [numpy_helper.from_array(W, "W"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0, np.int64), "i0"),
             numpy_helper.from_array(np.array(1, np.int64), "i1"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([4], np.int64), "four")]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["N", "S", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def expected(x):
    return np.maximum(x @ W + 1, 0).reshape(-1, 4)


def test_symbolic_dimensions_are_found_and_bound_at_import():
    m = dynamic_model()
    assert symbolic_dims(m) == ["N", "S"]
    text, _ = convert_model(m, "net", dims={"N": 3, "S": 5})
    assert "x: f32[3, 5, 8]" in text and "f32[15, 4]" in text


def test_an_unbound_symbolic_dimension_is_not_set_silently():
    with pytest.warns(TdslWarning, match=r"N, S of its inputs are set to 1.*--dim N="):
        text, _ = convert_model(dynamic_model(), "net")
    assert "x: f32[1, 1, 8]" in text


@pytest.mark.parametrize("dims, msg", [({"B": 2}, "no symbolic dimension 'B'"),
                                       ({"N": 0}, "positive integer")])
def test_bad_dims_are_errors(dims, msg):
    with pytest.raises(TdslError, match=msg):
        convert_model(dynamic_model(), "net", dims=dims)


@needs_gcc
def test_onnx_module_binds_the_dimensions_per_call():
    mod = OnnxModule(dynamic_model())
    for n, s in ((2, 3), (1, 7), (2, 3)):
        x = RNG.standard_normal((n, s, 8)).astype(np.float32)
        np.testing.assert_allclose(mod(x), expected(x), rtol=1e-5, atol=1e-5)
    assert len(mod._built) == 2                         # (2, 3) was built once
    with pytest.raises(CallError, match="rank 2, expected 3"):
        mod(np.zeros((2, 8), np.float32))


@pytest.fixture(scope="module")
def dynamic_module():
    return OnnxModule(dynamic_model())


@needs_gcc
@settings(max_examples=15, deadline=None)
@given(calls=st.lists(st.sampled_from([(2, 3), (1, 7), "rank 2", "list"]), min_size=1,
                      max_size=6))
def test_a_call_like_the_last_reuses_its_module_and_others_bind_afresh(dynamic_module,
                                                                       calls):
    """Whatever the order of calls, each gives the model's result for its own sizes, or
    the error of its arguments: the last call's module serves only a call of the same
    input shapes."""
    mod = dynamic_module
    for call in calls:
        if call == "rank 2":
            with pytest.raises(CallError, match="rank 2, expected 3"):
                mod(np.zeros((2, 8), np.float32))
            continue
        if call == "list":
            with pytest.raises(TdslError, match="numpy.ndarray"):
                mod(np.zeros((2, 3, 8)).tolist())
            continue
        x = RNG.standard_normal((*call, 8)).astype(np.float32)
        np.testing.assert_allclose(mod(x), expected(x), rtol=1e-5, atol=1e-5)
        assert mod._last[0] == (x.shape,)
    assert len(mod._built) <= 2


@needs_gcc
def test_cli_import_with_dim_and_const(tmp_path):
    m = dynamic_model()
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    out = tmp_path / "net.tdsl"
    assert cli.main(["import", str(path), "-o", str(out), "--dim", "N=2", "--dim", "S=3"]) == 0
    g = tdsl.load(out)["net"]
    x = RNG.standard_normal((2, 3, 8)).astype(np.float32)
    params = dict(np.load(tmp_path / "net.npz"))
    np.testing.assert_allclose(g.build(params=params)(x), expected(x), rtol=1e-5, atol=1e-5)
    assert cli.main(["import", str(path), "-o", str(out), "--dim", "N=two"]) == 1


def test_a_shape_input_must_be_given_as_a_constant(tmp_path):
    """Reshape's shape as a graph input: refused naming --const, accepted when given."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    g = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
        helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(TdslError, match=r"input 'shape' must be known .* --const shape="):
        convert_model(m, "net")
    text, _ = convert_model(m, "net", constants={"shape": np.array([3, 4], np.int64)})
    assert "graph net(x: f32[2, 6]) -> (y: f32[3, 4])" in text
