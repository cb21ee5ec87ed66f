"""Converters of the tensor and shape operators: constants, Shape, Cast, Identity, Reshape,
Flatten, Squeeze/Unsqueeze, Transpose, Slice, Concat, Pad, Gather.

Each computes a static value with numpy when its inputs are all static (shape arithmetic),
and otherwise emits a call of an op written for the shapes (`templates`).
"""
from __future__ import annotations

import numpy as np

from . import templates as T
from ..lowering.dtypes import from_numpy, is_float, minifloat_format, to_numpy
from .convert import SUPPORTED_DTYPES, NeedsConstant, tdsl_dtype
from .registry import converter, opt as _opt, text


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
    shape = _known(cv, node.input[0], _SHAPE)
    cv.static[node.output[0]] = np.full(shape.astype(np.int64),
                                        fill[0], fill.dtype)


@converter("Shape", attrs=("start", "end"))
def shape(cv, node, a):
    s = cv.shape(node.input[0])
    cv.static[node.output[0]] = np.array(s[a.get("start", 0):a.get("end", len(s))], np.int64)


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
        if from_numpy(np_dtype) not in SUPPORTED_DTYPES:
            raise cv.error(f"a cast to {np.dtype(np_dtype)}: tdsl graphs don't carry it "
                           f"(they carry {', '.join(SUPPORTED_DTYPES)})")
        dtype = tdsl_dtype(np_dtype, "the cast's target type")
    saturate = dtype.startswith("f8") and bool(a.get("saturate", 1))     # T.saturated
    if cv.is_static(x):
        v = cv.static[x]
        if saturate and v.dtype != bool:
            top = minifloat_format(dtype)["max"]
            v = np.clip(v, -top, top)
        cv.static[node.output[0]] = v.astype(to_numpy(dtype))
        return
    src = cv.tensor(x)
    if src.dtype == dtype:
        cv.alias(node.output[0], x)
        return
    # tdsl's casts: float to integer truncates and saturates, bool(x) is x != 0; a float
    # to bool goes through the comparison so that NaN is true, as in numpy
    expr = "{0} != 0.0" if dtype == "bool" and is_float(src.dtype) else f"{dtype}({{0}})"
    saturate = saturate and src.dtype != "bool"
    if saturate:
        expr = T.saturated("{0}", dtype, src.dtype)
    cv.elementwise(node.output[0], [x], expr, f"cast_{dtype}{'_sat' * saturate}", dtype)


@converter("Identity", "Dropout", attrs=("ratio", "seed", "is_test", "training_mode"))
def identity(cv, node, a):
    if node.op_type == "Dropout":
        ratio = float(cv.value(node.input[1]).reshape(())) if _opt(node, 1) else \
            float(a.get("ratio", 0.5))
        training = bool(cv.value(node.input[2]).reshape(())) if _opt(node, 2) else \
            a.get("is_test", 1) == 0
        if training and ratio != 0.0:
            raise cv.error("training-mode dropout (its mask is random)")
        if len(node.output) > 1 and node.output[1]:     # the mask keeps every element
            cv.static[node.output[1]] = np.ones(cv.shape(node.input[0]), bool)
    cv.alias(node.output[0], node.input[0])      # Dropout is a no-op at inference


# ---------------------------------------------------------------------------- shapes

@converter("Reshape", attrs=("allowzero", "shape"))
def reshape(cv, node, a):
    src = node.input[0]
    target = a["shape"] if "shape" in a else _known(cv, node.input[1], _SHAPE)
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
        axes = _known(cv, node.input[1], "the axes decide the output shape").tolist()
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
    cv.call(node.output[0], cv.op("transpose", T.transpose(list(s), perm, t.dtype)), [t],
            tuple(s[p] for p in perm), dtype=t.dtype)


@converter("Slice", attrs=("starts", "ends", "axes"))
def slice_(cv, node, a):
    x = node.input[0]
    s = cv.shape(x)
    if "starts" in a:
        starts, ends, axes, steps = a["starts"], a["ends"], a.get("axes"), None
    else:
        why = "they decide the output shape"
        starts, ends = (_static_or_refuse(cv, node.input[k], why).reshape(-1).tolist()
                        for k in (1, 2))
        axes = _static_or_refuse(cv, node.input[3], why).reshape(-1).tolist() \
            if _opt(node, 3) else None
        steps = _static_or_refuse(cv, node.input[4], why).reshape(-1).tolist() \
            if _opt(node, 4) else None
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
    cv.call(node.output[0], cv.op("slice", T.slice_(list(s), first, step, shape, t.dtype)),
            [t], tuple(shape), dtype=t.dtype)


