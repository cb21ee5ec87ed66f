"""Register tiles: a local buffer whose every access is a whole aligned vector at a constant
offset is printed as separate vector variables, one per vector, instead of an array.

gcc keeps a local *array* of vectors on the stack even when every index is a constant (seen
on a matmul register tile: each FMA loaded and stored its accumulator, 67 GFLOP/s); named
vector variables live in registers. This is the "separate named accumulators" of anchors.md.
"""
from __future__ import annotations

from ..lowering import te
from ..lowering.loop_ir import Allocate, BufferLoad, Ramp, Store, walk_stmt

def register_lanes(alloc: Allocate, max_registers: int) -> int | None:
    """The vector width to promote ``alloc.buffer`` with, or None when it can't be: a tile
    of more vectors than the target has registers would spill anyway."""
    buf = alloc.buffer
    if buf.scope != "local" or len(buf.shape) != 1 or not isinstance(buf.shape[0], te.Const):
        return None
    size = int(buf.shape[0].value)
    lanes = None
    for index in _indices_of(alloc):
        offset = _const_ramp(index)
        if offset is None:
            return None
        base, n = offset
        lanes = lanes or n
        if n != lanes or base % lanes:
            return None
    if lanes is None or lanes == 1 or size % lanes or size // lanes > max_registers:
        return None
    return lanes


def register_index(index: te.Expr, lanes: int) -> int:
    base, _ = _const_ramp(index)
    return base // lanes


def _const_ramp(index) -> tuple[int, int] | None:
    if isinstance(index, Ramp) and isinstance(index.base, te.Const) and \
            isinstance(index.stride, te.Const) and index.stride.value == 1:
        return int(index.base.value), index.lanes
    return None


def _indices_of(alloc: Allocate):
    buf = alloc.buffer
    for s in walk_stmt(alloc.body):
        if isinstance(s, Store) and s.buffer is buf:
            if len(s.indices) != 1 or s.predicate is not None:
                yield None
            else:
                yield s.indices[0]
        for e in _exprs_of(s):
            for x in te.walk(e):
                if isinstance(x, BufferLoad) and x.buffer is buf:
                    yield x.indices[0] if len(x.indices) == 1 and x.predicate is None else None


def _exprs_of(s):
    for name in ("value", "cond", "min", "extent", "predicate"):
        v = getattr(s, name, None)
        if isinstance(v, te.Expr):
            yield v
    for i in getattr(s, "indices", ()) or ():
        yield i
