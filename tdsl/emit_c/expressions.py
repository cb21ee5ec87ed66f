"""Expressions of the loop IR as C-family text, with the fewest parentheses C needs.

Each ``visit_<Node>`` returns ``(text, precedence)``; `CExpressionPrinter.expr` puts a
child in parentheses only when it binds looser than its place requires. Binary operators
are left-associative, so the right operand of ``-`` at equal precedence keeps them:
``a - (b - c)``, ``(a + b) * c``, ``a / (b * c)``. Float operations are never reassociated.

Semantics kept from the tensor-expression IR: ``//`` and ``%`` floor (see `helpers`);
integer ``/`` means ``//``; narrow integer results are cast back to their type, since C
computes ``i8 + i8`` in ``int`` and numpy wraps; a ``Select`` evaluates only the branch
it takes; a float cast to an integer type saturates and takes NaN to 0 (C leaves it
undefined outside the range), while integer sources keep the plain C cast.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import BuildError
from ..lowering import te
from ..lowering.dtypes import (MINIFLOATS, cast_array, is_float, is_int, is_unsigned, to_c,
                               to_numpy)
from ..lowering.loop_ir import Broadcast, Buffer, BufferLoad, Ramp, ReadFault, split_dtype
from .helpers import Helpers, element_size
from .lanes import LaneOf, contiguous_base, flat_offset, lanes_of
from .names import C_KEYWORDS, LIBRARY_NAMES, Namer

# C precedence, higher binds tighter (pycparser's precedence_map).
PRECEDENCE = {"||": 4, "&&": 5, "==": 9, "!=": 9, "<": 10, "<=": 10, ">": 10, ">=": 10,
              "+": 12, "-": 12, "*": 13, "/": 13, "%": 13}
TERNARY, MULTIPLICATIVE, UNARY, POSTFIX, ATOM = 3, 13, 14, 15, 16
C_OPS = {"and": "&&", "or": "||"}
# What a generated function returns: 0, STATUS_NO_MEMORY when a workspace allocation failed,
# or FIRST_READ_FAULT + k when the gather attrs["read_faults"][k] read outside its buffer.
STATUS_NO_MEMORY = 1
FIRST_READ_FAULT = 2
NARROW_INTS = ("i8", "i16", "u8", "u16")


def _whole(e) -> bool:
    """Whether every value of a float expression is a whole number, an infinity or NaN: a
    round, floor or ceil, an integer converted, a whole constant, and their sums,
    differences and products (each rounds to a whole number: every float from 2**24 up is
    one, and every whole number below it a float)."""
    if isinstance(e, Broadcast):
        return _whole(e.value)
    if isinstance(e, te.Intrinsic):
        return e.name in ("round", "floor", "ceil")
    if isinstance(e, te.Const):
        return isinstance(e.value, (int, float)) and math.isfinite(e.value) and \
            float(e.value).is_integer()
    if isinstance(e, te.Cast):
        return is_int(split_dtype(e.a.dtype)[0])
    if isinstance(e, te.Binary):
        return e.op in ("+", "-", "*") and _whole(e.a) and _whole(e.b)
    if isinstance(e, te.Unary):
        return e.op == "-" and _whole(e.a)
    return False


class CExpressionPrinter:
    """Expression half of `CFamilyPrinter`: the hooks a language overrides for expressions,
    and one visit method per expression node."""
    language = "C"
    helper_qualifier = "static inline"
    native_math = False        # True: exp/erf are the language's own, not tdsl's helpers
    reserved = C_KEYWORDS | LIBRARY_NAMES

    def __init__(self, func_name: str):
        self.func_name = func_name
        self.helpers = Helpers(self.helper_qualifier,
                               self.math_function if self.native_math else None)
        self.namer = Namer(self.reserved)
        self.nonneg: set[te.Var] = set()       # variables known to be >= 0
        self.by_value: set[int] = set()        # ids of rank-0 buffers passed by value
        self.half_params: set[int] = set()     # ids of f16 parameters, passed as uint16_t

    # ------------------------------------------------------------ hooks
    def vector_type(self, dtype: str) -> str | None:
        """The language's type for a vector dtype, or None to print it lane by lane."""
        return None

    def vector_load(self, dtype: str, address: str) -> str:
        raise BuildError(f"the {self.language} backend has no vector loads")

    def vector_store(self, dtype: str, address: str, value: str, buffer=None) -> str:
        """``buffer``: the `Buffer` stored into (a printer may store some past the caches)."""
        raise BuildError(f"the {self.language} backend has no vector stores")

    def broadcast(self, dtype: str, value: str) -> str:
        raise BuildError(f"the {self.language} backend has no vector broadcast")

    def math_function(self, name: str, dtype: str) -> str:
        """C99 spells the f32 variants with an ``f`` suffix; ``round`` is ``rint`` because
        numpy rounds half to even (``roundf`` rounds half away from zero)."""
        base = {"abs": "fabs", "round": "rint"}.get(name, name)
        return base + ("f" if dtype == "f32" else "")

    # ------------------------------------------------------------ entry point
    def expr(self, e: te.Expr, min_prec: int = 0) -> str:
        """``e`` as C text, parenthesized if it binds looser than ``min_prec``."""
        text, prec = self._dispatch(e)(e)
        return f"({text})" if prec < min_prec else text

    def _dispatch(self, node):
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            raise BuildError(f"the {self.language} backend cannot print "
                             f"{type(node).__name__} nodes",
                             hint="tensor-level nodes (Load, Reduce) must be lowered first")
        return method

    # ------------------------------------------------------------ visitors
    def visit_Var(self, e: te.Var):
        name = self.namer.lookup(e)
        if name is None:
            raise BuildError(f"variable {e.name} is used in {self.func_name} but never bound",
                             hint="free sizes must be listed in the function's shape_vars")
        return name, ATOM

    def visit_LaneOf(self, e: LaneOf):
        return f"{self.expr(e.vector, POSTFIX)}[{self.expr(e.lane)}]", POSTFIX

    def visit_Const(self, e: te.Const):
        return c_literal(e.value, e.dtype)

    def visit_Binary(self, e: te.Binary):
        scalar, lanes = split_dtype(e.dtype)
        if e.op in ("//", "%") or (e.op == "/" and not is_float(scalar)):
            return self.division(e, scalar)
        prec = PRECEDENCE[e.op]
        left = self.expr(e.a, prec)
        if scalar == "i64" and lanes == 1 and _constant_only(e.a) and _constant_only(e.b):
            left = f"(int64_t){self.expr(e.a, UNARY)}"    # int literals would multiply in int
        if scalar == "u16" and e.op == "*" and lanes == 1:   # int promotion: 65535 * 65535
            left = f"(uint32_t){self.expr(e.a, UNARY)}"
        return self._wrap(f"{left} {e.op} {self.expr(e.b, prec + 1)}", prec, e.dtype)

    def division(self, e: te.Binary, scalar: str):
        """Floor ``//`` and ``%``; the plain C operators where they agree, which is for a
        non-negative dividend and a positive constant divisor."""
        op = "%" if e.op == "%" else "/"
        if not is_float(scalar) and self.is_nonneg(e.a) and \
                isinstance(e.b, te.Const) and e.b.value > 0:
            text = f"{self.expr(e.a, MULTIPLICATIVE)} {op} {self.expr(e.b, UNARY)}"
            return text, MULTIPLICATIVE
        helper = self.helpers.floor_div(scalar, "mod" if op == "%" else "div")
        text = f"{helper}({self.expr(e.a)}, {self.expr(e.b)})"
        if scalar in ("f32", "f64", "i64", "u32", "u64"):
            return text, POSTFIX
        return f"({to_c(scalar)}){text}", UNARY     # the i64 result wraps into the type

    def visit_Unary(self, e: te.Unary):
        if e.op == "not":
            return f"!{self.expr(e.a, UNARY)}", UNARY
        operand = self.expr(e.a, UNARY)
        if operand.startswith("-"):
            operand = f"({operand})"        # "-(-x)", never "--x"
        return self._wrap(f"-{operand}", UNARY, e.dtype)

    def visit_Compare(self, e: te.Compare):
        prec = PRECEDENCE[e.op]
        return f"{self.expr(e.a, prec)} {e.op} {self.expr(e.b, prec + 1)}", prec

    def visit_Logical(self, e: te.Logical):
        op = C_OPS[e.op]
        prec = PRECEDENCE[op]
        return f"{self.expr(e.a, prec)} {op} {self.expr(e.b, prec + 1)}", prec

    def visit_Select(self, e: te.Select):
        # a vector select prints lane by lane, unless its condition is one for every lane
        assert lanes_of(e) == 1 or lanes_of(e.cond) == 1, "vector selects print lane by lane"
        return (f"{self.expr(e.cond, TERNARY + 1)} ? {self.expr(e.t)} : "
                f"{self.expr(e.f, TERNARY)}"), TERNARY

    def visit_Cast(self, e: te.Cast):
        if e.a.dtype == e.dtype:
            return self._dispatch(e.a)(e.a)
        if lanes_of(e) > 1:                     # GNU vectors (lanes.simd_expressible)
            src, dst = split_dtype(e.a.dtype)[0], split_dtype(e.dtype)[0]
            if dst == "f32" and isinstance(e.a, te.Cast) and is_int(src) and \
                    element_size(src) <= 2 and e.a.a.dtype == e.dtype:
                # f32(u8(x)): clamped and truncated in floats (helpers._THROUGH_INT_VECTOR),
                # x a whole number already (a requantize's round) clamped only
                helper = self.helpers.through_int_vector(e.dtype, src, _whole(e.a.a))
                return f"{helper}({self.expr(e.a.a)})", POSTFIX
            if is_float(src) and is_int(dst):   # saturating, NaN -> 0, as the scalar one
                return f"{self.helpers.to_int_sat_vector(e.a.dtype, e.dtype)}" \
                       f"({self.expr(e.a)})", POSTFIX
            value = self.expr(e.a)
            wide = {"f32": "i32", "f64": "i64", "i32": "i32", "u32": "i32", "i64": "i64",
                    "u64": "i64"}.get(dst) if is_int(src) else None
            if wide and element_size(src) < element_size(wide):
                # through the signed integers of the result's width (vpmovzxbd, then
                # vcvtdq2ps for a float): gcc 12 converts u8 -> f32 and i8 -> i32 vectors
                # lane by lane (a shift and an insert per lane: an int8 classifier's
                # widening of its weights ran 10x slow)
                lanes = lanes_of(e)
                self.vector_type(f"{wide}x{lanes}")
                value = f"{self.helpers.widen_vector(e.a.dtype, f'{wide}x{lanes}')}({value})"
            return f"__builtin_convertvector({value}, {self.vector_type(e.dtype)})", POSTFIX
        if e.dtype in MINIFLOATS:               # the bits of the nearest (helpers)
            return f"{self.helpers.to_minifloat(e.dtype)}({self.expr(e.a)})", POSTFIX
        if e.a.dtype in MINIFLOATS:             # exactly an f32, then f32's cast rules
            text = f"{self.helpers.from_minifloat(e.a.dtype)}({self.expr(e.a)})"
            if e.dtype == "f32":
                return text, POSTFIX
            if is_int(e.dtype):
                return f"{self.helpers.to_int_sat('f32', e.dtype)}({text})", POSTFIX
            return f"({to_c(e.dtype)}){text}", UNARY
        if is_float(e.a.dtype) and is_int(e.dtype):       # saturates, NaN -> 0 (helpers)
            if isinstance(e.a, te.Const):
                value = int(cast_array(to_numpy(e.a.dtype).type(e.a.value), e.dtype))
                return c_literal(value, e.dtype)
            return f"{self.helpers.to_int_sat(e.a.dtype, e.dtype)}({self.expr(e.a)})", POSTFIX
        return f"({to_c(e.dtype)}){self.expr(e.a, UNARY)}", UNARY

    def visit_Intrinsic(self, e: te.Intrinsic):
        dtype, name = e.dtype, e.name
        args = [self.expr(a) for a in e.args]
        if name in ("min", "max"):
            const = [_float_constant(a) for a in e.args]
            if is_float(split_dtype(dtype)[0]) and any(c is not None and not math.isnan(c)
                                                       for c in const):
                first = const[0] is not None and not math.isnan(const[0])
                # a tie of x and a nonzero constant is one value whichever side wins: only
                # a zero first keeps its own helper (the sign of the zero)
                helper = self.helpers.min_max_const(dtype, name, first and const[0] == 0)
                x, k = (args[1], args[0]) if first else (args[0], args[1])
                return f"{helper}({x}, {k})", POSTFIX
            return f"{self.helpers.min_max(dtype, name)}({args[0]}, {args[1]})", POSTFIX
        if name.startswith("reduce_"):                     # reduce_lanes.py's trees
            helper = self.helpers.reduce_lanes(e.args[0].dtype, name[len("reduce_"):])
            return f"{helper}({args[0]})", POSTFIX
        if name == "requantize":
            if len(args) != 3:
                raise BuildError("requantize needs a constant scale to build",
                                 hint="give the op's scale attributes values")
            return f"{self.helpers.requantize()}({', '.join(args)})", POSTFIX
        if name == "exp" and dtype.startswith("f32x"):      # a GNU vector (lanes.py)
            return f"{self.helpers.exp(dtype)}({args[0]})", POSTFIX
        if name == "round" and dtype.startswith("f32x"):    # a GNU vector (lanes.py)
            return f"{self.helpers.round_vector(dtype)}({args[0]})", POSTFIX
        if name in ("dot4_u8i8", "dot2_i16"):               # GNU vectors (lanes.py)
            return f"{getattr(self.helpers, name)(dtype)}({', '.join(args)})", POSTFIX
        if name in ("sqrt", "rsqrt") and "x" in dtype:      # a GNU vector (lanes.py)
            root = f"{self.helpers.sqrt_vector(dtype)}({args[0]})"
            if name == "sqrt":
                return root, POSTFIX
            return f"{c_literal(1.0, split_dtype(dtype)[0])[0]} / {root}", MULTIPLICATIVE
        if name in te.BIT_INTRINSICS:
            return self.bitwise(name, dtype, args), POSTFIX
        if name == "abs" and not is_float(dtype):
            return f"{self.helpers.abs_int(dtype)}({args[0]})", POSTFIX
        if not is_float(dtype):
            raise BuildError(f"{name} needs a float argument, got {dtype}",
                             hint=f"cast the argument: {name}(f32(x))")
        if name == "sigmoid":
            return f"{self.helpers.sigmoid(dtype)}({args[0]})", POSTFIX
        if name in ("exp", "erf"):
            return f"{getattr(self.helpers, name)(dtype)}({args[0]})", POSTFIX
        if name == "rsqrt":
            one = c_literal(1.0, dtype)[0]
            return f"{one} / {self.math_function('sqrt', dtype)}({args[0]})", MULTIPLICATIVE
        return f"{self.math_function(name, dtype)}({', '.join(args)})", POSTFIX

    def visit_ReadFault(self, e: ReadFault):
        # threads may fault at once: the status is written atomically (any one code wins)
        self.uses_status = True
        zero = c_literal(0, e.dtype)[0]
        code = FIRST_READ_FAULT + e.fault
        return f"(__atomic_store_n(&tdsl_status, {code}, __ATOMIC_RELAXED), {zero})", POSTFIX

    def visit_BufferLoad(self, e: BufferLoad):
        if lanes_of(e) == 1:
            return self.element(e.buffer, e.indices), POSTFIX
        if id(e.buffer) in self.registers:
            return self.register(e.buffer, e.indices[0]), POSTFIX
        base = contiguous_base(e.buffer, e.indices)
        assert base is not None, "non-contiguous vector loads print lane by lane"
        address = f"&{self.buffer_name(e.buffer)}[{self.expr(base)}]"
        return self.vector_load(e.dtype, address), POSTFIX

    def visit_Broadcast(self, e):
        return self.broadcast(e.dtype, self.expr(e.value)), POSTFIX

    def visit_Ramp(self, e: Ramp):
        raise AssertionError("a ramp value prints lane by lane")

    def visit_Call(self, e):
        args = [self.buffer_name(a) if isinstance(a, Buffer) else self.expr(a) for a in e.args]
        return f"{e.name}({', '.join(args)})", POSTFIX

    def visit_AddressOf(self, e):
        return f"&{self.buffer_name(e.buffer)}[{self.expr(e.index)}]", UNARY

    def bitwise(self, name: str, dtype: str, args) -> str:
        """The bitwise intrinsics, in parentheses, of the argument's type (C computes narrow
        ones in int); the shifts are defined for every count (lowering/bitwise.py)."""
        if "x" in dtype or not is_int(dtype):
            raise BuildError(f"{name} needs integer arguments, got {dtype}")
        t = to_c(dtype)
        a = [f"({x})" for x in args]
        if name == "bitnot":
            return f"(({t})~{a[0]})"
        if name in ("bitand", "bitor", "bitxor"):
            op = {"bitand": "&", "bitor": "|", "bitxor": "^"}[name]
            return f"(({t})({a[0]} {op} {a[1]}))"
        bits = int(to_numpy(dtype).itemsize) * 8
        inside = f"(uint64_t){a[1]} < {bits}"
        if name == "shl":       # through the unsigned type (at least 32 bits: no int promotion)
            wide = f"(uint{max(bits, 32)}_t)" if bits < 32 else ""
            return f"({inside} ? ({t})({wide}(uint{bits}_t){a[0]} << {a[1]}) : ({t})0)"
        past = f"({t})({a[0]} < 0 ? -1 : 0)" if not is_unsigned(dtype) else f"({t})0"
        return f"({inside} ? ({t})({a[0]} >> {a[1]}) : {past})"

    # ------------------------------------------------------------ shared pieces
    def element(self, buf: Buffer, indices) -> str:
        """The lvalue of one scalar element."""
        name = self.buffer_name(buf)
        if id(buf) in self.half_params:     # the bits of an f16 parameter, as _Float16
            if id(buf) in self.by_value:
                return f"((union {{ uint16_t u; _Float16 f; }}){{ .u = {name} }}).f"
            const = "const " if id(buf) in getattr(self, "inputs", ()) else ""
            name = f"(({const}_Float16*){name})"
        elif id(buf) in self.by_value:
            return name
        return f"{name}[{self.expr(flat_offset(buf, tuple(indices)))}]"

    def buffer_name(self, buf: Buffer) -> str:
        name = self.namer.lookup(buf)
        if name is None:
            raise BuildError(f"buffer {buf.name} is used in {self.func_name} outside its "
                             f"allocation and is not a parameter")
        return name

    def is_nonneg(self, e: te.Expr) -> bool:
        """A cheap proof that an integer expression is >= 0 (decides plain ``/`` and ``%``)."""
        match e:
            case te.Const(value):
                return value >= 0
            case te.Var():
                return e in self.nonneg
            case te.Binary(op, a, b) if op in ("+", "*", "//", "%", "/"):
                return self.is_nonneg(a) and self.is_nonneg(b)
        return is_unsigned(e.dtype)

    def _wrap(self, text: str, prec: int, dtype: str):
        if dtype in NARROW_INTS:
            return f"({to_c(dtype)})({text})", UNARY
        return text, prec


