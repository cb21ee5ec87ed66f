"""Barrier insertion (GPU): shared memory is written by some threads and read by others, so
a block barrier must separate the two, and nobody writes a barrier by hand.

Before: a GPU loop program (thread-bound loops, buffers in ``shared`` scope written by
cooperative loads computed at a consumer's loop), no `Barrier` nodes.
After:

- in program order, a `Barrier` stands before the first statement that reads a shared
  buffer written since the last barrier (read after write), or writes one read or written
  since then (write after read/write). It goes at the outermost statement of the sequence
  that touches the buffer, never inside a loop that only reads;
- a serial loop ends its body with a barrier when the next iteration could otherwise
  write a shared buffer this one read since the last barrier, or read one it wrote (a
  cooperative load's own loop, which only writes, needs none);
- every thread reaches every barrier: a guard (``If``) around statements holding a
  barrier is pushed below it, onto the statements that compute (``if c {A; sync; B}``
  becomes ``if c {A}; sync; if c {B}``). Statements that write shared memory lose such a
  guard: a cooperative load fills the tile for every thread of the block, and its own
  accesses are guarded by their own bounds (the in-bounds pass runs after this one).

Thread-bound loops and allocations are transparent: they are not loops on a GPU.
"""
from __future__ import annotations

import dataclasses

from .. import te
from ..device import accesses
from ..loop_ir import (Allocate, Barrier, For, ForKind, If, LetStmt, LoweredFunc, Seq, Stmt,
                       walk_stmt)


def run(func: LoweredFunc) -> LoweredFunc:
    body, _ = _sync(func.body, _State())
    body = _lift_guards(body)
    return dataclasses.replace(func, body=body)


class _State:
    """Shared buffers (by id) read and written since the last barrier."""
    def __init__(self, read=(), written=()):
        self.read, self.written = set(read), set(written)

    def hazard(self, reads: set, writes: set) -> bool:
        return bool(reads & self.written or writes & (self.read | self.written))

    def union(self, other: "_State") -> "_State":
        return _State(self.read | other.read, self.written | other.written)


def _shared(s: Stmt) -> tuple[set, set]:
    reads, writes = accesses(s)
    return ({k for k, b in reads.items() if b.scope == "shared"},
            {k for k, b in writes.items() if b.scope == "shared"})


def _transparent(s: Stmt) -> bool:
    return isinstance(s, (Seq, Allocate, LetStmt)) or \
        (isinstance(s, For) and s.kind is ForKind.THREAD_BINDING)


def _sync(s: Stmt, st: _State) -> tuple[Stmt, _State]:
    """``s`` with barriers, and the state after it."""
    if isinstance(s, Seq):
        out = []
        for child in s.stmts:
            if not _transparent(child):
                reads, writes = _shared(child)
                if st.hazard(reads, writes):
                    out.append(Barrier())
                    st = _State()
            child, st = _sync(child, st)
            out.append(child)
        return Seq(tuple(out)), st
    if _transparent(s):
        body, st = _sync(s.body, st)
        return dataclasses.replace(s, body=body), st
    reads, writes = _shared(s)
    if not reads and not writes:
        return s, st
    if isinstance(s, For):
        body, end = _sync(s.body, _State())
        # carried: the next iteration writes what this one read, or reads what it wrote
        if writes & end.read or reads & end.written:
            body = Seq((body, Barrier()))
            return dataclasses.replace(s, body=body), _State()
        return dataclasses.replace(s, body=body), st.union(end)
    if isinstance(s, If):
        then, a = _sync(s.then, _State())
        orelse, b = (None, _State()) if s.orelse is None else _sync(s.orelse, _State())
        return dataclasses.replace(s, then=then, orelse=orelse), st.union(a).union(b)
    return s, st.union(_State(reads, writes))


def _has_barrier(s: Stmt) -> bool:
    return any(isinstance(x, Barrier) for x in walk_stmt(s))


def _lift_guards(s: Stmt) -> Stmt:
    """Push every guard that holds a barrier below it (see the module docstring)."""
    if isinstance(s, If) and _has_barrier(s.then):
        assert s.orelse is None or not _has_barrier(s.orelse), "a barrier in an else branch"
        return _push(s.cond, _lift_guards(s.then))
    if isinstance(s, Seq):
        return Seq(tuple(_lift_guards(c) for c in s.stmts))
    if isinstance(s, (Allocate, LetStmt, For)):
        return dataclasses.replace(s, body=_lift_guards(s.body))
    return s


def _push(cond: te.Expr, s: Stmt) -> Stmt:
    """A statement equal to ``if cond { s }`` in what it computes, with ``cond`` below every
    barrier (``cond`` does not depend on the loops it is pushed into: it was outside them)."""
    if isinstance(s, Barrier):
        return s
    if not _has_barrier(s):
        return s if _shared(s)[1] else If(cond, s)
    if isinstance(s, Seq):
        return Seq(tuple(_push(cond, c) for c in s.stmts))
    if isinstance(s, (Allocate, LetStmt, For)):
        return dataclasses.replace(s, body=_push(cond, s.body))
    if isinstance(s, If):
        return _push(cond, _push(s.cond, s.then))
    return If(cond, s)
