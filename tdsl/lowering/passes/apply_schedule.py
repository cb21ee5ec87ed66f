"""Apply a schedule's directives to a function, giving the `StageGraph` loop-nest
construction reads. The first step of lowering; its entry takes a te.Function, not a
LoweredFunc.

Before: a `te.Function` and resolved directives (no knobs). After: one `StageState` per
computed tensor, in producer-before-consumer order, each with its root axes, the split/fuse
relations from root to leaf axes, its leaf loop order and kinds, and where it is computed
(root, inline, or at a consumer's loop). Inlining and cache stages are applied to the stage
bodies here. Every illegal directive raises `ScheduleError` with its span; the message names
the stage, the axis and the stage's loops at that point, Halide style.
"""
from __future__ import annotations

import dataclasses

from ...errors import ScheduleError
from .. import schedule as S
from .. import te
from ..arith.simplify import ceil_div, simplify
from ..directives import layout
from ..directives.checks import (fail as _fail, int_arg as _int, leaf as _leaf,
                                 live_stage as _live_stage, new_names as _new_names,
                                 storage_dim, untouched as _untouched)
from ..directives.stage_graph import (FuseRel, SplitRel, StageGraph, StageState, initial,
                                      state_of)
from ..dtypes import INDEX
from ..loop_ir import ForKind


def run(fn: te.Function, directives) -> StageGraph:
    """Apply resolved directives (see `Schedule.resolve`) in order to `initial(fn)`."""
    g = initial(fn)
    placed = {}
    for d in directives:
        handler = _HANDLERS.get(type(d))
        assert handler is not None, f"unknown directive {d!r}"
        handler(g, d)
        if isinstance(d, (S.ComputeAt, S.ComputeRoot, S.ComputeInline)):
            placed[d.stage] = d
    _check_readers_stay(g, placed)
    return g


def _check_readers_stay(g: StageGraph, placed: dict) -> None:
    """A stage computed at ``C.a`` with several readers needs them all still there (a later
    directive may have moved one elsewhere)."""
    for name in g.live():
        st = g.stages[name]
        if st.attach[0] != "at":
            continue
        cons, axis = st.attach[1:]
        moved = [r for r in g.readers(name)
                 if r != cons and g.stages[r].attach != ("at", cons, axis)]
        if moved:
            d = placed.get(name)
            _fail(st, f"compute {name} at {cons}.{axis}", f"its reader {moved[0]} is no "
                  f"longer computed at {cons}.{axis}", d.span if d else None)


# ---------------------------------------------------------------------------- loop structure

def _split(g: StageGraph, d: S.Split) -> None:
    st = _live_stage(g, d.stage, d.span)
    what = f"split {d.axis}"
    _leaf(st, d.axis, what, d.span)
    f = _int(d.factor, st, f"{what} by {d.factor!r}", "factor", d.span)
    _untouched(g, st, d.axis, what, d.span)
    _new_names(st, [d.outer, d.inner], what, d.span)
    st.extents[d.outer] = ceil_div(st.extents[d.axis], f)
    st.extents[d.inner] = te.Const(f, INDEX)
    st.kind[d.outer] = st.kind[d.inner] = st.kind[d.axis]
    st.relations.append(SplitRel(d.axis, d.outer, d.inner, f))
    i = st.leaves.index(d.axis)
    st.leaves[i:i + 1] = [d.outer, d.inner]


def _tile(g: StageGraph, d: S.Tile) -> None:
    if d.x == d.y:
        _fail(_live_stage(g, d.stage, d.span), f"tile {d.x} with itself",
              "tile needs two different axes", d.span)
    _split(g, S.Split(d.stage, d.x, d.fx, d.xo, d.xi, d.span))
    _split(g, S.Split(d.stage, d.y, d.fy, d.yo, d.yi, d.span))
    _reorder(g, S.Reorder(d.stage, (d.xo, d.yo, d.xi, d.yi), d.span))


