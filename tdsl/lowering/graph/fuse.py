"""Operator fusion: the graph's nodes grouped into kernels by the TVM paper's rules.

Walking the nodes in program order, a node joins the group that produced one of its
inputs ``v`` when ``v`` is that group's result, is read by this node alone and is no graph
output (so ``v`` never needs a buffer), and:

- the node is injective and the group is all injective (injective chains fuse);
- the node is injective, reads ``v`` elementwise (at its own indices, same shape), and
  the group's anchor is complex-out-fusable (conv2d + bias_add + relu is one kernel: the
  epilogue is applied to each output as it is stored); after an output stage that is a
  reduction (the textbook conv2d) only per-channel epilogues join (a residual add does
  not: see `_can_join`);
- the node is a reduction and the group is all injective (a reduction takes fused
  injective inputs; it becomes the anchor), unless it reads ``v`` through a window (a
  pooling window would compute the group again for each output it overlaps).

Then a group of one elementwise op whose value only a complex group's epilogue reads
joins that group (`_inline_elementwise_producers`: TVM puts a producer in its
post-dominator's group). Complex ops start a group of their own; opaque ops stand alone. A
group runs where its last node stands: its outside inputs are all computed by then, since
what is inside a group is read by nobody outside it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .ir import Graph, Node
from .patterns import (Pattern, classify, moves_values_only, output_is_fusable,
                       output_is_reduction, reads_elementwise, reads_per_channel,
                       reads_through_window, vectors_along_output)


# the layout pass's conversions (layout.py's _CONVERSIONS)
LAYOUT_TRANSFORMS = ("to_nchwc", "from_nchwc", "to_nchwc_u8", "from_nchwc_u8", "to_nchwc_i16",
                     "from_nchwc_i16", "to_nchwc_i32", "from_nchwc_i32")


@dataclass(frozen=True)
class Group:
    """Nodes (indices into ``graph.nodes``, in order) that become one kernel. ``anchor``:
    the node whose schedule the kernel takes; ``pattern``: the group's kind."""
    nodes: tuple[int, ...]
    anchor: int
    pattern: Pattern

    @property
    def output_node(self) -> int:
        return self.nodes[-1]


def run(graph: Graph, fuse: bool = True) -> tuple[Group, ...]:
    """The groups, in the order they run; ``fuse=False`` gives one group per node."""
    patterns = [classify(n.fn) for n in graph.nodes]
    if not fuse:
        return tuple(Group((i,), i, p) for i, p in enumerate(patterns))
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    group_of: dict[str, int] = {}            # a group's result value -> index in `groups`
    groups: list[Group | None] = []
    for i, node in enumerate(graph.nodes):
        pat = patterns[i]
        joined = None
        for k, v in enumerate(node.inputs):
            g = group_of.get(v)
            if g is None or v in outputs or len(consumers.get(v, ())) != 1:
                continue
            if _can_join(groups[g], graph, node, k, pat, patterns):
                joined = g
                break
        if joined is None:
            groups.append(Group((i,), i, pat))
            joined = len(groups) - 1
        else:
            old = groups[joined]
            anchor = i if (pat == Pattern.REDUCTION) else old.anchor
            if old.pattern == Pattern.INJECTIVE and pat == Pattern.INJECTIVE:
                anchor = i                   # an injective group takes its last op's schedule
            groups[joined] = Group(old.nodes + (i,), anchor, max(old.pattern, pat))
            group_of = {v: g for v, g in group_of.items() if g != joined}
        for o in node.outputs:
            group_of[o] = joined
    ordered = _inline_elementwise_producers([g for g in groups if g is not None], graph,
                                            consumers, outputs)
    return tuple(sorted(ordered, key=lambda g: g.output_node))


