"""The loop IR: explicit loop nests over buffers, what the emitters print.

Expressions are those of the tensor-expression IR (`te.Var`, `te.Const`, `te.Binary`, ...)
minus `Load`/`Reduce`, plus `BufferLoad`, `ReadFault` and the vector nodes `Ramp`/`Broadcast`. A vector
expression has a dtype with lanes, e.g. ``"f32x16"`` (see `vector_dtype`). Statements are
immutable; buffers compare by identity, like tensors.

Before storage flattening a `BufferLoad`/`Store` has one index per dimension; after it,
exactly one (the flat offset in elements).
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from .te import (Binary, Cast, Compare, Const, Expr, Intrinsic, Logical, Select,  # noqa: F401
                 Unary, Var, field_names)


def vector_dtype(scalar: str, lanes: int) -> str:
    return scalar if lanes == 1 else f"{scalar}x{lanes}"


def split_dtype(dtype: str) -> tuple[str, int]:
    """``"f32x16"`` -> ``("f32", 16)``; ``"f32"`` -> ``("f32", 1)``."""
    if "x" in dtype:
        base, lanes = dtype.split("x")
        return base, int(lanes)
    return dtype, 1


@dataclass(frozen=True, eq=False)
class Buffer:
    """A region of memory. ``scope``: "global" (a parameter or workspace), "local" (stack or
    registers), "shared" (GPU shared memory). ``align`` in bytes; ``strides`` in elements
    (None means dense row-major)."""
    name: str
    dtype: str
    shape: tuple[Expr, ...]
    scope: str = "global"
    strides: tuple[Expr, ...] | None = None
    align: int = 64

    def __repr__(self) -> str:
        return f"Buffer({self.name}: {self.dtype}{[str(s) for s in self.shape]}, {self.scope})"


@dataclass(frozen=True, slots=True)
class BufferLoad(Expr):
    buffer: Buffer
    indices: tuple[Expr, ...]
    dtype: str
    # Set by the in-bounds pass when an access could not be proved in bounds and sits under a
    # guard instead; emitters may ignore it.
    predicate: Expr | None = None


@dataclass(frozen=True, slots=True)
class ReadFault(Expr):
    """The value of a data-dependent read (a gather, ``X[I[i]]``) that falls outside its
    buffer: 0, and the call fails with the error ``LoweredFunc.attrs["read_faults"][fault]``,
    as the reference does. (Reads with a computable region are checked before the call.)"""
    fault: int
    dtype: str


@dataclass(frozen=True, slots=True)
class Ramp(Expr):
    """``base + stride * lane`` for lane in ``range(lanes)``."""
    base: Expr
    stride: Expr
    lanes: int
    dtype: str


@dataclass(frozen=True, slots=True)
class Broadcast(Expr):
    value: Expr
    lanes: int
    dtype: str


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"   # GPU: see For.thread_tag
    VTHREAD = "vthread"


class Stmt:
    __slots__ = ()

    def __str__(self) -> str:
        from .loop_printer import format_stmt
        return format_stmt(self)


@dataclass(frozen=True, slots=True)
class For(Stmt):
    var: Var
    min: Expr
    extent: Expr
    kind: ForKind
    body: Stmt
    thread_tag: str | None = None    # "blockIdx.x", "threadIdx.y", ... for THREAD_BINDING


@dataclass(frozen=True, slots=True)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr
    predicate: Expr | None = None


@dataclass(frozen=True, slots=True)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    """``buffer`` exists (uninitialised) inside ``body``."""
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True)
class Barrier(Stmt):
    """A GPU work-group / block barrier (shared-memory visibility)."""
    scope: str = "shared"


@dataclass(frozen=True, slots=True)
class ThreadReduce(Stmt):
    """A cross-thread reduction (GPU): the ``extent`` partial results ``buffer[0..extent)``
    (shared, one per thread of ``tag``, written before this statement) are combined with
    ``combiner`` ("sum", "prod", "max", "min") into ``result[0]`` (shared, one element),
    which every thread of the block may read after it. Built by `build_nests` for a
    reduction axis bound to a thread axis; `passes.thread_reduce` expands it into log-depth
    steps (and warp shuffles where the target has them) before the barrier pass."""
    buffer: "Buffer"
    result: "Buffer"
    combiner: str
    extent: int
    tag: str


@dataclass(frozen=True, slots=True)
class Evaluate(Stmt):
    """An expression evaluated for its side effect, e.g. a tensorized micro-kernel call."""
    value: Expr


@dataclass(frozen=True, slots=True)
class Prefetch(Stmt):
    """A hint that ``buffer[index]`` (a flat offset, before storage flattening as after it,
    as `AddressOf`'s) will be read soon: its cache line is fetched towards the core (the
    CPU emitters' ``__builtin_prefetch``; nothing elsewhere). It reads and writes no value,
    so every pass may move, copy or drop it. Made by `passes.prefetch` from the schedule's
    `Prefetch` directive."""
    buffer: Buffer
    index: Expr


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """A call of an external (micro-kernel) function; args may be buffer addresses."""
    name: str
    args: tuple
    dtype: str = "void"


@dataclass(frozen=True, slots=True)
class AddressOf(Expr):
    """``&buffer[index]``: a pointer into a flattened buffer (for micro-kernel calls)."""
    buffer: Buffer
    index: Expr
    dtype: str = "handle"


@dataclass(frozen=True, eq=False)
class LoweredFunc:
    """A function over buffers. ``params`` are the input buffers then the output buffers
    (scalar parameters are rank-0 buffers passed by value); ``shape_vars`` are the symbolic
    sizes still free in the body, passed as ``int64_t`` after the buffers."""
    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    shape_vars: tuple[Var, ...] = ()
    num_inputs: int = 0
    attrs: dict = field(default_factory=dict)

    def __str__(self) -> str:
        from .loop_printer import format_func
        return format_func(self)


# ---------------------------------------------------------------------------- traversal

def rewrite_loops(func: "LoweredFunc", kind: ForKind, rewrite) -> "LoweredFunc":
    """``func`` with each loop of ``kind`` replaced by ``rewrite(loop)`` (inner loops first;
    None keeps the loop): the shape of the passes that act on annotated loops."""
    def post(s):
        return rewrite(s) if isinstance(s, For) and s.kind is kind else None
    return dataclasses.replace(func, body=rewrite_stmt(func.body, post=post))


def rewrite_stmt(node: Stmt, pre=None, post=None, expr=None) -> Stmt:
    """Rebuild a statement tree, TVM ``ir_transform`` style.

    ``pre(s)`` may return a replacement, which is used as is (no recursion into it);
    otherwise the children are rebuilt, ``expr(e)`` maps every expression field (default:
    keep), and ``post(s)`` may return a replacement of the rebuilt node. A node is rebuilt
    only when a child changed, so unchanged subtrees stay shared (and ``==`` holds).
    """
    if pre is not None:
        out = pre(node)
        if out is not None:
            return out
    changes = {}
    for name in field_names(node):
        v = getattr(node, name)
        nv = _rewrite_field(v, pre, post, expr)
        if nv is not v:
            changes[name] = nv
    node = dataclasses.replace(node, **changes) if changes else node
    if post is not None:
        out = post(node)
        if out is not None:
            return out
    return node


def _rewrite_field(v, pre, post, expr):
    if isinstance(v, Stmt):
        return rewrite_stmt(v, pre, post, expr)
    if isinstance(v, Expr):
        return v if expr is None else expr(v)
    if isinstance(v, tuple) and v and isinstance(v[0], (Stmt, Expr)):
        nv = tuple(_rewrite_field(x, pre, post, expr) for x in v)
        return v if all(a is b for a, b in zip(nv, v)) else nv
    return v


def stmt_exprs(node: Stmt):
    """The expressions a statement holds in its own fields (its child statements' are not
    entered: `walk_stmt` gives those statements)."""
    for name in field_names(node):
        v = getattr(node, name)
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, Expr):
                yield x


def walk_stmt(node: Stmt):
    """Pre-order iterator over the statements of a tree (expressions not entered)."""
    stack = [node]
    while stack:
        s = stack.pop()
        yield s
        for name in reversed(field_names(s)):
            v = getattr(s, name)
            if isinstance(v, Stmt):
                stack.append(v)
            elif isinstance(v, tuple):
                stack.extend(x for x in reversed(v) if isinstance(x, Stmt))
