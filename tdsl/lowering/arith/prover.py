"""Interval analysis of index expressions: numeric bounds, proofs, and symbolic relaxation.

A `Ctx` is what is known at a program point: the range of every enclosing loop variable,
``v in [lo, hi]`` with ``lo``/``hi`` expressions (``hi == min + extent - 1``), and *facts*
from enclosing conditions, each a linear form known to be ``<= 0``. Variables that no loop
binds are shape variables: sizes, so ``>= 0`` (``>= 1`` for the sizes a context knows to be
positive).

`bounds` gives numeric ``(lo, hi)`` (None: unbounded): loop variables are replaced by their
range ends *symbolically* first, so that ``io * 4 + ii - 4 * ((N + 3) // 4)`` cancels before
anything is bounded (interval arithmetic on the raw tree would lose the correlation). A
fact ``F <= 0`` tightens an upper bound: ``X == (X - m*F) + m*F <= X - m*F`` for ``m >= 0``.

`relax` is the symbolic version used by bound inference and by the checker: it eliminates only
some variables (the loops inside a compute_at point, the index variables of an access) and
keeps the others as symbols.
"""
from __future__ import annotations

import math

from .. import te
from ..dtypes import INDEX
from .linear import Linear, linear
from .simplify import expand_floor_multiples, is_index, simplify

_MAX_DEPTH = 8
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