def _fuse(g: StageGraph, d: S.Fuse) -> None:
    st = _live_stage(g, d.stage, d.span)
    what = f"fuse {', '.join(d.axes)}"
    if len(d.axes) < 2:
        _fail(st, what, "fuse needs at least two axes", d.span)
    for a in d.axes:
        _leaf(st, a, what, d.span)
    pos = [st.leaves.index(a) for a in d.axes]
    if pos != list(range(pos[0], pos[0] + len(pos))):
        _fail(st, what, "the axes are not adjacent loops in this order (reorder them first)",
              d.span)
    if len({st.kind[a] for a in d.axes}) > 1:
        _fail(st, what, "a data axis can't be fused with a reduction axis", d.span)
    for a in d.axes:
        _untouched(g, st, a, what, d.span)
    _new_names(st, [d.fused], what, d.span)
    ext = te.Const(1, INDEX)
    for a in d.axes:
        ext = te.Binary("*", ext, st.extents[a], INDEX)
    st.extents[d.fused] = simplify(ext)
    st.kind[d.fused] = st.kind[d.axes[0]]
    st.relations.append(FuseRel(tuple(d.axes), d.fused))
    st.leaves[pos[0]:pos[-1] + 1] = [d.fused]


def _reorder(g: StageGraph, d: S.Reorder) -> None:
    st = _live_stage(g, d.stage, d.span)
    what = f"reorder {', '.join(d.axes)}"
    for a in d.axes:
        _leaf(st, a, what, d.span)
    dup = sorted({a for a in d.axes if d.axes.count(a) > 1})
    if dup:
        _fail(st, what, f"{', '.join(dup)} appears twice", d.span)
    slots = sorted(st.leaves.index(a) for a in d.axes)
    new = list(st.leaves)
    for p, a in zip(slots, d.axes):
        new[p] = a
    # An attach point (or tensorize point) fixes which loops enclose it.
    points = [(a, f"stage {p} is computed at {a}") for p, a in g.attached_at(st.name)]
    if st.tensorize:
        points.append((st.tensorize[0], f"{st.tensorize[0]} is tensorized"))
    for a, why in points:
        before, after = st.leaves[:st.leaves.index(a) + 1], new[:new.index(a) + 1]
        if set(before) != set(after):
            moved = sorted(set(before) ^ set(after))
            _fail(st, what, f"{why}, and the reorder moves {', '.join(moved)} across it",
                  d.span)
    st.leaves = new


def _annotate(kind: ForKind, verb: str):
    def handler(g: StageGraph, d) -> None:
        st = _live_stage(g, d.stage, d.span)
        what = f"{verb} {d.axis}"
        _leaf(st, d.axis, what, d.span)
        tag = getattr(d, "thread_tag", None)
        if st.kind[d.axis] == "reduce" and kind is ForKind.THREAD_BINDING \
                and not (tag or "").startswith("threadIdx"):
            _fail(st, what, f"it is a reduction axis: blocks can't share a result, only the "
                  f"threads of one block reduce together (threads would race on "
                  f"{st.name}); bind it to a threadIdx axis or keep it serial", d.span)
        if st.kind[d.axis] == "reduce" and kind not in (ForKind.UNROLLED,
                                                        ForKind.THREAD_BINDING):
            _fail(st, what, f"it is a reduction axis (iterations would race on {st.name})",
                  d.span)
        if kind is ForKind.THREAD_BINDING and tag not in S.THREAD_TAGS:
            _fail(st, what, f"unknown thread tag {tag!r}; tags are: "
                  f"{', '.join(S.THREAD_TAGS)}", d.span)
        old = st.annotations.get(d.axis)
        if old is not None and old != (kind, tag):
            _fail(st, what, f"{d.axis} is already {old[0].value}", d.span)
        st.annotations[d.axis] = (kind, tag)
    return handler


# ---------------------------------------------------------------------------- placement

def _compute_at(g: StageGraph, d: S.ComputeAt) -> None:
    st = _live_stage(g, d.stage, d.span)
    cons = g.stage(d.consumer, d.span, "consumer")
    what = f"compute {st.name} at {d.consumer}.{d.axis}"
    if st.is_output:
        _fail(st, what, f"{st.name} is an output of the op; outputs are computed at root",
              d.span)
    if cons.inlined:
        _fail(st, what, f"{cons.name} was inlined", d.span)
    readers = g.readers(st.name)
    # Several readers are fine when the others are computed at this same loop: they all
    # run inside one iteration of it, after st, and st's region covers what they all read.
    here = ("at", cons.name, d.axis)
    others = [r for r in readers if r != cons.name and g.stages[r].attach != here]
    if cons.name not in readers and len(others) == len(readers):
        _fail(st, what, f"{cons.name} does not read {st.name} (readers: "
              f"{', '.join(readers) or 'none'})", d.span)
    if others:
        _fail(st, what, f"{st.name} is also read by {', '.join(others)} (compute "
              f"{'it' if len(others) == 1 else 'them'} at {cons.name}.{d.axis} first)", d.span)
    if d.axis not in cons.leaves:
        raise ScheduleError(f"In schedule of {st.name}, can't {what}: {cons.name} has no loop "
                            f"{d.axis}; loops of {cons.name} are: {cons.loops()}", d.span)
    if cons.tensorize:
        t = cons.tensorize[0]
        if cons.leaves.index(d.axis) >= cons.leaves.index(t):
            _fail(st, what, f"{d.axis} is inside the nest tensorized at {cons.name}.{t}",
                  d.span)
    st.attach = ("at", cons.name, d.axis)


