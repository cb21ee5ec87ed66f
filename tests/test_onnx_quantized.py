"""Quantized ONNX operators beyond the conformance cases, bit-exact with onnxruntime:
QuantizeLinear on values that round half-way and saturate, per-channel QLinearConv with
padding, strides and groups, batched MatMulInteger with zero points."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tdsl  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
RNG = np.random.default_rng(7)
TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.uint8): TensorProto.UINT8,
         np.dtype(np.int8): TensorProto.INT8, np.dtype(np.int32): TensorProto.INT32}


def run_both(node, inputs, weights, out_type, opset=13):
    """tdsl's and onnxruntime's outputs of one node: ``inputs`` are graph inputs,
    ``weights`` initializers."""
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, TYPES[v.dtype], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], TYPES[np.dtype(out_type)], None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    text, params = convert_model(m, "net")
    got = tdsl.loads(text)["net"].build(params=params)(*inputs.values())
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    return got, want


@pytest.mark.parametrize("zp_dtype", [np.uint8, np.int8])
def test_quantize_linear_rounds_half_to_even_and_saturates(zp_dtype):
    scale = np.float32(0.5)
    x = np.concatenate([np.arange(-300, 300, 0.25, dtype=np.float32),
                        RNG.standard_normal(200).astype(np.float32) * 40])
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    got, want = run_both(node, {"x": x}, {"s": np.array(scale), "z": np.array(3, zp_dtype)},
                         zp_dtype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("group, stride, pads", [(1, 1, [1, 1, 1, 1]), (2, 2, [0, 1, 2, 0]),
                                                 (4, 1, [1, 1, 1, 1])])
def test_qlinear_conv_per_channel_matches_onnxruntime(group, stride, pads):
    c, f = 4, 8
    x = RNG.integers(0, 256, (1, c, 9, 9)).astype(np.uint8)
    w = RNG.integers(-128, 128, (f, c // group, 3, 3)).astype(np.int8)
    weights = {"xs": np.array(0.02, np.float32), "xz": np.array(128, np.uint8), "w": w,
               "ws": RNG.uniform(0.005, 0.02, f).astype(np.float32),
               "wz": np.zeros(f, np.int8), "ys": np.array(0.1, np.float32),
               "yz": np.array(120, np.uint8),
               "b": RNG.integers(-500, 500, f).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], group=group, strides=[stride, stride], pads=pads)
    got, want = run_both(node, {"x": x}, weights, np.uint8)
    np.testing.assert_array_equal(got, want)


def test_matmul_integer_batched_with_zero_points():
    a = RNG.integers(0, 256, (2, 5, 7)).astype(np.uint8)
    b = RNG.integers(0, 256, (7, 3)).astype(np.uint8)
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    got, want = run_both(node, {"a": a, "b": b}, {"az": np.array(17, np.uint8),
                                                  "bz": np.array(201, np.uint8)}, np.int32)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, (a.astype(np.int32) - 17) @ (b.astype(np.int32) - 201))
