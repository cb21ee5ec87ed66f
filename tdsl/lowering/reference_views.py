"""Subscripts for the reference evaluator: exact index arithmetic, affine forms, views, gathers.

The evaluator (`reference_eval`) gives every axis variable in scope its own numpy dimension of
one "grid": axis ``v`` is ``start + arange(extent)`` laid along dimension ``dim`` and has size 1
in all the others, so plain broadcasting makes an expression's array span exactly the axes it
uses. This module holds what concerns subscripts on that grid:

- `eval_index`: shape and extent expressions in Python ints (exact; ``//`` and ``%`` floor);
- `affine`: a subscript written as ``const + sum(coef * position[dim])``, when it is one;
- `strided_view`: a load whose subscripts are all affine and stay in range, as a zero-copy
  ``as_strided`` view with one dimension per axis (no gather, no copy);
- `gather`: every other load, with the bounds check that numpy would not do (a negative
  subscript would silently wrap around) restricted to the elements that are really read.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Mapping

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import te
from .dtypes import INDEX


@dataclass(frozen=True, slots=True)
class Axis:
    """An axis variable in scope: grid dimension ``dim`` holds values ``start .. start+extent-1``.

    ``start`` is not 0 only while a large reduction is evaluated in chunks of an outer axis.
    """
    dim: int
    start: int
    extent: int

    def values(self, ndim: int) -> np.ndarray:
        shape = [1] * ndim
        shape[self.dim] = self.extent
        return np.arange(self.start, self.start + self.extent, dtype=np.int64).reshape(shape)


class UnboundVar(Exception):
    """Internal: `eval_index` met a variable with no value (the caller words the CallError)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class NotAnIndex(Exception):
    """Internal: the expression is not plain integer arithmetic on shape variables."""


class OutOfRange(Exception):
    """Internal: a live element reads outside its tensor; the evaluator words the TdslError.

    ``pos`` is the first offending grid position, ``subscripts`` the subscript values there.
    """

    def __init__(self, pos: tuple[int, ...], subscripts: tuple[int, ...]):
        super().__init__(pos, subscripts)
        self.pos = pos
        self.subscripts = subscripts


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
            if dtype in ("f32", "f64"):
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


Affine = tuple[dict[int, int], int]   # ({grid dim: coefficient}, constant)


def affine(e: te.Expr, axes: Mapping[str, Axis], env: Mapping[str, int]) -> Affine | None:
    """``e`` as ``const + sum(coef[dim] * position[dim])`` over grid positions, or None.

    Only ``i64`` nodes qualify: a narrower integer subexpression may wrap, which the exact
    Python arithmetic here would not reproduce, so it goes to the general (numpy) path.
    Shape variables are constants here; an axis in a chunk contributes its ``start``.
    """
    if e.dtype != INDEX:
        return None
    match e:
        case te.Var(name):
            if name in axes:
                ax = axes[name]
                return {ax.dim: 1}, ax.start
            if name in env:
                return {}, env[name]
            return None
        case te.Const(value):
            return {}, int(value)
        case te.Unary("-", a):
            fa = affine(a, axes, env)
            return None if fa is None else ({d: -c for d, c in fa[0].items()}, -fa[1])
        case te.Cast(a):
            return affine(a, axes, env)
        case te.Binary(op, a, b) if op in _INT_BINARY:
            fa, fb = affine(a, axes, env), affine(b, axes, env)
            if fa is None or fb is None:
                return None
            if op in ("+", "-"):
                sign = 1 if op == "+" else -1
                coefs = dict(fa[0])
                for d, c in fb[0].items():
                    coefs[d] = coefs.get(d, 0) + sign * c
                return {d: c for d, c in coefs.items() if c}, fa[1] + sign * fb[1]
            if op == "*" and not fa[0]:
                return {d: c * fa[1] for d, c in fb[0].items() if c * fa[1]}, fa[1] * fb[1]
            if op == "*" and not fb[0]:
                return {d: c * fb[1] for d, c in fa[0].items() if c * fb[1]}, fa[1] * fb[1]
            if not fa[0] and not fb[0] and fb[1] != 0:      # constant // and %
                return {}, _INT_BINARY[op](fa[1], fb[1])
    return None


def strided_view(arr: np.ndarray, forms: list[Affine], extents: list[int]) -> np.ndarray | None:
    """``arr[forms]`` on the grid as a read-only view, or None if some element is out of range.

    Subscript ``d`` is ``c_d + sum(coef[d][g] * p_g)``, so stepping grid dimension ``g`` by one
    moves ``sum_d coef[d][g] * arr.strides[d]`` bytes; the view starts at element ``(c_d)``.
    ``extents[g]`` is the size of grid dimension ``g`` (1 where no axis lives).
    """
    ndim = len(extents)
    shape, strides, start = [1] * ndim, [0] * ndim, []
    for d, (coefs, c) in enumerate(forms):
        lo = hi = c
        for g, a in coefs.items():
            span = a * (extents[g] - 1)
            lo, hi = lo + min(0, span), hi + max(0, span)
            strides[g] += a * arr.strides[d]
            shape[g] = extents[g]
        if lo < 0 or hi >= arr.shape[d]:
            return None
        start.append(c)
    # lo <= c_d <= hi, so the first element exists; slicing keeps arr's own strides.
    base = arr[tuple(slice(c, c + 1) for c in start)]
    return as_strided(base, shape=shape, strides=strides, writeable=False)


def gather(arr: np.ndarray, idx: list[np.ndarray], mask: np.ndarray | None) -> np.ndarray:
    """``arr[idx]`` with broadcast int64 subscripts; raise `OutOfRange` for a live bad read.

    Elements where ``mask`` is False are never used (the untaken side of a select), so their
    subscripts are clipped into range instead of faulting; numpy would otherwise wrap negative
    subscripts silently, or raise a bare IndexError.
    """
    bad = None
    for d, ix in enumerate(idx):
        n = arr.shape[d]
        if ix.size and (ix.min() < 0 or ix.max() >= n):
            oob = (ix < 0) | (ix >= n)
            bad = oob if bad is None else bad | oob
    if bad is None:
        return np.asarray(arr[tuple(idx)])
    live_bad = bad if mask is None else bad & mask
    if live_bad.any():
        # Report the first bad element, on the shape spanned by every subscript.
        full = np.broadcast_shapes(live_bad.shape, *(ix.shape for ix in idx))
        pos = tuple(int(p) for p in np.argwhere(np.broadcast_to(live_bad, full))[0])
        subs = tuple(int(np.broadcast_to(ix, full)[pos]) for ix in idx)
        raise OutOfRange(pos, subs)
    shape = np.broadcast_shapes(*(ix.shape for ix in idx))
    if arr.size == 0:            # every read is dead: any value will do
        return np.zeros(shape, arr.dtype)
    clipped = tuple(np.clip(ix, 0, n - 1) for ix, n in zip(idx, arr.shape))
    return np.asarray(arr[clipped])
