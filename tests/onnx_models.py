"""Small ONNX models built with onnx's helper API, shaped like the model zoo's classics
(the zoo's own files can't be downloaded where these tests run; the onnx wheel's light
versions of its nine CNNs are tests/test_onnx_zoo.py's): a ResNet basic block stack at
opset 17, a SqueezeNet-style net at opset 7-9 (weights among the graph inputs, LRN, Dropout,
Concat, Sum, ConstantOfShape, Reshape with a computed shape), SqueezeNet's Fire modules at
their real widths (64 + 64 channels concatenated, kept blocked), DenseNet-, Inception- and
AlexNet-style nets at opset 7-9 (pre-activation batch norms, four-way concats, asymmetric
pool padding, 5x5 and 11x11/4 convolutions, a Gemm classifier), a MobileNet block with
Clip, a classifier head with Gemm, Softmax and Transpose."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(0)


def _w(name, *shape, scale=None):
    fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    a = (RNG.standard_normal(shape) * (scale or 1 / np.sqrt(fan))).astype(np.float32)
    return numpy_helper.from_array(a, name)


def _bn(prefix, c):
    return [_w(f"{prefix}_s", c, scale=0.2), _w(f"{prefix}_b", c, scale=0.2),
            _w(f"{prefix}_m", c, scale=0.2),
            numpy_helper.from_array(RNG.uniform(0.5, 1.5, c).astype(np.float32), f"{prefix}_v")]


def _bn_node(prefix, x, y, **attrs):
    """BatchNormalization of ``x`` with the statistics `_bn(prefix, ...)` made."""
    return helper.make_node("BatchNormalization", [x] + [f"{prefix}_{k}" for k in "sbmv"], [y],
                            **attrs)


def _model(nodes, inputs, outputs, inits, opset, weights_as_inputs=False):
    vin = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    if weights_as_inputs:
        vin += [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in inits]
    vout = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    g = helper.make_graph(nodes, "g", vin, vout, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7 if opset >= 13 else 4
    return m


def resnet_stack(c=16, hw=14, blocks=2, opset=17):
    """Conv-BN-ReLU stem, basic blocks with identity shortcuts, GAP, Flatten, Gemm."""
    nodes, inits = [], []
    inits += [_w("stem_w", c, 3, 3, 3)] + _bn("stem_bn", c)
    nodes += [helper.make_node("Conv", ["x", "stem_w"], ["s0"], pads=[1, 1, 1, 1]),
              _bn_node("stem_bn", "s0", "s1"),
              helper.make_node("Relu", ["s1"], ["h0"])]
    h = "h0"
    for b in range(blocks):
        p = f"b{b}"
        inits += [_w(f"{p}_w1", c, c, 3, 3), _w(f"{p}_w2", c, c, 3, 3)]
        inits += _bn(f"{p}_bn1", c) + _bn(f"{p}_bn2", c)
        nodes += [
            helper.make_node("Conv", [h, f"{p}_w1"], [f"{p}_c1"], pads=[1, 1, 1, 1],
                             kernel_shape=[3, 3]),
            _bn_node(f"{p}_bn1", f"{p}_c1", f"{p}_n1", epsilon=1e-5),
            helper.make_node("Relu", [f"{p}_n1"], [f"{p}_r1"]),
            helper.make_node("Conv", [f"{p}_r1", f"{p}_w2"], [f"{p}_c2"], pads=[1, 1, 1, 1]),
            _bn_node(f"{p}_bn2", f"{p}_c2", f"{p}_n2"),
            helper.make_node("Add", [f"{p}_n2", h], [f"{p}_sum"]),
            helper.make_node("Relu", [f"{p}_sum"], [f"{p}_out"])]
        h = f"{p}_out"
    inits += [_w("fc_w", 10, c), _w("fc_b", 10)]
    nodes += [helper.make_node("GlobalAveragePool", [h], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1)]
    return _model(nodes, [("x", [1, 3, hw, hw])], ["y"], inits, opset)


def squeezenet_like(opset=7):
    """Old-opset idioms: weights among the inputs, Conv with bias, LRN, MaxPool with
    ceil_mode (opset >= 10 only) or plain, a Fire module (Concat), Dropout, Sum,
    ConstantOfShape (opset 9), Reshape with a computed shape, Softmax."""
    nodes, inits = [], []
    inits += [_w("c1_w", 8, 3, 3, 3), _w("c1_b", 8)]
    nodes += [helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["c1"], strides=[2, 2],
                               kernel_shape=[3, 3]),
              helper.make_node("Relu", ["c1"], ["r1"]),
              helper.make_node("LRN", ["r1"], ["l1"], size=3, alpha=1e-3, beta=0.75, bias=1.0),
              helper.make_node("MaxPool", ["l1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2])]
    inits += [_w("sq_w", 4, 8, 1, 1), _w("sq_b", 4), _w("e1_w", 6, 4, 1, 1), _w("e1_b", 6),
              _w("e3_w", 6, 4, 3, 3), _w("e3_b", 6)]
    nodes += [helper.make_node("Conv", ["p1", "sq_w", "sq_b"], ["sq"]),
              helper.make_node("Relu", ["sq"], ["sqr"]),
              helper.make_node("Conv", ["sqr", "e1_w", "e1_b"], ["e1"]),
              helper.make_node("Conv", ["sqr", "e3_w", "e3_b"], ["e3"], pads=[1, 1, 1, 1]),
              helper.make_node("Concat", ["e1", "e3"], ["fire"], axis=1),
              helper.make_node("Relu", ["fire"], ["fr"]),
              helper.make_node("Dropout", ["fr"], ["dr"], **({"is_test": 1} if opset < 7 else {})),
              helper.make_node("Sum", ["dr", "fr", "dr"], ["sm"])]
    # Reshape to [1, -1] with the shape computed from Shape/Gather/Concat, as exporters do
    inits += [numpy_helper.from_array(np.array([0], np.int64), "zero"),
              numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    nodes += [helper.make_node("Shape", ["sm"], ["shp"]),
              helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
              helper.make_node("Concat", ["n", "minus1"], ["newshape"], axis=0),
              helper.make_node("Reshape", ["sm", "newshape"], ["flat"])]
    flat = 12 * 7 * 7
    inits += [_w("fc_w", flat, 10)]
    nodes += [helper.make_node("MatMul", ["flat", "fc_w"], ["mm"])]
    if opset >= 9:
        nodes += [helper.make_node("ConstantOfShape", ["shape10"], ["bias"],
                                   value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
                  helper.make_node("Add", ["mm", "bias"], ["logits"])]
        inits += [numpy_helper.from_array(np.array([1, 10], np.int64), "shape10")]
    else:
        inits += [_w("fc_b", 1, 10)]
        nodes += [helper.make_node("Add", ["mm", "fc_b"], ["logits"])]
    nodes += [helper.make_node("Softmax", ["logits"], ["y"], axis=1)]
    return _model(nodes, [("x", [1, 3, 32, 32])], ["y"], inits, opset, weights_as_inputs=True)


def squeezenet_fires(fires=((16, 64, 64), (16, 64, 64), (8, 24, 40)), opset=9):
    """SqueezeNet 1.0's Fire modules as the zoo's model has them: a 3x3/2 stem conv, ReLU, a
    3x3/2 max pool, then Fire modules (squeeze 1x1 + ReLU; expand 1x1 and expand 3x3, each
    with its ReLU; their Concat read straight by the next module's squeeze conv), a 1x1 conv
    to 10 classes, ReLU, GlobalAveragePool, Flatten, Softmax. ``fires``: (squeeze, expand 1x1,
    expand 3x3) channels; the defaults concatenate 64 + 64 channels (whole blocks of 8 or 16
    lanes, both sides kept blocked by the layout pass) and 24 + 40 (partial blocks)."""
    nodes, inits = [], [_w("c1_w", 32, 3, 3, 3), _w("c1_b", 32)]
    nodes += [helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["c1"], strides=[2, 2],
                               kernel_shape=[3, 3]),
              helper.make_node("Relu", ["c1"], ["r1"]),
              helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2])]
    h, c = "p1", 32
    for i, (sq, e1, e3) in enumerate(fires):
        p = f"f{i}"
        inits += [_w(f"{p}_sw", sq, c, 1, 1), _w(f"{p}_sb", sq), _w(f"{p}_e1w", e1, sq, 1, 1),
                  _w(f"{p}_e1b", e1), _w(f"{p}_e3w", e3, sq, 3, 3), _w(f"{p}_e3b", e3)]
        nodes += [helper.make_node("Conv", [h, f"{p}_sw", f"{p}_sb"], [f"{p}_s"]),
                  helper.make_node("Relu", [f"{p}_s"], [f"{p}_sr"]),
                  helper.make_node("Conv", [f"{p}_sr", f"{p}_e1w", f"{p}_e1b"], [f"{p}_e1"]),
                  helper.make_node("Relu", [f"{p}_e1"], [f"{p}_e1r"]),
                  helper.make_node("Conv", [f"{p}_sr", f"{p}_e3w", f"{p}_e3b"], [f"{p}_e3"],
                                   pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"{p}_e3"], [f"{p}_e3r"]),
                  helper.make_node("Concat", [f"{p}_e1r", f"{p}_e3r"], [f"{p}_out"], axis=1)]
        h, c = f"{p}_out", e1 + e3
    inits += [_w("cls_w", 10, c, 1, 1), _w("cls_b", 10)]
    nodes += [helper.make_node("Conv", [h, "cls_w", "cls_b"], ["cls"]),
              helper.make_node("Relu", ["cls"], ["clsr"]),
              helper.make_node("GlobalAveragePool", ["clsr"], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
              helper.make_node("Softmax", ["flat"], ["y"], axis=1)]
    return _model(nodes, [("x", [1, 3, 32, 32])], ["y"], inits, opset)


def mobilenet_like(opset=17):
    """Depthwise (group = channels) conv without bias, Clip (ReLU6) with min/max inputs,
    pointwise conv with bias, AveragePool, Transpose, Slice, Squeeze, LogSoftmax."""
    c = 8
    inits = [_w("dw", c, 1, 3, 3), _w("pw", 16, c, 1, 1), _w("pw_b", 16)]
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
              numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
              numpy_helper.from_array(np.array([0, 0], np.int64), "st"),
              numpy_helper.from_array(np.array([1, 12], np.int64), "en"),
              numpy_helper.from_array(np.array([0, 1], np.int64), "ax"),
              numpy_helper.from_array(np.array([2, 3], np.int64), "sq_axes")]
    nodes = [helper.make_node("Conv", ["x", "dw"], ["d"], group=c, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["d6"]),
             helper.make_node("Conv", ["d6", "pw", "pw_b"], ["p"], strides=[2, 2]),
             helper.make_node("Clip", ["p", "lo", "hi"], ["p6"]),
             helper.make_node("AveragePool", ["p6"], ["ap"], kernel_shape=[8, 8]),
             helper.make_node("Squeeze", ["ap", "sq_axes"], ["v"]),
             helper.make_node("Slice", ["v", "st", "en", "ax"], ["sl"]),
             helper.make_node("Transpose", ["sl"], ["tr"], perm=[1, 0]),
             helper.make_node("Mul", ["tr", "hi"], ["sc"]),
             helper.make_node("Transpose", ["sc"], ["tr2"], perm=[1, 0]),
             helper.make_node("LogSoftmax", ["tr2"], ["y"], axis=-1)]
    return _model(nodes, [("x", [1, c, 16, 16])], ["y"], inits, opset)


class _Builder:
    """Conv-BN(-ReLU) blocks with random weights, for the ResNet benchmarks."""

    def __init__(self):
        self.nodes, self.inits, self.k = [], [], 0

    def conv_bn(self, x, cin, cout, k, stride=1, relu=True):
        self.k += 1
        p = f"l{self.k}"
        self.inits += [_w(f"{p}_w", cout, cin, k, k)] + _bn(f"{p}_bn", cout)
        self.nodes += [
            helper.make_node("Conv", [x, f"{p}_w"], [f"{p}_c"], kernel_shape=[k, k],
                             strides=[stride, stride], pads=[k // 2] * 4),
            _bn_node(f"{p}_bn", f"{p}_c", f"{p}_n")]
        if not relu:
            return f"{p}_n"
        self.nodes.append(helper.make_node("Relu", [f"{p}_n"], [f"{p}_r"]))
        return f"{p}_r"

    def add_relu(self, a, b):
        self.k += 1
        self.nodes += [helper.make_node("Add", [a, b], [f"s{self.k}"]),
                       helper.make_node("Relu", [f"s{self.k}"], [f"o{self.k}"])]
        return f"o{self.k}"

    def basic(self, x, cin, cout, stride):
        h = self.conv_bn(x, cin, cout, 3, stride)
        h = self.conv_bn(h, cout, cout, 3, 1, relu=False)
        short = x if stride == 1 and cin == cout else \
            self.conv_bn(x, cin, cout, 1, stride, relu=False)
        return self.add_relu(h, short)

    def bottleneck(self, x, cin, width, stride):
        h = self.conv_bn(x, cin, width, 1)
        h = self.conv_bn(h, width, width, 3, stride)
        h = self.conv_bn(h, width, width * 4, 1, relu=False)
        short = x if stride == 1 and cin == width * 4 else \
            self.conv_bn(x, cin, width * 4, 1, stride, relu=False)
        return self.add_relu(h, short)


def mobilenetv3_like(c=16, e=32, hw=14, opset=17):
    """MobileNetV3's bottleneck: a 1x1 expansion, depthwise 3x3, HardSwish after each, a
    squeeze-and-excitation scale (global pool, 1x1 down with Relu, 1x1 up with HardSigmoid,
    multiplied in at [N, C, 1, 1] broadcast over the pixels), a 1x1 projection and the
    residual add."""
    nodes = [
        helper.make_node("Conv", ["x", "ew", "eb"], ["e"]),
        helper.make_node("HardSwish", ["e"], ["ea"]),
        helper.make_node("Conv", ["ea", "dw", "db"], ["d"], group=e, pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["d"], ["da"]),
        helper.make_node("GlobalAveragePool", ["da"], ["sq"]),
        helper.make_node("Conv", ["sq", "s1w", "s1b"], ["s1"]),
        helper.make_node("Relu", ["s1"], ["s1a"]),
        helper.make_node("Conv", ["s1a", "s2w", "s2b"], ["s2"]),
        helper.make_node("HardSigmoid", ["s2"], ["sc"], alpha=1 / 6),
        helper.make_node("Mul", ["da", "sc"], ["se"]),
        helper.make_node("Conv", ["se", "pw", "pb"], ["p"]),
        helper.make_node("Add", ["x", "p"], ["y"]),
    ]
    inits = [_w("ew", e, c, 1, 1), _w("eb", e, scale=0.1), _w("dw", e, 1, 3, 3),
             _w("db", e, scale=0.1), _w("s1w", e // 4, e, 1, 1), _w("s1b", e // 4, scale=0.1),
             _w("s2w", e, e // 4, 1, 1), _w("s2b", e, scale=0.1), _w("pw", c, e, 1, 1),
             _w("pb", c, scale=0.1)]
    return _model(nodes, [("x", [1, c, hw, hw])], ["y"], inits, opset)


def resnet18_stack(hw=56, opset=17):
    """ResNet-18's layer1 and layer2 (four basic blocks, the second stage downsampling) on a
    1x64x56x56 input."""
    b = _Builder()
    h = b.basic("x", 64, 64, 1)
    h = b.basic(h, 64, 64, 1)
    h = b.basic(h, 64, 128, 2)
    h = b.basic(h, 128, 128, 1)
    b.nodes.append(helper.make_node("Identity", [h], ["y"]))
    return _model(b.nodes, [("x", [1, 64, hw, hw])], ["y"], b.inits, opset)


def _stem(b, c):
    """ResNet's stem: a 7x7/2 convolution of the RGB image, batch norm, ReLU, a 3x3/2 max
    pool (its result is "pool")."""
    h = b.conv_bn("x", 3, c, 7, 2)
    b.nodes.append(helper.make_node("MaxPool", [h], ["pool"], kernel_shape=[3, 3],
                                    strides=[2, 2], pads=[1, 1, 1, 1]))


def resnet_stem(c=16, hw=32, opset=17, seed=0):
    """`resnet50`'s stem at ``c`` channels and a 1x3x``hw``x``hw`` image, then a 3x3
    convolution of the pooled values (so the pool's result feeds a convolution, as in the
    model). Its weights come from a generator of their own (``seed``), as
    `resnet_block_int8`'s do."""
    global RNG
    saved, RNG = RNG, np.random.default_rng(seed)
    try:
        b = _Builder()
        _stem(b, c)
        b.nodes.append(helper.make_node("Identity", [b.conv_bn("pool", c, c, 3)], ["y"]))
    finally:
        RNG = saved
    return _model(b.nodes, [("x", [1, 3, hw, hw])], ["y"], b.inits, opset)


def resnet50(opset=17):
    """ResNet-50 v1.5 (stride in the 3x3 conv) at 1x3x224x224, random weights."""
    b = _Builder()
    _stem(b, 64)
    h, cin = "pool", 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for k in range(blocks):
            h = b.bottleneck(h, cin, width, stride if k == 0 else 1)
            cin = width * 4
    b.inits += [_w("fc_w", 1000, 2048), _w("fc_b", 1000)]
    b.nodes += [helper.make_node("GlobalAveragePool", [h], ["gap"]),
                helper.make_node("Flatten", ["gap"], ["flat"]),
                helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1)]
    return _model(b.nodes, [("x", [1, 3, 224, 224])], ["y"], b.inits, opset)


