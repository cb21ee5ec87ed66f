"""Converters of the elementwise operators: arithmetic (Add Sub Mul Div Mod Pow, the variadic
Sum Min Max Mean), the unary math functions, logic and comparisons, Where, Clip, IsNaN/IsInf,
BitShift and the bitwise operators (the language's ``bitand`` ... ``shl shr``).

Operands broadcast by numpy's rules; a static scalar is a literal (literals adapt to the
other operand's dtype). At f32 on operands of one shape the standard library's ops are used
(``add``, ``relu``, ``clip`` ...: tuned schedules); any other dtype or shape gets an op
written for the node (`_emit`). Values all known at import time are computed here, with
numpy, as ONNX's reference implementation does (shape arithmetic).
"""
from __future__ import annotations

import math

import numpy as np

from ..lowering.dtypes import STORAGE_FLOATS, to_numpy
from . import templates as T
from .convert import Tensor
from .registry import converter, opt as _opt, text

FLOATS = ("f32", "f64", *STORAGE_FLOATS)
UNSIGNED = ("u8", "u16", "u32", "u64")
INTS = ("i64", "i32", "i16", "i8") + UNSIGNED


# ---------------------------------------------------------------------------- shared pieces

def _emit(cv, out, names, expr: str, kind: str, dtype: str | None = None) -> None:
    """``out = expr`` elementwise (``{0}``, ``{1}`` ... the values ``names``, broadcast);
    like ``cv.elementwise``, but an op whose operands are all static keeps its first as a
    tensor (an op needs an input). Operands computed by such an op for this node alone are
    written into it (`_inline`)."""
    shape = tuple(np.broadcast_shapes(*(cv.shape(n) for n in names)))
    dtype = dtype or cv.dtype(names[0])           # the node's own first operand's
    names, expr = _inline(cv, list(names), expr, shape)
    ops = [cv.operand(n) for n in names]
    if ops and not any(isinstance(o, Tensor) for o in ops):
        ops[0] = cv.tensor(names[0])
    _remember(cv, out, names, expr, shape, dtype)
    rows = _on_rows(cv, names, ops, shape)
    if rows is not None:
        from .linalg import unrows, unrows_of        # linalg's import chain reaches here
        viewed = next(n for n in names if n in unrows_of(cv))
        view, flat = cv.tensors[viewed], unrows_of(cv)[viewed].shape
        text = T.elementwise(rows, list(flat), expr, dtype)
        cv.call(out + "#rows", cv.op(kind, text),
                [o for o in rows if isinstance(o, Tensor)], flat, dtype=dtype)
        unrows(cv, out, cv.tensors[out + "#rows"], list(view.shape))
        return
    text = T.elementwise(ops, list(shape), expr, dtype)
    cv.call(out, cv.op(kind, text), [o for o in ops if isinstance(o, Tensor)], shape,
            dtype=dtype)


def _on_rows(cv, names, ops, shape):
    """The operands on [rows, N] where every tensor operand is the `unrows` view of a dense
    layer's [rows, N] result, of the op's own shape, and the others are scalars or vectors
    along the last axis (a bias): the op then reads the dense layer's result itself, which
    the graph fuses as that layer's epilogue (through the view it would be a kernel of its
    own, one more pass over memory); its result is viewed back. None otherwise."""
    from .linalg import unrows_of
    views = unrows_of(cv)
    if len(shape) < 3 or not any(n in views for n in names):
        return None
    out = []
    for n, op in zip(names, ops):
        if n in views and tuple(cv.shape(n)) == tuple(shape):
            out.append(views[n])
        elif not isinstance(op, Tensor):
            out.append(op)                                   # a literal
        elif cv.is_static(n) and all(d == 1 for d in op.shape[:-1]) and op.shape and \
                op.shape[-1] in (1, shape[-1]):
            vec = n + "#vector"
            cv.static.setdefault(vec, cv.static[n].reshape(-1))
            out.append(cv.tensor(vec))
        else:
            return None
    return out


# an elementwise op's expression, to be written into its one consumer: ONNX value ->
# (operand names, expression, shape, dtype)
def _exprs(cv) -> dict:
    return cv.__dict__.setdefault("_elementwise_exprs", {})


