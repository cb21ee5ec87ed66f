"""The fast paths of imported convolutions (issue 26), against onnxruntime and ONNX's
reference, each asserting that the path was taken (or, past its limits, that the generic
op was):

- QLinearConv, and the QDQ pattern DequantizeLinear -> Conv [-> Relu] -> QuantizeLinear,
  of constant weights as std qlinear_conv2d (u8 activations, symmetric i8 weights, no
  groups, multiples of 4 channels, one padding: `quantized._conv_u8`), else on x86 with
  multiples of 4 filters and channels (or 3 padded to 4) and no groups as std conv2d_i16
  on the centred integers in i16 (`quantized._conv_i16`), else as std conv2d /
  depthwise_conv2d on them in f32 (`quantized._conv_f32_exact`), each with a requantizing
  epilogue: bit-exact with onnxruntime over u8/i8 inputs and weights, per-tensor and
  per-channel scales and zero points, strides, dilations, asymmetric pads, depthwise
  groups, bias or none; past the f32-exact bound the integer op is kept;
- Conv3d of constant weights as one std conv2d (`conv._conv3d_as_2d`): strides, dilations,
  asymmetric pads, batches, kernels of depth 1 and more, against ONNX's reference.
"""
from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tdsl  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
HOST_INT8_DOT = tdsl.target.as_target("c").has_int8_dot    # the u8 route is taken
HOST_I16_DOT = tdsl.target.as_target("c").has_i16_dot      # and the i16 one
_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.uint8): TensorProto.UINT8,
          np.dtype(np.int8): TensorProto.INT8, np.dtype(np.int32): TensorProto.INT32}


def _run(nodes, x, inits, out_type):
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", _TYPES[x.dtype], list(x.shape))],
        [helper.make_tensor_value_info("y", _TYPES[np.dtype(out_type)], None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    text, params = convert_model(m, "net")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = tdsl.loads(text)["net"].build(params=params)(x)
    return m, text, got


def _ort(m, x):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _out_size(i, k, s, d, lo, hi):
    return (i + lo + hi - d * (k - 1) - 1) // s + 1


@st.composite
def _qconv(draw):
    depthwise = draw(st.booleans())
    c = draw(st.integers(1, 5))
    f = c if depthwise else draw(st.integers(1, 9))
    k = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    s, d = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, 2)) for _ in range(4)]
    hw = [draw(st.integers(max(1, d * (kk - 1) + 1 - pads[a] - pads[a + 2]), 9))
          for a, kk in enumerate(k)]
    xdt = draw(st.sampled_from([np.uint8, np.int8]))
    wdt = draw(st.sampled_from([np.int8, np.uint8] if xdt is np.uint8 else [np.int8]))
    per_channel = draw(st.booleans())
    return dict(depthwise=depthwise, c=c, f=f, k=k, s=s, d=d, pads=pads, hw=hw, xdt=xdt,
                wdt=wdt, per_channel=per_channel, n=draw(st.integers(1, 2)),
                bias=draw(st.booleans()), relu=draw(st.booleans()),
                seed=draw(st.integers(0, 2 ** 31)))


def _qconv_case(p):
    rng = np.random.default_rng(p["seed"])
    c, f, xdt, wdt = p["c"], p["f"], p["xdt"], p["wdt"]
    cg = 1 if p["depthwise"] else c
    ii = np.iinfo(wdt)
    w = rng.integers(ii.min, ii.max + 1, (f, cg, *p["k"])).astype(wdt)
    nz = f if p["per_channel"] else 1
    wz = (rng.integers(ii.min, ii.max + 1, nz) if wdt is np.uint8 else np.zeros(nz)) \
        .astype(wdt)
    ws = rng.uniform(0.002, 0.02, nz).astype(np.float32)
    xi = np.iinfo(xdt)
    x = rng.integers(xi.min, xi.max + 1, (p["n"], c, *p["hw"])).astype(xdt)
    inits = {"xs": np.float32(rng.uniform(0.01, 0.05)),
             "xz": xdt(rng.integers(xi.min, xi.max + 1)), "w": w,
             "ws": ws if p["per_channel"] else ws.reshape(()),
             "wz": wz if p["per_channel"] else wz.reshape(()),
             "ys": np.float32(rng.uniform(0.05, 0.3)),
             "yz": xdt(rng.integers(xi.min, xi.max + 1))}
    if p["bias"]:
        inits["b"] = rng.integers(-3000, 3000, f).astype(np.int32)
    attrs = dict(group=c if p["depthwise"] else 1, strides=[p["s"]] * 2,
                 dilations=[p["d"]] * 2, pads=p["pads"], kernel_shape=p["k"])
    # the bound _conv_f32_exact checks: the fast path's limit
    wc = w.astype(np.int64) - inits["wz"].astype(np.int64).reshape(-1, 1, 1, 1)
    x_max = max(xi.max - int(inits["xz"]), int(inits["xz"]) - xi.min)
    bound = x_max * np.abs(wc).reshape(f, -1).sum(1).max() + \
        (np.abs(inits["b"]).max() if p["bias"] else 0)
    return x, inits, attrs, bound <= 1 << 24


