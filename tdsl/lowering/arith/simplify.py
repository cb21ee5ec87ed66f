"""Arithmetic simplification of expressions: linear normal forms plus rewrite rules.

Index expressions (dtype ``i64``) are brought to their normal form (`linear.Linear`,
``const + sum(coef * monomial)``), so ``(io * 8 + ii) - io * 8`` becomes ``ii`` and bound
inference can cancel terms.

Floor identities used (exact for all integers, ``c > 0``):

- ``(c * q + r) // c == q + r // c`` and ``(c * q + r) % c == r % c``
- ``c * (x // c) == x - x % c``  (so a fused-then-split index ``(f // 4) * 4 + f % 4 == f``)
- ``(x // a) // b == x // (a * b)``, and ``(L + r // c) // d == (c * L + r) // (c * d)``
- ``y % b == y - b * (y // b)`` where that folds fused axes back into one index
- ``(k * a + b) // c == a // (c / k)`` and ``(k * a + b) % c == k * (a % (c / k)) + b``
  for ``k | c`` and ``0 <= b < k`` (in context: a row split off a flat index)

Every other rule is a plain function using ``match``, with one comment; `simplify` applies
them bottom-up until nothing changes, and raises after `MAX_ROUNDS` (a rule that undoes
another would otherwise loop forever). ``bound`` is an optional callback giving numeric
bounds ``(lo, hi)`` (either may be None) of an index expression in context (loop ranges);
rules that need a range (``x % c -> x`` when ``0 <= x < c``) use it.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .. import te
from ..dtypes import INDEX, cast_array, int_range, is_float, is_int, to_numpy
from ..loop_ir import BufferLoad
from .linear import Linear, linear

MAX_ROUNDS = 16
MAX_FUSED_AXES = 4      # the nested floors `expand_floor_multiples` folds back into one index
Bound = Callable[[te.Expr], tuple]


def is_index(e: te.Expr) -> bool:
    return e.dtype == INDEX


def expand_floor_multiples(lin: Linear, bound: Bound | None = None, depth: int = 0) -> Linear:
    """``k * (x // c)`` with ``c | k`` -> ``(k / c) * (x - x % c)``, when that cancels the
    ``x % c`` term (``4 * (f // 4) + f % 4 -> f``) or ``x``'s (``4 * (n // 4) - n -> -(n %
    4)``); otherwise the floor term is the easier one to bound.

    ``k * (y % b)`` -> ``k * y - k * b * (y // b)``, when ``y // b`` cancels a term of the
    sum and that leaves fewer floor terms (``k * y`` then folds by the rule above): three
    fused axes ``c, y, x`` index ``x % 56 + 56 * (x // 56 % 56) + 3136 * (x // 3136)``, which
    is ``x``. ``bound`` simplifies ``y // b`` in context (split by 16, ``(16 * o + i) //
    3136`` is ``o // 196``, as the sum's other term already reads). ``depth`` counts those
    expansions, one an axis."""
    for m, k in lin.terms.items():
        if len(m) != 1:
            continue
        match m[0]:
            case te.Binary("//", x, te.Const(c)) if c > 0 and k % c == 0:
                rest = Linear({a: v for a, v in lin.terms.items() if a is not m}, lin.const)
                mod = te.Binary("%", x, te.Const(c, INDEX), INDEX)
                lx = linear(x)
                out = rest + lx.scale(k // c) + Linear.atom(mod, -(k // c))
                if (mod,) not in out.terms or not any(a in out.terms for a in lx.terms):
                    return expand_floor_multiples(out, bound, depth)
            case te.Binary("%", y, te.Const(b)) \
                    if depth < MAX_FUSED_AXES and b > 0 and _has_floor_multiple(y, k):
                rest = Linear({t: v for t, v in lin.terms.items() if t is not m}, lin.const)
                if all(v % (k * b) for v in rest.terms.values()):
                    continue                    # no next axis's term for y // b to meet
                whole = linear(_floor_div(y, b, bound))
                if not any(rest.terms.get(t) == k * b * v for t, v in whole.terms.items()):
                    continue
                out = rest + linear(y).scale(k) - whole.scale(k * b)
                if _floor_terms(out) < _floor_terms(lin):
                    return expand_floor_multiples(out, bound, depth + 1)
    return lin


def _floor_div(y: te.Expr, b: int, bound: Bound | None) -> te.Expr:
    """``y // b`` by `floor_div_mod` alone (``y`` is simplified already): the full
    simplifier here, once per candidate term, made lowering a batch_matmul 1.3x slower."""
    e = te.Binary("//", y, te.Const(b, INDEX), INDEX)
    for _ in range(MAX_FUSED_AXES):
        out = floor_div_mod(e, bound) if isinstance(e, te.Binary) and e.op == "//" else None
        if out is None or out == e:
            break
        e = out
    return e


def _has_floor_multiple(y: te.Expr, k: int) -> bool:
    """``k * y`` has a term ``j * (x // a)`` with ``a | j``, which the rule above expands."""
    return any((floor := _floor_atom(m)) is not None and (k * v) % floor.b.value == 0
               for m, v in linear(y).terms.items())


def _floor_atom(m) -> te.Binary | None:
    """The monomial ``m`` as one floor division by a positive constant, ``x // c``."""
    match m:
        case (te.Binary("//", _, te.Const(c)) as floor,) if c > 0:
            return floor
    return None


def _floor_terms(lin: Linear) -> int:
    return sum(1 for m in lin.terms for a in m
               if isinstance(a, te.Binary) and a.op in ("//", "%"))


def normalize(e: te.Expr) -> te.Expr:
    return expand_floor_multiples(linear(e)).to_expr(e.dtype)


# ---------------------------------------------------------------------------- rules

def _int(e: te.Expr) -> int | None:
    return int(e.value) if isinstance(e, te.Const) and not is_float(e.dtype) else None


def _const(value, dtype: str) -> te.Const:
    """A constant of ``dtype`` with the value wrapped/rounded as the dtype stores it."""
    if dtype == "bool":
        return te.Const(bool(value), dtype)
    if dtype == INDEX:
        return te.Const(int(value), dtype)
    with np.errstate(all="ignore"):
        v = to_numpy(dtype).type(value)
    return te.Const(float(v) if is_float(dtype) else int(v), dtype)


def _fold(op: str, a, b, dtype: str):
    if op in ("//", "%") and not is_float(dtype) and b == 0:
        return None                                    # leave division by zero to run time
    with np.errstate(all="ignore"):
        if is_float(dtype):
            x, y = to_numpy(dtype).type(a), to_numpy(dtype).type(b)
        else:
            x, y = a, b
        match op:
            case "+": return x + y
            case "-": return x - y
            case "*": return x * y
            case "/": return x / y if is_float(dtype) else None
            case "//": return np.floor_divide(x, y) if is_float(dtype) else x // y
            case "%": return np.mod(x, y) if is_float(dtype) else x % y
            case "<": return a < b
            case "<=": return a <= b
            case ">": return a > b
            case ">=": return a >= b
            case "==": return a == b
            case "!=": return a != b
    return None


def fold_constants(e: te.Expr, bound: Bound | None) -> te.Expr | None:
    match e:
        case te.Binary(op, te.Const(a), te.Const(b), dt) | te.Compare(op, te.Const(a), te.Const(b), dt):
            v = _fold(op, a, b, e.a.dtype)       # compare in the operands' dtype
            return None if v is None else _const(v, dt)
        case te.Unary("-", te.Const(a), dt):
            return _const(-a, dt)
        case te.Unary("not", te.Const(a)):
            return _const(not a, "bool")
        case te.Cast(te.Const(a), dt) if is_float(e.a.dtype) and is_int(dt):
            return _const(int(cast_array(to_numpy(e.a.dtype).type(a), dt)), dt)  # saturates
        case te.Cast(te.Const(a), dt):
            return _const(a, dt)                           # integers wrap
        case te.Select(te.Const(c), t, f):
            return t if c else f                          # select(true, t, f) -> t
    return None


def fold_identities(e: te.Expr, bound: Bound | None) -> te.Expr | None:
    match e:
        case te.Binary("+", x, te.Const(0)) | te.Binary("+", te.Const(0), x):
            return x                                      # x + 0 -> x
        case te.Binary("-", x, te.Const(0)):
            return x                                      # x - 0 -> x
        case te.Binary("*", x, te.Const(1)) | te.Binary("*", te.Const(1), x):
            return x                                      # x * 1 -> x
        case te.Binary("/", x, te.Const(1)):
            return x                                      # x / 1 -> x
        case te.Binary("*", x, te.Const(0)) | te.Binary("*", te.Const(0), x) \
                if not is_float(e.dtype):
            return _const(0, e.dtype)                    # int x * 0 -> 0 (not for NaN floats)
        case te.Unary("not", te.Unary("not", x)):
            return x                                      # not not x -> x
        case te.Unary("-", te.Unary("-", x)):
            return x                                      # --x -> x
        case te.Select(_, t, f) if t == f:
            return t                                      # select(c, t, t) -> t
    return None


def fold_logical(e: te.Expr, bound: Bound | None) -> te.Expr | None:
    match e:
        case te.Logical("and", te.Const(True), x) | te.Logical("and", x, te.Const(True)):
            return x                                      # true and x -> x
        case te.Logical("and", te.Const(False), _) | te.Logical("and", _, te.Const(False)):
            return _const(False, "bool")
        case te.Logical("or", te.Const(False), x) | te.Logical("or", x, te.Const(False)):
            return x                                      # false or x -> x
        case te.Logical("or", te.Const(True), _) | te.Logical("or", _, te.Const(True)):
            return _const(True, "bool")
        case te.Logical(_, a, b) if a == b:
            return a                                      # x and x -> x
    return None


# Index trees known to be in the canonical form: the simplifier meets the same subtrees
# again in every round of its fixed point and in every unrolled copy of a body, and
# rebuilding the form of one only to find it equal was a third of a Winograd kernel's
# simplification.
_CANONICAL = te.IdentityMemo()


def canonical_index(e: te.Expr, bound: Bound | None) -> te.Expr | None:
    """Index +, -, * trees go to the canonical linear form (which cancels terms)."""
    if is_index(e) and isinstance(e, (te.Binary, te.Unary)) and e.op in ("+", "-", "*"):
        if _CANONICAL.get(e):
            return None
        out = expand_floor_multiples(linear(e), bound).to_expr(e.dtype)
        if out == e:
            _CANONICAL.put(e, True)
            return None
        _CANONICAL.put(out, True)
        return out
    return None


def floor_div_mod(e: te.Expr, bound: Bound | None) -> te.Expr | None:
    match e:
        case te.Binary("//" | "%" as op, x, te.Const(c)) if is_index(e) and c > 0:
            if c == 1:
                return x if op == "//" else _const(0, INDEX)        # x // 1, x % 1
            match x:
                case te.Binary("//", y, te.Const(a)) if op == "//" and a > 0:
                    return te.Binary("//", y, te.Const(a * c, INDEX), INDEX)  # (y//a)//c
                case te.Binary("%", y, te.Const(a)) if op == "%" and a > 0 and a % c == 0:
                    return te.Binary("%", y, te.Const(c, INDEX), INDEX)  # (y%(kc))%c -> y%c
            lin = linear(x)
            merged = _merge_inner_floor(lin, c) if op == "//" else None
            if merged is not None:
                return merged
            q = Linear({m: k // c for m, k in lin.terms.items() if k % c == 0}, lin.const // c)
            r = Linear({m: k for m, k in lin.terms.items() if k % c != 0}, lin.const % c)
            if bound is not None:
                lo, hi = bound(r.to_expr())
                if lo is not None and hi is not None and 0 <= lo and hi < c:
                    # 0 <= r < c: (c*q + r) // c == q and (c*q + r) % c == r
                    return q.to_expr() if op == "//" else r.to_expr()
            if bound is not None:
                out = _div_mod_by_factor(op, lin, c, bound)
                if out is not None:
                    return out
            if q.is_const and q.const == 0 and op == "//":
                return None                               # nothing divisible to pull out
            rest = te.Binary(op, r.to_expr(), te.Const(c, INDEX), INDEX)
            out = (q + Linear.atom(rest)).to_expr() if op == "//" else rest
            return None if out == e else out
    return None


def _merge_inner_floor(lin: Linear, d: int) -> te.Expr | None:
    """``(L + r // c) // d -> (c * L + r) // (c * d)`` (``floor(floor(z) / d) == floor(z /
    d)`` with ``z = (c * L + r) / c``): a split of a fused index pulls ``(4 * o + i) // 2``
    apart into ``2 * o + i // 2``, and its parent ``(2 * o + i // 2) // 3`` must read as
    ``(4 * o + i) // 6`` again to meet the same floor elsewhere in the sum. ``lin``: the
    dividend's linear form."""
    inner = [m for m, v in lin.terms.items() if v == 1 and _floor_atom(m) is not None]
    if len(inner) != 1 or len(lin.terms) == 1:
        return None                            # (y // a) // d is merged above
    floor = _floor_atom(inner[0])
    c = floor.b.value
    rest = Linear({m: v for m, v in lin.terms.items() if m is not inner[0]}, lin.const)
    return te.Binary("//", (rest.scale(c) + linear(floor.a)).to_expr(),
                     te.Const(c * d, INDEX), INDEX)


def _div_mod_by_factor(op: str, lin: Linear, c: int, bound: Bound) -> te.Expr | None:
    """``(k * a + b) // c == a // (c / k)`` and ``(k * a + b) % c == k * (a % (c / k)) + b``
    for a factor ``k`` of ``c`` and ``0 <= b < k`` (a row of ``k`` split off a flat index:
    ``(16 * r + l) // 256 == r // 16`` where ``l < 16``), ``k`` the common factor of some of
    ``x``'s coefficients and ``c``."""
    for k in sorted({math.gcd(coef, c) for coef in lin.terms.values()} - {1, c}, reverse=True):
        big = Linear({m: v // k for m, v in lin.terms.items() if v % k == 0}, lin.const // k)
        small = Linear({m: v for m, v in lin.terms.items() if v % k != 0}, lin.const % k)
        if not big.terms:
            continue
        lo, hi = bound(small.to_expr())
        if lo is None or hi is None or lo < 0 or hi >= k:
            continue
        a = te.Binary(op, big.to_expr(), te.Const(c // k, INDEX), INDEX)
        return a if op == "//" else (Linear.atom(a).scale(k) + small).to_expr()
    return None


def min_max(e: te.Expr, bound: Bound | None) -> te.Expr | None:
    match e:
        case te.Intrinsic("min" | "max" as name, (a, b)) if is_index(e):
            if a == b:
                return a
            d = linear(a) - linear(b)
            lo, hi = (d.const, d.const) if d.is_const else \
                (bound(d.to_expr()) if bound else (None, None))
            match a, b:
                case (te.Binary("//", x, te.Const(c)), te.Binary("//", y, te.Const(c2))) \
                        if c == c2 and c > 0:
                    # floor division by c is monotone: x <= y implies x // c <= y // c
                    dxy = linear(x) - linear(y)
                    if dxy.is_const:
                        lo, hi = (0, None) if dxy.const >= 0 else (None, 0)
            if hi is not None and hi <= 0:               # a <= b
                return a if name == "min" else b
            if lo is not None and lo >= 0:               # a >= b
                return b if name == "min" else a
        case te.Intrinsic("min" | "max" as name, (te.Const(a), te.Const(b)), dt):
            return _const(min(a, b) if name == "min" else max(a, b), dt)
    return None


def saturated_clamp(e: te.Expr, bound: Bound | None) -> te.Expr | None:
    """``T(min(x, hi)) -> T(x)`` when float ``x`` is cast to integer type ``T`` and
    ``hi >= T``'s maximum (``max(x, lo)`` likewise for ``lo <= T``'s minimum): the cast
    saturates, and a NaN gives 0 either way (docs/semantics.md, "Casts"). A quantize's
    ``u8(min(max(round(x / s) + zp, 0.0), 255.0))`` is then one saturating conversion:
    without its two NaN-propagating selects the int8 block's quantize ran in 32 us, not 59,
    and its requantize-add epilogue cost its conv 77 us, not 159."""
    match e:
        case te.Cast(te.Intrinsic("min" | "max" as name, (a, b)), dt) \
                if is_int(dt) and is_float(a.dtype):
            x, c = (a, b.value) if isinstance(b, te.Const) else \
                (b, a.value) if isinstance(a, te.Const) else (None, None)
            lo, hi = int_range(dt)
            if x is not None and ((c >= hi) if name == "min" else (c <= lo)):
                return te.Cast(x, dt)
    return None


def compare_index(e: te.Expr, bound: Bound | None) -> te.Expr | None:
    """Decide an index comparison from the bounds of ``a - b``."""
    match e:
        case te.Compare(op, a, b) if is_index(a):
            d = linear(a) - linear(b)
            if d.is_const:
                lo = hi = d.const
            elif bound is not None:
                lo, hi = bound(d.to_expr())
            else:
                return None
            truth = _decide(op, lo, hi)
            return None if truth is None else _const(truth, "bool")
    return None


def _decide(op: str, lo, hi) -> bool | None:
    """Truth of ``d <op> 0`` for ``d`` in ``[lo, hi]`` (None bounds are unknown)."""
    lt = hi is not None and hi < 0
    ge = lo is not None and lo >= 0
    le = hi is not None and hi <= 0
    gt = lo is not None and lo > 0
    table = {"<": (lt, ge), "<=": (le, gt), ">": (gt, le), ">=": (ge, lt),
             "==": (lo == hi == 0 and lo is not None, lt or gt), "!=": (lt or gt, lo == hi == 0)}
    yes, no = table[op]
    return True if yes else (False if no else None)


RULES = (fold_constants, fold_identities, fold_logical, canonical_index, floor_div_mod,
         min_max, saturated_clamp, compare_index)

# The rules that can match each kind of node, in `RULES` order (each rule's first pattern
# names the node classes it takes): the simplifier asks every node of every expression, and
# trying all eight on each was a tenth of a large kernel's lowering.
_RULES_FOR = {
    te.Binary: (fold_constants, fold_identities, canonical_index, floor_div_mod),
    te.Unary: (fold_constants, fold_identities, canonical_index),
    te.Compare: (fold_constants, compare_index),
    te.Cast: (fold_constants, saturated_clamp),
    te.Select: (fold_constants, fold_identities),
    te.Logical: (fold_logical,),
    te.Intrinsic: (min_max,),
}


def _apply_rules(e: te.Expr, bound: Bound | None) -> te.Expr | None:
    for rule in _RULES_FOR.get(type(e), ()):
        out = rule(e, bound)
        if out is not None and out != e:
            return out
    return None


def simplify(e: te.Expr, bound: Bound | None = None) -> te.Expr:
    """Apply `RULES` bottom-up until a fixed point (at most `MAX_ROUNDS` rounds)."""
    for _ in range(MAX_ROUNDS):
        out = te.rewrite(e, lambda n: _apply_rules(n, bound))
        if out == e:
            return out
        e = out
    raise RuntimeError(f"simplifier did not converge in {MAX_ROUNDS} rounds on {e!r}")


def ceil_div(a: te.Expr, c: int) -> te.Expr:
    """``ceil(a / c)`` for ``a >= 0``, simplified."""
    if isinstance(a, te.Const):
        return te.Const(-(-int(a.value) // c), INDEX)
    return simplify(te.Binary("//", te.Binary("+", a, te.Const(c - 1, INDEX), INDEX),
                              te.Const(c, INDEX), INDEX))


def divides(c: int, e: te.Expr) -> bool:
    """True when ``e`` is provably a multiple of ``c``."""
    lin = linear(simplify(e))
    return lin.const % c == 0 and all(k % c == 0 for k in lin.terms.values())