@converter("Concat", attrs=("axis",))
def concat(cv, node, a):
    names = [n for n in node.input if n]
    axis = a["axis"] % len(cv.shape(names[0]))
    if all(cv.is_static(n) for n in names):
        cv.static[node.output[0]] = np.concatenate([cv.static[n] for n in names], axis)
        return
    names = [n for n in names if cv.shape(n)[axis] > 0] or names[:1]   # empty: nothing
    ts = [cv.tensor(n) for n in names]
    dtypes = {t.dtype for t in ts}
    if len(dtypes) != 1:
        raise cv.error(f"inputs of different dtypes ({', '.join(sorted(dtypes))})")
    if len(ts) == 1:
        cv.alias(node.output[0], names[0])
        return
    shapes = [list(t.shape) for t in ts]
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    cv.call(node.output[0], cv.op("concat", T.concat(shapes, axis, ts[0].dtype)), ts,
            tuple(out), dtype=ts[0].dtype)


# ---------------------------------------------------------------------------- helpers

_INTS = ("i64", "i32", "i16", "i8", "u8")
_SCATTER_LIMIT = 1 << 26        # (output element, candidate update) pairs a scatter may test


def _emit(cv, out, kind, ins, shape, dtype, lines):
    """``out`` = the op of ``lines`` (its stages) over ``ins`` [(param name, Tensor)]."""
    params = ", ".join(f"{p}: {t.type}" for p, t in ins)
    text = (f"op {{name}}({params}) -> Y: {T.ty(shape, dtype)} {{\n" +
            "".join(f"    {ln}\n" for ln in lines) + "}\n")
    cv.call(out, cv.op(kind, text), [t for _, t in ins], tuple(shape), dtype=dtype)


def _i64(e, dtype):
    return e if dtype == "i64" else f"i64({e})"


def _wrap(v, n):
    """An index ``v`` (i64) that may count from the end (ONNX's negative indices)."""
    return f"select({v} < 0, {v} + {n}, {v})"


def _clamp(v, n):
    """``_wrap`` and kept inside [0, n) so that an invalid index can't read outside."""
    return f"min(max({_wrap(v, n)}, 0), {n - 1})"


def _index_tensor(cv, name):
    t = cv.tensor(name)
    if t.dtype not in _INTS:
        raise cv.error(f"indices '{name}' are {t.dtype}; integer indices are supported")
    return t


def _static_or_refuse(cv, name, why):
    """The static value of ``name``; a graph input can be given as a constant; else an
    error saying ``why`` it must be known."""
    if cv.is_static(name) or name in cv.input_names:
        return cv.value(name)
    source = _input_source(cv, name)
    if source is not None:
        raise NeedsConstant(cv.error(
            f"'{name}' is computed from graph input '{source}', but {why}: give that "
            f"input's value with --const {source}=FILE.npy").args[0], source)
    raise cv.error(f"'{name}' is computed by the graph, but {why}: it must be known at "
                   f"import time")


_SHAPE = "it gives the output's shape"


def _input_source(cv, name):
    """A graph input (not given as a constant) that the value ``name`` is computed from,
    through values that are not static; or None."""
    producer = {o: n for n in cv.graph.node for o in n.output}
    producer.update(cv.subgraph_producers)
    seen, todo = set(), [name]
    while todo:
        v = todo.pop()
        if v in seen or cv.is_static(v):
            continue
        seen.add(v)
        if v in cv.input_names:
            return v
        if v in producer:
            todo.extend(i for i in producer[v].input if i)
    return None


def _known(cv, name, why) -> np.ndarray:
    """`_static_or_refuse`, flattened."""
    return np.asarray(_static_or_refuse(cv, name, why)).reshape(-1)


def _axis(cv, axis, rank):
    if not -rank <= axis < max(rank, 1):
        raise cv.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


# ---------------------------------------------------------------------------- gathers

def _gather(cv, out, data, indices, axis):
    """np.take(data, indices, axis) with ONNX's negative indices; either may be computed."""
    s = list(cv.shape(data))
    axis = _axis(cv, axis, len(s))
    n = s[axis]
    if cv.is_static(indices) and cv.is_static(data):
        idx = cv.static[indices].astype(np.int64)
        if idx.size and not (-n <= idx.min() and idx.max() < n):
            raise cv.error(f"an index out of range for a dimension of size {n}")
        cv.static[out] = np.take(cv.static[data], np.where(idx < 0, idx + n, idx), axis=axis)
        return
    ishape = list(cv.shape(indices))
    shape = s[:axis] + ishape + s[axis + 1:]
    if n == 0 and int(np.prod(ishape)):
        raise cv.error("indices into a dimension of size 0")
    x = cv.tensor(data)
    o = T.idx(len(shape))
    pre, post = o[:axis], o[axis + len(ishape):]
    if cv.is_static(indices) and not ishape:
        k = int(cv.static[indices])
        k = k + n if k < 0 else k
        if not 0 <= k < n:
            raise cv.error(f"index {k} is out of range for a dimension of size {n}")
        _emit(cv, out, "gather", [("X", x)], shape, x.dtype,
              [f"{T.at('Y', o)} = {T.at('X', pre + [str(k)] + post)}"])
        return
    ind = _index_tensor(cv, indices)
    j = T.idx(len(ishape), "j")
    lines = [f"J: {T.ty(ishape, 'i64')}",
             f"{T.at('J', j)} = {_clamp(_i64(T.at('I', j), ind.dtype), n)}",
             f"{T.at('Y', o)} = {T.at('X', pre + [T.at('J', o[axis:axis + len(ishape)])] + post)}"]
    _emit(cv, out, "gather", [("X", x), ("I", ind)], shape, x.dtype, lines)