def _remember(cv, out, names, expr, shape, dtype) -> None:
    # at f32 and f64 only: a narrower float rounds where it is stored, which the
    # consumer's expression would skip
    if dtype in ("f32", "f64") and len(set(names)) <= _MAX_OPERANDS:
        _exprs(cv)[out] = (list(names), expr, tuple(shape), dtype)


_MAX_OPERANDS = 8        # an expression tree that big is a kernel of its own


def _inline(cv, names, expr, shape):
    """``(names, expr)`` with each operand that an elementwise op of this shape computed
    for this node alone replaced by that op's expression, its operands merged with the
    node's (each once). A chain of elementwise nodes becomes one op, as ONNX Runtime's
    GELU fusion makes one of Div, Erf, Add, Mul, Mul: the value that two nodes of the
    chain read (GELU's x) is then read by one op, which the graph can fuse as the epilogue
    of the dense layer computing it (two readers keep a value out of an epilogue)."""
    from .attention import _graph_index
    _, uses, outputs = _graph_index(cv)
    known = _exprs(cv)
    inner = {n: known[n] for n in set(names) if n in known and uses.get(n, 0) == 1
             and n not in outputs and known[n][2] == tuple(shape)}
    if not inner:
        return names, expr
    merged: list[str] = []

    def slot(n):
        if n not in merged:
            merged.append(n)
        return "{" + str(merged.index(n)) + "}"
    terms = []
    for n in names:
        if n in inner:
            sub_names, sub_expr, _, _ = inner[n]
            terms.append("(" + sub_expr.format(*[slot(m) for m in sub_names]) + ")")
        else:
            terms.append(slot(n))
    if len(merged) > _MAX_OPERANDS:
        return names, expr
    return merged, expr.format(*terms)


def storage_via_f32(fn):
    """A converter of float ops that also takes inputs of a storage float (f16, bf16, the 8-
    and 4-bit floats): they are widened to f32 (exactly), the node is converted at f32 and
    its f32 outputs are rounded to that type, once per output, as onnxruntime's CPU kernels
    compute f16 (docs/onnx.md). Put it below ``@converter``; nodes without such an input go
    to ``fn`` as they are."""
    import functools

    @functools.wraps(fn)
    def wrapped(cv, node, a):
        narrow = next((cv.dtype(n) for n in node.input
                       if n and cv.dtype(n) in STORAGE_FLOATS), None)
        if narrow is None:
            return fn(cv, node, a)
        wide = type(node)()
        wide.CopyFrom(node)
        for k, n in enumerate(node.input):
            if n and cv.dtype(n) in STORAGE_FLOATS:
                wide.input[k] = n + "#f32"
                if cv.is_static(n):
                    cv.static[wide.input[k]] = cv.static[n].astype(np.float32)
                elif wide.input[k] not in cv.tensors:
                    cv.elementwise(wide.input[k], [n], "f32({0})", "widen", "f32")
        for k, n in enumerate(node.output):
            if n:
                wide.output[k] = n + "#f32"
        fn(cv, wide, a)
        for n, w in zip(node.output, wide.output):
            if not n:
                continue
            if cv.is_static(w):
                v = cv.static[w]
                cv.static[n] = v.astype(to_numpy(narrow)) if v.dtype == np.float32 else v
            elif w in cv.tensors and cv.dtype(w) == "f32":
                cv.elementwise(n, [w], f"{narrow}({{0}})", f"round_{narrow}", narrow)
            elif w in cv.tensors:
                cv.alias(n, w)
    return wrapped


def _all_static(cv, node) -> bool:
    return all(cv.is_static(n) for n in node.input if n)


def _need(cv, node, dtype: str, allowed, what: str = "") -> None:
    if dtype not in allowed:
        raise cv.error(f"{what or node.op_type} on {dtype} is not supported (supported: "
                       f"{', '.join(allowed)})")


def _same_shape_f32(cv, names) -> bool:
    return all(not cv.is_static(n) for n in names) and \
        all(cv.dtype(n) == "f32" for n in names) and \
        len({cv.shape(n) for n in names}) == 1


