"""ONNX import of the normalizations and losses in configurations ONNX's conformance cases
lack (f64, broadcast scales, per-group scales of opset 18, negative inputs to an L1 norm, an
int32 target, several axes), each compared with onnx's ReferenceEvaluator; and the clear
refusals. Needs the onnx package (tdsl[onnx]) and gcc."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from tdsl.errors import TdslError  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

from onnx_check import assert_outputs_match, run_imported  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
          np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32}


def _model(op, inputs: dict, n_out: int, opset: int, **attrs):
    names = list(inputs)
    outs = [f"out{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, _TYPES[a.dtype], a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(op, inputs: dict, n_out: int = 1, opset: int = 22, rtol=1e-5, atol=1e-6,
           want=None, **attrs):
    model = _model(op, inputs, n_out, opset, **attrs)
    if want is None:
        want = ReferenceEvaluator(model).run(None, inputs)
    text, got = run_imported(model, *inputs.values())
    assert_outputs_match(got, want, rtol, atol)
    return text


rng = np.random.default_rng(7)


def _x(*shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def test_layer_norm_f64_broadcast_scale_no_bias_with_statistics():
    text = _check("LayerNormalization", {"X": _x(2, 3, 4, 5), "W": _x(5)}, n_out=3,
                  opset=17, axis=2, epsilon=1e-3)
    assert "layer_norm(" not in text            # f64: an op written for the node


def test_layer_norm_f32_is_std_layer_norm():
    text = _check("LayerNormalization", {"X": _x(6, 8, dtype=np.float32),
                                         "W": _x(8, dtype=np.float32),
                                         "B": _x(8, dtype=np.float32)}, opset=17)
    assert "layer_norm(" in text


def test_rms_norm_f64_middle_axis():
    _check("RMSNormalization", {"X": _x(2, 3, 4), "W": _x(3, 4)}, opset=23, axis=1)


@pytest.mark.parametrize("opset,per", [(18, "group"), (21, "channel")])
def test_group_norm_scale_per_group_or_channel(opset, per):
    g, c = 3, 6
    n = g if per == "group" else c
    x = _x(2, c, 5, dtype=np.float32)
    _check("GroupNormalization", {"X": x, "S": _x(n, dtype=np.float32),
                                  "B": _x(n, dtype=np.float32)}, opset=opset, rtol=1e-4,
           atol=1e-5, num_groups=g)


def test_instance_norm_3d_f64():
    _check("InstanceNormalization", {"X": _x(2, 3, 7), "S": _x(3), "B": _x(3)},
           epsilon=1e-4)


def test_l1_norm_negative_values_and_a_zero_row():
    # the reference evaluator sums x, not |x|, for p = 1; the spec and the conformance
    # cases' generator take |x|
    x = _x(3, 4)
    x[1] = 0.0
    norm = np.abs(x).sum(axis=0, keepdims=True)
    _check("LpNormalization", {"X": x}, p=1, axis=0, want=[x / norm])
    x[:, 2] = 0.0
    norm = np.abs(x).sum(axis=0, keepdims=True)           # column 2 is all zeros: 0, not NaN
    with np.errstate(invalid="ignore"):
        want = np.where(norm == 0, 0.0, x / norm)
    _check("LpNormalization", {"X": x}, p=1, axis=0, want=[want])


def test_mvn_other_axes():
    # f32: the reference's function body adds an f32 epsilon
    _check("MeanVarianceNormalization", {"X": _x(2, 3, 4, 5, dtype=np.float32)}, opset=13,
           rtol=1e-4, atol=1e-5, axes=[1, 3])


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_nll_f64_int32_target_weights_ignore_index(reduction):
    x, t = _x(4, 5, 3), rng.integers(0, 5, (4, 3)).astype(np.int32)
    t[0, 0] = 2
    _check("NegativeLogLikelihoodLoss", {"X": x, "T": t, "W": np.abs(_x(5))},
           reduction=reduction, ignore_index=2)


def test_softmax_cross_entropy_f64_4d_with_log_prob():
    x, t = _x(2, 4, 3, 2), rng.integers(0, 4, (2, 3, 2)).astype(np.int64)
    _check("SoftmaxCrossEntropyLoss", {"X": x, "T": t}, n_out=2, opset=13,
           reduction="mean")


@pytest.mark.parametrize("op,inputs,attrs,words", [
    ("LpNormalization", {"X": _x(2, 3)}, {"p": 3}, "p = 3"),
    ("GroupNormalization", {"X": _x(2, 6, 3), "S": _x(6), "B": _x(6)}, {"num_groups": 4},
     "can't be split into 4 groups"),
    ("LayerNormalization", {"X": _x(2, 3), "W": _x(3)}, {"stash_type": 10}, "stash_type"),
])
def test_refusals_are_clear(op, inputs, attrs, words):
    with pytest.raises(TdslError, match=words):
        convert_model(_model(op, inputs, 1, 21, **attrs), "net")
