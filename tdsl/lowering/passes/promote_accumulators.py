"""Accumulators in registers across a loop: whole-vector slots of a buffer that a loop reads
and writes at the same places in every iteration are loaded into a local tile before the
loop and stored back after it.

Before: a sum split into chunks (a convolution's input channels taken a cache-sized chunk
at a time, so that the chunk's weights stay in L1 while every pixel of a row uses them)
keeps its partial sums in a buffer across the chunks; inside one chunk the register tile's
updates read and write that buffer::

    for cbi in [0, 8):                          acc = YL[b .. b+16], YL[b+16 .. b+32], ...
      for ci in [0, 16):                        for cbi in [0, 8):
        YL[b .. b+16] += X[..] * W[..]     ->     for ci in [0, 16):
        YL[b+16 .. b+32] += X[..] * W[..]           acc_0 += X[..] * W[..]
                                                    acc_1 += X[..] * W[..]
                                                YL[b .. b+16] = acc_0, ...

gcc does not do this itself: a vector is read and written through memcpy, which it does not
move out of a loop (a 512 -> 128 channel 1x1 convolution ran at 39 GFLOP/s with its
accumulators in memory). After: the local tile is a register tile (every access a whole
vector at a constant offset), which the printer keeps in named vector variables.

A buffer is promoted at the outermost loop where: it is stored to; every access to it in the
loop is a whole vector (``Ramp`` of stride 1, all of one width) at an index that reads no
variable bound in the loop; the indices differ by constants that are multiples of the width
(so two distinct slots never overlap); no access is under an ``If`` inside the loop (the
loads and stores before and after it run unconditionally); and the loop has only serial
loops inside, no call (a micro-kernel may touch the buffer through its address) and no
barrier. A local tile already held in registers (every index a constant) is left alone, and
so is a buffer allocated inside the loop.
A loop whose extent may be zero is entered only if it runs, so the tile's loads and stores
touch only what the loop would have.
"""
from __future__ import annotations

import dataclasses

from .. import te
from ..arith.linear import linear
from ..dtypes import INDEX
from ..loop_ir import (Allocate, Barrier, Buffer, BufferLoad, Evaluate, For, ForKind, If,
                       LetStmt, LoweredFunc, Ramp, Seq, Stmt, Store, ThreadReduce,
                       rewrite_stmt, vector_dtype, walk_stmt)

# more vectors than any target has registers would spill anyway; the printer declines to name
# them past the target's count, and a tile this large is not what a schedule asked for
MAX_VECTORS = 32


def run(func: LoweredFunc) -> LoweredFunc:
    def pre(s):
        if isinstance(s, For) and s.kind in (ForKind.SERIAL, ForKind.UNROLLED):
            return _promote(s)
        return None
    return dataclasses.replace(func, body=rewrite_stmt(func.body, pre=pre))


def _promote(loop: For) -> Stmt | None:
    if not _plain(loop):
        return None
    bound = {loop.var} | {s.var for s in walk_stmt(loop.body) if isinstance(s, (For, LetStmt))}
    accesses: dict[str, list] = {}      # buffer name -> [(buffer, index, is_store, guarded)]
    _collect(loop.body, False, accesses)
    inside = {s.buffer.name for s in walk_stmt(loop.body) if isinstance(s, Allocate)}
    chosen = []
    for name, found in accesses.items():
        slots = None if name in inside else _slots(found, bound)
        if slots is not None:
            chosen.append((found[0][0], slots))
    if not chosen:
        return None
    body, before, after, allocs = loop.body, [], [], []
    for buf, (lanes, offsets, stored) in chosen:
        tile = Buffer(f"{buf.name}_acc", buf.dtype, (te.Const(len(offsets) * lanes, INDEX),),
                      "local")
        allocs.append(tile)
        slot = {off: _ramp(te.Const(k * lanes, INDEX), lanes) for k, off in
                enumerate(sorted(offsets))}
        vtype = vector_dtype(buf.dtype, lanes)
        for off, base in offsets.items():
            before.append(Store(tile, (slot[off],), BufferLoad(buf, (_ramp(base, lanes),), vtype)))
            if off in stored:
                after.append(Store(buf, (_ramp(base, lanes),), BufferLoad(tile, (slot[off],),
                                                                          vtype)))
        body = _redirect(body, buf.name, tile, slot)
    out: Stmt = Seq((*before, dataclasses.replace(loop, body=body), *after))
    for tile in allocs:
        out = Allocate(tile, out)
    if not (isinstance(loop.extent, te.Const) and loop.extent.value > 0):
        out = If(te.Compare(">", loop.extent, te.Const(0, loop.extent.dtype), "bool"), out)
    return out


