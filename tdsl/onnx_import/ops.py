"""One converter per ONNX operator: ``convert(cv, node, attrs)`` with ``cv`` the `Converter`.

A converter computes static values with numpy when its inputs are all static (shape
arithmetic), and otherwise emits a call of a standard op where one means exactly the same,
else of an op written for the shapes (`templates`).
"""
from __future__ import annotations

import math

import numpy as np

from . import templates as T

CONVERTERS = {}
# the attributes each converter understands; any other is an error naming the node
ATTRIBUTES = {}


def converter(*names, attrs=()):
    def register(fn):
        for n in names:
            CONVERTERS[n] = fn
            ATTRIBUTES[n] = set(attrs)
        return fn
    return register


def _ints(v, n, default):
    return [int(x) for x in v] if v is not None else [default] * n


def _inputs(node):
    return [i for i in node.input]


def _opt(node, k):
    return node.input[k] if len(node.input) > k and node.input[k] else None


# ---------------------------------------------------------------------------- constants

@converter("Constant", attrs=("value", "value_float", "value_floats", "value_int",
                              "value_ints"))
def constant(cv, node, a):
    from onnx import numpy_helper
    if "value" in a:
        v = numpy_helper.to_array(a["value"])
    elif "value_float" in a or "value_floats" in a:
        v = np.array(a.get("value_float", a.get("value_floats")), np.float32)
    else:
        v = np.array(a.get("value_int", a.get("value_ints")), np.int64)
    cv.static[node.output[0]] = v


@converter("ConstantOfShape", attrs=("value",))
def constant_of_shape(cv, node, a):
    from onnx import numpy_helper
    fill = numpy_helper.to_array(a["value"]).reshape(-1) if "value" in a else \
        np.zeros(1, np.float32)
    cv.static[node.output[0]] = np.full(cv.value(node.input[0]).astype(np.int64),
                                        fill[0], fill.dtype)


@converter("Shape", attrs=("start", "end"))
def shape(cv, node, a):
    s = cv.shape(node.input[0])
    cv.static[node.output[0]] = np.array(s[a.get("start", 0):a.get("end", len(s))], np.int64)


@converter("Gather", attrs=("axis",))
def gather(cv, node, a):
    data, index = cv.value(node.input[0]), cv.value(node.input[1])
    cv.static[node.output[0]] = np.take(data, index.astype(np.int64), axis=a.get("axis", 0))


@converter("Cast", attrs=("to",))
def cast(cv, node, a):
    from onnx import helper
    dtype = helper.tensor_dtype_to_np_dtype(a["to"])
    x = node.input[0]
    if cv.is_static(x):
        cv.static[node.output[0]] = cv.static[x].astype(dtype)
    elif np.dtype(dtype) in (np.float32, np.float64, np.float16):
        cv.alias(node.output[0], x)
    else:
        raise cv.error(f"a cast of a computed tensor to {np.dtype(dtype)}")


@converter("Identity", "Dropout", attrs=("ratio", "seed", "is_test", "training_mode"))
def identity(cv, node, a):
    if node.op_type == "Dropout" and a.get("is_test", 1) == 0:
        raise cv.error("training-mode dropout")
    cv.alias(node.output[0], node.input[0])      # Dropout is a no-op at inference


# ---------------------------------------------------------------------------- arithmetic

_BINARY = {"Add": ("{0} + {1}", np.add, "add"), "Sub": ("{0} - {1}", np.subtract, "sub"),
           "Mul": ("{0} * {1}", np.multiply, "mul"), "Div": ("{0} / {1}", np.divide, "div")}


