"""Vectorization: a vectorized loop of straight-line stores becomes vector statements.

Before: flattened loop IR; loops of kind VECTORIZED.
After: a VECTORIZED loop ``for v in [m, m + L)`` whose

- extent ``L`` is a constant power of two (GNU vector types need one),
- body is a store or a sequence of stores (no loop, no condition, no allocation),
- stores are contiguous in ``v`` (flat index ``base + v``), loads contiguous or invariant,
- values use only ``+ - * /`` (``/`` on floats), negation, ``min``/``max`` of floats (the
  epilogues fusion leaves: relu, clip) and of integers (a u8 max pool), f32 ``exp``
  (softmax's rows) and ``round`` (requantization), casts between numeric types
  (quantize, dequantize) and selects whose condition is invariant, of loads, constants and
  invariant variables (no select on lanes, other call or compare),
- and loads of a buffer the body also stores use the store's own index (no cross-lane
  dependence),

is replaced by its body with ``v`` standing for ``ramp(m, 1, L)``: a contiguous access
becomes ``buf[ramp(base, 1, L)]`` of dtype ``"f32xL"``, an invariant sub-expression is
computed once as a scalar and broadcast (``x{L}(...)``).

One loop of another shape is recognised too, the int8 dot product (what gcc's and LLVM's
vectorizers call the dot-product idiom):

    for v in [m, m + L) (vectorized):
        for k in [0, 4) (unrolled):
            acc[base + v] = acc[base + v] + i32(a[a0 + k]) * i32(b[b0 + 4 * v + k])

with ``acc`` i32, ``a`` u8 (the same four bytes for every lane) and ``b`` i8 (four bytes
per lane, contiguous), becomes one store of ``dot4_u8i8(acc[ramp], a[ramp(a0, 1, 4)],
b[ramp(b0, 1, 4 L)])``: lane ``j`` adds ``sum[k] a[k] * b[4 j + k]``. That is one
``vpdpbusd`` on x86 with VNNI (the emitters' helper; a lane loop elsewhere), 4 L products
per instruction, exact in i32 like the loop it replaces. The same loop over ``k in [0, 2)``
with ``a`` and ``b`` both i16 becomes ``dot2_i16`` (``vpmaddwd``: lane ``j`` adds ``a[0] *
b[2 j] + a[1] * b[2 j + 1]``; `DOT_PRODUCTS`).

Every other VECTORIZED loop is kept as is, for the emitter to print with a vectorization
pragma.
"""
from __future__ import annotations


from .. import te
from ..arith.linear import linear
from ..arith.simplify import simplify
from ..dtypes import INDEX, INTS, STORAGE_FLOATS, is_float
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
    if isinstance(loop.body, For):
        return _dot_product(loop, lanes)
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


# The dot products the idiom becomes, by (a's dtype, b's dtype): the products each lane
# adds and the intrinsic. u8 x i8 in fours is vpdpbusd's (VNNI); i16 x i16 in pairs is
# vpmaddwd's, which every x86 vector unit from SSE2 on has (AVX2: 16 products an
# instruction, twice an 8-lane FMA's).
DOT_PRODUCTS = {("u8", "i8"): (4, "dot4_u8i8"), ("i16", "i16"): (2, "dot2_i16")}