def _trunc_div(x, y):
    """ONNX's integer Div: the quotient truncated toward zero (0 for a zero divisor)."""
    with np.errstate(all="ignore"):
        q = np.floor_divide(x, y)
        r = np.remainder(x, y)
    return q + ((r != 0) & ((x < 0) ^ (y < 0))).astype(q.dtype)


# ---------------------------------------------------------------------------- binary arithmetic

_BINARY = {"Add": ("{0} + {1}", np.add, "add"), "Sub": ("{0} - {1}", np.subtract, "sub"),
           "Mul": ("{0} * {1}", np.multiply, "mul"), "Div": ("{0} / {1}", np.divide, "div")}
# integer Div truncates toward zero; `//` floors: one is added where they differ
_INT_DIV = "select({0} % {1} != 0 and ({0} < 0) != ({1} < 0), {0} // {1} + 1, {0} // {1})"


@converter(*_BINARY, attrs=("axis", "broadcast"))
def binary(cv, node, a):
    expr, fn, std = _BINARY[node.op_type]
    x, y = node.input
    if "broadcast" in a and a.get("broadcast") and "axis" in a:
        raise cv.error("the opset-1 broadcast attribute with an axis")
    dtype = cv.dtype(x)
    if cv.is_static(x) and cv.is_static(y):
        vx, vy = cv.static[x], cv.static[y]
        with np.errstate(all="ignore"):
            r = _trunc_div(vx, vy) if node.op_type == "Div" and vx.dtype.kind in "iu" \
                else fn(vx, vy)
        cv.static[node.output[0]] = np.asarray(r).astype(vx.dtype)
        return
    _need(cv, node, dtype, FLOATS + INTS)
    if _same_shape_f32(cv, [x, y]) and _inline(cv, [x, y], expr, cv.shape(x))[1] == expr:
        cv.call(node.output[0], std, [cv.tensor(x), cv.tensor(y)], cv.shape(x))
        _remember(cv, node.output[0], [x, y], expr, cv.shape(x), "f32")
        return
    sx, sy = cv.shape(x), cv.shape(y)
    if node.op_type == "Add" and cv.is_static(x) and not cv.is_static(y):
        x, y, sx, sy = y, x, sy, sx                       # commutative: the constant second
    if node.op_type == "Add" and dtype == "f32" and len(sx) == 4 and cv.is_static(y) and \
            not cv.is_static(x) and tuple(sy) in ((sx[1], 1, 1), (1, sx[1], 1, 1)):
        bias = y + "#bias"                                 # per channel: a bias_add
        cv.static[bias] = cv.static[y].reshape(-1)
        cv.call(node.output[0], "bias_add", [cv.tensor(x), cv.tensor(bias)], sx)
        return
    if node.op_type == "Div" and dtype in INTS:
        expr = "{0} // {1}" if dtype in UNSIGNED else _INT_DIV
    _emit(cv, node.output[0], [x, y], expr, std)


@converter("Mod", attrs=("fmod",))
def mod(cv, node, a):
    x, y = node.input
    fmod = a.get("fmod", 0)
    if _all_static(cv, node):
        vx, vy = cv.static[x], cv.static[y]
        with np.errstate(all="ignore"):
            r = np.fmod(vx, vy) if fmod else np.mod(vx, vy)
        cv.static[node.output[0]] = np.asarray(r).astype(vx.dtype)
        return
    dtype = cv.dtype(x)
    _need(cv, node, dtype, FLOATS + INTS)
    if dtype in FLOATS:
        r = "fmod({0}, {1})"
        # numpy's mod: C's fmod moved to the divisor's sign
        expr = r if fmod else \
            f"select({r} != 0.0 and ({r} < 0.0) != ({{1}} < 0.0), {r} + {{1}}, {r})"
    elif fmod and dtype not in UNSIGNED:
        # C's remainder (the dividend's sign) from the floored one (the divisor's)
        expr = "select({0} % {1} != 0 and ({0} < 0) != ({1} < 0), {0} % {1} - {1}, {0} % {1})"
    else:
        expr = "{0} % {1}"
    _emit(cv, node.output[0], [x, y], expr, "fmod" if fmod else "mod")