def _plain(loop: For) -> bool:
    """Only serial loops inside, and nothing that may touch a buffer behind our back."""
    for s in walk_stmt(loop.body):
        if isinstance(s, For) and s.kind not in (ForKind.SERIAL, ForKind.UNROLLED):
            return False
        if isinstance(s, (Evaluate, Barrier, ThreadReduce)):
            return False
    return True


def _collect(s: Stmt, guarded: bool, out: dict) -> None:
    if isinstance(s, If):
        _loads(s.cond, guarded, out)
        _collect(s.then, True, out)
        if s.orelse is not None:
            _collect(s.orelse, True, out)
        return
    if isinstance(s, Store):
        index = s.indices[0] if len(s.indices) == 1 and s.predicate is None else None
        out.setdefault(s.buffer.name, []).append((s.buffer, index, True, guarded))
    for name in te.field_names(s):
        v = getattr(s, name)
        if isinstance(v, Stmt):
            _collect(v, guarded, out)
        elif isinstance(v, te.Expr):
            _loads(v, guarded, out)
        elif isinstance(v, tuple):
            for x in v:
                if isinstance(x, Stmt):
                    _collect(x, guarded, out)
                elif isinstance(x, te.Expr):
                    _loads(x, guarded, out)


def _loads(e: te.Expr, guarded: bool, out: dict) -> None:
    for x in te.walk(e):
        if isinstance(x, BufferLoad):
            index = x.indices[0] if len(x.indices) == 1 and x.predicate is None else None
            out.setdefault(x.buffer.name, []).append((x.buffer, index, False, guarded))


def _slots(found: list, bound: set) -> tuple | None:
    """``(lanes, {offset: base}, stored offsets)`` when the buffer's accesses can live in a
    tile across the loop, else None."""
    if not any(is_store for _, _, is_store, _ in found):
        return None
    lanes, symbolic, offsets, stored = None, None, {}, set()
    for buf, index, is_store, guarded in found:
        if guarded or not isinstance(index, Ramp) or not isinstance(index.stride, te.Const) \
                or index.stride.value != 1:
            return None
        if lanes is None:
            lanes = index.lanes
        if index.lanes != lanes or te.free_vars(index.base) & bound:
            return None
        form = linear(index.base)
        if symbolic is None:
            symbolic = form.terms
        elif form.terms != symbolic:
            return None
        offsets.setdefault(form.const, index.base)
        if is_store:
            stored.add(form.const)
    if buf.scope == "shared" or (buf.scope == "local" and not symbolic):
        return None             # other threads' memory, or a register tile already
    first = min(offsets)
    if any((off - first) % lanes for off in offsets) or len(offsets) > MAX_VECTORS:
        return None
    return lanes, offsets, stored


def _ramp(base: te.Expr, lanes: int) -> Ramp:
    return Ramp(base, te.Const(1, INDEX), lanes, vector_dtype(INDEX, lanes))


def _redirect(body: Stmt, name: str, tile: Buffer, slot: dict) -> Stmt:
    def to_tile(index):
        return (slot[linear(index[0].base).const],)

    def expr(e):
        def post(x):
            if isinstance(x, BufferLoad) and x.buffer.name == name:
                return BufferLoad(tile, to_tile(x.indices), x.dtype)
            return None
        return te.rewrite(e, post)

    def post(s):
        if isinstance(s, Store) and s.buffer.name == name:
            return Store(tile, to_tile(s.indices), s.value)
        return None
    return rewrite_stmt(body, post=post, expr=expr)
