"""A group of nodes -> one tensor-expression function (the fused kernel's algorithm).

Sizes are concrete here (a graph is compiled for the sizes it runs at), so every shape is a
constant. The group's members are composed by substitution:

- a member before the last, always injective, is inlined into its readers: a load
  ``X[idx]`` of its result becomes its expression at ``idx``;
- the anchor keeps its stages and their names (``Xp``, ``Wp``, ``P``, ``Y`` for conv2d), so
  its own schedule applies to the fused function unchanged;
- when injective ops follow a complex anchor (an epilogue), the anchor's output stage is
  inlined into them, and the last one's stage takes the name and axes of the anchor's
  output: ``Y[n, f, y, x] = relu(P[n, f // 16, y, x, f % 16] + b[f])``, scheduled exactly
  as the anchor's ``Y`` was.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import te
from ..dtypes import INDEX
from ..simplify import simplify
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


def run(graph: Graph, group: Group, graph_sizes: dict[str, int], name: str) -> FusedFunction:
    env = {te.Var(k): v for k, v in graph_sizes.items()}
    nodes = [graph.nodes[i] for i in group.nodes]
    apos, last = group.nodes.index(group.anchor), len(nodes) - 1
    anchor = nodes[apos]
    taken = {t.name for t in anchor.fn.stages()}
    placeholders: dict[str, te.Tensor] = {}
    inline: dict[str, tuple] = {}            # value -> (axis vars, expression)
    final, anchor_axes = [], None
    for pos, node in enumerate(nodes):
        sub = {var: te.Const(eval_size(expr, env), var.dtype) for var, expr in node.binding}
        mapping: dict[int, object] = {}
        for ph, v in zip(node.fn.inputs, node.inputs):
            if v in inline:
                mapping[id(ph)] = inline[v]
                continue
            if v not in placeholders:
                shape = tuple(te.Const(n, INDEX) for n in graph.shape_of(v, graph_sizes))
                placeholders[v] = te.Tensor(_fresh(v, taken), shape, graph.value(v).dtype)
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
            if real:
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
    fn = te.Function(name, tuple(placeholders.values()), tuple(final), (), anchor.fn.attrs)
    return FusedFunction(fn, tuple(placeholders), nodes[-1].outputs, anchor,
                         tuple(anchor.sizes(graph_sizes).items()),
                         tuple(n.op for n in nodes))


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
