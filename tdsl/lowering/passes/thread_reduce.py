"""Cross-thread reductions (GPU): each `ThreadReduce` becomes log-depth steps.

Before: `ThreadReduce(buffer, result, combiner, extent, tag)` statements (from
`build_nests`, for a reduction loop bound to a thread axis): ``buffer[0..extent)`` holds one
partial result per thread.
After: plain loop IR, no `ThreadReduce`, no barriers yet (the barrier pass puts one between
steps, since each step reads what the one before wrote):

- while more than a warp's worth of values are left (all of them on a target without warp
  shuffles), a halving step on the thread axis: with ``c`` values left and ``h = ceil(c /
  2)``, ``if t < c - h: buffer[t] = buffer[t] (+) buffer[t + h]`` leaves ``h`` values;
- on a target with warp shuffles (CUDA) once at most a warp's worth are left, and when the
  reduction has a whole warp of threads: the first warp reads them into a register
  (the identity past the end) and halves with ``shuffle_down`` (``__shfl_down_sync``), no
  shared memory and no barrier between steps;
- the last step, or the first lane of the warp, writes ``result[0]``.

So ``extent`` values take ``ceil(log2(extent))`` steps. The steps write ``buffer[t]`` and
read ``buffer[t]`` and ``buffer[t + h]`` with ``t < c - h <= h``: within one step no thread
reads a slot another writes. A thread axis other than ``tag`` in the kernel would run the
steps once per index of that axis on the same slots, so it is refused.
"""
from __future__ import annotations

import dataclasses

from ...errors import BuildError
from .. import te
from ..dtypes import INDEX
from ..loop_ir import (Allocate, BufferLoad, For, ForKind, If, LoweredFunc, Seq, Stmt, Store,
                       ThreadReduce, rewrite_stmt, walk_stmt)
from .build_nests import combine, identity


def run(func: LoweredFunc, target) -> LoweredFunc:
    if not any(isinstance(s, ThreadReduce) for s in walk_stmt(func.body)):
        return func
    shuffles = target.kind == "cuda"        # __shfl_down_sync; OpenCL 1.2 has no sub-groups

    def nest(s: Stmt):
        """A root nest (one kernel): check its thread axes, then expand inside it."""
        tags = {x.thread_tag for x in walk_stmt(s) if isinstance(x, For)
                and x.kind is ForKind.THREAD_BINDING
                and (x.thread_tag or "").startswith("threadIdx")}
        return rewrite_stmt(s, pre=lambda x: _expand_in(x, tags, target.warp, shuffles))

    body = func.body
    allocs = []
    while isinstance(body, Allocate):
        allocs.append(body.buffer)
        body = body.body
    nests = body.stmts if isinstance(body, Seq) else (body,)
    body = Seq(tuple(nest(s) for s in nests)) if len(nests) > 1 else nest(nests[0])
    for buf in reversed(allocs):
        body = Allocate(buf, body)
    return dataclasses.replace(func, body=body)


def _expand_in(s: Stmt, tags: set, warp: int, shuffles: bool):
    if isinstance(s, For) and s.kind is ForKind.THREAD_BINDING and \
            (s.thread_tag or "").startswith("threadIdx"):
        inner = next((x for x in walk_stmt(s.body) if isinstance(x, ThreadReduce)), None)
        if inner is not None:
            raise BuildError(f"{inner.result.name} reduces across {inner.tag} inside the loop "
                             f"{s.var.name}, which is bound to {s.thread_tag}: each thread "
                             f"would run the whole reduction",
                             hint="compute the reducing stage at a loop outside the thread "
                                  "loops (e.g. the blockIdx loop)")
        return None
    if not isinstance(s, ThreadReduce):
        return None
    if tags - {s.tag}:
        raise BuildError(f"{s.result.name} reduces across {s.tag}, and the same kernel uses "
                         f"{', '.join(sorted(tags - {s.tag}))}: a cross-thread reduction "
                         f"takes every thread of the block",
                         hint=f"bind the kernel's other loops to {s.tag} or blockIdx")
    return expand(s, warp, shuffles)


def expand(r: ThreadReduce, warp: int, shuffles: bool) -> Stmt:
    t = te.Var(f"{r.buffer.name}_t")

    def on_threads(body: Stmt) -> For:
        return For(t, te.Const(0, INDEX), te.Const(r.extent, INDEX),
                   ForKind.THREAD_BINDING, body, r.tag)

    def slot(i: te.Expr) -> BufferLoad:
        return BufferLoad(r.buffer, (i,), r.buffer.dtype)

    def lt(a, b: int) -> te.Expr:
        return te.Compare("<", a, te.Const(b, INDEX))

    zero = te.Const(0, INDEX)
    warp_part = shuffles and warp > 1 and r.extent >= warp
    steps, c = [], r.extent
    while c > (warp if warp_part else 1):
        h = (c + 1) // 2
        plus = te.Binary("+", t, te.Const(h, INDEX), INDEX)
        steps.append(on_threads(If(lt(t, c - h), Store(
            r.buffer, (t,), combine(r.combiner, slot(t), slot(plus))))))
        c = h
    if not warp_part:
        steps.append(on_threads(If(te.Compare("==", t, zero),
                                   Store(r.result, (zero,), slot(zero)))))
        return Seq(tuple(steps))
    dtype = r.buffer.dtype
    v = dataclasses.replace(r.buffer, name=f"{r.buffer.name}_v", shape=(), scope="local",
                            strides=None)
    mine = BufferLoad(v, (), dtype)
    lanes = [Store(v, (), te.Select(lt(t, c), slot(t), identity(r.combiner, dtype), dtype)
                   if c < warp else slot(t))]
    offset = warp // 2
    while offset >= 1:
        down = te.Intrinsic("shuffle_down", (mine, te.Const(offset, "i32")), dtype)
        lanes.append(Store(v, (), combine(r.combiner, mine, down)))
        offset //= 2
    lanes.append(If(te.Compare("==", t, zero), Store(r.result, (zero,), mine)))
    steps.append(on_threads(If(lt(t, warp), Allocate(v, Seq(tuple(lanes))))))
    return Seq(tuple(steps))