@converter("Pow")
def pow_(cv, node, a):
    x, y = node.input
    if _all_static(cv, node):
        with np.errstate(all="ignore"):
            cv.static[node.output[0]] = np.power(cv.static[x], cv.static[y]).astype(
                cv.static[x].dtype)
        return
    dx, dy = cv.dtype(x), cv.dtype(y)
    _need(cv, node, dx, FLOATS + INTS, "Pow's base")
    _need(cv, node, dy, FLOATS + INTS, "Pow's exponent")
    if dx in FLOATS and dx == dy:
        expr = "pow({0}, {1})"
    else:                       # numpy computes in f64 and the result has the base's dtype
        expr = "pow(f64({0}), f64({1}))" if dx == "f64" else f"{dx}(pow(f64({{0}}), f64({{1}})))"
    _emit(cv, node.output[0], [x, y], expr, "pow", dx)


# ---------------------------------------------------------------------------- variadic

_VARIADIC = {"Sum": np.add, "Min": np.minimum, "Max": np.maximum, "Mean": np.add}


@converter(*_VARIADIC)
def variadic(cv, node, a):
    names = [n for n in node.input if n]
    op = node.op_type
    if _all_static(cv, node):
        r = cv.static[names[0]]
        for n in names[1:]:
            r = _VARIADIC[op](r, cv.static[n])
        if op == "Mean":
            r = r / len(names)
        cv.static[node.output[0]] = np.asarray(r).astype(cv.static[names[0]].dtype)
        return
    if len(names) == 1:
        cv.alias(node.output[0], names[0])
        return
    dtype = cv.dtype(names[0])
    _need(cv, node, dtype, FLOATS if op == "Mean" else FLOATS + INTS)
    if op == "Sum" and len(names) == 2 and _same_shape_f32(cv, names):
        cv.call(node.output[0], "add", [cv.tensor(n) for n in names], cv.shape(names[0]))
        return
    terms = [f"{{{k}}}" for k in range(len(names))]
    if op in ("Sum", "Mean"):
        expr = " + ".join(terms)
        if op == "Mean":
            expr = f"({expr}) / {T.lit(len(names))}"
    else:
        expr = terms[0]
        for t in terms[1:]:
            expr = f"{op.lower()}({expr}, {t})"
    _emit(cv, node.output[0], names, expr, op.lower())


# ---------------------------------------------------------------------------- unary

_UNARY_STD = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp"}
# float-only functions: op -> (expr, numpy)
_FLOAT_FN = {
    "Sqrt": ("sqrt({0})", np.sqrt), "Log": ("log({0})", np.log), "Exp": ("exp({0})", np.exp),
    "Erf": ("erf({0})", None), "Reciprocal": ("1.0 / {0}", np.reciprocal),
    "Floor": ("floor({0})", np.floor), "Ceil": ("ceil({0})", np.ceil),
    "Round": ("round({0})", np.rint), "Sigmoid": ("sigmoid({0})", None),
    "Tanh": ("tanh({0})", np.tanh), "Sin": ("sin({0})", np.sin), "Cos": ("cos({0})", np.cos),
    "Tan": ("tan({0})", np.tan), "Asin": ("asin({0})", np.arcsin),
    "Acos": ("acos({0})", np.arccos), "Atan": ("atan({0})", np.arctan),
    "Sinh": ("sinh({0})", np.sinh), "Cosh": ("cosh({0})", np.cosh),
    "Asinh": ("asinh({0})", np.arcsinh), "Acosh": ("acosh({0})", np.arccosh),
    "Atanh": ("atanh({0})", np.arctanh),
}


