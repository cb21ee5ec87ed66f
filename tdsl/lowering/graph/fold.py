"""Constant folding: what depends only on weights is computed once, at build time.

Three rewrites, in order:

1. A node whose inputs are all weights (or folded values) is evaluated with the ops'
   reference (numpy); its results become weights.
2. ``batch_norm`` after a standard ``conv2d``/``depthwise_conv2d`` (through an optional
   ``bias_add``) folds into the convolution: with ``s = gamma / sqrt(var + eps)``,
   ``W' = W * s`` (per output channel) and ``b' = beta + (b - mean) * s``, and the graph
   computes ``bias_add(conv(x, W'), b')``. Only the standard library's ops are rewritten,
   since only their meaning is known here.
3. Any other ``batch_norm`` whose statistics are weights (after a concat, a pool, a relu)
   becomes ``scale_shift(x, s, beta - mean * s)``: a multiply-add per element, where the
   square root and the division ran on every element (TVM's SimplifyInference).

Weights nobody reads any more are dropped.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from .. import te
from ..reference.semantics import evaluate
from .ir import Graph, Node, Value

CONVS = ("conv2d", "depthwise_conv2d")


def run(graph: Graph, params: dict[str, np.ndarray], std: Callable[[str], object],
        graph_sizes: dict[str, int]) -> tuple[Graph, dict[str, np.ndarray], tuple[str, ...]]:
    """``std(name)``: the standard library's definition of an op (to recognise ours and to
    make new nodes). Returns the new graph, its weights and what was folded, in words."""
    params, notes = dict(params), []
    graph = _fold_constants(graph, params, graph_sizes, notes)
    graph = _fold_batch_norms(graph, params, std, notes)
    graph = _simplify_batch_norms(graph, params, std, notes)
    used = {i for n in graph.nodes for i in n.inputs} | set(graph.outputs)
    keep = tuple(p for p in graph.params if p in used)
    graph = dataclasses.replace(
        graph, params=keep, values=tuple((k, v) for k, v in graph.values
                                         if v.kind != "param" or k in keep))
    return graph, {k: params[k] for k in keep}, tuple(notes)


def _is_std(node: Node, std, name: str) -> bool:
    return node.op == name and node.opdef is std(name)


def _fold_batch_norms(graph: Graph, params, std, notes) -> Graph:
    while True:
        found = _find_conv_bn(graph, params, std)
        if found is None:
            return graph
        graph = _rewrite_conv_bn(graph, params, std, *found)
        notes.append(f"batch_norm {found[2].outputs[0]} folded into {found[0].op} "
                     f"{found[0].outputs[0]}")


def _find_conv_bn(graph: Graph, params, std):
    producers, consumers = graph.producers(), graph.consumers()
    private = {v for v, users in consumers.items() if len(users) == 1} - set(graph.outputs)
    for bn in graph.nodes:
        if not _is_std(bn, std, "batch_norm") or not all(p in params for p in bn.inputs[1:]):
            continue
        y = bn.inputs[0]
        node = producers.get(y)
        bias = None
        if node is not None and _is_std(node, std, "bias_add") and y in private \
                and node.inputs[1] in params:
            bias, y = node, node.inputs[0]
            node = producers.get(y)
        if node is None or y not in private or \
                not any(_is_std(node, std, c) for c in CONVS):
            continue
        if node.inputs[1] in params:
            return node, bias, bn
    return None


def _bn_scale(params, bn: Node):
    """A batch_norm's ``(scale, beta, mean)`` in float64: ``scale = gamma / sqrt(var + eps)``."""
    gamma, beta, mean, var = (params[p].astype(np.float64) for p in bn.inputs[1:])
    return gamma / np.sqrt(var + dict(bn.attrs).get("eps", 1e-5)), beta, mean


