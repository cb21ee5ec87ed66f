"""The checks a schedule's thread bindings must pass, at the schedule line that breaks them.

On a GPU target (CUDA, OpenCL), after the directives are applied:

- a thread axis is bound once per stage (two loops of one stage on ``threadIdx.x`` would
  be one index read twice, silently computing a diagonal);
- the threads of one stage fit one block: the product of its constant ``threadIdx`` extents
  is at most the target's ``max_threads``;
- a stage in shared memory is computed at a consumer's loop (shared memory lives in
  one block; at the root it would have to span them all);
- no stage computed at the root is left as an unbound loop over its whole tensor (it would
  run on one thread of one block); stages computed at a consumer's loop run on the
  consumer's threads and need no binding of their own.

- a reduction axis bound to a ``threadIdx`` axis is a cross-thread reduction (the block's
  threads each fold a share, then combine their partial results in log-depth steps): it
  needs a constant number of threads (a split factor), one such loop per stage, the
  stage's data loops outside its reduction loops and no other ``threadIdx`` loop in the
  stage (the whole block takes part). Binding a reduction to ``blockIdx`` is refused by
  `apply_schedule` at the ``bind``: blocks can't combine results within one launch.

On a CPU target any ``bind`` is refused: there are no threads to bind to.
"""
from __future__ import annotations

from ..errors import ScheduleError
from . import schedule as S
from . import te
from .loop_ir import ForKind
from .directives.stage_graph import StageGraph


def check(g: StageGraph, directives, target) -> None:
    binds = {(d.stage, d.axis): d for d in directives if isinstance(d, S.Bind)}
    if not target.is_gpu:
        for d in binds.values():
            raise ScheduleError(f"can't bind {d.stage}.{d.axis} to {d.thread_tag}: target "
                                f"'{target}' has no GPU threads", d.span,
                                hint="bind belongs in a `for cuda`, `for opencl` or `for gpu` "
                                     "schedule; on CPUs use parallel")
        return
    for name in g.live():
        st = g.stages[name]
        bound = {a: tag for a, (kind, tag) in st.annotations.items()
                 if kind is ForKind.THREAD_BINDING and tag != "vthread"}
        seen: dict[str, str] = {}
        for axis in st.leaves:
            tag = bound.get(axis)
            if tag is None:
                continue
            if tag in seen:
                d = binds.get((name, axis))
                raise ScheduleError(f"In schedule of {name}, can't bind {axis} to {tag}: "
                                    f"{seen[tag]} is already bound to it; loops are: "
                                    f"{st.loops()}", d.span if d else None,
                                    hint="bind each of threadIdx.x/y/z and blockIdx.x/y/z "
                                         "once per stage")
            seen[tag] = axis
        _check_cross_thread(st, bound, binds)
        threads, last = 1, None
        for axis, tag in bound.items():
            ext = st.extents.get(axis)
            if tag.startswith("threadIdx") and isinstance(ext, te.Const):
                threads *= int(ext.value)
                last = axis
        if threads > target.max_threads:
            d = binds.get((name, last))
            raise ScheduleError(f"In schedule of {name}: its threadIdx loops make blocks of "
                                f"{threads} threads, more than the {target.max_threads} "
                                f"target '{target}' allows", d.span if d else None,
                                hint="split by smaller factors before binding")
        if st.attach == ("root",) and st.scope == "shared":
            d = next((d for d in directives if isinstance(d, (S.CacheRead, S.CacheWrite))
                      and d.name == name), None)
            raise ScheduleError(f"{name} is in shared memory but computed at the root: "
                                f"shared memory lives in one block", getattr(d, "span", None),
                                hint="compute it at a loop of its reader (compute_at), "
                                     "inside the loops bound to blockIdx")
        if st.attach == ("root",) and st.data and not bound:
            d = next((d for d in directives if getattr(d, "stage", None) == name),
                     directives[0] if directives else None)
            raise ScheduleError(f"In schedule of {name} for '{target}': no loop of {name} is "
                                f"bound to blockIdx/threadIdx, so one thread would compute "
                                f"all of it; loops are: {st.loops()}",
                                getattr(d, "span", None),
                                hint=f"split a data loop and bind the parts, e.g. `bo, ti = "
                                     f"split({name}.{st.leaves[0]}, 64)`, `bind(bo, "
                                     f"blockIdx.x)`, `bind(ti, threadIdx.x)`")


def _check_cross_thread(st, bound: dict, binds: dict) -> None:
    across = [a for a in st.leaves if st.kind[a] == "reduce" and a in bound]
    if not across:
        return
    axis = across[0]
    d = binds.get((st.name, axis))
    span = d.span if d else None

    def fail(why: str, hint: str):
        raise ScheduleError(f"In schedule of {st.name}, can't bind {axis} to {bound[axis]} "
                            f"(a cross-thread reduction): {why}; loops are: {st.loops()}",
                            span, hint=hint)
    if len(across) > 1:
        fail(f"{across[1]} is a reduction loop bound too",
             "bind one reduction loop per stage; fuse the axes first to share threads")
    if not isinstance(st.extents.get(axis), te.Const):
        fail(f"a cross-thread reduction needs a constant number of threads, and {axis} "
             f"runs over {st.extents.get(axis)}",
             f"split it by a constant and bind the inner part: `ro, ri = split({st.name}."
             f"{axis}, 128)`, `bind(ri, threadIdx.x)`")
    first = min(st.leaves.index(a) for a in st.leaves if st.kind[a] == "reduce")
    inner_data = [a for a in st.leaves[first:] if st.kind[a] == "data"]
    if inner_data:
        fail(f"the data loop {inner_data[0]} is inside the reduction loops",
             "reorder the data loops outside the reduction loops")
    others = [a for a, tag in bound.items() if a != axis and tag.startswith("threadIdx")]
    if others:
        fail(f"{others[0]} is bound to {bound[others[0]]}: every thread of the block takes "
             f"part in the reduction", "bind the other loops to blockIdx, or keep them serial")
