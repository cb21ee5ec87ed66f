"""A group of nodes -> one tensor-expression function (the fused kernel's algorithm).

Sizes are concrete here (a graph is compiled for the sizes it runs at), so every shape is a
constant. The group's members are composed by substitution:

- a member before the last, always injective, is inlined into its readers: a load
  ``X[idx]`` of its result becomes its expression at ``idx``;
- the anchor keeps its stages and their names (``Xp``, ``Wp``, ``P``, ``Y`` for conv2d), so
  its own schedule applies to the fused function unchanged;
- when injective ops follow a complex anchor (an epilogue), the anchor's output stage is
  inlined into them, and the last one's stage takes the name and axes of the anchor's
  output: ``Y[n, m] = relu(P[n, m] + b[m])`` for dense, scheduled exactly as the anchor's
  ``Y`` was. An output stage that is the reduction itself (the textbook conv2d) is first
  split into the accumulator its schedule's ``cache_write`` makes and a copy.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import te
from ..arith.simplify import simplify
from ..dtypes import INDEX
from .fuse import Group
from .ir import Graph, Node, eval_size


@dataclass(frozen=True)
class FusedFunction:
    """``fn`` computes graph value ``output`` from graph values ``inputs`` (in
    ``fn.inputs`` order); ``anchor`` is the node whose schedule ``fn`` takes, at the op
    sizes ``anchor_sizes``."""
    fn: te.Function
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    anchor: Node
    anchor_sizes: tuple[tuple[str, int], ...]
    ops: tuple[str, ...]
    dropped: tuple[str, ...] = ()       # the caches made here, whose cache_write is dropped


def run(graph: Graph, group: Group, graph_sizes: dict[str, int], name: str,
        caches: tuple[str, ...] = ()) -> FusedFunction:
    """``caches``: the names the anchor's schedule gives its output's caches (``P =
    cache_write(Y, local)``, then ``PL = cache_write(P, local)``). When an epilogue follows
    an output stage that is itself a reduction (textbook conv2d, matmul), the reduction
    becomes the first cache and the output ``Y = epilogue(P[...])``: the stages the
    schedule's ``cache_write`` would have made (the api layer drops that directive), so the
    epilogue runs where the schedule copies its tile out. With a second cache and an
    epilogue reading only per-channel values (a bias, relu), it moves one step in: ``PL``
    sums, ``P = epilogue(PL[...])`` (the vectorized copy out of the register tile), ``Y``
    copies P."""
    accumulator = caches[0] if caches else None
    nodes = [graph.nodes[i] for i in group.nodes]
    apos, last = group.nodes.index(group.anchor), len(nodes) - 1
    anchor = nodes[apos]
    taken = {t.name for t in anchor.fn.stages()} | {p.name for p in anchor.fn.inputs}
    accumulator = _fresh(accumulator or f"{anchor.fn.outputs[0].name}_acc", taken)
    placeholders: dict[str, te.Tensor] = {}
    inline: dict[str, tuple] = {}            # value -> (axis vars, expression)
    final, anchor_axes, split = [], None, None
    for pos, node in enumerate(nodes):
        sub = {var: te.Const(eval_size(expr, graph_sizes), var.dtype)
               for var, expr in node.binding}
        mapping: dict[int, object] = {}
        for ph, v in zip(node.fn.inputs, node.inputs):
            if v in inline:
                mapping[id(ph)] = inline[v]
                continue
            if v not in placeholders:
                shape = tuple(te.Const(n, INDEX) for n in graph.shape_of(v, graph_sizes))
                # the anchor's inputs keep its parameter names (its schedule may name them:
                # cache_read(W, ...)); others are named by position. Not by the graph's
                # values: two groups that compute alike (ResNet's repeated blocks) then
                # print the same C, compiled once
                pname = ph.name if pos == apos else _fresh(f"in{len(placeholders)}", taken)
                placeholders[v] = te.Tensor(pname, shape, graph.value(v).dtype)
            mapping[id(ph)] = placeholders[v]
        post = _substituter(sub, mapping)
        out = node.fn.outputs[0]
        results = {id(o) for o in node.fn.outputs}
        for t in node.fn.stages():
            axes = tuple(te.IterVar(ax.var, _const(ax.extent, post), ax.kind)
                         for ax in t.op.axes)
            body = te.rewrite(t.op.body, post)
            real = (pos == apos and (t is not out or pos == last)) or (
                pos == last and id(t) in results)
            if t is out and pos == apos and not real and isinstance(body, te.Reduce):
                shape = tuple(_const(d, post) for d in t.shape)
                acc = te.Tensor(accumulator, shape, t.dtype, te.Compute(axes, body))
                vars_ = tuple(ax.var for ax in axes)
                mapping[id(t)] = (vars_, te.Load(acc, vars_, t.dtype))
                split = accumulator
            elif real:
                shape = tuple(_const(d, post) for d in t.shape)
                mapping[id(t)] = te.Tensor(t.name, shape, t.dtype, te.Compute(axes, body))
            else:
                mapping[id(t)] = (tuple(ax.var for ax in axes), body)
        if pos == apos and pos < last:
            anchor_axes = mapping[id(out)]
        if pos < last:
            assert isinstance(mapping[id(out)], tuple), "fusion keeps inner results inline"
            inline[node.outputs[0]] = mapping[id(out)]
        else:
            final = [mapping[id(o)] for o in node.fn.outputs]
    if anchor_axes is not None:
        final = [_as_anchor_output(final[0], anchor.fn.outputs[0].name, anchor_axes[0])]
        if split and len(caches) > 1 and _per_channel(final[0], split):
            final = [_epilogue_inward(final[0], split, caches[1])]
            split = caches[:2]
        elif split:
            split = caches[:1] if caches else ()
    fn = te.Function(name, tuple(placeholders.values()), tuple(final), (), anchor.fn.attrs)
    return FusedFunction(fn, tuple(placeholders), nodes[-1].outputs, anchor,
                         tuple(anchor.sizes(graph_sizes).items()),
                         tuple(n.op for n in nodes), tuple(split or ()))


def _per_channel(y: te.Tensor, acc: str) -> bool:
    """Whether the epilogue in ``y`` reads, besides the accumulator at ``y``'s own indices,
    only values indexed by the channel axis (a bias, a scale): what a vector along the
    channels' lanes can load."""
    channel = y.op.axes[1].var if len(y.op.axes) > 1 else None
    for ld in te.loads(y.op.body):
        if ld.tensor.name == acc:
            continue
        if any(v != channel for i in ld.indices for v in te.free_vars(i)):
            return False
    return True


