"""Converters of the linear-algebra operators: MatMul (numpy's matmul: vectors, broadcast
batch dimensions, any numeric dtype) and Einsum (one sum over the contracted letters)."""
from __future__ import annotations

import numpy as np

from . import attention, templates as T
from .registry import converter, text as _text


def _contraction(shapes, subs, out_sub, sizes, dtype) -> str:
    """``Y[out] = sum[contracted](A0[subs0] * A1[subs1] ...)``: ``subs`` are the index
    letters of each operand (a letter of a dimension of size 1 that others broadcast reads
    0), ``out_sub`` those of the result, ``sizes`` every letter's extent."""
    order = list(out_sub) + sorted(c for c in sizes if c not in out_sub)
    names = {c: f"i{k}" for k, c in enumerate(order)}
    params, terms = [], []
    for k, (shape, sub) in enumerate(zip(shapes, subs)):
        params.append(f"A{k}: {T.ty(shape, dtype)}")
        ix = ["0" if n == 1 and sizes[c] != 1 else names[c] for c, n in zip(sub, shape)]
        terms.append(T.at(f"A{k}", ix))
    red = [c for c in sorted(sizes, key=lambda c: names[c]) if c not in out_sub]
    body = " * ".join(terms)
    if red:
        body = f"sum[{', '.join(f'{names[c]}: {sizes[c]}' for c in red)}]({body})"
    out_shape = [sizes[c] for c in out_sub]
    return (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(out_shape, dtype)} {{\n"
            f"    {T.at('Y', [names[c] for c in out_sub])} = {body}\n}}\n")


def _numeric(cv, names):
    ts = [cv.tensor(n) for n in names]
    dtypes = {t.dtype for t in ts}
    if len(dtypes) != 1:
        raise cv.error(f"operands of dtypes {', '.join(sorted(dtypes))} (they must agree)")
    if "bool" in dtypes:
        raise cv.error("a product of bool tensors")
    return ts, ts[0].dtype


def _dense(cv, node, x, xs, ys):
    """``X[B..., M, K] @ W[K, N]`` with constant weights (a Linear layer's MatMul) as std
    ``dense`` on the rows of X: the graph packs its weights once at build time and runs the
    register-tiled ``dense_packed`` schedule, where a generated matmul op's automatic
    schedule ran at a quarter of its speed. W is transposed now (dense's W is [N, K]); its
    bias is zero (the exporter's Add of the bias follows, fused with the reshape back and
    what comes after)."""
    out = node.output[0]
    rows, n = int(np.prod(xs[:-1])), ys[1]
    wt, b0 = out + "#wT", out + "#b0"
    cv.static[wt] = np.ascontiguousarray(cv.value(node.input[1]).T, np.float32)
    cv.static[b0] = np.zeros(n, np.float32)
    x2, y2 = out + "#rows", out + "#dense"
    _rows(cv, x2, x, list(xs))
    cv.call(y2, "dense", [cv.tensors[x2], cv.tensor(wt), cv.tensor(b0)], (rows, n))
    unrows(cv, out, cv.tensors[y2], list(xs[:-1]) + [n])


def rows_of(cv) -> dict:
    """Tensors known as the [rows, K] view of another (by the graph name of the one of rank
    >= 3): a layer norm's 2-D result, or rows already copied for another dense (a query's,
    key's and value's projections read the same rows)."""
    return cv.__dict__.setdefault("_rows_of", {})


def _rows(cv, out, x, xs):
    """``x`` [B..., M, K] as [B * ... * M, K], its subscripts written directly (a reshape's
    flat index, unravelled, is a division and a modulo in every element's subscripts, the
    innermost too, which keeps the copy from vectorizing)."""
    known = rows_of(cv).get(x.name)
    if known is not None:
        cv.tensors[out] = known
        return
    lead = xs[:-1]
    subs, stride = [], 1
    for n in reversed(lead):
        e = "r" if stride == 1 else f"r // {stride}"
        subs.append("0" if n == 1 else e if stride * n == int(np.prod(lead)) else
                    f"{e} % {n}" if stride != 1 else f"r % {n}")
        stride *= n
    subs = subs[::-1]
    text = (f"op {{name}}(X: {T.ty(xs, x.dtype)}) -> Y: {T.ty([stride, xs[-1]], x.dtype)} "
            f"{{\n    Y[r, k] = {T.at('X', subs + ['k'])}\n}}\n")
    cv.call(out, cv.op("rows", text), [x], (stride, xs[-1]), dtype=x.dtype)
    rows_of(cv)[x.name] = cv.tensors[out]


def unrows(cv, out, y, shape):
    """``y`` [R, N] as ``shape`` [B..., M, N] (R = B * ... * M), subscripts written
    directly."""
    lead = shape[:-1]
    i = T.idx(len(lead))
    row = T.flat_index(lead, i)
    text = (f"op {{name}}(X: {T.ty(list(y.shape), y.dtype)}) -> Y: {T.ty(shape, y.dtype)} "
            f"{{\n    {T.at('Y', i + ['n'])} = X[{row}, n]\n}}\n")
    cv.call(out, cv.op("unrows", text), [y], tuple(shape), dtype=y.dtype)
    # elementwise ops on ``out`` read ``y`` instead, and a dense of ``out`` takes its rows
    unrows_of(cv)[out] = y
    rows_of(cv)[cv.tensors[out].name] = y


def unrows_of(cv) -> dict:
    """ONNX values made by `unrows`: the [rows, N] tensor each is a view of."""
    return cv.__dict__.setdefault("_unrows_of", {})


def batched(cv, out, x):
    """``x`` [B..., M, K] as [B * ..., M, K] (direct subscripts, as `_rows`)."""
    xs = list(x.shape)
    lead, total = xs[:-2], int(np.prod(xs[:-2]))
    subs, stride = [], 1
    for n in reversed(lead):
        e = "b" if stride == 1 else f"b // {stride}"
        subs.append("0" if n == 1 else e if stride * n == total else f"{e} % {n}")
        stride *= n
    text = (f"op {{name}}(X: {T.ty(xs, x.dtype)}) -> Y: {T.ty([total] + xs[-2:], x.dtype)} "
            f"{{\n    Y[b, m, k] = {T.at('X', subs[::-1] + ['m', 'k'])}\n}}\n")
    cv.call(out, cv.op("batched", text), [x], (total, *xs[-2:]), dtype=x.dtype)
    return cv.tensors[out]


def unbatched(cv, out, y, shape):
    """``y`` [B * ..., M, N] as ``shape`` [B..., M, N]."""
    lead = list(shape[:-2])
    i = T.idx(len(lead))
    b = T.flat_index(lead, i)
    text = (f"op {{name}}(X: {T.ty(list(y.shape), y.dtype)}) -> "
            f"Y: {T.ty(list(shape), y.dtype)} {{\n"
            f"    {T.at('Y', i + ['m', 'n'])} = X[{b}, m, n]\n}}\n")
    cv.call(out, cv.op("unbatched", text), [y], tuple(shape), dtype=y.dtype)


def batch_matmul(cv, out, x, y):
    """``x`` [B..., M, K] @ ``y`` [B..., K, N] (the same batch dimensions, rank >= 3, f32)
    as std ``batch_matmul`` on the batch dimensions merged into one."""
    xs, ys = x.shape, y.shape
    if len(xs) == 3:
        cv.call(out, "batch_matmul", [x, y], (xs[0], xs[1], ys[2]))
        return
    x3, y3 = batched(cv, out + "#bx", x), batched(cv, out + "#by", y)
    cv.call(out + "#bmm", "batch_matmul", [x3, y3], (x3.shape[0], xs[-2], ys[-1]))
    unbatched(cv, out, cv.tensors[out + "#bmm"], (*xs[:-2], xs[-2], ys[-1]))


@converter("MatMul")
def matmul(cv, node, a):
    if attention.fuse_subgraph(cv, node):       # the end of an exported attention
        return
    (x, y), dtype = _numeric(cv, node.input[:2])
    xs, ys = x.shape, y.shape
    if not xs or not ys:
        raise cv.error("a MatMul of a scalar (operands must have rank >= 1)")
    k = xs[-1]
    if (ys[0] if len(ys) == 1 else ys[-2]) != k:
        raise cv.error(f"shapes {list(xs)} and {list(ys)} don't multiply")
    # a small product stays one generated op with its bias add fused: below ~2^18
    # multiply-adds the two copies around dense cost more than its schedule saves (a ViT
    # of width 32 and 17 tokens ran 1.3x slower)
    if dtype == "f32" and len(xs) >= 3 and len(ys) == 2 and cv.is_static(node.input[1]) \
            and int(np.prod(xs)) * ys[1] >= 1 << 18:
        _dense(cv, node, x, xs, ys)
        return
    if dtype == "f32" and len(xs) == len(ys) == 2:
        cv.call(node.output[0], "matmul", [x, y], (xs[0], ys[1]))
        return
    if dtype == "f32" and len(xs) == len(ys) >= 3 and xs[:-2] == ys[:-2]:
        batch_matmul(cv, node.output[0], x, y)
        return
    # numpy's rules: a vector operand gains a dimension that the result loses; batch
    # dimensions broadcast
    xb, yb = xs[:-2] if len(xs) > 1 else (), ys[:-2] if len(ys) > 1 else ()
    try:
        batch = tuple(np.broadcast_shapes(xb, yb))
    except ValueError:
        raise cv.error(f"batch dimensions of {list(xs)} and {list(ys)} don't broadcast") \
            from None
    letters = "abcdefghijlmnopqrstuvwxyz"[:len(batch)]
    sizes = dict(zip(letters, batch))
    sizes["k"] = k
    xsub = "k" if len(xs) == 1 else letters[len(batch) - len(xb):] + "Mk"
    ysub = "k" if len(ys) == 1 else letters[len(batch) - len(yb):] + "kN"
    out = letters + ("M" if len(xs) > 1 else "") + ("N" if len(ys) > 1 else "")
    if len(xs) > 1:
        sizes["M"] = xs[-2]
    if len(ys) > 1:
        sizes["N"] = ys[-1]
    # a broadcast batch letter of size 1 in one operand reads 0 (see _contraction)
    text = _contraction([xs, ys], [xsub, ysub], out, sizes, dtype)
    cv.call(node.output[0], cv.op("matmul", text), [x, y], tuple(sizes[c] for c in out),
            dtype=dtype)


def _parse_einsum(cv, equation: str, ranks):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise cv.error(f"equation '{equation}' has {len(terms)} operands, the node "
                       f"{len(ranks)}")
    ell = 0
    for t, r in zip(terms, ranks):
        if "..." in t:
            ell = max(ell, r - (len(t) - 3))
    ell_letters = [chr(0x100 + k) for k in range(ell)]     # letters no equation uses
    subs = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            n = r - (len(t) - 3)
            pre, post = t.split("...")
            t = list(pre) + ell_letters[ell - n:] + list(post)
        else:
            t = list(t)
        if len(t) != r or not all(c.isalpha() for c in t):
            raise cv.error(f"equation '{equation}': operand subscripts '{''.join(t)}' don't "
                           f"fit an operand of rank {r}")
        subs.append(t)
    if arrow:
        out = list(rhs.replace("...", "\0"))
        out = [c for o in out for c in (ell_letters if o == "\0" else [o])]
    else:
        counts = {}
        for s in subs:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        out = ell_letters + sorted(c for c, n in counts.items()
                                   if n == 1 and c not in ell_letters)
    return subs, out


@converter("Einsum", attrs=("equation",))
def einsum(cv, node, a):
    names = list(node.input)
    if all(cv.is_static(n) for n in names):
        cv.static[node.output[0]] = np.asarray(np.einsum(
            _text(a["equation"]), *[cv.static[n] for n in names]))
        return
    ts, dtype = _numeric(cv, names)
    subs, out = _parse_einsum(cv, _text(a["equation"]), [len(t.shape) for t in ts])
    sizes: dict[str, int] = {}
    for t, sub in zip(ts, subs):
        for c, n in zip(sub, t.shape):
            if sizes.get(c, 1) not in (1, n) and n != 1:
                raise cv.error(f"subscript '{c}' has sizes {sizes[c]} and {n}")
            sizes[c] = max(sizes.get(c, 1), n)
    if len(set(out)) != len(out) or any(c not in sizes for c in out):
        raise cv.error(f"equation '{_text(a['equation'])}': the output subscripts repeat "
                       f"or name a letter no operand has")
    # ops' index names are i0, i1 ...: the letters are renamed, the ellipsis's too
    text = _contraction([t.shape for t in ts], subs, out, sizes, dtype)
    cv.call(node.output[0], cv.op("einsum", text), ts, tuple(sizes[c] for c in out),
            dtype=dtype)


# ---------------------------------------------------------------------------- Det

def _det_expr(m: int, at) -> str:
    """The determinant of an m x m matrix (m <= 3) whose element (r, c) is ``at(r, c)``."""
    if m == 1:
        return at(0, 0)
    if m == 2:
        return f"{at(0, 0)} * {at(1, 1)} - {at(0, 1)} * {at(1, 0)}"
    terms = []
    for c in range(3):
        c1, c2 = (c + 1) % 3, (c + 2) % 3
        terms.append(f"{at(0, c)} * ({at(1, c1)} * {at(2, c2)} - {at(1, c2)} * {at(2, c1)})")
    return " + ".join(terms)


@converter("Det")
def det(cv, node, a):
    """Det of [..., M, M] matrices in closed form for M <= 3 (cofactors); larger ones
    would need LU with pivoting chosen by the data, which is refused."""
    x = cv.tensor(node.input[0])
    s = x.shape
    if len(s) < 2 or s[-1] != s[-2]:
        raise cv.error(f"Det of a {x.type} (square matrices in the last two axes)")
    if x.dtype not in ("f32", "f64"):
        raise cv.error(f"Det of {x.dtype} (supported: f32, f64)")
    m = s[-1]
    if m > 3:
        raise cv.error(f"Det of {m}x{m} matrices (closed forms up to 3x3; larger ones "
                       f"need LU with data-dependent pivoting)")
    out = list(s[:-2])
    i = [f"i{k}" for k in range(len(out))]
    expr = _det_expr(m, lambda r, c: f"X[{', '.join(i + [str(r), str(c)])}]")
    text = (f"op {{name}}(X: {T.ty(s, x.dtype)}) -> Y: {T.ty(out, x.dtype)} {{\n"
            f"    {T.at('Y', i)} = {expr}\n}}\n")
    cv.call(node.output[0], cv.op("det", text), [x], out, dtype=x.dtype)
