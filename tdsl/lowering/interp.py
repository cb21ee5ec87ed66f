"""Run loop IR in Python, element by element: the living definition lowering must preserve.

Slow on purpose (small sizes only) and strict:

- every access is checked: an index outside its buffer (per dimension before flattening,
  against the allocation after it) raises `OutOfBounds`, which is how tests catch a lowering
  that forgot a guard;
- buffers are flat numpy arrays; a fresh allocation (and an output not passed in) is filled
  with NaN / a junk integer, so reading an element nobody wrote shows up in the results;
- values keep their IR dtype: f32 arithmetic rounds to f32, integers wrap, index arithmetic
  is Python integers; ``//`` and ``%`` floor, as in te;
- ``select``, ``and``, ``or`` and conditions are lazy on scalars (a guarded load is never
  made); vector values (``ramp``, ``x16(...)``) are numpy arrays of lanes, and a load's
  ``predicate`` masks its lanes;
- a tensorized call runs the intrinsic's own computation (lowered naively and interpreted)
  on strided views of the buffers at the call's pointers.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import CallError
from . import sizes, te
from .bitwise import FUNCTIONS as BITWISE
from .dtypes import INDEX, cast_array, from_numpy, is_float, is_int, to_numpy
from .loop_ir import (AddressOf, Allocate, Barrier, Broadcast, BufferLoad, Call, Evaluate, For,
                      If, LetStmt, LoweredFunc, Prefetch, Ramp, ReadFault, Seq, Store,
                      split_dtype)
from .loop_printer import format_buffer
from .lower import lower
from .quantize import multiply_by_quantized_multiplier
from .passes.flatten import alloc_size, strides_of
from .read_regions import check_reads
from .reference.stage import identity
from .reference.views import strided
from .schedule import Schedule


class OutOfBounds(IndexError):
    """An access outside its buffer: a lowering bug the interpreter refuses to hide."""


_ERF = np.frompyfunc(math.erf, 1, 1)


def _tree(op):
    """reduce_lanes.py's horizontal reductions: neighbours first, as the emitters' helper."""
    def reduce(v):
        while len(v) > 1:
            v = op(v[0::2], v[1::2])
        return v[0]
    return reduce


_MATH = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin,
    "cos": np.cos, "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "round": np.rint,
    "rsqrt": lambda x: 1 / np.sqrt(x), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": lambda x: np.asarray(_ERF(np.asarray(x, np.float64)), np.float64),
    "min": np.minimum, "max": np.maximum, "pow": np.power,
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "fmod": np.fmod,
    **BITWISE,
    "requantize": multiply_by_quantized_multiplier,
    # vectorize.py's dot products: lane j adds the G products a[k] * b[G j + k], G = 4 for
    # u8 x i8, 2 for i16 x i16
    "dot4_u8i8": lambda acc, a, b: acc + b.astype(np.int32).reshape(-1, 4) @ a.astype(np.int32),
    "dot2_i16": lambda acc, a, b: acc + b.astype(np.int32).reshape(-1, 2) @ a.astype(np.int32),
    "reduce_add": _tree(np.add), "reduce_max": _tree(np.maximum), "reduce_min": _tree(np.minimum),
}
_COMBINE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _junk(dtype: str):
    if is_float(dtype):
        return np.nan
    return True if dtype == "bool" else 0x5A


def run(func: LoweredFunc, arrays, shapes: dict[str, int] | None = None
        ) -> tuple[np.ndarray, ...]:
    """Run ``func`` on its input arrays (or inputs and outputs); return the outputs."""
    with np.errstate(all="ignore"):
        return _Interp(func, shapes).call(list(arrays))


class _Interp:
    def __init__(self, func: LoweredFunc, shapes):
        self.func = func
        given = {**func.attrs.get("fixed_sizes", {}), **(shapes or {})}
        self.env: dict[str, object] = {k: int(v) for k, v in given.items()}
        self.mem: dict = {}
        self.layout: dict = {}                 # buffer -> (shape, strides, size)

    # ------------------------------------------------------------------------ arguments

    def call(self, arrays: list) -> tuple:
        f = self.func
        if len(arrays) not in (f.num_inputs, len(f.params)):
            raise CallError(f"{f.name} takes {f.num_inputs} inputs, got {len(arrays)} arrays")
        for buf, arr in zip(f.params, arrays):
            arr = np.asarray(arr)
            if arr.ndim != len(buf.shape):
                raise CallError(f"{f.name}: {buf.name} must have rank {len(buf.shape)}, "
                                f"got shape {arr.shape}")
            if from_numpy(arr.dtype) != buf.dtype:
                raise CallError(f"{f.name}: {buf.name} must be {buf.dtype}, got {arr.dtype}")
        inputs = f.params[:f.num_inputs]
        self.env = sizes.bind([(sizes.argument(b.name, i), b.shape, format_buffer(b))
                               for i, b in enumerate(inputs)],
                              [np.shape(a) for a in arrays[:f.num_inputs]], self.env, "given",
                              f.shape_vars, f.name)
        sizes.check_shapes(f.attrs.get("stage_shapes", ()), self.env)
        check_reads(f.attrs.get("reads", ()), self.env)
        outs = []
        for k, buf in enumerate(f.params):
            shape, _, size = self.describe(buf)
            if k < len(arrays):
                arr = np.asarray(arrays[k])
                if arr.shape != shape:
                    raise CallError(f"{f.name}: {buf.name} must have shape {shape}, "
                                    f"got {arr.shape}")
                flat = np.ascontiguousarray(arr).reshape(-1)
                if k >= f.num_inputs:
                    flat = arr.reshape(-1)           # write into the caller's output
            else:
                flat = np.full(size, _junk(buf.dtype), to_numpy(buf.dtype))
            self.mem[buf] = flat
            if k >= f.num_inputs:
                outs.append(flat.reshape(shape))
        self.stmt(f.body)
        return tuple(outs)

    def describe(self, buf):
        if buf not in self.layout:
            shape = tuple(self.index(s) for s in buf.shape)
            strides = tuple(self.index(s) for s in strides_of(buf))
            self.layout[buf] = (shape, strides, self.index(alloc_size(buf)))
        return self.layout[buf]

    def index(self, e: te.Expr) -> int:
        missing = [v.name for v in te.free_vars(e) if v.name not in self.env]
        if missing:
            raise CallError(f"{self.func.name}: shape variable {missing[0]} is not determined "
                            "by the arguments' shapes; pass it in shapes=")
        return int(self.expr(e))

    # ------------------------------------------------------------------------ statements

    def stmt(self, s) -> None:
        match s:
            case Seq(stmts):
                for x in stmts:
                    self.stmt(x)
            case For(var, mn, ext, _, body, _):
                lo = self.index(mn)
                saved = self.env.get(var.name)
                for i in range(lo, lo + self.index(ext)):
                    self.env[var.name] = i
                    self.stmt(body)
                self.env[var.name] = saved
            case If(cond, then, orelse):
                if bool(self.expr(cond)):
                    self.stmt(then)
                elif orelse is not None:
                    self.stmt(orelse)
            case Store(buf, indices, value, pred):
                mask = None if pred is None else np.asarray(self.expr(pred))
                if mask is not None and mask.ndim == 0 and not mask:
                    return
                off = self.offset(buf, indices, mask if mask is not None and mask.ndim else None)
                val = self.expr(value)
                arr = self.mem[buf]
                if mask is not None and mask.ndim:
                    arr[off[mask]] = np.asarray(val)[mask]
                else:
                    arr[off] = val
            case LetStmt(var, value, body):
                saved = self.env.get(var.name)
                self.env[var.name] = self.expr(value)
                self.stmt(body)
                self.env[var.name] = saved
            case Allocate(buf, body):
                self.layout.pop(buf, None)
                _, _, size = self.describe(buf)
                saved = self.mem.get(buf)
                self.mem[buf] = np.full(size, _junk(buf.dtype), to_numpy(buf.dtype))
                self.stmt(body)
                self.mem[buf] = saved
            case Evaluate(value):
                self.expr(value)
            case Barrier() | Prefetch():
                pass
            case _:
                raise AssertionError(f"unknown statement {type(s).__name__}")

    def offset(self, buf, indices, mask=None):
        """Flat element offset(s) of an access, checked against the buffer."""
        assert buf in self.mem and self.mem[buf] is not None, f"{buf.name} is not allocated"
        shape, strides, size = self.describe(buf)
        idx = [np.asarray(self.expr(i), np.int64) for i in indices]
        if len(idx) == 1 and len(shape) != 1:
            checks = [(idx[0], size)]                 # flattened access
            off = idx[0]
        else:
            checks = list(zip(idx, shape))
            off = sum((i * s for i, s in zip(idx, strides)), np.int64(0))
        for i, n in checks:
            live = i if mask is None else i[mask]
            if live.size and (live.min() < 0 or live.max() >= n):
                raise OutOfBounds(f"access {buf.name}[{', '.join(str(x) for x in idx)}] is "
                                  f"outside shape {shape} (allocated {size})")
        return int(off) if np.ndim(off) == 0 else off

    # ------------------------------------------------------------------------ expressions

    def expr(self, e: te.Expr):
        match e:
            case te.Var(name):
                return self.env[name]
            case te.Const(v, dt):
                if dt == INDEX:
                    return int(v)
                if is_int(dt):      # wraps, as the reference and C do (a folded i32 2**31)
                    return np.uint64(int(v) & 0xFFFFFFFFFFFFFFFF).astype(to_numpy(dt))
                return to_numpy(dt).type(v)
            case te.Binary(op, a, b, dt):
                return _binary(op, self.expr(a), self.expr(b), dt)
            case te.Unary(op, a, dt):
                x = self.expr(a)
                return np.logical_not(x) if op == "not" else _cast(-np.asarray(x), dt)
            case te.Compare(op, a, b):
                x, y = self.expr(a), self.expr(b)
                return {"<": np.less, "<=": np.less_equal, ">": np.greater,
                        ">=": np.greater_equal, "==": np.equal, "!=": np.not_equal}[op](x, y)
            case te.Logical(op, a, b):
                x = self.expr(a)
                if np.ndim(x) == 0 and bool(x) == (op == "or"):
                    return np.bool_(op == "or")       # short-circuit, like C
                y = self.expr(b)
                return np.logical_and(x, y) if op == "and" else np.logical_or(x, y)
            case te.Select(c, t, f, dt):
                cond = self.expr(c)
                if np.ndim(cond) == 0:
                    return self.expr(t if cond else f)
                return _cast(np.where(cond, self.expr(t), self.expr(f)), dt)
            case te.Cast(a, dt):
                return _cast(self.expr(a), dt)
            case te.Intrinsic(name, args, dt):
                return _cast(_MATH[name](*[self.expr(x) for x in args]), dt)
            case BufferLoad(buf, indices, dt, pred):
                mask = None if pred is None else np.asarray(self.expr(pred))
                if mask is not None and mask.ndim == 0 and not mask:
                    return _cast(np.zeros(split_dtype(dt)[1]) if "x" in dt else 0, dt)
                vec_mask = mask if mask is not None and mask.ndim else None
                off = self.offset(buf, indices, vec_mask)
                arr = self.mem[buf]
                if vec_mask is not None:
                    out = np.zeros(len(off), arr.dtype)
                    out[vec_mask] = arr[off[vec_mask]]
                    return out
                return arr[off]
            case ReadFault(fault):
                raise CallError(self.func.attrs["read_faults"][fault])
            case Ramp(base, stride, lanes):
                return self.index(base) + self.index(stride) * np.arange(lanes, dtype=np.int64)
            case Broadcast(value, lanes, dt):
                return _cast(np.full(lanes, self.expr(value)), dt)
            case AddressOf(buf, index):
                return (buf, self.index(index))
            case Call(name, args):
                return self.call_intrinsic(name, [self.expr(a) for a in args])
        raise AssertionError(f"unknown expression {type(e).__name__}")

    def call_intrinsic(self, name: str, args: list) -> None:
        intrinsics = self.func.attrs.get("tensor_intrinsics", {})
        for other in intrinsics.values():
            # the sums of a kernel with registers of its own live in memory here: init sets
            # them to the identity, finish has nothing to do
            out = other.compute.outputs[0]
            if name == other.init:
                (view,) = self._views(name, (out,), args)
                view[...] = identity(out.op.body.combiner, out.dtype)
                return
            if name == other.finish:
                return
        intrin = intrinsics.get(name)
        assert intrin is not None, f"call of unknown function {name}"
        fn = intrin.compute
        views = self._views(name, (*fn.inputs, *fn.outputs), args)
        result = run(_lowered(intrin), [np.array(v) for v in views[:-1]])[0]
        body = fn.outputs[0].op.body
        if isinstance(body, te.Reduce):
            result = _COMBINE[body.combiner](views[-1], result)
        views[-1][...] = result

    def _views(self, name: str, tensors, args: list) -> list:
        """The arrays a micro-kernel call's arguments (a pointer, then a stride per
        dimension, for each of ``tensors``) point at."""
        views, k = [], 0
        for t in tensors:
            (buf, off), strides = args[k], [int(s) for s in args[k + 1:k + 1 + t.ndim]]
            k += 1 + t.ndim
            shape = [int(te.substitute(s, {}).value) for s in t.shape]
            arr = self.mem[buf]
            last = off + sum((n - 1) * s for n, s in zip(shape, strides))
            if off < 0 or last >= arr.size:
                raise OutOfBounds(f"{name}: view of {buf.name} at {off} with strides "
                                  f"{strides} reaches {last}, outside {arr.size} elements")
            views.append(strided(arr[off:], shape, [s * arr.itemsize for s in strides]))
        return views


_LOWERED: dict = {}


def _lowered(intrin) -> LoweredFunc:
    if intrin not in _LOWERED:
        _LOWERED[intrin] = lower(intrin.compute, Schedule(intrin.compute))
    return _LOWERED[intrin]


def _cast(x, dtype: str):
    base, lanes = split_dtype(dtype)
    if base == INDEX and lanes == 1 and np.ndim(x) == 0:
        if isinstance(x, (float, np.floating, np.unsignedinteger)):   # saturate / wrap
            return int(cast_array(x, base))
        return int(x)
    if np.ndim(x) == 0:
        return cast_array(x, base)[()]
    return cast_array(x, base)      # float -> int saturates


def _binary(op: str, a, b, dtype: str):
    base = split_dtype(dtype)[0]
    if base == INDEX and isinstance(a, int) and isinstance(b, int):
        match op:                    # Python integers: exact, and // % floor like te
            case "+": return a + b
            case "-": return a - b
            case "*": return a * b
            case "//": return a // b
            case "%": return a % b
    fn = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide,
          "//": np.floor_divide, "%": np.remainder}[op]
    if op == "/" and not is_float(base):
        raise AssertionError("'/' on integers must not reach the loop IR")
    return _cast(fn(a, b), dtype)
