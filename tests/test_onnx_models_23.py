"""The models of issue 23, exported from PyTorch (tests/models/make_torch_models_23.py: opset
17, random weights, a symbolic batch N), imported and built by tdsl, and compared with
PyTorch's outputs saved beside them and with onnxruntime: an LSTM keyword spotter, a
bidirectional GRU tagger, a 1-D audio CNN on raw 16 kHz samples, a DCGAN generator
(ConvTranspose2d), a U-Net (ConvTranspose2d and bilinear Upsample), a 3-D conv block, and a
CNN quantized by onnxruntime's quantize_static (QDQ), bit-exact with onnxruntime's output,
on the host's C and on c-embedded (the host and an emulated Cortex-M4F)."""
from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")

import tdsl  # noqa: E402
from tdsl.onnx_import import OnnxModule, convert_model  # noqa: E402
from test_onnx_models import MODELS, onnxruntime_outputs, saved  # noqa: E402

FLOAT = ["lstm_kws", "gru_tagger", "audio_cnn1d", "dcgan_generator", "unet", "conv3d_block"]
QDQ = "cnn_qdq"
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


@needs_gcc
@pytest.mark.parametrize("name", FLOAT)
def test_pytorch_export_matches_pytorch_and_onnxruntime(name):
    model = onnx.load(str(MODELS / f"{name}.onnx"))
    inputs, want = saved(name)
    got = as_tuple(OnnxModule(model)(*inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    for g, w in zip(got, onnxruntime_outputs(model, inputs)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def _qdq_graph(batch):
    model = onnx.load(str(MODELS / f"{QDQ}.onnx"))
    text, params = convert_model(model, "cnn_qdq", dims={"N": batch})
    return model, text, params


def test_qdq_pattern_is_compiled_as_integer_ops():
    """Every DequantizeLinear -> Conv/Gemm -> QuantizeLinear is computed on the integers:
    the Convs on the centred values (x - x_zp and w - w_zp), on x86 as std conv2d_i16 (i16
    values summed in i32: `quantized._conv_i16`), elsewhere as std conv2d (integers that f32
    sums exactly here: `quantized._conv_f32_exact`), each with a requantizing epilogue, the
    Gemm as one i32 op on int8 weights; no float convolution of dequantized values or dense
    is left. DequantizeLinear -> MaxPool / Flatten -> QuantizeLinear of one scale is the op
    on the integers."""
    _, text, params = _qdq_graph(2)
    i16 = tdsl.Target("c").has_i16_dot         # the route convert_model takes for the host
    body = text[text.index("graph cnn_qdq"):]
    assert body.count("= conv2d_i16(" if i16 else "= conv2d(") == 2
    assert body.count("= requantize_") == 2
    assert body.count("= qconv_input_") == 2 and body.count("qdq_matmul_") == 1
    assert "qlinear_conv_" not in body and "dense(" not in body and "gemm" not in body
    # MaxPool and Flatten run on the int8 values: the one QuantizeLinear left is the
    # input's, the one DequantizeLinear the output's
    assert body.count("= quantize_") == 1 and body.count("= dequantize_") == 1
    assert "max_pool2d(" not in body
    model = onnx.load(str(MODELS / f"{QDQ}.onnx"))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    convs = [v for k, v in params.items() if k.endswith("_w16" if i16 else "_wf")]
    assert len(convs) == 2 and all(v.dtype == (np.int16 if i16 else np.float32) and
                                   np.all(v == np.round(v)) for v in convs)
    shapes = [v.shape for k, v in inits.items() if "weight_quantized" in k and v.ndim == 4]
    # the i16 route pads an RGB image's 3 channels to 4 (zero weights)
    assert sorted(v.shape for v in convs) == sorted(
        (f, c + (-c % 4 if i16 else 0), kh, kw) for f, c, kh, kw in shapes)
    dense = [v for k, v in params.items() if "weight_quantized" in k]
    assert len(dense) == 1 and dense[0].dtype == np.int8


@needs_gcc
def test_quantized_cnn_is_bit_exact_with_onnxruntime():
    model = onnx.load(str(MODELS / f"{QDQ}.onnx"))
    (x,), (want,) = saved(QDQ)
    module = OnnxModule(model)
    np.testing.assert_array_equal(module(x), want)          # onnxruntime's, saved
    x2 = np.random.default_rng(7).standard_normal((3,) + x.shape[1:]).astype(np.float32) * 2
    np.testing.assert_array_equal(module(x2), onnxruntime_outputs(model, [x2])[0])


@pytest.mark.parametrize("spec", ["c-embedded", "c-embedded -mcpu=cortex-m4"])
def test_quantized_cnn_builds_for_c_embedded_bit_exact(spec):
    from embedded_cases import target_or_skip
    target = target_or_skip(spec)
    (x,), (want,) = saved(QDQ)
    _, text, params = _qdq_graph(len(x))
    graph = tdsl.loads(text)["cnn_qdq"]
    with warnings.catch_warnings():      # schedule fallbacks of fused kernels are not ours
        warnings.simplefilter("ignore")
        built = graph.build(target, params=params)
    np.testing.assert_array_equal(built(x), want)


def _qdq_model(relu, per_channel, bias_scale_factor=1.0):
    """u8 activations, s8 weights: DQ -> Conv (-> Relu) -> Q -> DQ -> MatMul -> Q -> DQ."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(11)
    xs, xz, ys, yz, y2s, y2z = 0.02, 120, 0.05, 0, 0.11, 131
    w = rng.integers(-60, 61, (6, 3, 3, 3)).astype(np.int8)
    ws = (rng.uniform(0.004, 0.01, 6) if per_channel else np.array(0.007)).astype(np.float32)
    b = rng.integers(-500, 500, 6).astype(np.int32)
    m = rng.integers(-60, 61, (7, 5)).astype(np.int8)
    ms = rng.uniform(0.004, 0.01, 5).astype(np.float32)
    inits = {"xs": np.float32(xs), "xz": np.uint8(xz), "w": w, "ws": ws, "wz": np.zeros(
        ws.shape, np.int8), "b": b, "bs": (np.float32(xs) * ws * bias_scale_factor).astype(
        np.float32), "ys": np.float32(ys), "yz": np.uint8(yz), "m": m, "ms": ms,
        "mz": np.zeros(5, np.int8), "y2s": np.float32(y2s), "y2z": np.uint8(y2z)}
    dq, q = "DequantizeLinear", "QuantizeLinear"
    nodes = [helper.make_node(dq, ["xq", "xs", "xz"], ["x"]),
             helper.make_node(dq, ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node(dq, ["b", "bs"], ["bf"], axis=0),
             helper.make_node("Conv", ["x", "wf", "bf"], ["c"], pads=[1, 1, 1, 1])]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    nodes += [helper.make_node(q, ["r" if relu else "c", "ys", "yz"], ["cq"]),
              helper.make_node(dq, ["cq", "ys", "yz"], ["cf"]),
              helper.make_node(dq, ["m", "ms", "mz"], ["mf"], axis=1),
              helper.make_node("MatMul", ["cf", "mf"], ["y"]),
              helper.make_node(q, ["y", "y2s", "y2z"], ["yq"]),
              helper.make_node(dq, ["yq", "y2s", "y2z"], ["out"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info(
        "xq", TensorProto.UINT8, [1, 3, 5, 7])], [helper.make_tensor_value_info(
            "out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@needs_gcc
@pytest.mark.parametrize("relu, per_channel", [(True, True), (False, False)])
def test_qdq_fusion_u8_per_channel_relu_matmul_bit_exact(relu, per_channel):
    model = _qdq_model(relu, per_channel)
    text, _ = convert_model(model, "qdq")
    assert "= conv2d(" in text and "requantize_" in text and "qdq_matmul_" in text and \
        "quantize_" not in text.replace("dequantize_", "").replace("requantize_", "")
    x = np.random.default_rng(3).integers(0, 256, (1, 3, 5, 7)).astype(np.uint8)
    np.testing.assert_array_equal(OnnxModule(model)(x), onnxruntime_outputs(model, [x])[0])


def test_qdq_not_fused_when_the_bias_scale_is_not_x_times_w():
    """An int32 bias of another scale than x_scale * w_scale is not the accumulator's:
    the float route, as ONNX defines it, is kept (and the Conv's DequantizeLinear
    operands are computed)."""
    text, _ = convert_model(_qdq_model(False, False, bias_scale_factor=2.0), "qdq")
    assert "qlinear_conv_" not in text and "requantize_" not in text and "qdq_matmul_" in text
