"""AST expressions -> typed tensor expressions, with name, dtype, range and bounds checks."""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Callable

from ..errors import CheckError, Span
from ..lowering import te
from ..lowering.arith.linear import Linear, equal, exact, normal_form
from ..lowering.arith.prover import Ctx, bounds, relax
from ..lowering.dtypes import DTYPES, FLOATS, INDEX
from ..lowering.quantize import quantize_multiplier
from . import ast
from .typing import FLOAT_LIT, INT_LIT, Typed, check_bool, check_numeric, coerce, unify

CONSTANTS = {"inf": math.inf, "pi": math.pi}
_FLOAT_ONLY = [n for n in te.INTRINSICS if n not in te.INT_INTRINSICS]


@dataclass
class Scope:
    attrs: dict                     # name -> python value or symbolic te.Var
    shape_vars: dict                # name -> te.Var
    index_vars: dict                # name -> te.IterVar
    tensor: Callable                # (name, span) -> te.Tensor | None
    positive: set
    pack_rank: int


def const_value(node, attrs: dict):
    """Value of a compile-time constant expression (attribute defaults, knob choices)."""
    match node:
        case ast.Number(text):
            return float(text) if node.is_float else int(text)
        case ast.Bool(v):
            return v
        case ast.String(v):
            return v
        case ast.Unary("-", x):
            v = const_value(x, attrs)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise CheckError(f"can't negate {v!r}", node.span)
            return -v
        case ast.Name(n) if n in attrs and not isinstance(attrs[n], te.Expr):
            return attrs[n]
        case ast.Name(n) if n in CONSTANTS:
            return CONSTANTS[n]
        case ast.Name(n) if n in attrs:
            raise CheckError(f"'{n}' has no value here: it is an attribute without a default",
                             node.span)
        case ast.Name(n):
            raise CheckError(f"'{n}' is not a constant", node.span,
                             hint="a constant is a number, true, false, inf, pi, or (in an "
                                  "attribute's default) the name of an earlier attribute")
    raise CheckError("expected a constant (a number, true, false, inf, pi, or the name of an "
                     "earlier attribute)", getattr(node, "span", None))