@converter("Gather", attrs=("axis",))
def gather(cv, node, a):
    _gather(cv, node.output[0], node.input[0], node.input[1], a.get("axis", 0))


@converter("GatherElements", attrs=("axis",))
def gather_elements(cv, node, a):
    s = list(cv.shape(node.input[0]))
    axis = _axis(cv, a.get("axis", 0), len(s))
    x, ind = cv.tensor(node.input[0]), _index_tensor(cv, node.input[1])
    shape = list(ind.shape)
    if len(shape) != len(s):
        raise cv.error(f"indices of rank {len(shape)} for data of rank {len(s)}")
    o = T.idx(len(shape))
    sub = list(o)
    sub[axis] = T.at("J", o)
    lines = [f"J: {T.ty(shape, 'i64')}",
             f"{T.at('J', o)} = {_clamp(_i64(T.at('I', o), ind.dtype), s[axis])}",
             f"{T.at('Y', o)} = {T.at('X', sub)}"]
    _emit(cv, node.output[0], "gather_elements", [("X", x), ("I", ind)], shape, x.dtype,
          lines)


@converter("GatherND", attrs=("batch_dims",))
def gather_nd(cv, node, a):
    s = list(cv.shape(node.input[0]))
    x, ind = cv.tensor(node.input[0]), _index_tensor(cv, node.input[1])
    b, q, m = a.get("batch_dims", 0), len(ind.shape), ind.shape[-1]
    if not 0 <= b < q or b + m > len(s):
        raise cv.error(f"batch_dims {b} with indices {ind.shape} for data {tuple(s)}")
    shape = list(ind.shape[:-1]) + s[b + m:]
    o = T.idx(len(shape))
    lead = o[:q - 1]
    subs = o[:b] + [_clamp(_i64(T.at("I", lead + [str(k)]), ind.dtype), s[b + k])
                    for k in range(m)] + o[q - 1:]
    _emit(cv, node.output[0], "gather_nd", [("X", x), ("I", ind)], shape, x.dtype,
          [f"{T.at('Y', o)} = {T.at('X', subs)}"])


# ---------------------------------------------------------------------------- scatters
# A scatter is written as a gather over "which update lands here": each output element
# looks at the updates that could land on it and combines those whose index matches it.

def _combine(reduction, dtype, cond, upd, x, red):
    """The output element: ``x`` combined (``reduction``) with every ``upd`` for which
    ``cond`` holds, over the reduction axes ``red``."""
    zero, one = T.lit(0, dtype), T.lit(1, dtype)
    if reduction == "add":
        return f"{x} + sum[{red}](select({cond}, {upd}, {zero}))"
    if reduction == "mul":
        return f"{x} * prod[{red}](select({cond}, {upd}, {one}))"
    f = "max" if reduction == "max" else "min"
    return f"{f}[{red}](select({cond}, {f}({upd}, {x}), {x}))"


def _reduction(cv, a, dtype):
    r = text(a.get("reduction", "none"))
    if r not in ("none", "add", "mul", "max", "min"):
        raise cv.error(f"reduction '{r}' is not supported")
    if r != "none" and dtype == "bool":
        raise cv.error(f"reduction '{r}' on bool tensors")
    return r


