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

Thread-bound loops and allocations are transparent: they are not loops on a GPU. Inside
the loops bound to every thread axis a kernel uses, a shared buffer that is only ever
accessed at one index in which each thread variable is a whole component (``P[0, tx]``)
is private to the thread there: its accesses need no barrier among themselves.
"""
from __future__ import annotations

import dataclasses

from .. import te
from ..device import accesses
from ..loop_ir import (Allocate, Barrier, BufferLoad, For, ForKind, If, LetStmt, LoweredFunc,
                       Seq, Stmt, Store, walk_stmt)


def run(func: LoweredFunc) -> LoweredFunc:
    tags = frozenset(s.thread_tag for s in walk_stmt(func.body) if isinstance(s, For)
                     and s.kind is ForKind.THREAD_BINDING
                     and (s.thread_tag or "").startswith("threadIdx"))
    items, _ = _block(_as_list(func.body), _State(), _Ctx(tags, {}, frozenset()))
    return dataclasses.replace(func, body=_lift_guards(_wrap(items)))


class _Ctx:
    """The threadIdx tags the function uses, the enclosing thread loops' variables by tag,
    and the shared buffers (ids) private to the thread here."""
    def __init__(self, tags, threads: dict, private: frozenset):
        self.tags, self.threads, self.private = tags, threads, private

    def enter(self, loop: For) -> "_Ctx":
        if not (loop.thread_tag or "").startswith("threadIdx"):
            return self
        threads = {**self.threads, loop.thread_tag: loop.var}
        if set(threads) != set(self.tags):
            return _Ctx(self.tags, threads, self.private)
        return _Ctx(self.tags, threads, self.private | _private(loop.body, threads.values()))


def _private(body: Stmt, thread_vars) -> frozenset:
    """Shared buffers accessed in ``body`` at a single index holding every thread variable
    as a whole component (so no two threads touch one element)."""
    seen: dict[int, set] = {}
    for s in walk_stmt(body):
        if isinstance(s, Store) and s.buffer.scope == "shared":
            seen.setdefault(id(s.buffer), set()).add(s.indices)
        for f in dataclasses.fields(s):
            v = getattr(s, f.name)
            for x in (v if isinstance(v, tuple) else (v,)):
                if isinstance(x, te.Expr):
                    for e in te.walk(x):
                        if isinstance(e, BufferLoad) and e.buffer.scope == "shared":
                            seen.setdefault(id(e.buffer), set()).add(e.indices)
    return frozenset(k for k, idx in seen.items()
                     if len(idx) == 1 and all(v in next(iter(idx)) for v in thread_vars))


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
    return isinstance(s, (Allocate, LetStmt)) or \
        (isinstance(s, For) and s.kind is ForKind.THREAD_BINDING)


def _as_list(s: Stmt) -> list[Stmt]:
    return list(s.stmts) if isinstance(s, Seq) else [s]


def _wrap(items: list[Stmt]) -> Stmt:
    return items[0] if len(items) == 1 else Seq(tuple(items))


def _block(stmts, st: _State, ctx: _Ctx) -> tuple[list[Stmt], _State]:
    """Statements run in order, with barriers; the state after them. A barrier needed at
    the start of a transparent statement (an allocation, a thread index) goes before it."""
    out = []
    for s in stmts:
        if isinstance(s, Seq):
            items, st = _block(s.stmts, st, ctx)
            out += items
        elif _transparent(s):
            inner = ctx.enter(s) if isinstance(s, For) else ctx
            items, st = _block(_as_list(s.body), st, inner)
            if isinstance(items[0], Barrier) and len(items) > 1:
                out.append(items.pop(0))
            out.append(dataclasses.replace(s, body=_wrap(items)))
        else:
            reads, writes = _shared(s)
            if st.hazard(reads - ctx.private, writes - ctx.private):
                out.append(Barrier())
                st = _State()
            s, st = _sync(s, st, reads, writes, ctx)
            out.append(s)
    return out, st


def _sync(s: Stmt, st: _State, reads: set, writes: set, ctx: _Ctx) -> tuple[Stmt, _State]:
    """A loop, a condition or a leaf, after the barrier before it is decided."""
    if not reads and not writes:
        return s, st
    if isinstance(s, For):
        items, end = _block(_as_list(s.body), _State(), ctx)
        # carried: the next iteration writes what this one read, or reads what it wrote
        shared_w, shared_r = writes - ctx.private, reads - ctx.private
        if shared_w & end.read or shared_r & end.written:
            return dataclasses.replace(s, body=_wrap(items + [Barrier()])), _State()
        return dataclasses.replace(s, body=_wrap(items)), st.union(end)
    if isinstance(s, If):
        then, a = _block(_as_list(s.then), _State(), ctx)
        orelse, b = ([], _State()) if s.orelse is None else \
            _block(_as_list(s.orelse), _State(), ctx)
        return (dataclasses.replace(s, then=_wrap(then), orelse=_wrap(orelse) if orelse
                                    else None), st.union(a).union(b))
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