def _simplify_batch_norms(graph: Graph, params, std, notes) -> Graph:
    nodes, new_values = [], []
    values = graph.value_map()
    names = set(values)
    for n in graph.nodes:
        if not _is_std(n, std, "batch_norm") or not all(p in params for p in n.inputs[1:]):
            nodes.append(n)
            continue
        scale, beta, mean = _bn_scale(params, n)
        out, dtype, stat = n.outputs[0], params[n.inputs[1]].dtype, values[n.inputs[1]]
        s = _new_weight(params, names, f"{out}_scale", scale.astype(dtype), stat)
        t = _new_weight(params, names, f"{out}_shift", (beta - mean * scale).astype(dtype), stat)
        new_values += [(s.name, s), (t.name, t)]
        nodes.append(_make_node(std("scale_shift"), "scale_shift",
                                (n.inputs[0], s.name, t.name), n.outputs,
                                [values[n.inputs[0]], stat, stat], n.span))
        notes.append(f"batch_norm {out} -> scale_shift, its scale and shift computed now")
    if not new_values:
        return graph
    return dataclasses.replace(graph, nodes=tuple(nodes),
                               values=graph.values + tuple(new_values),
                               params=graph.params + tuple(k for k, _ in new_values))


def _rewrite_conv_bn(graph: Graph, params, std, conv: Node, bias: Node | None, bn: Node):
    scale, beta, mean = _bn_scale(params, bn)
    w = params[conv.inputs[1]]
    b0 = params[bias.inputs[1]].astype(np.float64) if bias is not None else 0.0
    values = graph.value_map()
    names, out = set(values), bn.outputs[0]
    new_w = _new_weight(params, names, f"{out}_w",
                        (w * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype),
                        values[conv.inputs[1]])
    new_b = _new_weight(params, names, f"{out}_b", (beta + (b0 - mean) * scale).astype(w.dtype),
                        values[bn.inputs[1]])
    w_name, b_name = new_w.name, new_b.name
    new_conv = dataclasses.replace(conv, inputs=(conv.inputs[0], w_name))
    add = _make_node(std("bias_add"), "bias_add", (conv.outputs[0], b_name), (out,),
                     [values[conv.outputs[0]], values[bn.inputs[1]]], bn.span)
    dropped = {bn.inputs[0]} if bias is not None else set()
    nodes = []
    for n in graph.nodes:
        if n is conv:
            nodes.append(new_conv)
        elif n is bn:
            nodes.append(add)
        elif n is not bias:
            nodes.append(n)
    new_values = [(k, v) for k, v in graph.values if k not in dropped]
    new_values += [(w_name, new_w), (b_name, new_b)]
    return dataclasses.replace(graph, nodes=tuple(nodes), values=tuple(new_values),
                               params=graph.params + (w_name, b_name))


def _make_node(opdef, op: str, inputs, outputs, args: list[Value], span) -> Node:
    """A node of a standard op whose sizes are all plain names in its inputs' shapes."""
    fn = opdef.instantiate({}, [len(a.shape) for a in args])
    binding = {}
    for ph, a in zip(fn.inputs, args):
        for dim, got in zip(ph.shape, a.shape):
            if isinstance(dim, te.Var):
                binding.setdefault(dim, got)
    return Node(op, tuple(inputs), tuple(outputs), (), fn,
                tuple((v, binding[v]) for v in fn.shape_vars), opdef, span)


def _fold_constants(graph: Graph, params, graph_sizes, notes) -> Graph:
    nodes, folded = [], set()
    values = graph.value_map()
    for n in graph.nodes:
        if not n.inputs or not all(i in params for i in n.inputs) \
                or any(o in graph.outputs for o in n.outputs):
            nodes.append(n)
            continue
        try:
            sizes = n.sizes(graph_sizes)
        except KeyError:            # a size only the inputs will tell
            nodes.append(n)
            continue
        outs = evaluate(n.fn, [params[i] for i in n.inputs], sizes)
        for name, arr in zip(n.outputs, outs):
            params[name] = arr
            values[name] = dataclasses.replace(values[name], kind="param")
            folded.add(name)
        notes.append(f"{', '.join(n.outputs)} = {n.op}(...) computed at build time")
    return dataclasses.replace(graph, nodes=tuple(nodes), values=tuple(values.items()),
                               params=graph.params + tuple(sorted(folded)))


def _new_weight(params, taken: set[str], hint: str, array: np.ndarray, like: Value) -> Value:
    """A weight added to ``params``: named ``hint`` (made unique among ``taken``), its value
    declared as ``like`` is (the same dtype and shape)."""
    v = dataclasses.replace(like, name=_fresh(hint, taken))
    params[v.name] = array
    return v


def _fresh(name: str, taken: set[str]) -> str:
    out, k = name, 1
    while out in taken:
        out, k = f"{name}{k}", k + 1
    taken.add(out)
    return out