def _dot_product(loop: For, lanes: int) -> Store | None:
    """The dot-product idiom (module docstring) as one vector store, or None."""
    inner = loop.body
    s = inner.body
    groups = {group for group, _ in DOT_PRODUCTS.values()}
    if inner.kind is not ForKind.UNROLLED or not _is_const(inner.min, 0) or \
            not any(_is_const(inner.extent, g) for g in groups) or \
            not isinstance(s, Store) or s.predicate is not None or len(s.indices) != 1 or \
            s.buffer.dtype != "i32":
        return None
    group = int(inner.extent.value)
    k = inner.var
    v = _Vectorizer(loop.var, loop.min, lanes, {s.buffer: s.indices})
    acc = BufferLoad(s.buffer, s.indices, "i32")
    match s.value:
        case te.Binary("+", load, te.Binary("*", te.Cast(x, "i32"), te.Cast(y, "i32")), "i32") \
                if load == acc:
            pass
        case _:
            return None
    if not (isinstance(x, BufferLoad) and isinstance(y, BufferLoad) and
            x.predicate is None and y.predicate is None):
        return None
    base = v.contiguous(s.indices[0])
    if base is None or k in te.free_vars(base):
        return None
    # a: the same `group` values for every lane; b: `group` values per lane, contiguous
    for a, b in ((x, y), (y, x)):
        kind = DOT_PRODUCTS.get((a.dtype, b.dtype))
        if kind is None or kind[0] != group:
            continue
        a0 = _offset(a.indices, {loop.var: 0, k: 1})
        b0 = _offset(b.indices, {loop.var: group, k: 1})
        if a0 is None or b0 is None:
            continue
        b0 = simplify(te.Binary("+", b0, te.Binary("*", te.Const(group, INDEX), loop.min,
                                                   INDEX), INDEX))      # the first lane's
        value = te.Intrinsic(kind[1], (
            BufferLoad(s.buffer, (v.ramp(base),), vector_dtype("i32", lanes)),
            BufferLoad(a.buffer, (_ramp(a0, group),), vector_dtype(a.dtype, group)),
            BufferLoad(b.buffer, (_ramp(b0, group * lanes),),
                       vector_dtype(b.dtype, group * lanes))), vector_dtype("i32", lanes))
        return Store(s.buffer, (v.ramp(base),), value)
    return None


def _vector_cast(src: str, dst: str) -> bool:
    """A conversion between numeric types with vector spellings (no bool, no storage
    float): the emitters convert whole vectors, a float to an integer through the
    saturating helper lane by lane."""
    numeric = ("f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
    return src in numeric and dst in numeric


def _is_const(e: te.Expr, value: int) -> bool:
    return isinstance(e, te.Const) and e.value == value


def _ramp(base: te.Expr, lanes: int) -> Ramp:
    return Ramp(base, te.Const(1, INDEX), lanes, vector_dtype(INDEX, lanes))


def _offset(indices, coefficients: dict) -> te.Expr | None:
    """The flat index less its terms in the given variables, if each has exactly its
    coefficient there (``{v: 4, k: 1}``: ``b0 + 4 v + k``, a coefficient 0 for an index
    that does not use the variable); else None."""
    if len(indices) != 1:
        return None
    index = simplify(indices[0])
    lin = linear(index)
    for var, c in coefficients.items():
        if lin.coeff_if_linear(var) != c:
            return None
    rest = te.substitute(index, {var: te.Const(0, INDEX) for var in coefficients})
    rest = simplify(rest)
    return None if any(var in te.free_vars(rest) for var in coefficients) else rest


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
        return _ramp(base, self.lanes)

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
            case te.Intrinsic("min" | "max" as name, (a, b), dt) if dt in ("f32", "f64") + INTS:
                args = (self.widen(self.expr(a)), self.widen(self.expr(b)))
                return te.Intrinsic(name, args, vector_dtype(dt, self.lanes))
            case te.Intrinsic("exp", (a,), "f32"):     # the C backends' vector exp helper
                return te.Intrinsic("exp", (self.widen(self.expr(a)),),
                                    vector_dtype("f32", self.lanes))
            case te.Intrinsic("sqrt" | "rsqrt" as name, (a,), dt) if dt in ("f32", "f64"):
                return te.Intrinsic(name, (self.widen(self.expr(a)),),      # and sqrt's
                                    vector_dtype(dt, self.lanes))
            case te.Cast(a, dt) if _vector_cast(a.dtype, dt):
                return te.Cast(self.widen(self.expr(a)), vector_dtype(dt, self.lanes))
            case te.Intrinsic("round", (a,), "f32"):   # the C backends' vector rint helper
                return te.Intrinsic("round", (self.widen(self.expr(a)),),
                                    vector_dtype("f32", self.lanes))
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
