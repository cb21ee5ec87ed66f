"""Converters of the reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare,
ArgMax/ArgMin, CumSum/CumProd, TopK, Hardmax.

Each node becomes an op written for its shapes: a reduction is one ``sum``/``max``/``min``/
``prod`` over every reduced axis at once (a zero-size reduced axis gives the combiner's
identity, as ONNX's empty-set cases want); ArgMax/ArgMin and Hardmax find the maximum first,
then the first (or last) index that holds it; CumSum/CumProd are a masked reduction along
the axis; TopK ranks every element of a row (the count of the elements that come before it:
greater, or equal at a lower index) and gathers the element of each rank -- O(N^2) per row,
no data-dependent control flow.
"""
from __future__ import annotations

import numpy as np

from . import templates as T
from .registry import converter, opt as _opt

_FLOAT = ("f32", "f64")
_INT = ("i64", "i32", "i16", "i8", "u8")


def _head(params, outs) -> str:
    """``op {name}(A: ..., B: ...) -> Y: ...`` (several outputs in parentheses)."""
    out = ", ".join(outs)
    return f"op {{name}}({', '.join(params)}) -> {out if len(outs) == 1 else f'({out})'} {{\n"


def _lhs(name: str, subs) -> str:
    return T.at(name, subs)


def _float_lit(v: float) -> str:
    return T.lit(v, "f64")


# ---------------------------------------------------------------------------- Reduce*

_REDUCE_KIND = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max",
                "ReduceMin": "min", "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2",
                "ReduceLogSum": "logsum", "ReduceLogSumExp": "logsumexp",
                "ReduceSumSquare": "sumsquare"}


def reduce_text(shape, dtype: str, axes, keepdims: bool, kind: str) -> str:
    """``Y = REDUCE(X)`` over ``axes`` of ``X: dtype[shape]``, the result of ``dtype``.

    The reduced axes are the ranges of one reduction; none (``noop_with_empty_axes``)
    leaves the elementwise part (``ReduceL2`` is then ``sqrt(x * x)``, as ONNX's
    reference)."""
    rank = len(shape)
    i = T.idx(rank)
    out_shape, out_idx, subs, ranges = [], [], [], []
    for k, n in enumerate(shape):
        if k in axes:
            subs.append(f"r{k}")
            ranges.append(f"r{k}: {n}")
            if keepdims:
                out_shape.append(1)
                out_idx.append(i[k])
        else:
            subs.append(i[k])
            out_shape.append(n)
            out_idx.append(i[k])
    x = T.at("X", subs)
    count = int(np.prod([shape[k] for k in axes])) if axes else 1
    is_float = dtype in _FLOAT
    bracket = ", ".join(ranges)

    def red(comb, body):
        return f"{comb}[{bracket}]({body})" if ranges else body

    def via_f64(expr):
        """``expr`` of an f64 value (an integer result is computed in f64, then cast)."""
        return expr if is_float else f"{dtype}({expr})"

    def as_float(v):
        return v if is_float else f"f64({v})"

    head = _head([f"X: {T.ty(shape, dtype)}"], [f"Y: {T.ty(out_shape, dtype)}"])
    y = _lhs("Y", out_idx)
    stages = ""
    if kind == "sum":
        body = red("sum", x)
    elif kind == "sumsquare":
        body = red("sum", f"{x} * {x}")
    elif kind == "l1":
        body = red("sum", f"abs({x})")
    elif kind == "l2":
        body = via_f64(f"sqrt({as_float(red('sum', f'{x} * {x}'))})")
    elif kind == "logsum":
        body = via_f64(f"log({as_float(red('sum', x))})")
    elif kind == "mean":
        s = red("sum", x)
        body = f"{s} / {_float_lit(count)}" if is_float else \
            f"{dtype}(f64({s}) / {_float_lit(count)})"
    elif kind == "prod":
        body = red("prod", x)
    elif kind in ("max", "min"):
        if dtype == "bool":             # on bools: the max (min) of their 0/1 bytes
            body = f"{red(kind, f'select({x}, u8(1), u8(0))')} != u8(0)"
        else:
            body = red(kind, x)
    elif kind == "logsumexp":
        # ONNX's reference: the maximum of the finite elements (an infinity counts as
        # -inf) is subtracted first, log(sum(exp(x - m))) + m
        m = T.at("M", out_idx)
        stages = (f"    M: {T.ty(out_shape, dtype)}\n"
                  f"    {m} = {red('max', f'select(abs({x}) == inf, -inf, {x})')}\n")
        body = f"log({red('sum', f'exp({x} - {m})')}) + {m}"
    else:                                # pragma: no cover - the table above is closed
        raise AssertionError(kind)
    return head + stages + f"    {y} = {body}\n}}\n"


