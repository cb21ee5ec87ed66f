"""Exact values of integer expressions over known sizes: shapes, extents, size conditions.

Python ints, so nothing wraps; ``//`` and ``%`` floor, as the IR specifies. The size binder
(`sizes`), the reference and the interpreter evaluate shapes here.
"""
from __future__ import annotations

import operator
from typing import Mapping

from .. import te
from ..dtypes import FLOATS


class UnboundVar(Exception):
    """Internal: `eval_index` met a variable with no value (the caller words the CallError)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class NotAnIndex(Exception):
    """Internal: the expression is not plain integer arithmetic on shape variables."""


def _floordiv(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError("division by zero in a shape expression")
    return a // b


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError("modulo by zero in a shape expression")
    return a % b


# Python's // and % are already floor division and floor modulo, as the IR specifies.
_INT_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul,
               "//": _floordiv, "%": _mod}
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "==": operator.eq, "!=": operator.ne}


def eval_index(e: te.Expr, env: Mapping[str, int]) -> int:
    """Value of a shape/extent expression over bound shape variables, as an exact int.

    Raises `UnboundVar` for a variable not in ``env``, `NotAnIndex` for anything that is not
    integer arithmetic (a load, a float), ZeroDivisionError for ``// 0``.
    """
    match e:
        case te.Var(name):
            if name not in env:
                raise UnboundVar(name)
            return env[name]
        case te.Const(value, dtype):
            if dtype in FLOATS:
                raise NotAnIndex(e)
            return int(value)
        case te.Binary(op, a, b) if op in _INT_BINARY:
            return _INT_BINARY[op](eval_index(a, env), eval_index(b, env))
        case te.Compare(op, a, b):
            return int(_COMPARE[op](eval_index(a, env), eval_index(b, env)))
        case te.Logical(op, a, b):
            x = eval_index(a, env)
            if op == "and":
                return int(bool(x) and bool(eval_index(b, env)))
            return int(bool(x) or bool(eval_index(b, env)))
        case te.Unary(op, a):
            x = eval_index(a, env)
            return -x if op == "-" else int(not x)
        case te.Cast(a, _):
            return eval_index(a, env)
        case te.Select(c, t, f):
            return eval_index(t if eval_index(c, env) else f, env)
        case te.Intrinsic("min" | "max" | "abs" as name, args):
            vals = [eval_index(a, env) for a in args]
            return {"min": min, "max": max, "abs": abs}[name](*vals)
    raise NotAnIndex(e)
