"""Software prefetch: the schedule's `Prefetch` directives become `Prefetch` statements.

Before: the nests as build_nests made them (the first pass: `partition` would cut the
loops into pieces, and simplification drop those of one iteration);
``func.attrs["prefetch"]`` holds, per directive, ``(tensor, v, step, at_vars, extents)``
from build_nests: the outer axis is the loop ``v`` (step 1) or an axis of a fuse,
``v // step`` (``% extent``); ``at_vars`` are the loops that carry the prefetches;
``extents`` every loop's extent.
After: at the top of the body of each ``at`` loop inside ``v``, a guarded `Prefetch` of one
slice of the cache lines that the next iteration of the outer axis reads of the tensor.

What the next iteration reads is, at ``v + step``, the interval ``[lo, hi]`` of flat
offsets (`flatten.flat_index`) that `relax` bounds each read by over the loops inside
``v`` (a bounding interval: for a hint, a superset of lines costs only bandwidth). Its
``L`` cache lines are spread over the ``T`` iterations that ``at`` makes in one iteration
of the outer axis, in order: one line every ``2^floor(log2(T // L))`` iterations when
``T >= L``, else ``ceil(L / T)`` lines at each. So the data of the next block of work
streams in while the current one runs from cache (the first row tile of a GEMM's panel
block is otherwise bound by memory bandwidth: it needs 128 bytes per 24 FMAs). Where the
counts are not constants (sizes left symbolic) or a read is not affine in the loops, no
prefetch is made: it is a hint, never a change of meaning.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import te
from ..arith.prover import conjoin, relax
from ..arith.simplify import simplify
from ..dtypes import INDEX, to_numpy
from ..loop_ir import (BufferLoad, For, If, LetStmt, LoweredFunc, Prefetch, Seq, Stmt,
                       rewrite_stmt, split_dtype)
from .flatten import alloc_size, flat_index

LINE = 64           # bytes in a cache line (every x86 and Arm core tdsl targets)


def run(func: LoweredFunc) -> LoweredFunc:
    body = func.body
    for tensor, v, step, ats, extents in func.attrs.get("prefetch", ()):
        if not isinstance(step, te.Const):
            continue                        # sizes left symbolic: no counts to slice by
        step = step.value

        def pre(s, tensor=tensor, v=v, step=step, ats=ats, extents=extents):
            if isinstance(s, For) and s.var == v:
                return _in_outer(s, tensor, step, set(ats), extents)
            return None
        body = rewrite_stmt(body, pre=pre)
    return dataclasses.replace(func, body=body)


def _in_outer(loop: For, tensor: str, step: int, ats: set, extents: dict) -> For:
    region = _next_region(loop, tensor, step)
    if region is None:
        return loop
    buf, lo, hi = region
    count = simplify(te.Binary("-", hi, lo, INDEX))
    if not isinstance(count, te.Const):
        return loop
    scalar, lanes = split_dtype(buf.dtype)
    per_line = max(1, LINE // (np.dtype(to_numpy(scalar)).itemsize * lanes))
    # one line more than the interval needs where lo starts inside a line
    lines = (count.value + 1 + per_line - 1) // per_line + 1
    has_next = te.Compare("<", te.Binary("+", loop.var, te.Const(step, INDEX), INDEX),
                          extents[loop.var])

    def place(s, chain):
        """Rebuild ``s`` with the prefetches at the top of each ``at`` loop; ``chain`` the
        loops between ``loop`` and ``s``."""
        if isinstance(s, For):
            inner = chain + [s]
            body = place(s.body, inner)
            if s.var in ats:
                pf = _slices(inner, loop, step, extents, lines, per_line, buf, lo, hi,
                             has_next)
                if pf is not None:
                    body = Seq((pf, body))
            return s if body is s.body else dataclasses.replace(s, body=body)
        changes = {}
        for name in ("body", "then", "orelse"):
            child = getattr(s, name, None)
            if isinstance(child, Stmt):
                new = place(child, chain)
                if new is not child:
                    changes[name] = new
        if isinstance(s, Seq):
            new = tuple(place(x, chain) for x in s.stmts)
            if any(a is not b for a, b in zip(new, s.stmts)):
                changes["stmts"] = new
        return dataclasses.replace(s, **changes) if changes else s

    return dataclasses.replace(loop, body=place(loop.body, []))


def _next_region(loop: For, tensor: str, step: int):
    """(buffer, lo, hi): the flat offsets of ``tensor`` read in the next iteration of the
    outer axis, as expressions of the loops outside ``loop`` and ``loop.var``; None where
    a bound is not affine or the reads' intervals are not a constant apart."""
    bounds, buf = [], None
    inner_vars: set = set()

    def visit(s: Stmt, ranges: dict):
        nonlocal buf
        if isinstance(s, For):
            hi = te.Binary("-", te.Binary("+", s.min, s.extent, INDEX), te.Const(1, INDEX),
                           INDEX)
            inner_vars.add(s.var)
            visit(s.body, {**ranges, s.var: (s.min, simplify(hi))})
            return
        if isinstance(s, LetStmt):
            inner_vars.add(s.var)
        for name in te.field_names(s):
            value = getattr(s, name)
            for x in (value if isinstance(value, tuple) else (value,)):
                if isinstance(x, Stmt):
                    visit(x, ranges)
                elif isinstance(x, te.Expr):
                    for e in te.walk(x):
                        if isinstance(e, BufferLoad) and e.buffer.name == tensor:
                            buf = e.buffer
                            bounds.append(relax(flat_index(buf, e.indices), ranges))

    visit(loop.body, {})
    if not bounds or any(b is None for b in bounds):
        return None
    nxt = {loop.var: te.Binary("+", loop.var, te.Const(step, INDEX), INDEX)}
    los = [simplify(te.substitute(lo, nxt)) for lo, _ in bounds]
    his = [simplify(te.substitute(hi, nxt)) for _, hi in bounds]
    lo, hi = _extreme(los, min), _extreme(his, max)
    if lo is None or hi is None or (te.free_vars(lo) | te.free_vars(hi)) & inner_vars:
        return None
    return buf, lo, hi


