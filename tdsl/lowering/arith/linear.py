"""The one normal form of integer index expressions: a sum of monomials with integer coefficients.

``Linear`` is ``const + sum(coef * monomial)``; a monomial is a product of *atoms*, each a
variable or a sub-expression the form cannot open (``x // 4``, ``x % 4``, ``min(a, b)``, a
load). Products of sizes are monomials (``N * K`` and ``K * N`` are one monomial), so two
expressions with the same form are equal for all values: ``(io * 8 + ii) - io * 8`` is
``ii``, and ``H * W - W * H`` is 0.

Two constructors:

- `linear`: any index expression; whatever it cannot open is an atom, left as it is (the
  simplifier has already simplified the atoms' insides, bottom-up);
- `exact`: integer arithmetic only (None for a float, a load, a call), atoms rebuilt from the
  normal forms of their operands, sizes optionally replaced by their values: the checker's
  equality of shapes, the reference's affine subscripts, the size binder's solving.

`Linear.to_expr` is the one canonical rendering: variables by name, then other atoms, then
products, the constant last, coefficients in front (``2 * N - 1``).
"""
from __future__ import annotations

from typing import Iterator, Mapping

from .. import te
from ..dtypes import FLOATS, INDEX

Monomial = tuple            # atoms (te.Expr) in `atom_key` order; never empty


def atom_key(a: te.Expr):
    """Variables first, by name; then other atoms by their (deterministic) text."""
    return (0, a.name, "") if isinstance(a, te.Var) else (1, type(a).__name__, repr(a))


def _monomial_key(m: Monomial):
    return (len(m) > 1, tuple(atom_key(a) for a in m))


class Linear:
    """``const + sum(coef * monomial)``; immutable by convention (operations return new ones).

    ``terms`` maps each monomial (a tuple of atoms) to its non-zero coefficient.
    """
    __slots__ = ("terms", "const")

    def __init__(self, terms: dict | None = None, const: int = 0):
        self.terms: dict[Monomial, int] = {m: c for m, c in terms.items() if c != 0} \
            if terms else {}
        self.const = const

    @staticmethod
    def _of(terms: dict, const: int) -> "Linear":
        """Without the check for zero coefficients (the caller knows there are none); the
        lowering passes build many forms, so this is the fast path."""
        out = Linear.__new__(Linear)
        out.terms, out.const = terms, const
        return out

    @staticmethod
    def atom(a: te.Expr, coef: int = 1) -> "Linear":
        return Linear({(a,): coef})

    def __add__(self, o: "Linear") -> "Linear":
        if not o.terms:
            return Linear._of(self.terms, self.const + o.const)
        if not self.terms:
            return Linear._of(o.terms, self.const + o.const)
        t = dict(self.terms)
        for m, c in o.terms.items():
            v = t.get(m, 0) + c
            if v:
                t[m] = v
            else:
                del t[m]
        return Linear._of(t, self.const + o.const)

    def __sub__(self, o: "Linear") -> "Linear":
        return self + o.scale(-1)

    def scale(self, k: int) -> "Linear":
        if k == 1:
            return self
        if k == 0:
            return Linear._of({}, 0)
        return Linear._of({m: c * k for m, c in self.terms.items()}, self.const * k)

    def __mul__(self, o: "Linear") -> "Linear":
        if o.is_const:
            return self.scale(o.const)
        if self.is_const:
            return o.scale(self.const)
        t: dict[Monomial, int] = {}
        for m1, c1 in (*self.terms.items(), ((), self.const)):
            for m2, c2 in (*o.terms.items(), ((), o.const)):
                if m1 or m2:
                    m = tuple(sorted(m1 + m2, key=atom_key))
                    t[m] = t.get(m, 0) + c1 * c2
        return Linear(t, self.const * o.const)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def coeff(self, atom: te.Expr) -> int:
        """The coefficient of ``atom`` as a term of its own (0 if it has none)."""
        return self.terms.get((atom,), 0)

    def coeff_if_linear(self, var: te.Var) -> int | None:
        """The coefficient of ``var`` when it appears only as a term of its own; None when
        it is in a product or inside another atom (``var // 2``)."""
        for m in self.terms:
            if m != (var,) and any(var in te.free_vars(a) for a in m):
                return None
        return self.coeff(var)

    def drop(self, atom: te.Expr) -> "Linear":
        """The form without the term ``atom`` (its own term only)."""
        return Linear({m: c for m, c in self.terms.items() if m != (atom,)}, self.const)

    def atoms(self) -> Iterator[te.Expr]:
        for m in self.terms:
            yield from m

    def free_vars(self) -> set[te.Var]:
        out: set[te.Var] = set()
        for a in self.atoms():
            out |= te.free_vars(a)
        return out

    def to_expr(self, dtype: str = INDEX) -> te.Expr:
        """The canonical expression: ``2 * N + M * K - N // 2 - 1``.

        A positive term leads (``(IH + 1) // 2 - KH``, ``3 - N``), so no negation node
        appears unless every part is negative (``-2 * N - 3``)."""
        order = sorted(self.terms, key=_monomial_key) if len(self.terms) > 1 else \
            list(self.terms)
        lead = next((m for m in order if self.terms[m] > 0), None)
        if lead is not None:
            order.remove(lead)
            order.insert(0, lead)
        out: te.Expr | None = None
        if lead is None and self.const > 0:
            out = te.Const(self.const, dtype)
        for m in order:
            c = self.terms[m]
            prod = m[0]
            for a in m[1:]:
                prod = te.Binary("*", prod, a, dtype)
            if out is None and c < 0:       # every part is negative
                out = te.Binary("*", te.Const(c, dtype), prod, dtype)
                continue
            term = prod if abs(c) == 1 else te.Binary("*", te.Const(abs(c), dtype), prod, dtype)
            out = term if out is None else te.Binary("+" if c > 0 else "-", out, term, dtype)
        if out is None:
            return te.Const(self.const, dtype)
        if self.const and not (lead is None and self.const > 0):
            out = te.Binary("+" if self.const > 0 else "-", out, te.Const(abs(self.const), dtype),
                            dtype)
        return out

    def __eq__(self, o) -> bool:
        return isinstance(o, Linear) and self.const == o.const and self.terms == o.terms

    __hash__ = None

    def __repr__(self) -> str:
        return f"Linear({self.terms}, {self.const})"