def _compute_inline(g: StageGraph, d: S.ComputeInline) -> None:
    st = _live_stage(g, d.stage, d.span)
    what = f"compute_inline {st.name}"
    if st.is_output:
        _fail(st, what, f"{st.name} is an output of the op", d.span)
    if st.combiner or any(isinstance(e, te.Reduce) for e in te.walk(st.value)):
        _fail(st, what, "it has a reduction (compute it at root or at a consumer's loop)",
              d.span)
    if st.relations or st.annotations or st.tensorize:
        _fail(st, what, "its loops were transformed, and an inlined stage has no loops",
              d.span)
    attached = g.attached_at(st.name)
    if attached:
        _fail(st, what, f"stage {attached[0][0]} is computed at its loop {attached[0][1]}",
              d.span)
    params = [iv.var for iv in st.data]

    def inline(e):
        if isinstance(e, te.Load) and e.tensor.name == st.name:
            return te.substitute(st.value, dict(zip(params, e.indices)))
        return None
    for r in g.readers(st.name):
        g.stages[r].value = te.rewrite(g.stages[r].value, inline)
    st.attach = ("inline",)


def _compute_root(g: StageGraph, d: S.ComputeRoot) -> None:
    st = _live_stage(g, d.stage, d.span)
    st.attach = ("root",)


def _retarget(e: te.Expr, name: str, new: te.Tensor) -> te.Expr:
    return te.rewrite(e, lambda n: te.Load(new, n.indices, n.dtype)
                      if isinstance(n, te.Load) and n.tensor.name == name else None)


def _cache_read(g: StageGraph, d: S.CacheRead) -> None:
    src = g.inputs.get(d.tensor)
    st = None if src is not None else _live_stage(g, d.tensor, d.span)
    what = f"cache_read {d.tensor}"
    owner = st or StageState(d.tensor, "", (), [], [], None, te.Const(0, INDEX), False)
    if d.scope not in S.SCOPES:
        _fail(owner, what, f"unknown scope {d.scope!r}; scopes are: {', '.join(S.SCOPES)}",
              d.span)
    if d.name in g.stages or d.name in g.inputs:
        _fail(owner, what, f"there is already a tensor named {d.name}", d.span)
    all_readers = g.readers(d.tensor)
    readers = list(d.readers) or all_readers
    if not readers:
        _fail(owner, what, f"no stage reads {d.tensor}", d.span)
    for r in readers:
        if r not in all_readers:
            _fail(owner, what, f"{r} does not read {d.tensor} (readers: "
                  f"{', '.join(all_readers) or 'none'})", d.span)
    if st is not None and st.attach[0] == "at" and st.attach[1] in readers:
        _fail(owner, what, f"{d.tensor} is computed at {st.attach[1]}.{st.attach[2]}", d.span)
    shape = src.shape if src is not None else st.shape
    dtype = src.dtype if src is not None else st.dtype
    names = [iv.var.name for iv in st.data] if st else [f"ax{k}" for k in range(len(shape))]
    axes = tuple(te.IterVar(te.Var(n), s) for n, s in zip(names, shape))
    body = te.Load(src or te.Tensor(d.tensor, shape, dtype), tuple(a.var for a in axes), dtype)
    new = te.Tensor(d.name, shape, dtype, te.Compute(axes, body))
    for r in readers:
        g.stages[r].value = _retarget(g.stages[r].value, d.tensor, new)
    cache = state_of(new, False)
    cache.scope = d.scope
    g.stages[d.name] = cache
    g.order.insert(min(g.order.index(r) for r in readers), d.name)