def _epilogue_inward(y: te.Tensor, acc: str, inner: str) -> te.Tensor:
    """``Y = epi(P[..])`` with ``P = sum(..)`` -> ``Y = P[..]``, ``P = epi(PL[..])``,
    ``PL = sum(..)``."""
    old = next(ld.tensor for ld in te.loads(y.op.body) if ld.tensor.name == acc)
    pl = te.Tensor(inner, old.shape, old.dtype, old.op)

    def post(e):
        if isinstance(e, te.Load) and e.tensor is old:
            return te.Load(pl, e.indices, e.dtype)
        return None
    p = te.Tensor(acc, y.shape, y.dtype, te.Compute(y.op.axes, te.rewrite(y.op.body, post)))
    axes = tuple(ax.var for ax in y.op.axes)
    return te.Tensor(y.name, y.shape, y.dtype, te.Compute(y.op.axes, te.Load(p, axes, y.dtype)))


def _substituter(sub: dict, mapping: dict):
    def post(e):
        if isinstance(e, te.Var):
            return sub.get(e)
        if isinstance(e, te.Load) and id(e.tensor) in mapping:
            m = mapping[id(e.tensor)]
            if isinstance(m, te.Tensor):
                return te.Load(m, e.indices, e.dtype)
            axes, body = m
            return te.substitute(body, dict(zip(axes, e.indices)))
        return None
    return post


def _const(e: te.Expr, post) -> te.Expr:
    return simplify(te.rewrite(e, post))


def _as_anchor_output(t: te.Tensor, name: str, axes: tuple[te.Var, ...]) -> te.Tensor:
    """``t`` (the epilogue's last stage, reading the anchor's output at its own indices)
    renamed to the anchor's output stage, with the anchor's axis names."""
    rename = dict(zip((ax.var for ax in t.op.axes), axes))
    new_axes = tuple(te.IterVar(rename[ax.var], ax.extent, ax.kind) for ax in t.op.axes)
    body = te.substitute(t.op.body, rename)
    return te.Tensor(name, t.shape, t.dtype, te.Compute(new_axes, body))


def _fresh(name: str, taken: set[str]) -> str:
    out, k = name, 1
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    taken.add(out)
    return out
