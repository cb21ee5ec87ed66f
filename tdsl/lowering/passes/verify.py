"""Verify the invariants every stage of the pipeline keeps (run between passes on request).

Checks, raising AssertionError (a broken invariant is a compiler bug, not a user error):

- every variable is bound: by an enclosing loop or let, or a shape variable of the function;
- no loop or let rebinds a variable of an enclosing one (siblings may reuse a name);
- every accessed buffer is a parameter or allocated by an enclosing `Allocate`;
- accesses have one index per dimension, or (after flattening) exactly one, and rank-0
  input parameters none; a store's value has the buffer's element type, with as many lanes
  as its index;
- loop extents and mins are scalar index expressions.
"""
from __future__ import annotations

import dataclasses

from .. import te
from ..dtypes import INDEX
from ..loop_ir import (AddressOf, Allocate, BufferLoad, For, LetStmt, LoweredFunc, Stmt, Store,
                       split_dtype)


def run(func: LoweredFunc) -> LoweredFunc:
    _Verifier(func).stmt(func.body, frozenset(func.shape_vars), frozenset(func.params))
    return func


class _Verifier:
    def __init__(self, func: LoweredFunc):
        self.flat = bool(func.attrs.get("flattened"))
        self.scalars = {b for b in func.params[:func.num_inputs] if not b.shape}

    def access(self, buf, indices, bufs, what):
        assert buf in bufs, f"{what} of {buf.name}, which is neither a parameter nor allocated"
        if buf in self.scalars and self.flat:
            assert indices == (), f"{what} of scalar parameter {buf.name} has an index"
        elif self.flat:
            assert len(indices) == 1, f"{what} of {buf.name} not flattened: {len(indices)}"
        else:
            assert len(indices) == len(buf.shape), \
                f"{what} of {buf.name} has {len(indices)} indices for rank {len(buf.shape)}"

    def expr(self, e: te.Expr, scope, bufs) -> None:
        for n in te.walk(e):
            if isinstance(n, te.Var):
                assert n in scope, f"variable {n.name} is not bound here"
            elif isinstance(n, BufferLoad):
                self.access(n.buffer, n.indices, bufs, "load")
            elif isinstance(n, AddressOf):
                assert n.buffer in bufs, f"address of unknown buffer {n.buffer.name}"

    def stmt(self, s, scope, bufs) -> None:
        match s:
            case For(var, mn, ext, _, body, _):
                assert var not in scope, f"loop variable {var.name} shadows an outer one"
                for e in (mn, ext):
                    assert e.dtype == INDEX, f"loop {var.name} bound of dtype {e.dtype}"
                    self.expr(e, scope, bufs)
                self.stmt(body, scope | {var}, bufs)
                return
            case LetStmt(var, value, body):
                assert var not in scope, f"let {var.name} shadows an outer variable"
                self.expr(value, scope, bufs)
                self.stmt(body, scope | {var}, bufs)
                return
            case Allocate(buf, body):
                self.stmt(body, scope, bufs | {buf})
                return
            case Store(buf, indices, value, _):       # the predicate is checked below
                self.access(buf, indices, bufs, "store")
                base, lanes = split_dtype(value.dtype)
                assert base == buf.dtype, \
                    f"store of {value.dtype} into {buf.name} of {buf.dtype}"
                ilanes = split_dtype(indices[0].dtype)[1] if indices else 1
                assert lanes == ilanes, f"store into {buf.name}: {lanes} values, {ilanes} lanes"
        for f in dataclasses.fields(s):
            v = getattr(s, f.name)
            items = v if isinstance(v, tuple) else (v,)
            for x in items:
                if isinstance(x, te.Expr):
                    self.expr(x, scope, bufs)
                elif isinstance(x, Stmt):
                    self.stmt(x, scope, bufs)
