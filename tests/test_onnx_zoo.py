"""The nine classic CNNs of the ONNX model zoo, as the onnx wheel ships them for its backend
tests (``onnx/backend/test/data/light/light_<name>.onnx``): the real architectures at
1x3x224x224, each weight a ConstantOfShape of 0.02 but for some small ones (biases,
batch-norm statistics) kept. With every filter alike, all output channels of a convolution
are nearly the same and the classifier's softmax is flat (0.001 everywhere): a wrong channel
order or offset would pass. So each such weight is replaced by random ones of its shape (He's
scale; a batch norm's scale and variance positive), and the logits before the final Softmax
are compared with onnxruntime's, at both block widths of the layout pass (`block_targets`).

Importing is quick and in the default run; building and running a model takes 10-75 s on a
2-core machine, so those are ``slow`` (``pytest -m slow tests/test_onnx_zoo.py``).
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
from onnx import helper, numpy_helper  # noqa: E402

import tdsl  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from block_targets import BLOCKS, run_target  # noqa: E402

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
ZOO = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
       "squeezenet", "vgg19", "zfnet512"]
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def zoo_model(name: str, seed: int = 0):
    """The wheel's light model with random weights for its ConstantOfShape ones, ending at
    the logits (a final Softmax dropped), and its input as onnx's backend test makes it
    (``arange(n) / n``)."""
    path = LIGHT / f"light_{name}.onnx"
    if not path.exists():
        pytest.skip(f"this onnx wheel ships no {path.name}")
    model = onnx.load(str(path))
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    rng = np.random.default_rng(seed)
    # a batch norm's scale and variance (inputs 1 and 4) positive
    positive = {n.input[k] for n in g.node if n.op_type == "BatchNormalization"
                for k in (1, 4)}
    nodes, made = [], []
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            shape = tuple(int(d) for d in inits[n.input[0]])
            fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            if len(shape) > 1:
                w = rng.standard_normal(shape) * np.sqrt(2.0 / fan)
            elif n.output[0] in positive:
                w = rng.uniform(0.5, 1.5, shape)
            else:
                w = rng.uniform(-0.1, 0.1, shape)
            made.append(numpy_helper.from_array(w.astype(np.float32), n.output[0]))
        else:
            nodes.append(n)
    out = g.output[0].name
    if nodes[-1].op_type == "Softmax" and nodes[-1].output[0] == out:
        out = nodes.pop().input[0]
    used = {x for n in nodes for x in n.input}
    keep = [i for i in g.initializer if i.name in used]     # not the ConstantOfShapes' shapes
    inputs = [i for i in g.input if i.name not in inits]    # the image
    graph = helper.make_graph(nodes, g.name, inputs,
                              [helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None)],
                              keep + made)
    new = helper.make_model(graph, opset_imports=model.opset_import)
    new.ir_version = max(model.ir_version, 4)       # weights that are no graph inputs
    feeds = {}
    for i in inputs:
        shape = tuple(d.dim_value or 1 for d in i.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[i.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return new, feeds


def run_onnx(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("name", ZOO)
def test_the_zoo_models_import(name):
    model, feeds = zoo_model(name)
    text, params = convert_model(model, "net")
    g = tdsl.loads(text)["net"]
    assert len(g.inputs) == len(feeds) == 1          # the image; weights are weights


@pytest.mark.slow
@needs_gcc
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("name", ZOO)
def test_the_zoo_models_match_onnxruntime(name, block):
    model, feeds = zoo_model(name)
    want = run_onnx(model, feeds)
    text, params = convert_model(model, "net")
    g = tdsl.loads(text)["net"]
    m = g.build(run_target(block), params=params)
    got = m(*feeds.values())
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale)
    assert f"NCHW{block}c" in m.compiled(*feeds.values()).layouts.values()