def _reduce_axes(cv, node, a, rank):
    """The reduced axes (normalised, sorted), or None for a no-op (empty axes with
    ``noop_with_empty_axes``)."""
    axes = a.get("axes")
    if _opt(node, 1):
        if axes is not None:
            raise cv.error("axes given both as an attribute and as an input")
        axes = cv.value(node.input[1]).reshape(-1).astype(np.int64).tolist()
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None:
        return None if a.get("noop_with_empty_axes", 0) else list(range(rank))
    out = []
    for v in axes:
        v = int(v)
        if not -rank <= v < max(rank, 1):
            raise cv.error(f"axis {v} is out of range for a tensor of rank {rank}")
        out.append(v % rank if rank else 0)
    return sorted(set(out))


def _reduce_static(v: np.ndarray, axes, keepdims: bool, kind: str) -> np.ndarray:
    """The reduction of a value known now (shape arithmetic: ReduceProd of a Shape), as
    ONNX's reference computes it, in ``v``'s dtype."""
    ax = tuple(axes)
    with np.errstate(all="ignore"):
        if kind in ("max", "min"):
            if v.size == 0 or v.dtype == np.bool_:
                f = np.logical_or if kind == "max" else np.logical_and
                if v.dtype != np.bool_:
                    f = np.maximum if kind == "max" else np.minimum
                    info = np.iinfo(v.dtype) if v.dtype.kind in "iu" else None
                    init = (info.min if kind == "max" else info.max) if info else \
                        (-np.inf if kind == "max" else np.inf)
                else:
                    init = kind == "min"
                return f.reduce(v, axis=ax, keepdims=keepdims, initial=init).astype(v.dtype)
            f = np.maximum if kind == "max" else np.minimum
            return f.reduce(v, axis=ax, keepdims=keepdims)
        if kind == "logsumexp":
            m = np.where(np.isinf(v), -np.inf, v).max(axis=ax, keepdims=True, initial=-np.inf)
            r = np.log(np.sum(np.exp(v - m), axis=ax, keepdims=True)) + m
            return (r if keepdims else np.squeeze(r, axis=ax)).astype(v.dtype)
        body = {"sumsquare": v * v, "l1": np.abs(v), "l2": v.astype(np.float64) ** 2}.get(
            kind, v)
        r = (np.prod(body, axis=ax, keepdims=keepdims, dtype=v.dtype) if kind == "prod" else
             np.sum(body, axis=ax, keepdims=keepdims,
                    dtype=np.float64 if kind in ("l2", "mean", "logsum") else v.dtype))
        if kind == "mean":
            r = r / int(np.prod([v.shape[k] for k in ax])) if ax else r
        elif kind == "l2":
            r = np.sqrt(r)
        elif kind == "logsum":
            r = np.log(r)
        return np.asarray(r).astype(v.dtype)