@converter("ScatterElements", "Scatter", attrs=("axis", "reduction"))
def scatter_elements(cv, node, a):
    s = list(cv.shape(node.input[0]))
    axis = _axis(cv, a.get("axis", 0), len(s))
    x, ind, u = (cv.tensor(node.input[0]), _index_tensor(cv, node.input[1]),
                 cv.tensor(node.input[2]))
    red = _reduction(cv, a, x.dtype)
    ish = list(ind.shape)
    if len(ish) != len(s) or list(u.shape) != ish or u.dtype != x.dtype:
        raise cv.error(f"indices {tuple(ish)} and updates {u.shape} ({u.dtype}) for data "
                       f"{tuple(s)} ({x.dtype})")
    if int(np.prod(s)) * ish[axis] > _SCATTER_LIMIT:
        raise cv.error(f"{ish[axis]} updates along axis {axis} for each of {int(np.prod(s))} "
                       f"elements are too many for the gather form of a scatter (at most "
                       f"{_SCATTER_LIMIT} pairs)")
    o = T.idx(len(s))
    p = list(o)
    p[axis] = "k"
    inside = " and ".join(f"{o[d]} < {ish[d]}" for d in range(len(s))
                          if d != axis and ish[d] < s[d])
    match = f"{_wrap(_i64(T.at('I', p), ind.dtype), s[axis])} == {o[axis]}"
    xo = T.at("X", o)
    if red == "none":                     # the last update that lands here wins
        last = f"max[k: {ish[axis]}](select({match}, k, -1))"
        pl = list(o)
        pl[axis] = T.at("L", o)
        take = f"select({T.at('L', o)} >= 0, {T.at('U', pl)}, {xo})"
        lines = [f"L: {T.ty(s, 'i64')}",
                 f"{T.at('L', o)} = " + (f"select({inside}, {last}, -1)" if inside else last),
                 f"{T.at('Y', o)} = " + (f"select({inside}, {take}, {xo})" if inside
                                         else take)]
    else:
        body = _combine(red, x.dtype, match, T.at("U", p), xo, f"k: {ish[axis]}")
        lines = [f"{T.at('Y', o)} = " + (f"select({inside}, {body}, {xo})" if inside
                                         else body)]
    _emit(cv, node.output[0], "scatter_elements", [("X", x), ("I", ind), ("U", u)], s,
          x.dtype, lines)


@converter("ScatterND", attrs=("reduction",))
def scatter_nd(cv, node, a):
    s = list(cv.shape(node.input[0]))
    ish, ush = list(cv.shape(node.input[1])), list(cv.shape(node.input[2]))
    m = ish[-1] if ish else 0
    if not ish or not 1 <= m <= len(s) or ush != ish[:-1] + s[m:]:
        raise cv.error(f"indices {tuple(ish)} and updates {tuple(ush)} for data {tuple(s)}")
    q = int(np.prod(ish[:-1]))
    out = node.output[0]
    cv.reshape(out + "#indices", node.input[1], (q, m))
    cv.reshape(out + "#updates", node.input[2], [q] + s[m:])
    x, ind, u = (cv.tensor(node.input[0]), _index_tensor(cv, out + "#indices"),
                 cv.tensor(out + "#updates"))
    red = _reduction(cv, a, x.dtype)
    if u.dtype != x.dtype:
        raise cv.error(f"updates of dtype {u.dtype} for data of dtype {x.dtype}")
    work = q * int(np.prod(s[:m] if red == "none" else s))
    if work > _SCATTER_LIMIT:
        raise cv.error(f"{q} updates over {int(np.prod(s))} elements are too many for the "
                       f"gather form of a scatter (at most {_SCATTER_LIMIT} pairs)")
    o = T.idx(len(s))
    match = " and ".join(f"{_wrap(_i64(f'I[k, {j}]', ind.dtype), s[j])} == {o[j]}"
                         for j in range(m))
    xo = T.at("X", o)
    if red == "none":                     # the last update that lands here wins
        lo = T.at("L", o[:m])
        lines = [f"L: {T.ty(s[:m], 'i64')}",
                 f"{lo} = max[k: {q}](select({match}, k, -1))",
                 f"{T.at('Y', o)} = select({lo} >= 0, {T.at('U', [lo] + o[m:])}, {xo})"]
    else:
        lines = [f"{T.at('Y', o)} = " +
                 _combine(red, x.dtype, match, T.at("U", ["k"] + o[m:]), xo, f"k: {q}")]
    _emit(cv, out, "scatter_nd", [("X", x), ("I", ind), ("U", u)], s, x.dtype, lines)


# ---------------------------------------------------------------------------- layout

@converter("Expand")
def expand(cv, node, a):
    x = node.input[0]
    target = [int(v) for v in _known(cv, node.input[1], _SHAPE)]
    shape = list(np.broadcast_shapes(tuple(cv.shape(x)), tuple(target)))
    if cv.is_static(x):
        cv.static[node.output[0]] = np.array(np.broadcast_to(cv.static[x], shape))
        return
    t = cv.tensor(x)
    if list(t.shape) == shape:
        cv.alias(node.output[0], x)
        return
    cv.call(node.output[0], cv.op("expand", T.elementwise([t], shape, "{0}", t.dtype)), [t],
            tuple(shape), dtype=t.dtype)


