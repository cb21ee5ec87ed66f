"""Loop-nest construction: a `StageGraph` becomes a `LoweredFunc` (before flattening).

Before: the stage graph of `apply_schedule` (leaf loops, relations, attach points).
After: one loop nest per root stage, producers first, inside `Allocate`s of the root
intermediates ("global" workspaces); a stage computed at a consumer's loop ``a`` sits at the
top of ``a``'s body inside an `Allocate` of its region ("local"). Accesses are
multi-dimensional; an attached stage's buffer is indexed relative to its region,
``P_local[x - min_x]``.

Index identities, per stage:

- a root axis is rebuilt from the leaf loops by the relations, innermost first:
  split ``parent == outer * f + inner``; fuse ``a_n == fused % E_n``, ``a_{n-1} ==
  (fused // E_n) % E_{n-1}``, ... ``a_1 == fused // (E_2 * ... * E_n)``;
- an attached stage's data axis is ``x == min_x + x_rel`` where ``x_rel`` ranges over the
  region's extent (bound inference in `infer_region`);
- a split that may not divide its extent runs its body under ``if parent < E`` placed just
  inside the innermost loop the condition uses; an attached stage's region may stick out of
  the tensor, so it also gets ``0 <= x < shape`` guards (the simplifier drops proven ones),
  except along a padded dimension (`Pad`): there the region is not clipped to the shape but
  rounded up to the multiple, and the stage's formula computes the positions past the end.

A reduction ``T[i] = sum[k](body)`` whose first reduction loop is at position ``p`` of the
leaf order gets, inside the loops before ``p``: an init nest over the data loops after ``p``
storing the identity, then the update nest ``T[i] = T[i] + body``. So moving a reduction
loop outside a data loop is legal. A Reduce nested inside a bigger expression is computed
first into a rank-0 local accumulator. A reduction with a loop bound to a thread axis (GPU;
`thread_bindings` checked the loop order) reduces across threads instead: each thread folds
its share into a register and a shared slot, and a `ThreadReduce` combines the slots
(expanded by `passes.thread_reduce`).
"""
from __future__ import annotations


import functools

import numpy as np

from ...errors import BuildError, ScheduleError
from .. import te
from ..arith import prover as B
from ..arith.linear import Linear, const, linear
from ..arith.prover import conjoin, conjuncts
from ..arith.simplify import ceil_div, divides, simplify
from ..directives import tensorize
from ..directives.stage_graph import FuseRel, SplitRel, StageGraph, StageState
from ..dtypes import INDEX, is_float, to_numpy
from ..loop_ir import (Allocate, Buffer, BufferLoad, For, ForKind, If, LoweredFunc, Seq,
                       Stmt, Store, ThreadReduce)
from .flatten import aligned_strides


def identity(combiner: str, dtype: str) -> te.Const:
    if combiner == "sum":
        return te.const(0, dtype)
    if combiner == "prod":
        return te.const(1, dtype)
    if dtype == "bool":
        return te.const(combiner == "min", dtype)
    if is_float(dtype):
        return te.const(-np.inf if combiner == "max" else np.inf, dtype)
    info = np.iinfo(to_numpy(dtype))
    return te.const(int(info.min) if combiner == "max" else int(info.max), dtype)


def combine(combiner: str, a: te.Expr, b: te.Expr) -> te.Expr:
    if combiner in ("sum", "prod"):
        return te.Binary("+" if combiner == "sum" else "*", a, b, a.dtype)
    return te.Intrinsic(combiner, (a, b), a.dtype)


def _lt(a, b) -> te.Expr:
    return te.Compare("<", a, b)


def _add(a, b) -> te.Expr:
    return simplify(te.Binary("+", a, b, INDEX))


def _seq(*stmts) -> Seq:
    flat = []
    for s in stmts:
        flat.extend(s.stmts if isinstance(s, Seq) else [s])
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


class Access:
    """How a stage's values are read in a scope: its buffer and, for an attached stage, the
    region mins to subtract."""
    __slots__ = ("buffer", "mins")

    def __init__(self, buffer: Buffer, mins=None):
        self.buffer, self.mins = buffer, mins

    def index(self, indices) -> tuple:
        if self.mins is None:
            return tuple(indices)
        return tuple(simplify(te.Binary("-", i, m, INDEX)) for i, m in zip(indices, self.mins))