def _inline_elementwise_producers(groups: list[Group], graph: Graph, consumers,
                                  outputs) -> list[Group]:
    """A kernel of one elementwise op (each input read at the output's own indices) whose
    value only a complex kernel's epilogue reads, elementwise, is computed in that epilogue
    instead, as TVM's fusion puts a producer in the group of the consumer that
    post-dominates it: the epilogue reads the producer's inputs, once per element as the
    op would. The walk above joins a node to its producer only, so a residual's
    DequantizeLinear, computed before the convolutions whose epilogue adds it, stayed a
    kernel of its own that wrote four bytes a value for the epilogue to read back (the int8
    ResNet block: 12 us of 1.18 ms, and the epilogue read 800 KB where the u8 input is 200)."""
    group_of = {i: g for g in groups for i in g.nodes}
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    merged: dict[int, Group] = {}            # a complex group's output node -> its new form
    gone = set()
    for g in groups:
        if len(g.nodes) != 1 or g.pattern != Pattern.INJECTIVE:
            continue
        node = graph.nodes[g.nodes[0]]
        v = node.outputs[0]
        readers = consumers.get(v, ())
        if len(node.outputs) != 1 or v in outputs or len(readers) != 1 or \
                node.op in LAYOUT_TRANSFORMS or \
                not all(reads_elementwise(node.fn, k) and
                        graph.value(x).shape == graph.value(v).shape
                        for k, x in enumerate(node.inputs)):
            continue
        c = readers[0]
        target = group_of[index[id(c)]]
        if target.pattern != Pattern.COMPLEX or index[id(c)] == target.anchor or \
                not all(reads_elementwise(c.fn, k) for k, x in enumerate(c.inputs) if x == v):
            continue
        target = merged.get(target.output_node, target)
        merged[target.output_node] = Group(tuple(sorted(target.nodes + g.nodes)),
                                           target.anchor, target.pattern)
        gone.add(g.nodes)
    return [merged.get(g.output_node, g) for g in groups if g.nodes not in gone]


def _can_join(group: Group, graph: Graph, node: Node, k: int, pat: Pattern, patterns) -> bool:
    if len(node.outputs) != 1 or pat == Pattern.OPAQUE or pat == Pattern.COMPLEX:
        return False
    if graph.nodes[group.output_node].op in LAYOUT_TRANSFORMS and \
            not moves_values_only(node.fn):
        # the layout pass's transforms: fused, an op that computes would read the value a
        # channel at a time (a stride of a block, or of a plane into a block) in a loop
        # that does not vectorize. A quantized block's requantize, dequantize, add and
        # quantize ran 3.5 ms so for 200 k values after a from_nchwc, its first quantize
        # 276 us after a to_nchwc (against 14 for the quantize alone); alone, the
        # transform is a copy. A copy (a concatenation of blocked values) still fuses.
        return False
    if node.op in LAYOUT_TRANSFORMS and \
            not all(moves_values_only(graph.nodes[i].fn) for i in group.nodes):
        # the other way round, likewise: the computing ops would run in the transform's
        # order. One thread, AVX-512 host: the int8 block's quantize and to_nchwc_u8 took
        # 213 us so, 22 + 13 apart; an int8 stem's (224 x 224) quantize, channel pad and
        # to_nchwc_u8 158 us, 27 + 8 apart; its i16 form's (x86-64-v3) requantize chain
        # and from_nchwc 523 us, 73 + 34 apart
        return False
    if group.pattern == Pattern.INJECTIVE:
        if pat == Pattern.REDUCTION and reads_through_window(node.fn, k):
            # a pooling window reads each input up to 9 times: an injective chain fused
            # there is computed that often, lane by lane under the window's guards. An int8
            # ResNet-50's requantize, dequantize, batch norm and quantize before its u8
            # max pool took 16.3 ms so (43% of the model), alone ~0.2 ms
            return False
        return pat in (Pattern.INJECTIVE, Pattern.REDUCTION)
    if group.pattern == Pattern.COMPLEX and pat == Pattern.INJECTIVE:
        anchor = graph.nodes[group.anchor]
        v = node.inputs[k]
        if output_is_reduction(anchor.fn) and not reads_per_channel(node.fn, k) \
                and not vectors_along_output(anchor.fn):
            # after a reduction output the epilogue runs on the schedule's register tile.
            # In the NCHW conv2d its vectors run across channels: a per-channel operand is
            # a vector load there, a whole tensor (a residual) would be read lane by lane,
            # so such an op starts an injective kernel of its own, which vectorizes. Where
            # the vectors run along the output's contiguous axis (the blocked conv2d_nchwc,
            # matmul), a residual is read as whole vectors and fuses.
            return False
        return (output_is_fusable(anchor.fn) and reads_elementwise(node.fn, k)
                and graph.value(v).shape == graph.value(node.outputs[0]).shape
                and node.inputs.count(v) == 1)
    return False
