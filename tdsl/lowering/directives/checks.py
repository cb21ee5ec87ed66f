"""The checks schedule directives share: each failure is a `ScheduleError` at the directive,
naming the stage, what was asked, why it can't be, and the stage's loops at that point."""
from __future__ import annotations

import operator

from ...errors import ScheduleError
from .. import te
from .stage_graph import StageGraph, StageState


def fail(st: StageState, what: str, why: str, span, hint: str | None = None) -> None:
    raise ScheduleError(f"In schedule of {st.name}, can't {what}: {why}; "
                        f"loops are: {st.loops()}", span, hint=hint)


def live_stage(g: StageGraph, name: str, span) -> StageState:
    st = g.stage(name, span)
    if st.inlined:
        raise ScheduleError(f"In schedule of {name}: the stage was inlined (compute_inline), "
                            f"so it has no loops to schedule", span)
    return st


def leaf(st: StageState, axis: str, what: str, span) -> None:
    if axis in st.leaves:
        return
    if axis in st.extents:
        fail(st, what, f"{axis} is no longer a loop (it was split or fused)", span)
    nested = nested_reduction(st, axis)
    if nested is not None:
        fail(st, what, f"{axis} is the axis of a {nested.combiner} nested in an expression: it "
             f"is computed whole inside {st.name}'s loops and has no loop of its own", span,
             hint=f"write the {nested.combiner} as a stage of its own (T[...] = "
                  f"{nested.combiner}[{axis}](...), then T[...] in {st.name}'s expression) "
                  f"and schedule T.{axis}; or P = rfactor({st.name}.{axis}, F), then schedule "
                  f"P's loops {axis}_o and {axis}_i")
    fail(st, what, f"{st.name} has no axis {axis}", span)


def nested_reduction(st: StageState, axis: str):
    """The reduction nested in the stage's value (not its top-level one) over ``axis``."""
    for r in te.walk(st.value):
        if isinstance(r, te.Reduce) and any(iv.var.name == axis for iv in r.axes):
            return r
    return None


def untouched(g: StageGraph, st: StageState, axis: str, what: str, span) -> None:
    """An axis that is an attach point, annotated or tensorized cannot be split or fused."""
    for prod, a in g.attached_at(st.name):
        if a == axis:
            fail(st, what, f"stage {prod} is computed at {axis}", span)
    if axis in st.annotations:
        fail(st, what, f"{axis} is already {st.annotations[axis][0].value}", span)
    if st.tensorize and st.tensorize[0] == axis:
        fail(st, what, f"{axis} is tensorized", span)


def int_arg(x, st, what, name, span, low=1) -> int:
    try:
        v = operator.index(x)
    except TypeError:
        v = None
    if v is None or isinstance(x, bool) or v < low:
        fail(st, what, f"the {name} must be an integer >= {low}, not {x!r}", span)
    return v


def storage_dim(st: StageState, axis: str, what: str, span, changes: str = "layout") -> int:
    """The dimension ``axis`` of a stage whose storage a directive changes (layout, extent):
    an output's storage is the caller's array, so it must be a stage of the op's own."""
    if st.is_output:
        fail(st, what, f"{st.name} is an output: its {changes} is the caller's array "
             f"(cache_write it first, and change the cache stage)", span)
    dims = [iv.var.name for iv in st.data]
    if axis not in dims:
        fail(st, what, f"{axis} is not a dimension of {st.name} (dimensions: "
             f"{', '.join(dims) or 'none'})", span)
    return dims.index(axis)


def new_names(st: StageState, names, what, span) -> None:
    if len(set(names)) != len(names):
        fail(st, what, f"the new axes need distinct names, not {', '.join(names)}", span)
    for n in names:
        if n in st.extents:
            fail(st, what, f"{st.name} already has an axis named {n}", span)
