"""Subscripts for the reference evaluator: affine forms, views, gathers.

The evaluator (`stage`) gives every axis variable in scope its own numpy dimension of
one "grid": axis ``v`` is ``start + arange(extent)`` laid along dimension ``dim`` and has size 1
in all the others, so plain broadcasting makes an expression's array span exactly the axes it
uses. This module holds what concerns subscripts on that grid:

- `affine`: a subscript written as ``const + sum(coef * position[dim])``, when it is one;
- `strided_view`: a load whose subscripts are all affine and stay in range, as a zero-copy
  ``as_strided`` view with one dimension per axis (no gather, no copy);
- `gather`: every other load, with the bounds check that numpy would not do (a negative
  subscript would silently wrap around) restricted to the elements that are really read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import te
from ..arith.linear import exact


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


class OutOfRange(Exception):
    """Internal: a live element reads outside its tensor; the evaluator words the TdslError.

    ``pos`` is the first offending grid position, ``subscripts`` the subscript values there.
    """

    def __init__(self, pos: tuple[int, ...], subscripts: tuple[int, ...]):
        super().__init__(pos, subscripts)
        self.pos = pos
        self.subscripts = subscripts


Affine = tuple[dict[int, int], int]   # ({grid dim: coefficient}, constant)


def affine(e: te.Expr, axes: Mapping[str, Axis], env: Mapping[str, int]) -> Affine | None:
    """``e`` as ``const + sum(coef[dim] * position[dim])`` over grid positions, or None.

    Only ``i64`` nodes qualify: a narrower integer subexpression may wrap, which the exact
    Python arithmetic here would not reproduce, so it goes to the general (numpy) path.
    Shape variables are constants here; an axis in a chunk contributes its ``start``.
    """
    if axes.keys() & env.keys():            # an axis hides a size of the same name
        env = {k: v for k, v in env.items() if k not in axes}
    form = exact(e, env, index_only=True)
    if form is None:
        return None
    coefs, c = {}, form.const
    for m, k in form.terms.items():
        if len(m) != 1 or not isinstance(m[0], te.Var) or m[0].name not in axes:
            return None
        ax = axes[m[0].name]
        coefs[ax.dim] = coefs.get(ax.dim, 0) + k
        c += k * ax.start
    return {d: k for d, k in coefs.items() if k}, c


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
    return strided(base, shape, strides, writeable=False)


def strided(arr: np.ndarray, shape, strides, **kw) -> np.ndarray:
    """``as_strided``, which also takes ml_dtypes' types (bf16, the 8- and 4-bit floats):
    numpy's array interface knows only their bits."""
    if arr.dtype.isbuiltin == 2:
        bits = arr.view(f"u{arr.dtype.itemsize}")
        return as_strided(bits, shape=shape, strides=strides, **kw).view(arr.dtype)
    return as_strided(arr, shape=shape, strides=strides, **kw)


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