@converter(*_BINARY, attrs=("axis", "broadcast"))
def binary(cv, node, a):
    expr, fn, std = _BINARY[node.op_type]
    x, y = node.input
    if "broadcast" in a and a.get("broadcast") and "axis" in a:
        raise cv.error("the opset-1 broadcast attribute with an axis")
    if cv.is_static(x) and cv.is_static(y):
        r = fn(cv.static[x], cv.static[y])
        cv.static[node.output[0]] = r.astype(cv.static[x].dtype) if node.op_type != "Div" \
            or cv.static[x].dtype.kind == "f" else r.astype(np.int64)
        return
    sx, sy = cv.shape(x), cv.shape(y)
    if sx == sy and not cv.is_static(x) and not cv.is_static(y):
        cv.call(node.output[0], std, [cv.tensor(x), cv.tensor(y)], sx)
        return
    if node.op_type == "Add" and cv.is_static(x) and not cv.is_static(y):
        x, y, sx, sy = y, x, sy, sx                       # commutative: the constant second
    if node.op_type == "Add" and len(sx) == 4 and cv.is_static(y) and \
            not cv.is_static(x) and tuple(sy) in ((sx[1], 1, 1), (1, sx[1], 1, 1)):
        bias = y + "#bias"                                 # per channel: a bias_add
        cv.static[bias] = cv.static[y].reshape(-1)
        cv.call(node.output[0], "bias_add", [cv.tensor(x), cv.tensor(bias)], sx)
        return
    cv.elementwise(node.output[0], [x, y], expr, std)


@converter("Sum")
def sum_(cv, node, a):
    names = list(node.input)
    if len(names) == 1:
        cv.alias(node.output[0], names[0])
        return
    expr = " + ".join(f"{{{k}}}" for k in range(len(names)))
    cv.elementwise(node.output[0], names, expr, "sum")


_UNARY_STD = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp"}
_UNARY_EXPR = {"Neg": "-{0}", "Abs": "abs({0})", "Sqrt": "sqrt({0})", "Log": "log({0})",
               "Reciprocal": "1.0 / {0}", "Floor": "floor({0})", "Ceil": "ceil({0})"}


@converter(*_UNARY_STD, *_UNARY_EXPR)
def unary(cv, node, a):
    x = node.input[0]
    if node.op_type in _UNARY_STD:
        t = cv.tensor(x)
        cv.call(node.output[0], _UNARY_STD[node.op_type], [t], t.shape)
    else:
        cv.elementwise(node.output[0], [x], _UNARY_EXPR[node.op_type], node.op_type.lower())


@converter("LeakyRelu", attrs=("alpha",))
def leaky_relu(cv, node, a):
    t = cv.tensor(node.input[0])
    cv.call(node.output[0], "leaky_relu", [t], t.shape, f"alpha={T.lit(a.get('alpha', 0.01))}")


@converter("Clip", attrs=("min", "max"))
def clip(cv, node, a):
    lo, hi = a.get("min", -math.inf), a.get("max", math.inf)
    if _opt(node, 1):
        lo = float(cv.value(node.input[1]).reshape(()))
    if _opt(node, 2):
        hi = float(cv.value(node.input[2]).reshape(()))
    t = cv.tensor(node.input[0])
    cv.call(node.output[0], "clip", [t], t.shape, f"lo={T.lit(lo)}, hi={T.lit(hi)}")


# ---------------------------------------------------------------------------- shapes

@converter("Reshape", attrs=("allowzero", "shape"))
def reshape(cv, node, a):
    src = node.input[0]
    target = a["shape"] if "shape" in a else cv.value(node.input[1])
    shape, n = list(int(v) for v in target), int(np.prod(cv.shape(src)))
    for k, v in enumerate(shape):
        if v == 0 and not a.get("allowzero", 0):
            shape[k] = cv.shape(src)[k]
    if -1 in shape:
        known = int(np.prod([v for v in shape if v != -1]))
        shape[shape.index(-1)] = n // known
    cv.reshape(node.output[0], src, shape)


@converter("Flatten", attrs=("axis",))
def flatten(cv, node, a):
    s = cv.shape(node.input[0])
    axis = a.get("axis", 1) % (len(s) or 1) if a.get("axis", 1) < 0 else a.get("axis", 1)
    cv.reshape(node.output[0], node.input[0],
               (int(np.prod(s[:axis])), int(np.prod(s[axis:]))))


