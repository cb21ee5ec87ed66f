"""The AST: what was written, each node with the `Span` it came from.

Nodes are frozen; spans are left out of equality so that a pretty-printed and re-parsed
module compares equal to the original.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import Span


def _span():
    return field(default=None, compare=False, repr=False)


class Node:
    __slots__ = ()


# ---------------------------------------------------------------------------- expressions

@dataclass(frozen=True)
class Number(Node):
    text: str                       # kept verbatim: "1" is an int literal, "1.0" a float one
    span: Span | None = _span()

    @property
    def is_float(self) -> bool:
        return any(c in self.text for c in ".eE")


@dataclass(frozen=True)
class Bool(Node):
    value: bool
    span: Span | None = _span()


@dataclass(frozen=True)
class String(Node):
    value: str
    span: Span | None = _span()


@dataclass(frozen=True)
class Name(Node):
    id: str
    span: Span | None = _span()


@dataclass(frozen=True)
class Member(Node):
    """``C.i``: an axis of a stage, in schedules."""
    base: str
    attr: str
    span: Span | None = _span()


@dataclass(frozen=True)
class PackIndex(Node):
    """``*i``: a pack of indices, one per dimension of a rank-generic shape ``*S``."""
    id: str
    span: Span | None = _span()


@dataclass(frozen=True)
class Index(Node):
    """``X[i, j + 1]``."""
    tensor: str
    indices: tuple
    span: Span | None = _span()


@dataclass(frozen=True)
class Axis(Node):
    """A reduction axis ``k`` or ``k: extent``."""
    name: str
    extent: Node | None
    span: Span | None = _span()


@dataclass(frozen=True)
class Reduce(Node):
    """``sum[k, r: 3](body)``."""
    kind: str
    axes: tuple[Axis, ...]
    body: Node
    span: Span | None = _span()


@dataclass(frozen=True)
class Binary(Node):
    op: str
    left: Node
    right: Node
    span: Span | None = _span()


@dataclass(frozen=True)
class Unary(Node):
    op: str                         # "-" or "not"
    operand: Node
    span: Span | None = _span()


@dataclass(frozen=True)
class Call(Node):
    """``f(a, b; k=v)``: an intrinsic, a cast (``f32(x)``), ``select``, or an op call."""
    func: str
    args: tuple
    kwargs: tuple[tuple[str, Node], ...] = ()
    span: Span | None = _span()


# ---------------------------------------------------------------------------- declarations

@dataclass(frozen=True)
class PackDim(Node):
    """``*S`` in a shape: any number of dimensions, bound when the op is used."""
    name: str
    span: Span | None = _span()


@dataclass(frozen=True)
class TensorType(Node):
    dtype: str
    dims: tuple | None              # None: a scalar (no brackets)
    span: Span | None = _span()


@dataclass(frozen=True)
class Param(Node):
    name: str
    type: TensorType
    span: Span | None = _span()


@dataclass(frozen=True)
class Attr(Node):
    """A compile-time attribute ``stride: int = 1``."""
    name: str
    kind: str                       # int, float or bool
    default: Node | None
    span: Span | None = _span()


@dataclass(frozen=True)
class Decl(Node):
    """An intermediate tensor ``Xp: f32[N, C, H + 2, W + 2]``."""
    name: str
    type: TensorType
    span: Span | None = _span()


@dataclass(frozen=True)
class Stage(Node):
    """``T[i, j] = expr`` (indices may hold ``PackIndex``); ``T = expr`` for rank 0."""
    tensor: str
    indices: tuple
    expr: Node
    span: Span | None = _span()


@dataclass(frozen=True)
class CallStage(Node):
    """``T1, T2 = op(args; attrs)``: whole tensors from a call of another op."""
    targets: tuple[str, ...]
    call: Call
    span: Span | None = _span()


@dataclass(frozen=True)
class OpDef(Node):
    name: str
    params: tuple[Param, ...]
    attrs: tuple[Attr, ...]
    outputs: tuple[Param, ...]
    body: tuple                     # Decl | Stage | CallStage
    span: Span | None = _span()


@dataclass(frozen=True)
class KnobDecl(Node):
    """``knob ti in [4, 8] = 8``, or ``knob tf in factors(F)`` (``generator``: choices that
    depend on the sizes, made when the schedule is instantiated)."""
    name: str
    choices: tuple
    default: Node | None
    span: Span | None = _span()
    generator: Node | None = None


@dataclass(frozen=True)
class SchedCall(Node):
    """``io, ii = split(C.i, 8)``."""
    targets: tuple[str, ...]
    func: str
    args: tuple
    kwargs: tuple[tuple[str, Node], ...] = ()
    span: Span | None = _span()


@dataclass(frozen=True)
class SchedIf(Node):
    """``if pack { ... } else { ... }``: statements applied when a knob condition holds."""
    cond: Node
    then: tuple
    orelse: tuple = ()
    span: Span | None = _span()


@dataclass(frozen=True)
class SchedRequire(Node):
    """``require ti * tj <= 512``: a constraint on the knobs' values."""
    cond: Node
    span: Span | None = _span()


@dataclass(frozen=True)
class ScheduleDef(Node):
    op: str
    target: str
    name: str                       # "default" when not given with ``as``
    body: tuple                     # KnobDecl | SchedCall | SchedIf | SchedRequire
    span: Span | None = _span()


@dataclass(frozen=True)
class GraphParam(Node):
    name: str
    type: TensorType
    span: Span | None = _span()


@dataclass(frozen=True)
class GraphDef(Node):
    name: str
    params: tuple[Param, ...]
    outputs: tuple[Param, ...]
    body: tuple
    span: Span | None = _span()


@dataclass(frozen=True)
class Import(Node):
    target: str                     # "std" or a path relative to the importing file
    span: Span | None = _span()


@dataclass(frozen=True)
class Module(Node):
    items: tuple
    span: Span | None = _span()