def _extreme(exprs: list, pick):
    """The least (``pick=min``) or greatest of expressions a constant apart, or None."""
    best = exprs[0]
    for e in exprs[1:]:
        d = simplify(te.Binary("-", e, best, INDEX))
        if not isinstance(d, te.Const):
            return None
        if pick(d.value, 0) != 0:
            best = e
    return best


def _slices(chain: list, loop: For, step: int, extents: dict, lines: int, per_line: int,
            buf, lo, hi, has_next) -> Stmt | None:
    """The prefetches at the top of the innermost loop of ``chain``: its iteration's
    slice of the ``lines`` lines from ``lo``."""
    lin, total = te.Const(0, INDEX), 1
    if step > 1:                            # the inner axes of the fuse count too
        lin, total = te.Binary("%", loop.var, te.Const(step, INDEX), INDEX), step
    for f in chain:
        extent = extents.get(f.var)
        if not isinstance(extent, te.Const):
            return None                     # a size left symbolic
        lin = te.Binary("+", te.Binary("*", lin, extent, INDEX), f.var, INDEX)
        total *= extent.value

    # the interval may pass the tensor's end (a last block short of whole panels)
    last = te.Binary("-", alloc_size(buf), te.Const(1, INDEX), INDEX)

    def fetch(q, conds):
        index = te.Intrinsic("min", (te.Binary("+", lo, te.Binary(
            "*", q, te.Const(per_line, INDEX), INDEX), INDEX),
            te.Intrinsic("min", (hi, last), INDEX)), INDEX)
        return If(simplify(conjoin([*conds, has_next])), Prefetch(buf, simplify(index)))

    if total >= lines:
        # a power of two, so that the test and the line's number are a mask and a shift in
        # the loop (a division by 5 cost AVX2's 12-FMA GEMM step 13%); the lines are then
        # all fetched before the iterations end
        every = te.Const(1 << ((total // lines).bit_length() - 1), INDEX)
        q = te.Binary("//", lin, every, INDEX)
        return fetch(q, [te.Compare("==", te.Binary("%", lin, every, INDEX),
                                    te.Const(0, INDEX)),
                         te.Compare("<", q, te.Const(lines, INDEX))])
    each = -(-lines // total)
    stmts = []
    for j in range(each):
        q = te.Binary("+", te.Binary("*", lin, te.Const(each, INDEX), INDEX),
                      te.Const(j, INDEX), INDEX)
        stmts.append(fetch(q, [te.Compare("<", q, te.Const(lines, INDEX))]))
    return stmts[0] if len(stmts) == 1 else Seq(tuple(stmts))
