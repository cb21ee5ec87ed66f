"""AST -> .tdsl text. Parsing the output gives back an equal AST (spans aside)."""
from __future__ import annotations

from ..lowering.te_printer import PRECEDENCE as _PREC
from . import ast

_ATOM = 100


def expr(node, parent: int = 0) -> str:
    text, prec = _expr(node)
    return f"({text})" if prec < parent else text


def _expr(node) -> tuple[str, int]:
    match node:
        case ast.Number(t):
            return t, _ATOM
        case ast.Bool(v):
            return ("true" if v else "false"), _ATOM
        case ast.String(v):
            return f'"{v}"', _ATOM
        case ast.Name(n):
            return n, _ATOM
        case ast.Member(b, a):
            return f"{b}.{a}", _ATOM
        case ast.PackIndex(n) | ast.PackDim(n):
            return f"*{n}", _ATOM
        case ast.Index(t, idx):
            return f"{t}[{', '.join(expr(i) for i in idx)}]", _ATOM
        case ast.Axis(n, ext):
            return (n if ext is None else f"{n}: {expr(ext)}"), _ATOM
        case ast.Reduce(kind, axes, body):
            return f"{kind}[{', '.join(expr(a) for a in axes)}]({expr(body)})", _ATOM
        case ast.Call(f, args, kwargs):
            return f"{f}({_args(args, kwargs)})", _ATOM
        case ast.Unary("not", x):
            return f"not {expr(x, _PREC['not'])}", _PREC["not"]
        case ast.Unary(_, x):
            return f"-{expr(x, _PREC['neg'])}", _PREC["neg"]
        case ast.Binary(op, l, r):
            p = _PREC[op]
            # comparisons don't chain, so both sides need parentheses at equal precedence
            left = p + 1 if p == 4 else p
            return f"{expr(l, left)} {op} {expr(r, p + 1)}", p
    raise AssertionError(f"can't unparse {type(node).__name__}")


def _args(args, kwargs) -> str:
    text = ", ".join(expr(a) for a in args)
    if kwargs:
        text += "; " + ", ".join(f"{k}={expr(v)}" for k, v in kwargs)
    return text


def type_text(t: ast.TensorType) -> str:
    if t.dims is None:
        return t.dtype
    return f"{t.dtype}[{', '.join(expr(d) for d in t.dims)}]"


def signature(op: ast.OpDef) -> str:
    params = ", ".join(f"{p.name}: {type_text(p.type)}" for p in op.params)
    attrs = ", ".join(f"{a.name}: {a.kind}" + (f" = {expr(a.default)}" if a.default else "")
                      for a in op.attrs)
    outs = ", ".join(f"{p.name}: {type_text(p.type)}" for p in op.outputs)
    if len(op.outputs) > 1:
        outs = f"({outs})"
    return f"{op.name}({params}{'; ' + attrs if attrs else ''}) -> {outs}"


def graph_signature(g: ast.GraphDef) -> str:
    """``graph mlp(x: f32[B, 784]) -> y: f32[B, 10]; params w1: f32[784, 128], b1: f32[128]``
    (the weights its ``param`` statements declare, in source order)."""
    weights = ", ".join(f"{s.name}: {type_text(s.type)}" for s in g.body
                        if isinstance(s, ast.GraphParam))
    return _graph_head(g) + (f"; params {weights}" if weights else "")


def _graph_head(g: ast.GraphDef) -> str:
    ps = ", ".join(f"{p.name}: {type_text(p.type)}" for p in g.params)
    outs = ", ".join(f"{p.name}: {type_text(p.type)}" for p in g.outputs)
    if len(g.outputs) > 1:
        outs = f"({outs})"
    return f"graph {g.name}({ps}) -> {outs}"


def module(m: ast.Module) -> str:
    return "\n\n".join(item(i) for i in m.items) + "\n"


def item(node) -> str:
    match node:
        case ast.Import(target):
            return f"import {target}" if target == "std" else f'import "{target}"'
        case ast.OpDef():
            body = "\n".join("    " + statement(s) for s in node.body)
            return f"op {signature(node)} {{\n{body}\n}}"
        case ast.ScheduleDef(op, target, name, body):
            head = f"schedule {op} for {target}" + ("" if name == "default" else f" as {name}")
            return head + " {\n" + _block(body, "    ") + "\n}"
        case ast.GraphDef(body=body):
            lines = "\n".join("    " + statement(s) for s in body)
            return f"{_graph_head(node)} {{\n{lines}\n}}"
    raise AssertionError(f"can't unparse {type(node).__name__}")


def statement(node) -> str:
    match node:
        case ast.Decl(name, t):
            return f"{name}: {type_text(t)}"
        case ast.GraphParam(name, t):
            return f"param {name}: {type_text(t)}"
        case ast.Stage(t, idx, e):
            lhs = f"{t}[{', '.join(expr(i) for i in idx)}]" if idx else t
            return f"{lhs} = {expr(e)}"
        case ast.CallStage(targets, call):
            return f"{', '.join(targets)} = {expr(call)}"
        case ast.KnobDecl(name, choices, default, _, generator):
            d = f" = {expr(default)}" if default is not None else ""
            if generator is not None:
                return f"knob {name} in {expr(generator)}{d}"
            return f"knob {name} in [{', '.join(expr(c) for c in choices)}]{d}"
        case ast.SchedCall(targets, func, args, kwargs):
            lhs = f"{', '.join(targets)} = " if targets else ""
            return f"{lhs}{func}({_args(args, kwargs)})"
        case ast.SchedRequire(cond):
            return f"require {expr(cond)}"
    raise AssertionError(f"can't unparse {type(node).__name__}")


def _block(body, indent: str) -> str:
    """Schedule statements, one a line; an ``if`` spans several."""
    lines = []
    for s in body:
        if isinstance(s, ast.SchedIf):
            inner = indent + "    "
            lines.append(f"{indent}if {expr(s.cond)} {{\n{_block(s.then, inner)}\n{indent}}}"
                         + (f" else {{\n{_block(s.orelse, inner)}\n{indent}}}"
                            if s.orelse else ""))
        else:
            lines.append(indent + statement(s))
    return "\n".join(lines)
