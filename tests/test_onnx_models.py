"""Models exported from PyTorch (tests/models/make_torch_models.py: opset 17, random weights,
symbolic batch and sequence dimensions), imported and built by tdsl, compared with PyTorch's
outputs saved beside them and with onnxruntime at a second binding of the dimensions:
a BERT-style encoder on int64 token ids with an attention mask, a ViT, a MobileNetV3 block
(Hardswish, squeeze-excite) and a GPT-style decoder block with a causal mask."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")

from tdsl.onnx_import import OnnxModule, convert_model  # noqa: E402

MODELS = Path(__file__).resolve().parent / "models"
NAMES = ["bert_encoder", "vit", "mobilenetv3_block", "gpt_block"]
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def saved(name):
    d = np.load(MODELS / f"{name}.npz")
    ins = [d[k] for k in sorted(k for k in d if k.startswith("input_"))]
    outs = [d[k] for k in sorted(k for k in d if k.startswith("output_"))]
    return ins, outs


def other_binding(name, inputs):
    """Inputs at another batch (and sequence length) than the saved ones."""
    rng = np.random.default_rng(5)
    if name == "bert_encoder":
        ids = rng.integers(0, 100, (3, 7)).astype(np.int64)
        mask = np.ones((3, 7), np.int64)
        mask[2, 4:] = 0
        return [ids, mask]
    if name == "gpt_block":
        return [rng.integers(0, 100, (1, 13)).astype(np.int64)]
    x = inputs[0]
    return [rng.standard_normal((3,) + x.shape[1:]).astype(np.float32)]


def onnxruntime_outputs(model, inputs):
    ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: a for i, a in zip(model.graph.input, inputs)})


@needs_gcc
@pytest.mark.parametrize("name", NAMES)
def test_pytorch_export_matches_pytorch_and_onnxruntime(name):
    model = onnx.load(str(MODELS / f"{name}.onnx"))
    module = OnnxModule(model)
    inputs, want = saved(name)
    got = module(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    again = other_binding(name, inputs)
    got = module(*again)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, onnxruntime_outputs(model, again)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_pytorch_export_imports_as_c_end_to_end(name):
    """No numpy fallback: the imported graph is .tdsl ops only, so it can build for any C
    target, c-embedded included."""
    model = onnx.load(str(MODELS / f"{name}.onnx"))
    inputs, _ = saved(name)
    dims = {}
    for inp, a in zip(model.graph.input, inputs):
        for d, n in zip(inp.type.tensor_type.shape.dim, a.shape):
            if d.dim_param:
                dims[d.dim_param] = n
    text, params = convert_model(model, "net", dims=dims)
    import tdsl
    graph = tdsl.loads(text)["net"]
    ref = graph.reference(*inputs, params=params)
    ref = ref if isinstance(ref, tuple) else (ref,)
    for g, w in zip(ref, saved(name)[1]):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
