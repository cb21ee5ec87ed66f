"""Simplification of a loop program, in context.

Before: any loop IR. After: the same program with every expression simplified by
`tdsl.lowering.arith.simplify.simplify` given the ranges of the enclosing loops and the facts of
the enclosing conditions (so ``(io * 4 + ii) // 4 -> io`` inside ``for ii in [0, 4)``), and:

- a condition (or one conjunct of it) proven true or false is folded (``if true: s -> s``),
- a loop of extent 0 disappears; a serial, vectorized or unrolled loop of extent 1 becomes
  its body with the variable replaced by the loop's min,
- empty sequences and empty allocations disappear, nested sequences are flattened.

Parallel and thread-bound loops of extent 1 are kept (the emitter may rely on them); a
parallel one's variable is replaced by its min in the body all the same.
"""
from __future__ import annotations

import dataclasses

from .. import te
from ..arith.prover import Ctx, bounds, conjoin, conjuncts, prove
from ..arith.simplify import simplify
from ..loop_ir import (Allocate, Barrier, Evaluate, For, ForKind, If, LetStmt, LoweredFunc,
                       Prefetch, Seq, Stmt, Store, rewrite_stmt)

EMPTY = Seq(())


def run(func: LoweredFunc) -> LoweredFunc:
    body = stmt(func.body, Ctx())
    return dataclasses.replace(func, body=body if body is not None else EMPTY)


def expr(e: te.Expr, ctx: Ctx) -> te.Expr:
    return simplify(e, lambda x: bounds(x, ctx))


def cond(c: te.Expr, ctx: Ctx) -> te.Expr:
    """Drop conjuncts proven true; the whole is false if one is proven false."""
    c = expr(c, ctx)
    kept = []
    for part in conjuncts(c):
        p = prove(part, ctx)
        if p is False:
            return te.Const(False, "bool")
        if p is not True:
            kept.append(part)
    return conjoin(kept)


def _absorb_guard(var, mn, ext, body):
    """``for v in [m, m+E): if v < K and c: s`` -> ``for v in [m, K): if c: s`` when the new
    extent is a smaller constant (e.g. a split of an axis shorter than the factor)."""
    if not (isinstance(body, If) and body.orelse is None and isinstance(mn, te.Const)
            and isinstance(ext, te.Const)):
        return None
    for part in conjuncts(body.cond):
        if isinstance(part, te.Compare) and part.op == "<" and part.a == var \
                and isinstance(part.b, te.Const) and part.b.value - mn.value < ext.value:
            rest = conjoin([x for x in conjuncts(body.cond) if x is not part])
            then = body.then if rest == te.Const(True, "bool") else If(rest, body.then)
            return te.Const(max(0, part.b.value - mn.value), ext.dtype), then
    return None


def substitute_stmt(s: Stmt, mapping: dict) -> Stmt:
    return rewrite_stmt(s, expr=lambda e: te.substitute(e, mapping))


def stmt(s: Stmt, ctx: Ctx) -> Stmt | None:
    """The simplified statement, or None when it does nothing."""
    match s:
        case For(var, mn, ext, kind, body, tag):
            mn, ext = expr(mn, ctx), expr(ext, ctx)
            hi = bounds(ext, ctx)[1]
            if hi is not None and hi <= 0:
                return None
            keep = kind in (ForKind.PARALLEL, ForKind.THREAD_BINDING, ForKind.VTHREAD)
            if ext == te.Const(1, ext.dtype):
                if not keep:
                    return stmt(substitute_stmt(body, {var: mn}), ctx)
                if kind == ForKind.PARALLEL:
                    # the loop stays, its one value goes into the body: a register tile's
                    # index `256 * nf` becomes a constant, which the printer needs to name it
                    body = substitute_stmt(body, {var: mn})
            body = stmt(body, ctx.with_loop(var, mn, ext))
            if body is None:
                return None
            tighter = _absorb_guard(var, mn, ext, body)
            if tighter is not None:
                return stmt(For(var, mn, tighter[0], kind, tighter[1], tag), ctx)
            return For(var, mn, ext, kind, body, tag)
        case If(c, then, orelse):
            c = cond(c, ctx)
            if isinstance(c, te.Const):
                branch = then if c.value else orelse
                return None if branch is None else stmt(branch, ctx)
            then = stmt(then, ctx.with_cond(c))
            orelse = None if orelse is None else stmt(orelse, ctx.with_cond(c, False))
            if then is None and orelse is None:
                return None
            if then is None:
                return If(te.Unary("not", c, "bool"), orelse)
            return If(c, then, orelse)
        case Seq(stmts):
            out = []
            for x in stmts:
                y = stmt(x, ctx)
                if y is not None:
                    out.extend(y.stmts if isinstance(y, Seq) else [y])
            return None if not out else (out[0] if len(out) == 1 else Seq(tuple(out)))
        case Store(buf, indices, value, pred):
            if pred is not None:
                pred = cond(pred, ctx)
                if pred == te.Const(False, "bool"):
                    return None
                pred = None if pred == te.Const(True, "bool") else pred
            return Store(buf, tuple(expr(i, ctx) for i in indices), expr(value, ctx), pred)
        case LetStmt(var, value, body):
            value = expr(value, ctx)
            body = stmt(body, ctx.with_point(var, value))
            return None if body is None else LetStmt(var, value, body)
        case Allocate(buf, body):
            body = stmt(body, ctx)
            return None if body is None else Allocate(buf, body)
        case Evaluate(value):
            return Evaluate(expr(value, ctx))
        case Prefetch(buf, index):
            return Prefetch(buf, expr(index, ctx))
        case Barrier():
            return s
    raise AssertionError(f"unknown statement {type(s).__name__}")