@converter(*_FLOAT_FN, "Relu", "Neg", "Abs", "Sign")
def unary(cv, node, a):
    x, op = node.input[0], node.op_type
    dtype = cv.dtype(x)
    fold = {"Neg": np.negative, "Abs": np.abs, "Sign": np.sign,
            "Relu": lambda v: np.maximum(v, 0).astype(v.dtype)}.get(op) or \
        _FLOAT_FN.get(op, (None, None))[1]
    if cv.is_static(x) and fold is not None:
        with np.errstate(all="ignore"):
            cv.static[node.output[0]] = np.asarray(fold(cv.static[x])).astype(
                cv.static[x].dtype)
        return
    if op == "Tanh" and dtype == "f32" and not cv.is_static(x):
        # tanh(x) = 2 sigmoid(2x) - 1: tdsl's sigmoid is its inlined exp, where tanh is a
        # libm call per element, 3x slower in a GPT block's GELU; within 2e-7 of tanh
        _emit(cv, node.output[0], [x], "2.0 * sigmoid(2.0 * {0}) - 1.0", "tanh")
        return
    if op in _UNARY_STD and dtype == "f32" and not cv.is_static(x):
        t = cv.tensor(x)
        cv.call(node.output[0], _UNARY_STD[op], [t], t.shape)
        return
    if op in _FLOAT_FN:
        _need(cv, node, dtype, FLOATS)
        expr = _FLOAT_FN[op][0]
    else:
        signed = (*FLOATS, "i64", "i32", "i16", "i8")
        _need(cv, node, dtype, signed + UNSIGNED if op != "Neg" else signed)
        zero = T.lit(0, dtype)
        if op == "Relu":
            expr = f"max({{0}}, {zero})"
        elif op == "Neg":
            expr = "-{0}"
        elif op == "Abs":
            expr = "{0}" if dtype in UNSIGNED else "abs({0})"
        elif dtype in UNSIGNED:
            expr = "select({0} > 0, 1, 0)"
        else:                                           # Sign; NaN stays NaN
            one = T.lit(1, dtype)
            expr = (f"select({{0}} > {zero}, {one}, select({{0}} < {zero}, -{one}, "
                    f"{'{0}' if dtype in FLOATS else zero}))")
    _emit(cv, node.output[0], [x], expr, op.lower())


@converter("IsNaN")
def isnan(cv, node, a):
    x = node.input[0]
    if cv.is_static(x):
        cv.static[node.output[0]] = np.isnan(cv.static[x])
        return
    _need(cv, node, cv.dtype(x), FLOATS)
    _emit(cv, node.output[0], [x], "{0} != {0}", "isnan", "bool")


@converter("IsInf", attrs=("detect_negative", "detect_positive"))
def isinf(cv, node, a):
    x = node.input[0]
    neg, pos = a.get("detect_negative", 1), a.get("detect_positive", 1)
    if cv.is_static(x):
        v = cv.static[x]
        cv.static[node.output[0]] = (np.isposinf(v) & bool(pos)) | (np.isneginf(v) & bool(neg))
        return
    _need(cv, node, cv.dtype(x), FLOATS)
    tests = (["{0} == inf"] if pos else []) + (["{0} == -inf"] if neg else [])
    expr = " or ".join(tests) or "{0} != {0} and {0} == {0}"        # never
    _emit(cv, node.output[0], [x], expr, "isinf", "bool")


# ---------------------------------------------------------------------------- logic, comparisons

_LOGIC = {"And": ("{0} and {1}", np.logical_and), "Or": ("{0} or {1}", np.logical_or),
          "Xor": ("{0} != {1}", np.logical_xor)}
_COMPARE = {"Equal": ("==", np.equal), "Less": ("<", np.less), "Greater": (">", np.greater),
            "LessOrEqual": ("<=", np.less_equal), "GreaterOrEqual": (">=", np.greater_equal)}


@converter("Not")
def not_(cv, node, a):
    x = node.input[0]
    if cv.is_static(x):
        cv.static[node.output[0]] = np.logical_not(cv.static[x])
        return
    _need(cv, node, cv.dtype(x), ("bool",))
    _emit(cv, node.output[0], [x], "not {0}", "not", "bool")


