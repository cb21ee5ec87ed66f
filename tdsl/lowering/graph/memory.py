"""Static memory planning: the intermediate values of a compiled graph share one arena.

Each value lives from the step that writes it to the last step that reads it (inclusive:
a kernel's inputs and output never overlap). Values are placed largest first, each at the
lowest offset free over its whole lifetime ("greedy by size", as TFLite's arena planner
does), aligned to `ALIGN` bytes. Graph inputs, outputs and weights are not in the arena.

The plan is plain data (`MemoryPlan.as_dict()`), so a C emitter can declare a static arena
of ``peak_bytes`` and address each buffer at its offset.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..sizes import CACHE_LINE

ALIGN = CACHE_LINE  # a cache line, and the widest vector load (AVX-512)


@dataclass(frozen=True)
class Slot:
    """A buffer of ``size`` bytes at ``offset``, live from step ``first`` to ``last``."""
    name: str
    offset: int
    size: int
    first: int
    last: int


@dataclass(frozen=True)
class MemoryPlan:
    slots: tuple[Slot, ...]
    peak_bytes: int         # the arena's size
    naive_bytes: int        # one buffer per value, as without planning
    align: int = ALIGN

    def slot(self, name: str) -> Slot:
        return next(s for s in self.slots if s.name == name)

    def as_dict(self) -> dict:
        return {"peak_bytes": self.peak_bytes, "naive_bytes": self.naive_bytes,
                "align": self.align,
                "buffers": {s.name: {"offset": s.offset, "size": s.size, "first": s.first,
                                     "last": s.last} for s in self.slots}}


def run(steps, sizes: dict[str, int], external=()) -> MemoryPlan:
    """``steps``: ``(reads, writes)`` value names per step, in execution order; ``sizes``:
    bytes per value; ``external``: values that live outside the arena."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for k, (reads, writes) in enumerate(steps):
        for v in writes:
            first.setdefault(v, k)
            last.setdefault(v, k)
        for v in reads:
            if v in first:
                last[v] = k
    names = [v for v in first if v not in set(external)]
    placed: list[Slot] = []
    for v in sorted(names, key=lambda v: (-sizes[v], first[v], v)):
        size = _aligned(sizes[v])
        offset = 0
        for s in sorted((s for s in placed if s.first <= last[v] and first[v] <= s.last),
                        key=lambda s: s.offset):
            if offset + size <= s.offset:
                break
            offset = max(offset, _aligned(s.offset + s.size))
        placed.append(Slot(v, offset, sizes[v], first[v], last[v]))
    peak = max((_aligned(s.offset + s.size) for s in placed), default=0)
    order = {v: k for k, v in enumerate(names)}
    return MemoryPlan(tuple(sorted(placed, key=lambda s: order[s.name])), peak,
                      sum(_aligned(sizes[v]) for v in names))


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN
