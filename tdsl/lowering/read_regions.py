"""The region check: before a kernel runs, every tensor covers the region its algorithm reads.

The front end's checker refuses reads it can prove out of bounds and accepts those it can
prove in bounds; the rest depend on the sizes of a call (``Y[i] = X[i] + Z[i]`` with Z
shorter than X). The reference refuses such a call; a compiled kernel must refuse it too,
not read 0 through its guards. So, as Halide does, the region every read covers is computed
once per call shape from the algorithm (bound inference with the call's sizes substituted,
the conditions of enclosing ``select``/``and``/``or`` as facts) and compared with the
tensor's shape, before anything runs: a per-call cost, never a per-element one.

Reads whose index depends on data (gathers such as ``X[I[i]]``) have no region before the
data is seen; the kernel checks those itself, element by element (`DataDependentRead`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CallError
from . import te
from .arith.prover import Ctx, bounds
from .arith.simplify import simplify
from .dtypes import INDEX


@dataclass(frozen=True)
class Read:
    """One ``Load`` of a function's algorithm, with what encloses it: the loops over its
    stage's axes and reductions (``(var, extent)``, outermost first) and the conditions
    known to hold (``(cond, truth)``) where it is evaluated."""
    stage: str
    load: te.Load
    loops: tuple[tuple[te.Var, te.Expr], ...]
    conds: tuple[tuple[te.Expr, bool], ...]


def reads(fn: te.Function) -> tuple[Read, ...]:
    """Every read of ``fn`` whose index is a function of the loop and shape variables."""
    out: list[Read] = []
    for t in fn.stages():
        loops = tuple((ax.var, ax.extent) for ax in t.op.axes)
        _collect(t.op.body, f"stage '{t.name}' of '{fn.name}'", loops, (), out)
    return tuple(out)


def _collect(e: te.Expr, where: str, loops, conds, out: list) -> None:
    match e:
        case te.Select(c, a, b):
            _collect(c, where, loops, conds, out)
            _collect(a, where, loops, conds + ((c, True),), out)
            _collect(b, where, loops, conds + ((c, False),), out)
            return
        case te.Logical("and" | "or" as op, a, b):
            _collect(a, where, loops, conds, out)
            _collect(b, where, loops, conds + ((a, op == "and"),), out)
            return
        case te.Reduce(_, body, axes):
            for ax in axes:
                _collect(ax.extent, where, loops, conds, out)
            inner = loops + tuple((ax.var, ax.extent) for ax in axes)
            _collect(body, where, inner, conds, out)
            return
        case te.Load(_, indices):
            if not any(isinstance(x, te.Load) for i in indices for x in te.walk(i)):
                out.append(Read(where, e, loops, conds))
    for c in te.children(e):
        _collect(c, where, loops, conds, out)


def check_reads(fn_reads: tuple[Read, ...], sizes: dict[str, int]) -> None:
    """Raise the reference's `CallError` if a read leaves its tensor at these sizes."""
    consts = {}
    for r in fn_reads:
        for v in _vars_of(r):
            if v.name in sizes:
                consts[v] = te.Const(int(sizes[v.name]), INDEX)
        _check(r, consts)


def _vars_of(r: Read):
    for i in r.load.indices + tuple(r.load.tensor.shape) + tuple(e for _, e in r.loops):
        yield from te.free_vars(i)
    for c, _ in r.conds:
        yield from te.free_vars(c)


def _check(r: Read, consts: dict) -> None:
    def subst(e: te.Expr) -> te.Expr:      # the call's sizes in, constants folded
        return simplify(te.substitute(e, consts))
    ctx = Ctx()
    for var, extent in r.loops:
        ext = subst(extent)
        if isinstance(ext, te.Const) and ext.value <= 0:
            return                                  # an empty loop reads nothing
        ctx = ctx.with_loop(var, te.Const(0, INDEX), ext)
    for cond, truth in r.conds:
        ctx = ctx.with_cond(subst(cond), truth)
    t = r.load.tensor
    shape = [subst(s) for s in t.shape]
    ranges = [bounds(subst(i), ctx) for i in r.load.indices]
    if any(lo is not None and hi is not None and lo > hi for lo, hi in ranges):
        if r.conds:
            return                                  # the conditions leave nothing to read
        # no condition, every loop runs: an empty range is the bounds' artefact of an
        # index the call leaves undefined (m % MI with MI = 0), not a read that never happens
        ranges = [(None, None) if lo is not None and hi is not None and lo > hi else (lo, hi)
                  for lo, hi in ranges]
    for d, ((lo, hi), size) in enumerate(zip(ranges, shape)):
        if not isinstance(size, te.Const):
            continue
        if size.value == 0 and not r.conds and (lo is None or hi is None):
            # every loop runs (their extents are positive constants here) and nothing
            # conditions the read, so it happens, whatever its index: an empty dimension
            # has no element for it (an index the bounds cannot follow, m // MI with MI = 0)
            subs = ", ".join("?" if k == d else ":" for k in range(len(shape)))
            dims = tuple(int(s.value) if isinstance(s, te.Const) else str(s) for s in shape)
            raise CallError(f"index out of bounds: {r.load} in {r.stage} reads "
                            f"{t.name}[{subs}], but {t.name} has shape {dims}")
        if (lo is not None and lo < 0) or (hi is not None and hi >= size.value):
            span = f"{lo}..{hi}" if lo != hi else str(lo)
            subs = ", ".join(span if k == d else ":" for k in range(len(shape)))
            dims = tuple(int(s.value) if isinstance(s, te.Const) else str(s) for s in shape)
            raise CallError(f"index out of bounds: {r.load} in {r.stage} reads "
                            f"{t.name}[{subs}], but {t.name} has shape {dims}")
