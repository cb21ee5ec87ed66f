"""The in-bounds proof: every access is proven inside its buffer, or guarded.

Before: multi-dimensional accesses (run before flattening: per-dimension facts such as
``i.o * 4 + i.i < 7`` from a tail guard match the index ``i.o * 4 + i.i`` directly).
After: for every `BufferLoad` and `Store` and each dimension ``d``, ``0 <= index[d] <
shape[d]`` is proven from the ranges of the enclosing loops and the facts of the enclosing
conditions (an `If`, a `Select` branch, the left side of ``and``), or else:

- a store runs under ``if <the unproven bounds>``;
- a load becomes ``select(<unproven bounds>, load, 0)`` with the load's ``predicate`` set
  to the same condition (the select is lazy, so the load is never made out of bounds);
- a load whose index depends on data (a gather) becomes ``select(<bounds>, load,
  ReadFault(k))``: outside its buffer it fails the call, as in the reference, with the
  message ``attrs["read_faults"][k]``. (The other reads' regions are checked before the call
  by `read_regions`: what the guards catch there is over-computation of a schedule.)

So no access is ever out of bounds, and a correct lowering pays nothing for it: the guards
appear only where the prover is weaker than the program. ``attrs["unproven_accesses"]``
counts them (tests assert it is 0 where it should be).
"""
from __future__ import annotations

import dataclasses

from .. import te
from ..arith.prover import Ctx, conjoin, prove
from ..dtypes import INDEX
from ..loop_ir import (Allocate, BufferLoad, Evaluate, For, If, LetStmt, LoweredFunc,
                       ReadFault, Seq, Stmt, Store)
from ..loop_printer import format_expr
from .flatten import alloc_size


def run(func: LoweredFunc) -> LoweredFunc:
    checker = _Checker()
    body = checker.stmt(func.body, Ctx())
    attrs = {**func.attrs, "unproven_accesses": checker.unproven,
             "read_faults": tuple(checker.faults)}
    return dataclasses.replace(func, body=body, attrs=attrs)


def _conds(buf, indices) -> list[te.Expr]:
    if len(indices) == 1 and len(buf.shape) != 1:      # already flat
        dims = [alloc_size(buf)]
    else:
        dims = list(buf.shape)
    out = []
    for i, n in zip(indices, dims):
        out += [te.Compare(">=", i, te.Const(0, INDEX)), te.Compare("<", i, n)]
    return out


class _Checker:
    def __init__(self):
        self.unproven = 0
        self.faults: list[str] = []

    def unproved(self, buf, indices, ctx: Ctx) -> list[te.Expr]:
        if indices and any("x" in i.dtype for i in indices):
            return []          # vector indices: this pass runs before vectorization
        out = [c for c in _conds(buf, indices) if prove(c, ctx) is not True]
        self.unproven += bool(out)
        return out

    def outside(self, load: BufferLoad) -> te.Expr:
        """The value of ``load`` outside its buffer: 0, or a fault for a gather."""
        if not any(isinstance(x, BufferLoad) for i in load.indices for x in te.walk(i)):
            return te.const(0, load.dtype)
        dims = ", ".join(format_expr(d) for d in load.buffer.shape)
        self.faults.append(f"index out of bounds: {format_expr(load)} reads outside "
                           f"{load.buffer.name}, whose shape is [{dims}]")
        return ReadFault(len(self.faults) - 1, load.dtype)

    def expr(self, e: te.Expr, ctx: Ctx) -> te.Expr:
        match e:
            case te.Select(c, t, f, dt):
                return te.Select(self.expr(c, ctx), self.expr(t, ctx.with_cond(c)),
                                 self.expr(f, ctx.with_cond(c, False)), dt)
            case te.Logical("and", a, b):
                return te.Logical("and", self.expr(a, ctx), self.expr(b, ctx.with_cond(a)))
            case te.Logical("or", a, b):
                return te.Logical("or", self.expr(a, ctx),
                                  self.expr(b, ctx.with_cond(a, False)))
            case BufferLoad(buf, indices, dt, pred):
                indices = tuple(self.expr(i, ctx) for i in indices)
                load = BufferLoad(buf, indices, dt, pred)
                bad = self.unproved(buf, indices, ctx)
                if not bad:
                    return load
                guard = conjoin(bad)
                return te.Select(guard, dataclasses.replace(load, predicate=guard),
                                 self.outside(load), dt)
        if isinstance(e, (te.Var, te.Const)):
            return e
        changes = {}
        for f in dataclasses.fields(e):
            v = getattr(e, f.name)
            if isinstance(v, te.Expr):
                nv = self.expr(v, ctx)
            elif isinstance(v, tuple) and v and isinstance(v[0], te.Expr):
                nv = tuple(self.expr(x, ctx) for x in v)
            else:
                continue
            if nv is not v:
                changes[f.name] = nv
        return dataclasses.replace(e, **changes) if changes else e

    def stmt(self, s: Stmt, ctx: Ctx) -> Stmt:
        match s:
            case For(var, mn, ext, kind, body, tag):
                return For(var, mn, ext, kind, self.stmt(body, ctx.with_loop(var, mn, ext)), tag)
            case If(c, then, orelse):
                return If(self.expr(c, ctx), self.stmt(then, ctx.with_cond(c)),
                          None if orelse is None else
                          self.stmt(orelse, ctx.with_cond(c, False)))
            case Seq(stmts):
                return Seq(tuple(self.stmt(x, ctx) for x in stmts))
            case Store(buf, indices, value, pred):
                inner = ctx if pred is None else ctx.with_cond(pred)
                indices = tuple(self.expr(i, inner) for i in indices)
                out = Store(buf, indices, self.expr(value, inner), pred)
                bad = self.unproved(buf, indices, inner)
                return If(conjoin(bad), out) if bad else out
            case LetStmt(var, value, body):
                return LetStmt(var, self.expr(value, ctx),
                               self.stmt(body, ctx.with_point(var, value)))
            case Allocate(buf, body):
                return Allocate(buf, self.stmt(body, ctx))
            case Evaluate(value):
                return Evaluate(self.expr(value, ctx))
        return s
