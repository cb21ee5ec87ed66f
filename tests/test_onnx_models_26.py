"""Issue 26's benchmark models (tests/onnx_models.py: MobileNetV2, a BERT-base encoder
layer, a ResNet basic block and its int8 QDQ form from onnxruntime's quantize_static),
imported and built by tdsl at small sizes and compared with onnxruntime; the full sizes
bench_graphs.py times are marked slow."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime")

import onnx_models  # noqa: E402
from onnx_check import run_imported  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def ort_output(model, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {model.graph.input[0].name: x})[0]


def _runs(target: str) -> bool:
    import tdsl
    try:
        return tdsl.Target(target).unrunnable_reason() is None
    except tdsl.TdslError:                      # not an x86-64 gcc
        return False


def check(model, atol, exact=False):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    _, (got,) = run_imported(model, x)
    want = ort_output(model, x)
    assert got.shape == want.shape and np.abs(want).max() > 1e-2   # not a vanished signal
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol)


def test_mobilenetv2_architecture():
    """17 inverted residual blocks (10 with a shortcut), 52 convolutions, 17 of them
    depthwise, ReLU6 as Clip, 1000 classes."""
    g = onnx_models.mobilenetv2().graph
    ops = [n.op_type for n in g.node]
    convs = [n for n in g.node if n.op_type == "Conv"]
    depthwise = [n for n in convs if any(a.name == "group" and a.i > 1 for a in n.attribute)]
    assert (len(convs), len(depthwise), ops.count("Add"), ops.count("Clip")) == (52, 17, 10, 35)
    shapes = {i.name: list(i.dims) for i in g.initializer}
    assert shapes["fc_w"] == [1000, 1280]


def test_mobilenetv2_small_matches_onnxruntime():
    check(onnx_models.mobilenetv2(hw=32, width=0.25, classes=10), atol=1e-4)


def test_bert_layer_small_matches_onnxruntime():
    check(onnx_models.bert_base_layer(seq=16, d=64, heads=4), atol=1e-4)


def test_int8_resnet_block_is_qdq_and_bit_exact_with_onnxruntime():
    f32, q = onnx_models.resnet_block_int8(c=8, hw=10)
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("Conv") == 2 and "QuantizeLinear" in ops and "DequantizeLinear" in ops
    check(f32, atol=1e-4)
    check(q, atol=0, exact=True)


# the host, and on x86 AVX2 code (no int8 dot product: the i16 route) where the host runs it
STEM_TARGETS = ["c"] + (["c -march=x86-64-v3"] if shutil.which("gcc") and
                        _runs("c -march=x86-64-v3") else [])


@pytest.mark.parametrize("target", STEM_TARGETS)
def test_int8_blocks_quantize_runs_on_nchw_and_converts_its_u8_result(target):
    """The block's input quantize (f32 -> u8) narrows its values: it runs on the NCHW
    input, whose flat rows are whole vectors, and its u8 result, a quarter of the bytes, is
    what the layout pass converts (to_nchwc_u8, a kernel of its own) for the convolution
    and the residual; no f32 value is converted on the way in. (Without an int8 dot
    product the convolution takes i16 values, padded in NCHW first: the quantize leads
    all the same.)"""
    import tdsl
    from tdsl.onnx_import import convert_model
    # 7-bit weights: onnxruntime's own answer is the exact one on an AVX2 host too
    q = onnx_models.quantize_qdq(onnx_models.resnet_block_int8(c=16, hw=12)[0],
                                 reduce_range=True)
    text, params = convert_model(q, "net", target=target)
    x = np.random.default_rng(5).standard_normal((1, 16, 12, 12)).astype(np.float32)
    built = tdsl.loads(text)["net"].build(target, params=params)
    np.testing.assert_array_equal(built(x), ort_output(q, x))
    kernels = [f.ops for f in built.compiled(x).functions]
    assert kernels[0][0].startswith("quantize") and "to_nchwc" not in kernels[0], kernels
    if tdsl.Target(target).has_int8_dot:
        assert kernels[1] == ("to_nchwc_u8",), kernels
        assert not any("to_nchwc" in ops for ops in kernels), kernels


@pytest.mark.parametrize("target", STEM_TARGETS)
def test_int8_resnet_stem_runs_blocked_and_bit_exact_with_onnxruntime(target):
    """The quantized stem (7x7/2 conv of an RGB image, batch norm, ReLU, 3x3/2 max pool):
    its requantization (scales per channel) and batch norm run on blocked values, the pool
    on blocked u8 values (max_pool2d_nchwc_u8), with no layout change between the image's
    and the output's; with an int8 dot product the stem is the u8 convolution with them as
    its epilogue, its 3 channels padded to 4, on other x86 CPUs the i16 one, likewise
    padded. The image is quantized and padded in NCHW, its rows whole vectors, and the
    result converted in a kernel of its own (fused, the quantize would run in the
    conversion's order, a channel at a time)."""
    import tdsl
    from tdsl.onnx_import import convert_model
    # 7-bit weights: onnxruntime's own answer is the exact one on an AVX2 host too
    q = onnx_models.quantize_qdq(onnx_models.resnet_stem(), reduce_range=True)
    text, params = convert_model(q, "net", target=target)
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    built = tdsl.loads(text)["net"].build(target, params=params)
    np.testing.assert_array_equal(built(x), ort_output(q, x))
    kernels = [f.ops for f in built.compiled(x).functions]
    layouts = [op for ops in kernels for op in ops if op.startswith(("to_nchwc", "from_nchwc"))]
    assert len(layouts) == 2 and kernels[-1] == ("from_nchwc",), kernels
    assert kernels[0][0] == "quantize_0" and kernels[1][0].startswith("to_nchwc"), kernels
    assert ("max_pool2d_nchwc_u8",) in kernels
    t = tdsl.Target(target)
    if t.has_int8_dot:
        assert kernels[2][0] == "qlinear_conv2d_nchwc" and "scale_shift_nchwc" in kernels[2]
    elif t.has_i16_dot:
        assert kernels[2] == ("conv2d_nchwc_i16",) and "scale_shift_nchwc" in kernels[3]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenetv2", "bert_base_layer", "int8_block"])
def test_full_size_matches_onnxruntime(name):
    if name == "int8_block":
        check(onnx_models.resnet_block_int8()[1], atol=0, exact=True)
    else:
        check(getattr(onnx_models, name)(), atol=2e-3)


@pytest.mark.parametrize("target", STEM_TARGETS)
def test_the_profile_bounds_int8_kernels_by_their_dot_products_peak(target):
    """An int8 convolution's operations (2 a product) are counted against the peak of the
    dot product it sums with (VNNI's u8 x i8 fours, else the i16 pairs), not the fp32 FMA
    peak: at a peak given, its % and its time at the peak follow from its operations; with
    none, its time stays as measured and no % is printed."""
    import tdsl
    from tdsl.onnx_import import convert_model
    _, q = onnx_models.resnet_block_int8(c=8, hw=10)
    text, params = convert_model(q, "net", target=target)
    m = tdsl.loads(text)["net"].build(target, params=params)
    x = np.random.default_rng(3).standard_normal((1, 8, 10, 10)).astype(np.float32)
    t = tdsl.Target(target)
    kind = "dot4_u8i8" if t.has_int8_dot else "dot2_i16"
    p = m.profile(x, passes=2, peak=100.0, integer_peak=1e6)
    convs = [r for r in p.rows if r.bound == "compute"]
    assert len(convs) == 2 and all(r.integer_dot == kind for r in convs)
    for r in convs:
        assert r.flops >= 2 * 8 * 10 * 10 * 8 * 9    # 8 -> 8 channels, 3x3, 10x10 (and its
        #                                              zero point's sums, as flop_count counts)
        assert r.peak_percent == pytest.approx(100 * r.gflops / 1e6)
        assert r.peak_seconds == pytest.approx(r.flops / 1e15)
    assert all(r.peak_seconds == r.seconds for r in p.rows if r.bound == "memory")
    assert p.integer_peaks == ((kind, 1e6),)
    assert f"peak 1000000 GOP/s of the integer dot product {kind}" in str(p)
    none = m.profile(x, passes=1, peak=100.0, integer_peak=None)
    assert not none.integer_peaks
    assert all(r.peak_percent is None and r.peak_seconds == r.seconds for r in none.rows
               if r.bound == "compute")
    assert "integer ones at their dot product peak" not in str(none)
