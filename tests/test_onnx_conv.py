"""ONNX import of convolution, pooling and resizing (tdsl/onnx_import/conv.py) in the
configurations ONNX's conformance cases leave out: 1-D and 3-D convolutions with groups,
dilations and asymmetric pads, grouped and dilated transposed convolutions, f64, MaxPool's
indices in 1-D and 3-D and column-major, 5-D resizes on chosen axes; and that 2-D f32
convolutions and pools still call the standard library's tuned ops."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tdsl  # noqa: E402
from tdsl.lowering import te  # noqa: E402
from tdsl.lowering.loop_ir import BufferLoad, For, stmt_exprs, walk_stmt  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

from onnx_check import assert_outputs_match, run_imported  # noqa: E402

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(op, x_shape, attrs=None, inits=(), extra_inputs=(), outputs=("y",),
           dtype=np.float32, opset=19):
    names = ["x"] + [n for n, _ in inits] + list(extra_inputs)
    node = helper.make_node(op, names, list(outputs), **(attrs or {}))
    tt = _TYPES[dtype]
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", tt, list(x_shape))],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, x, rtol=1e-5, atol=1e-5):
    text, got = run_imported(model, x)
    assert_outputs_match(got, ReferenceEvaluator(model).run(None, {"x": x}), rtol, atol)
    return text


rng = np.random.default_rng(0)


def _r(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@needs_gcc
def test_conv1d_grouped_dilated_asymmetric_with_bias():
    x, w, b = _r(2, 4, 11), _r(6, 2, 3), _r(6)
    m = _model("Conv", x.shape, {"group": 2, "dilations": [2], "strides": [2],
                                 "pads": [3, 1]}, [("w", w), ("b", b)])
    text = _check(m, x)
    assert "conv2d" not in text


@needs_gcc
def test_conv3d_same_lower_strided_f64():
    x, w = _r(1, 2, 5, 6, 4, dtype=np.float64), _r(3, 2, 2, 3, 2, dtype=np.float64)
    m = _model("Conv", x.shape, {"auto_pad": "SAME_LOWER", "strides": [2, 1, 2]},
               [("w", w)], dtype=np.float64)
    _check(m, x, rtol=1e-10, atol=1e-10)


@needs_gcc
def test_2d_f32_symmetric_conv_and_pool_still_call_the_std_ops():
    x, w, dw = _r(1, 4, 8, 8), _r(5, 4, 3, 3), _r(4, 1, 3, 3)
    assert "= conv2d(" in _check(_model("Conv", x.shape, {"pads": [1] * 4}, [("w", w)]), x)
    assert "= depthwise_conv2d(" in _check(
        _model("Conv", x.shape, {"group": 4, "strides": [2, 2]}, [("w", dw)]), x)
    assert "= max_pool2d(" in _check(
        _model("MaxPool", x.shape, {"kernel_shape": [2, 2], "strides": [2, 2]}), x)


def _conv_transpose_numpy(x, w, stride, pads, dil, group, opad):
    """ONNX ConvTranspose by its definition (a scatter), 1-D."""
    n, c, length = x.shape
    cg, mg, k = c // group, w.shape[1], w.shape[2]
    full = stride * (length - 1) + opad + (k - 1) * dil + 1
    y = np.zeros((n, mg * group, full), np.float64)
    for g in range(group):
        for ci in range(cg):
            for m in range(mg):
                for i in range(length):
                    for kk in range(k):
                        y[:, g * mg + m, i * stride + kk * dil] += \
                            x[:, g * cg + ci, i] * w[g * cg + ci, m, kk]
    return y[:, :, pads[0]:full - pads[1]].astype(x.dtype)


@needs_gcc
def test_conv_transpose_1d_grouped_dilated_strided():
    x, w = _r(2, 4, 5), _r(4, 3, 3)
    m = _model("ConvTranspose", x.shape, {"group": 2, "strides": [3], "dilations": [2],
                                          "pads": [1, 2], "output_padding": [1]}, [("w", w)])
    _, (got,) = run_imported(m, x)
    want = _conv_transpose_numpy(x, w, 3, (1, 2), 2, 2, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_gcc
def test_conv_transpose_3d_with_bias():
    x, w, b = _r(1, 2, 3, 2, 3), _r(2, 2, 2, 3, 2), _r(2)
    m = _model("ConvTranspose", x.shape, {"strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0]},
               [("w", w), ("b", b)])
    _check(m, x)


@needs_gcc
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_conv_transpose_with_constant_weights_runs_as_gemm_and_col2im(data):
    """A transposed convolution of known weights (group 1, f32) is std ``matmul`` and a
    gather: strides, dilations, asymmetric pads, output padding, batches and ranks 1-3
    against ONNX's reference."""
    draw = data.draw
    sp = draw(st.integers(1, 3))
    n, c, f = draw(st.integers(1, 2)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    ins = [draw(st.integers(1, 5)) for _ in range(sp)]
    ks = [draw(st.integers(1, 4)) for _ in range(sp)]
    strides = [draw(st.integers(1, 3)) for _ in range(sp)]
    dil = [draw(st.integers(1, 2)) for _ in range(sp)]
    opad = [draw(st.integers(0, s - 1)) for s in strides]
    full = [s * (i - 1) + o + (k - 1) * d + 1
            for s, i, o, k, d in zip(strides, ins, opad, ks, dil)]
    lo = [draw(st.integers(0, (m - 1) // 2)) for m in full]
    hi = [draw(st.integers(0, m - 1 - a)) for m, a in zip(full, lo)]
    x, w = _r(n, c, *ins), _r(c, f, *ks)
    inits = [("w", w)] + ([("b", _r(f))] if draw(st.booleans()) else [])
    m = _model("ConvTranspose", x.shape, {"strides": strides, "dilations": dil,
                                          "pads": lo + hi, "output_padding": opad}, inits)
    text = _check(m, x, rtol=1e-4, atol=1e-4)
    assert ("= dense(" if np.prod(ins) == 1 else "= matmul(") in text


@needs_gcc
@pytest.mark.parametrize("n, k, stride, pads, bias", [
    (2, 4, 1, [0, 0, 0, 0], True),          # DCGAN's first layer: 1x1 -> 4x4
    (1, 3, 2, [1, 0, 0, 1], False),
    (3, 2, 3, [0, 0, 1, 1], True),
])
def test_conv_transpose_of_one_pixel_runs_as_dense(n, k, stride, pads, bias):
    """A one-pixel input (a generator's latent vector): the GEMM is std dense over the
    batch's rows, its vectors along the taps; the gather reads its [N, F x K x K] result."""
    x, w = _r(n, 5, 1, 1), _r(5, 3, k, k)
    inits = [("w", w)] + ([("b", _r(3))] if bias else [])
    m = _model("ConvTranspose", x.shape, {"strides": [stride, stride], "pads": pads}, inits)
    text = _check(m, x, rtol=1e-4, atol=1e-4)
    assert "= dense(" in text and "= matmul(" not in text


@needs_gcc
@pytest.mark.parametrize("shape, attrs", [
    ((2, 3, 9), {"kernel_shape": [3], "strides": [2], "dilations": [2], "pads": [2, 1]}),
    ((1, 2, 5, 4, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 1, 2],
                       "storage_order": 1}),
])
def test_max_pool_indices_1d_and_3d(shape, attrs):
    x = _r(*shape)
    _check(_model("MaxPool", shape, attrs, outputs=("y", "i")), x)


@needs_gcc
def test_average_and_lp_pool_3d_ceil_count_include_pad():
    x = _r(1, 2, 5, 6, 7)
    attrs = {"kernel_shape": [3, 2, 3], "strides": [2, 2, 3], "pads": [1, 0, 1, 1, 1, 0],
             "ceil_mode": 1, "count_include_pad": 1}
    _check(_model("AveragePool", x.shape, attrs), x)
    _check(_model("LpPool", x.shape, {"kernel_shape": [2, 3, 2], "p": 3,
                                      "strides": [1, 2, 2]}), x)
    _, (got,) = run_imported(_model("GlobalLpPool", x.shape, {"p": 3}), x)
    want = (np.abs(x.astype(np.float64)) ** 3).sum(axis=(2, 3, 4), keepdims=True) ** (1 / 3)
    np.testing.assert_allclose(got, want, rtol=1e-5)


@needs_gcc
@pytest.mark.parametrize("attrs, scales", [
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners",
      "axes": [2, 3, 4]}, [2.0, 1.5, 0.5]),
    ({"mode": "cubic", "antialias": 1, "axes": [4, 2], "exclude_outside": 1},
     [0.6, 1.75]),
    ({"mode": "nearest", "nearest_mode": "ceil",
      "coordinate_transformation_mode": "half_pixel_symmetric", "axes": [3]}, [2.5]),
])
def test_resize_5d_on_chosen_axes(attrs, scales):
    x = _r(1, 2, 3, 4, 5)
    m = _model("Resize", x.shape, attrs, [("roi", np.array([], np.float32)),
                                          ("scales", np.array(scales, np.float32))])
    _check(m, x)


@needs_gcc
@pytest.mark.parametrize("attrs, scales", [
    ({"mode": "linear"}, [1.0, 1.0, 2.0, 2.0]),                         # U-Net's upsampling
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}, [1, 1, 1.5, 2.5]),
])
def test_resize_reads_its_gathers_unchecked_and_unrolls_its_taps(attrs, scales):
    """The gathered rows and columns are clipped at import, and clamped in the op so the
    checker proves every read (no bounds test, no fault flag per tap). A 2x bilinear resize
    is separable, one axis at a time: its columns repeat their taps every 2 outputs, so
    they are read in place from a copy of each row with its ends repeated (no column is
    gathered: the reads are affine and vectorize), then each row of the output sums 2
    gathered rows of that, its taps unrolled by the default schedule."""
    x = _r(1, 3, 8, 8)
    m = _model("Resize", x.shape, attrs, [("roi", np.array([], np.float32)),
                                          ("scales", np.array(scales, np.float32))])
    text = _check(m, x)
    module = tdsl.loads(text)
    (name,) = [n for n in module.own_ops() if n.startswith("resize")]
    func = module[name].lower(target="c")
    assert func.attrs["unproven_accesses"] == 0
    loops = [st_.var.name for st_ in walk_stmt(func.body) if isinstance(st_, For)]
    assert not [v for v in loops if v.startswith("t")], loops
    reads: dict[str, list] = {}
    for st_ in walk_stmt(func.body):
        for ex in stmt_exprs(st_):
            for e in te.walk(ex):
                if isinstance(e, BufferLoad):
                    reads.setdefault(e.buffer.name, []).append(e)
    if attrs["mode"] == "linear":
        assert "I3" not in reads and "W3" not in reads, sorted(reads)
        assert not [ld for ld in reads["P3"] for i in ld.indices for e in te.walk(i)
                    if isinstance(e, (BufferLoad, te.Intrinsic))], reads["P3"]
        assert len(reads["R3"]) == 2
    else:
        assert len(reads["X"]) == 1


