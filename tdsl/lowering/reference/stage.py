"""Vectorised evaluation of one stage's expression with numpy: the heart of the reference.

Layout: each axis variable in scope owns one dimension of an ``ndim``-dimensional grid (the
stage's data axes first, then reduction axes stacked as reductions nest; sibling reductions
reuse dimensions). Every intermediate value is a full-``ndim`` array, or 0-d, with size 1 in the
dimensions of axes it does not use, so broadcasting lines values up and an array is never larger
than the axes it depends on. A reduction reduces its dimensions with ``keepdims``, leaving size 1.

Masks: ``mask`` (None = everywhere) marks the grid elements whose value is really used. A
select narrows it for each branch, ``and``/``or`` for their right operand (C short-circuits, so
an emitted kernel never performs those reads either). Loads only check bounds where the mask is
True and clip elsewhere: the IR's select is lazy in meaning even though numpy evaluates both
sides.

Speed: affine in-range loads are strided views (`views`); a ``sum`` of a product is
one ``np.einsum`` over the factors, each evaluated on its own axes only (a conv never builds the
data x reduction grid); other reductions are chunked so no array exceeds `GRID_LIMIT` elements.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ...errors import CallError
from .. import te
from ..bitwise import FUNCTIONS as BITWISE
from ..dtypes import cast_array, is_float, is_int, to_numpy
from ..quantize import multiply_by_quantized_multiplier
from .views import Axis, OutOfRange, affine, gather, strided_view

# Largest grid (elements) a reduction may materialise before it is evaluated in chunks.
GRID_LIMIT = 1 << 26
# Set to False to force the general path (the tests check both paths agree).
USE_EINSUM = True

_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide,
           "//": np.floor_divide, "%": np.remainder}   # numpy's // and % floor, like Python
_COMPARE = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
            "==": np.equal, "!=": np.not_equal}
_REDUCE_UFUNC = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
_ERF = np.frompyfunc(math.erf, 1, 1)
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _erf(x: np.ndarray) -> np.ndarray:
    # numpy has no erf and scipy is not a dependency: libm's erf in float64, element by
    # element (exact to the last bit of float64), then rounded back to x's dtype.
    return np.asarray(_ERF(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def _one(x: np.ndarray):
    return x.dtype.type(1)


# Every function keeps its argument's dtype (f32 math stays f32). round is half-to-even
# (np.rint), like C's rint/nearbyint in the default rounding mode.
_INTRINSICS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin,
    "cos": np.cos, "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "round": np.rint,
    "rsqrt": lambda x: _one(x) / np.sqrt(x),
    "sigmoid": lambda x: _one(x) / (_one(x) + np.exp(-x)),
    "erf": _erf,
    "min": np.minimum, "max": np.maximum, "pow": np.power,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "fmod": np.fmod,
    **BITWISE,
    "requantize": multiply_by_quantized_multiplier,
}


def identity(combiner: str, dtype: str) -> np.ndarray:
    """The value of a reduction over nothing: 0, 1, or the bottom/top of the dtype."""
    dt = to_numpy(dtype)
    if combiner == "sum":
        return np.zeros((), dt)
    if combiner == "prod":
        return np.ones((), dt)
    low = combiner == "max"
    if is_float(dtype):
        return np.asarray(-np.inf if low else np.inf, dt)
    if dtype == "bool":
        return np.asarray(not low, dt)
    info = np.iinfo(dt)
    return np.asarray(info.min if low else info.max, dt)


def reduce_depth(e: te.Expr) -> int:
    """Grid dimensions that reductions inside ``e`` need at once (nesting adds, siblings reuse)."""
    if isinstance(e, te.Reduce):
        inner = len(e.axes) + reduce_depth(e.body)
        return max([inner] + [reduce_depth(ax.extent) for ax in e.axes])
    return max((reduce_depth(c) for c in te.children(e)), default=0)


def _and(mask, cond):
    """Intersection of two masks, None meaning everywhere."""
    if mask is None or cond is None:
        return cond if mask is None else mask
    return mask & cond


def _dead(mask) -> bool:
    return mask is not None and not mask.any()


def _slice(arr, dim: int, lo: int, n: int):
    """Rows ``lo .. lo+n`` of ``arr`` along ``dim``; arrays of size 1 there broadcast as is."""
    if arr is None or arr.ndim == 0 or arr.shape[dim] == 1:
        return arr
    return arr[(slice(None),) * dim + (slice(lo, lo + n),)]


def _product_factors(e: te.Expr) -> list[te.Expr]:
    if isinstance(e, te.Binary) and e.op == "*":
        return _product_factors(e.a) + _product_factors(e.b)
    return [e]


class Evaluator:
    """Evaluates the expressions of one stage; see the module docstring for the layout."""

    def __init__(self, tensors: dict, env: dict[str, int], ndim: int, where: str):
        self.tensors = tensors      # Tensor -> ndarray (inputs and earlier stages)
        self.env = env              # shape variable -> int
        self.ndim = ndim
        self.where = where          # "stage 'Y' of 'conv'", for messages
        self.axes: dict[str, Axis] = {}
        self.next_dim = 0

    def eval(self, e: te.Expr, mask=None) -> np.ndarray:
        """``e`` on the grid: a full-ndim or 0-d array of ``e.dtype``."""
        v = np.asarray(getattr(self, "_" + type(e).__name__)(e, mask))
        want = to_numpy(e.dtype)
        return v if v.dtype == want else v.astype(want)

    def _full(self, v: np.ndarray) -> np.ndarray:
        return v.reshape((1,) * self.ndim) if v.ndim == 0 else v

    # -------------------------------------------------------------- leaves and elementwise

    def _Var(self, e: te.Var, mask):
        if e.name in self.axes:
            return self.axes[e.name].values(self.ndim)
        if e.name in self.env:
            return np.asarray(self.env[e.name], np.int64)
        raise CallError(f"{self.where}: shape variable '{e.name}' has no value; it is not "
                        "determined by the arguments' shapes", hint="pass it in shape_env")

    def _Const(self, e: te.Const, mask):
        if is_int(e.dtype):     # wrap like a C conversion, rather than numpy's OverflowError
            return np.asarray(int(e.value) & 0xFFFFFFFFFFFFFFFF, np.uint64).astype(
                to_numpy(e.dtype))
        return np.asarray(e.value, to_numpy(e.dtype))

    def _Binary(self, e: te.Binary, mask):
        assert e.op != "/" or is_float(e.dtype), "'/' on integers must not reach the IR"
        return _BINARY[e.op](self.eval(e.a, mask), self.eval(e.b, mask))

    def _Unary(self, e: te.Unary, mask):
        a = self.eval(e.a, mask)
        return np.logical_not(a) if e.op == "not" else np.negative(a)

    def _Compare(self, e: te.Compare, mask):
        return _COMPARE[e.op](self.eval(e.a, mask), self.eval(e.b, mask))

    def _Logical(self, e: te.Logical, mask):
        a = self.eval(e.a, mask)
        # The right operand only matters where the left one did not decide (short-circuit).
        sub = _and(mask, a if e.op == "and" else ~a)
        b = np.zeros((), np.bool_) if _dead(sub) else self.eval(e.b, sub)
        return np.logical_and(a, b) if e.op == "and" else np.logical_or(a, b)

    def _Select(self, e: te.Select, mask):
        c = self.eval(e.cond, mask)
        if c.ndim == 0:             # uniform condition: the other side is never evaluated
            return self.eval(e.t if c else e.f, mask)
        zero = np.zeros((), to_numpy(e.dtype))
        tm, fm = _and(mask, c), _and(mask, ~c)
        t = zero if _dead(tm) else self.eval(e.t, tm)
        f = zero if _dead(fm) else self.eval(e.f, fm)
        return np.where(c, t, f)

    def _Cast(self, e: te.Cast, mask):
        return cast_array(self.eval(e.a, mask), e.dtype)     # float -> int saturates

    def _Intrinsic(self, e: te.Intrinsic, mask):
        return _INTRINSICS[e.name](*(self.eval(a, mask) for a in e.args))

    # -------------------------------------------------------------- loads

    def _Load(self, e: te.Load, mask):
        if e.tensor not in self.tensors:
            raise CallError(f"{self.where} reads '{e.tensor.name}', which is neither an input "
                            "nor an earlier stage of the function")
        arr = self.tensors[e.tensor]
        if not e.indices:
            return arr
        forms = [affine(ix, self.axes, self.env) for ix in e.indices]
        if all(f is not None for f in forms):
            extents = [1] * self.ndim
            for ax in self.axes.values():
                extents[ax.dim] = ax.extent
            view = strided_view(arr, forms, extents)
            if view is not None:
                return view
        idx = [self.eval(ix, mask).astype(np.int64, copy=False) for ix in e.indices]
        try:
            return gather(arr, idx, mask)
        except OutOfRange as err:
            raise self._oob_error(e, arr, err) from None

    def _oob_error(self, e: te.Load, arr: np.ndarray, err: OutOfRange) -> CallError:
        at = []
        for name, ax in sorted(self.axes.items(), key=lambda kv: kv[1].dim):
            p = err.pos[ax.dim] if len(err.pos) > ax.dim else 0
            at.append(f"{name}={ax.start + p}")
        subs = ", ".join(map(str, err.subscripts))
        return CallError(f"index out of bounds: {e} in {self.where} reads "
                         f"{e.tensor.name}[{subs}], but {e.tensor.name} has shape "
                         f"{tuple(arr.shape)}" + (f" (at {', '.join(at)})" if at else ""))

    # -------------------------------------------------------------- reductions

    def _Reduce(self, e: te.Reduce, mask):
        ident = identity(e.combiner, e.dtype)
        # Extents are evaluated outside the reduction; normally ints, but an extent that
        # depends on an outer axis (a triangular sum) is an array: run to its maximum and
        # treat positions past the element's own extent as absent.
        exts = [self.eval(ax.extent, mask) for ax in e.axes]
        sizes = [max(0, int(x.max())) if x.size else 0 for x in exts]
        if 0 in sizes:
            return ident
        names = [ax.var.name for ax in e.axes]
        saved = {n: self.axes.get(n) for n in names}
        first = self.next_dim
        self.next_dim += len(names)
        for k, (n, size) in enumerate(zip(names, sizes)):
            self.axes[n] = Axis(first + k, 0, size)
        try:
            limits = [(n, x) for n, x in zip(names, exts) if x.ndim > 0]
            factors = _product_factors(e.body)
            if (USE_EINSUM and e.combiner == "sum" and e.dtype != "bool" and not limits
                    and sum(not isinstance(f, te.Const) for f in factors) >= 2):
                return self._einsum(e, factors, names, mask)
            return self._grid_reduce(e, names, limits, mask)
        finally:
            self.next_dim = first
            for n, ax in saved.items():
                if ax is None:
                    del self.axes[n]
                else:
                    self.axes[n] = ax

    def _einsum(self, e: te.Reduce, factors, names: list[str], mask):
        """``sum(f1 * f2 * ...)`` as one einsum; each factor spans only its own axes."""
        dt = to_numpy(e.dtype)
        own = {self.axes[n].dim for n in names}
        operands, subs = [], []
        for f in factors:
            v = self.eval(f, mask)
            if v.ndim == 0:
                operands.append(v)
                subs.append("")
                continue
            keep = [g for g in range(self.ndim) if v.shape[g] != 1]
            operands.append(np.squeeze(v, axis=tuple(g for g in range(self.ndim)
                                                     if v.shape[g] == 1)))
            subs.append("".join(_LETTERS[g] for g in keep))
        present = set("".join(subs))
        for n in names:     # an axis no factor uses still counts its extent times
            ax = self.axes[n]
            if _LETTERS[ax.dim] not in present and ax.extent > 1:
                operands.append(np.ones(ax.extent, dt))
                subs.append(_LETTERS[ax.dim])
        out = [g for g in range(self.ndim) if _LETTERS[g] in present and g not in own]
        spec = ",".join(subs) + "->" + "".join(_LETTERS[g] for g in out)
        r = np.einsum(spec, *operands, optimize=True)
        shape = [1] * self.ndim
        for k, g in enumerate(out):
            shape[g] = r.shape[k]
        # Integer results agree with any accumulation order modulo 2**bits: cast back exactly.
        return np.asarray(r).reshape(shape).astype(dt, copy=False)

    def _grid_reduce(self, e: te.Reduce, names: list[str], limits, mask):
        """Evaluate the body on the grid of the axes it uses and reduce (chunked if large)."""
        outer = [v.name for v in te.free_vars(e) if v.name in self.axes and v.name not in names]
        size = math.prod(self.axes[n].extent for n in outer + names)
        if size > GRID_LIMIT:
            cands = [(self.axes[n].extent, n) for n in outer + names if self.axes[n].extent > 1]
            if cands:
                n_ext, var = max(cands)
                step = max(1, n_ext * GRID_LIMIT // size)
                return self._chunked(e, names, limits, mask, var, step)
        ident = identity(e.combiner, e.dtype)
        valid = None
        for n, ext in limits:
            valid = _and(valid, self.axes[n].values(self.ndim) < ext)
        live = _and(mask, valid)
        if _dead(live):     # nothing is read: the identity (or an unused value)
            return ident
        body = self._full(self.eval(e.body, live))
        if valid is not None:
            body = np.where(valid, body, ident)
        dims = tuple(self.axes[n].dim for n in names)
        if e.combiner in ("sum", "prod"):   # a body constant along an axis still counts
            shape = list(body.shape)
            for n in names:
                shape[self.axes[n].dim] = self.axes[n].extent
            body = np.broadcast_to(body, shape)
        return _REDUCE_UFUNC[e.combiner].reduce(body, axis=dims, dtype=to_numpy(e.dtype),
                                                keepdims=True)

    def _chunked(self, e: te.Reduce, names, limits, mask, var: str, step: int):
        """`_grid_reduce` over slices of axis ``var``: joined for an outer axis, combined
        with the reduction's own operator for one of its axes."""
        ax = self.axes[var]
        parts = []
        try:
            for lo in range(0, ax.extent, step):
                n = min(step, ax.extent - lo)
                self.axes[var] = Axis(ax.dim, ax.start + lo, n)
                lim = [(name, _slice(x, ax.dim, lo, n)) for name, x in limits]
                parts.append((n, self._full(np.asarray(
                    self._grid_reduce(e, names, lim, _slice(mask, ax.dim, lo, n))))))
        finally:
            self.axes[var] = ax
        if var in names:
            return functools.reduce(_REDUCE_UFUNC[e.combiner], (p for _, p in parts))
        # Chunks may differ in which other axes they span (a branch dead in one chunk).
        common = list(np.broadcast_shapes(*(p.shape[:ax.dim] + (1,) + p.shape[ax.dim + 1:]
                                            for _, p in parts)))
        joined = []
        for n, p in parts:
            common[ax.dim] = n
            joined.append(np.broadcast_to(p, common))
        return np.concatenate(joined, axis=ax.dim)