def c_literal(value, dtype: str) -> tuple[str, int]:
    """A C literal and its precedence (a leading minus or cast makes it a unary expression)."""
    if dtype == "bool":
        return ("true" if value else "false"), ATOM
    if dtype == "f16":              # a storage type: only a cast or a store sees one
        text, _ = c_literal(float(np.float16(value)), "f32")
        return f"(_Float16){text}", UNARY
    if dtype in MINIFLOATS:         # its bits
        bits = np.asarray(value, np.float64).astype(to_numpy(dtype))
        return f"({to_c(dtype)}){int(bits.view(f'u{bits.itemsize}'))}u", UNARY
    if dtype in ("f32", "f64"):
        value = float(value)
        if value != value or value in (math.inf, -math.inf):
            text = "NAN" if value != value else "INFINITY"
            text = text if dtype == "f32" else f"(double){text}"
            text = "-" + text if value < 0 else text
        else:
            text = repr(value) + ("f" if dtype == "f32" else "")
        return text, UNARY if text.startswith(("-", "(")) else ATOM
    value = int(value)
    if is_unsigned(dtype):
        value &= (1 << (8 * to_numpy(dtype).itemsize)) - 1
        if dtype == "u64" and value >= 2**31:
            return ("UINT64_MAX" if value == 2**64 - 1 else f"UINT64_C({value})"), POSTFIX
        return (f"{value}u" if value >= 2**31 else str(value)), ATOM
    if dtype == "i64" and not -2**31 <= value < 2**31:
        return ("INT64_MIN" if value == -2**63 else f"INT64_C({value})"), POSTFIX
    return str(value), UNARY if value < 0 else ATOM


def _constant_only(e: te.Expr) -> bool:
    return all(not isinstance(x, (te.Var, BufferLoad, LaneOf)) for x in te.walk(e))


def _float_constant(e: te.Expr) -> float | None:
    """The value of a float constant, or of one broadcast to every lane; else None."""
    if isinstance(e, Broadcast):
        e = e.value
    return float(e.value) if isinstance(e, te.Const) and is_float(e.dtype) else None