class Builder:
    def __init__(self, g: StageGraph, shapes: dict[str, int] | None):
        fn = g.fn
        shapes = dict(shapes or {})
        known = {v.name: v for v in fn.shape_vars}
        for name in shapes:
            if name not in known:
                raise BuildError(f"{fn.name} has no shape variable {name}; shape variables "
                                 f"are: {', '.join(known) or 'none'}")
        self.env = {known[n]: te.Const(int(v), INDEX) for n, v in shapes.items()}
        self.free_shape_vars = tuple(v for v in fn.shape_vars if v.name not in shapes)
        self.g = g
        self.used = {v.name for v in fn.shape_vars} | set(g.stages) | set(g.inputs)
        # loop variables bound to a GPU thread index: one iteration of an enclosing loop
        # runs them all at once, so a shared buffer covers what all of them read
        self.thread_vars: set[te.Var] = set()
        self.attrs: dict = {}
        self.access: dict[str, Access] = {}
        # the input copies a guarded read may read unguarded (see unguard_padded_reads)
        self.padded_copies = {n for n, st in g.stages.items() if _is_padded_copy(st, g)}
        self.prefetch = [{"outer": None, "at": []} for _ in g.prefetches]
        self.loop_extents: dict[te.Var, te.Expr] = {}   # every loop's, before partition

    def bind(self, e: te.Expr) -> te.Expr:
        return simplify(te.substitute(e, self.env))

    def fresh(self, stage: str, axis: str) -> te.Var:
        name, n = (axis if axis not in self.used else f"{stage}.{axis}"), 1
        while name in self.used:
            name, n = f"{stage}.{axis}.{n}", n + 1
        self.used.add(name)
        return te.Var(name)

    def buffer(self, name, dtype, shape, scope, align=None) -> Buffer:
        shape = tuple(self.bind(s) for s in shape)
        return Buffer(name, dtype, shape, scope, aligned_strides(shape, align or {}))

    # ------------------------------------------------------------------------ the function

    def run(self) -> LoweredFunc:
        g, fn = self.g, self.g.fn
        params = []
        for t in (*fn.inputs, *fn.outputs):
            params.append(self.buffer(t.name, t.dtype, t.shape, "global"))
            self.access[t.name] = Access(params[-1])
        workspaces, regions = [], {}
        for name in g.live():
            st = g.stages[name]
            if st.attach == ("root",) and not st.is_output:
                scope = "global" if st.scope in (None, "local") else st.scope
                region = regions[name] = self.root_region(st) if st.pad else None
                shape = [e for _, e in region] if region else padded_shape(st)
                workspaces.append(self.buffer(name, st.dtype, shape, scope, st.align))
                self.access[name] = Access(workspaces[-1],
                                           tuple(m for m, _ in region) if region else None)
        nests = [self.stage(g.stages[n], regions.get(n), {}, dict(self.access))
                 for n in g.live() if g.stages[n].attach == ("root",)]
        body = _seq(*nests)
        for buf in reversed(workspaces):
            body = Allocate(buf, body)
        requests = tuple((d.tensor, *p["outer"], tuple(p["at"]), self.loop_extents)
                         for d, p in zip(g.prefetches, self.prefetch)
                         if p["outer"] and p["at"])
        if requests:
            self.attrs["prefetch"] = requests
        # rfactor's partial results, which `reduce_lanes` may combine in any order
        self.attrs["partials"] = frozenset(g.partials)
        return LoweredFunc(fn.name, tuple(params), body, self.free_shape_vars,
                           len(fn.inputs), self.attrs)

    # ------------------------------------------------------------------------ one stage

    def stage(self, st: StageState, region, ranges: dict, access: dict) -> Stmt:
        """The loop nest of ``st``; ``region`` is ``[(min, extent)]`` per data dimension
        when it is computed at a consumer's loop, ``ranges`` the enclosing loops."""
        root_ext = {}
        shape = padded_shape(st)
        for d, iv in enumerate(st.data):
            root_ext[iv.var.name] = region[d][1] if region else self.bind(shape[d])
        for iv in st.reduce:
            root_ext[iv.var.name] = self.bind(iv.extent)
        ext, values, guards = _derive(st, root_ext, {a: self.fresh(st.name, a)
                                                     for a in st.leaves})
        self.prefetch_loops(st, values, ext)
        self.loop_extents.update({values[a]: ext[a] for a in st.leaves})
        rel = [values[iv.var.name] for iv in st.data]
        absolute = [_add(region[d][0], r) for d, r in enumerate(rel)] if region else rel
        if region:      # the region may stick out of the tensor (a tail, a halo)
            for d, a in enumerate(absolute):
                if d in st.pad:       # computed past the shape by the stage's own formula
                    continue
                if not (region[d][0] == te.Const(0, INDEX)
                        and region[d][1] == self.bind(st.data[d].extent)):
                    guards += [te.Compare(">=", a, te.Const(0, INDEX)),
                               _lt(a, self.bind(st.shape[d]))]
        sub = {iv.var: a for iv, a in zip(st.data, absolute)}
        sub.update({iv.var: values[iv.var.name] for iv in st.reduce})
        value = te.substitute(self.bind(_rename_reduces(st.value, self, st.name)), sub)
        if st.name in self.padded_copies:   # past the input's ends: the copy's zero padding
            value = te.Select(conjoin([c for d in st.pad for c in (
                te.Compare(">=", absolute[d], te.Const(0, INDEX)),
                _lt(absolute[d], self.bind(st.shape[d])))]), value, te.const(0, st.dtype),
                st.dtype)
        loops = [(values[a], ext[a], *st.annotations.get(a, (ForKind.SERIAL, None)))
                 for a in st.leaves]
        self.thread_vars.update(v for v, _, kind, tag in loops
                                if kind is ForKind.THREAD_BINDING and tag
                                and tag.startswith(("threadIdx", "vthread")))

        attach, access = self.attachments(st, value, loops, ranges, access)
        store = self.access[st.name] if st.name in self.access else access[st.name]
        out_index = store.index(absolute)
        value = self.unguard_padded_reads(value)
        pre, value_ir = _lower_value(value, access, self, st.name)
        n = len(loops)
        p = next((k for k, a in enumerate(st.leaves) if st.kind[a] == "reduce"), n)
        t = st.leaves.index(st.tensorize[0]) if st.tensorize else None
        if t is not None:
            p = min(p, t)
        positions = {v: k for k, (v, *_) in enumerate(loops)}

        def place(conds, lo, hi, top=False):
            """Guards whose innermost loop is in [lo, hi), as (cond, position - lo); with
            ``top`` also those using none of our loops (placed outside all, -1)."""
            out = []
            for c in conds:
                k = max((positions[v] for v in te.free_vars(c) if v in positions), default=-1)
                if lo <= k < hi or (top and k < 0):
                    out.append((c, k - lo if k >= 0 else -1))
            return out

        outer_part = place(guards, 0, p, top=True)
        inner_att = {k - p: v for k, v in attach.items() if k >= p}
        outer_att = {k: v for k, v in attach.items() if k < p}
        across = [k for k in range(p, n) if loops[k][2] is ForKind.THREAD_BINDING]
        if st.combiner and across:
            if inner_att:
                raise BuildError(f"stage {st.name} reduces across threads, and a stage is "
                                 f"computed inside its reduction loops",
                                 hint="compute the producer at a loop outside the reduction")
            update = self.cross_thread(st, loops, p, across[0], guards, value_ir, pre,
                                       store, out_index)
            return _nest(loops[:p], update, outer_part, outer_att)
        if t is not None:
            if place(guards, t, n) or any(k >= t for k in attach):
                raise tensorize.error(st, "the nest below it has a tail guard or an attached "
                                      "stage", self)
            call = tensorize.call(st, value, absolute, loops[t:], st.leaves[t:], store, access,
                                  self)
            update = _nest(loops[p:t], call, place(guards, p, t), inner_att)
            stateful = tensorize.state_calls(st, call, st.leaves[p:t])
            if stateful:
                init, finish = stateful
                return _nest(loops[:p], _seq(init, update, finish), outer_part, outer_att)
        else:
            body = Store(store.buffer, out_index, value_ir if not st.combiner else
                         combine(st.combiner, BufferLoad(store.buffer, out_index, st.dtype),
                                 value_ir))
            update = _nest(loops[p:], _wrap(pre, body), place(guards, p, n), inner_att)
        if st.combiner:
            update = _seq(_init_nest(st, loops, p, guards, store, out_index), update)
        return _nest(loops[:p], update, outer_part, outer_att)

    def prefetch_loops(self, st: StageState, values: dict, ext: dict) -> None:
        """The loops of the `Prefetch` directives that name ``st``'s axes, for
        `passes.prefetch`: the outer axis as (loop variable, step): a loop, step 1; an axis
        of a fuse, ``fused // step`` (``% extent`` but the outermost), the step the product
        of the axes fused inside it. The ``at`` axis as its loop."""
        for i, d in enumerate(self.g.prefetches):
            if d.stage == st.name:
                e = values[d.axis]
                match e:
                    case te.Const():
                        continue            # one iteration (a fuse of size-1 axes): no next
                    case te.Var():
                        outer = (e, te.Const(1, INDEX))
                    case te.Binary("%", te.Var() as v, _):
                        outer = (v, te.Const(1, INDEX))
                    case te.Binary("//", te.Var() as v, step) | te.Binary(
                            "%", te.Binary("//", te.Var() as v, step), _):
                        outer = (v, step)
                    case _:
                        raise ScheduleError(
                            f"In schedule of {self.g.fn.name}, prefetch {d.tensor}: "
                            f"{d.stage}.{d.axis} is neither a loop nor an axis of a fuse; "
                            f"loops: {st.loops()}", d.span)
                if not any(values[a] is outer[0] for a in st.leaves):
                    raise ScheduleError(
                        f"In schedule of {self.g.fn.name}, prefetch {d.tensor}: "
                        f"{d.stage}.{d.axis} is not one loop's (a split of a fuse?); "
                        f"loops: {st.loops()}", d.span)
                self.prefetch[i]["outer"] = outer
            if d.at_stage == st.name:
                at = values[d.at_axis]
                if not isinstance(at, te.Var) or d.at_axis not in st.leaves:
                    raise ScheduleError(
                        f"In schedule of {self.g.fn.name}, prefetch {d.tensor}: "
                        f"{d.at_stage}.{d.at_axis} is not a loop; loops: {st.loops()}",
                        d.span)
                self.prefetch[i]["at"].append(at)

    def cross_thread(self, st: StageState, loops, p: int, q: int, guards, value, pre,
                     store: Access, out_index) -> Stmt:
        """A reduction whose loop ``q`` is bound to a thread axis (`thread_bindings` checked
        that the data loops are outside, before ``p``): each thread folds its share (the
        other reduction loops) into a register, stores it in a shared array of one slot per
        thread, and a `ThreadReduce` combines the slots; every thread then stores the
        result."""
        var, ext, _, tag = loops[q]
        if not isinstance(ext, te.Const):
            raise BuildError(f"the loop {var.name} of {st.name} reduces across {tag} over "
                             f"{ext} threads, not a constant",
                             hint="split the reduction axis by a constant and bind the inner "
                                  "part")
        red = Buffer(self.fresh(st.name, "red").name, st.dtype, (ext,), "shared")
        out = Buffer(self.fresh(st.name, "red_out").name, st.dtype, (te.Const(1, INDEX),),
                     "shared")
        part = Buffer(self.fresh(st.name, "part").name, st.dtype, (), "local")
        other = [lp for k, lp in enumerate(loops) if k >= p and k != q]
        pos = {lp[0]: k for k, lp in enumerate(other)}
        placed = [(c, max((pos[v] for v in te.free_vars(c) if v in pos), default=-1))
                  for c in guards if te.free_vars(c) & ({var} | set(pos))]
        mine = BufferLoad(part, (), st.dtype)
        fold = _nest(other, _wrap(pre, Store(part, (), combine(st.combiner, mine, value))),
                     placed, {})
        share = For(var, te.Const(0, INDEX), ext, ForKind.THREAD_BINDING,
                    Allocate(part, _seq(Store(part, (), identity(st.combiner, st.dtype)), fold,
                                        Store(red, (var,), mine))), tag)
        result = BufferLoad(out, (te.Const(0, INDEX),), st.dtype)
        return Allocate(red, Allocate(out, _seq(
            share, ThreadReduce(red, out, st.combiner, int(ext.value), tag),
            Store(store.buffer, out_index, result))))

    def attachments(self, st: StageState, value, loops, ranges, access):
        """The stages computed at one of ``st``'s loops: ``{position: [(buffer, nest)]}``,
        and ``access`` extended with their buffers (indexed relative to their regions).

        A producer may also be read by other stages computed at the same loop: regions are
        inferred consumers first, so a producer's region covers what those read too."""
        attach: dict[int, list] = {}
        access = dict(access)
        pairs = self.g.attached_at(st.name)
        regions, outers = {}, {}
        for prod, axis in reversed(pairs):
            pos = st.leaves.index(axis)
            pst = self.g.stages[prod]
            outer = dict(ranges)
            outer.update({v: (te.Const(0, INDEX), e) for v, e, _, _ in loops[:pos + 1]})
            inner = {v: (te.Const(0, INDEX), _add(e, te.Const(-1, INDEX)))
                     for v, e, _, _ in loops[pos + 1:]}
            if pst.scope == "shared":     # one tile for the block: relax the thread loops
                for v in [v for v in outer if v in self.thread_vars]:
                    lo, e = outer.pop(v)
                    inner[v] = (lo, _add(_add(lo, e), te.Const(-1, INDEX)))
            reads = [(value, inner)]
            for other, other_axis in pairs:
                if other_axis == axis and other in regions:
                    reads.append(self._reads_of(self.g.stages[other], regions[other]))
            regions[prod], outers[prod] = self.infer_region(pst, reads, outer), outer
        for prod, axis in pairs:
            pst, reg = self.g.stages[prod], regions[prod]
            buf = self.buffer(prod, pst.dtype, [e for _, e in reg], pst.scope or "local",
                              pst.align)
            access[prod] = Access(buf, tuple(m for m, _ in reg))
            attach.setdefault(st.leaves.index(axis), []).append(
                (buf, self.stage(pst, reg, outers[prod], access)))
        return attach, access

    def _reads_of(self, rst: StageState, region):
        """An attached reader's value over its region: its data axes as ``min + x`` with
        ``x`` in ``[0, extent)``, its reduction axes over their extents."""
        sub, inner = {}, {}
        for iv, (lo, ext) in zip(rst.data, region):
            x = self.fresh(rst.name, iv.var.name + ".r")
            sub[iv.var] = _add(lo, x)
            inner[x] = (te.Const(0, INDEX), _add(ext, te.Const(-1, INDEX)))
        for iv in rst.reduce:
            k = self.fresh(rst.name, iv.var.name + ".r")
            sub[iv.var] = k
            inner[k] = (te.Const(0, INDEX), _add(self.bind(iv.extent), te.Const(-1, INDEX)))
        return te.substitute(self.bind(rst.value), sub), inner

    def root_region(self, pst: StageState):
        """A root stage with padded dimensions is computed over what its readers read, as an
        attached one is: along a padded dimension the union of their reads (a halo before
        0 included), rounded up to the multiple; along the others its whole shape."""
        reads = []
        for name in self.g.readers(pst.name):
            rst = self.g.stages[name]
            ranges = {iv.var: (te.Const(0, INDEX), _add(self.bind(e), te.Const(-1, INDEX)))
                      for iv, e in zip(rst.data, padded_shape(rst))}
            ranges.update({iv.var: (te.Const(0, INDEX),
                                    _add(self.bind(iv.extent), te.Const(-1, INDEX)))
                           for iv in rst.reduce})
            reads.append((self.bind(rst.value), ranges))
        region = self.infer_region(pst, reads, {})
        return [reg if d in pst.pad else (te.Const(0, INDEX), self.bind(e))
                for d, (reg, e) in enumerate(zip(region, padded_shape(pst)))]

    def unguard_padded_reads(self, value: te.Expr) -> te.Expr:
        """``select(in bounds, P[idx], 0)`` is ``P[idx]`` where ``P`` is a copy of an input
        (``cache_read``) padded along every dimension the condition tests: ``P`` is computed
        over all its readers read, and holds zeros past the input's ends. So an op written
        with its zero padding as a guarded read (the textbook convolution) pays for the
        padding once per input element, in the schedule's padded copy, not once per
        multiply."""
        def post(n):
            if isinstance(n, te.Select) and isinstance(n.t, te.Load) and \
                    isinstance(n.f, te.Const) and n.f.value == 0 and \
                    n.t.tensor.name in self.padded_copies and \
                    self._tests_only_padded_bounds(n.cond, n.t.indices,
                                                   self.g.stages[n.t.tensor.name]):
                return n.t
            return None
        return te.rewrite(value, post) if self.padded_copies else value

    def _tests_only_padded_bounds(self, cond: te.Expr, indices, pst: StageState) -> bool:
        """Whether ``cond`` is false only where an index along a padded dimension is past
        ``pst``'s shape: each of its conjuncts bounds one such index (``idx >= b`` with
        ``b <= 0``, ``idx < b`` with ``b >= extent``), and the indices of the other
        dimensions use none of its variables (so each of their values is also read where
        ``cond`` holds, in bounds)."""
        shape_vars = set(self.free_shape_vars)
        lins = [linear(self.bind(i)) for i in indices]
        tested = set()
        for part in conjuncts(cond):
            if not (isinstance(part, te.Compare) and part.op in _FLIP
                    and part.a.dtype == INDEX):
                return False
            e = linear(self.bind(part.a)) - linear(self.bind(part.b))     # e op 0
            found = next(((d, sign) for d in pst.pad for sign in (1, -1)
                          if _free_of(e - lins[d].scale(sign), shape_vars)), None)
            if found is None:
                return False
            d, sign = found
            # e == sign * idx + rest, so the conjunct says idx op bound
            rest = e - lins[d].scale(sign)
            op, bound = (part.op, rest.scale(-1)) if sign == 1 else (_FLIP[part.op], rest)
            extent = linear(self.bind(pst.shape[d]))
            margin = {">=": bound.scale(-1), ">": bound.scale(-1) - const(1),
                      "<": bound - extent, "<=": bound - extent + const(1)}[op]
            if not (margin.is_const and margin.const >= 0):
                return False
            tested.add(d)
        used = te.free_vars(cond)
        return all(d in tested or not (te.free_vars(i) & used) for d, i in enumerate(indices))

    def infer_region(self, pst: StageState, reads, outer_ranges):
        """The box of ``pst`` read by one iteration of the attach loop: the union over the
        loads of ``pst`` in ``reads`` (``[(expr, {var: (lo, hi)})]``, the variables of the
        loops inside the attach point with their inclusive ranges) of each index relaxed over
        those loops (and nested reductions). Falls back to the whole dimension."""
        relaxed = []
        for value, inner_ranges in reads:
            inner = dict(inner_ranges)
            for r in te.walk(value):
                if isinstance(r, te.Reduce):
                    for iv in r.axes:
                        inner[iv.var] = (te.Const(0, INDEX),
                                         _add(iv.extent, te.Const(-1, INDEX)))
            relaxed += [(ld, inner) for ld in te.loads(value) if ld.tensor.name == pst.name]
        ctx = B.Ctx()
        for v, (lo, e) in outer_ranges.items():
            ctx = ctx.with_loop(v, lo, e)
        region = []
        shape = padded_shape(pst)
        for d in range(len(pst.shape)):
            full = (te.Const(0, INDEX), self.bind(shape[d]))
            # many loads share a dimension's index (the 16 reads of a Winograd tile differ
            # in two of seven): each distinct one is relaxed, and each distinct box merged,
            # once (the min/max chain was simplified again for every box added)
            distinct = {}
            for ld, inner in relaxed:
                distinct.setdefault((ld.indices[d], id(inner)), (ld.indices[d], inner))
            boxes = list(dict.fromkeys(B.relax(index, inner)
                                       for index, inner in distinct.values()))
            # a gather's index (T[I[i]]) is data: its region is known only as the whole
            # dimension (a region bounded by loads would need them loaded before the loop)
            if not boxes or None in boxes or any(isinstance(x, te.Load) for box in boxes
                                                 for end in box for x in te.walk(end)):
                region.append(full)
                continue
            lo, hi = boxes[0]
            # with symbolic sizes, the boxes' ends are compared by the prover: softmax's
            # row buffer is max(8 * ((D + 7) // 8) - 1, 32 * (D // 32) - 1, D - 1) + 1 =
            # 8 * ((D + 7) // 8) long, which its loops' guards can then be proven against
            bound = functools.partial(B.bounds, ctx=ctx)
            for lo2, hi2 in boxes[1:]:
                lo = simplify(te.Intrinsic("min", (lo, lo2), INDEX), bound)
                hi = simplify(te.Intrinsic("max", (hi, hi2), INDEX), bound)
            # hi < lo where the readers' loops are empty (j in [0, D // 16) with D < 16):
            # the region is empty then, not negative
            ext = simplify(te.Intrinsic("max", (te.Binary(
                "+", te.Binary("-", hi, lo, INDEX), te.Const(1, INDEX), INDEX),
                te.Const(0, INDEX)), INDEX), bound)
            if te.free_vars(ext) - set(self.free_shape_vars):
                top = B.bounds(ext, ctx)[1]      # depends on outer loops: its largest value
                if top is None:
                    region.append(full)
                    continue
                ext = te.Const(top, INDEX)
            if d in pst.pad:          # not clipped to the shape; rounded up to the multiple
                region.append((lo, simplify(te.Binary("*", ceil_div(ext, pst.pad[d]),
                                                      te.Const(pst.pad[d], INDEX), INDEX))))
            elif isinstance(ext, te.Const) and isinstance(full[1], te.Const) \
                    and ext.value >= full[1].value:
                region.append(full)
            else:
                region.append((lo, ext))
        return region