class ExprConverter:
    def __init__(self, scope: Scope, inst=None):
        self.scope = scope
        self.inst = inst
        # index var name -> its (lo, hi), both inclusive (None: unknown) for the bounds proof
        self.ranges: dict[str, tuple[te.Expr, te.Expr] | None] = {
            n: _range_of(iv) for n, iv in scope.index_vars.items()}

    # ------------------------------------------------------------------ shapes

    def shape_expr(self, node) -> te.Expr:
        """An integer size expression over sizes and int attributes."""
        match node:
            case ast.Number(text) if not node.is_float:
                return te.Const(int(text), INDEX)
            case ast.Name(n) if n in self.scope.shape_vars:
                return self.scope.shape_vars[n]
            case ast.Name(n) if n in self.scope.attrs:
                v = self.scope.attrs[n]
                if isinstance(v, te.Expr) and v.dtype == INDEX:
                    return v
                if isinstance(v, (bool, te.Expr)) or not isinstance(v, int):
                    raise CheckError(f"attribute '{n}' is not an int and can't be a size",
                                     node.span)
                return te.Const(v, INDEX)
            case ast.Name(n):
                raise CheckError(f"unknown size '{n}'", node.span,
                                 hint="sizes are named in the input parameters' shapes")
            case ast.Binary(op, l, r) if op in ("+", "-", "*", "//", "%"):
                a, b = self.shape_expr(l), self.shape_expr(r)
                if op in ("//", "%"):
                    _refuse_zero_divisor(op, b, r, size=True)
                return normal_form(te.Binary(op, a, b, INDEX))
            case ast.Unary("-", x):
                return normal_form(te.Unary("-", self.shape_expr(x), INDEX))
            case ast.Call(f, args) if f in ("min", "max") and len(args) == 2:
                return normal_form(te.Intrinsic(f, tuple(map(self.shape_expr, args)), INDEX))
        return self._bad_size(node)

    def _bad_size(self, node):
        raise CheckError("a size must be an integer expression of sizes and int attributes "
                         "(+ - * // %)", getattr(node, "span", None))

    # ------------------------------------------------------------------ values

    def value(self, node, dtype: str, what: str) -> te.Expr:
        return coerce(self.convert(node), dtype, node.span, what)

    def index(self, node) -> te.Expr:
        x = self.convert(node)
        if x.dtype == INT_LIT:
            return coerce(x, INDEX, node.span)
        if x.dtype not in ("i8", "i16", "i32", "i64", "u8"):
            raise CheckError(f"an index must be an integer, got {x.describe()}", node.span,
                             hint="cast with i64(...)" if x.dtype in FLOATS else None)
        return x.expr if x.dtype == INDEX else te.Cast(x.expr, INDEX)

    def convert(self, node) -> Typed:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise CheckError(f"{type(node).__name__.lower()} can't be used in an expression",
                             getattr(node, "span", None))
        return method(node)

    def _Number(self, node: ast.Number) -> Typed:
        if node.is_float:
            return Typed(te.Const(float(node.text), "f32"), FLOAT_LIT)
        return Typed(te.Const(int(node.text), INDEX), INT_LIT)

    def _Bool(self, node: ast.Bool) -> Typed:
        return Typed(te.Const(node.value, "bool"))

    def _Name(self, node: ast.Name) -> Typed:
        n, s = node.id, self.scope
        if n in s.index_vars:
            return Typed(s.index_vars[n].var)
        if n in s.attrs:
            v = s.attrs[n]
            if isinstance(v, te.Expr):
                return Typed(v, None if v.dtype == "bool" else
                             INT_LIT if v.dtype == INDEX else FLOAT_LIT)
            if isinstance(v, bool):
                return Typed(te.Const(v, "bool"))
            if isinstance(v, int):
                return Typed(te.Const(v, INDEX), INT_LIT)
            return Typed(te.Const(float(v), "f32"), FLOAT_LIT)
        if n in s.shape_vars:
            return Typed(s.shape_vars[n])
        t = s.tensor(n, node.span)
        if t is not None:
            if t.ndim:
                idx = ", ".join("ijklmn"[:t.ndim])
                raise CheckError(f"'{n}' is a tensor of rank {t.ndim}; index it", node.span,
                                 hint=f"e.g. {n}[{idx}]")
            return Typed(te.Load(t, (), t.dtype))
        if n in CONSTANTS:
            return Typed(te.Const(CONSTANTS[n], "f32"), FLOAT_LIT)
        raise self._unknown(n, node.span)

    def _unknown(self, n: str, span: Span | None) -> CheckError:
        s = self.scope
        names = [*s.index_vars, *s.attrs, *s.shape_vars, *CONSTANTS]
        if self.inst is not None:
            names += list(self.inst.stages)
        close = difflib.get_close_matches(n, [m for m in names if m != n], n=1)
        return CheckError(f"unknown name '{n}'", span,
                          hint=f"did you mean '{close[0]}'?" if close else None)

    def _Index(self, node: ast.Index) -> Typed:
        t = self.scope.tensor(node.tensor, node.span)
        if t is None:
            n, s = node.tensor, self.scope
            what = "an index" if n in s.index_vars else "an attribute" if n in s.attrs else \
                "a size" if n in s.shape_vars else None
            if what is not None:
                raise CheckError(f"'{n}' is {what}, not a tensor, and can't be indexed",
                                 node.span)
            raise self._unknown(node.tensor, node.span)
        subs = self._expand(node.indices)
        if len(subs) != t.ndim:
            raise CheckError(f"'{t.name}' has rank {t.ndim} but is indexed with {len(subs)} "
                             f"subscript{'s' * (len(subs) != 1)}", node.span)
        idx = tuple(self.index(x) for x in subs)
        for d, (e, sub) in enumerate(zip(idx, subs)):
            self._check_in_bounds(t, d, e, getattr(sub, "span", None) or node.span)
        return Typed(te.Load(t, idx, t.dtype))

    def _expand(self, subs) -> list:
        out = []
        for x in subs:
            if isinstance(x, ast.PackIndex):
                out += [ast.Name(f"{x.id}{k}", x.span) for k in range(self.scope.pack_rank)]
            elif isinstance(x, ast.Axis):
                raise CheckError("a range `k: K` only goes in a reduction's brackets",
                                 x.span)
            else:
                out.append(x)
        return out

    def _check_in_bounds(self, t: te.Tensor, dim: int, e: te.Expr, span):
        """An error when the index surely leaves the tensor for every value of the sizes:
        the least and greatest values it takes (as the index variables range) are bounded
        over all sizes (those in ``positive`` are >= 1, the others >= 0)."""
        p, size = exact(e), t.shape[dim]
        if p is None or exact(size) is None:
            return
        inner = {}
        for v in te.free_vars(e):
            if v.name in self.ranges:
                if self.ranges[v.name] is None:
                    return
                inner[v] = self.ranges[v.name]
        r = relax(p.to_expr(), inner, attained=True)
        if r is None:
            return
        lo, hi = r
        sizes = Ctx(positive=frozenset(te.Var(n) for n in self.scope.positive))
        over = bounds(te.Binary("-", hi, size, INDEX) + te.Const(1, INDEX), sizes)[0]
        under = bounds(lo, sizes)[1]
        if (over is not None and over > 0) or (under is not None and under < 0):
            raise CheckError(
                f"index out of bounds: dimension {dim} of '{t.name}' has size "
                f"{t.shape[dim]} but the index {e} ranges over [{lo}, {hi}]", span,
                hint="guard the access with select(...) or shrink the range")

    # ------------------------------------------------------------------ operators

    def _Binary(self, node: ast.Binary) -> Typed:
        op = node.op
        a, b = self.convert(node.left), self.convert(node.right)
        if op in ("and", "or"):
            check_bool(a, node.left.span, f"the left operand of {op}")
            check_bool(b, node.right.span, f"the right operand of {op}")
            return Typed(te.Logical(op, a.expr, b.expr))
        if op in te.COMPARE_OPS:
            if "bool" in (a.dtype, b.dtype) and op not in ("==", "!="):
                raise CheckError(f"can't order bools with {op}", node.span)
            x, y, _ = unify(a, b, node.span, op)
            return Typed(te.Compare(op, x, y))
        check_numeric(a, node.left.span, op, floats_only=op == "/", ints_only=op in ("//", "%"))
        check_numeric(b, node.right.span, op, floats_only=op == "/", ints_only=op in ("//", "%"))
        if op == "/" and a.lit == INT_LIT and b.lit == INT_LIT:
            raise CheckError("/ is float division; these are integers", node.span,
                             hint="use // for floor division, or write 1.0 for a float")
        x, y, lit = unify(a, b, node.span, op)
        if op in ("//", "%"):
            _refuse_zero_divisor(op, y, node.right)
        if op == "/" and x.dtype not in FLOATS:
            raise CheckError(f"/ is float division but the operands are {x.dtype}", node.span,
                             hint="use // for integer floor division")
        return Typed(_fold(te.Binary(op, x, y, x.dtype)), lit)

    def _Unary(self, node: ast.Unary) -> Typed:
        a = self.convert(node.operand)
        if node.op == "not":
            check_bool(a, node.operand.span, "the operand of not")
            return Typed(te.Unary("not", a.expr, "bool"))
        check_numeric(a, node.operand.span, "unary -")
        return Typed(_fold(te.Unary("-", a.expr, a.expr.dtype)), a.lit)

    # ------------------------------------------------------------------ calls

    def _Call(self, node: ast.Call) -> Typed:
        f, args = node.func, node.args
        if node.kwargs and (f in te.INTRINSICS or f in DTYPES or f in ("select", "requantize")):
            raise CheckError(f"{f} takes no attributes", node.span)
        if f == "select":
            self._arity(node, 3)
            return self._select(node)
        if f == "requantize":
            self._arity(node, 2)
            return self._requantize(node)
        if f in DTYPES:
            self._arity(node, 1)
            a = self.convert(args[0])
            if a.lit:
                return Typed(coerce(a, f, node.span) if f != "bool" else
                             te.Const(bool(a.expr.value), "bool")
                             if isinstance(a.expr, te.Const) else te.Cast(a.expr, f))
            return Typed(a.expr if a.dtype == f else te.Cast(a.expr, f))
        if f in te.INTRINSICS:
            self._arity(node, te.INTRINSICS[f])
            xs = [self.convert(a) for a in args]
            for x, a in zip(xs, args):
                check_numeric(x, a.span, f, floats_only=f in _FLOAT_ONLY,
                              ints_only=f in te.BIT_INTRINSICS)
            if len(xs) == 2:
                x, y, lit = unify(xs[0], xs[1], node.span, f)
                if f in ("pow", "fmod") and x.dtype not in FLOATS:
                    raise CheckError(f"{f} needs float operands", node.span)
                return Typed(te.Intrinsic(f, (x, y), x.dtype), lit)
            x = xs[0]
            e = coerce(x, "f32", node.span) if x.lit and f in _FLOAT_ONLY else x.expr
            return Typed(te.Intrinsic(f, (e,), e.dtype), None if f in _FLOAT_ONLY else x.lit)
        if self.inst is not None and self.inst.resolve_op(f) is not None:
            raise CheckError(f"op '{f}' can only be called as a whole-tensor statement",
                             node.span, hint=f"write `T = {f}(...)` then use T[...]")
        close = difflib.get_close_matches(f, [*te.INTRINSICS, *DTYPES, "select", "requantize"],
                                          n=1)
        raise CheckError(f"unknown function '{f}'", node.span,
                         hint=f"did you mean '{close[0]}'?" if close else None)

    def _requantize(self, node: ast.Call) -> Typed:
        """``requantize(acc, scale)``: an i32 accumulator times a real scale, in integers
        only (tdsl/lowering/quantize.py). The scale is a constant float expression of the
        attributes, made a multiplier and a shift here, at build time."""
        acc = self.convert(node.args[0])
        if acc.lit == INT_LIT:
            acc = Typed(coerce(acc, "i32", node.args[0].span))
        if acc.dtype != "i32":
            raise CheckError(f"requantize takes an i32 accumulator, got {acc.describe()}",
                             node.args[0].span, hint="cast it: requantize(i32(x), scale)")
        scale = self.convert(node.args[1])
        check_numeric(scale, node.args[1].span, "requantize's scale")
        value = _constant_number(scale.expr)
        if value is None:
            if te.free_vars(scale.expr) and all(
                    v.name in self.scope.attrs for v in te.free_vars(scale.expr)):
                # checking with symbolic attributes: the form is right, the value comes later
                return Typed(te.Intrinsic("requantize", (acc.expr, scale.expr), "i32"))
            raise CheckError("requantize's scale must be a constant: numbers and float "
                             "attributes", node.args[1].span,
                             hint="e.g. requantize(acc, scale) with `scale: float` an attribute")
        try:
            multiplier, shift = quantize_multiplier(value)
        except ValueError as exc:
            raise CheckError(str(exc), node.args[1].span) from None
        return Typed(te.Intrinsic("requantize", (acc.expr, te.Const(multiplier, "i32"),
                                                 te.Const(shift, "i32")), "i32"))

    def _arity(self, node: ast.Call, n: int):
        if len(node.args) != n:
            raise CheckError(f"{node.func} takes {n} argument{'s' * (n != 1)}, got "
                             f"{len(node.args)}", node.span)

    def _select(self, node: ast.Call) -> Typed:
        c = self.convert(node.args[0])
        check_bool(c, node.args[0].span, "the condition of select")
        saved = dict(self.ranges)
        self._refine(c.expr, True)
        t = self.convert(node.args[1])
        self.ranges = dict(saved)
        self._refine(c.expr, False)
        f = self.convert(node.args[2])
        self.ranges = saved
        x, y, lit = unify(t, f, node.span, "select")
        return Typed(te.Select(c.expr, x, y, x.dtype), lit)

    def _refine(self, cond: te.Expr, truth: bool):
        """Narrow index ranges by a select condition, for the bounds proof."""
        if truth and isinstance(cond, te.Logical) and cond.op == "and":
            self._refine(cond.a, True)
            self._refine(cond.b, True)
            return
        if truth is False and isinstance(cond, te.Logical) and cond.op == "or":
            self._refine(cond.a, False)
            self._refine(cond.b, False)
            return
        if isinstance(cond, te.Unary) and cond.op == "not":
            self._refine(cond.a, not truth)
            return
        if not isinstance(cond, te.Compare):
            return
        op = cond.op if truth else {"<": ">=", "<=": ">", ">": "<=", ">=": "<",
                                    "==": "!=", "!=": "=="}[cond.op]
        pa, pb = exact(cond.a), exact(cond.b)
        if pa is None or pb is None:
            return
        d = pa - pb                                     # cond: d OP 0
        one = Linear({}, 1)
        facts = {">=": [d], ">": [d - one], "<=": [d.scale(-1)],
                 "<": [d.scale(-1) - one], "==": [d, d.scale(-1)]}.get(op, [])
        for g in facts:                                 # g >= 0
            self._apply_fact(g)

    def _apply_fact(self, g: Linear):
        """Narrow the range of the one index variable of ``g >= 0``; a fact on several, or
        on one inside an atom (``i // 2 >= 1``), makes theirs unknown."""
        involved = [v for v in g.free_vars() if v.name in self.ranges]
        c = g.coeff_if_linear(involved[0]) if len(involved) == 1 else None
        if c is None or abs(c) != 1 or self.ranges[involved[0].name] is None:
            for v in involved:
                self.ranges[v.name] = None
            return
        v = involved[0]
        r = self.ranges[v.name]
        rest = g.drop(v)
        if c == 1:        # v >= -rest
            self.ranges[v.name] = _meet(r, lo=rest.scale(-1).to_expr())
        else:             # v <= rest
            self.ranges[v.name] = _meet(r, hi=rest.to_expr())

    # ------------------------------------------------------------------ reductions

    def _Reduce(self, node: ast.Reduce) -> Typed:
        if node.kind not in te.REDUCERS:
            raise CheckError(f"unknown reduction '{node.kind}'", node.span,
                             hint=f"reductions are {', '.join(te.REDUCERS)}")
        axes = []
        for ax in node.axes:
            if ax.name in self.scope.index_vars or ax.name in self.scope.shape_vars or \
                    ax.name in self.scope.attrs:
                raise CheckError(f"reduction axis '{ax.name}' hides another name", ax.span,
                                 hint="pick another axis name")
            if ax.name in [a.var.name for a in axes]:
                raise CheckError(f"reduction axis '{ax.name}' is listed twice", ax.span)
            ext = self.shape_expr(ax.extent) if ax.extent is not None else \
                self._infer_extent(ax, node.body)
            axes.append(te.IterVar(te.Var(ax.name), ext, "reduce"))
        inner = ExprConverter(Scope(self.scope.attrs, self.scope.shape_vars,
                                    {**self.scope.index_vars, **{a.var.name: a for a in axes}},
                                    self.scope.tensor, self.scope.positive,
                                    self.scope.pack_rank), self.inst)
        inner.ranges = {**self.ranges, **{a.var.name: _range_of(a) for a in axes}}
        body = inner.convert(node.body)
        if body.dtype == "bool":
            raise CheckError(f"can't {node.kind} bools", node.body.span,
                             hint="cast first, e.g. i32(x > 0)")
        e = body.expr if not body.lit else coerce(body, "f32" if body.lit == FLOAT_LIT
                                                   else INDEX, node.span)
        return Typed(te.Reduce(node.kind, e, tuple(axes), e.dtype), body.lit)

    def _infer_extent(self, ax: ast.Axis, body) -> te.Expr:
        """The range of a reduction axis from the tensors it plainly indexes; all must agree."""
        found: list[tuple[te.Expr, str]] = []
        for idx in _walk_index(body):
            t = self.scope.tensor(idx.tensor, idx.span)
            if t is None:
                continue
            subs = self._expand(idx.indices)
            if len(subs) != t.ndim:
                continue
            for d, s in enumerate(subs):
                if isinstance(s, ast.Name) and s.id == ax.name:
                    found.append((t.shape[d], f"{t.name}[{', '.join(_show(x) for x in subs)}]"))
        if not found:
            raise CheckError(f"reduction axis '{ax.name}' has no range", ax.span,
                             hint=f"give one, e.g. {ax.name}: 3, or use it as a whole "
                                  f"index of some tensor")
        first, where = found[0]
        for ext, w in found[1:]:
            if not equal(ext, first):
                raise CheckError(f"ranges of reduction axis '{ax.name}' disagree: {first} "
                                 f"(from {where}) and {ext} (from {w})", ax.span,
                                 hint=f"give the range explicitly, e.g. {ax.name}: {first}")
        return first


