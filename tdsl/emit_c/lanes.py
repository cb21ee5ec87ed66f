"""Index arithmetic and vector lanes for the C-family printers.

Two jobs the printers share:

- `flat_offset`: the element offset of a multi-dimensional access, so that the printers
  accept loop IR both before storage flattening (one index per dimension) and after it (one
  flat index). Row-major unless the buffer gives strides:
  ``offset == sum(index[d] * stride[d])`` with ``stride[d] == prod(shape[d+1:])``.
- `lane`: the scalar expression computing one lane of a vector expression, so that any
  vector construct a language has no vector spelling for (a gather, a select over loads, a
  math function, a compare) can be printed as a loop over lanes of scalar code. Lane ``l``
  of ``Ramp(base, stride, n)`` is ``base + stride * l``, of ``Broadcast(x, n)`` is ``x``, and
  lane ``l`` of any other node applies it to lane ``l`` of its operands; a scalar ``Select``
  evaluates only the branch it takes, so a guarded load stays guarded.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..lowering import te
from ..lowering.dtypes import INDEX, INTS
from ..lowering.loop_ir import Broadcast, Buffer, BufferLoad, Ramp, split_dtype


@dataclass(frozen=True, slots=True)
class LaneOf(te.Expr):
    """Lane ``lane`` of a vector-typed variable (``v[lane]`` in C)."""
    vector: te.Var
    lane: te.Expr
    dtype: str


def lanes_of(e: te.Expr) -> int:
    return split_dtype(e.dtype)[1]


def scalar_of(dtype: str) -> str:
    return split_dtype(dtype)[0]


def _is_const(e: te.Expr, value) -> bool:
    return isinstance(e, te.Const) and e.value == value


def add(a: te.Expr, b: te.Expr) -> te.Expr:
    if _is_const(a, 0):
        return b
    if _is_const(b, 0):
        return a
    if isinstance(a, te.Const) and isinstance(b, te.Const):
        return te.Const(a.value + b.value, a.dtype)
    return te.Binary("+", a, b, a.dtype)


def mul(a: te.Expr, b: te.Expr) -> te.Expr:
    if _is_const(a, 1):
        return b
    if _is_const(b, 1):
        return a
    if _is_const(a, 0) or _is_const(b, 0):
        return te.Const(0, INDEX)
    if isinstance(a, te.Const) and isinstance(b, te.Const):
        return te.Const(a.value * b.value, a.dtype)
    return te.Binary("*", a, b, a.dtype)


def dim_strides(buffer: Buffer) -> tuple[te.Expr, ...]:
    if buffer.strides is not None:
        return tuple(buffer.strides)
    strides, step = [], te.Const(1, INDEX)
    for extent in reversed(buffer.shape):
        strides.append(step)
        step = mul(extent, step)
    return tuple(reversed(strides))


def is_flat(buffer: Buffer, indices) -> bool:
    """One index into a buffer of another rank: the access is already flattened."""
    return len(indices) == 1 and len(buffer.shape) != 1


def flat_offset(buffer: Buffer, indices) -> te.Expr:
    """The element offset of a scalar access."""
    if is_flat(buffer, indices):
        return indices[0]
    assert len(indices) == len(buffer.shape), \
        f"{buffer.name} has rank {len(buffer.shape)} but is indexed with {len(indices)}"
    offset: te.Expr = te.Const(0, INDEX)
    for index, stride in zip(indices, dim_strides(buffer)):
        offset = add(offset, mul(index, stride))
    return offset


def contiguous_base(buffer: Buffer, indices) -> te.Expr | None:
    """For a vector access touching consecutive elements, the offset of its first lane.

    That is: every index is scalar or a broadcast except one ramp of stride 1, in a dimension
    of stride 1. Anything else (a gather, a strided ramp) is printed lane by lane instead.
    """
    strides = (te.Const(1, INDEX),) if is_flat(buffer, indices) else dim_strides(buffer)
    bases, ramps = [], 0
    for index, stride in zip(indices, strides):
        if isinstance(index, Ramp):
            if not (_is_const(index.stride, 1) and _is_const(stride, 1)) or \
                    lanes_of(index.base) > 1:
                return None
            ramps += 1
            bases.append(index.base)
        elif isinstance(index, Broadcast) and lanes_of(index.value) == 1:
            bases.append(index.value)
        elif lanes_of(index) == 1:
            bases.append(index)
        else:
            return None
    return flat_offset(buffer, tuple(bases)) if ramps == 1 else None


def lane(e: te.Expr, at: te.Expr) -> te.Expr:
    """The scalar expression for lane ``at`` of ``e`` (scalars are the same in every lane)."""
    if lanes_of(e) == 1:
        return e
    match e:
        case Ramp(base, stride):
            return add(lane(base, at), mul(lane(stride, at), at))
        case Broadcast(value):
            return lane(value, at)
        case te.Var():
            return LaneOf(e, at, scalar_of(e.dtype))
        case BufferLoad(buffer, indices):
            return BufferLoad(buffer, tuple(lane(i, at) for i in indices), scalar_of(e.dtype))
        case te.Intrinsic("dot4_u8i8" | "dot2_i16", (acc, a, b)):
            # lane j: acc[j] + sum[k] a[k] b[G j + k], G the lanes of a (4, 2)
            total = lane(acc, at)
            for k in range(lanes_of(a)):
                kk = te.Const(k, INDEX)
                total = te.Binary("+", total, te.Binary(
                    "*", te.Cast(lane(a, kk), "i32"),
                    te.Cast(lane(b, add(mul(at, te.Const(lanes_of(a), INDEX)), kk)), "i32"),
                    "i32"), "i32")
            return total
    changes = {"dtype": scalar_of(e.dtype)}
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, te.Expr):
            changes[f.name] = lane(value, at)
        elif isinstance(value, tuple) and all(isinstance(x, te.Expr) for x in value):
            changes[f.name] = tuple(lane(x, at) for x in value)
    return dataclasses.replace(e, **changes)


def simd_expressible(e: te.Expr, has_vector_type) -> bool:
    """Whether a vector expression prints as whole-vector operations (no lane loop).

    The set is what GNU vector types do natively and what a register tile needs: contiguous
    loads, broadcasts, ``+ - *`` (and ``/`` on floats), negation, float and integer
    ``min``/``max`` (a compare-and-blend helper), f32 ``exp`` and ``round``, float
    ``sqrt``/``rsqrt``, the dot products ``dot4_u8i8`` and ``dot2_i16`` and numeric casts
    (vector helpers, ``__builtin_convertvector``), selects with one condition for all lanes
    (a C conditional between two vectors), and vector variables.
    ``has_vector_type(dtype)`` says whether the language spells that vector type.
    """
    if lanes_of(e) == 1:
        return True
    if not has_vector_type(e.dtype):
        return False
    scalar = scalar_of(e.dtype)
    match e:
        case te.Var():
            return True
        case Broadcast(value):
            return lanes_of(value) == 1
        case BufferLoad(buffer, indices):
            return contiguous_base(buffer, indices) is not None
        case te.Binary(op, a, b):
            ok_op = op in ("+", "-", "*") or (op == "/" and scalar in ("f32", "f64"))
            return ok_op and simd_expressible(a, has_vector_type) and \
                simd_expressible(b, has_vector_type)
        case te.Unary("-", a):
            return simd_expressible(a, has_vector_type)
        case te.Intrinsic("min" | "max", (a, b)) if scalar in ("f32", "f64") + INTS:
            return simd_expressible(a, has_vector_type) and \
                simd_expressible(b, has_vector_type)
        case te.Intrinsic("exp", (a,)) if scalar == "f32":
            return simd_expressible(a, has_vector_type)
        case te.Intrinsic("sqrt" | "rsqrt", (a,)) if scalar in ("f32", "f64"):
            return simd_expressible(a, has_vector_type)
        case te.Select(cond, t, f) if lanes_of(cond) == 1:
            return simd_expressible(t, has_vector_type) and \
                simd_expressible(f, has_vector_type)
        case te.Cast(a) if has_vector_type(a.dtype):   # a conversion, or a helper's
            return simd_expressible(a, has_vector_type)
        case te.Intrinsic("round", (a,)) if scalar == "f32":
            return simd_expressible(a, has_vector_type)
        case te.Intrinsic("dot4_u8i8" | "dot2_i16", args):   # a helper of three vectors
            return all(simd_expressible(a, has_vector_type) for a in args)
    return False