@converter("Tile")
def tile(cv, node, a):
    x = node.input[0]
    reps = [int(v) for v in _known(cv, node.input[1], "the repeats decide the output shape")]
    s = list(cv.shape(x))
    if len(reps) != len(s):
        raise cv.error(f"{len(reps)} repeats for rank {len(s)}")
    if cv.is_static(x):
        cv.static[node.output[0]] = np.tile(cv.static[x], reps)
        return
    t = cv.tensor(x)
    shape = [n * r for n, r in zip(s, reps)]
    o = T.idx(len(s))
    subs = [o[k] if r == 1 else "0" if s[k] == 1 else f"{o[k]} % {s[k]}"
            for k, r in enumerate(reps)]
    _emit(cv, node.output[0], "tile", [("X", t)], shape, t.dtype,
          [f"{T.at('Y', o)} = {T.at('X', subs)}"])


def _slice_axis(cv, out, x, axis, start, length):
    s = list(cv.shape(x))
    if cv.is_static(x):
        cv.static[out] = np.take(cv.static[x], range(start, start + length), axis=axis)
        return
    t = cv.tensor(x)
    if length == s[axis]:
        cv.alias(out, x)
        return
    first, shape = [0] * len(s), list(s)
    first[axis], shape[axis] = start, length
    cv.call(out, cv.op("slice", T.slice_(s, first, [1] * len(s), shape, t.dtype)), [t],
            tuple(shape), dtype=t.dtype)