def _range_of(iv: te.IterVar) -> tuple[te.Expr, te.Expr] | None:
    p = exact(iv.extent)
    return None if p is None else (te.Const(0, INDEX), (p - Linear({}, 1)).to_expr())


def _meet(r: tuple[te.Expr, te.Expr], lo=None, hi=None) -> tuple[te.Expr, te.Expr] | None:
    """``r`` narrowed by a new end, when the two ends differ by a constant (else unknown)."""
    if lo is not None:
        d = exact(lo) - exact(r[0])
        if not d.is_const:
            return None
        return (lo if d.const > 0 else r[0], r[1])
    d = exact(hi) - exact(r[1])
    if not d.is_const:
        return None
    return (r[0], hi if d.const < 0 else r[1])


def _refuse_zero_divisor(op: str, divisor: te.Expr, node, size: bool = False):
    """A divisor of ``//`` or ``%`` written as the constant 0 (literals only: an attribute
    that is 0 is the call's error, worded as the reference words it) is refused at check
    time. One that is 0 only at run time gives 0 on every target (docs/semantics.md)."""
    if any(isinstance(n, ast.Name) for n in _walk(node)):
        return
    d = normal_form(divisor) if divisor.dtype == INDEX else divisor
    if isinstance(d, te.Const) and not isinstance(d.value, bool) and d.value == 0:
        raise CheckError(
            f"{'division' if op == '//' else 'modulo'} by zero: the divisor of {op} is the "
            f"constant 0", node.span,
            hint="a size that divides by zero is refused when the op is called" if size else
            "a divisor that is 0 only at run time gives 0 on every target; a constant 0 is "
            "a mistake")


def _walk(node):
    yield node
    for v in vars(node).values() if hasattr(node, "__dict__") else ():
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, ast.Node):
                yield from _walk(x)


def _fold(e: te.Expr) -> te.Expr:
    """Fold literal arithmetic so attribute expressions stay constants."""
    if isinstance(e, te.Unary) and isinstance(e.a, te.Const):
        return te.Const(-e.a.value, e.dtype)
    if isinstance(e, te.Binary) and isinstance(e.a, te.Const) and isinstance(e.b, te.Const):
        a, b = e.a.value, e.b.value
        try:
            v = {"+": a + b, "-": a - b, "*": a * b}.get(e.op)
            if v is None and b != 0:
                v = {"/": a / b, "//": a // b, "%": a % b}[e.op]
        except (ArithmeticError, KeyError):
            v = None
        if v is not None:
            return te.const(v, e.dtype)
    return e


def _constant_number(e: te.Expr) -> float | None:
    """The value of an expression of constants (+ - * /, negation, min, max, abs), computed
    in double precision as the C++ of TFLite computes its scales; None if not constant."""
    match e:
        case te.Const(v) if not isinstance(v, bool):
            return float(v)
        case te.Cast(a):
            return _constant_number(a)
        case te.Unary("-", a):
            v = _constant_number(a)
            return None if v is None else -v
        case te.Binary(op, a, b) if op in ("+", "-", "*", "/"):
            x, y = _constant_number(a), _constant_number(b)
            if x is None or y is None or (op == "/" and y == 0):
                return None
            return {"+": x + y, "-": x - y, "*": x * y, "/": x / y if y else 0.0}[op]
        case te.Intrinsic("min" | "max" | "abs" as f, args):
            vs = [_constant_number(a) for a in args]
            if None in vs:
                return None
            return {"min": min, "max": max, "abs": abs}[f](*vs)
    return None


def _walk_index(node):
    if isinstance(node, ast.Index):
        yield node
    for v in vars(node).values() if hasattr(node, "__dict__") else ():
        items = v if isinstance(v, tuple) else (v,)
        for x in items:
            if isinstance(x, ast.Node):
                yield from _walk_index(x)
            elif isinstance(x, tuple):
                for y in x:
                    if isinstance(y, ast.Node):
                        yield from _walk_index(y)


def _show(x) -> str:
    return x.id if isinstance(x, ast.Name) else "…"