# a conjunct ``a op b`` read the other way round: ``-a op' -b``
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _free_of(lin: Linear, shape_vars: set) -> bool:
    """No loop variable in ``lin``: a constant, or an expression of the free sizes."""
    return all(len(m) == 1 and m[0] in shape_vars for m in lin.terms)


def _is_padded_copy(st: StageState, g: StageGraph) -> bool:
    """``st`` copies an input at its own indices (a `cache_read` of it) and is padded."""
    v = st.value
    return bool(st.pad) and st.combiner is None and isinstance(v, te.Load) and \
        v.tensor.name in g.inputs and \
        tuple(v.indices) == tuple(iv.var for iv in st.data)


def padded_shape(st: StageState) -> tuple:
    """The stage's shape with its padded dimensions (`Pad`) rounded up to their multiples."""
    return tuple(simplify(te.Binary("*", ceil_div(e, st.pad[d]), te.Const(st.pad[d], INDEX),
                                    INDEX)) if d in st.pad else e
                 for d, e in enumerate(st.shape))


def _init_nest(st: StageState, loops, p: int, guards, store: Access, index) -> Stmt:
    """``T[idx] = identity`` over the data loops after position ``p`` (where the first
    reduction loop is), under the guards that use no reduction loop."""
    data = [lp for lp, a in zip(loops[p:], st.leaves[p:]) if st.kind[a] == "data"]
    reduce_vars = {lp[0] for lp, a in zip(loops, st.leaves) if st.kind[a] == "reduce"}
    k_of = {lp[0]: k for k, lp in enumerate(data)}
    placed = []
    for c in guards:
        ks = [k_of[v] for v in te.free_vars(c) if v in k_of]
        if ks and not (te.free_vars(c) & reduce_vars):
            placed.append((c, max(ks)))
    return _nest(data, Store(store.buffer, index, identity(st.combiner, st.dtype)), placed, {})


