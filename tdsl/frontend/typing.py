"""Typing rules of expressions: which dtypes combine, and how literals adapt.

A literal (or a compile-time attribute, which is one) has no dtype of its own: it takes the
dtype of what it meets. Integer literals fit any numeric dtype; float literals only float
dtypes. Two typed values must have the same dtype: there is no silent conversion at all,
so narrowing (and widening) is always written as a cast, e.g. ``f32(i)``.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

from ..errors import CheckError, Span, TdslWarning
from ..lowering import te
from ..lowering.dtypes import FLOATS, INDEX, INTS, to_numpy

INT_LIT, FLOAT_LIT = "int literal", "float literal"


@dataclass(frozen=True)
class Typed:
    """A converted expression; ``lit`` is INT_LIT/FLOAT_LIT while its dtype is still open."""
    expr: te.Expr
    lit: str | None = None

    @property
    def dtype(self) -> str:
        return self.lit or self.expr.dtype

    def describe(self) -> str:
        return self.lit or self.expr.dtype


def coerce(x: Typed, dtype: str, span: Span | None, what: str = "value") -> te.Expr:
    """``x`` as a value of ``dtype``; literals adapt, typed values must already match."""
    if x.lit is None:
        if x.expr.dtype != dtype:
            raise CheckError(f"{what} has dtype {x.expr.dtype} but {dtype} is needed", span,
                             hint=f"convert explicitly, e.g. {dtype}(...)")
        return x.expr
    if x.lit == FLOAT_LIT and dtype not in FLOATS:
        raise CheckError(f"a float literal can't be used as {dtype}", span,
                         hint="use an integer literal, or cast the other side to f32")
    if dtype == "bool":
        raise CheckError("a number can't be used as bool", span, hint="compare it, e.g. x != 0")
    e = x.expr
    if isinstance(e, te.Const):
        _warn_if_out_of_range(e.value, dtype, span)
        return te.const(e.value, dtype)
    return e if e.dtype == dtype else te.Cast(e, dtype)


def _warn_if_out_of_range(value, dtype: str, span: Span | None) -> None:
    """An integer literal the type can't hold wraps (``X[i] + 300`` on i8 adds 44): legal,
    and almost surely a mistake, so a `TdslWarning` at its expression."""
    if dtype not in INTS or isinstance(value, bool) or not isinstance(value, int):
        return
    import numpy as np
    info = np.iinfo(to_numpy(dtype))
    if info.min <= value <= info.max:
        return
    bits = info.bits
    wrapped = value & ((1 << bits) - 1)
    if info.min < 0 and wrapped > info.max:
        wrapped -= 1 << bits
    where = f"{span}: " if span is not None else ""
    warnings.warn(TdslWarning(f"{where}the literal {value} does not fit in {dtype} "
                              f"({info.min}..{info.max}): it wraps to {wrapped}; write "
                              f"{wrapped} if that is meant, or use a wider type"),
                  stacklevel=2)


def unify(a: Typed, b: Typed, span: Span | None, op: str) -> tuple[te.Expr, te.Expr, str | None]:
    """Bring two operands to one dtype; returns them and the literal kind if both are literal."""
    if a.lit and b.lit:
        lit = FLOAT_LIT if FLOAT_LIT in (a.lit, b.lit) else INT_LIT
        dtype = "f32" if lit == FLOAT_LIT else INDEX
        return _lit_as(a, dtype), _lit_as(b, dtype), lit
    if a.lit:
        return coerce(a, b.dtype, span, f"left operand of {op}"), b.expr, None
    if b.lit:
        return a.expr, coerce(b, a.dtype, span, f"right operand of {op}"), None
    if a.dtype != b.dtype:
        raise CheckError(f"operands of {op} have different dtypes: {a.dtype} and {b.dtype}",
                         span, hint=f"cast one side explicitly, e.g. {a.dtype}(...)")
    return a.expr, b.expr, None


def _lit_as(x: Typed, dtype: str) -> te.Expr:
    e = x.expr
    if isinstance(e, te.Const):
        return te.const(e.value, dtype)
    return e if e.dtype == dtype else te.Cast(e, dtype)


def check_numeric(x: Typed, span: Span | None, op: str, floats_only=False, ints_only=False):
    d = x.dtype
    if d == "bool":
        raise CheckError(f"{op} needs a number, not a bool", span)
    if floats_only and d not in FLOATS and d != FLOAT_LIT:
        if d == INT_LIT:
            return
        raise CheckError(f"{op} needs a float operand, got {d}", span,
                         hint="convert with f32(...)")
    if ints_only and d not in INTS and d != INT_LIT and d != INDEX:
        raise CheckError(f"{op} needs integer operands, got {d}", span,
                         hint="use / for float division, floor(...) to round down" if op in (
                             "//", "%") else None)


def check_bool(x: Typed, span: Span | None, what: str):
    if x.dtype != "bool":
        raise CheckError(f"{what} must be a bool, got {x.describe()}", span,
                         hint="write a comparison, e.g. x > 0")