@converter("Squeeze", "Unsqueeze", attrs=("axes",))
def squeeze(cv, node, a):
    s = list(cv.shape(node.input[0]))
    axes = a.get("axes")
    if axes is None and _opt(node, 1):
        axes = cv.value(node.input[1]).tolist()
    if node.op_type == "Squeeze":
        axes = [k % len(s) for k in axes] if axes is not None else \
            [k for k, n in enumerate(s) if n == 1]
        shape = [n for k, n in enumerate(s) if k not in axes]
    else:
        rank = len(s) + len(axes)
        shape = list(s)
        for k in sorted(x % rank for x in axes):
            shape.insert(k, 1)
    cv.reshape(node.output[0], node.input[0], shape)


@converter("Transpose", attrs=("perm",))
def transpose(cv, node, a):
    x = node.input[0]
    s = cv.shape(x)
    perm = a.get("perm", list(reversed(range(len(s)))))
    if cv.is_static(x):
        cv.static[node.output[0]] = np.transpose(cv.static[x], perm)
        return
    t = cv.tensor(x)
    cv.call(node.output[0], cv.op("transpose", T.transpose(list(s), perm)), [t],
            tuple(s[p] for p in perm))


@converter("Slice", attrs=("starts", "ends", "axes"))
def slice_(cv, node, a):
    x = node.input[0]
    s = cv.shape(x)
    if "starts" in a:
        starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
    else:
        starts, ends = cv.value(node.input[1]).tolist(), cv.value(node.input[2]).tolist()
        axes = cv.value(node.input[3]).tolist() if _opt(node, 3) else None
        steps = cv.value(node.input[4]).tolist() if _opt(node, 4) else None
    axes = [k % len(s) for k in (axes if axes is not None else range(len(starts)))]
    steps = steps or [1] * len(axes)
    first, step, shape = [0] * len(s), [1] * len(s), list(s)
    for ax, b, e, st in zip(axes, starts, ends, steps):
        r = range(s[ax])[slice(max(min(b, 2**62), -2**62), max(min(e, 2**62), -2**62), st)]
        first[ax], step[ax], shape[ax] = (r.start if len(r) else 0), st, len(r)
    if cv.is_static(x):
        cv.static[node.output[0]] = cv.static[x][tuple(
            slice(f, f + st * n if f + st * n >= 0 else None, st)
            for f, st, n in zip(first, step, shape))]
        return
    t = cv.tensor(x)
    cv.call(node.output[0], cv.op("slice", T.slice_(list(s), first, step, shape)), [t],
            tuple(shape))


@converter("Concat", attrs=("axis",))
def concat(cv, node, a):
    names = [n for n in node.input if n]
    axis = a["axis"] % len(cv.shape(names[0]))
    if all(cv.is_static(n) for n in names):
        cv.static[node.output[0]] = np.concatenate([cv.static[n] for n in names], axis)
        return
    ts = [cv.tensor(n) for n in names]
    shapes = [list(t.shape) for t in ts]
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    cv.call(node.output[0], cv.op("concat", T.concat(shapes, axis)), ts, tuple(out))


@converter("Pad", attrs=("mode", "pads", "value"))
def pad(cv, node, a):
    mode = a.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "constant":
        raise cv.error(f"Pad mode '{mode}' (only 'constant' is supported)")
    x = node.input[0]
    s = cv.shape(x)
    pads = a["pads"] if "pads" in a else cv.value(node.input[1]).tolist()
    value = a.get("value", 0.0)
    if _opt(node, 2):
        value = float(cv.value(node.input[2]).reshape(()))
    axes = list(range(len(s)))
    if _opt(node, 3):
        axes = [k % len(s) for k in cv.value(node.input[3]).tolist()]
    begins, ends = [0] * len(s), [0] * len(s)
    for j, ax in enumerate(axes):
        begins[ax], ends[ax] = int(pads[j]), int(pads[j + len(axes)])
    shape = tuple(n + b + e for n, b, e in zip(s, begins, ends))
    t = cv.tensor(x)
    cv.call(node.output[0], cv.op("pad", T.pad(list(s), begins, ends, value)), [t], shape)
