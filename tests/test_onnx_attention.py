"""ONNX import of the attention and linear-algebra operators (onnx_import/attention.py,
linalg.py) in configurations ONNX's conformance cases lack: MatMul of integers with vectors
and broadcast batches, Einsum of attention's contractions, Attention mixing 3-D GQA, a
KV cache, a short float mask, causality, softcap and every output, RotaryEmbedding 3-D
interleaved with a partial rotary dimension; each checked against onnx's reference."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tdsl  # noqa: E402
from tdsl.errors import TdslError  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

from onnx_check import assert_outputs_match, run_imported  # noqa: E402

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
          np.int32: TensorProto.INT32, np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL}


def _model(op, inputs, n_out=1, opset=23, **attrs):
    """A one-node model of ``op`` on the named arrays ``inputs`` (None: an absent input)."""
    names = [k if v is not None else "" for k, v in inputs.items()]
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    ins = [helper.make_tensor_value_info(k, _TYPES[v.dtype.type], v.shape)
           for k, v in inputs.items() if v is not None]
    g = helper.make_graph([node], "g", ins,
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                           for o in outs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _check(op, inputs, n_out=1, rtol=1e-5, atol=1e-5, **attrs):
    model = _model(op, inputs, n_out, **attrs)
    given = {k: v for k, v in inputs.items() if v is not None}
    want = ReferenceEvaluator(model).run(None, given)
    text, got = run_imported(model, *given.values())
    assert_outputs_match(got, want, rtol, atol)
    return text


rng = np.random.default_rng(0)


@needs_gcc
def test_matmul_integer_vector_and_broadcast_batches():
    a = rng.integers(-5, 5, (3,)).astype(np.int32)
    b = rng.integers(-5, 5, (2, 3, 4)).astype(np.int32)
    _check("MatMul", {"a": a, "b": b})                       # vector @ batch -> [2, 4]
    x = rng.integers(-9, 9, (2, 1, 3, 4)).astype(np.int64)
    y = rng.integers(-9, 9, (5, 4, 2)).astype(np.int64)
    _check("MatMul", {"x": x, "y": y})                       # [2, 5, 3, 2]


@needs_gcc
def test_matmul_f32_uses_std_ops():
    text = _check("MatMul", {"a": rng.standard_normal((2, 3, 4)).astype(np.float32),
                             "b": rng.standard_normal((2, 4, 5)).astype(np.float32)})
    assert "batch_matmul(" in text


@needs_gcc
def test_einsum_attention_contractions():
    q = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    k = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    _check("Einsum", {"q": q, "k": k}, equation="bhqd,bhkd->bhqk")
    a = rng.standard_normal((2, 1, 3, 4))
    b = rng.standard_normal((5, 4, 2))
    _check("Einsum", {"a": a, "b": b}, equation="...ij,...jk->...ik")   # broadcast ellipsis
    _check("Einsum", {"a": a[0, 0], "b": b[0]}, equation="ij,jk")        # implicit output


def test_matmul_of_bools_is_refused():
    m = _model("MatMul", {"a": np.ones((2, 2), bool), "b": np.ones((2, 2), bool)})
    with pytest.raises(TdslError, match="bool"):
        convert_model(m, "net")


@needs_gcc
def test_attention_3d_gqa_cache_mask_causal_softcap_all_outputs():
    b, sq, skv, past, hq, hkv, d, dv = 2, 3, 4, 2, 4, 2, 6, 5
    inputs = {
        "Q": rng.standard_normal((b, sq, hq * d)).astype(np.float32),
        "K": rng.standard_normal((b, skv, hkv * d)).astype(np.float32),
        "V": rng.standard_normal((b, skv, hkv * dv)).astype(np.float32),
        # shorter than past + skv: the rest is padded with -inf
        "attn_mask": rng.standard_normal((1, hq, sq, 5)).astype(np.float32),
        "past_key": rng.standard_normal((b, hkv, past, d)).astype(np.float32),
        "past_value": rng.standard_normal((b, hkv, past, dv)).astype(np.float32),
    }
    for mode in (0, 2, 3):
        _check("Attention", inputs, n_out=4, q_num_heads=hq, kv_num_heads=hkv,
               is_causal=1, softcap=3.0, scale=0.3, qk_matmul_output_mode=mode)


@needs_gcc
def test_attention_4d_nonpad_window():
    inputs = {"Q": rng.standard_normal((2, 2, 3, 4)).astype(np.float32),
              "K": rng.standard_normal((2, 2, 6, 4)).astype(np.float32),
              "V": rng.standard_normal((2, 2, 6, 4)).astype(np.float32),
              "attn_mask": None, "past_key": None, "past_value": None,
              "nonpad_kv_seqlen": np.array([5, 3], np.int64)}
    _check("Attention", inputs, opset=24, is_causal=1)


@needs_gcc
def test_rotary_3d_interleaved_partial():
    x = rng.standard_normal((2, 3, 4 * 8)).astype(np.float32)
    cos = rng.standard_normal((10, 2)).astype(np.float32)
    sin = rng.standard_normal((10, 2)).astype(np.float32)
    pos = np.array([[0, 4, 9], [3, 3, 1]], np.int64)
    _check("RotaryEmbedding", {"x": x, "cos": cos, "sin": sin, "pos": pos},
           num_heads=4, interleaved=1, rotary_embedding_dim=4)


def _sdpa_model(opset=17, mask=True, div=True, probs_out=False, heads_merged=False):
    """The exporters' attention: MatMul(Q, Transpose(K)) / c [+ mask] -> Softmax -> @ V."""
    b, h, s, l, d = 2, 3, 4, 5, 8
    lead = [b * h] if heads_merged else [b, h]
    r = len(lead) + 2
    nodes = [helper.make_node("Transpose", ["k"], ["kt"],
                              perm=list(range(r - 2)) + [r - 1, r - 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div" if div else "Mul", ["s", "c"], ["ss"])]
    last = "ss"
    if mask:
        nodes.append(helper.make_node("Add", ["m", "ss"], ["sm"]))
        last = "sm"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1 if opset >= 13 else r - 1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    shapes = {"q": lead + [s, d], "k": lead + [l, d], "v": lead + [l, d],
              "m": [lead[0], 1, l] if heads_merged else [b, 1, 1, l]}
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n])
           for n in ("q", "k", "v", "m") if n != "m" or mask]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in (["y", "p"] if probs_out else ["y"])]
    init = [onnx.numpy_helper.from_array(np.array(np.sqrt(d), np.float32), "c")]
    model = helper.make_model(helper.make_graph(nodes, "g", ins, outs, init),
                              opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: rng.standard_normal(shapes[n]).astype(np.float32)
             for n in ("q", "k", "v", "m") if n != "m" or mask}
    return model, feeds


@needs_gcc
@pytest.mark.parametrize("kw, fused", [
    ({}, True), ({"opset": 11, "mask": False, "div": False}, True),
    ({"heads_merged": True}, True),
    ({"probs_out": True}, False),        # the probabilities are an output: nothing fuses
])
def test_exported_attention_subgraph_is_one_op(kw, fused):
    model, feeds = _sdpa_model(**kw)
    want = ReferenceEvaluator(model).run(None, feeds)
    text, params = convert_model(model, "net")
    body = text[text.index("graph net"):]
    assert (body.count(" = ") == 1 and "attention_" in body) == fused, body
    assert ("op softmax" in text) != fused          # the taken-back calls' ops go too
    got = tdsl.loads(text)["net"].build("c", params=params)(*feeds.values())
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
