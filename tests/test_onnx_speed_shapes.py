"""The shapes of the code the ONNX importer writes for speed (never timing): which std ops an
imported node calls, so that it gets their tuned schedules (issues 22 and 23), and that what
they compute is still right."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tdsl  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _run(model, *inputs):
    text, params = convert_model(model, "m")
    out = tdsl.loads(text)["m"].build("c", params=params)(*inputs)
    return text, out


def _conv1d_ref(x, w, b, stride, dil, pads, group):
    n, c, length = x.shape
    f, cg, k = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[1])))
    out = (xp.shape[2] - dil * (k - 1) - 1) // stride + 1
    y = np.zeros((n, f, out), np.float64)
    fg = f // group
    for o in range(out):
        win = xp[:, :, o * stride + np.arange(k) * dil]            # n, c, k
        for g in range(group):
            y[:, g * fg:(g + 1) * fg, o] = np.einsum(
                "nck,fck->nf", win[:, g * cg:(g + 1) * cg], w[g * fg:(g + 1) * fg])
    return y + (b[None, :, None] if b is not None else 0)


@pytest.mark.parametrize("c, f, group, k, stride, dil, pads, bias", [
    (4, 6, 1, 3, 1, 1, (1, 1), True),          # 'same'
    (3, 5, 1, 5, 2, 1, (2, 1), False),         # strided, asymmetric
    (4, 4, 1, 3, 1, 2, (0, 0), True),          # dilated, no padding
    (6, 6, 6, 3, 1, 1, (1, 1), True),          # depthwise
    (6, 6, 6, 4, 2, 1, (0, 3), False),         # depthwise, strided, padded on one side
])
def test_conv1d_calls_std_conv2d_of_height_1(c, f, group, k, stride, dil, pads, bias):
    rng = np.random.default_rng(0)
    length = 17
    x = rng.standard_normal((2, c, length)).astype(np.float32)
    w = rng.standard_normal((f, c // group, k)).astype(np.float32)
    b = rng.standard_normal(f).astype(np.float32) if bias else None
    y = _conv1d_ref(x, w, b, stride, dil, pads, group)
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")]
                                                 if bias else [])
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"],
                            kernel_shape=[k], strides=[stride], dilations=[dil],
                            pads=list(pads), group=group)
    model = _model([node], [_vi("x", x.shape)], [_vi("y", y.shape)], inits)
    text, out = _run(model, x)
    std = "depthwise_conv2d(" if group > 1 else "conv2d("
    assert f"= {std}" in text, text
    assert "sum[" not in text                      # no generic N-D reduction op
    np.testing.assert_allclose(out, y, rtol=1e-4, atol=1e-4)


def test_conv1d_grouped_stays_generic():
    """Groups other than 1 or depthwise: no std op; the generic op, still right."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 9)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3], group=2,
                            pads=[1, 1])
    model = _model([node], [_vi("x", x.shape)], [_vi("y", [1, 4, 9])],
                   [numpy_helper.from_array(w, "w")])
    text, out = _run(model, x)
    assert "conv2d(" not in text
    np.testing.assert_allclose(out, _conv1d_ref(x, w, None, 1, 1, (1, 1), 2),
                               rtol=1e-4, atol=1e-4)


def test_linear_matmul_calls_std_dense():
    """X[B, S, K] @ W[K, N] with constant W (a Linear layer): std dense on the rows, whose
    weights the graph packs once (dense_packed), not a generated matmul op."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 65, 64)).astype(np.float32)       # 2^18+ multiply-adds
    w = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"])]
    model = _model(nodes, [_vi("x", x.shape)], [_vi("y", [2, 65, 32])],
                   [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    text, out = _run(model, x)
    assert "= dense(" in text and "sum[" not in text, text
    np.testing.assert_allclose(out, x @ w + b, rtol=1e-4, atol=1e-4)


def test_matmul_of_4d_batches_calls_std_batch_matmul():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                   [_vi("a", a.shape), _vi("b", b.shape)], [_vi("y", [2, 3, 4, 6])])
    text, out = _run(model, a, b)
    assert "= batch_matmul(" in text and "sum[" not in text, text
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k_layout, perm", [
    ("rows", [0, 1, 3, 2]),         # PyTorch's K.transpose(-2, -1) of [b, h, l, x]
    ("split", [0, 2, 3, 1]),        # the heads' split [b, l, h, x] -> [b, h, x, l]
    ("columns", None),              # K given as [b, h, x, l]: read in place
])
def test_exported_attention_op_carries_its_row_local_schedule(k_layout, perm):
    """The fused attention op of an exported subgraph comes with a schedule (for rows of
    64 and more), and it lowers (no fallback to the automatic schedule: that warns). A
    Transpose of K, whatever its permutation, is read through the op's packed copy, not
    computed by a kernel of its own; 70 rows fill no whole block of rows or of vectors."""
    import warnings
    rng = np.random.default_rng(4)
    q, v = (rng.standard_normal((1, 2, 70, 16)).astype(np.float32) for _ in range(2))
    kc = rng.standard_normal((1, 2, 16, 70)).astype(np.float32)         # [b, h, x, l]
    k = kc if perm is None else np.ascontiguousarray(
        kc.transpose(np.argsort(perm)))                                 # kc == k.T(perm)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=perm)] if perm else []
    nodes += [helper.make_node("MatMul", ["q", "kt" if perm else "k"], ["s"]),
              helper.make_node("Div", ["s", "c"], ["z"]),
              helper.make_node("Softmax", ["z"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    model = _model(nodes, [_vi("q", q.shape), _vi("k", k.shape), _vi("v", v.shape)],
                   [_vi("y", q.shape)],
                   [numpy_helper.from_array(np.array(4.0, np.float32), "c")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text, out = _run(model, q, k, v)
    body = text[text.index("graph m"):]
    assert "schedule attention_" in text and body.count(" = ") == 1, text
    assert ("pack(Kp." in text) == (k_layout != "columns"), text
    s = q @ kc / 4.0
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(out, (e / e.sum(-1, keepdims=True)) @ v, rtol=1e-4,
                               atol=1e-5)


def test_causal_attention_with_a_where_mask_is_one_op():
    """masked_fill(~tril(ones), -inf) as exported (Trilu of a constant, Not, Where):
    the mask is folded to a constant and the attention is one fused op."""
    rng = np.random.default_rng(5)
    s = 6
    q, k, v = (rng.standard_normal((1, 2, s, 8)).astype(np.float32) for _ in range(3))
    ones = numpy_helper.from_array(np.ones((s, s), bool), "ones")
    ninf = numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf")
    c = numpy_helper.from_array(np.array(8 ** 0.5, np.float32), "c")
    nodes = [helper.make_node("Trilu", ["ones"], ["keep"], upper=0),
             helper.make_node("Not", ["keep"], ["drop"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "c"], ["z"]),
             helper.make_node("Where", ["drop", "ninf", "z"], ["w"]),
             helper.make_node("Softmax", ["w"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    model = _model(nodes, [_vi(n, q.shape) for n in "qkv"], [_vi("y", q.shape)],
                   [ones, ninf, c])
    text, out = _run(model, q, k, v)
    body = text[text.index("graph m"):]
    assert body.count(" = ") == 1 and "attention_" in body, body
    z = q @ k.transpose(0, 1, 3, 2) / 8 ** 0.5
    z = np.where(np.tril(np.ones((s, s), bool)), z, -np.inf)
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(out, (e / e.sum(-1, keepdims=True)) @ v, rtol=1e-4,
                               atol=1e-5)