def _derive(st: StageState, root_ext: dict, leaf_vars: dict):
    """Leaf extents, every axis' value in terms of the leaf vars, and the split guards."""
    ext = dict(root_ext)
    for r in st.relations:
        if isinstance(r, SplitRel):
            ext[r.outer] = ceil_div(ext[r.parent], r.factor)
            ext[r.inner] = te.Const(r.factor, INDEX)
        else:
            prod = te.Const(1, INDEX)
            for a in r.axes:
                prod = te.Binary("*", prod, ext[a], INDEX)
            ext[r.fused] = simplify(prod)
    values: dict[str, te.Expr] = dict(leaf_vars)
    guards = []
    for r in reversed(st.relations):
        if isinstance(r, SplitRel):
            # parent == outer * f + inner; guard when f may not divide the parent's extent
            values[r.parent] = simplify(te.Binary("+", te.Binary(
                "*", values[r.outer], te.Const(r.factor, INDEX), INDEX), values[r.inner], INDEX))
            if not divides(r.factor, ext[r.parent]):
                guards.append(_lt(values[r.parent], ext[r.parent]))
        else:
            assert isinstance(r, FuseRel)
            f, stride = values[r.fused], te.Const(1, INDEX)
            for k, a in enumerate(reversed(r.axes)):
                q = simplify(te.Binary("//", f, stride, INDEX))
                last = k == len(r.axes) - 1      # the outermost needs no modulo: f < prod
                values[a] = q if last else simplify(te.Binary("%", q, ext[a], INDEX))
                stride = simplify(te.Binary("*", stride, ext[a], INDEX))
    return ext, values, guards


