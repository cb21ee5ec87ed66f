"""Vectorization: a vectorized loop of straight-line stores becomes vector statements.

Before: flattened loop IR; loops of kind VECTORIZED.
After: a VECTORIZED loop ``for v in [m, m + L)`` whose

- extent ``L`` is a constant power of two (GNU vector types need one),
- body is a store or a sequence of stores (no loop, no condition, no allocation),
- stores are contiguous in ``v`` (flat index ``base + v``), loads contiguous or invariant,
- values use only ``+ - * /`` (``/`` on floats), negation, float ``min``/``max`` (the
  epilogues fusion leaves: relu, clip), f32 ``exp`` (softmax's rows) and selects whose
  condition is invariant, of loads, constants and invariant variables (no select on lanes,
  other call, compare or cast),
- and loads of a buffer the body also stores use the store's own index (no cross-lane
  dependence),

is replaced by its body with ``v`` standing for ``ramp(m, 1, L)``: a contiguous access
becomes ``buf[ramp(base, 1, L)]`` of dtype ``"f32xL"``, an invariant sub-expression is
computed once as a scalar and broadcast (``x{L}(...)``). Every other VECTORIZED loop is
kept as is, for the emitter to print with a vectorization pragma.
"""
from __future__ import annotations


from .. import te
from ..arith.linear import linear
from ..arith.simplify import simplify
from ..dtypes import INDEX, STORAGE_FLOATS, is_float
from ..loop_ir import (Broadcast, BufferLoad, For, ForKind, LoweredFunc, Ramp, Seq, Store,
                       rewrite_loops, vector_dtype)


class _NotVectorizable(Exception):
    pass


def run(func: LoweredFunc) -> LoweredFunc:
    return rewrite_loops(func, ForKind.VECTORIZED, vectorize_loop)


def vectorize_loop(loop: For):
    """The vector statements replacing ``loop``, or None to keep it."""
    if not isinstance(loop.extent, te.Const):
        return None
    lanes = int(loop.extent.value)
    if lanes < 2 or lanes & (lanes - 1):
        return None
    stores = loop.body.stmts if isinstance(loop.body, Seq) else (loop.body,)
    if not all(isinstance(s, Store) and s.predicate is None and len(s.indices) == 1
               for s in stores):
        return None
    written = {s.buffer: s.indices for s in stores}
    if len(written) != len(stores):
        return None
    v = _Vectorizer(loop.var, loop.min, lanes, written)
    try:
        out = tuple(v.store(s) for s in stores)
    except _NotVectorizable:
        return None
    return out[0] if len(out) == 1 else Seq(out)


class _Vectorizer:
    def __init__(self, var: te.Var, mn: te.Expr, lanes: int, written: dict):
        self.var, self.min, self.lanes, self.written = var, mn, lanes, written

    def uses(self, e: te.Expr) -> bool:
        return self.var in te.free_vars(e)

    def contiguous(self, index: te.Expr) -> te.Expr | None:
        """The base of ``index`` if it is ``base + var``, else None."""
        lin = linear(simplify(index))
        if lin.coeff(self.var) != 1:
            return None
        rest = te.substitute(index, {self.var: self.min})
        if self.uses(rest):
            return None
        base = simplify(rest)
        return None if self.uses(base) else base

    def ramp(self, base: te.Expr) -> Ramp:
        return Ramp(base, te.Const(1, INDEX), self.lanes, vector_dtype(INDEX, self.lanes))

    def store(self, s: Store) -> Store:
        base = self.contiguous(s.indices[0])
        if base is None or s.buffer.dtype in STORAGE_FLOATS:
            raise _NotVectorizable
        return Store(s.buffer, (self.ramp(base),), self.widen(self.expr(s.value)))

    def expr(self, e: te.Expr) -> te.Expr:
        if not self.uses(e):
            return e                       # invariant: stays scalar, broadcast by the user
        match e:
            case BufferLoad(buf, (index,), dt, None):
                if dt in STORAGE_FLOATS:
                    raise _NotVectorizable     # no vector type of the storage type
                if buf in self.written and self.written[buf] != (index,):
                    raise _NotVectorizable
                base = self.contiguous(index)
                if base is None:
                    raise _NotVectorizable
                return BufferLoad(buf, (self.ramp(base),), vector_dtype(dt, self.lanes))
            case te.Binary(op, a, b, dt) if op in ("+", "-", "*") or (op == "/" and is_float(dt)):
                if dt == INDEX:
                    raise _NotVectorizable     # the loop variable as a value: keep the loop
                a, b = self.expr(a), self.expr(b)
                return te.Binary(op, self.widen(a), self.widen(b), vector_dtype(dt, self.lanes))
            case te.Unary("-", a, dt):
                return te.Unary("-", self.expr(a), vector_dtype(dt, self.lanes))
            case te.Intrinsic("min" | "max" as name, (a, b), dt) if dt in ("f32", "f64"):
                args = (self.widen(self.expr(a)), self.widen(self.expr(b)))
                return te.Intrinsic(name, args, vector_dtype(dt, self.lanes))
            case te.Intrinsic("exp", (a,), "f32"):     # the C backends' vector exp helper
                return te.Intrinsic("exp", (self.widen(self.expr(a)),),
                                    vector_dtype("f32", self.lanes))
            case te.Intrinsic("sqrt" | "rsqrt" as name, (a,), dt) if dt in ("f32", "f64"):
                return te.Intrinsic(name, (self.widen(self.expr(a)),),      # and sqrt's
                                    vector_dtype(dt, self.lanes))
            case te.Select(cond, t, f, dt) if not self.uses(cond):
                # one choice for every lane (the cond is invariant): a branch between two
                # vectors; once an unrolled loop makes the cond a constant, the simplifier
                # keeps only its side (Winograd's transform rows: select(e == 0, ...))
                return te.Select(cond, self.widen(self.expr(t)), self.widen(self.expr(f)),
                                 vector_dtype(dt, self.lanes))
        raise _NotVectorizable

    def widen(self, e: te.Expr) -> te.Expr:
        if "x" in e.dtype:
            return e
        return Broadcast(e, self.lanes, vector_dtype(e.dtype, self.lanes))
