"""The tensor-expression IR: what each output element is, with no loop structure.

A `Tensor` is either a `Placeholder` (an input) or a `Compute(axes, body)`: element
``T[axes]`` equals ``body``. Expressions are immutable values; their ``dtype`` is a field
so passes never recompute it. Tensors compare by identity (two stages with the same body
are still two buffers), everything else structurally.

Index arithmetic (vars, shapes, subscripts) is in ``i64``. ``//`` and ``%`` are floor
division and floor modulo, as in Python, for index and integer values alike.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .dtypes import FLOATS, INDEX

BINARY_OPS = ("+", "-", "*", "/", "//", "%")
COMPARE_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGICAL_OPS = ("and", "or")
REDUCERS = ("sum", "max", "min", "prod")
# name -> number of arguments
INTRINSICS = {
    "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "sigmoid": 1, "erf": 1,
    "abs": 1, "floor": 1, "ceil": 1, "round": 1, "sin": 1, "cos": 1,
    "tan": 1, "asin": 1, "acos": 1, "atan": 1, "sinh": 1, "cosh": 1, "asinh": 1, "acosh": 1,
    "atanh": 1,
    "min": 2, "max": 2, "pow": 2, "fmod": 2,
    "bitand": 2, "bitor": 2, "bitxor": 2, "bitnot": 1, "shl": 2, "shr": 2,
}
# Intrinsics of integers only (two's complement; shifts defined for every count: bitwise.py).
BIT_INTRINSICS = ("bitand", "bitor", "bitxor", "bitnot", "shl", "shr")
# Intrinsics meaningful on integers too (the rest need a float argument).
INT_INTRINSICS = ("abs", "min", "max", *BIT_INTRINSICS)


class Expr:
    """Base of expression nodes. Subclasses are frozen dataclasses with a ``dtype``."""
    __slots__ = ()
    dtype: str

    # Operator sugar for building expressions from Python (schedules, tests, tensorize).
    def __add__(self, o): return binary("+", self, o)
    def __radd__(self, o): return binary("+", o, self)
    def __sub__(self, o): return binary("-", self, o)
    def __rsub__(self, o): return binary("-", o, self)
    def __mul__(self, o): return binary("*", self, o)
    def __rmul__(self, o): return binary("*", o, self)
    def __truediv__(self, o): return binary("/", self, o)
    def __floordiv__(self, o): return binary("//", self, o)
    def __mod__(self, o): return binary("%", self, o)
    def __neg__(self): return Unary("-", self, self.dtype)

    def __str__(self) -> str:
        from .te_printer import format_expr
        return format_expr(self)


@dataclass(frozen=True, slots=True)
class Var(Expr):
    name: str
    dtype: str = INDEX


@dataclass(frozen=True, slots=True)
class Const(Expr):
    value: int | float | bool
    dtype: str


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    op: str          # "-" or "not"
    a: Expr
    dtype: str


@dataclass(frozen=True, slots=True)
class Compare(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True)
class Logical(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True)
class Select(Expr):
    cond: Expr
    t: Expr
    f: Expr
    dtype: str


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    a: Expr
    dtype: str


@dataclass(frozen=True, slots=True)
class Intrinsic(Expr):
    name: str
    args: tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class IterVar:
    """A loop axis: ``var`` ranges over ``[0, extent)``; kind is "data" or "reduce"."""
    var: Var
    extent: Expr
    kind: str = "data"


@dataclass(frozen=True, slots=True)
class Reduce(Expr):
    combiner: str     # one of REDUCERS
    body: Expr
    axes: tuple[IterVar, ...]
    dtype: str


@dataclass(frozen=True, slots=True)
class Placeholder:
    """An input tensor (or a scalar parameter when the shape is empty)."""


@dataclass(frozen=True, slots=True)
class Compute:
    axes: tuple[IterVar, ...]
    body: Expr


@dataclass(frozen=True, eq=False)
class Tensor:
    """A named n-d array. Compares by identity: each is its own buffer."""
    name: str
    shape: tuple[Expr, ...]
    dtype: str
    op: Placeholder | Compute = field(default_factory=Placeholder)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, Placeholder)

    def __getitem__(self, indices) -> "Load":
        if not isinstance(indices, tuple):
            indices = (indices,)
        return Load(self, tuple(as_expr(i) for i in indices), self.dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.name}: {self.dtype}{list(map(str, self.shape))})"


@dataclass(frozen=True, slots=True)
class Load(Expr):
    tensor: Tensor
    indices: tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, eq=False)
class Function:
    """An op instantiated with its attributes bound: the unit that is evaluated and lowered.

    ``inputs`` are placeholders in parameter order (scalars have an empty shape);
    ``outputs`` are the op's results; ``shape_vars`` are the symbolic sizes, bound from the
    inputs' shapes at call time or fixed at build time.
    """
    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    shape_vars: tuple[Var, ...] = ()
    attrs: tuple[tuple[str, object], ...] = ()

    def stages(self) -> list[Tensor]:
        """Every computed tensor, producers before consumers."""
        return [t for t in topo_tensors(self.outputs) if not t.is_placeholder]

    def __str__(self) -> str:
        from .te_printer import format_function
        return format_function(self)


# ---------------------------------------------------------------------------- constructors

def as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        return Const(x, "bool")
    if isinstance(x, int):
        return Const(x, INDEX)
    if isinstance(x, float):
        return Const(x, "f32")
    raise TypeError(f"cannot make an expression of {x!r}")


def _unify(a, b) -> tuple[Expr, Expr]:
    """Literal constants take the dtype of the other side (so ``x * 2`` works for any x)."""
    a, b = as_expr(a), as_expr(b)
    if a.dtype != b.dtype:
        if isinstance(b, Const) and not isinstance(a, Const):
            b = Const(_coerce(b.value, a.dtype), a.dtype)
        elif isinstance(a, Const):
            a = Const(_coerce(a.value, b.dtype), b.dtype)
    assert a.dtype == b.dtype, f"dtype mismatch {a.dtype} vs {b.dtype}"
    return a, b


def _coerce(value, dtype: str):
    if dtype in FLOATS:
        return float(value)
    if dtype == "bool":
        return bool(value)
    return int(value)


def binary(op: str, a, b) -> Expr:
    a, b = _unify(a, b)
    if op in COMPARE_OPS:
        return Compare(op, a, b)
    if op in LOGICAL_OPS:
        return Logical(op, a, b)
    assert op in BINARY_OPS, op
    return Binary(op, a, b, a.dtype)


def select(cond, t, f) -> Select:
    t, f = _unify(t, f)
    return Select(as_expr(cond), t, f, t.dtype)


def intrinsic(name: str, *args) -> Intrinsic:
    args = tuple(as_expr(a) for a in args)
    if len(args) == 2:
        args = _unify(*args)
    return Intrinsic(name, tuple(args), args[0].dtype)


def const(value, dtype: str) -> Const:
    return Const(_coerce(value, dtype), dtype)


# ---------------------------------------------------------------------------- traversal

class IdentityMemo:
    """Values computed for immutable nodes, looked up by identity (no deep hash or compare).
    Each entry holds its node, so an id is never reused while it is cached; past ``limit``
    entries the memo starts afresh."""

    def __init__(self, limit: int = 1 << 16):
        self._entries: dict[int, tuple[object, object]] = {}
        self._limit = limit

    def get(self, node):
        """The value stored for this very node, or None."""
        hit = self._entries.get(id(node))
        return hit[1] if hit is not None and hit[0] is node else None

    def put(self, node, value):
        if len(self._entries) >= self._limit:
            self._entries.clear()
        self._entries[id(node)] = (node, value)
        return value


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(node) -> tuple[str, ...]:
    """The dataclass field names of ``node``'s class, looked up once per class: the
    traversals ask for every node, and ``dataclasses.fields`` was a tenth of a large
    kernel's lowering time."""
    cls = type(node)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def children(node) -> Iterator:
    """Direct sub-expressions (and IterVar extents) of a node; tensors are not entered."""
    if isinstance(node, (Var, Const)):
        return
    for name in field_names(node):
        v = getattr(node, name)
        if isinstance(v, Expr):
            yield v
        elif isinstance(v, tuple):
            for x in v:
                if isinstance(x, Expr):
                    yield x
                elif isinstance(x, IterVar):
                    yield x.extent