@converter(*_REDUCE_KIND, attrs=("axes", "keepdims", "noop_with_empty_axes"))
def reduce(cv, node, a):
    kind = _REDUCE_KIND[node.op_type]
    rank = len(cv.shape(node.input[0]))
    axes = _reduce_axes(cv, node, a, rank)
    if cv.is_static(node.input[0]):
        cv.static[node.output[0]] = _reduce_static(
            cv.static[node.input[0]], axes if axes is not None else [],
            bool(a.get("keepdims", 1)), kind)
        return
    x = cv.tensor(node.input[0])
    if x.dtype == "bool" and kind not in ("max", "min"):
        raise cv.error(f"{node.op_type} of a bool tensor")
    if x.dtype not in _FLOAT and kind == "logsumexp":
        raise cv.error(f"{node.op_type} of an integer tensor ({x.dtype}); ONNX defines it "
                       f"on floats only")
    keepdims = bool(a.get("keepdims", 1))
    if axes is None:
        axes = []                       # noop_with_empty_axes: the elementwise part only
        if kind in ("sum", "mean", "max", "min", "prod"):
            cv.alias(node.output[0], node.input[0])
            return
    shape = tuple(1 if k in axes else n for k, n in enumerate(x.shape) if keepdims or
                  k not in axes)
    lead = axes[0] if axes else 0
    if x.dtype == "f32" and kind in ("sum", "max", "mean") and lead >= 1 and \
            axes == list(range(lead, rank)) and all(x.shape):
        # trailing axes of an f32 tensor: std's reduce_sum/max/mean over the rows of its
        # 2-D view (reshapes are views of the same row-major elements)
        rows = (int(np.prod(x.shape[:lead])), int(np.prod(x.shape[lead:])))
        mid = node.output[0] + "#rows"
        cv.reshape(mid, node.input[0], rows)
        if shape == rows[:1]:
            cv.call(node.output[0], f"reduce_{kind}", [cv.tensor(mid)], shape)
            return
        cv.call(mid + "#red", f"reduce_{kind}", [cv.tensor(mid)], rows[:1])
        cv.reshape(node.output[0], mid + "#red", shape)
        return
    text = reduce_text(list(x.shape), x.dtype, axes, keepdims, kind)
    cv.call(node.output[0], cv.op(f"reduce_{kind}", text), [x], shape, dtype=x.dtype)


# ---------------------------------------------------------------------------- ArgMax/ArgMin

def _axis(cv, v, rank):
    v = int(v)
    if not -rank <= v < rank:
        raise cv.error(f"axis {v} is out of range for a tensor of rank {rank}")
    return v % rank


def _is_extreme(x: str, m: str, dtype: str) -> str:
    """``x`` is the extreme ``m`` of its row; on floats a NaN is (numpy's argmax and
    argmin, which ONNX's reference calls, answer the first NaN; max and min propagate it)."""
    if dtype in _FLOAT:
        return f"{x} == {m} or {m} != {m} and {x} != {x}"
    return f"{x} == {m}"


def arg_text(shape, dtype: str, axis: int, keepdims: bool, kind: str, last: bool) -> str:
    """The index (i64) of the first (``last``: the last) maximum (``kind='min'``: minimum)
    along ``axis``."""
    i = T.idx(len(shape))
    n = shape[axis]
    out_shape = [1 if k == axis else s for k, s in enumerate(shape) if keepdims or k != axis]
    out_idx = [v for k, v in enumerate(i) if keepdims or k != axis]
    red_idx = [v for k, v in enumerate(i) if k != axis]
    red_shape = [s for k, s in enumerate(shape) if k != axis]
    subs = list(i)
    subs[axis] = "r"
    x = T.at("X", subs)
    m = T.at("M", red_idx)
    hit = _is_extreme(x, m, dtype)
    pick = f"max[r: {n}](select({hit}, r, -1))" if last else \
        f"min[r: {n}](select({hit}, r, {n}))"
    return (_head([f"X: {T.ty(shape, dtype)}"], [f"Y: {T.ty(out_shape, 'i64')}"])
            + f"    M: {T.ty(red_shape, dtype)}\n"
            f"    {m} = {kind}[r: {n}]({x})\n"
            f"    {_lhs('Y', out_idx)} = {pick}\n}}\n")


