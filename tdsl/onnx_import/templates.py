"""Text of the ops an imported model needs beyond the standard library, each written for its
concrete shapes (an ONNX model's shapes are static): broadcasting arithmetic, reshapes,
slices, transposes, concatenation, general convolutions and pools, LRN, softmax on any axis.

Every function returns the ``op`` text with the name ``{name}`` left to fill in, so that
identical ops (the same reshape in ten blocks) are written once.
"""
from __future__ import annotations

import math

import numpy as np

from ..lowering.dtypes import is_float, minifloat_format


def lit(v, dtype: str = "f32") -> str:
    """A literal of ``dtype`` in .tdsl: a float always with a point or an exponent (NaN as
    ``0.0 / 0.0``), an integer as digits, a bool as ``true``/``false``."""
    if dtype == "bool":
        return "true" if v else "false"
    if not is_float(dtype):
        return str(int(v))
    v = float(v)
    if math.isnan(v):
        return "(0.0 / 0.0)"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    text = repr(v)
    text = text if any(c in text for c in ".en") else text + ".0"
    return f"({text})" if v < 0 else text


def saturated(expr: str, dtype: str, src: str) -> str:
    """``expr`` (of dtype ``src``) cast to the 8-bit float ``dtype`` as ONNX's Cast and
    QuantizeLinear saturate by default: what lies beyond the largest value, infinities
    included, becomes it; NaN stays NaN (tdsl's cast, like numpy's, gives infinity or NaN)."""
    if not is_float(src):
        expr, src = f"f64({expr})", "f64"
    top = minifloat_format(dtype)["max"]
    hi, lo = lit(top, src), lit(-top, src)
    return f"{dtype}(select({expr} > {hi}, {hi}, select({expr} < {lo}, {lo}, {expr})))"


class Literal:
    """A static scalar in an elementwise expression: written as a literal of its dtype."""

    def __init__(self, value, dtype: str, shape=()):
        self.value, self.dtype, self.shape = value, dtype, tuple(shape)

    @property
    def text(self) -> str:
        return lit(self.value, self.dtype)


def ty(shape, dtype: str = "f32") -> str:
    """A tensor type: ``f32[2, 3]``, or ``f32`` for a scalar."""
    return f"{dtype}[{', '.join(map(str, shape))}]" if len(shape) else dtype


def at(name: str, subs) -> str:
    """``name[s0, s1]``, or ``name`` alone for a scalar."""
    return f"{name}[{', '.join(subs)}]" if len(subs) else name


def flat_index(dims, names) -> str:
    """The row-major offset of index ``names`` in ``dims`` (unit dimensions left out),
    multiplications only: no division in any element's subscripts."""
    terms, stride = [], 1
    for k in reversed(range(len(dims))):
        if dims[k] != 1:
            terms.append(names[k] if stride == 1 else f"{names[k]} * {stride}")
        stride *= dims[k]
    return " + ".join(reversed(terms)) or "0"


def idx(rank: int, prefix: str = "i") -> list[str]:
    return [f"{prefix}{k}" for k in range(rank)]


def broadcast_index(shape, out_rank: int, out_idx: list[str]) -> str:
    """Subscripts of an operand of ``shape`` broadcast (numpy rules) to ``out_rank``."""
    pad = out_rank - len(shape)
    subs = ["0" if n == 1 else out_idx[pad + k] for k, n in enumerate(shape)]
    return f"[{', '.join(subs)}]"