def _cache_write(g: StageGraph, d: S.CacheWrite) -> None:
    st = _live_stage(g, d.stage, d.span)
    what = f"cache_write {st.name}"
    if d.scope not in S.SCOPES:
        _fail(st, what, f"unknown scope {d.scope!r}; scopes are: {', '.join(S.SCOPES)}",
              d.span)
    if st.relations or st.annotations or st.tensorize or st.leaves != list(st.extents):
        _fail(st, what, f"cache_write must come before the other directives on {st.name}",
              d.span)
    if g.attached_at(st.name):
        _fail(st, what, f"stage {g.attached_at(st.name)[0][0]} is computed at one of its "
              "loops", d.span)
    if d.name in g.stages or d.name in g.inputs:
        _fail(st, what, f"there is already a tensor named {d.name}", d.span)
    cache = dataclasses.replace(st, name=d.name, is_output=False, attach=("root",),
                                scope=d.scope, align={}, pad={}, extents=dict(st.extents),
                                kind=dict(st.kind), leaves=list(st.leaves), relations=[],
                                annotations={}, data=list(st.data), reduce=list(st.reduce))
    g.stages[d.name] = cache
    g.order.insert(g.order.index(st.name), d.name)
    tensor = te.Tensor(d.name, st.shape, st.dtype)
    st.value = te.Load(tensor, tuple(iv.var for iv in st.data), st.dtype)
    st.reduce, st.combiner = [], None
    st.leaves = [iv.var.name for iv in st.data]
    st.extents = {n: st.extents[n] for n in st.leaves}
    st.kind = {n: "data" for n in st.leaves}


_COMBINE = {"sum": lambda a, b: te.Binary("+", a, b, a.dtype),
            "prod": lambda a, b: te.Binary("*", a, b, a.dtype),
            "max": lambda a, b: te.Intrinsic("max", (a, b), a.dtype),
            "min": lambda a, b: te.Intrinsic("min", (a, b), a.dtype)}


def _rfactor(g: StageGraph, d: S.RFactor) -> None:
    st = _live_stage(g, d.stage, d.span)
    what = f"rfactor {d.axis}"
    if st.relations or st.annotations or st.tensorize or st.leaves != list(st.extents):
        _fail(st, what, f"rfactor must come before the other directives on {st.name}",
              d.span)
    if g.attached_at(st.name):
        _fail(st, what, f"stage {g.attached_at(st.name)[0][0]} is computed at one of its "
              "loops", d.span)
    factor = _int(d.factor, st, what, "factor", d.span)
    if d.name in g.stages or d.name in g.inputs:
        _fail(st, what, f"there is already a tensor named {d.name}", d.span)
    # the whole value as one expression: a top-level reduction is a Reduce like a nested one
    value = te.Reduce(st.combiner, st.value, tuple(st.reduce), st.dtype) if st.combiner         else st.value
    found = [r for r in te.walk(value) if isinstance(r, te.Reduce) and
             any(iv.var.name == d.axis for iv in r.axes)]
    if len(found) != 1:
        _fail(st, what, f"{st.name} has no reduction over an axis named {d.axis}" if not found
              else f"{len(found)} reductions are over axes named {d.axis}", d.span)
    red = found[0]
    iv = next(iv for iv in red.axes if iv.var.name == d.axis)
    others = tuple(x for x in red.axes if x is not iv)
    names = {f"{d.axis}_o", f"{d.axis}_i", f"{d.axis}_t"}
    taken = names & ({x.var.name for x in st.data} | {v.name for v in te.free_vars(value)})
    if taken:
        _fail(st, what, f"{st.name} already has an axis named {sorted(taken)[0]}", d.span)
    outer, lane, tail = (te.Var(f"{d.axis}_{k}", INDEX) for k in "oit")
    f = te.Const(factor, INDEX)
    whole = simplify(te.Binary("//", iv.extent, f, INDEX))
    # the partial results: data axes of the stage, then the lane axis
    rf_axes = (*st.data, te.IterVar(lane, f))
    rf_body = te.Reduce(red.combiner, te.substitute(
        red.body, {iv.var: te.Binary("+", te.Binary("*", outer, f, INDEX), lane, INDEX)}),
        (*others, te.IterVar(outer, whole, "reduce")), red.dtype)
    rf = te.Tensor(d.name, (*st.shape, f), st.dtype, te.Compute(rf_axes, rf_body))
    # the stage combines the partial results and the tail past the last whole multiple
    partial = te.Reduce(red.combiner, te.Load(rf, (*(x.var for x in st.data), lane),
                                              st.dtype), (te.IterVar(lane, f, "reduce"),),
                        red.dtype)
    left = simplify(te.Binary("%", iv.extent, f, INDEX))
    if isinstance(left, te.Const) and left.value == 0:
        # no tail: the stage reads only the partial results (and a second rfactor of its
        # lane axis leaves the first stage with one reader)
        combined = partial
    else:
        rest = te.Reduce(red.combiner, te.substitute(
            red.body, {iv.var: te.Binary("+", te.Binary("*", whole, f, INDEX), tail, INDEX)}),
            (*others, te.IterVar(tail, left, "reduce")), red.dtype)
        combined = _COMBINE[red.combiner](partial, rest)
    st.value = te.rewrite(value, pre=lambda e: combined if e is red else None)
    st.reduce, st.combiner = [], None
    st.leaves = [x.var.name for x in st.data]
    st.extents = {n: st.extents[n] for n in st.leaves}
    st.kind = {n: "data" for n in st.leaves}
    g.stages[d.name] = state_of(rf, False)
    g.order.insert(g.order.index(st.name), d.name)
    g.partials.add(d.name)