def const(v: int) -> Linear:
    return Linear({}, v)


# The forms of compound nodes already opened: the simplifier rewrites bottom-up and every
# +, -, * node asks for the form of its whole subtree, so without this a sum of n terms was
# opened n times (and every round of the fixed point opened it all again).
_FORMS = te.IdentityMemo()


def linear(e: te.Expr) -> Linear:
    """The form of an index expression: ``+``, ``-``, ``*`` and negation are opened, anything
    else is an atom as it stands."""
    kind = type(e)              # dispatch on the type: the passes call this very often
    if kind is te.Const:
        return Linear._of({}, int(e.value))
    if kind is te.Binary and e.op in ("+", "-", "*") or kind is te.Unary and e.op == "-":
        form = _FORMS.get(e)
        if form is not None:
            return form
        if kind is te.Unary:
            form = linear(e.a).scale(-1)
        elif e.op == "+":
            form = linear(e.a) + linear(e.b)
        elif e.op == "-":
            form = linear(e.a) - linear(e.b)
        else:
            form = linear(e.a) * linear(e.b)
        return _FORMS.put(e, form)
    return Linear._of({(e,): 1}, 0)


def _is_int(dtype: str) -> bool:
    return dtype not in FLOATS and dtype != "bool"


def exact(e: te.Expr, values: Mapping[str, int] | None = None, index_only: bool = False,
          keep_unit_division: bool = False) -> Linear | None:
    """The form of an integer expression, or None when ``e`` is not integer arithmetic.

    Variables named in ``values`` are replaced by their value; ``//``, ``%``, ``min`` and
    ``max`` of constants are folded (not a division by zero), others are atoms over their
    operands' normal forms. With ``index_only`` every node must be ``i64``: narrower integers
    may wrap, which this exact arithmetic would not reproduce. With ``keep_unit_division``,
    ``x // 1`` stays an atom (see `normal_form`).
    """
    if index_only and e.dtype != INDEX:
        return None
    match e:
        case te.Const(value, dtype) if _is_int(dtype):
            return Linear({}, int(value))
        case te.Var(name):
            if values is not None and name in values:
                return Linear({}, int(values[name]))
            return Linear({(e,): 1})
        case te.Cast(a, dtype) if _is_int(dtype) and _is_int(a.dtype):
            return exact(a, values, index_only, keep_unit_division)
        case te.Unary("-", a):
            p = exact(a, values, index_only, keep_unit_division)
            return None if p is None else p.scale(-1)
        case te.Binary("+" | "-" | "*" as op, a, b):
            pa = exact(a, values, index_only, keep_unit_division)
            pb = exact(b, values, index_only, keep_unit_division)
            if pa is None or pb is None:
                return None
            return pa + pb if op == "+" else pa - pb if op == "-" else pa * pb
        case te.Binary("//" | "%" as op, a, b):
            pa = exact(a, values, index_only, keep_unit_division)
            pb = exact(b, values, index_only, keep_unit_division)
            if pa is None or pb is None:
                return None
            if pb.is_const and pb.const == 1 and not (keep_unit_division and op == "//"):
                return pa if op == "//" else const(0)
            if pa.is_const and pb.is_const and pb.const != 0:
                return const(pa.const // pb.const if op == "//" else pa.const % pb.const)
            return Linear.atom(te.Binary(op, pa.to_expr(), pb.to_expr(), INDEX))
        case te.Intrinsic("min" | "max" as name, args) if _is_int(e.dtype):
            ps = [exact(a, values, index_only, keep_unit_division) for a in args]
            if any(p is None for p in ps):
                return None
            if all(p.is_const for p in ps):
                return const((min if name == "min" else max)(p.const for p in ps))
            return Linear.atom(te.Intrinsic(name, tuple(p.to_expr() for p in ps), INDEX))
    return None


def equal(a: te.Expr, b: te.Expr) -> bool:
    """True when two integer expressions are equal for all values of their variables."""
    pa, pb = exact(a), exact(b)
    return pa is not None and pb is not None and pa == pb


def normal_form(e: te.Expr) -> te.Expr:
    """A size expression in its canonical rendering (unchanged when it is not an integer one).

    ``x // 1`` is kept: in a size, ``(IH - kernel) // stride + 1`` says that ``IH - kernel``
    must not be negative (a window that fits its input, see `sizes.value`), whatever the
    stride; folding it at stride 1 would turn an input smaller than its window into an empty
    output."""
    p = exact(e, keep_unit_division=True)
    return e if p is None else p.to_expr()