def _route(p, inits) -> str:
    """The path a case takes: "u8" (`quantized._conv_u8`), "i16" (`_conv_i16`), "f32"
    (`_conv_f32_exact`, within its bound) or "integer" (the generic op)."""
    if HOST_INT8_DOT and p["xdt"] is np.uint8 and p["wdt"] is np.int8 and \
            not np.any(inits["wz"]) and \
            not (p["depthwise"] and p["c"] > 1) and 3 * (-p["c"] % 4) <= p["c"] and \
            p["f"] % 4 == 0 and \
            len(set(p["pads"])) == 1:
        return "u8"
    if HOST_I16_DOT and not (p["depthwise"] and p["c"] > 1) and 3 * (-p["c"] % 4) <= p["c"] \
            and p["f"] % 4 == 0:
        return "i16"
    return "f32" if _qconv_case(p)[3] else "integer"


@settings(max_examples=40, deadline=None)
@given(_qconv())
@example(dict(depthwise=False, c=16, f=16, k=[3, 3], s=1, d=1, pads=[1, 1, 1, 1], hw=[8, 8],
              xdt=np.uint8, wdt=np.int8, per_channel=True, n=1, bias=True, relu=True,
              seed=5)).via("the shape the blocked layout would run by Winograd")
@example(dict(depthwise=False, c=4, f=8, k=[3, 3], s=2, d=2, pads=[1, 2, 0, 1], hw=[9, 8],
              xdt=np.uint8, wdt=np.uint8, per_channel=True, n=2, bias=True, relu=True,
              seed=6)).via("the i16 route on x86 (asymmetric weights: no u8 route)")
@example(dict(depthwise=False, c=3, f=4, k=[3, 3], s=2, d=1, pads=[1, 1, 1, 1], hw=[9, 8],
              xdt=np.uint8, wdt=np.uint8, per_channel=False, n=1, bias=True, relu=False,
              seed=7)).via("the i16 route on an RGB image: channels padded to 4")
def test_qlinear_conv_of_constant_weights_runs_as_std_conv2d_bit_exact(p):
    x, inits, attrs, _ = _qconv_case(p)
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"] + (["b"] if p["bias"] else [])
    node = helper.make_node("QLinearConv", ins, ["y"], **attrs)
    m, text, got = _run([node], x, inits, p["xdt"])
    route = _route(p, inits)
    std = "= depthwise_conv2d(" if p["depthwise"] and p["c"] > 1 else "= conv2d("
    assert ("= qlinear_conv2d(" in text) == (route == "u8")
    assert (std in text and "requantize_" in text) == (route == "f32")
    assert ("= conv2d_i16(" in text and "requantize_" in text) == (route == "i16")
    assert ("qlinear_conv_" in text) == (route == "integer")
    want = _ort(m, x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=25, deadline=None)
@given(_qconv())
@example(dict(depthwise=False, c=8, f=12, k=[3, 3], s=2, d=1, pads=[1, 1, 1, 1], hw=[9, 7],
              xdt=np.uint8, wdt=np.int8, per_channel=True, n=2, bias=True, relu=True,
              seed=11)).via("the u8 route, strided, a batch of 2")
@example(dict(depthwise=False, c=4, f=4, k=[1, 1], s=1, d=1, pads=[0, 0, 0, 0], hw=[5, 5],
              xdt=np.uint8, wdt=np.int8, per_channel=False, n=1, bias=False, relu=False,
              seed=12)).via("the u8 route, 1x1, no bias")
@example(dict(depthwise=False, c=3, f=8, k=[3, 3], s=2, d=1, pads=[1, 1, 1, 1], hw=[9, 8],
              xdt=np.uint8, wdt=np.int8, per_channel=True, n=1, bias=True, relu=True,
              seed=13)).via("the u8 route on an RGB image: channels padded to 4")
