"""Tensorize: replace the loops from an axis inward by a call of a micro-kernel.

A helper of `build_nests` (not a pipeline pass: the match is made on the stage's tensor
expression, where it is easiest to state). The loops below the axis match the intrinsic when

- their data loops, in order, have the extents of the intrinsic's data axes, and their
  reduction loops those of its reduction axes (same combiner);
- the stage's expression equals the intrinsic's with its axis variables renamed to those
  loops, node for node, except for the indices of each tensor: the stage's dimensions whose
  index uses the loops map, in order, to the intrinsic's dimensions, and each such index is
  ``offset + intrinsic index`` with an offset not using the loops, or where the intrinsic's
  index is one variable ``offset + step * variable`` (a strided view: a convolution of
  stride 2 reads every other input column); the other dimensions are fixed for the whole
  nest (the stage tensor may have more dimensions than the intrinsic's). The offsets of a
  tensor are where the kernel's view of it starts.

The call passes, for each intrinsic input in order and then the output, ``&buf[offset]``
followed by the buffer's strides (in elements, times the steps), as `TensorIntrin`
documents. The C source goes to ``attrs["extern_sources"][name]``; the intrinsic itself to
``attrs["tensor_intrinsics"][name]`` (the interpreter runs it from there). An intrinsic
with ``init`` and ``finish`` (sums kept in registers of its own) also gets those two calls
around the reduction loops (`state_calls`)."""
from __future__ import annotations

import dataclasses

from ...errors import ScheduleError
from .. import te
from ..arith.simplify import simplify
from ..dtypes import INDEX
from ..loop_ir import AddressOf, Call, Evaluate
from ..passes.flatten import flat_index, strides_of


class _Mismatch(Exception):
    pass


def error(st, why: str, b=None) -> ScheduleError:
    axis, intrin, span = st.tensorize
    return ScheduleError(f"In schedule of {st.name}, can't tensorize {axis} with "
                         f"{intrin.name}: {why}; loops are: {st.loops()}", span)


def call(st, value: te.Expr, out_index, loops, axes, store, access: dict, b) -> Evaluate:
    """The `Evaluate(Call)` replacing ``loops`` (``(var, extent, kind, tag)``, outermost
    first, of leaf axes ``axes``); ``value`` is the stage's (reduction body) expression over
    the loop variables, ``out_index`` the index it is stored at."""
    _, intrin, _ = st.tensorize
    fn = intrin.compute
    if len(fn.outputs) != 1 or fn.outputs[0].is_placeholder:
        raise error(st, "the intrinsic must compute exactly one tensor")
    out = fn.outputs[0]
    body, combiner, raxes = out.op.body, None, ()
    if isinstance(body, te.Reduce):
        body, combiner, raxes = body.body, body.combiner, body.axes
    if combiner != st.combiner:
        raise error(st, f"the intrinsic is a {combiner or 'plain'} computation, the stage a "
                        f"{st.combiner or 'plain'} one")
    data = [lp for lp, a in zip(loops, axes) if st.kind[a] == "data"]
    red = [lp for lp, a in zip(loops, axes) if st.kind[a] == "reduce"]
    if len(data) != len(out.op.axes) or len(red) != len(raxes):
        raise error(st, f"the nest below has {len(data)} data and {len(red)} reduction loops, "
                        f"the intrinsic {len(out.op.axes)} and {len(raxes)}")
    rename = {}
    for (v, ext, _, _), iv in zip(data + red, (*out.op.axes, *raxes)):
        if simplify(ext) != simplify(iv.extent):
            raise error(st, f"loop {v.name} has extent {ext}, the intrinsic's axis "
                            f"{iv.var.name} has {iv.extent}")
        rename[iv.var] = v
    inner = set(rename.values())
    m = _Matcher(inner)
    try:
        m.match(value, simplify(te.substitute(body, rename)))
        out_view = m.view(tuple(out_index), tuple(rename[iv.var] for iv in out.op.axes))
    except _Mismatch as e:
        raise error(st, f"the loop nest does not compute what the intrinsic does ({e})")
    args = []
    for t in fn.inputs:
        if t.name not in m.tensors:
            raise error(st, f"the stage reads nothing where the intrinsic reads {t.name}")
        args += _pointer(access[m.tensors[t.name]], *m.views[t.name])
    args += _pointer(store, *out_view)
    b.attrs.setdefault("extern_sources", {})[intrin.name] = intrin.c_impl
    b.attrs.setdefault("tensor_intrinsics", {})[intrin.name] = intrin
    return Evaluate(Call(intrin.name, tuple(args)))


