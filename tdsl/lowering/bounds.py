"""Interval analysis of index expressions: numeric bounds, proofs, and symbolic relaxation.

A `Ctx` is what is known at a program point: the range of every enclosing loop variable,
``v in [lo, hi]`` with ``lo``/``hi`` expressions (``hi == min + extent - 1``), and *facts*
from enclosing conditions, each a linear form known to be ``<= 0``. Variables that no loop
binds are shape variables: sizes, so ``>= 0``.

`bounds` gives numeric ``(lo, hi)`` (None: unbounded): loop variables are replaced by their
range ends *symbolically* first, so that ``io * 4 + ii - 4 * ((N + 3) // 4)`` cancels before
anything is bounded (interval arithmetic on the raw tree would lose the correlation). A
fact ``F <= 0`` tightens an upper bound: ``X == (X - m*F) + m*F <= X - m*F`` for ``m >= 0``.

`relax` is the symbolic version used by bound inference: it eliminates only some variables
(the loops inside a compute_at point) and keeps the others as symbols.
"""
from __future__ import annotations

from . import te
from .dtypes import INDEX
from .simplify import Lin, _expand_floor_multiples, from_linear, is_index, linear, simplify

_MAX_DEPTH = 8
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


class Ctx:
    """Loop ranges and facts at a program point. Immutable: `with_*` return new contexts."""
    __slots__ = ("ranges", "facts")

    def __init__(self, ranges: dict | None = None, facts: tuple = ()):
        self.ranges: dict[te.Var, tuple[te.Expr, te.Expr]] = ranges or {}
        self.facts: tuple[Lin, ...] = facts

    def with_loop(self, var: te.Var, min_: te.Expr, extent: te.Expr) -> "Ctx":
        hi = simplify(te.Binary("-", te.Binary("+", min_, extent, INDEX),
                                te.Const(1, INDEX), INDEX))
        return Ctx({**self.ranges, var: (min_, hi)}, self.facts)

    def with_point(self, var: te.Var, value: te.Expr) -> "Ctx":
        return Ctx({**self.ranges, var: (value, value)}, self.facts)

    def with_cond(self, cond: te.Expr, truth: bool = True) -> "Ctx":
        new = tuple(_with_numerators(facts_of(cond, truth)))
        if not new:
            return self
        ranges = dict(self.ranges)
        for f in new:       # a fact on one loop variable narrows its range: k*v + c <= 0
            if len(f.terms) == 1:
                (v, k), = f.terms.items()
                if v in ranges and k > 0:
                    ranges[v] = (ranges[v][0], _tighter("min", ranges[v][1], (-f.const) // k))
                elif v in ranges and k < 0:
                    ranges[v] = (_tighter("max", ranges[v][0], -(f.const // k)), ranges[v][1])
        return Ctx(ranges, self.facts + new)


def _with_numerators(facts: list[Lin]) -> list[Lin]:
    """Add ``x <= c*K + c - 1`` for a fact ``x // c <= K`` (and ``x >= c*K`` for
    ``x // c >= K``): guards of fused axes bound ``f // E``, accesses use ``f``."""
    out = list(facts)
    for f in facts:
        if len(f.terms) != 1:
            continue
        (a, k), = f.terms.items()
        match a:
            case te.Binary("//", x, te.Const(c)) if c > 0 and k == 1:
                out.append(linear(x) - Lin({}, c * -f.const + c - 1))
            case te.Binary("//", x, te.Const(c)) if c > 0 and k == -1:
                out.append(Lin({}, c * f.const) - linear(x))
    return out


def _tighter(name: str, old: te.Expr, bound: int) -> te.Expr:
    if isinstance(old, te.Const):
        return te.Const((min if name == "min" else max)(int(old.value), bound), INDEX)
    return te.Intrinsic(name, (old, te.Const(bound, INDEX)), INDEX)


def facts_of(cond: te.Expr, truth: bool = True) -> list[Lin]:
    """Linear forms ``F`` with ``F <= 0`` implied by ``cond`` having the value ``truth``."""
    match cond:
        case te.Logical("and", a, b) if truth:
            return facts_of(a) + facts_of(b)
        case te.Logical("or", a, b) if not truth:
            return facts_of(a, False) + facts_of(b, False)
        case te.Unary("not", a):
            return facts_of(a, not truth)
        case te.Compare(op, a, b) if is_index(a):
            op = op if truth else _NEGATE[op]
            d = linear(a) - linear(b)
            one = Lin({}, 1)
            return {"<": [d + one], "<=": [d], ">": [one - d], ">=": [d.scale(-1)],
                    "==": [d, d.scale(-1)], "!=": []}[op]
    return []


# ---------------------------------------------------------------------------- numeric bounds

def bounds(e: te.Expr, ctx: Ctx | None = None) -> tuple[int | None, int | None]:
    """Numeric ``(lo, hi)`` of an index expression at ``ctx`` (None where unbounded)."""
    ctx = ctx or Ctx()
    lin = linear(e)
    return _lo(lin, ctx, 0), _hi(lin, ctx, 0)


def _hi(lin: Lin, ctx: Ctx, depth: int) -> int | None:
    best = _upper(lin, ctx, depth)
    # Facts are tried on the expression and one level into its atoms (``x // 13`` under
    # ``x < 91``); deeper they would multiply the work at every level for little gain.
    for f in ctx.facts if depth <= 1 else ():
        for m in _multipliers(lin, f):
            h = _upper(lin - f.scale(m), ctx, depth)
            if h is not None and (best is None or h < best):
                best = h
    return best


def _lo(lin: Lin, ctx: Ctx, depth: int) -> int | None:
    h = _hi(lin.scale(-1), ctx, depth)
    return None if h is None else -h


def _multipliers(lin: Lin, fact: Lin) -> set[int]:
    """Multiples of a fact worth subtracting: those cancelling one of ``lin``'s atoms."""
    out = {1}
    for a, k in lin.terms.items():
        c = fact.terms.get(a)
        if c and k % c == 0 and k // c > 0:
            out.add(k // c)
    return out


def _upper(lin: Lin, ctx: Ctx, depth: int) -> int | None:
    """Upper bound ignoring facts: substitute range ends, then bound the remaining atoms."""
    if depth > _MAX_DEPTH:
        return None
    for _ in range(_MAX_DEPTH):
        loop_vars = [a for a in lin.terms if isinstance(a, te.Var) and a in ctx.ranges]
        if not loop_vars:
            break
        out = Lin({}, lin.const)
        for a, k in lin.terms.items():
            if a in ctx.ranges:
                out = out + linear(ctx.ranges[a][1 if k > 0 else 0]).scale(k)
            else:
                out = out + Lin({a: k})
        lin = _expand_floor_multiples(out)
    total = lin.const
    for a, k in lin.terms.items():
        lo, hi = _atom_bounds(a, ctx, depth + 1)
        end = hi if k > 0 else lo
        if end is None:
            return None
        total += k * end
    return total


def _atom_bounds(a: te.Expr, ctx: Ctx, depth: int) -> tuple[int | None, int | None]:
    def sub(x):
        lx = linear(x)
        return _lo(lx, ctx, depth), _hi(lx, ctx, depth)

    match a:
        case te.Var() if a in ctx.ranges:
            return sub(a)                       # still a loop var: range ends not reducible
        case te.Var():
            return 0, None                      # a shape variable: a size
        case te.Binary("%", x, te.Const(c)) if c > 0:
            lo, hi = sub(x)
            if lo is not None and hi is not None and 0 <= lo and hi < c:
                return lo, hi
            return 0, c - 1                     # floor modulo: in [0, c) for any x
        case te.Binary("//", x, te.Const(c)) if c > 0:
            lo, hi = sub(x)
            return (None if lo is None else lo // c), (None if hi is None else hi // c)
        case te.Intrinsic("min" | "max" as name, (x, y)) if is_index(a):
            (l1, h1), (l2, h2) = sub(x), sub(y)
            pick = min if name == "min" else max
            lo = None if None in (l1, l2) else pick(l1, l2)
            hi = None if None in (h1, h2) else pick(h1, h2)
            if name == "min":      # min(x, y) <= x and <= y whichever is known
                hi = h1 if h2 is None else (h2 if h1 is None else hi)
            else:
                lo = l1 if l2 is None else (l2 if l1 is None else lo)
            return lo, hi
        case te.Binary("*", x, y) if is_index(a):
            (l1, h1), (l2, h2) = sub(x), sub(y)
            if None in (l1, h1, l2, h2):
                return None, None
            ends = [l1 * l2, l1 * h2, h1 * l2, h1 * h2]
            return min(ends), max(ends)
        case te.Select(_, t, f) if is_index(a):
            (l1, h1), (l2, h2) = sub(t), sub(f)
            return (None if None in (l1, l2) else min(l1, l2)), \
                (None if None in (h1, h2) else max(h1, h2))
    return None, None


def prove(cond: te.Expr, ctx: Ctx | None = None) -> bool | None:
    """True if ``cond`` holds at ``ctx``, False if it cannot, None if unknown."""
    ctx = ctx or Ctx()
    match cond:
        case te.Const(v):
            return bool(v)
        case te.Logical("and", a, b):
            pa, pb = prove(a, ctx), prove(b, ctx)
            return False if False in (pa, pb) else (True if pa and pb else None)
        case te.Logical("or", a, b):
            pa, pb = prove(a, ctx), prove(b, ctx)
            return True if True in (pa, pb) else (False if pa is False and pb is False else None)
        case te.Unary("not", a):
            p = prove(a, ctx)
            return None if p is None else not p
        case te.Compare("<" | "<=" as op, a, te.Intrinsic("max", (p, q))) if is_index(a):
            # a < max(p, q) when a < p or a < q (a region's extent max(hi - lo + 1, 0))
            if prove(te.Compare(op, a, p), ctx) or prove(te.Compare(op, a, q), ctx):
                return True
            return _prove_linear(cond, ctx)
        case te.Compare(_, a, _) if is_index(a):
            return _prove_linear(cond, ctx)
    return None


def _prove_linear(cond: te.Compare, ctx: Ctx) -> bool | None:
    """A comparison of index expressions, from the bounds of its linear form."""
    # an empty list of facts proves nothing (``a != b`` implies no ``F <= 0``; ``all`` of
    # nothing would "prove" ``a == b`` false)
    for truth in (True, False):
        facts = facts_of(cond, truth)
        if facts and all(_hi(f, ctx, 0) is not None and _hi(f, ctx, 0) <= 0 for f in facts):
            return truth
    return None


def conjuncts(cond: te.Expr) -> list[te.Expr]:
    if isinstance(cond, te.Logical) and cond.op == "and":
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [cond]


def conjoin(conds) -> te.Expr:
    out = None
    for c in conds:
        out = c if out is None else te.Logical("and", out, c)
    return te.Const(True, "bool") if out is None else out


# ---------------------------------------------------------------------------- relaxation

def relax(e: te.Expr, inner: dict[te.Var, tuple[te.Expr, te.Expr]]) -> tuple | None:
    """Symbolic ``(lo, hi)`` of ``e`` as the variables in ``inner`` range over their
    ``[lo, hi]``; other variables stay symbols. None when ``e`` is not affine enough."""
    lin = linear(simplify(e))
    lo, hi = Lin({}, lin.const), Lin({}, lin.const)
    for a, k in lin.terms.items():
        if a in inner:
            a_lo, a_hi = inner[a]
        elif not (te.free_vars(a) & inner.keys()):
            a_lo = a_hi = a
        else:
            r = _relax_atom(a, inner)
            if r is None:
                return None
            a_lo, a_hi = r
        if k < 0:
            a_lo, a_hi = a_hi, a_lo
        lo = lo + linear(a_lo).scale(k)
        hi = hi + linear(a_hi).scale(k)
    return simplify(from_linear(lo)), simplify(from_linear(hi))


def _relax_atom(a: te.Expr, inner) -> tuple | None:
    match a:
        case te.Binary("//", x, te.Const(c) as cc) if c > 0:
            r = relax(x, inner)
            if r is None:
                return None
            return tuple(te.Binary("//", v, cc, INDEX) for v in r)       # monotone
        case te.Binary("%", x, te.Const(c)) if c > 0:
            return te.Const(0, INDEX), te.Const(c - 1, INDEX)
        case te.Intrinsic("min" | "max" as name, (x, y)):
            rx, ry = relax(x, inner), relax(y, inner)
            if rx is None or ry is None:
                return None
            return tuple(te.Intrinsic(name, (u, v), INDEX) for u, v in zip(rx, ry))
    return None