@converter("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def argmax(cv, node, a):
    x = cv.tensor(node.input[0])
    if x.dtype == "bool":
        raise cv.error(f"{node.op_type} of a bool tensor")
    rank = len(x.shape)
    if rank == 0:
        raise cv.error(f"{node.op_type} of a scalar")
    axis = _axis(cv, a.get("axis", 0), rank)
    if x.shape[axis] == 0:
        raise cv.error(f"{node.op_type} along an axis of size 0 (it has no answer)")
    keepdims = bool(a.get("keepdims", 1))
    kind = "max" if node.op_type == "ArgMax" else "min"
    text = arg_text(list(x.shape), x.dtype, axis, keepdims, kind,
                    bool(a.get("select_last_index", 0)))
    shape = tuple(1 if k == axis else s for k, s in enumerate(x.shape)
                  if keepdims or k != axis)
    cv.call(node.output[0], cv.op(f"arg{kind}", text), [x], shape, dtype="i64")


# ---------------------------------------------------------------------------- Hardmax

def hardmax_text(shape, dtype: str, axis: int) -> str:
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    i = T.idx(len(shape))
    n = shape[axis]
    red_idx = [v for k, v in enumerate(i) if k != axis]
    red_shape = [s for k, s in enumerate(shape) if k != axis]
    subs = list(i)
    subs[axis] = "r"
    x = T.at("X", subs)
    m, j = T.at("M", red_idx), T.at("J", red_idx)
    return (_head([f"X: {T.ty(shape, dtype)}"], [f"Y: {T.ty(shape, dtype)}"])
            + f"    M: {T.ty(red_shape, dtype)}\n"
            f"    {m} = max[r: {n}]({x})\n"
            f"    J: {T.ty(red_shape, 'i64')}\n"
            f"    {j} = min[r: {n}](select({_is_extreme(x, m, dtype)}, r, {n}))\n"
            f"    {_lhs('Y', i)} = select({i[axis]} == {j}, 1, 0)\n}}\n")


@converter("Hardmax", attrs=("axis",))
def hardmax(cv, node, a):
    x = cv.tensor(node.input[0])
    if x.dtype not in _FLOAT:
        raise cv.error(f"Hardmax of a {x.dtype} tensor (ONNX defines it on floats)")
    rank = len(x.shape)
    if rank == 0:
        raise cv.error("Hardmax of a scalar")
    axis = _axis(cv, a.get("axis", 1 if cv.opset < 13 else -1), rank)
    if int(np.prod(x.shape)) == 0:
        cv.alias(node.output[0], node.input[0])
        return
    if cv.opset < 13 and axis != rank - 1:
        # before opset 13: the input flattened to 2-D at axis, one hardmax per row
        rows = (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))
        mid = node.output[0] + "#2d"
        cv.reshape(mid, node.input[0], rows)
        cv.call(mid + "#hm", cv.op("hardmax", hardmax_text(list(rows), x.dtype, 1)),
                [cv.tensors[mid]], rows, dtype=x.dtype)
        cv.reshape(node.output[0], mid + "#hm", x.shape)
        return
    cv.call(node.output[0], cv.op("hardmax", hardmax_text(list(x.shape), x.dtype, axis)),
            [x], x.shape, dtype=x.dtype)


# ---------------------------------------------------------------------------- CumSum/CumProd

def cumulative_text(shape, dtype: str, axis: int, exclusive: bool, reverse: bool,
                    kind: str) -> str:
    """The running sum (``kind='prod'``: product) along ``axis``: a reduction over the
    whole axis of the elements before (``reverse``: after) each, itself included unless
    ``exclusive``."""
    i = T.idx(len(shape))
    subs = list(i)
    subs[axis] = "r"
    x = T.at("X", subs)
    op = (">" if exclusive else ">=") if reverse else ("<" if exclusive else "<=")
    neutral = "1" if kind == "prod" else "0"
    body = f"{kind}[r: {shape[axis]}](select(r {op} {i[axis]}, {x}, {neutral}))"
    return (_head([f"X: {T.ty(shape, dtype)}"], [f"Y: {T.ty(shape, dtype)}"])
            + f"    {_lhs('Y', i)} = {body}\n}}\n")


@converter("CumSum", "CumProd", attrs=("exclusive", "reverse"))
def cumulative(cv, node, a):
    x = cv.tensor(node.input[0])
    if x.dtype == "bool":
        raise cv.error(f"{node.op_type} of a bool tensor")
    rank = len(x.shape)
    if rank == 0:
        raise cv.error(f"{node.op_type} of a scalar")
    axis_v = cv.value(node.input[1]).reshape(-1)
    if axis_v.size != 1:
        raise cv.error(f"the axis input has {axis_v.size} values, expected one")
    axis = _axis(cv, axis_v[0], rank)
    kind = "prod" if node.op_type == "CumProd" else "sum"
    text = cumulative_text(list(x.shape), x.dtype, axis, bool(a.get("exclusive", 0)),
                           bool(a.get("reverse", 0)), kind)
    cv.call(node.output[0], cv.op(f"cum{kind}", text), [x], x.shape, dtype=x.dtype)


