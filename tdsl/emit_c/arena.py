"""Static placement of a function's workspace buffers in one arena (the embedded target).

An `Allocate` makes its buffer exist inside its body only, so two allocations whose bodies
do not nest are never live at once and may share bytes. `plan_arena` walks the loop IR once
and gives each arena buffer the offset just past every allocation enclosing it (rounded up
to `ALIGN`); siblings start at the same offset. The arena's size is the deepest such stack:
the most bytes live at one time along any path of nested allocations. ``naive_bytes`` is
what one buffer per intermediate would take, for comparison.

Every size must be a constant here: the arena is sized when the C is printed.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..errors import BuildError
from ..lowering import te
from ..lowering.arith.simplify import simplify
from ..lowering.loop_ir import Allocate, Buffer, LoweredFunc, Stmt, split_dtype
from .helpers import element_size

ALIGN = 16        # bytes: any scalar, and a 128-bit vector (NEON, Helium, SSE)


@dataclass(frozen=True)
class ArenaPlan:
    offsets: dict          # id(buffer) -> byte offset in the arena
    size: int              # bytes the arena must have
    naive_bytes: int       # the sum of every arena buffer's bytes (no reuse)


def buffer_bytes(buf: Buffer, func_name: str, fixed: dict | None = None) -> int:
    """Bytes of ``buf``; ``fixed`` ({Var: int}) gives sizes the function leaves symbolic."""
    env = {v: te.Const(n, v.dtype) for v, n in (fixed or {}).items()}
    count = functools.reduce(lambda a, b: a * b, (
        _const(simplify(te.substitute(d, env)) if env else d, buf, func_name)
        for d in buf.shape), 1)
    scalar, lanes = split_dtype(buf.dtype)
    return count * lanes * element_size(scalar)


def _const(dim: te.Expr, buf: Buffer, func_name: str) -> int:
    if not isinstance(dim, te.Const):
        raise BuildError(f"{func_name}: the size of {buf.name} ({dim}) is not known at build "
                         "time, and the embedded target sizes its arena then",
                         hint="fix every size when building: shapes={'N': 1, ...} "
                              "(or --shape N=1,... on the command line)")
    return int(dim.value)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_arena(func: LoweredFunc, in_arena, fixed: dict | None = None) -> ArenaPlan:
    """Offsets for the allocations ``in_arena(buffer)`` accepts (the rest live elsewhere,
    e.g. small local tiles on the stack); ``fixed`` as in `buffer_bytes`."""
    offsets: dict[int, int] = {}
    sizes: list[int] = []

    def place(s: Stmt, base: int) -> int:
        """Place the allocations under ``s``, the first at ``base``; the peak end offset."""
        peak = base
        if isinstance(s, Allocate) and in_arena(s.buffer):
            nbytes = buffer_bytes(s.buffer, func.name, fixed)
            offset = _align(base)
            offsets[id(s.buffer)] = offset
            sizes.append(nbytes)
            base = peak = offset + nbytes
        for child in _children(s):
            peak = max(peak, place(child, base))
        return peak

    size = _align(place(func.body, 0))
    return ArenaPlan(offsets, size, sum(_align(n) for n in sizes))


def _children(s: Stmt):
    for name in ("body", "then", "orelse"):
        child = getattr(s, name, None)
        if isinstance(child, Stmt):
            yield child
    for child in getattr(s, "stmts", ()) or ():
        yield child
