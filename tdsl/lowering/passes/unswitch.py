"""Loop unswitching: tests that do not change inside a loop are taken once, outside it.

Before: a serial loop whose body tests, somewhere inside, conditions that depend on nothing
the loop (or anything inside it) binds, e.g. the last rows of a register tile that may run
past the output, ``if (blk % 86 * 12 + 11 < 1024)``, in every step of a matmul tile's
reduction. Loop partition (partition.py) splits such tails off when the guard is linear in
an outer loop; once the tile loops are fused for the threads (``blk % 86``) it cannot, and
gcc's own unswitching takes one condition at a time and gives up after a few.
After::

    if (c1 && ... && cn) { the loop without those tests }   # every full tile
    else { the loop as it was }                             # the tail tiles

The outermost such serial loop is unswitched, on every invariant test below it at once.
The copy that keeps its tests is not unswitched again (the code grows at most twice per
loop); the fast copy may be, on the tests that remain. Only pure index conditions qualify (no
loads: a buffer may change inside the loop; no read faults: they report an error), and no loop with a barrier inside (a GPU
barrier under a condition that differs between threads would hang the block). A loop of more
than `MAX_STATEMENTS` statements is not copied (its loops inside may be): its tests are a
small share of its work, and copies of copies would leave gcc minutes of work.
"""
from __future__ import annotations

import dataclasses

from .. import te
from ..arith.prover import conjoin, conjuncts
from ..loop_ir import (Barrier, BufferLoad, Call, For, ForKind, If, LetStmt, LoweredFunc,
                       ReadFault, Stmt, rewrite_stmt, walk_stmt)

MAX_STATEMENTS = 2048     # a matmul's register tile loop has about 100


def run(func: LoweredFunc) -> LoweredFunc:
    return dataclasses.replace(func, body=_visit(func.body))


def _visit(s: Stmt) -> Stmt:
    def pre(n):
        if not (isinstance(n, For) and n.kind is ForKind.SERIAL) or \
                sum(1 for _ in walk_stmt(n)) > MAX_STATEMENTS:
            return None
        conds = _invariant_tests(n)
        if not conds:
            return None
        fast = _visit(_drop(n, conds))
        return If(conjoin(list(conds)), fast, n)
    return rewrite_stmt(s, pre=pre)


def _invariant_tests(loop: For) -> tuple[te.Expr, ...]:
    """The conjuncts of the tests inside ``loop`` that nothing inside it can change."""
    bound, tests = {loop.var}, []
    for s in walk_stmt(loop.body):
        match s:
            case Barrier():
                return ()
            case For(var=var) | LetStmt(var=var):
                bound.add(var)
            case If(cond=c):
                tests.extend(conjuncts(c))
    out = []
    for c in tests:
        if c not in out and not te.free_vars(c) & bound and _pure(c):
            out.append(c)
    return tuple(out)


def _pure(c: te.Expr) -> bool:
    return not any(isinstance(e, (te.Load, BufferLoad, Call, ReadFault)) for e in te.walk(c))


def _drop(loop: For, conds: tuple[te.Expr, ...]) -> For:
    """``loop`` with the conjuncts ``conds`` taken as true."""
    def post(n):
        if isinstance(n, If):
            kept = [c for c in conjuncts(n.cond) if c not in conds]
            if len(kept) < len(conjuncts(n.cond)):
                return If(conjoin(kept), n.then, n.orelse) if kept else n.then
        return None
    return rewrite_stmt(loop, post=post)