def test_qdq_conv_relu_of_constant_weights_runs_as_std_conv2d_bit_exact(p):
    """DQ(x) and DQ(w) (and DQ(b)) into a float Conv, a Relu or not, then Q: what
    onnxruntime's quantize_static writes, and runs as QLinearConv."""
    x, inits, attrs, _ = _qconv_case(p)
    dq, q = "DequantizeLinear", "QuantizeLinear"
    nodes = [helper.make_node(dq, ["x", "xs", "xz"], ["xf"]),
             helper.make_node(dq, ["w", "ws", "wz"], ["wf"], axis=0)]
    conv_in = ["xf", "wf"]
    if p["bias"]:
        inits["bs"] = (inits["xs"] * inits["ws"]).astype(np.float32)
        inits["bz"] = np.zeros(inits["bs"].shape, np.int32)
        nodes.append(helper.make_node(dq, ["b", "bs", "bz"], ["bf"], axis=0))
        conv_in.append("bf")
    nodes.append(helper.make_node("Conv", conv_in, ["c"], **attrs))
    if p["relu"]:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    nodes.append(helper.make_node(q, ["r" if p["relu"] else "c", "ys", "yz"], ["y"]))
    m, text, got = _run(nodes, x, inits, p["xdt"])
    route = _route(p, inits)
    assert ("= qlinear_conv2d(" in text) == (route == "u8")
    assert ("requantize_" in text) == (route in ("f32", "i16"))
    assert ("= conv2d_i16(" in text) == (route == "i16")
    assert ("qlinear_conv_" in text) == (route == "integer")
    assert "dequantize_" not in text
    want = _ort(m, x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("wdt, wz", [(np.int8, 0), (np.uint8, 100)])
def test_qlinear_conv_past_the_f32_bound_splits_its_weights(wdt, wz):
    """Weights whose sum of |w - w_zp| times 255 passes 2^24 are summed in f32 as two
    digits of base 16 (two convolutions, each within the bound) added up in i32: 260
    channels of extreme and random weights, 2 filters (no u8 route), a large bias; the
    first filter's sums pass 2^24, where the requantization rounds f32(sum) as MLAS does."""
    rng = np.random.default_rng(1)
    c = 260                                     # 260 * 9 * 127 * 255 > 2^24
    ii = np.iinfo(wdt)
    w = np.full((2, c, 3, 3), ii.max, wdt)     # filter 0's sums pass 2^24 themselves
    w[1] = np.where(rng.random((c, 3, 3)) < 0.5, ii.max, ii.min)
    w[1, :100] = rng.integers(ii.min, ii.max + 1, (100, 3, 3))
    x = rng.integers(0, 256, (1, c, 4, 4)).astype(np.uint8)
    inits = {"xs": np.float32(0.02), "xz": np.uint8(3), "w": w, "ws": np.float32(1e-5),
             "wz": wdt(wz), "ys": np.float32(0.5), "yz": np.uint8(3),
             "b": np.array([-40000, 2 ** 20], np.int32)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], pads=[1, 1, 1, 1])
    m, text, got = _run([node], x, inits, np.uint8)
    assert "_acc1 = conv2d(" in text and "qlinear_conv_" not in text
    np.testing.assert_array_equal(got, _ort(m, x))


def test_qlinear_conv_past_the_split_bound_keeps_the_integer_op():
    """Past the bound of each digit too (1,000 channels of weights 127: 16 x 8 + -1, and
    9,000 taps of 8 x 255 pass 2^24), the integer op stays."""
    rng = np.random.default_rng(1)
    c = 1000
    w = np.full((2, c, 3, 3), 127, np.int8)
    x = rng.integers(0, 256, (1, c, 4, 4)).astype(np.uint8)
    inits = {"xs": np.float32(0.02), "xz": np.uint8(0), "w": w, "ws": np.float32(1e-6),
             "wz": np.int8(0), "ys": np.float32(0.5), "yz": np.uint8(3)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                            ["y"], pads=[1, 1, 1, 1])
    m, text, got = _run([node], x, inits, np.uint8)
    assert "qlinear_conv_" in text and "requantize_" not in text
    np.testing.assert_array_equal(got, _ort(m, x))