def _nest(loops, body: Stmt, guards, attach: dict) -> Stmt:
    """Wrap ``body`` in ``loops`` (outermost first). A guard at position ``k`` goes just
    inside loop ``k`` (-1: outside all); stages attached at ``k`` come first in its body."""
    stmt = body
    for k in range(len(loops) - 1, -2, -1):
        if k >= 0 and k in attach:
            for buf, nest in reversed(attach[k]):
                stmt = Allocate(buf, _seq(nest, stmt))
        conds = [c for c, pos in guards if pos == k]
        if conds:
            stmt = If(B.conjoin(conds), stmt)
        if k >= 0:
            var, extent, kind, tag = loops[k]
            stmt = For(var, te.Const(0, INDEX), extent, kind, stmt, tag)
    return stmt


def _wrap(pre, stmt):
    for buf, s in reversed(pre):
        stmt = Allocate(buf, _seq(s, stmt))
    return stmt


def _rename_reduces(e: te.Expr, b: Builder, stage: str) -> te.Expr:
    """Give every nested Reduce's axes fresh, function-unique variables."""
    def post(n):
        if not isinstance(n, te.Reduce):
            return None
        axes = tuple(te.IterVar(b.fresh(stage, iv.var.name), iv.extent, iv.kind)
                     for iv in n.axes)
        body = te.substitute(n.body, {old.var: new.var for old, new in zip(n.axes, axes)})
        return te.Reduce(n.combiner, body, axes, n.dtype)
    return te.rewrite(e, post)


