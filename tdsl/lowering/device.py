"""A lowered function as GPU kernels: what the CUDA and OpenCL emitters print.

A GPU runs a kernel as a grid of blocks (OpenCL: work-groups) of threads (work-items), with
no synchronisation between blocks inside one launch. So each nest at the root of a lowered
function (one root stage, with the stages computed inside it) becomes one kernel, and the
kernels run one after the other; the global workspaces between them are allocated by the
host. Inside a kernel a loop bound to a thread axis is not a loop: each thread reads its
index, ``v = threadIdx.x`` (`For.thread_tag`), and the launch has as many threads on that
axis as the largest such loop (a smaller one is guarded, ``if (v < extent)``). A loop bound
to the same axis inside another is the same hardware index read again: that is how a
stage computed at a consumer's loop shares the consumer's threads (a cooperative load).

    split_kernels(func) -> DeviceFunc(func, kernels=(Kernel(name, body, buffers, launch), ...),
                                      workspaces=(Buffer, ...))
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import BuildError
from . import te
from .arith.simplify import simplify
from .dtypes import INDEX
from .loop_ir import (Allocate, Buffer, BufferLoad, For, ForKind, LoweredFunc, Seq, Stmt,
                      Store, walk_stmt)

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


@dataclass(frozen=True, eq=False)
class Kernel:
    """One launch: ``body`` runs on every thread of a grid whose size on each axis is
    ``launch[tag]`` (an expression of the function's sizes; an axis not named is 1).
    ``buffers`` are the global buffers it touches (parameters and workspaces), in the
    function's order."""
    name: str
    body: Stmt
    buffers: tuple[Buffer, ...]
    launch: dict

    def grid(self) -> tuple[te.Expr, ...]:
        return tuple(self.launch.get(t, _ONE) for t in BLOCK_TAGS)

    def block(self) -> tuple[te.Expr, ...]:
        return tuple(self.launch.get(t, _ONE) for t in THREAD_TAGS)

    def as_function(self, func: LoweredFunc) -> LoweredFunc:
        """The kernel as a function the C-family printers print: the inputs it reads (as
        const), then everything it may write (outputs and workspaces), then the sizes."""
        inputs = [b for b in self.buffers if b in func.params[:func.num_inputs]]
        rest = [b for b in self.buffers if b not in inputs]
        return LoweredFunc(self.name, tuple(inputs + rest), self.body, func.shape_vars,
                           len(inputs), {**func.attrs, "launch": self.launch})


@dataclass(frozen=True, eq=False)
class DeviceFunc:
    func: LoweredFunc
    kernels: tuple[Kernel, ...]
    workspaces: tuple[Buffer, ...]


_ONE = te.Const(1, INDEX)


def split_kernels(func: LoweredFunc) -> DeviceFunc:
    """One kernel per root nest of ``func``; global allocations at its root become host
    workspaces. A shared buffer at the root (not computed inside a kernel) is refused."""
    body, workspaces = func.body, []
    while isinstance(body, Allocate):
        if body.buffer.scope == "shared":
            raise BuildError(f"{body.buffer.name} is in shared memory but computed at the "
                             f"root: shared memory lives in one block",
                             hint="compute it at a loop of its reader (compute_at)")
        workspaces.append(body.buffer)
        body = body.body
    nests = body.stmts if isinstance(body, Seq) else (body,)
    order = {id(b): k for k, b in enumerate((*func.params, *workspaces))}
    kernels = []
    for k, nest in enumerate(nests):
        used = _global_buffers(nest, order)
        kernels.append(Kernel(f"{func.name}_k{k}", nest,
                              tuple(sorted(used, key=lambda b: order[id(b)])),
                              launch_extents(nest, func)))
    return DeviceFunc(func, tuple(kernels), tuple(workspaces))


def _global_buffers(stmt: Stmt, order: dict) -> list[Buffer]:
    reads, writes = accesses(stmt)
    found = {**reads, **writes}
    return [b for k, b in found.items() if k in order]


def accesses(stmt: Stmt) -> tuple[dict, dict]:
    """The buffers ``stmt`` loads from and stores to, as ``{id: Buffer}`` dicts in first-use
    order (buffers compare by identity)."""
    reads, writes = {}, {}
    for s in walk_stmt(stmt):
        if isinstance(s, Store):
            writes.setdefault(id(s.buffer), s.buffer)
        for f in dataclasses.fields(s):
            v = getattr(s, f.name)
            for x in (v if isinstance(v, tuple) else (v,)):
                if isinstance(x, te.Expr):
                    for e in te.walk(x):
                        if isinstance(e, BufferLoad):
                            reads.setdefault(id(e.buffer), e.buffer)
    return reads, writes


def launch_extents(stmt: Stmt, func: LoweredFunc) -> dict:
    """Per thread axis, the largest extent of a loop bound to it (plus its start), as an
    expression of the function's sizes."""
    sizes = set(func.shape_vars)
    per_tag: dict[str, list] = {}
    for s in walk_stmt(stmt):
        if isinstance(s, For) and s.kind is ForKind.THREAD_BINDING:
            if s.thread_tag == "vthread":
                continue
            end = simplify(te.Binary("+", s.min, s.extent, INDEX))
            if te.free_vars(end) - sizes:
                raise BuildError(f"the loop {s.var.name} bound to {s.thread_tag} has the "
                                 f"extent {end}, which depends on another loop: a launch "
                                 f"needs it before any loop runs",
                                 hint="bind loops whose extent is a constant or a size")
            per_tag.setdefault(s.thread_tag, [])
            if end not in per_tag[s.thread_tag]:
                per_tag[s.thread_tag].append(end)
    launch = {}
    for tag, ends in per_tag.items():
        consts = [e for e in ends if isinstance(e, te.Const)]
        others = [e for e in ends if not isinstance(e, te.Const)]
        if consts:
            others.append(max(consts, key=lambda c: c.value))
        out = others[0]
        for e in others[1:]:
            out = te.Intrinsic("max", (out, e), INDEX)
        launch[tag] = out
    return launch