def elementwise(operands, out_shape, expr: str, dtype: str = "f32") -> str:
    """``Y = expr`` of ``dtype`` where ``{0}``, ``{1}`` ... in ``expr`` are the operands
    (a `Literal`, or anything with a shape and a dtype: a tensor argument, broadcast)."""
    tensors = [op for op in operands if not isinstance(op, Literal)]
    if out_shape and tensors and all(tuple(op.shape) == tuple(out_shape) for op in tensors):
        # no broadcasting: an op of any rank (relu's form), which the graph's layout pass
        # runs on blocked activations as it runs std's elementwise ops, so an imported
        # HardSwish between two convolutions costs no layout transforms around it
        params = [f"A{k}: {op.dtype}[*S]" for k, op in enumerate(operands)
                  if not isinstance(op, Literal)]
        terms = [op.text if isinstance(op, Literal) else f"A{k}[*i]"
                 for k, op in enumerate(operands)]
        return (f"op {{name}}({', '.join(params)}) -> Y: {dtype}[*S] {{\n"
                f"    Y[*i] = {expr.format(*terms)}\n}}\n")
    i = idx(len(out_shape))
    params, terms = [], []
    for k, op in enumerate(operands):
        if isinstance(op, Literal):
            terms.append(op.text)
        else:
            params.append(f"A{k}: {ty(op.shape, op.dtype)}")
            sub = broadcast_index(op.shape, len(out_shape), i) if len(op.shape) else ""
            terms.append(f"A{k}{sub}")
    return (f"op {{name}}({', '.join(params)}) -> Y: {ty(out_shape, dtype)} {{\n"
            f"    {at('Y', i)} = {expr.format(*terms)}\n}}\n")


def reshape(in_shape, out_shape, dtype: str = "f32") -> str:
    """Same elements in row-major order: the flat offset of the output index, unravelled."""
    i = idx(len(out_shape))
    strides = np.cumprod([1] + list(out_shape[::-1]))[:-1][::-1]
    flat = " + ".join(f"{i[k]} * {int(s)}" if s != 1 else i[k]
                      for k, s in enumerate(strides) if out_shape[k] != 1) or "0"
    in_strides = np.cumprod([1] + list(in_shape[::-1]))[:-1][::-1]
    subs = []
    for k, n in enumerate(in_shape):
        s = int(in_strides[k])
        e = f"({flat})" if s == 1 else f"({flat}) // {s}"
        subs.append("0" if n == 1 else e if k == 0 else f"{e} % {n}")
    return (f"op {{name}}(X: {ty(in_shape, dtype)}) -> Y: {ty(out_shape, dtype)} {{\n"
            f"    {at('Y', i)} = {at('X', subs)}\n}}\n")


def transpose(in_shape, perm, dtype: str = "f32") -> str:
    out_shape = [in_shape[p] for p in perm]
    i = idx(len(out_shape))
    subs = [""] * len(in_shape)
    for k, p in enumerate(perm):
        subs[p] = i[k]
    return (f"op {{name}}(X: {ty(in_shape, dtype)}) -> Y: {ty(out_shape, dtype)} {{\n"
            f"    {at('Y', i)} = {at('X', subs)}\n}}\n")


def slice_(in_shape, starts, steps, out_shape, dtype: str = "f32") -> str:
    i = idx(len(out_shape))
    subs = []
    for k in range(len(in_shape)):
        a, s = int(starts[k]), int(steps[k])
        term = i[k] if s == 1 else f"{i[k]} * {s}"
        subs.append(term if a == 0 else f"{term} + {a}" if a > 0 else f"{term} - {-a}")
    return (f"op {{name}}(X: {ty(in_shape, dtype)}) -> Y: {ty(out_shape, dtype)} {{\n"
            f"    {at('Y', i)} = {at('X', subs)}\n}}\n")


def concat(shapes, axis: int, dtype: str = "f32") -> str:
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    i = idx(len(out_shape))
    params = [f"A{k}: {ty(s, dtype)}" for k, s in enumerate(shapes)]
    offsets = np.cumsum([0] + [s[axis] for s in shapes])
    expr = None
    for k in reversed(range(len(shapes))):
        subs = list(i)
        if offsets[k]:
            subs[axis] = f"{i[axis]} - {int(offsets[k])}"
        load = f"A{k}[{', '.join(subs)}]"
        expr = load if expr is None else \
            f"select({i[axis]} < {int(offsets[k + 1])}, {load}, {expr})"
    return (f"op {{name}}({', '.join(params)}) -> Y: {ty(out_shape, dtype)} {{\n"
            f"    Y[{', '.join(i)}] = {expr}\n}}\n")