@converter(*_LOGIC, *_COMPARE, attrs=("axis", "broadcast"))
def logic(cv, node, a):
    x, y = node.input
    if "broadcast" in a and a.get("broadcast") and "axis" in a:
        raise cv.error("the opset-1 broadcast attribute with an axis")
    expr, fn = _LOGIC[node.op_type] if node.op_type in _LOGIC else \
        ("{0} " + _COMPARE[node.op_type][0] + " {1}", _COMPARE[node.op_type][1])
    if cv.is_static(x) and cv.is_static(y):
        cv.static[node.output[0]] = np.asarray(fn(cv.static[x], cv.static[y]))
        return
    dtype = cv.dtype(x)
    if node.op_type in _LOGIC:
        _need(cv, node, dtype, ("bool",))
    else:
        _need(cv, node, dtype, FLOATS + INTS + (("bool",) if node.op_type == "Equal" else ()))
    _emit(cv, node.output[0], [x, y], expr, node.op_type.lower(), "bool")


@converter("Where")
def where(cv, node, a):
    c, x, y = node.input
    if _all_static(cv, node):
        cv.static[node.output[0]] = np.where(cv.static[c], cv.static[x], cv.static[y])
        return
    dtype = cv.dtype(x)
    _need(cv, node, dtype, FLOATS + INTS + ("bool",))
    _emit(cv, node.output[0], [c, x, y], "select({0}, {1}, {2})", "where", dtype)


# ---------------------------------------------------------------------------- Clip

@converter("Clip", attrs=("min", "max"))
def clip(cv, node, a):
    x = node.input[0]
    lo_name, hi_name = _opt(node, 1), _opt(node, 2)
    dtype = cv.dtype(x)
    if cv.opset < 11 or "min" in a or "max" in a:
        lo, hi = a.get("min", -math.inf), a.get("max", math.inf)
    else:
        lo = hi = None
    static_bounds = all(n is None or cv.is_static(n) for n in (lo_name, hi_name))
    if static_bounds:
        if lo_name:
            lo = cv.static[lo_name].reshape(-1)[0].item()
        if hi_name:
            hi = cv.static[hi_name].reshape(-1)[0].item()
        if cv.is_static(x):
            v = cv.static[x]
            cv.static[node.output[0]] = np.clip(v, lo, hi).astype(v.dtype) \
                if lo is not None or hi is not None else v
            return
        if dtype == "f32":
            t = cv.tensor(x)
            lo = -math.inf if lo is None else lo
            hi = math.inf if hi is None else hi
            cv.call(node.output[0], "clip", [t], t.shape, f"lo={T.lit(lo)}, hi={T.lit(hi)}")
            return
    _need(cv, node, dtype, FLOATS + INTS)
    names, expr = [x], "{0}"
    for bound, name, fn in ((lo, lo_name, "max"), (hi, hi_name, "min")):
        if name:
            names.append(name)
            expr = f"{fn}({expr}, {{{len(names) - 1}}})"
        elif bound is not None and not math.isinf(bound):
            expr = f"{fn}({expr}, {T.lit(bound, dtype)})"
    if len(names) == 1 and expr == "{0}":
        cv.alias(node.output[0], x)
        return
    _emit(cv, node.output[0], names, expr, "clip")


# ---------------------------------------------------------------------------- bitwise

_BITWISE = {"BitwiseAnd": "bitand", "BitwiseOr": "bitor", "BitwiseXor": "bitxor",
            "BitwiseNot": "bitnot"}


@converter(*_BITWISE, "BitShift", attrs=("direction",))
def bitwise(cv, node, a):
    from ..lowering.bitwise import FUNCTIONS
    if node.op_type == "BitShift":
        direction = text(a.get("direction", b""))
        if direction not in ("LEFT", "RIGHT"):
            raise cv.error(f"direction '{direction}' (LEFT and RIGHT are)")
        fn = "shl" if direction == "LEFT" else "shr"
    else:
        fn = _BITWISE[node.op_type]
    names = list(node.input)
    if _all_static(cv, node):
        cv.static[node.output[0]] = np.asarray(
            FUNCTIONS[fn](*(cv.static[n] for n in names))).astype(cv.static[names[0]].dtype)
        return
    _need(cv, node, cv.dtype(names[0]), INTS)
    expr = f"{fn}({', '.join(f'{{{k}}}' for k in range(len(names)))})"
    _emit(cv, node.output[0], names, expr, fn)
