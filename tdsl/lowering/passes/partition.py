"""Loop partition for tails that stop vectorization.

Before: a split of ``j`` by ``f`` that may not divide ``N`` leaves a guard
``j.o * f + j.i < N`` inside the vectorized ``j.i`` loop, so the loop body is not
straight-line and cannot become vector code.
After: the loop over ``j.o`` (any loop enclosing the vectorized one whose variable appears
in the guard with coefficient ``f``, the rest of the guard's left side ranging over
``[0, f)``) is split at ``P == N // f``::

    for j.o in [0, P):      ...body without the guard...     # j.o*f + j.i <= P*f - 1 < N
    for j.o in [P, E):      ...body with the guard...        # the tail

An unrolled loop of constant extent (a register tile's) is not split, which would make its
extent a value of the sizes and its copies a loop: it becomes ``if P >= E: the loop without
the guard, else: the loop as it was``.

Only guards that mention a vectorized or an unrolled loop's variable are partitioned on: the
first keep a loop from becoming vector code, the second keep a register tile from being
straight-line code (a matmul tile of 12 rows over 1024 rows has its last rows guarded, and
those guards would sit in the hot reduction loop of every tile). Elsewhere a guard costs a
compare per iteration, not a lost vectorization. Every guard with the same split point on the
loop goes at once (the tile's initialisation, its reduction and its store each have one). After this pass, run the
simplifier: the tail of a constant-extent loop usually has one iteration.
"""
from __future__ import annotations

import dataclasses

from .. import te
from ..arith.linear import Linear, linear
from ..arith.prover import Ctx, bounds, conjoin, conjuncts, prove
from ..arith.simplify import simplify
from ..dtypes import INDEX
from ..loop_ir import (Barrier, For, ForKind, If, LoweredFunc, Seq, Stmt, rewrite_stmt,
                       walk_stmt)


def run(func: LoweredFunc) -> LoweredFunc:
    return dataclasses.replace(func, body=_visit(func.body))


def _visit(s: Stmt) -> Stmt:
    """Outermost loops first: a guard on ``jl + 8*jv + 16*jp < N`` splits ``jp`` into full
    tiles and one tail tile, so the full tiles' ``jv`` keeps its constant extent and stays
    a register tile; split at ``jv`` first, every tile's ``jv`` would get an extent
    computed from ``N`` and could not be unrolled (what made a matmul built without shapes
    run scalar). The tail's own loop is not split again on the guards it keeps."""
    def pre(n):
        if not isinstance(n, For):
            return None
        parts = _partition(n)
        if parts is None:
            return None
        if isinstance(parts, If):
            return If(parts.cond, _visit(parts.then),
                      dataclasses.replace(n, body=_visit(n.body)))
        main, tail = parts.stmts
        return Seq((_visit(main), dataclasses.replace(tail, body=_visit(tail.body))))
    return rewrite_stmt(s, pre=pre)


def _candidates(loop: For):
    """(conjunct, split point) pairs for guards below ``loop`` that mention a vectorized
    or unrolled loop variable and have the shape ``loop.var * f + r < B`` with ``0 <= r < f``."""
    out = []

    def scan(s: Stmt, inner: list, vec: set):
        match s:
            case For(var, mn, ext, kind, body, _):
                hot = kind in (ForKind.VECTORIZED, ForKind.UNROLLED)
                scan(body, inner + [(var, mn, ext)], vec | {var} if hot else vec)
            case If(c, then, orelse):
                for part in conjuncts(c):
                    if vec & te.free_vars(part):
                        p = _split_point(part, loop.var, inner)
                        if p is not None:
                            out.append((part, p))
                scan(then, inner, vec)
                if orelse is not None:
                    scan(orelse, inner, vec)
            case _:
                for f in dataclasses.fields(s):
                    v = getattr(s, f.name)
                    if isinstance(v, Stmt):
                        scan(v, inner, vec)
                    elif isinstance(v, tuple):
                        for x in v:
                            if isinstance(x, Stmt):
                                scan(x, inner, vec)
    scan(loop.body, [], set())
    return out


def _split_point(c: te.Expr, v: te.Var, inner: list) -> te.Expr | None:
    if not (isinstance(c, te.Compare) and c.op == "<" and c.a.dtype == INDEX):
        return None
    lin = linear(simplify(c.a)) - linear(simplify(c.b))     # guard: lin < 0
    f = lin.coeff(v)
    if f <= 0:
        return None
    inner_vars = {w for w, _, _ in inner}
    r, rest = Linear(), Linear({}, lin.const)
    for m, k in lin.terms.items():
        if m == (v,):
            continue
        fv = set().union(*(te.free_vars(a) for a in m))
        if fv & inner_vars:
            if not fv <= inner_vars:
                return None
            r = r + Linear({m: k})
        else:
            if v in fv:
                return None
            rest = rest + Linear({m: k})
    ctx = Ctx()
    for w, mn, ext in inner:
        ctx = ctx.with_loop(w, mn, ext)
    lo, hi = bounds(r.to_expr(), ctx)
    if lo is None or hi is None or lo < 0 or hi >= f:
        return None
    # v*f + r + rest < 0 for every r in [0, f) iff v < (-rest) // f
    return simplify(te.Binary("//", rest.scale(-1).to_expr(), te.Const(f, INDEX), INDEX))


def _partition(loop: For) -> Seq | If | None:
    # a thread-bound loop is each thread's index, its extent the launch's: not split; nor a
    # loop holding a barrier (GPU), whose split point could differ between the threads that
    # must all reach the barrier
    if loop.kind in (ForKind.VECTORIZED, ForKind.THREAD_BINDING, ForKind.VTHREAD) or \
            any(isinstance(x, Barrier) for x in walk_stmt(loop.body)):
        return None
    cands = _candidates(loop)
    if not cands:
        return None
    p = cands[0][1]
    parts = {part for part, q in cands if q == p}
    mn, end = loop.min, simplify(te.Binary("+", loop.min, loop.extent, INDEX))
    ctx = Ctx()
    inside = prove(te.Logical("and", te.Compare("<=", mn, p), te.Compare("<=", p, end)), ctx)
    if not inside:     # clamp the split point into the loop's range
        p = simplify(te.Intrinsic("max", (mn, te.Intrinsic("min", (p, end), INDEX)), INDEX))

    def drop(n):
        if isinstance(n, If):
            kept = [x for x in conjuncts(n.cond) if x not in parts]
            if len(kept) != len(conjuncts(n.cond)):
                return If(conjoin(kept), n.then, n.orelse)
        return None
    main_body = rewrite_stmt(loop.body, post=drop)
    if loop.kind is ForKind.UNROLLED and isinstance(loop.extent, te.Const):
        # a register tile's loop keeps its constant extent (split at a point computed from
        # the sizes it could not be unrolled): the whole tile is tested instead, once, and
        # unswitch takes that test out of the reduction around it
        return If(te.Compare(">=", p, end), dataclasses.replace(loop, body=main_body), loop)
    main = dataclasses.replace(loop, extent=simplify(te.Binary("-", p, mn, INDEX)),
                               body=main_body)
    tail = dataclasses.replace(loop, min=p, extent=simplify(te.Binary("-", end, p, INDEX)))
    return Seq((main, tail))
