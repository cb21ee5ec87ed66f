"""ONNX import: models built with onnx's helper API (zoo-like; the zoo's own architectures
are in test_onnx_zoo.py), converted, compiled, and compared with onnxruntime where it is
installed and with the graph's reference otherwise. Needs the onnx package (tdsl[onnx])."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
from onnx import TensorProto, helper  # noqa: E402

import tdsl  # noqa: E402
from tdsl import cli  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import onnx_models  # noqa: E402
from block_targets import BLOCKS, run_target  # noqa: E402

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def run_onnx(model, x):
    """onnxruntime's output, or None when it is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {model.graph.input[0].name: x})[0]


def input_for(model):
    dims = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(1).standard_normal(dims).astype(np.float32)


def _blocked_and_checked(model, block):
    """``model`` imported and built blocked by ``block`` on a target that runs here, its
    output checked against the graph's reference and onnxruntime: (module, input)."""
    text, params = convert_model(model, "net")
    g = tdsl.loads(text)["net"]
    x = input_for(model)
    m = g.build(run_target(block), params=params, layout=True)
    got = m(x)
    np.testing.assert_allclose(got, g.reference(x, params=params), rtol=1e-4, atol=1e-5)
    want = run_onnx(model, x)
    if want is not None:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    return m, x


@needs_gcc
@pytest.mark.parametrize("make", [
    lambda: onnx_models.resnet_stack(opset=17),
    lambda: onnx_models.resnet_stack(opset=9),
    lambda: onnx_models.squeezenet_like(opset=7),
    lambda: onnx_models.squeezenet_like(opset=9),
    lambda: onnx_models.mobilenet_like(opset=17),
    lambda: onnx_models.densenet_like(opset=9),
    lambda: onnx_models.inception_like(opset=7),
    lambda: onnx_models.alexnet_like(opset=9),
], ids=["resnet-17", "resnet-9", "squeezenet-7", "squeezenet-9", "mobilenet-17", "densenet-9",
        "inception-7", "alexnet-9"])
def test_zoo_like_models_import_and_match(make):
    model = make()
    text, params = convert_model(model, "net")
    g = tdsl.loads(text)["net"]
    x = input_for(model)
    ref = g.reference(x, params=params)
    got = g.build(params=params)(x)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    want = run_onnx(model, x)
    if want is not None:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


_MAKERS = [lambda: onnx_models.squeezenet_fires(),
           lambda: onnx_models.densenet_like(opset=9, stem=64, growth=32)]


@needs_gcc
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("make", _MAKERS, ids=["squeezenet-fires", "densenet-64-32"])
def test_concatenations_of_blocked_activations_match_at_both_block_widths(make, block):
    """SqueezeNet's Fire modules (64 + 64 channels, and 24 + 40) and DenseNet's dense layers
    (64 + 32 + 32) concatenate activations the layout pass keeps blocked: a from_nchwc and
    the concat fuse into one kernel, with the to_nchwc after it where nothing that computes
    comes between (in SqueezeNet; DenseNet's batch norm does). Its read of the blocked input
    under the concat's guard, ``in0[n, (8 * cb + ci) // 8, ...]`` where ``8 * cb + ci <
    64``, was once refused at call time (the region check bounded it by the whole output),
    which broke the zoo's SqueezeNet and DenseNet-121 on an AVX2 host; the same at 16 lanes
    with these widths. Both block widths run on any host (`block_targets`)."""
    m, x = _blocked_and_checked(make(), block)
    c = m.compiled(x)
    assert f"NCHW{block}c" in c.layouts.values()
    fused = [f.ops for f in c.functions if any(op.startswith("concat") for op in f.ops)]
    assert all(ops[0] == "from_nchwc" for ops in fused), fused
    assert any(ops[-1] == "to_nchwc" for ops in fused) == (make is _MAKERS[0]), fused