def state_calls(st, call: Evaluate, between: list) -> tuple[Evaluate, Evaluate] | None:
    """For an intrinsic that keeps its sums in registers of its own (`TensorIntrin.init`),
    the calls that start and write back the output tile of ``call``: its last arguments,
    the output's pointer and strides. ``between`` are the stage's loops from its first
    reduction loop to the tensorized axis, which must all be reduction loops. None for an
    intrinsic that accumulates in memory."""
    _, intrin, _ = st.tensorize
    if not intrin.init:
        return None
    data = [a for a in between if st.kind[a] == "data"]
    if data:
        raise error(st, f"it keeps its sums in registers across the reduction loops around "
                        f"it, and {', '.join(data)} between them would move the output; "
                        f"reorder the data loops outside the reduction")
    out = call.value.args[-(1 + intrin.compute.outputs[0].ndim):]
    return Evaluate(Call(intrin.init, out)), Evaluate(Call(intrin.finish, out))


def _pointer(acc, offsets, dims, steps) -> list:
    strides = strides_of(acc.buffer)
    return [AddressOf(acc.buffer, flat_index(acc.buffer, acc.index(offsets))),
            *(simplify(te.Binary("*", strides[d], te.Const(k, INDEX), INDEX)) if k != 1
              else strides[d] for d, k in zip(dims, steps))]


def _step(index: te.Expr, var: te.Var) -> int:
    """How much ``index`` grows when ``var`` grows by one, where that is a positive
    constant; 1 otherwise (the offset check then says why the index does not match)."""
    at = [simplify(te.substitute(index, {var: te.Const(v, INDEX)})) for v in (0, 1)]
    step = simplify(te.Binary("-", at[1], at[0], INDEX))
    return step.value if isinstance(step, te.Const) and step.value > 0 else 1


class _Matcher:
    def __init__(self, inner: set):
        self.inner = inner
        self.tensors: dict[str, str] = {}            # intrinsic tensor -> stage tensor
        # intrinsic tensor -> (offsets, dims, steps)
        self.views: dict[str, tuple] = {}

    def view(self, s_idx: tuple, i_idx: tuple) -> tuple:
        """(the stage index where the view starts, the stage dimension of each intrinsic
        dimension, the stage's step along it per step of the intrinsic's index). A step
        other than 1 is a strided view (a convolution of stride 2 reads every other input
        column): allowed where the intrinsic's index is one variable."""
        dims = [d for d, e in enumerate(s_idx) if te.free_vars(e) & self.inner]
        if len(dims) != len(i_idx):
            raise _Mismatch(f"{len(dims)} dimensions vary in the nest where the intrinsic "
                            f"has {len(i_idx)}")
        offsets, steps = list(s_idx), []
        for d, i in zip(dims, i_idx):
            step = _step(s_idx[d], i) if isinstance(i, te.Var) else 1
            scaled = i if step == 1 else te.Binary("*", i, te.Const(step, INDEX), INDEX)
            offsets[d] = simplify(te.Binary("-", s_idx[d], scaled, INDEX))
            if te.free_vars(offsets[d]) & self.inner:
                raise _Mismatch(f"index {s_idx[d]} is not {i} plus an offset")
            steps.append(step)
        return tuple(offsets), tuple(dims), tuple(steps)

    def match(self, s: te.Expr, i: te.Expr) -> None:
        if isinstance(i, te.Load):
            if not isinstance(s, te.Load):
                raise _Mismatch(f"{s} is not a load like {i}")
            name = i.tensor.name
            if self.tensors.setdefault(name, s.tensor.name) != s.tensor.name:
                raise _Mismatch(f"{name} stands for both {self.tensors[name]} and "
                                f"{s.tensor.name}")
            view = self.view(s.indices, i.indices)
            if self.views.setdefault(name, view) != view:
                raise _Mismatch(f"{name} is read at two different places")
            return
        if type(s) is not type(i) or isinstance(i, te.Reduce):
            raise _Mismatch(f"{s} vs {i}")
        if isinstance(i, te.Var):
            if s != i:
                raise _Mismatch(f"{s} vs {i}")
            return
        for f in dataclasses.fields(i):
            a, c = getattr(s, f.name), getattr(i, f.name)
            if isinstance(c, te.Expr):
                self.match(a, c)
            elif isinstance(c, tuple) and c and isinstance(c[0], te.Expr):
                if len(a) != len(c):
                    raise _Mismatch(f"{s} vs {i}")
                for x, y in zip(a, c):
                    self.match(x, y)
            elif a != c:
                raise _Mismatch(f"{s} vs {i}")