def densenet_like(opset=9, growth=4, layers=2, stem=8):
    """DenseNet-121's idioms: a 7x7/2 stem and a padded 3x3/2 max pool, then dense layers of
    pre-activation BN-ReLU-Conv (1x1, then 3x3) whose output is concatenated to their input,
    a transition (BN-ReLU-Conv 1x1, 2x2 average pool) and BN-ReLU-GlobalAveragePool, Reshape,
    Gemm, Softmax. The batch norms after a concat or a pool fold into no convolution: they
    run as ops of their own, fused into their neighbours. ``stem``: the stem's channels
    (DenseNet-121's 64, with ``growth=32``, concatenates 64 + 32 + 32 as the zoo's does)."""
    nodes, inits = [], [_w("c0_w", stem, 3, 7, 7)] + _bn("bn0", stem)
    nodes += [helper.make_node("Conv", ["x", "c0_w"], ["c0"], strides=[2, 2], pads=[3, 3, 3, 3],
                               kernel_shape=[7, 7]),
              _bn_node("bn0", "c0", "n0"), helper.make_node("Relu", ["n0"], ["r0"]),
              helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2],
                               pads=[1, 1, 1, 1])]
    h, c = "p0", stem
    for i in range(layers):
        p = f"d{i}"
        inits += _bn(f"{p}a", c) + [_w(f"{p}_w1", 4 * growth, c, 1, 1)] + \
            _bn(f"{p}b", 4 * growth) + [_w(f"{p}_w3", growth, 4 * growth, 3, 3)]
        nodes += [_bn_node(f"{p}a", h, f"{p}_n1"),
                  helper.make_node("Relu", [f"{p}_n1"], [f"{p}_r1"]),
                  helper.make_node("Conv", [f"{p}_r1", f"{p}_w1"], [f"{p}_c1"],
                                   kernel_shape=[1, 1]),
                  _bn_node(f"{p}b", f"{p}_c1", f"{p}_n2"),
                  helper.make_node("Relu", [f"{p}_n2"], [f"{p}_r2"]),
                  helper.make_node("Conv", [f"{p}_r2", f"{p}_w3"], [f"{p}_c3"],
                                   kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("Concat", [h, f"{p}_c3"], [f"{p}_out"], axis=1)]
        h, c = f"{p}_out", c + growth
    inits += _bn("tr", c) + [_w("tr_w", c // 2, c, 1, 1)] + _bn("fin", c // 2)
    nodes += [_bn_node("tr", h, "tr_n"), helper.make_node("Relu", ["tr_n"], ["tr_r"]),
              helper.make_node("Conv", ["tr_r", "tr_w"], ["tr_c"], kernel_shape=[1, 1]),
              helper.make_node("AveragePool", ["tr_c"], ["tr_p"], kernel_shape=[2, 2],
                               strides=[2, 2]),
              _bn_node("fin", "tr_p", "fin_n"), helper.make_node("Relu", ["fin_n"], ["fin_r"]),
              helper.make_node("GlobalAveragePool", ["fin_r"], ["gap"])]
    inits += [numpy_helper.from_array(np.array([1, c // 2], np.int64), "shp"),
              _w("fc_w", 10, c // 2), _w("fc_b", 10)]
    nodes += [helper.make_node("Reshape", ["gap", "shp"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
              helper.make_node("Softmax", ["logits"], ["y"], axis=1)]
    return _model(nodes, [("x", [1, 3, 32, 32])], ["y"], inits, opset, weights_as_inputs=True)


def inception_like(opset=7):
    """GoogLeNet's idioms: a max pool padded on one side only (pads [0, 0, 1, 1], as the
    zoo's inception_v1 has it), LRN, an inception module (1x1; 1x1 then 3x3; 1x1 then 5x5;
    a 3x3/1 max pool then 1x1) concatenated four ways, a whole-map average pool, Dropout,
    Reshape, Gemm without transB, Softmax."""
    nodes, inits = [], [_w("c1_w", 8, 3, 3, 3), _w("c1_b", 8)]
    nodes += [helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["c1"], strides=[2, 2],
                               pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
              helper.make_node("Relu", ["c1"], ["r1"]),
              helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
                               pads=[0, 0, 1, 1]),
              helper.make_node("LRN", ["p1"], ["l1"], size=5, alpha=1e-4, beta=0.75, bias=1.0)]
    branches = {"b1": (4, 8, 1), "b2a": (4, 8, 1), "b2": (6, 4, 3), "b3a": (2, 8, 1),
                "b3": (3, 2, 5), "b4": (3, 8, 1)}
    for name, (f, c, k) in branches.items():
        inits += [_w(f"{name}_w", f, c, k, k), _w(f"{name}_b", f)]

    def conv(x, name, k):
        return helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name],
                                kernel_shape=[k, k], pads=[k // 2] * 4)
    nodes += [conv("l1", "b1", 1),
              conv("l1", "b2a", 1), helper.make_node("Relu", ["b2a"], ["b2ar"]),
              conv("b2ar", "b2", 3),
              conv("l1", "b3a", 1), helper.make_node("Relu", ["b3a"], ["b3ar"]),
              conv("b3ar", "b3", 5),
              helper.make_node("MaxPool", ["l1"], ["b4p"], kernel_shape=[3, 3], strides=[1, 1],
                               pads=[1, 1, 1, 1]),
              conv("b4p", "b4", 1),
              helper.make_node("Concat", ["b1", "b2", "b3", "b4"], ["inc"], axis=1),
              helper.make_node("Relu", ["inc"], ["incr"]),
              helper.make_node("AveragePool", ["incr"], ["ap"], kernel_shape=[8, 8]),
              helper.make_node("Dropout", ["ap"], ["dr"])]
    inits += [numpy_helper.from_array(np.array([1, -1], np.int64), "shp"),
              _w("fc_w", 16, 10), _w("fc_b", 10)]
    nodes += [helper.make_node("Reshape", ["dr", "shp"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"]),
              helper.make_node("Softmax", ["logits"], ["y"])]
    return _model(nodes, [("x", [1, 3, 32, 32])], ["y"], inits, opset, weights_as_inputs=True)


def alexnet_like(opset=9):
    """AlexNet's idioms: an 11x11/4 convolution, LRN, unpadded 3x3/2 max pools, a 5x5
    convolution, Flatten, then Gemm (transB) - Relu - Dropout - Gemm, Softmax."""
    inits = [_w("c1_w", 8, 3, 11, 11), _w("c1_b", 8), _w("c2_w", 12, 8, 5, 5), _w("c2_b", 12),
             _w("c3_w", 12, 12, 3, 3), _w("c3_b", 12),
             _w("f1_w", 32, 12 * 3 * 3), _w("f1_b", 32), _w("f2_w", 10, 32), _w("f2_b", 10)]
    nodes = [helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["c1"], strides=[4, 4],
                              pads=[2, 2, 2, 2], kernel_shape=[11, 11]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("LRN", ["r1"], ["l1"], size=5, alpha=1e-4, beta=0.75, bias=1.0),
             helper.make_node("MaxPool", ["l1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "c2_w", "c2_b"], ["c2"], pads=[2, 2, 2, 2],
                              kernel_shape=[5, 5]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "c3_w", "c3_b"], ["c3"], pads=[1, 1, 1, 1],
                              kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("MaxPool", ["r3"], ["p3"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Flatten", ["p3"], ["flat"]),
             helper.make_node("Gemm", ["flat", "f1_w", "f1_b"], ["f1"], transB=1),
             helper.make_node("Relu", ["f1"], ["f1r"]),
             helper.make_node("Dropout", ["f1r"], ["f1d"]),
             helper.make_node("Gemm", ["f1d", "f2_w", "f2_b"], ["f2"], transB=1),
             helper.make_node("Softmax", ["f2"], ["y"], axis=1)]
    return _model(nodes, [("x", [1, 3, 63, 63])], ["y"], inits, opset, weights_as_inputs=True)


# ------------------------------------------------------------------ issue 26's benchmark models

def _bn_unit(prefix, c):
    """Batch-norm statistics that keep activations near unit scale (gamma in [0.5, 1),
    small beta and mean), so a deep net's outputs neither vanish nor blow up."""
    return [numpy_helper.from_array(RNG.uniform(0.5, 1.0, c).astype(np.float32), f"{prefix}_s"),
            _w(f"{prefix}_b", c, scale=0.1), _w(f"{prefix}_m", c, scale=0.1),
            numpy_helper.from_array(RNG.uniform(0.5, 1.5, c).astype(np.float32), f"{prefix}_v")]


def _conv_w(name, cout, cin_per_group, k):
    """He-scaled convolution weights (ReLU-family activations keep their scale)."""
    return _w(name, cout, cin_per_group, k, k, scale=np.sqrt(2.0 / (cin_per_group * k * k)))


def mobilenetv2(hw=224, width=1.0, classes=1000, opset=17):
    """MobileNetV2 (Sandler et al. 2018, torchvision's layout) at 1x3xHWxHW: a 3x3/2 stem
    conv to 32 channels, 17 inverted residual blocks (1x1 expand by t = 6, 3x3 depthwise,
    1x1 linear projection; identity shortcut where stride 1 and widths match) of widths
    16-24-32-64-96-160-320, a 1x1 conv to 1280, global average pool, FC to ``classes``.
    Each conv is followed by a BatchNormalization node, ReLU6 is Clip(0, 6) with min/max
    inputs, as the zoo's export writes them. Random weights; ``width`` scales the channels
    (the small sizes the tests use)."""
    nodes, inits, k = [], [], [0]
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "relu6_lo"),
              numpy_helper.from_array(np.array(6.0, np.float32), "relu6_hi")]

    def ch(c):
        return max(8, int(round(c * width / 8)) * 8)

    def conv_bn(x, cin, cout, ksize, stride=1, group=1, relu6=True):
        k[0] += 1
        p = f"m{k[0]}"
        inits.extend([_conv_w(f"{p}_w", cout, cin // group, ksize)] + _bn_unit(f"{p}_bn", cout))
        nodes.extend([helper.make_node("Conv", [x, f"{p}_w"], [f"{p}_c"],
                                       kernel_shape=[ksize, ksize], strides=[stride, stride],
                                       pads=[ksize // 2] * 4, group=group),
                      _bn_node(f"{p}_bn", f"{p}_c", f"{p}_n")])
        if not relu6:
            return f"{p}_n"
        nodes.append(helper.make_node("Clip", [f"{p}_n", "relu6_lo", "relu6_hi"], [f"{p}_r"]))
        return f"{p}_r"

    cin = ch(32)
    h = conv_bn("x", 3, cin, 3, 2)
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        cout = ch(c)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = conv_bn(h, cin, hidden, 1) if t != 1 else h
            y = conv_bn(y, hidden, hidden, 3, stride, group=hidden)
            y = conv_bn(y, hidden, cout, 1, relu6=False)
            if stride == 1 and cin == cout:
                k[0] += 1
                nodes.append(helper.make_node("Add", [y, h], [f"res{k[0]}"]))
                y = f"res{k[0]}"
            h, cin = y, cout
    last = max(1280, ch(1280)) if width > 1.0 else ch(1280)
    h = conv_bn(h, cin, last, 1)
    inits += [_w("fc_w", classes, last), _w("fc_b", classes, scale=0.01)]
    nodes += [helper.make_node("GlobalAveragePool", [h], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1)]
    return _model(nodes, [("x", [1, 3, hw, hw])], ["y"], inits, opset)


def bert_base_layer(seq=128, d=768, heads=12, ffn=None, batch=1, opset=17):
    """One BERT-base encoder layer (post-norm) on 1 x seq x d hidden states, as
    transformers' export writes it: Q, K, V each MatMul + Add, Reshape to heads and
    Transpose (K to [B, H, Dh, S]), MatMul, Div by sqrt(Dh), Softmax, MatMul with V,
    Transpose + Reshape back, the output projection (MatMul + Add), the residual Add and
    LayerNormalization (eps 1e-12), then the FFN of ``4 d`` (3072) with GELU in its Erf form
    (0.5 x (1 + erf(x / sqrt 2))), its residual Add and LayerNormalization. No attention
    mask. The weights are ``bert_weights(model)``'s, for a PyTorch twin."""
    ffn = ffn or 4 * d
    dh = d // heads
    nodes, inits = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def linear(x, p, din, dout):
        inits.extend([_w(f"{p}_w", din, dout, scale=np.sqrt(1.0 / din)),
                      _w(f"{p}_b", dout, scale=0.02)])
        nodes.extend([helper.make_node("MatMul", [x, f"{p}_w"], [f"{p}_mm"]),
                      helper.make_node("Add", [f"{p}_mm", f"{p}_b"], [f"{p}_y"])])
        return f"{p}_y"

    def layer_norm(x, p):
        inits.extend([numpy_helper.from_array(RNG.uniform(0.8, 1.2, d).astype(np.float32),
                                              f"{p}_g"), _w(f"{p}_be", d, scale=0.02)])
        nodes.append(helper.make_node("LayerNormalization", [x, f"{p}_g", f"{p}_be"], [f"{p}_y"],
                                      axis=-1, epsilon=1e-12))
        return f"{p}_y"

    const("heads_shape", np.array([batch, seq, heads, dh], np.int64))
    const("hidden_shape", np.array([batch, seq, d], np.int64))
    const("sqrt_dh", np.array(np.sqrt(dh), np.float32))
    q, k, v = (linear("x", p, d, d) for p in ("q", "k", "v"))
    for name, perm in ((q, [0, 2, 1, 3]), (k, [0, 2, 3, 1]), (v, [0, 2, 1, 3])):
        nodes += [helper.make_node("Reshape", [name, "heads_shape"], [f"{name}_h"]),
                  helper.make_node("Transpose", [f"{name}_h"], [f"{name}_t"], perm=perm)]
    nodes += [helper.make_node("MatMul", [f"{q}_t", f"{k}_t"], ["scores"]),
              helper.make_node("Div", ["scores", "sqrt_dh"], ["scaled"]),
              helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", f"{v}_t"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctx_t", "hidden_shape"], ["ctx_h"])]
    o = linear("ctx_h", "o", d, d)
    nodes.append(helper.make_node("Add", [o, "x"], ["res1"]))
    h1 = layer_norm("res1", "ln1")
    f1 = linear(h1, "f1", d, ffn)
    const("inv_sqrt2", np.array(1 / np.sqrt(2), np.float32))
    const("one", np.array(1.0, np.float32))
    const("half", np.array(0.5, np.float32))
    nodes += [helper.make_node("Mul", [f1, "inv_sqrt2"], ["g_s"]),
              helper.make_node("Erf", ["g_s"], ["g_e"]),
              helper.make_node("Add", ["g_e", "one"], ["g_a"]),
              helper.make_node("Mul", [f1, "g_a"], ["g_m"]),
              helper.make_node("Mul", ["g_m", "half"], ["gelu"])]
    f2 = linear("gelu", "f2", ffn, d)
    nodes.append(helper.make_node("Add", [f2, h1], ["res2"]))
    h2 = layer_norm("res2", "ln2")
    nodes.append(helper.make_node("Identity", [h2], ["y"]))
    return _model(nodes, [("x", [batch, seq, d])], ["y"], inits, opset)


def bert_weights(model):
    """The initializers of `bert_base_layer`'s model by name, as numpy arrays."""
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def resnet_block(c=64, hw=56, opset=17):
    """A ResNet basic block in its inference form (batch norms folded into the convolutions'
    biases, as a deployed or quantized model has them): Conv 3x3 + bias, Relu, Conv 3x3 +
    bias, the identity shortcut's Add, Relu, on 1 x c x hw x hw."""
    inits = [_conv_w("w1", c, c, 3), _w("b1", c, scale=0.1),
             _w("w2", c, c, 3, 3, scale=np.sqrt(1.0 / (c * 9))), _w("b2", c, scale=0.1)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    return _model(nodes, [("x", [1, c, hw, hw])], ["y"], inits, opset)


def quantize_qdq(model, samples=4, per_channel=True, quant_format="QDQ", seed=1,
                 reduce_range=False):
    """``model`` quantized by onnxruntime's ``quantize_static`` (MinMax calibration on
    ``samples`` random N(0, 1) inputs of its first input's shape; activations uint8, weights
    int8 per output channel, biases int32): the QDQ form (QuantizeLinear / DequantizeLinear
    around each op, which onnxruntime fuses into QLinearConv and QLinearAdd at load) or, with
    ``quant_format="QOperator"``, QLinearConv nodes written out; ``reduce_range``: 7-bit
    weights, whose pairs of products onnxruntime's AVX2 kernels (no VNNI) sum in int16
    without saturating. Needs onnxruntime."""
    import os
    import tempfile

    import onnx
    from onnxruntime import quantization as q

    inp = model.graph.input[0]
    shape = [dim.dim_value for dim in inp.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    data = [{inp.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)]

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.it = iter(data)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f32.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(model, src)
        q.quantize_static(src, dst, Reader(), per_channel=per_channel,
                          quant_format=getattr(q.QuantFormat, quant_format),
                          activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                          reduce_range=reduce_range)
        return onnx.load(dst)


def resnet_block_int8(c=64, hw=56, quant_format="QDQ", seed=0):
    """`resnet_block` and its quantized form (`quantize_qdq`): (float model, int8 model).
    Its weights come from a generator of their own (``seed``), not from this module's, whose
    state depends on which models a test process built before: tests compare it with
    onnxruntime bit for bit, and onnxruntime fuses the residual's DequantizeLinear -> Add ->
    QuantizeLinear into QLinearAdd, whose rounding differs from ONNX's float Add by one step
    in rare ties (one element in about 50 draws of these weights at c=64, hw=10)."""
    global RNG
    saved, RNG = RNG, np.random.default_rng(seed)
    try:
        f32 = resnet_block(c, hw)
    finally:
        RNG = saved
    return f32, quantize_qdq(f32, quant_format=quant_format)