@needs_gcc
@pytest.mark.parametrize("block", BLOCKS)
def test_imported_activations_and_broadcast_scales_stay_blocked(block):
    """MobileNetV3's HardSwish and HardSigmoid import as generated elementwise ops, and its
    squeeze-and-excitation Mul broadcasts a [1, C, 1, 1] scale over the pixels: the layout
    pass runs all of them on blocked activations, so the block has one conversion to NCHW,
    at its output (there were four, a quarter of the block's time, with HardSwish, the
    global pool and the Mul on NCHW)."""
    m, x = _blocked_and_checked(onnx_models.mobilenetv3_like(c=block, e=2 * block), block)
    ops = [op for f in m.compiled(x).functions for op in f.ops]
    assert ops.count("from_nchwc") == 1 and ops[-1] == "from_nchwc", ops
    assert "global_avg_pool2d_nchwc" in ops
    blocked = {v for v, layout in m.compiled(x).layouts.items() if layout == f"NCHW{block}c"}
    assert {"ea", "da", "se"} <= blocked, blocked       # HardSwish, the Mul


def test_blocked_channels_takes_channel_reads_only():
    """The layout pass's rewrite of a generated 4-D op onto blocked channels: a read of the
    channel at the output's channel index becomes [c // block, c % block]; an input read
    without the channel (broadcast over the channels, a resize's index table) stays as it
    is; the channel index used in arithmetic or read elsewhere, and a gathered index, are
    refused."""
    from tdsl.lowering.graph.layout import blocked_channels
    from tdsl.lowering.reference.semantics import evaluate

    def fn(body, inputs):
        params = ", ".join(f"A{k}: {t}" for k, t in enumerate(inputs))
        return tdsl.loads(f"op f({params}) -> Y: f32[1, 32, 4, 4] {{\n"
                          f"    Y[n, c, y, x] = {body}\n}}\n")["f"].function()

    def blocked(v):
        return v.reshape(1, 4, 8, *v.shape[2:]).transpose(0, 1, 3, 4, 2)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 32, 4, 4)).astype(np.float32)
    s = rng.standard_normal((1, 32, 1, 1)).astype(np.float32)
    p = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    scaled, on_blocks = blocked_channels(fn("A0[n, c, y, x] * A1[0, c, 0, 0] + A2[0, 0, y, x]",
                                            ["f32[1, 32, 4, 4]", "f32[1, 32, 1, 1]",
                                             "f32[1, 1, 4, 4]"]), 8)
    assert on_blocks == (True, True, False)
    assert [tuple(d.value for d in ph.shape) for ph in scaled.inputs] == \
        [(1, 4, 4, 4, 8), (1, 4, 1, 1, 8), (1, 1, 4, 4)]
    y = evaluate(scaled, [blocked(a), blocked(s), p], {})[0]
    np.testing.assert_array_equal(y, blocked(a * s + p))
    # a vector of the channels (an imported requantization's scales): read as [cb, ci]
    v = rng.standard_normal(32).astype(np.float32)
    per_channel, on_blocks = blocked_channels(fn("A0[n, c, y, x] * A1[c]",
                                                 ["f32[1, 32, 4, 4]", "f32[32]"]), 8)
    assert on_blocks == (True, True)
    assert tuple(d.value for d in per_channel.inputs[1].shape) == (4, 8)
    y = evaluate(per_channel, [blocked(a), v.reshape(4, 8)], {})[0]
    np.testing.assert_array_equal(y, blocked(a * v.reshape(1, 32, 1, 1)))
    assert blocked_channels(fn("A0[n, c, y, x] * A1[31 - c]",
                               ["f32[1, 32, 4, 4]", "f32[32]"]), 8) is None
    assert blocked_channels(fn("A0[n, c, y, x] * A1[c]",
                               ["f32[1, 32, 4, 4]", "f32[64]"]), 8) is None
    # a reduction over a window: blocked; a gathered index (a resize's table): refused
    pooled, _ = blocked_channels(fn("sum[t: 2](A0[n, c, y // 2 * 2 + t, x])",
                                    ["f32[1, 32, 4, 4]"]), 8)
    y = evaluate(pooled, [blocked(a)], {})[0]
    np.testing.assert_array_equal(y, blocked(a[:, :, [0, 0, 2, 2]] + a[:, :, [1, 1, 3, 3]]))
    assert blocked_channels(fn("sum[t: 2](A0[n, c, A1[y, t], x])",
                               ["f32[1, 32, 4, 4]", "i32[4, 2]"]), 8) is None
    i32 = "f32[1, 32, 4, 4]"
    assert blocked_channels(fn("A0[n, c, y, x] * f32(c)", [i32]), 8) is None
    assert blocked_channels(fn("A0[n, c, y, x] + A0[n, 0, y, x]", [i32]), 8) is None
    assert blocked_channels(fn("A0[n, c, y, x]", [i32]), 12) is None


