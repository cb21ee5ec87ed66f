"""LSTM, GRU and RNN beyond ONNX's conformance cases, compared with onnxruntime: sequence
lengths shorter than the sequence, GRU's linear_before_reset, clip, other activations,
bidirectional layout 1 with initial states; and the shape of the compiled recurrence (one
projection GEMM for all timesteps, one step kernel per direction)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import tdsl  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
RNG = np.random.default_rng(3)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def model(kind, seq=3, batch=3, inp=4, hidden=5, directions=1, layout=0, with_lens=False,
          with_states=False, **attrs):
    g = GATES[kind] * hidden
    x_shape = [batch, seq, inp] if layout else [seq, batch, inp]
    arrays = {"X": RNG.standard_normal(x_shape).astype(np.float32),
              "W": (RNG.standard_normal((directions, g, inp)) * 0.5).astype(np.float32),
              "R": (RNG.standard_normal((directions, g, hidden)) * 0.5).astype(np.float32),
              "B": (RNG.standard_normal((directions, 2 * g)) * 0.3).astype(np.float32)}
    names = ["X", "W", "R", "B"]
    if with_lens or with_states:
        names.append("L" if with_lens else "")
        if with_lens:
            arrays["L"] = RNG.integers(1, seq + 1, batch).astype(np.int32)
            arrays["L"][0] = seq
    if with_states:
        s = [batch, directions, hidden] if layout else [directions, batch, hidden]
        names.append("H0")
        arrays["H0"] = RNG.standard_normal(s).astype(np.float32)
        if kind == "LSTM":
            names.append("C0")
            arrays["C0"] = RNG.standard_normal(s).astype(np.float32)
    outs = ["Y", "Yh"] + (["Yc"] if kind == "LSTM" else [])
    if directions == 2:
        attrs["direction"] = "bidirectional"
    node = helper.make_node(kind, names, outs, hidden_size=hidden, layout=layout, **attrs)
    inputs = [helper.make_tensor_value_info(
        n, TensorProto.INT32 if n == "L" else TensorProto.FLOAT, arrays[n].shape)
        for n in names if n]
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                               for o in outs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m, [arrays[n] for n in names if n]


def check(m, inputs):
    """tdsl against onnxruntime; against onnx's reference evaluator for layout 1, which
    onnxruntime refuses (and the evaluator ignores sequence_lens, so not with them)."""
    text, params = convert_model(m, "net")
    got = tdsl.loads(text)["net"].build(params=params)(*inputs)
    feeds = {i.name: a for i, a in zip(m.graph.input, inputs)}
    if any(a.name == "layout" and a.i == 1 for a in m.graph.node[0].attribute):
        from onnx.reference import ReferenceEvaluator
        want = ReferenceEvaluator(m).run(None, feeds)
    else:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    return text


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_shorter_sequences_hold_their_state(kind):
    check(*model(kind, with_lens=True))


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_bidirectional_layout_1_with_initial_states(kind):
    check(*model(kind, directions=2, layout=1, with_states=True))


def test_gru_linear_before_reset_and_clip():
    check(*model("GRU", linear_before_reset=1, clip=0.8))


def test_other_activations():
    check(*model("RNN", directions=2, activations=["LeakyRelu", "HardSigmoid"],
                 activation_alpha=[0.2, 0.3], activation_beta=[0.4]))
    check(*model("LSTM", activations=["HardSigmoid", "Softsign", "ScaledTanh"],
                 activation_alpha=[0.3, 1.2], activation_beta=[0.4, 0.7], input_forget=1))


def test_the_input_projection_is_one_gemm_for_all_timesteps():
    text = check(*model("LSTM", seq=6))
    assert text.count("lstm_proj") == 2                 # the op and its one call
    steps = [line for line in text.splitlines() if "= lstm_step" in line]
    assert len(steps) == 6 and len({line.split("(")[0].split("= ")[1] for line in steps}) == 1


def test_reverse_with_shorter_sequences_is_refused_clearly():
    m, _ = model("GRU", with_lens=True, direction="reverse")
    with pytest.raises(tdsl.TdslError, match="sequence_lens shorter than the sequence"):
        convert_model(m, "net")


def test_activations_take_their_whole_argument():
    """An activation's argument may be a sum (GRU's hidden gate, P + (r * H) R^T; an LSTM
    gate with peepholes): Affine's alpha * x + beta scales all of it, not its first term."""
    check(*model("GRU", activations=["Sigmoid", "Affine"], activation_alpha=[0.7],
                 activation_beta=[0.2]))