def _lower_value(e: te.Expr, access: dict, b: Builder, stage: str):
    """``(prelude, expr)``: nested Reduces computed into rank-0 local accumulators by the
    prelude ``[(buffer, stmt)]``; te Loads turned into BufferLoads."""
    pre = []

    def top(n):
        if isinstance(n, te.Reduce):
            inner_pre, body = _lower_value(n.body, access, b, stage)
            acc = Buffer(b.fresh(stage, "acc").name, n.dtype, (), "local")
            cur = BufferLoad(acc, (), n.dtype)
            update = _wrap(inner_pre, Store(acc, (), combine(n.combiner, cur, body)))
            loops = [(iv.var, iv.extent, ForKind.SERIAL, None) for iv in n.axes]
            pre.append((acc, _seq(Store(acc, (), identity(n.combiner, n.dtype)),
                                  _nest(loops, update, [], {}))))
            return cur
        if isinstance(n, te.Load):
            acc = access[n.tensor.name]
            idx = tuple(_lower_value(i, access, b, stage)[1] for i in n.indices)
            return BufferLoad(acc.buffer, acc.index(idx), n.dtype)
        return None
    out = te.rewrite(e, pre=top)
    return pre, out


def run(g: StageGraph, shapes: dict[str, int] | None = None) -> LoweredFunc:
    return Builder(g, shapes).run()
