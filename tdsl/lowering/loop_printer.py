"""Print loop IR as an indented loop nest, the way Halide's ``print_loop_nest`` shows it.

    func matmul(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]:
      parallel i.o in [0, 16):
        vectorized j.i in [0, 16):
          C[i, j] = C[i, j] + A[i, k] * B[k, j]

Expressions shared with the tensor-expression IR are printed by `te_printer.format_expr`, so
both levels read alike. The loop-IR-only expression nodes (`BufferLoad`, `Ramp`, `Broadcast`,
`Call`, `AddressOf`) are printed first and stood in for by a `Var` whose name is their text:
`format_expr` prints a `Var` as an atom, so its precedence rules still decide every
parenthesis around them.
"""
from __future__ import annotations

from . import te
from .loop_ir import (AddressOf, Allocate, Barrier, Broadcast, BufferLoad, Call, Evaluate, For,
                      ForKind, If, LetStmt, LoweredFunc, Prefetch, Ramp, ReadFault, Seq, Stmt,
                      Store, ThreadReduce)
from .te_printer import format_expr as _format_te

INDENT = "  "
_LOOP_ONLY = (BufferLoad, Ramp, Broadcast, Call, AddressOf, ReadFault)


def format_expr(e: te.Expr) -> str:
    """One expression of either IR level, with minimal parentheses."""
    return _format_te(te.rewrite(e, _as_atom))


def _as_atom(e: te.Expr) -> te.Expr | None:
    """Replace a loop-IR-only node (whose children are already atoms) by an atom of its text."""
    if not isinstance(e, _LOOP_ONLY):
        return None
    match e:
        case BufferLoad(buffer, indices):
            text = _subscript(buffer.name, indices)
        case Ramp(base, stride, lanes):
            text = f"ramp({_format_te(base)}, {_format_te(stride)}, {lanes})"
        case Broadcast(value, lanes):
            text = f"x{lanes}({_format_te(value)})"
        case Call(name, args):
            text = f"{name}({', '.join(_format_arg(a) for a in args)})"
        case AddressOf(buffer, index):
            text = f"&{buffer.name}[{_format_te(index)}]"
        case ReadFault(fault):
            text = f"read_fault({fault})"
    return te.Var(text)


def _format_arg(a) -> str:
    return _format_te(a) if isinstance(a, te.Expr) else getattr(a, "name", repr(a))


def _subscript(name: str, indices) -> str:
    if not indices:
        return name
    return f"{name}[{', '.join(format_expr(i) for i in indices)}]"


def _buffer_type(b) -> str:
    if not b.shape:
        return b.dtype
    return f"{b.dtype}[{', '.join(format_expr(s) for s in b.shape)}]"


def format_buffer(b) -> str:
    """``A: f32[M, K]``, as messages about a buffer name it."""
    return f"{b.name}: {_buffer_type(b)}"


def _loop_range(s: For) -> str:
    if isinstance(s.min, te.Const) and s.min.value == 0:
        end = s.extent
    else:
        end = te.Binary("+", s.min, s.extent, s.min.dtype)
    return f"[{format_expr(s.min)}, {format_expr(end)})"


def _lines(s: Stmt, depth: int) -> list[str]:
    pad = INDENT * depth
    match s:
        case Seq(stmts):
            return [line for st in stmts for line in _lines(st, depth)]
        case For(var, _, _, kind, body, tag):
            head = "for" if kind is ForKind.SERIAL else kind.value
            where = f" bound to {tag}" if tag else ""
            return [f"{pad}{head} {var.name} in {_loop_range(s)}{where}:",
                    *_lines(body, depth + 1)]
        case If(cond, then, orelse):
            out = [f"{pad}if {format_expr(cond)}:", *_lines(then, depth + 1)]
            if orelse is not None:
                out += [f"{pad}else:", *_lines(orelse, depth + 1)]
            return out
        case Store(buffer, indices, value, predicate):
            lhs = _subscript(buffer.name, indices) if indices else buffer.name
            guard = f" if {format_expr(predicate)}" if predicate is not None else ""
            return [f"{pad}{lhs} = {format_expr(value)}{guard}"]
        case LetStmt(var, value, body):
            return [f"{pad}let {var.name} = {format_expr(value)}", *_lines(body, depth)]
        case Allocate(buffer, body):
            return [f"{pad}allocate {buffer.name}: {_buffer_type(buffer)} in {buffer.scope}",
                    *_lines(body, depth)]
        case Barrier(scope):
            return [f"{pad}barrier({scope})"]
        case ThreadReduce(buffer, result, combiner, extent, tag):
            return [f"{pad}{result.name}[0] = {combiner} over {tag} of {buffer.name}[0:{extent}]"]
        case Evaluate(value):
            return [f"{pad}{format_expr(value)}"]
        case Prefetch(buffer, index):
            return [f"{pad}prefetch {buffer.name}[{format_expr(index)}]"]
    raise AssertionError(f"unknown statement {type(s).__name__}")


def format_stmt(s: Stmt, depth: int = 0) -> str:
    return "\n".join(_lines(s, depth))


def format_func(f: LoweredFunc) -> str:
    def params(bufs) -> str:
        return ", ".join(f"{b.name}: {_buffer_type(b)}" for b in bufs)

    ins, outs = f.params[:f.num_inputs], f.params[f.num_inputs:]
    sizes = f"  # sizes: {', '.join(v.name for v in f.shape_vars)}" if f.shape_vars else ""
    head = f"func {f.name}({params(ins)}) -> {params(outs)}:{sizes}"
    return "\n".join([head, *_lines(f.body, 1)])