def constant_weights_model(kind, seq, batch, inp, hidden, direction, layout, states, bias,
                           extra, seed):
    """One LSTM / GRU / RNN node whose W, R (and B, peepholes) are initializers; the
    initial states absent, graph inputs, or initializers too."""
    rng = np.random.default_rng(seed)
    directions = 2 if direction == "bidirectional" else 1
    g = GATES[kind] * hidden

    def normal(*shape, scale=0.5):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    x_shape = [batch, seq, inp] if layout else [seq, batch, inp]
    s_shape = [batch, directions, hidden] if layout else [directions, batch, hidden]
    inits = {"W": normal(directions, g, inp), "R": normal(directions, g, hidden)}
    names = ["X", "W", "R"]
    if bias:
        inits["B"] = normal(directions, 2 * g, scale=0.3)
    names.append("B" if bias else "")
    names.append("")                                   # sequence_lens
    feeds = {"X": normal(*x_shape, scale=1.0)}
    state_names = ["H0"] + (["C0"] if kind == "LSTM" else [])
    for s in state_names:
        if states == "none":
            names.append("")
        else:
            (feeds if states == "inputs" else inits)[s] = normal(*s_shape, scale=1.0)
            names.append(s)
    attrs = {"hidden_size": hidden, "direction": direction, "layout": layout}
    if kind == "LSTM" and extra:
        names += [""] * (7 - len(names)) + ["P"]
        inits["P"] = normal(directions, 3 * hidden)
    if kind == "GRU" and extra:
        attrs["linear_before_reset"] = 1
    while names and not names[-1]:
        names.pop()
    outs = ["Y", "Yh"] + (["Yc"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outs, **attrs)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
              for n, a in feeds.items()]
    graph = helper.make_graph(
        [node], "g", inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [onnx.numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m, feeds


def test_constant_weights_take_the_dense_path_and_match_the_reference():
    """With constant weights the input projection is std dense (packed once at build, the
    register-tiled GEMM) and each step's recurrent GEMV reads R transposed; over hidden
    sizes off and on the vector width, every direction, both layouts, initial states absent,
    given or constant, biases, peepholes and linear_before_reset, the outputs are onnx's
    reference evaluator's."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from onnx.reference import ReferenceEvaluator

    @settings(max_examples=14, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(kind=st.sampled_from(["LSTM", "GRU", "RNN"]), seq=st.integers(1, 4),
           batch=st.integers(1, 3), inp=st.integers(1, 9),
           hidden=st.sampled_from([1, 3, 8, 16, 17, 24, 33]),
           direction=st.sampled_from(["forward", "reverse", "bidirectional"]),
           layout=st.integers(0, 1), states=st.sampled_from(["none", "inputs", "constants"]),
           bias=st.booleans(), extra=st.booleans(), seed=st.integers(0, 2 ** 16))
    def run(**kw):
        m, feeds = constant_weights_model(**kw)
        text, params = convert_model(m, "net")
        assert "= dense(" in text and "_proj" not in text
        got = tdsl.loads(text)["net"].build(params=params)(*feeds.values())
        want = ReferenceEvaluator(m).run(None, feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)

    run()


def test_the_vectorizable_tanh_is_numpys_within_two_ulps():
    """Tanh of the recurrences is written in what the C target vectorizes (exp and a
    polynomial, not libm's scalar tanhf): within 2 ulps of tanh over its range, NaN kept,
    +-1 at +-infinity."""
    from tdsl.onnx_import.recurrent import TANH
    text = "op t(X: f32[N]) -> Y: f32[N] {\n    Y[i] = " + TANH.format(x="X[i]") + "\n}\n"
    x = np.concatenate([np.linspace(-12, 12, 200001), np.linspace(-1e-3, 1e-3, 1001),
                        [1e-30, -1e-30, 0.62, 0.625, 0.63, 100.0, -100.0]]).astype(np.float32)
    got = tdsl.loads(text)["t"].build()(x)
    want = np.tanh(x.astype(np.float64))
    ulps = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32))
    assert ulps.max() <= 2.0
    special = tdsl.loads(text)["t"].build()(np.array([np.inf, -np.inf, np.nan], np.float32))
    np.testing.assert_array_equal(special, [1.0, -1.0, np.nan])
