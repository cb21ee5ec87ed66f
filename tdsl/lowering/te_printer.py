"""Print tensor expressions so that they read like the .tdsl source."""
from __future__ import annotations

from . import te
from .dtypes import FLOATS

# Higher binds tighter; matches the grammar's precedence (the AST unparser shares it).
PRECEDENCE = {"or": 1, "and": 2, "not": 3, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
         "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6, "neg": 7}


def format_expr(e: te.Expr, parent: int = 0) -> str:
    text, prec = _fmt(e)
    return f"({text})" if prec < parent else text


def _fmt(e: te.Expr) -> tuple[str, int]:
    atom = 100
    match e:
        case te.Var(name):
            return name, atom
        case te.Const(value, dtype):
            if dtype == "bool":
                return ("true" if value else "false"), atom
            if dtype in FLOATS:
                text = repr(float(value))
                return (text if dtype == "f32" else f"{dtype}({text})"), atom
            return str(value), atom
        case te.Binary(op, a, b) | te.Compare(op, a, b) | te.Logical(op, a, b):
            p = PRECEDENCE[op]
            # left-associative: the right operand needs parentheses at equal precedence
            return f"{format_expr(a, p)} {op} {format_expr(b, p + 1)}", p
        case te.Unary("not", a):
            return f"not {format_expr(a, PRECEDENCE['not'])}", PRECEDENCE["not"]
        case te.Unary(op, a):
            return f"-{format_expr(a, PRECEDENCE['neg'] + 1)}", PRECEDENCE["neg"]
        case te.Select(c, t, f):
            return f"select({format_expr(c)}, {format_expr(t)}, {format_expr(f)})", atom
        case te.Cast(a, dtype):
            return f"{dtype}({format_expr(a)})", atom
        case te.Intrinsic(name, args):
            return f"{name}({', '.join(format_expr(a) for a in args)})", atom
        case te.Load(tensor, indices):
            if not indices:
                return tensor.name, atom
            return f"{tensor.name}[{', '.join(format_expr(i) for i in indices)}]", atom
        case te.Reduce(combiner, body, axes):
            ax = ", ".join(f"{a.var.name}: {format_expr(a.extent)}" for a in axes)
            return f"{combiner}[{ax}]({format_expr(body)})", atom
    raise AssertionError(f"unknown expression {type(e).__name__}")


def format_tensor_type(t: te.Tensor) -> str:
    if not t.shape:
        return t.dtype
    return f"{t.dtype}[{', '.join(format_expr(s) for s in t.shape)}]"


def format_stage(t: te.Tensor) -> str:
    assert isinstance(t.op, te.Compute)
    idx = ", ".join(ax.var.name for ax in t.op.axes)
    lhs = f"{t.name}[{idx}]" if idx else t.name
    return f"{lhs} = {format_expr(t.op.body)}"


def format_function(fn: te.Function) -> str:
    params = ", ".join(f"{t.name}: {format_tensor_type(t)}" for t in fn.inputs)
    outs = ", ".join(f"{t.name}: {format_tensor_type(t)}" for t in fn.outputs)
    lines = [f"op {fn.name}({params}) -> {outs} {{"]
    outputs = set(map(id, fn.outputs))
    for t in fn.stages():
        if id(t) not in outputs:
            lines.append(f"    {t.name}: {format_tensor_type(t)}")
        lines.append(f"    {format_stage(t)}")
    lines.append("}")
    return "\n".join(lines)
