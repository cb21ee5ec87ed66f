"""The graph IR: values (inputs, weights, op results) and nodes (op calls), in program order.

Shapes are tensor expressions over the graph's sizes (``B`` in ``x: f32[B, 784]``); a
node keeps its op's checked `te.Function` and the binding of the op's sizes to graph
expressions, so passes can read the op's expression and concrete sizes without the AST.
Everything is immutable: a pass returns a new `Graph`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping

from ...errors import Span
from .. import te
from ..arith.evaluate import NotAnIndex, UnboundVar, eval_index


@dataclass(frozen=True)
class Value:
    """A named tensor of the graph. ``kind``: "input", "param" (a weight) or "node"."""
    name: str
    dtype: str
    shape: tuple[te.Expr, ...]
    kind: str


@dataclass(frozen=True)
class Node:
    """``outputs = op(inputs; attrs)``. ``opdef`` is the op's definition (an object with
    ``instantiate``); ``fn`` its instantiation for these attributes and argument ranks;
    ``binding`` the op's sizes as graph expressions."""
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, object], ...]
    fn: te.Function = field(compare=False)
    binding: tuple[tuple[te.Var, te.Expr], ...] = field(compare=False)
    opdef: object = field(compare=False, repr=False)
    span: Span | None = field(default=None, compare=False, repr=False)

    def sizes(self, graph_sizes: dict[str, int]) -> dict[str, int]:
        """The op's own sizes (``N``, ``C``, ``KH`` ...) at these graph sizes."""
        return {var.name: eval_size(expr, graph_sizes) for var, expr in self.binding}


@dataclass(frozen=True)
class Graph:
    name: str
    inputs: tuple[str, ...]
    params: tuple[str, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    values: tuple[tuple[str, Value], ...]       # every value by name, in definition order
    sizes: tuple[str, ...] = ()                 # the graph's size names
    span: Span | None = field(default=None, compare=False, repr=False)

    @cached_property
    def _by_name(self) -> Mapping[str, Value]:
        # built once per (immutable) graph: a lookup per call of a compiled module was
        # rebuilding the whole map, O(values) each time
        return dict(self.values)

    def value(self, name: str) -> Value:
        return self._by_name[name]

    def value_map(self) -> dict[str, Value]:
        return dict(self._by_name)

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                out.setdefault(i, []).append(n)
        return out

    def shape_of(self, name: str, graph_sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(eval_size(d, graph_sizes) for d in self.value(name).shape)

    def __str__(self) -> str:
        vals = self.value_map()

        def typ(n):
            v = vals[n]
            return f"{n}: {v.dtype}[{', '.join(map(str, v.shape))}]"
        lines = [f"graph {self.name}({', '.join(typ(n) for n in self.inputs)}) -> "
                 f"({', '.join(typ(n) for n in self.outputs)}) {{"]
        lines += [f"    param {typ(p)}" for p in self.params]
        for n in self.nodes:
            attrs = "; " + ", ".join(f"{k}={v}" for k, v in n.attrs) if n.attrs else ""
            lines.append(f"    {', '.join(n.outputs)} = {n.op}({', '.join(n.inputs)}{attrs})")
        return "\n".join(lines + ["}"])


def eval_size(e: te.Expr, env: Mapping[str, int]) -> int:
    """The value of an integer size expression at these sizes (by name), by `arith.evaluate`:
    a KeyError names a size with no value, a ValueError is a division by zero."""
    try:
        return eval_index(e, env)
    except UnboundVar as u:
        raise KeyError(u.name) from None
    except ZeroDivisionError:
        raise ValueError(f"a division by zero in the size {e}") from None
    except NotAnIndex:
        raise ValueError(f"not a size expression: {e}") from None
