"""Layout directives: where a stage's values are stored, apart from the loops that compute them.

``pad(P.i, m)`` (Halide's ``bound``/``align_bounds`` on a Func) only marks the dimension:
loop-nest construction computes and stores P over the region its readers read, not clipped
to P's shape, rounded up to a multiple of ``m`` (see `build_nests.Builder.infer_region`).

``pack(P.i, f)`` (TensorIR's ``transform_layout(P, lambda a, i, b: (i // f, a, b, i %
f))``, Halide's storage scheduling) gives P a blocked layout: the element ``P[a, i, b]``
is stored at ``P'[i // f, a, b, i % f]``, each block of ``f`` a contiguous panel (B of a
matmul as [N/f, K, f], conv weights as [F/f, C, KH, KW, f]). It is a change of P's
*domain*, made before any loop is built: P's data axes become ``i.o, a, b, i.i`` (so its
loop nest walks the new layout, the block innermost and contiguous), its expression reads
``i`` as ``i.o * f + i.i``, and every reader's load ``P[a, e, b]`` becomes ``P'[e // f, a,
b, e % f]`` (the range-aware simplifier folds those back to plain loop variables where the
reader's loops are split by a multiple of ``f``). The numbers are the same; only their
addresses change, which is what lets a register tile or a packed weight be read as whole
vectors at constant offsets.
"""
from __future__ import annotations

from .. import schedule as S
from .. import te
from ..arith.simplify import ceil_div, divides, simplify
from ..dtypes import INDEX
from .checks import fail, int_arg, live_stage, new_names, storage_dim
from .stage_graph import StageGraph, StageState


def pack(g: StageGraph, d: S.Pack) -> None:
    st = live_stage(g, d.stage, d.span)
    what = f"pack {d.axis} by {d.factor!r}"
    dim = storage_dim(st, d.axis, what, d.span)
    if st.relations or st.annotations or st.tensorize or st.align or st.pad \
            or st.leaves != [iv.var.name for iv in st.data + st.reduce]:
        fail(st, what, f"a layout must be given before the other directives on {st.name} "
             "(its loops follow the layout)", d.span)
    if g.attached_at(st.name):
        fail(st, what, f"stage {g.attached_at(st.name)[0][0]} is computed at one of its loops",
             d.span)
    f = int_arg(d.factor, st, what, "factor", d.span)
    new_names(st, [d.outer, d.inner], what, d.span)
    for r in g.readers(st.name):
        if g.stages[r].tensorize:
            fail(st, what, f"its reader {r} is tensorized, and a micro-kernel reads the "
                 "layout it was written for", d.span)
    _repack(g, st, dim, f, d.outer, d.inner)


def pad(g: StageGraph, d: S.Pad) -> None:
    st = live_stage(g, d.stage, d.span)
    what = f"pad {d.axis}"
    dim = storage_dim(st, d.axis, what, d.span, "extent")
    m = int_arg(d.multiple, st, what, "multiple", d.span)
    if st.pad.get(dim, m) != m:
        fail(st, what, f"{d.axis} is already padded to a multiple of {st.pad[dim]}", d.span)
    st.pad[dim] = m


def _repack(g: StageGraph, st: StageState, dim: int, f: int, outer: str, inner: str) -> None:
    old = st.data[dim]
    o, i = te.Var(outer), te.Var(inner)
    whole = simplify(te.Binary("+", te.Binary("*", o, te.Const(f, INDEX), INDEX), i, INDEX))
    st.value = te.substitute(st.value, {old.var: whole})
    if st.combiner is None and not divides(f, old.extent):
        # the positions past the end hold zeros (a reduction's padding is never read, and
        # its input reads past the end are guarded by the in-bounds proof)
        st.value = te.Select(te.Compare("<", whole, old.extent), st.value,
                             te.const(0, st.dtype), st.dtype)
    st.data = ([te.IterVar(o, ceil_div(old.extent, f))] + st.data[:dim] + st.data[dim + 1:]
               + [te.IterVar(i, te.Const(f, INDEX))])
    st.shape = (ceil_div(st.shape[dim], f), *st.shape[:dim], *st.shape[dim + 1:],
                te.Const(f, INDEX))
    st.leaves = [iv.var.name for iv in st.data + st.reduce]
    st.extents = {iv.var.name: iv.extent for iv in st.data + st.reduce}
    st.kind = {iv.var.name: "data" if iv in st.data else "reduce" for iv in st.data + st.reduce}
    tensor = te.Tensor(st.name, st.shape, st.dtype, te.Compute(tuple(st.data), st.value))
    c = te.Const(f, INDEX)

    def reread(n):
        if isinstance(n, te.Load) and n.tensor.name == st.name:
            e = n.indices[dim]
            idx = (simplify(te.Binary("//", e, c, INDEX)), *n.indices[:dim],
                   *n.indices[dim + 1:], simplify(te.Binary("%", e, c, INDEX)))
            return te.Load(tensor, idx, n.dtype)
        return None
    for r in g.readers(st.name):
        g.stages[r].value = te.rewrite(g.stages[r].value, reread)
