"""Unrolling: small unrolled loops become straight-line copies of their body.

Before: loops of kind UNROLLED (after vectorization, so vector statements are copied).
After: an UNROLLED loop with a constant extent of at most `MAX_EXTENT` whose copies total at
most `MAX_STATEMENTS` statements is replaced by ``body[v := min + 0]; body[v := min + 1];
...`` (the simplifier folds the constants next). Separate statements are what lets a C
compiler keep a register tile's rows in registers (see anchors.md). Any other UNROLLED loop
is kept for the emitter to print with an unroll pragma, as is one whose body allocates (the
copies would declare one buffer several times in one C scope). One whose body still holds a
vectorized loop (an extent that is not a constant, so no vector code) becomes a plain loop:
its copies could not be registers, and gcc vectorizes each copied loop on its own (28 of
them in a symbolic-size convolution tile, times the tails, took it over 5 minutes).

What unrolling may produce is bounded: the statements of the function once every unrolled
loop of constant extent is copied out (here or by the C compiler's pragma) may not exceed
`MAX_UNROLLED_STATEMENTS`, or the schedule is refused here, naming the loop, rather than
leaving gcc to work for minutes (a random schedule once took it 605 s).
"""
from __future__ import annotations

import dataclasses

from ...errors import ScheduleError
from .. import te
from ..arith.simplify import simplify
from ..dtypes import INDEX
from ..loop_ir import (Allocate, For, ForKind, LoweredFunc, Seq, Stmt, rewrite_loops,
                       rewrite_stmt, walk_stmt)

MAX_EXTENT = 32
MAX_STATEMENTS = 512
MAX_UNROLLED_STATEMENTS = 1 << 14


def run(func: LoweredFunc) -> LoweredFunc:
    out = rewrite_loops(func, ForKind.UNROLLED, unroll_loop)
    _unrolled_size(out.body, out.name)
    return out


def _unrolled_size(s: Stmt, fn_name: str) -> int:
    """Statements of ``s`` with every constant unrolled loop copied out; a ScheduleError
    past `MAX_UNROLLED_STATEMENTS`."""
    children = [c for c in _children(s)]
    size = 1 + sum(_unrolled_size(c, fn_name) for c in children)
    if isinstance(s, For) and s.kind is ForKind.UNROLLED and isinstance(s.extent, te.Const):
        size = 1 + int(s.extent.value) * (size - 1)
        if size > MAX_UNROLLED_STATEMENTS:
            raise ScheduleError(
                f"In schedule of {fn_name}, unrolling {s.var.name} (extent {s.extent.value}) "
                f"makes {size} statements, more than {MAX_UNROLLED_STATEMENTS} (the C "
                f"compiler would take minutes)",
                hint="unroll an inner loop split off by a small factor, or fewer loops")
    return size


def _children(s: Stmt):
    for name in getattr(s, "__dataclass_fields__", {}):
        v = getattr(s, name)
        if isinstance(v, Stmt):
            yield v
        elif isinstance(v, tuple):
            yield from (x for x in v if isinstance(x, Stmt))


def unroll_loop(loop: For):
    if not isinstance(loop.extent, te.Const):
        return None
    n = int(loop.extent.value)
    stmts = list(walk_stmt(loop.body))
    if any(isinstance(s, For) and s.kind is ForKind.VECTORIZED for s in stmts):
        return dataclasses.replace(loop, kind=ForKind.SERIAL)
    if n > MAX_EXTENT or n * len(stmts) > MAX_STATEMENTS or \
            any(isinstance(s, Allocate) for s in stmts):
        return None
    copies = []
    for k in range(n):
        value = simplify(te.Binary("+", loop.min, te.Const(k, INDEX), INDEX))
        copies.append(rewrite_stmt(loop.body, expr=lambda e, v=value:
                                   _substitute(e, loop.var, v)))
    return Seq(tuple(copies))


def _substitute(e: te.Expr, var: te.Var, value: te.Expr) -> te.Expr:
    """``e[var := value]``, keeping only the taken side of a select whose condition the
    copy decides (``select(e == 0, row0, select(e == 1, row1, ...))`` in a Winograd
    transform): the other sides are never built, where simplifying each copy's dead
    branches bottom-up was a third of that kernel's lowering time."""
    def pre(n):
        if isinstance(n, te.Select) and var in te.free_vars(n.cond):
            cond = simplify(te.substitute(n.cond, {var: value}))
            if isinstance(cond, te.Const):
                return _substitute(n.t if cond.value else n.f, var, value)
        return None
    return te.rewrite(e, lambda n: value if isinstance(n, te.Var) and n == var else None,
                      pre)