# ---------------------------------------------------------------------------- TopK

def topk_text(shape, dtype: str, axis: int, k: int, largest: bool) -> str:
    """The ``k`` largest (smallest) elements along ``axis``, sorted, and their i64 indices;
    equal elements in the order of their indices (ONNX's reference).

    ``R`` is the rank of each element in its row: the count of the elements that come
    before it (better, or equal at a lower index), a permutation of ``0..N-1``; the index of
    rank ``p`` is the one ``r`` with ``R[r] == p``, and the value the element there."""
    i = T.idx(len(shape))
    n = shape[axis]
    out_shape = list(shape)
    out_shape[axis] = k
    xs, xi = list(i), list(i)
    xs[axis] = "s"
    x_s, x_i = T.at("X", xs), T.at("X", i)
    rs = list(i)
    rs[axis] = "r"
    gather = list(i)
    gather[axis] = T.at("I", i)
    better = ">" if largest else "<"
    before = f"{x_s} {better} {x_i}"
    tie = f"{x_s} == {x_i}"
    if dtype in _FLOAT:
        # numpy's sort (the reference's lexsort) puts NaN after every number: first when
        # largest, last when smallest; NaNs tie with each other
        nan_s, nan_i = f"{x_s} != {x_s}", f"{x_i} != {x_i}"
        before += (f" or {nan_s} and not ({nan_i})" if largest else
                   f" or {nan_i} and not ({nan_s})")
        tie = f"{tie} or {nan_s} and {nan_i}"
    rank_body = f"sum[s: {n}](select({before} or ({tie}) and s < {i[axis]}, 1, 0))"
    return (_head([f"X: {T.ty(shape, dtype)}"],
                  [f"V: {T.ty(out_shape, dtype)}", f"I: {T.ty(out_shape, 'i64')}"])
            + f"    R: {T.ty(shape, 'i64')}\n"
            f"    {_lhs('R', xi)} = {rank_body}\n"
            f"    {_lhs('I', i)} = sum[r: {n}](select({T.at('R', rs)} == {i[axis]}, r, 0))\n"
            f"    {_lhs('V', i)} = {T.at('X', gather)}\n}}\n")


@converter("TopK", attrs=("axis", "k", "largest", "sorted"))
def topk(cv, node, a):
    x = cv.tensor(node.input[0])
    if x.dtype == "bool":
        raise cv.error("TopK of a bool tensor")
    rank = len(x.shape)
    if rank == 0:
        raise cv.error("TopK of a scalar")
    axis = _axis(cv, a.get("axis", -1), rank)
    if "k" in a:
        k = int(a["k"])
    else:
        kv = cv.value(node.input[1]).reshape(-1)
        if kv.size != 1:
            raise cv.error(f"the k input has {kv.size} values, expected one")
        k = int(kv[0])
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise cv.error(f"k = {k} is out of range for an axis of size {n}")
    if k == 0 or int(np.prod(x.shape)) == 0:
        raise cv.error("TopK with an empty output (k = 0 or an empty input)")
    out_shape = list(x.shape)
    out_shape[axis] = k
    text = topk_text(list(x.shape), x.dtype, axis, k, bool(a.get("largest", 1)))
    name = cv.op("topk", text)
    # an op of two outputs: the graph line names both
    from .convert import Tensor
    vals = Tensor(cv.fresh(node.output[0] or "topk_values"), out_shape, x.dtype)
    idxs = Tensor(cv.fresh(node.output[1] if len(node.output) > 1 and node.output[1]
                           else "topk_indices"), out_shape, "i64")
    cv.lines.append(f"    {vals.name}, {idxs.name} = {name}({x.name})")
    if node.output[0]:
        cv.tensors[node.output[0]] = vals
    if len(node.output) > 1 and node.output[1]:
        cv.tensors[node.output[1]] = idxs