@pytest.mark.skipif(not HOST_I16_DOT, reason="this CPU has no i16 dot product (x86's pmaddwd)")
def test_qlinear_conv_past_the_f32_bound_takes_the_i16_route_exactly():
    """The i16 route sums in i32 too: 260 channels of u8 weights at their extremes, zero
    point 100 (so no u8 route), 4 filters, built for the host and for AVX2 code with the
    blocked layout (conv2d_nchwc_i16, the dot product) and without it (conv2d_i16's own
    register tile), bit-exact with onnxruntime."""
    rng = np.random.default_rng(3)
    c = 260
    w = np.where(rng.random((4, c, 3, 3)) < 0.5, 255, 0).astype(np.uint8)
    x = rng.integers(0, 256, (1, c, 5, 6)).astype(np.uint8)
    inits = {"xs": np.float32(0.02), "xz": np.uint8(250), "w": w,
             "ws": np.float32(1e-6), "wz": np.uint8(100), "ys": np.float32(0.5),
             "yz": np.uint8(3), "b": np.array([-40000, 2 ** 20, 0, 7], np.int32)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], pads=[1, 1, 1, 1])
    m, text, got = _run([node], x, inits, np.uint8)
    assert "= conv2d_i16(" in text and "qlinear_conv_" not in text
    want = _ort(m, x)
    np.testing.assert_array_equal(got, want)
    avx2 = "c -march=x86-64-v3"
    if tdsl.Target(avx2).unrunnable_reason():
        return                          # an x86 CPU without AVX2
    text, params = convert_model(m, "net", target=avx2)
    built = tdsl.loads(text)["net"].build(avx2, params=params)
    np.testing.assert_array_equal(built(x), want)
    assert any(f.fn.name == "conv2d_nchwc_i16" for f in built.compiled(x).functions)
    assert "tdsl_dot2_i16" in "".join(k.source for k in built.compiled(x).kernels)
    plain = tdsl.loads(text)["net"].build(avx2, params=params, layout=False)
    np.testing.assert_array_equal(plain(x), want)
    assert any("conv2d_i16" in f.ops for f in plain.compiled(x).functions)


@pytest.mark.skipif(not HOST_INT8_DOT, reason="this CPU has no int8 dot product (VNNI)")
def test_qlinear_conv_past_the_f32_bound_takes_the_u8_route_exactly():
    """The u8 route sums in i32, so the f32 bound does not limit it: 260 channels of
    weights 127 (and -128) against u8 inputs, 4 filters, bit-exact with onnxruntime."""
    rng = np.random.default_rng(2)
    c = 260
    w = np.where(rng.random((4, c, 3, 3)) < 0.5, 127, -128).astype(np.int8)
    x = rng.integers(0, 256, (1, c, 5, 6)).astype(np.uint8)
    inits = {"xs": np.float32(0.02), "xz": np.uint8(7), "w": w,
             "ws": np.float32(1e-5), "wz": np.int8(0), "ys": np.float32(0.5),
             "yz": np.uint8(3)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                            ["y"], pads=[1, 1, 1, 1])
    m, text, got = _run([node], x, inits, np.uint8)
    assert "= qlinear_conv2d(" in text and "qlinear_conv_" not in text
    np.testing.assert_array_equal(got, _ort(m, x))


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_conv3d_of_constant_weights_runs_as_std_conv2d(data):
    draw = data.draw
    n, c, f = draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 9))
    k = [draw(st.integers(1, 3)) for _ in range(3)]
    sd, s = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dd, d = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    strides, dil = [sd, s, s], [dd, d, d]
    pads = [draw(st.integers(0, 2)) for _ in range(6)]
    if draw(st.booleans()):                     # symmetric in H and W: conv2d's own padding
        pads[2] = pads[4] = pads[5] = pads[1]
    ins = [draw(st.integers(max(1, dil[a] * (k[a] - 1) + 1 - pads[a] - pads[a + 3]), 7))
           for a in range(3)]
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 31)))
    x = rng.standard_normal((n, c, *ins)).astype(np.float32)
    inits = {"w": rng.standard_normal((f, c, *k)).astype(np.float32)}
    if draw(st.booleans()):
        inits["b"] = rng.standard_normal(f).astype(np.float32)
    node = helper.make_node("Conv", ["x", *inits], ["y"], strides=strides, dilations=dil,
                            pads=pads)
    m, text, got = _run([node], x, inits, np.float32)
    assert "= conv2d(" in text and "conv3d_input_" in text
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv3d_of_unequal_height_and_width_strides_keeps_the_generic_op():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 4, 6, 6)).astype(np.float32)
    inits = {"w": rng.standard_normal((3, 2, 2, 3, 3)).astype(np.float32)}
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=[1, 1, 2])
    m, text, got = _run([node], x, inits, np.float32)
    assert "conv2d(" not in text and "conv3d_" in text
    np.testing.assert_allclose(got, ReferenceEvaluator(m).run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, route", [("c -march=icelake-server", "= qlinear_conv2d("),
                                           ("c -march=x86-64-v3", "requantize_")])
def test_the_target_chooses_the_int8_route(target, route):
    """Integer sums where the target has VNNI, the float route where it has not (its
    integer products would be 17x slower than f32 FMAs)."""
    w = np.ones((8, 8, 3, 3), np.int8)
    inits = {"xs": np.float32(0.02), "xz": np.uint8(7), "w": w, "ws": np.float32(1e-3),
             "wz": np.int8(0), "ys": np.float32(0.5), "yz": np.uint8(3)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                            ["y"], pads=[1, 1, 1, 1])
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    text, _ = convert_model(m, "net", target=target)
    assert route in text