@converter("Split", attrs=("axis", "split", "num_outputs"))
def split(cv, node, a):
    x = node.input[0]
    s = list(cv.shape(x))
    axis = _axis(cv, a.get("axis", 0), len(s))
    n, k = s[axis], len(node.output)
    if _opt(node, 1):
        parts = [int(v) for v in _known(cv, node.input[1], "it decides the outputs' shapes")]
    elif "split" in a:
        parts = [int(v) for v in a["split"]]
    elif "num_outputs" in a:
        chunk = -(-n // a["num_outputs"])
        parts = [min(chunk, max(n - chunk * j, 0)) for j in range(a["num_outputs"])]
    else:
        if n % k:
            raise cv.error(f"a dimension of {n} can't be split into {k} equal parts")
        parts = [n // k] * k
    if len(parts) != k or sum(parts) != n or min(parts) < 0:
        raise cv.error(f"split {parts} of a dimension of {n} into {k} outputs")
    start = 0
    for name, length in zip(node.output, parts):
        if name:
            _slice_axis(cv, name, x, axis, start, length)
        start += length


@converter("DepthToSpace", "SpaceToDepth", attrs=("blocksize", "mode"))
def depth_to_space(cv, node, a):
    t = cv.tensor(node.input[0])
    b = int(a["blocksize"])
    if len(t.shape) != 4:
        raise cv.error(f"an input of rank {len(t.shape)} (NCHW is supported)")
    n, c, h, w = t.shape
    if node.op_type == "DepthToSpace":
        if c % (b * b):
            raise cv.error(f"{c} channels are not a multiple of blocksize² ({b * b})")
        c2 = c // (b * b)
        shape = [n, c2, h * b, w * b]
        off = f"(y % {b}) * {b} + x % {b}"
        ch = f"({off}) * {c2} + c" if text(a.get("mode", "DCR")) == "DCR" else \
            f"c * {b * b} + {off}"
        src = f"X[n, {ch}, y // {b}, x // {b}]"
    else:
        if h % b or w % b:
            raise cv.error(f"spatial size {h}x{w} is not a multiple of blocksize {b}")
        shape = [n, c * b * b, h // b, w // b]
        if text(a.get("mode", "DCR")) == "DCR":
            src = f"X[n, c % {c}, y * {b} + c // {c} // {b}, x * {b} + c // {c} % {b}]"
        else:
            src = f"X[n, c // {b * b}, y * {b} + c % {b * b} // {b}, x * {b} + c % {b}]"
    _emit(cv, node.output[0], node.op_type.lower(), [("X", t)], shape, t.dtype,
          [f"Y[n, c, y, x] = {src}"])


@converter("Trilu", attrs=("upper",))
def trilu(cv, node, a):
    k = node.input[1] if _opt(node, 1) else None
    if cv.is_static(node.input[0]) and (k is None or cv.is_static(k)):
        # a constant (a causal mask's tril of ones): folded now, so the attention that
        # reads it is recognised with its mask as a constant
        x = cv.static[node.input[0]]
        if x.ndim < 2:
            raise cv.error(f"an input of rank {x.ndim} (rank 2 or more is needed)")
        kk = int(cv.static[k].reshape(())) if k else 0
        cv.static[node.output[0]] = (np.triu if a.get("upper", 1) else np.tril)(x, kk)
        return
    t = cv.tensor(node.input[0])
    if len(t.shape) < 2:
        raise cv.error(f"an input of rank {len(t.shape)} (rank 2 or more is needed)")
    ins = [("X", t)]
    k = node.input[1] if _opt(node, 1) else None
    if k is None or cv.is_static(k):
        k = int(cv.static[k].reshape(())) if k else 0
    else:                                       # a diagonal computed by the graph
        kt = _index_tensor(cv, k)
        if kt.shape not in ((), (1,)):
            raise cv.error(f"k of shape {kt.shape} (a scalar is expected)")
        ins.append(("K", kt))
        k = _i64(T.at("K", ["0"] if kt.shape else []), kt.dtype)
    o = T.idx(len(t.shape))
    cond = f"{o[-1]} - {o[-2]} {'>=' if a.get('upper', 1) else '<='} {k}"
    _emit(cv, node.output[0], "trilu", ins, t.shape, t.dtype,
          [f"{T.at('Y', o)} = select({cond}, {T.at('X', o)}, {T.lit(0, t.dtype)})"])


@converter("OneHot", attrs=("axis",))
def one_hot(cv, node, a):
    depth = int(_known(cv, node.input[1], "the depth decides the output shape")[0])
    ind = cv.tensor(node.input[0])
    rank = len(ind.shape) + 1
    axis = _axis(cv, a.get("axis", -1), rank)
    shape = list(ind.shape[:axis]) + [depth] + list(ind.shape[axis:])
    o = T.idx(rank)
    ins = [("I", ind)]
    vals = node.input[2]
    if cv.is_static(vals):
        v = cv.static[vals].reshape(-1)
        dtype = cv.dtype(vals)
        off, on = T.lit(v[0].item(), dtype), T.lit(v[1].item(), dtype)
    else:
        vt = cv.tensor(vals)
        dtype, off, on = vt.dtype, "V[0]", "V[1]"
        ins.append(("V", vt))
    i = T.at("I", o[:axis] + o[axis + 1:])
    v = i if ind.dtype == "i64" else f"i64({i})"
    _emit(cv, node.output[0], "one_hot", ins, shape, dtype,
          [f"{T.at('Y', o)} = select({_wrap(v, depth)} == {o[axis]}, {on}, {off})"])


@converter("ReverseSequence", attrs=("batch_axis", "time_axis"))
def reverse_sequence(cv, node, a):
    t = cv.tensor(node.input[0])
    lens = _index_tensor(cv, node.input[1])
    r = len(t.shape)
    bax, tax = _axis(cv, a.get("batch_axis", 1), r), _axis(cv, a.get("time_axis", 0), r)
    o = T.idx(r)
    ln = _i64(f"L[{o[bax]}]", lens.dtype)
    sub = list(o)
    sub[tax] = f"min(max({ln} - 1 - {o[tax]}, 0), {t.shape[tax] - 1})"
    xo = T.at("X", o)
    _emit(cv, node.output[0], "reverse_sequence", [("X", t), ("L", lens)], t.shape, t.dtype,
          [f"{T.at('Y', o)} = select({o[tax]} < {ln}, {T.at('X', sub)}, {xo})"])


@converter("Pad", attrs=("mode", "pads", "value"))
def pad(cv, node, a):
    mode = text(a.get("mode", "constant"))
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise cv.error(f"Pad mode '{mode}' (constant, reflect, edge and wrap are supported)")
    x = node.input[0]
    s = list(cv.shape(x))
    pads = a["pads"] if "pads" in a else \
        _known(cv, node.input[1], "the pads decide the output shape").tolist()
    value, vt = a.get("value", 0.0), None
    if _opt(node, 2) and cv.is_static(node.input[2]):
        value = cv.static[node.input[2]].reshape(-1)[0].item()
    elif _opt(node, 2):                         # a padding value computed by the graph
        vt = cv.tensor(node.input[2])
        if vt.shape not in ((), (1,)):
            raise cv.error(f"a padding value of shape {vt.shape} (a scalar is expected)")
    axes = list(range(len(s)))
    if _opt(node, 3):
        axes = [_axis(cv, int(k), len(s))
                for k in _known(cv, node.input[3], "the axes decide the output shape")]
    if len(pads) != 2 * len(axes):
        raise cv.error(f"{len(pads)} pads for {len(axes)} axes")
    begins, ends = [0] * len(s), [0] * len(s)
    for j, ax in enumerate(axes):
        begins[ax], ends[ax] = int(pads[j]), int(pads[j + len(axes)])
    shape = [n + b + e for n, b, e in zip(s, begins, ends)]
    t = cv.tensor(x)
    if mode == "constant" and vt is None:
        cv.call(node.output[0], cv.op("pad", T.pad(s, begins, ends, value, t.dtype)), [t],
                tuple(shape), dtype=t.dtype)
        return
    if mode == "constant":
        if vt.dtype != t.dtype:
            raise cv.error(f"a padding value of dtype {vt.dtype} for data of {t.dtype}")
        o = T.idx(len(s))
        conds, subs = [], []
        for k, (n, b) in enumerate(zip(s, begins)):
            subs.append(o[k] if b == 0 else f"{o[k]} - {b}" if b > 0 else f"{o[k]} + {-b}")
            if b > 0:
                conds.append(f"{o[k]} >= {b}")
            if n + b < shape[k]:
                conds.append(f"{subs[-1]} < {n}")
        v = T.at("V", ["0"] if vt.shape else [])
        body = f"select({' and '.join(conds)}, {T.at('X', subs)}, {v})" if conds else \
            T.at("X", subs)
        _emit(cv, node.output[0], "pad_value", [("X", t), ("V", vt)], shape, t.dtype,
              [f"{T.at('Y', o)} = {body}"])
        return
    if min(begins + ends) < 0:
        raise cv.error(f"negative pads with mode '{mode}' (only with 'constant')")
    o = T.idx(len(s))
    subs = []
    for k, (n, b, e) in enumerate(zip(s, begins, ends)):
        p = o[k] if b == 0 else f"{o[k]} - {b}"
        if b == 0 and e == 0:
            subs.append(p)
        elif mode == "edge" or n == 1:
            subs.append(f"min(max({p}, 0), {n - 1})")
        elif mode == "wrap":
            subs.append(f"({p}) % {n}")
        else:                                # reflect: period 2n - 2, mirrored
            m = f"(({p}) % {2 * n - 2})"
            subs.append(f"{n - 1} - abs({m} - {n - 1})")
    _emit(cv, node.output[0], f"pad_{mode}", [("X", t)], shape, t.dtype,
          [f"{T.at('Y', o)} = {T.at('X', subs)}"])


@converter("CenterCropPad", attrs=("axes",))
def center_crop_pad(cv, node, a):
    t = cv.tensor(node.input[0])
    s = list(t.shape)
    target = [int(v) for v in _known(cv, node.input[1], _SHAPE)]
    axes = [_axis(cv, k, len(s)) for k in a.get("axes", range(len(s)))]
    if len(target) != len(axes):
        raise cv.error(f"a shape of {len(target)} values for {len(axes)} axes")
    begins, ends = [0] * len(s), [0] * len(s)
    for ax, n in zip(axes, target):
        d = abs(n - s[ax])
        lo, hi = d // 2, d - d // 2
        begins[ax], ends[ax] = (lo, hi) if n > s[ax] else (-lo, -hi)
    shape = [n + b + e for n, b, e in zip(s, begins, ends)]
    cv.call(node.output[0], cv.op("pad", T.pad(s, begins, ends, 0, t.dtype)), [t],
            tuple(shape), dtype=t.dtype)


# ---------------------------------------------------------------------------- static values

@converter("Size")
def size(cv, node, a):
    cv.static[node.output[0]] = np.array(int(np.prod(cv.shape(node.input[0]))), np.int64)


@converter("EyeLike", attrs=("dtype", "k"))
def eye_like(cv, node, a):
    from onnx import helper
    s = cv.shape(node.input[0])
    if len(s) != 2:
        raise cv.error(f"an input of rank {len(s)} (EyeLike is 2-D)")
    if "dtype" in a:
        try:
            np_dtype = helper.tensor_dtype_to_np_dtype(a["dtype"])
        except (KeyError, ValueError):
            raise cv.error(f"ONNX type {a['dtype']}") from None
        dtype = tdsl_dtype(np_dtype, f"EyeLike's dtype ({np.dtype(np_dtype)})")
    else:
        dtype = cv.dtype(node.input[0])
    cv.static[node.output[0]] = np.eye(s[0], s[1], a.get("k", 0), dtype=to_numpy(dtype))


@converter("Range")
def range_(cv, node, a):
    why = "Range's output shape depends on its values"
    start, limit, delta = (_static_or_refuse(cv, n, why) for n in node.input[:3])
    dt = start.dtype
    st, li, de = (np.asarray(v).reshape(()).item() for v in (start, limit, delta))
    if de == 0:
        raise cv.error("a Range with delta 0")
    cv.static[node.output[0]] = np.arange(st, li, de).astype(dt)


@converter("Compress", attrs=("axis",))
def compress(cv, node, a):
    cond = _static_or_refuse(cv, node.input[1],
                             "Compress's output shape depends on the condition's values")
    keep = np.nonzero(np.asarray(cond).reshape(-1))[0].astype(np.int64)
    x, out = node.input[0], node.output[0]
    if "axis" not in a:
        cv.reshape(out + "#flat", x, (int(np.prod(cv.shape(x))),))
        x, axis = out + "#flat", 0
    else:
        axis = a["axis"]
    n = cv.shape(x)[_axis(cv, axis, len(cv.shape(x)))]
    keep = keep[keep < n]
    cv.static[out + "#keep"] = keep
    _gather(cv, out, x, out + "#keep", axis)


@converter("NonZero")
def non_zero(cv, node, a):
    x = _static_or_refuse(cv, node.input[0],
                          "NonZero's output shape depends on the input's values")
    if x.ndim == 0:
        raise cv.error("NonZero of a scalar")
    cv.static[node.output[0]] = np.array(np.nonzero(x), np.int64).reshape(x.ndim, -1)


@converter("Unique", attrs=("axis", "sorted"))
def unique(cv, node, a):
    x = _static_or_refuse(cv, node.input[0],
                          "Unique's output shape depends on the input's values")
    kw = {"axis": a["axis"]} if "axis" in a else {}
    y, index, inverse, counts = np.unique(x, True, True, True, **kw)
    if not a.get("sorted", 1):
        order = np.argsort(index)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        index, counts = index[order], counts[order]
        y = np.take(x if kw else x.reshape(-1), index, axis=kw.get("axis", 0))
        inverse = rank[np.asarray(inverse).reshape(-1)]
    results = [y, np.asarray(index, np.int64), np.asarray(inverse, np.int64).reshape(-1),
               np.asarray(counts, np.int64)]
    for name, v in zip(node.output, results):
        if name:
            cv.static[name] = v


# ---------------------------------------------------------------------------- TensorScatter, BitCast

@converter("TensorScatter", attrs=("axis", "mode"))
def tensor_scatter(cv, node, a):
    """The update written into the cache along ``axis`` from each batch's write index
    (mode linear, or circular: modulo the cache's length); the rest copied."""
    mode = text(a.get("mode", "linear"))
    if mode not in ("linear", "circular"):
        raise cv.error(f"mode '{mode}' (linear or circular)")
    past, upd = cv.tensor(node.input[0]), cv.tensor(node.input[1])
    r = len(past.shape)
    axis = _axis(cv, int(a.get("axis", -2)), r) % r
    if axis == 0:
        raise cv.error("axis 0 (the batch axis the write indices are per)")
    if len(upd.shape) != r or upd.dtype != past.dtype or \
            any(u != p for k, (u, p) in enumerate(zip(upd.shape, past.shape)) if k != axis) \
            or upd.shape[axis] > past.shape[axis]:
        raise cv.error(f"an update {upd.type} for a cache {past.type}")
    m, u = past.shape[axis], upd.shape[axis]
    i = T.idx(r)
    ins = [("P", past), ("U", upd)]
    w = _opt(node, 2)
    if w is None:
        start = "0"
    else:
        wt = _index_tensor(cv, w)
        if wt.shape != (past.shape[0],):
            raise cv.error(f"write_indices of shape {list(wt.shape)} (one per batch)")
        ins.append(("W", wt))
        start = _i64(f"W[{i[0]}]", wt.dtype)
    d = f"{i[axis]} - {start}"
    if mode == "circular":
        d = f"({i[axis]} - {start} % {m} + {m}) % {m}"
    sub = list(i)
    sub[axis] = f"min(max(D, 0), {u - 1})"
    lines = [f"{T.at('Y', i)} = select({d} >= 0 and {d} < {u}, "
             f"{T.at('U', [s.replace('D', d) for s in sub])}, {T.at('P', i)})"]
    _emit(cv, node.output[0], "tensor_scatter", ins, past.shape, past.dtype, lines)


@converter("BitCast", attrs=("to",))
def bit_cast(cv, node, a):
    """A reinterpretation of the bits between integer types of one width (a wrapping
    cast: two's complement) and from bool to a byte; between floats and integers tdsl has
    no reinterpretation of bits, so it is refused."""
    from onnx import helper
    x = node.input[0]
    try:
        to = np.dtype(helper.tensor_dtype_to_np_dtype(a["to"]))
    except (KeyError, ValueError, TypeError):
        raise cv.error(f"a bit cast to ONNX type {a.get('to')}") from None
    src = np.dtype(to_numpy(cv.dtype(x)))
    if src.itemsize != to.itemsize:
        raise cv.error(f"a bit cast from {src} to {to} (their widths differ)")
    if cv.is_static(x):
        cv.static[node.output[0]] = np.ascontiguousarray(cv.static[x]).view(to)
        return
    ok = (src.kind in "iu" and to.kind in "iu") or (src.kind == "b" and to.kind in "iu")
    if not ok:
        raise cv.error(f"a bit cast from {src} to {to}: tdsl has no reinterpretation of "
                       f"bits between floats and integers (or to bool)")
    dtype = tdsl_dtype(to, "the bit cast's target type")
    if dtype == cv.dtype(x):
        cv.alias(node.output[0], x)
        return
    cv.elementwise(node.output[0], [x], f"{dtype}({{0}})", f"bitcast_{dtype}", dtype)
