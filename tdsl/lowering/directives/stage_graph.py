"""The stage graph: what a schedule has made of each stage, as loop-nest construction reads it.

Each `StageState` holds a stage's root axes (data axes, then the axes of a top-level
reduction), the split/fuse relations from root to leaf axes, the leaf loop order and kinds,
and where the stage is computed. `apply_schedule` builds it; `build_nests` reads it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ScheduleError
from .. import te
from ..loop_ir import ForKind


@dataclass(frozen=True)
class SplitRel:
    """``parent == outer * factor + inner``."""
    parent: str
    outer: str
    inner: str
    factor: int


@dataclass(frozen=True)
class FuseRel:
    """``axes[-1] == fused % E[-1]``, ``axes[-2] == (fused // E[-1]) % E[-2]``, ..."""
    axes: tuple[str, ...]
    fused: str


@dataclass
class StageState:
    name: str
    dtype: str
    shape: tuple[te.Expr, ...]
    data: list[te.IterVar]               # root data axes
    reduce: list[te.IterVar]             # root reduction axes (of a top-level Reduce)
    combiner: str | None                 # the top-level Reduce's, or None
    value: te.Expr                       # the Reduce body, or the whole body
    is_output: bool
    extents: dict[str, te.Expr] = field(default_factory=dict)   # every axis ever made
    kind: dict[str, str] = field(default_factory=dict)          # axis -> "data"/"reduce"
    relations: list = field(default_factory=list)
    leaves: list[str] = field(default_factory=list)
    annotations: dict[str, tuple[ForKind, str | None]] = field(default_factory=dict)
    attach: tuple = ("root",)            # ("root",) | ("inline",) | ("at", consumer, axis)
    scope: str | None = None             # None: global at root, local when computed at
    align: dict[int, tuple[int, int]] = field(default_factory=dict)
    pad: dict[int, int] = field(default_factory=dict)   # dimension -> multiple (Pad)
    tensorize: tuple | None = None       # (axis, TensorIntrin, span)

    @property
    def inlined(self) -> bool:
        return self.attach[0] == "inline"

    def loops(self) -> str:
        return ", ".join(self.leaves) or "(none)"


@dataclass
class StageGraph:
    fn: te.Function
    stages: dict[str, StageState]
    order: list[str]                     # computed stages, producers first (inlined kept)
    inputs: dict[str, te.Tensor]
    prefetches: list = field(default_factory=list)     # `Prefetch` directives, in order
    partials: set = field(default_factory=set)         # the stages rfactor made

    def stage(self, name: str, span, what: str = "stage") -> StageState:
        if name in self.stages:
            return self.stages[name]
        kind = "an input, not a computed stage" if name in self.inputs else "not a stage"
        raise ScheduleError(f"In schedule of {self.fn.name}, {what} {name} is {kind}; "
                            f"stages are: {', '.join(self.live())}", span)

    def live(self) -> list[str]:
        return [n for n in self.order if not self.stages[n].inlined]

    def readers(self, name: str) -> list[str]:
        return [n for n in self.live() if name in _loaded_names(self.stages[n].value)]

    def attached_at(self, consumer: str) -> list[tuple[str, str]]:
        """(producer, axis) pairs computed inside ``consumer``'s loops, producers first."""
        return [(n, self.stages[n].attach[2]) for n in self.order
                if self.stages[n].attach[:2] == ("at", consumer)]


def _loaded_names(e: te.Expr) -> set[str]:
    return {ld.tensor.name for ld in te.loads(e)}


def state_of(t: te.Tensor, is_output: bool) -> StageState:
    body = t.op.body
    reduce, combiner, value = [], None, body
    if isinstance(body, te.Reduce):
        reduce, combiner, value = list(body.axes), body.combiner, body.body
    st = StageState(t.name, t.dtype, t.shape, list(t.op.axes), reduce, combiner, value,
                    is_output)
    for iv in st.data + st.reduce:
        assert iv.var.name not in st.extents, f"stage {t.name} has two axes {iv.var.name}"
        st.extents[iv.var.name] = iv.extent
        st.kind[iv.var.name] = "data" if iv in st.data else "reduce"
        st.leaves.append(iv.var.name)
    return st


def initial(fn: te.Function) -> StageGraph:
    outs = set(map(id, fn.outputs))
    stages = {t.name: state_of(t, id(t) in outs) for t in fn.stages()}
    return StageGraph(fn, stages, list(stages), {t.name: t for t in fn.inputs})