def conv(x_shape, w_shape, out_shape, strides, pads, dilations, group) -> str:
    """A convolution of any group count and padding: one sum over (c, r, s), the padding a
    select (the textbook form; the automatic schedule)."""
    n, c, h, w = x_shape
    f, cg, kh, kw = w_shape
    fg = f // group
    iy = f"y * {strides[0]} + r * {dilations[0]} - {pads[0]}"
    ix = f"x * {strides[1]} + s * {dilations[1]} - {pads[1]}"
    chan = "c" if group == 1 else f"f // {fg} * {cg} + c"
    return (f"op {{name}}(X: {ty(x_shape)}, W: {ty(w_shape)}) -> Y: {ty(out_shape)} {{\n"
            f"    Y[n, f, y, x] = sum[c: {cg}, r: {kh}, s: {kw}](\n"
            f"        select({iy} >= 0 and {iy} < {h} and {ix} >= 0 and {ix} < {w},\n"
            f"               X[n, {chan}, {iy}, {ix}], 0.0) * W[f, c, r, s])\n}}\n")


def pool(x_shape, out_shape, kernel, strides, pads, kind: str, count_pad: bool) -> str:
    """Max or average pooling with any padding and ceil mode (windows past the padded
    input read nothing)."""
    n, c, h, w = x_shape
    iy, ix = f"y * {strides[0]} + r - {pads[0]}", f"x * {strides[1]} + s - {pads[1]}"
    inside = f"{iy} >= 0 and {iy} < {h} and {ix} >= 0 and {ix} < {w}"
    win = f"r: {kernel[0]}, s: {kernel[1]}"
    load = f"X[n, c, {iy}, {ix}]"
    head = f"op {{name}}(X: {ty(x_shape)}) -> Y: {ty(out_shape)} {{\n"
    if kind == "max":
        return head + f"    Y[n, c, y, x] = max[{win}](select({inside}, {load}, -inf))\n}}\n"
    if count_pad:
        ph, pw = h + pads[0] + pads[2], w + pads[1] + pads[3]
        counted = (f"y * {strides[0]} + r < {ph} and x * {strides[1]} + s < {pw}")
    else:
        counted = inside
    return (head + f"    P: {ty(out_shape)}\n"
            f"    P[n, c, y, x] = sum[{win}](select({inside}, {load}, 0.0))\n"
            f"    K: {ty(out_shape)}\n"
            f"    K[n, c, y, x] = sum[{win}](select({counted}, 1.0, 0.0))\n"
            f"    Y[n, c, y, x] = P[n, c, y, x] / K[n, c, y, x]\n}}\n")


def global_pool(x_shape, kind: str) -> str:
    n, c, h, w = x_shape
    body = (f"max[r: {h}, s: {w}](X[n, c, r, s])" if kind == "max" else
            f"sum[r: {h}, s: {w}](X[n, c, r, s]) / {lit(h * w)}")
    return (f"op {{name}}(X: {ty(x_shape)}) -> Y: {ty([n, c, 1, 1])} {{\n"
            f"    Y[n, c, a, b] = {body}\n}}\n")


def lrn(x_shape, size: int, alpha: float, beta: float, bias: float) -> str:
    n, c, h, w = x_shape
    lo = (size - 1) // 2
    ch = f"c + k - {lo}" if lo else "c + k"
    return (f"op {{name}}(X: {ty(x_shape)}) -> Y: {ty(x_shape)} {{\n"
            f"    S: {ty(x_shape)}\n"
            f"    S[n, c, y, x] = sum[k: {size}](select({ch} >= 0 and {ch} < {c},\n"
            f"        X[n, {ch}, y, x] * X[n, {ch}, y, x], 0.0))\n"
            f"    Y[n, c, y, x] = X[n, c, y, x]\n"
            f"        / pow({lit(bias)} + {lit(alpha / size)} * S[n, c, y, x], {lit(beta)})\n"
            f"}}\n")