def walk(expr: Expr) -> Iterator[Expr]:
    """Pre-order walk over an expression (reduce axes' extents included)."""
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        stack.extend(children(e))


def rewrite(expr: Expr, post: Callable[[Expr], Expr | None] = lambda e: None,
            pre: Callable[[Expr], Expr | None] | None = None) -> Expr:
    """Rebuild ``expr`` bottom-up; ``post(node)`` returns a replacement or None to keep it.

    ``pre(node)``, when given, is asked first (TVM's ``ir_transform`` contract): a node it
    returns is used as is, without entering it. A node is rebuilt only when a child
    changed, so unchanged subtrees stay shared.
    """
    if pre is not None:
        out = pre(expr)
        if out is not None:
            return out
    if isinstance(expr, (Var, Const)):
        out = post(expr)
        return expr if out is None else out
    changes = {}
    for name in field_names(expr):
        v = getattr(expr, name)
        if isinstance(v, Expr):
            nv = rewrite(v, post, pre)
            if nv is not v:
                changes[name] = nv
        elif isinstance(v, tuple) and v and isinstance(v[0], (Expr, IterVar)):
            nv = tuple(_rewrite_item(x, post, pre) for x in v)
            if any(a is not b for a, b in zip(nv, v)):
                changes[name] = nv
    node = dataclasses.replace(expr, **changes) if changes else expr
    out = post(node)
    return node if out is None else out


