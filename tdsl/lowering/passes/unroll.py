"""Unrolling: small unrolled loops become straight-line copies of their body.

Before: loops of kind UNROLLED (after vectorization, so vector statements are copied).
After: an UNROLLED loop with a constant extent of at most `MAX_EXTENT` whose copies total at
most `MAX_STATEMENTS` statements is replaced by ``body[v := min + 0]; body[v := min + 1];
...`` (the simplifier folds the constants next). Separate statements are what lets a C
compiler keep a register tile's rows in registers (see anchors.md). Any other UNROLLED loop
is kept for the emitter to print with an unroll pragma, as is one whose body allocates (the
copies would declare one buffer several times in one C scope).
"""
from __future__ import annotations


from .. import te
from ..dtypes import INDEX
from ..loop_ir import (Allocate, For, ForKind, LoweredFunc, Seq, rewrite_loops, rewrite_stmt,
                       walk_stmt)

MAX_EXTENT = 32
MAX_STATEMENTS = 512


def run(func: LoweredFunc) -> LoweredFunc:
    return rewrite_loops(func, ForKind.UNROLLED, unroll_loop)


def unroll_loop(loop: For):
    if not isinstance(loop.extent, te.Const):
        return None
    n = int(loop.extent.value)
    stmts = list(walk_stmt(loop.body))
    if n > MAX_EXTENT or n * len(stmts) > MAX_STATEMENTS or \
            any(isinstance(s, Allocate) for s in stmts):
        return None
    copies = []
    for k in range(n):
        value = te.Binary("+", loop.min, te.Const(k, INDEX), INDEX)
        copies.append(rewrite_stmt(loop.body, expr=lambda e, v=value:
                                   te.substitute(e, {loop.var: v})))
    return Seq(tuple(copies))
