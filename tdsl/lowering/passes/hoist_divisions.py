"""Hoisting of divisions by sizes: ``x // y`` and ``x % y`` with a divisor that is not a
constant are computed once, where their variables are bound, not in every inner iteration.

Before: a kernel whose sizes are symbolic divides by them in its hot loops: a tile loop fused
over ``(M + 5) // 6`` rows of tiles reads ``blk // ((M + 5) // 6)`` and ``blk % ...`` in
every step of its reduction. The C compiler cannot move those out: floor division is a
helper with branches (a divisor of 0 or -1), and a trapping ``idiv`` is never speculated out
of a loop that may not run, so it stayed in the reduction, one per multiply-add (a matmul
built without shapes ran at a tenth of the speed of one built with them).
After: every such division that is pure index arithmetic (no loads) is bound by a `LetStmt`
at the top of the body of the innermost loop (or let) binding one of its variables, or at
the top of the function when it reads sizes only, and its uses read the variable::

    for blk in ...:                          for blk in ...:
      for k in [0, K):                         let q = blk // ((M + 5) // 6)
        ... A[k + K * (blk // ...)] ...   ->   for k in [0, K):
                                                 ... A[k + K * q] ...

Computing a division where a branch might not have is safe: the helper never traps (a
divisor of 0 gives 0). Divisions by constants are left alone: the C compiler turns them into
multiplications and moves them itself.
"""
from __future__ import annotations

import dataclasses
import itertools

from .. import te
from ..dtypes import INDEX
from ..loop_ir import (BufferLoad, Call, For, LetStmt, LoweredFunc, ReadFault, Stmt,
                       rewrite_stmt, walk_stmt)
from ..te import field_names


def run(func: LoweredFunc) -> LoweredFunc:
    names = (f"{func.name}_q{i}" for i in itertools.count())
    body = _visit(func.body, names)
    return dataclasses.replace(func, body=_bind(body, set(), names))


def _visit(s: Stmt, names) -> Stmt:
    """Inner binders first: a division reading an inner loop's variable is bound there, so
    an outer binder sees only the divisions that are its own."""
    def post(n):
        if isinstance(n, For):
            return dataclasses.replace(n, body=_bind(n.body, {n.var}, names))
        if isinstance(n, LetStmt):
            return dataclasses.replace(n, body=_bind(n.body, {n.var}, names))
        return None
    return rewrite_stmt(s, post=post)


def _bind(body: Stmt, own: set[te.Var], names) -> Stmt:
    """``body`` with its divisions that read ``own`` (or, at the top, sizes only) and
    nothing bound inside ``body`` taken into lets at its top."""
    inner = {n.var for n in walk_stmt(body) if isinstance(n, (For, LetStmt))}
    found: list[te.Expr] = []
    for e in _expressions(body):
        for d in te.walk(e):
            if d not in found and _hoistable(d):
                fv = te.free_vars(d)
                if not fv & inner and (fv & own if own else True):
                    found.append(d)
    if not found:
        return body
    # the smaller first: a division holding another is bound after it, and reads its variable
    found.sort(key=lambda d: sum(1 for _ in te.walk(d)))
    mapping: dict[te.Expr, te.Var] = {}
    for d in found:
        mapping[d] = te.Var(next(names), INDEX)

    def replace(e: te.Expr) -> te.Expr:
        return te.rewrite(e, pre=lambda x: mapping.get(x) if x in mapping else None)
    out = rewrite_stmt(body, expr=replace)
    lets = [(v, te.rewrite(d, pre=lambda x, d=d: mapping.get(x) if x != d and x in mapping
                           else None)) for d, v in mapping.items()]
    for v, value in reversed(lets):
        out = LetStmt(v, value, out)
    return out


def _hoistable(e: te.Expr) -> bool:
    return isinstance(e, te.Binary) and e.op in ("//", "%") and e.dtype == INDEX and \
        not isinstance(e.b, te.Const) and \
        not any(isinstance(x, (te.Load, BufferLoad, Call, ReadFault)) for x in te.walk(e))


def _expressions(s: Stmt):
    """Every expression held by the statements of ``s``."""
    for n in walk_stmt(s):
        for name in field_names(n):
            v = getattr(n, name)
            if isinstance(v, te.Expr):
                yield v
            elif isinstance(v, tuple):
                yield from (x for x in v if isinstance(x, te.Expr))
