"""Converters of the tensor and shape operators: constants, Shape, Cast, Identity, Reshape,
Flatten, Squeeze/Unsqueeze, Transpose, Slice, Concat, Pad, Gather.

Each computes a static value with numpy when its inputs are all static (shape arithmetic),
and otherwise emits a call of an op written for the shapes (`templates`).
"""
from __future__ import annotations

import numpy as np

from . import templates as T
from ..lowering.dtypes import to_numpy
from .convert import tdsl_dtype
from .registry import converter, opt as _opt


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


@converter("Cast", "CastLike", attrs=("to", "saturate", "round_mode"))
def cast(cv, node, a):
    from onnx import helper
    x = node.input[0]
    if node.op_type == "CastLike":
        dtype = cv.dtype(node.input[1])
    else:
        try:
            np_dtype = helper.tensor_dtype_to_np_dtype(a["to"])
        except (KeyError, ValueError):
            raise cv.error(f"a cast to ONNX type {a['to']}") from None
        dtype = tdsl_dtype(np_dtype, f"the cast's target type ({np.dtype(np_dtype)})")
    if cv.is_static(x):
        cv.static[node.output[0]] = cv.static[x].astype(to_numpy(dtype))
        return
    src = cv.tensor(x)
    if src.dtype == dtype:
        cv.alias(node.output[0], x)
        return
    # tdsl's casts: float to integer truncates and saturates, bool(x) is x != 0; a float
    # to bool goes through the comparison so that NaN is true, as in numpy
    expr = "{0} != 0.0" if dtype == "bool" and src.dtype in ("f32", "f64") else \
        f"{dtype}({{0}})"
    cv.elementwise(node.output[0], [x], expr, f"cast_{dtype}", dtype)


@converter("Identity", "Dropout", attrs=("ratio", "seed", "is_test", "training_mode"))
def identity(cv, node, a):
    if node.op_type == "Dropout" and a.get("is_test", 1) == 0:
        raise cv.error("training-mode dropout")
    cv.alias(node.output[0], node.input[0])      # Dropout is a no-op at inference


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
