"""Storage flattening: multi-dimensional accesses become one flat element offset.

Before: every `BufferLoad`/`Store` has one index per dimension of its buffer (none for rank
0); buffers carry their logical shape and, after StorageAlign, padded strides.
After: every access has exactly one index, ``offset == sum(index[d] * stride[d])`` with
``stride[d] == prod(shape[d+1:])`` unless the buffer has strides; except that rank-0 *input*
parameters (scalars passed by value) keep ``()``. Every `Allocate`d buffer is replaced by a
1-d buffer of its padded size (``alloc_size``), so an emitter declares it as it reads it.
Parameters keep their shapes (callers pass dense arrays). ``attrs["flattened"]`` is set.
"""
from __future__ import annotations

import dataclasses

from .. import te
from ..arith.simplify import simplify
from ..dtypes import INDEX
from ..loop_ir import (AddressOf, Allocate, Buffer, BufferLoad, LoweredFunc, Prefetch, Store,
                       rewrite_stmt)


def _mul(a: te.Expr, b: te.Expr) -> te.Expr:
    return simplify(te.Binary("*", a, b, INDEX))


def dense_strides(shape) -> tuple[te.Expr, ...]:
    out, s = [], te.Const(1, INDEX)
    for dim in reversed(shape):
        out.append(s)
        s = _mul(s, dim)
    return tuple(reversed(out))


def aligned_strides(shape, align: dict) -> tuple[te.Expr, ...] | None:
    """Row-major strides where dimension ``d`` in ``align`` has stride ``k * factor + offset``,
    the least such value at least the dense stride. None when nothing is aligned."""
    if not align:
        return None
    out, s = [], te.Const(1, INDEX)
    for d in reversed(range(len(shape))):
        if d in align:
            f, o = align[d]
            # s + ((o - s) mod f) is the least value >= s that is == o (mod f)
            pad = te.Binary("%", te.Binary("-", te.Const(o, INDEX), s, INDEX),
                            te.Const(f, INDEX), INDEX)
            s = simplify(te.Binary("+", s, pad, INDEX))
        out.append(s)
        s = _mul(s, shape[d])
    return tuple(reversed(out))


def strides_of(buf: Buffer) -> tuple[te.Expr, ...]:
    return buf.strides if buf.strides is not None else dense_strides(buf.shape)


def flat_index(buf: Buffer, indices) -> te.Expr:
    if not indices:
        return te.Const(0, INDEX)
    out: te.Expr = te.Const(0, INDEX)
    for i, s in zip(indices, strides_of(buf)):
        out = te.Binary("+", out, te.Binary("*", i, s, INDEX), INDEX)
    return simplify(out)


def alloc_size(buf: Buffer) -> te.Expr:
    """Elements a buffer occupies, padding included."""
    if not buf.shape:
        return te.Const(1, INDEX)
    return _mul(buf.shape[0], strides_of(buf)[0])


def run(func: LoweredFunc) -> LoweredFunc:
    if func.attrs.get("flattened"):
        return func
    scalars_by_value = {b for b in func.params[:func.num_inputs] if not b.shape}
    flat: dict[Buffer, Buffer] = {}

    def new_buffer(b: Buffer) -> Buffer:
        if b not in flat:
            flat[b] = dataclasses.replace(b, shape=(alloc_size(b),), strides=None)
        return flat[b]

    def index(b: Buffer, indices) -> tuple:
        if b in scalars_by_value:
            return ()
        if len(indices) == 1 and len(b.shape) == 1 and b.strides is None:
            return tuple(indices)
        return (flat_index(b, indices),)

    def fix_expr(e: te.Expr) -> te.Expr:
        def post(n):
            if isinstance(n, BufferLoad):
                return dataclasses.replace(n, buffer=flat.get(n.buffer, n.buffer),
                                           indices=index(n.buffer, n.indices))
            if isinstance(n, AddressOf) and n.buffer in flat:
                return dataclasses.replace(n, buffer=flat[n.buffer])
            return None
        return te.rewrite(e, post)

    def pre(s):
        if isinstance(s, Allocate):
            nb = new_buffer(s.buffer)
            return Allocate(nb, rewrite_stmt(s.body, pre, post, fix_expr))
        return None

    def post(s):
        if isinstance(s, Store):
            return dataclasses.replace(s, buffer=flat.get(s.buffer, s.buffer),
                                       indices=index(s.buffer, s.indices))
        if isinstance(s, Prefetch) and s.buffer in flat:     # its index is flat already
            return dataclasses.replace(s, buffer=flat[s.buffer])
        return None

    body = rewrite_stmt(func.body, pre, post, fix_expr)
    return dataclasses.replace(func, body=body, attrs={**func.attrs, "flattened": True})