def _rewrite_item(x, post, pre):
    if isinstance(x, IterVar):
        ext = rewrite(x.extent, post, pre)
        return x if ext is x.extent else IterVar(x.var, ext, x.kind)
    return rewrite(x, post, pre)


def substitute(expr: Expr, mapping: dict[Var, Expr]) -> Expr:
    """Replace variables by expressions."""
    if not mapping:
        return expr
    return rewrite(expr, lambda e: mapping.get(e) if isinstance(e, Var) else None)


def free_vars(expr: Expr) -> set[Var]:
    """Variables used and not bound by a Reduce inside ``expr``."""
    used, bound = set(), set()
    for e in walk(expr):
        if isinstance(e, Var):
            used.add(e)
        elif isinstance(e, Reduce):
            bound.update(ax.var for ax in e.axes)
    return used - bound


def loads(expr: Expr) -> Iterator[Load]:
    return (e for e in walk(expr) if isinstance(e, Load))


def input_tensors(t: Tensor) -> list[Tensor]:
    """Tensors read by the body of ``t`` (in first-use order, no duplicates)."""
    if t.is_placeholder:
        return []
    seen: dict[int, Tensor] = {}
    for ld in loads(t.op.body):
        seen.setdefault(id(ld.tensor), ld.tensor)
    return list(seen.values())


def topo_tensors(roots) -> list[Tensor]:
    """All tensors reachable from ``roots``, each after the tensors it reads."""
    order: list[Tensor] = []
    state: dict[int, int] = {}
    for root in roots:
        stack = [(root, False)]
        while stack:
            t, done = stack.pop()
            if done:
                if state.get(id(t)) != 2:
                    state[id(t)] = 2
                    order.append(t)
                continue
            if id(t) in state:
                continue
            state[id(t)] = 1
            stack.append((t, True))
            for dep in reversed(input_tensors(t)):
                if id(dep) not in state:
                    stack.append((dep, False))
    return order


# ---------------------------------------------------------------------------- Python-side API

def placeholder(name: str, shape, dtype: str = "f32") -> Tensor:
    return Tensor(name, tuple(as_expr(s) for s in shape), dtype, Placeholder())


def compute(name: str, shape, fn: Callable[..., Expr], axis_names=None, dtype=None) -> Tensor:
    """``compute("C", (M, N), lambda i, j: ...)`` like TVM's ``te.compute``."""
    shape = tuple(as_expr(s) for s in shape)
    names = axis_names or [f"ax{d}" for d in range(len(shape))]
    axes = tuple(IterVar(Var(n), s, "data") for n, s in zip(names, shape))
    body = as_expr(fn(*[ax.var for ax in axes]))
    return Tensor(name, shape, dtype or body.dtype, Compute(axes, body))


def reduce_axis(extent, name: str) -> IterVar:
    return IterVar(Var(name), as_expr(extent), "reduce")


def reduce(combiner: str, body, axes) -> Reduce:
    body = as_expr(body)
    if isinstance(axes, IterVar):
        axes = (axes,)
    return Reduce(combiner, body, tuple(axes), body.dtype)
