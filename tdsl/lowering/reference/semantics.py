"""The reference semantics of the tensor-expression IR, evaluated with numpy.

`evaluate(fn, arrays)` is the oracle every backend is tested against, so it favours being
exactly right, then fast:

- arguments are checked as a compiled kernel's entry would check them, and every mistake a
  caller can make is a `CallError` naming the parameter (never an IndexError or KeyError);
- every value has the dtype the IR gives it: f32 math stays f32, integer arithmetic wraps
  modulo 2**bits (numpy's behaviour), ``//`` and ``%`` floor, index arithmetic is int64;
- a read outside a tensor is a `CallError` (compiled kernels raise the same, see
  `read_regions`), except in the untaken branch of a ``select`` (and
  the short-circuited operand of ``and``/``or``), which has no effect;
- evaluation is vectorised: see `stage` for the grid layout, the einsum path for
  sums of products, and chunking; `views` for strided views and checked gathers.
"""
from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np

from ...errors import CallError, not_an_array, wrong_dtype
from .. import sizes, te
from ..dtypes import canonical_bools, is_float, is_int, to_numpy
from .stage import Evaluator, reduce_depth
from .views import Axis

__all__ = ["evaluate", "bind_arguments"]


def evaluate(fn: te.Function, arrays: Sequence, shape_env: dict[str, int] | None = None
             ) -> tuple[np.ndarray, ...]:
    """Run ``fn`` on ``arrays`` (one per input, in order) and return its outputs.

    Rank-0 inputs take Python numbers or 0-d arrays; other inputs take numpy arrays of exactly
    the parameter's dtype. ``shape_env`` may fix shape variables that the arguments' shapes do
    not determine. Raises `CallError` for bad arguments and for an out-of-bounds
    read. The outputs are new arrays (never views of the arguments).
    """
    # Overflow, division by zero and NaN are the IR's semantics here, not mistakes to warn
    # about (and the untaken side of a select computes garbage by design).
    with np.errstate(all="ignore"):
        values, env = bind_arguments(fn, arrays, shape_env)
        tensors: dict[te.Tensor, np.ndarray] = dict(zip(fn.inputs, values))
        for t in fn.stages():
            tensors[t] = _eval_stage(fn, t, tensors, env)
        outs = []
        for t in fn.outputs:
            if t not in tensors:
                raise CallError(f"output '{t.name}' of '{fn.name}' is neither an input nor "
                                "a stage of the function")
            if t.is_placeholder:        # an input returned as it is: a copy, never a view
                a = tensors[t]
                copy = sizes.empty(a.shape, a.dtype, f"output '{t.name}' of '{fn.name}'")
                copy[...] = a
                outs.append(copy)
            else:
                outs.append(tensors[t])
        return tuple(outs)


def _eval_stage(fn: te.Function, t: te.Tensor, tensors, env: dict[str, int]) -> np.ndarray:
    where = f"stage '{t.name}' of '{fn.name}'"
    comp = t.op
    shape = tuple(_size(s, env, f"{where}: dimension {d}") for d, s in enumerate(t.shape))
    out = sizes.empty(shape, to_numpy(t.dtype), where)
    if out.size == 0:
        return out
    try:
        return _fill_stage(comp, out, tensors, env, where)
    except MemoryError as e:        # the stage fits; numpy's work arrays for it did not
        raise CallError(f"{where} (shape {shape}, {out.nbytes} bytes) could not be "
                        f"evaluated: {e}") from None


def _fill_stage(comp: te.Compute, out: np.ndarray, tensors, env, where: str) -> np.ndarray:
    shape = out.shape
    n = len(comp.axes)
    assert n == len(shape), f"{where}: {n} axes for a {len(shape)}-d tensor"
    ev = Evaluator(tensors, env, n + reduce_depth(comp.body), where)
    for d, ax in enumerate(comp.axes):
        ev.axes[ax.var.name] = Axis(d, 0, shape[d])
    ev.next_dim = n
    v = ev.eval(comp.body)
    if v.ndim:
        # Reductions left size-1 dimensions behind the data axes; drop them (a view).
        assert all(s == 1 for s in v.shape[n:]), f"{where}: reduction left {v.shape}"
        v = v.reshape(v.shape[:n])
    out[...] = v     # broadcasts axes the body does not use; converts if dtypes differ
    return out


def _size(e: te.Expr, env: dict[str, int], what: str) -> int:
    return sizes.value(e, env, what)


# ---------------------------------------------------------------------------- arguments

def _type_of(t: te.Tensor) -> str:
    if not t.shape:
        return t.dtype
    return f"{t.dtype}[{', '.join(str(s) for s in t.shape)}]"


def _convert(value, t: te.Tensor, arg: str) -> np.ndarray:
    """One argument as an ndarray of the parameter's dtype and rank, or a CallError."""
    want = to_numpy(t.dtype)
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.ndim != t.ndim:
            what = "a scalar" if t.ndim == 0 else f"a {t.ndim}-d array"
            raise CallError(f"{arg}: expected {what} ({_type_of(t)}), got an array of shape "
                            f"{arr.shape}")
        if arr.dtype != want:
            raise wrong_dtype(arg, t.name, arr.dtype, want, _type_of(t))
        return canonical_bools(arr)
    if t.ndim:
        raise not_an_array(arg, value, want, _type_of(t))
    # A Python scalar for a scalar parameter: converted, but never silently changed.
    ok = (isinstance(value, bool) if t.dtype == "bool" else
          isinstance(value, numbers.Integral) if is_int(t.dtype) else
          isinstance(value, numbers.Real) and is_float(t.dtype))
    if not ok:
        raise CallError(f"{arg}: expected a {t.dtype} scalar, got {value!r}")
    if is_int(t.dtype):
        info = np.iinfo(want)
        if not info.min <= int(value) <= info.max:
            raise CallError(f"{arg}: {value} does not fit in {t.dtype} "
                            f"[{info.min}, {info.max}]")
    return np.asarray(value, want)


def bind_arguments(fn: te.Function, arrays: Sequence, shape_env: dict[str, int] | None = None
                   ) -> tuple[list[np.ndarray], dict[str, int]]:
    """Check the arguments against ``fn.inputs`` and bind the shape variables.

    A dimension that is a plain variable binds it (the first argument to mention it wins and
    the rest must agree). A dimension that is an expression is checked once its variables are
    bound; if exactly one of them is unbound and the expression is affine in it (``H + 2``,
    ``C1 + C2``, ``2 * N``), that variable is solved for. Returns the arrays and the bindings.
    """
    names = ", ".join(t.name for t in fn.inputs)
    if isinstance(arrays, (np.ndarray, str)) or not isinstance(arrays, Sequence):
        raise CallError(f"'{fn.name}' takes a sequence of {len(fn.inputs)} argument(s) "
                        f"({names}), got {type(arrays).__name__}")
    if len(arrays) != len(fn.inputs):
        raise CallError(f"'{fn.name}' takes {len(fn.inputs)} argument(s) ({names}) but "
                        f"{len(arrays)} were given")
    args = [sizes.argument(t.name, i) for i, t in enumerate(fn.inputs)]
    values = [_convert(v, t, a) for v, t, a in zip(arrays, fn.inputs, args)]

    env = sizes.bind([(a, t.shape, _type_of(t)) for a, t in zip(args, fn.inputs)],
                     [v.shape for v in values], sizes.check_given(shape_env or {}, "shape_env"),
                     "shape_env", fn.shape_vars, fn.name)
    return values, env
