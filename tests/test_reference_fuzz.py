"""Random expressions: the vectorised reference against a naive per-element interpreter.

`scalar_eval` below is a deliberately simple, independent definition of the IR's meaning:
Python ints wrapped to the dtype's width, Python floats (IEEE doubles, so f64), a lazy select,
short-circuit and/or, reductions as plain loops, and a bounds check on every read it really
performs. The vectorised evaluator must give the same values and must raise an out-of-bounds
error exactly when this one does (so its masks are neither too wide nor too narrow).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tdsl.errors import TdslError
from tdsl.lowering import te
from tdsl.lowering.reference import stage
from tdsl.lowering.reference.semantics import evaluate

SIZE = 6            # every input dimension
BITS = {"i32": 32, "i64": 64}


class ScalarOOB(Exception):
    pass


def wrap(v: int, dtype: str) -> int:
    bits = BITS[dtype]
    return (v + 2 ** (bits - 1)) % 2 ** bits - 2 ** (bits - 1)


def scalar_eval(e: te.Expr, env: dict, tensors: dict):
    """The value of ``e`` at one point (``env``: axis name -> int), computed naively."""
    r = lambda x: scalar_eval(x, env, tensors)  # noqa: E731
    fix = (lambda v: wrap(v, e.dtype)) if e.dtype in BITS else (lambda v: v)
    match e:
        case te.Var(name):
            return env[name]
        case te.Const(value):
            return value
        case te.Binary(op, a, b):
            x, y = r(a), r(b)
            return fix({"+": x + y, "-": x - y, "*": x * y}[op] if op in "+-*" else
                       x / y if op == "/" else x // y if op == "//" else x % y)
        case te.Unary("-", a):
            return fix(-r(a))
        case te.Unary("not", a):
            return not r(a)
        case te.Compare(op, a, b):
            x, y = r(a), r(b)
            return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y,
                    "==": x == y, "!=": x != y}[op]
        case te.Logical("and", a, b):
            return bool(r(a)) and bool(r(b))
        case te.Logical("or", a, b):
            return bool(r(a)) or bool(r(b))
        case te.Select(c, t, f):
            return r(t) if r(c) else r(f)
        case te.Cast(a, dtype):
            v = r(a)
            return float(v) if dtype == "f64" else wrap(int(v), dtype)
        case te.Intrinsic(name, args):
            vals = [r(a) for a in args]
            return fix({"min": min, "max": max, "abs": abs}[name](*vals))
        case te.Load(t, indices):
            idx = tuple(r(i) for i in indices)
            arr = tensors[t]
            if any(not 0 <= i < n for i, n in zip(idx, arr.shape)):
                raise ScalarOOB(idx)
            return arr[idx].item()
        case te.Reduce(kind, body, axes):
            acc = {"sum": 0, "prod": 1, "max": -np.inf, "min": np.inf}[kind]
            if e.dtype in BITS and kind in ("max", "min"):
                acc = -2 ** 31 if kind == "max" else 2 ** 31 - 1
            acc = float(acc) if e.dtype == "f64" else acc
            ranges = [range(r(ax.extent)) for ax in axes]
            for point in itertools.product(*ranges):
                v = scalar_eval(body, {**env, **{ax.var.name: p for ax, p in
                                                 zip(axes, point)}}, tensors)
                acc = fix({"sum": lambda: acc + v, "prod": lambda: acc * v,
                           "max": lambda: max(acc, v), "min": lambda: min(acc, v)}[kind]())
            return acc
    raise AssertionError(type(e).__name__)


# ---------------------------------------------------------------------------- generators

A = te.placeholder("A", (SIZE, SIZE), "f64")
V = te.placeholder("V", (SIZE,), "f64")
I = te.placeholder("I", (SIZE, SIZE), "i32")


class Gen:
    """Draws random well-typed expressions; ``scope`` holds (axis var, extent)."""

    def __init__(self, draw):
        self.draw = draw
        self.n_red = 0

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def index(self, scope):
        v, _ = self.pick(scope)
        kind = self.draw(st.integers(0, 5))
        c = self.draw(st.integers(-2, 2))
        if kind == 0:
            return v
        if kind == 1:
            return v + c
        if kind == 2:
            return 2 * v + c
        if kind == 3:
            return (v * 3 + c) % SIZE                  # not affine: a gather
        if kind == 4:
            return te.as_expr(self.draw(st.integers(0, SIZE - 1)))
        return te.Cast(I[v % SIZE, self.index(scope) % SIZE], "i64")   # data-dependent

    def load(self, tensor, scope, other):
        idx = [self.index(scope) for _ in tensor.shape]
        ld = tensor[tuple(idx)]
        if self.draw(st.booleans()):   # guarded: a lazy select hides out-of-range reads
            ok = [te.binary("and", te.binary(">=", i, 0), te.binary("<", i, SIZE)) for i in idx]
            cond = ok[0] if len(ok) == 1 else te.binary("and", ok[0], ok[1])
            return te.select(cond, ld, other)
        return ld

    def boolean(self, scope, depth):
        kind = self.draw(st.integers(0, 2))
        if kind == 0 or depth <= 0:
            return te.binary(self.pick(["<", "<=", "==", "!="]), self.index(scope),
                             self.index(scope))
        if kind == 1:
            return te.binary(self.pick(["<", ">="]), self.f64(scope, depth - 1),
                             self.f64(scope, depth - 1))
        return te.binary(self.pick(["and", "or"]), self.boolean(scope, depth - 1),
                         self.boolean(scope, depth - 1))

    def reduce(self, scope, depth, make):
        axes = []
        for _ in range(self.draw(st.integers(1, 2))):
            self.n_red += 1
            axes.append(te.reduce_axis(self.draw(st.integers(0, 4)), f"r{self.n_red}"))
        body = make(scope + [(ax.var, 4) for ax in axes], depth - 1)
        return te.reduce(self.pick(["sum", "sum", "max", "min", "prod"]), body, axes)

    def f64(self, scope, depth):
        kind = self.draw(st.integers(0, 7 if depth > 0 else 2))
        if kind == 0:
            return te.const(self.draw(st.integers(-3, 3)), "f64")
        if kind == 1:
            return self.load(A, scope, te.const(0.5, "f64"))
        if kind == 2:
            return self.load(V, scope, te.const(-1.0, "f64"))
        sub = lambda: self.f64(scope, depth - 1)  # noqa: E731
        if kind == 3:
            return te.binary(self.pick(["+", "-", "*"]), sub(), sub())
        if kind == 4:
            return te.binary("/", sub(), te.intrinsic("abs", sub()) + 1.0)
        if kind == 5:
            return te.select(self.boolean(scope, depth - 1), sub(), sub())
        if kind == 6:
            return te.Cast(self.i32(scope, depth - 1), "f64")
        return self.reduce(scope, depth, self.f64)

    def i32(self, scope, depth):
        kind = self.draw(st.integers(0, 6 if depth > 0 else 2))
        if kind == 0:
            return te.const(self.draw(st.integers(-2**31, 2**31 - 1)), "i32")
        if kind == 1:
            return self.load(I, scope, te.const(7, "i32"))
        if kind == 2:
            return te.Cast(self.index(scope), "i32")
        sub = lambda: self.i32(scope, depth - 1)  # noqa: E731
        if kind == 3:
            return te.binary(self.pick(["+", "-", "*"]), sub(), sub())
        if kind == 4:      # divisor in -6..-2 or 1..5: never zero
            d = te.binary("%", sub(), te.const(5, "i32"))
            d = d + 1 if self.draw(st.booleans()) else d - 6
            return te.binary(self.pick(["//", "%"]), sub(), d)
        if kind == 5:
            if self.draw(st.booleans()):
                return te.intrinsic("abs", sub())
            return te.intrinsic(self.pick(["min", "max"]), sub(), sub())
        return self.reduce(scope, depth, self.i32)


@st.composite
def functions(draw):
    g = Gen(draw)
    dtype = draw(st.sampled_from(["f64", "i32"]))
    i, j = te.Var("i"), te.Var("j")
    scope = [(i, 4), (j, 5)]
    body = g.f64(scope, 3) if dtype == "f64" else g.i32(scope, 3)
    Y = te.Tensor("Y", (te.as_expr(4), te.as_expr(5)), dtype,
                  te.Compute((te.IterVar(i, te.as_expr(4)), te.IterVar(j, te.as_expr(5))), body))
    # a second stage reads the first with a shifted, guarded subscript
    k = te.Var("k")
    Z = te.Tensor("Z", (te.as_expr(5),), dtype, te.Compute(
        (te.IterVar(k, te.as_expr(5)),),
        te.select(te.binary("<", k, 4), Y[k, 4 - k], Y[0, 0])))
    return te.Function("fuzz", (A, V, I), (Y, Z))


def inputs(seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-3, 3, (SIZE, SIZE)), rng.uniform(-3, 3, SIZE),
            rng.integers(-2, SIZE + 2, (SIZE, SIZE)).astype(np.int32)]


def scalar_run(fn, args):
    tensors = dict(zip(fn.inputs, args))
    for t in fn.stages():
        shape = tuple(int(s.value) for s in t.shape)
        out = np.empty(shape, np.float64 if t.dtype == "f64" else np.int32)
        for point in np.ndindex(*shape):
            env = {ax.var.name: p for ax, p in zip(t.op.axes, point)}
            out[point] = scalar_eval(t.op.body, env, tensors)
        tensors[t] = out
    return [tensors[t] for t in fn.outputs]


@pytest.mark.parametrize("mode", ["fast", "grid", "chunked"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fn=functions(), seed=st.integers(0, 2**16))
def test_random_expressions_match_naive_interpreter(mode, fn, seed):
    args = inputs(seed)
    try:
        want = scalar_run(fn, args)
    except ScalarOOB:
        want = None
    saved = stage.USE_EINSUM, stage.GRID_LIMIT
    stage.USE_EINSUM = mode == "fast"
    stage.GRID_LIMIT = 7 if mode == "chunked" else saved[1]
    try:
        if want is None:
            with pytest.raises(TdslError, match="index out of bounds"):
                evaluate(fn, args)
            return
        got = evaluate(fn, args)
    finally:
        stage.USE_EINSUM, stage.GRID_LIMIT = saved
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype == np.int32:
            np.testing.assert_array_equal(g, w)
        else:
            scale = 1 + np.nanmax(np.abs(np.where(np.isfinite(w), w, 0)))
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9 * scale)