def softmax(shape, axis: int, log: bool, dtype: str = "f32") -> str:
    """Softmax (or log-softmax) along ``axis``, the maximum subtracted first."""
    i = idx(len(shape))
    rest = [v for k, v in enumerate(i) if k != axis]
    red = [s for k, s in enumerate(shape) if k != axis]
    at = list(i)
    at[axis] = "k"
    lhs = f"[{', '.join(rest)}]" if rest else ""
    dims = ty(red, dtype) if red else dtype
    x_k, x_i = f"X[{', '.join(at)}]", f"X[{', '.join(i)}]"
    out = (f"{x_i} - M{lhs} - log(S{lhs})" if log else f"exp({x_i} - M{lhs}) / S{lhs}")
    return (f"op {{name}}(X: {ty(shape, dtype)}) -> Y: {ty(shape, dtype)} {{\n"
            f"    M: {dims}\n    M{lhs} = max[k: {shape[axis]}]({x_k})\n"
            f"    S: {dims}\n    S{lhs} = sum[k: {shape[axis]}](exp({x_k} - M{lhs}))\n"
            f"    Y[{', '.join(i)}] = {out}\n}}\n")


def gemm(a_shape, b_shape, c_shape, trans_a, trans_b, alpha, beta, out_shape) -> str:
    a = "A[k, i]" if trans_a else "A[i, k]"
    b = "B[j, k]" if trans_b else "B[k, j]"
    k = a_shape[0] if trans_a else a_shape[1]
    params = [f"A: {ty(a_shape)}", f"B: {ty(b_shape)}"]
    body = f"sum[k: {k}]({a} * {b})"
    if alpha != 1.0:
        body = f"{lit(alpha)} * {body}"
    if c_shape is not None:
        params.append(f"C: {ty(c_shape)}")
        cterm = f"C{broadcast_index(c_shape, 2, ['i', 'j'])}" if len(c_shape) else "C"
        body += f" + {cterm}" if beta == 1.0 else f" + {lit(beta)} * {cterm}"
    return (f"op {{name}}({', '.join(params)}) -> Y: {ty(out_shape)} {{\n"
            f"    Y[i, j] = {body}\n}}\n")


def batch_matmul(a_shape, b_shape, out_shape) -> str:
    """MatMul of rank > 2 (numpy's matmul: batch dimensions broadcast)."""
    r = len(out_shape)
    i = idx(r)
    a_idx = broadcast_index(list(a_shape[:-2]) + [2, 2], r, i[:-2] + ["x", "y"])
    b_idx = broadcast_index(list(b_shape[:-2]) + [2, 2], r, i[:-2] + ["x", "y"])
    a_sub = a_idx[1:-1].rsplit(", ", 2)[0] if len(a_shape) > 2 else ""
    b_sub = b_idx[1:-1].rsplit(", ", 2)[0] if len(b_shape) > 2 else ""
    ak = ", ".join(x for x in (a_sub, f"{i[-2]}, k") if x)
    bk = ", ".join(x for x in (b_sub, f"k, {i[-1]}") if x)
    return (f"op {{name}}(A: {ty(a_shape)}, B: {ty(b_shape)}) -> Y: {ty(out_shape)} {{\n"
            f"    Y[{', '.join(i)}] = sum[k: {a_shape[-1]}](A[{ak}] * B[{bk}])\n}}\n")


def pad(in_shape, begins, ends, value: float, dtype: str = "f32") -> str:
    """Constant padding (negative pads crop)."""
    out_shape = [n + b + e for n, b, e in zip(in_shape, begins, ends)]
    i = idx(len(out_shape))
    conds, subs = [], []
    for k, (n, b) in enumerate(zip(in_shape, begins)):
        sub = i[k] if b == 0 else f"{i[k]} - {b}" if b > 0 else f"{i[k]} + {-b}"
        subs.append(sub)
        if b > 0:
            conds.append(f"{i[k]} >= {b}")
        if n + b < out_shape[k]:
            conds.append(f"{sub} < {n}")
    load = f"X[{', '.join(subs)}]"
    body = f"select({' and '.join(conds)}, {load}, {lit(value, dtype)})" if conds else load
    return (f"op {{name}}(X: {ty(in_shape, dtype)}) -> Y: {ty(out_shape, dtype)} {{\n"
            f"    Y[{', '.join(i)}] = {body}\n}}\n")
