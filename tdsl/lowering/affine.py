"""Integer polynomials over symbols: equality of symbolic shapes and interval bounds.

`Poly` is a normal form for integer index expressions: a sum of monomials with integer
coefficients over atoms (variables, or sub-expressions it cannot open such as ``(H - 1) // 2``,
themselves normalised). Two expressions with the same normal form are equal for all values.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import te

Monomial = tuple          # sorted tuple of atom keys; () is the constant term


@dataclass(frozen=True)
class Poly:
    terms: tuple[tuple[Monomial, int], ...]     # sorted, no zero coefficients
    atoms: tuple[tuple[str, te.Expr], ...] = ()   # key -> the expression it stands for

    @staticmethod
    def make(terms: dict, atoms: dict) -> "Poly":
        kept = tuple(sorted((m, c) for m, c in terms.items() if c != 0))
        used = {a for m, _ in kept for a in m}
        return Poly(kept, tuple(sorted((k, v) for k, v in atoms.items() if k in used)))

    @property
    def const(self) -> int:
        return dict(self.terms).get((), 0)

    @property
    def is_const(self) -> bool:
        return all(m == () for m, _ in self.terms)

    def __add__(self, o: "Poly") -> "Poly":
        t = dict(self.terms)
        for m, c in o.terms:
            t[m] = t.get(m, 0) + c
        return Poly.make(t, {**dict(self.atoms), **dict(o.atoms)})

    def scale(self, k: int) -> "Poly":
        return Poly.make({m: c * k for m, c in self.terms}, dict(self.atoms))

    def __sub__(self, o: "Poly") -> "Poly":
        return self + o.scale(-1)

    def __mul__(self, o: "Poly") -> "Poly":
        t: dict = {}
        for m1, c1 in self.terms:
            for m2, c2 in o.terms:
                m = tuple(sorted(m1 + m2))
                t[m] = t.get(m, 0) + c1 * c2
        return Poly.make(t, {**dict(self.atoms), **dict(o.atoms)})

    def coeff_of(self, key: str) -> int | None:
        """The coefficient of ``key`` when it appears only linearly (None otherwise)."""
        c = 0
        for m, k in self.terms:
            if key in m:
                if m != (key,):
                    return None
                c = k
        return c

    def drop(self, key: str) -> "Poly":
        return Poly.make({m: c for m, c in self.terms if key not in m}, dict(self.atoms))

    def to_expr(self) -> te.Expr:
        atoms = dict(self.atoms)
        out: te.Expr | None = None
        # variables first, the constant last: "H + 2", not "2 + H"
        for m, c in sorted(self.terms, key=lambda mc: mc[0] == ()):
            term: te.Expr = te.Const(abs(c), "i64")
            if m:
                prod = atoms[m[0]]
                for a in m[1:]:
                    prod = te.Binary("*", prod, atoms[a], "i64")
                term = prod if abs(c) == 1 else te.Binary("*", term, prod, "i64")
            if out is None:
                out = term if c >= 0 else te.Unary("-", term, "i64")
            else:
                out = te.Binary("+" if c >= 0 else "-", out, term, "i64")
        return out if out is not None else te.Const(0, "i64")


def const(v: int) -> Poly:
    return Poly.make({(): v}, {})


def var(v: te.Var) -> Poly:
    return Poly.make({(v.name,): 1}, {v.name: v})


def from_expr(e: te.Expr) -> Poly | None:
    """The normal form of an integer expression, or None for non-integer expressions."""
    match e:
        case te.Const(value, dtype) if dtype not in ("f32", "f64", "bool"):
            return const(int(value))
        case te.Var():
            return var(e)
        case te.Cast(a, dtype) if dtype not in ("f32", "f64", "bool") and a.dtype not in (
                "f32", "f64", "bool"):
            return from_expr(a)
        case te.Unary("-", a):
            p = from_expr(a)
            return None if p is None else p.scale(-1)
        case te.Binary(op, a, b) if op in ("+", "-", "*"):
            pa, pb = from_expr(a), from_expr(b)
            if pa is None or pb is None:
                return None
            return pa + pb if op == "+" else pa - pb if op == "-" else pa * pb
        case te.Binary(op, a, b) if op in ("//", "%"):
            pa, pb = from_expr(a), from_expr(b)
            if pa is None or pb is None:
                return None
            if pb.is_const and pb.const == 1:
                return pa if op == "//" else const(0)
            if pa.is_const and pb.is_const and pb.const != 0:
                return const(pa.const // pb.const if op == "//" else pa.const % pb.const)
            return _atom(te.Binary(op, pa.to_expr(), pb.to_expr(), "i64"))
        case te.Intrinsic(name, args) if name in ("min", "max") and e.dtype not in (
                "f32", "f64"):
            ps = [from_expr(a) for a in args]
            if any(p is None for p in ps):
                return None
            if all(p.is_const for p in ps):
                f = min if name == "min" else max
                return const(f(p.const for p in ps))
            return _atom(te.Intrinsic(name, tuple(p.to_expr() for p in ps), "i64"))
    return None


def _atom(e: te.Expr) -> Poly:
    key = "@" + str(e)
    return Poly.make({(key,): 1}, {key: e})


def equal(a: te.Expr, b: te.Expr) -> bool:
    pa, pb = from_expr(a), from_expr(b)
    return pa is not None and pb is not None and (pa - pb).is_const and (pa - pb).const == 0


def simplify(e: te.Expr) -> te.Expr:
    """An integer expression in normal form (unchanged when it is not one)."""
    p = from_expr(e)
    return e if p is None else p.to_expr()


def lower_bound(p: Poly, positive: set[str]) -> int | None:
    """The least value of ``p`` over all symbol values (symbols in ``positive`` are >= 1,
    the others >= 0), when every non-constant coefficient is >= 0; else None."""
    total = 0
    for m, c in p.terms:
        if m == ():
            total += c
        elif c < 0:
            return None
        else:
            total += c * int(all(a in positive for a in m))
    return total


def upper_bound_neg(p: Poly, positive: set[str]) -> int | None:
    """The greatest value of ``p`` when every non-constant coefficient is <= 0; else None."""
    lb = lower_bound(p.scale(-1), positive)
    return None if lb is None else -lb


@dataclass(frozen=True)
class Range:
    """``lo <= v <= hi`` (inclusive), both polynomials in symbols other than index vars."""
    lo: Poly
    hi: Poly


def bounds(p: Poly, ranges: dict[str, Range]) -> Range | None:
    """Interval of ``p`` when each index variable in ``ranges`` appears linearly with a
    constant coefficient; None otherwise."""
    lo = hi = p
    for key, r in ranges.items():
        c = p.coeff_of(key)
        if c is None:
            return None
        if c == 0:
            continue
        lo = lo.drop(key) + (r.lo if c > 0 else r.hi).scale(c)
        hi = hi.drop(key) + (r.hi if c > 0 else r.lo).scale(c)
    return Range(lo, hi)