# ---------------------------------------------------------------------------- storage, tensorize

def _storage_align(g: StageGraph, d: S.StorageAlign) -> None:
    st = _live_stage(g, d.stage, d.span)
    what = f"storage_align {d.axis}"
    dim = storage_dim(st, d.axis, what, d.span)
    if dim == len(st.data) - 1:
        _fail(st, what, "the innermost dimension has stride 1; align the one outside it to "
              "pad rows", d.span)
    factor = _int(d.factor, st, what, "factor", d.span)
    offset = _int(d.offset, st, what, "offset", d.span, low=0)
    if offset >= factor:
        _fail(st, what, f"the offset {offset} must be less than the factor {factor}", d.span)
    st.align[dim] = (factor, offset)


def _tensorize(g: StageGraph, d: S.Tensorize) -> None:
    st = _live_stage(g, d.stage, d.span)
    what = f"tensorize {d.axis}"
    _leaf(st, d.axis, what, d.span)
    if not isinstance(d.intrinsic, S.TensorIntrin):
        _fail(st, what, f"{d.intrinsic!r} is not a TensorIntrin", d.span)
    pos = st.leaves.index(d.axis)
    for prod, a in g.attached_at(st.name):
        if st.leaves.index(a) >= pos:
            _fail(st, what, f"stage {prod} is computed at {a}, inside the nest", d.span)
    st.tensorize = (d.axis, d.intrinsic, d.span)


def _prefetch(g: StageGraph, d: S.Prefetch) -> None:
    """Checked here as far as names go; build_nests finds the loops (a later fuse may still
    take ``axis`` in), `passes.prefetch` the reads."""
    what = f"prefetch {d.tensor}"
    if d.tensor not in g.inputs and d.tensor not in g.stages:
        raise ScheduleError(f"In schedule of {g.fn.name}, {what}: {d.tensor} is not a tensor "
                            f"of {g.fn.name}", d.span)
    for stage, axis in ((d.stage, d.axis), (d.at_stage, d.at_axis)):
        st = _live_stage(g, stage, d.span)
        if axis not in st.extents:
            _fail(st, what, f"{stage} has no axis {axis}; its loops are {st.loops()}",
                  d.span)
    g.prefetches.append(d)


def _set_scope(g: StageGraph, d: S.SetScope) -> None:
    st = _live_stage(g, d.stage, d.span)
    if d.scope not in S.SCOPES:
        _fail(st, f"set_scope {d.scope!r}", f"scopes are: {', '.join(S.SCOPES)}", d.span)
    if st.is_output:
        _fail(st, f"set_scope {d.scope}", f"{st.name} is an output: it lives in the "
              f"caller's array", d.span)
    st.scope = d.scope


_HANDLERS = {
    S.Split: _split, S.Tile: _tile, S.Fuse: _fuse, S.Reorder: _reorder,
    S.ComputeAt: _compute_at, S.ComputeInline: _compute_inline, S.ComputeRoot: _compute_root,
    S.CacheRead: _cache_read, S.CacheWrite: _cache_write, S.RFactor: _rfactor,
    S.Vectorize: _annotate(ForKind.VECTORIZED, "vectorize"),
    S.Unroll: _annotate(ForKind.UNROLLED, "unroll"),
    S.Parallel: _annotate(ForKind.PARALLEL, "parallel"),
    S.Bind: _annotate(ForKind.THREAD_BINDING, "bind"),
    S.StorageAlign: _storage_align, S.Tensorize: _tensorize, S.Pack: layout.pack,
    S.Pad: layout.pad, S.SetScope: _set_scope, S.Prefetch: _prefetch,
}