def test_weights_listed_as_inputs_are_weights_and_std_ops_are_used():
    text, params = convert_model(onnx_models.squeezenet_like(opset=7), "net")
    g = tdsl.loads(text)["net"]
    assert g.inputs == ["x"]
    assert {"c1_w", "c1_b", "fc_w"} <= set(params)
    ops = [n.op for n in g.ir.nodes]
    assert "conv2d" in ops and "bias_add" in ops and "matmul" in ops and "softmax" in ops
    assert any(op.startswith("lrn") for op in ops)        # LRN, written for its shape
    assert "Dropout" not in text and "dr" not in g.ir.outputs


def test_resnet_blocks_become_fusable_std_ops():
    text, _ = convert_model(onnx_models.resnet_stack(opset=17), "net")
    ops = [n.op for n in tdsl.loads(text)["net"].ir.nodes]
    assert ops.count("conv2d") == 5 and ops.count("batch_norm") == 5
    assert "dense" in ops and "global_avg_pool2d" in ops


def _single(op_type, inputs, attrs=None, opset=17, shape=(1, 4, 8, 8)):
    node = helper.make_node(op_type, ["x", *inputs], ["y"], name="the_node", **(attrs or {}))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_an_unsupported_operator_is_named():
    with pytest.raises(tdsl.TdslError, match=r"node the_node \(StringNormalizer\): this "
                                             r"operator is not supported"):
        convert_model(_single("StringNormalizer", [], {}), "net")


def test_an_unsupported_attribute_is_named():
    with pytest.raises(tdsl.TdslError, match=r"node the_node \(MaxPool\): attribute "
                                             r"'foo' is not supported"):
        convert_model(_single("MaxPool", [], {"kernel_shape": [2, 2], "foo": 1}), "net")


@needs_gcc
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "pads": [0, 1, 1, 0]},
])
def test_pools_the_std_ops_do_not_cover(attrs):
    for op in ("MaxPool", "AveragePool"):
        model = _single(op, [], attrs, shape=(1, 2, 7, 7))
        text, params = convert_model(model, "net")
        g = tdsl.loads(text)["net"]
        x = input_for(model)
        got = g.build(params=params)(x)
        want = run_onnx(model, x)
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_tdsl_import_writes_the_graph_and_its_weights(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(onnx_models.mobilenet_like(), str(path))
    out = tmp_path / "out" / "mobile.tdsl"
    assert cli.main(["import", str(path), "-o", str(out)]) == 0
    assert "graph mobile" in capsys.readouterr().out
    g = tdsl.load(out)["mobile"]
    weights = g.load_params(out.with_suffix(".npz"))
    assert set(weights) == set(g.params)
    assert cli.main(["import", str(tmp_path / "missing.onnx"), "-o", str(out)]) == 1
    assert "can't read" in capsys.readouterr().err


@needs_gcc
def test_pad_and_grouped_conv_as_shufflenet_uses_them():
    """Constant Pad (opset 11 inputs), a grouped conv (group 2: neither std conv) and a
    channel shuffle (Reshape -> Transpose -> Reshape), against onnxruntime."""
    from onnx import numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "pads"),
             numpy_helper.from_array(np.array(0.5, np.float32), "pv"),
             numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 2, 2, 6, 6], np.int64), "s5"),
             numpy_helper.from_array(np.array([1, 4, 6, 6], np.int64), "s4")]
    nodes = [helper.make_node("Pad", ["x", "pads", "pv"], ["p"]),
             helper.make_node("Conv", ["p", "w"], ["c"], group=2, strides=[1, 1]),
             helper.make_node("Reshape", ["c", "s5"], ["r5"]),
             helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t5", "s4"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 4, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    text, params = convert_model(model, "net")
    net = tdsl.loads(text)["net"]
    x = input_for(model)
    got = net.build(params=params)(x)
    np.testing.assert_allclose(got, net.reference(x, params=params), rtol=1e-5, atol=1e-5)
    want = run_onnx(model, x)
    if want is not None:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