class Ctx:
    """Loop ranges, facts and positive sizes at a program point. Immutable: `with_*` return
    new contexts."""
    __slots__ = ("ranges", "facts", "positive", "atom_bounds")

    def __init__(self, ranges: dict | None = None, facts: tuple = (),
                 positive: frozenset = frozenset()):
        self.ranges: dict[te.Var, tuple[te.Expr, te.Expr]] = ranges or {}
        self.facts: tuple[Linear, ...] = facts
        self.positive: frozenset[te.Var] = positive
        # bounds of atoms already worked out here: the statements of one loop body share a
        # context and the same atoms (an unrolled tile's ``blk % 86``, dozens of times)
        self.atom_bounds: dict = {}

    def with_loop(self, var: te.Var, min_: te.Expr, extent: te.Expr) -> "Ctx":
        hi = simplify(te.Binary("-", te.Binary("+", min_, extent, INDEX),
                                te.Const(1, INDEX), INDEX))
        return Ctx({**self.ranges, var: (min_, hi)}, self.facts + _extent_facts(var, extent),
                   self.positive)

    def with_point(self, var: te.Var, value: te.Expr) -> "Ctx":
        return Ctx({**self.ranges, var: (value, value)}, self.facts, self.positive)

    def with_cond(self, cond: te.Expr, truth: bool = True) -> "Ctx":
        new = tuple(_with_numerators(facts_of(cond, truth)))
        if not new:
            return self
        ranges = dict(self.ranges)
        for f in new:       # a fact on one loop variable narrows its range: k*v + c <= 0
            if len(f.terms) == 1 and len(next(iter(f.terms))) == 1:
                ((v,), k), = f.terms.items()
                if v in ranges and k > 0:
                    ranges[v] = (ranges[v][0], _tighter("min", ranges[v][1], (-f.const) // k))
                elif v in ranges and k < 0:
                    ranges[v] = (_tighter("max", ranges[v][0], -(f.const // k)), ranges[v][1])
        return Ctx(ranges, self.facts + new, self.positive)


def _extent_facts(var: te.Var, extent: te.Expr) -> tuple[Linear, ...]:
    """``var < x`` for each ``x`` in an extent ``min(x, y)`` or ``max(0, min(x, y))`` of a
    loop starting at 0 (a loop partitioned at a symbolic point, ``jp < N // 16 - 2 * b``):
    interval arithmetic on the min alone loses the relation to ``N`` that proves the loop
    body's accesses in bounds."""
    match extent:
        case te.Intrinsic("max", (te.Const(0), inner)):
            extent = inner
    if not (isinstance(extent, te.Intrinsic) and extent.name == "min"):
        return ()
    return tuple(linear(var) - linear(x) + Linear({}, 1) for x in extent.args
                 if not isinstance(x, te.Const))


def _with_numerators(facts: list[Linear]) -> list[Linear]:
    """Add ``x <= c*K + c - 1`` for a fact ``x // c <= K`` (and ``x >= c*K`` for
    ``x // c >= K``): guards of fused axes bound ``f // E``, accesses use ``f``."""
    out = list(facts)
    for f in facts:
        if len(f.terms) != 1:
            continue
        (m, k), = f.terms.items()
        match m:
            case (te.Binary("//", x, te.Const(c)),) if c > 0 and k == 1:
                out.append(linear(x) - Linear({}, c * -f.const + c - 1))
            case (te.Binary("//", x, te.Const(c)),) if c > 0 and k == -1:
                out.append(Linear({}, c * f.const) - linear(x))
    return out


def _tighter(name: str, old: te.Expr, bound: int) -> te.Expr:
    if isinstance(old, te.Const):
        return te.Const((min if name == "min" else max)(int(old.value), bound), INDEX)
    return te.Intrinsic(name, (old, te.Const(bound, INDEX)), INDEX)


def facts_of(cond: te.Expr, truth: bool = True) -> list[Linear]:
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
            one = Linear({}, 1)
            return {"<": [d + one], "<=": [d], ">": [one - d], ">=": [d.scale(-1)],
                    "==": [d, d.scale(-1)], "!=": []}[op]
    return []


# ---------------------------------------------------------------------------- numeric bounds

def bounds(e: te.Expr, ctx: Ctx | None = None) -> tuple[int | None, int | None]:
    """Numeric ``(lo, hi)`` of an index expression at ``ctx`` (None where unbounded)."""
    ctx = ctx or Ctx()
    lin = linear(e)
    return _lo(lin, ctx, 0), _hi(lin, ctx, 0)


def _hi(lin: Linear, ctx: Ctx, depth: int) -> int | None:
    best = _upper(lin, ctx, depth)
    # Facts are tried on the expression and one level into its atoms (``x // 13`` under
    # ``x < 91``); deeper they would multiply the work at every level for little gain.
    for f in ctx.facts if depth <= 1 else ():
        for s, m in _multipliers(lin, f):
            # (``ci - 16 * ((ci + 8) // 16)`` left by the fact is ``(ci + 8) % 16 - 8``:
            # rewritten before ``ci`` is replaced by its range ends, which would lose that)
            h = _upper(expand_floor_multiples(lin.scale(s) - f.scale(m)), ctx, depth)
            if h is not None:
                h //= s                 # s * lin <= h, lin an integer: lin <= floor(h / s)
                if best is None or h < best:
                    best = h
    return best


def _lo(lin: Linear, ctx: Ctx, depth: int) -> int | None:
    h = _hi(lin.scale(-1), ctx, depth)
    return None if h is None else -h


def _multipliers(lin: Linear, fact: Linear) -> set[tuple[int, int]]:
    """``(s, m)`` with ``s * lin - m * fact`` worth bounding (then divided by ``s``): those
    cancelling one of ``lin``'s atoms. ``s > 1`` where the fact's coefficient is not a
    multiple of ``lin``'s: under ``8 * cb + ci < 64`` (a channel concatenation's guard, in
    blocks of 8), the simplified block index ``cb + ci // 8`` is bounded by ``8 * cb + 8 *
    (ci // 8) - (8 * cb + ci - 63) <= 63``, so it is at most 7."""
    out = {(1, 1)}
    for a, k in lin.terms.items():
        c = fact.terms.get(a)
        if c and (k > 0) == (c > 0):
            g = math.gcd(k, c)
            out.add((abs(c) // g, abs(k) // g))
    return out


def _upper(lin: Linear, ctx: Ctx, depth: int) -> int | None:
    """Upper bound ignoring facts: substitute range ends, then bound the remaining atoms."""
    if depth > _MAX_DEPTH:
        return None
    for _ in range(_MAX_DEPTH):
        # (a type test first: hashing a large atom is not cheap)
        if not any(len(m) == 1 and type(m[0]) is te.Var and m[0] in ctx.ranges
                   for m in lin.terms):
            break
        out = Linear({}, lin.const)
        for m, k in lin.terms.items():
            if len(m) == 1 and type(m[0]) is te.Var and m[0] in ctx.ranges:
                out = out + linear(ctx.ranges[m[0]][1 if k > 0 else 0]).scale(k)
            else:
                out = out + Linear({m: k})
        lin = expand_floor_multiples(out)
    total = _sum_upper(lin, ctx, depth)
    if total is None:
        # ``8 * ((D + 7) // 8) - 32 * (D // 32)`` (two rounded-up extents of one size) is
        # bounded only with both floors expanded at once: ``7 - (D + 7) % 8 + D % 32``
        expanded = _expand_all_floor_multiples(lin)
        if expanded != lin:
            total = _sum_upper(expanded, ctx, depth)
    return total


def _sum_upper(lin: Linear, ctx: Ctx, depth: int) -> int | None:
    total = lin.const
    for m, k in lin.terms.items():
        lo, hi = _monomial_bounds(m, ctx, depth + 1)
        end = hi if k > 0 else lo
        if end is None:
            return None
        total += k * end
    return total


def _expand_all_floor_multiples(lin: Linear) -> Linear:
    """Every ``k * (x // c)`` with ``c | k`` as ``(k / c) * (x - x % c)``."""
    out = Linear({}, lin.const)
    for m, k in lin.terms.items():
        match m:
            case (te.Binary("//", x, te.Const(c)),) if c > 0 and k % c == 0:
                mod = te.Binary("%", x, te.Const(c, INDEX), INDEX)
                out = out + linear(x).scale(k // c) + Linear.atom(mod, -(k // c))
            case _:
                out = out + Linear({m: k})
    return out


def _monomial_bounds(m: tuple, ctx: Ctx, depth: int) -> tuple[int | None, int | None]:
    """Bounds of a product of atoms, from each atom's (a missing end is unbounded)."""
    lo, hi = _atom_bounds(m[0], ctx, depth)
    for a in m[1:]:
        lo, hi = _times((lo, hi), _atom_bounds(a, ctx, depth))
    return lo, hi


def _times(x: tuple, y: tuple) -> tuple[int | None, int | None]:
    (l1, h1), (l2, h2) = x, y
    if l1 is not None and l2 is not None and l1 >= 0 and l2 >= 0:
        # both non-negative: the product grows with each factor
        return l1 * l2, (None if h1 is None or h2 is None else h1 * h2)
    if None in (l1, h1, l2, h2):
        return None, None
    ends = [l1 * l2, l1 * h2, h1 * l2, h1 * h2]
    return min(ends), max(ends)


def _atom_bounds(a: te.Expr, ctx: Ctx, depth: int) -> tuple[int | None, int | None]:
    key = (a, depth)
    out = ctx.atom_bounds.get(key)
    if out is None:
        out = ctx.atom_bounds[key] = _atom_bounds_uncached(a, ctx, depth)
    return out


def _atom_bounds_uncached(a: te.Expr, ctx: Ctx, depth: int) -> tuple[int | None, int | None]:
    def sub(x):
        lx = linear(x)
        return _lo(lx, ctx, depth), _hi(lx, ctx, depth)

    match a:
        case te.Var() if a in ctx.ranges:
            return sub(a)                       # still a loop var: range ends not reducible
        case te.Var():
            return int(a in ctx.positive), None     # a shape variable: a size
        case te.Binary("%", x, te.Const(c)) if c > 0:
            lo, hi = sub(x)
            if lo is not None and hi is not None and 0 <= lo and hi < c:
                return lo, hi
            return 0, c - 1                     # floor modulo: in [0, c) for any x
        case te.Binary("//", x, te.Const(c)) if c > 0:
            lo, hi = sub(x)
            return (None if lo is None else lo // c), (None if hi is None else hi // c)
        case te.Binary("//" | "%" as op, x, y) if is_index(a):
            # a symbolic divisor, as a fused axis of symbolic extent gives (blk // ((M + 5)
            # // 6)): for x >= 0 and y >= 1 (code that divides by y runs only where its loop
            # over a multiple of y has iterations), x // y is in [0, x] and x % y in
            # [0, min(x, y - 1)]
            (lx, hx), (ly, hy) = sub(x), sub(y)
            if lx is None or lx < 0 or ly is None or ly < 0:
                return None, None
            if op == "//":
                return 0, hx
            return 0, (hx if hy is None else hy - 1 if hx is None else min(hx, hy - 1))
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
        case te.Compare("<", te.Binary("//", x, y), z) if is_index(x) and \
                not isinstance(y, te.Const) and _prove_linear(te.Compare("<", x, te.Binary(
                    "*", y, z, INDEX)), ctx):
            # x // y < z when x < y * z, for y >= 1: a fused loop's outer index (blk // E
            # < F for blk in [0, E * F)), its divisor positive wherever that loop runs
            return True
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

def relax(e: te.Expr, inner: dict[te.Var, tuple[te.Expr, te.Expr]],
          attained: bool = False) -> tuple | None:
    """Symbolic ``(lo, hi)`` of ``e`` as the variables in ``inner`` range over their
    ``[lo, hi]``; other variables stay symbols. None when ``e`` is not affine enough.

    With ``attained``, the bounds are values ``e`` really takes (at the ends of the ranges),
    not just bounds; None where that is not sure: a variable in two terms (``i - i // 2``),
    or under ``%``."""
    lin = linear(simplify(e))
    lo, hi = Linear({}, lin.const), Linear({}, lin.const)
    seen: set[te.Var] = set()
    for m, k in lin.terms.items():
        used = set().union(*(te.free_vars(a) for a in m)) & inner.keys()
        if attained and used & seen:
            return None
        seen |= used
        if not used:
            m_lo = m_hi = Linear({m: 1})
        elif len(m) == 1 and m[0] in inner:
            m_lo, m_hi = (linear(x) for x in inner[m[0]])
        elif len(m) == 1:
            r = _relax_atom(m[0], inner, attained)
            if r is None:
                return None
            m_lo, m_hi = (linear(x) for x in r)
        else:
            return None                     # a loop variable in a product: not affine
        if k < 0:
            m_lo, m_hi = m_hi, m_lo
        lo = lo + m_lo.scale(k)
        hi = hi + m_hi.scale(k)
    return simplify(lo.to_expr()), simplify(hi.to_expr())


def _relax_atom(a: te.Expr, inner, attained: bool) -> tuple | None:
    match a:
        case te.Binary("//", x, te.Const(c) as cc) if c > 0:
            r = relax(x, inner, attained)
            if r is None:
                return None
            return tuple(te.Binary("//", v, cc, INDEX) for v in r)       # monotone
        case te.Binary("%", x, te.Const(c)) if c > 0 and not attained:
            return te.Const(0, INDEX), te.Const(c - 1, INDEX)
        case te.Intrinsic("min" | "max" as name, (x, y)):
            if attained and te.free_vars(x) & te.free_vars(y) & inner.keys():
                return None                 # min(i, N - i) is largest inside the range
            rx, ry = relax(x, inner, attained), relax(y, inner, attained)
            if rx is None or ry is None:
                return None
            return tuple(te.Intrinsic(name, (u, v), INDEX) for u, v in zip(rx, ry))
    return None