@needs_gcc
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_resize_by_a_whole_factor_reads_its_last_axis_in_place(data):
    """The last axis enlarged by a whole factor, its taps repeating (linear, cubic, any
    coordinate mapping but align_corners), is computed from the row with its ends repeated
    at affine indices, each phase's weights literals; against ONNX's reference, with the
    other axes resized or not, ranks 1 to 5."""
    draw = data.draw
    rank = draw(st.integers(1, 5))
    shape = [draw(st.integers(1, 6)) for _ in range(rank)]
    scales = [float(draw(st.sampled_from([1, 2]))) for _ in range(rank - 1)] + \
        [float(draw(st.sampled_from([2, 3, 4])))]
    attrs = {"mode": draw(st.sampled_from(["linear", "cubic"])),
             "coordinate_transformation_mode": draw(st.sampled_from(
                 ["half_pixel", "pytorch_half_pixel", "asymmetric", "half_pixel_symmetric"]))}
    x = _r(*shape)
    m = _model("Resize", x.shape, attrs, [("roi", np.array([], np.float32)),
                                          ("scales", np.array(scales, np.float32))])
    text = _check(m, x)
    assert f"P{rank - 1}[" in text and f"I{rank - 1}:" not in text, text


def test_refusals_name_what_is_unsupported():
    x = (1, 2, 4, 4)
    with pytest.raises(tdsl.TdslError, match=r"Conv on i64|Conv\): .*f32"):
        m = _model("Conv", x, {}, [("w", np.ones((1, 2, 1, 1), np.float32))])
        m.graph.input[0].type.tensor_type.elem_type = TensorProto.INT64
        convert_model(m, "net")
    with pytest.raises(tdsl.TdslError, match="antialias with mode nearest"):
        convert_model(_model("Resize", x, {"mode": "nearest", "antialias": 1},
                             [("roi", np.array([], np.float32)),
                              ("scales", np.array([1, 1, 2, 2], np.float32))]), "net")


@needs_gcc
def test_max_pool_indices_unpooled_1d_overlapping_windows():
    """MaxPool's indices fed to MaxUnpool, windows overlapping (a value can be the maximum
    of two windows), output_shape larger than the inferred one."""
    x = _r(1, 2, 9)
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[3], strides=[2]),
             helper.make_node("MaxUnpool", ["p", "i", "s"], ["y"], kernel_shape=[3],
                              strides=[2])]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1, 2, 11], np.int64), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    _check(m, x)
