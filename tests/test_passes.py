"""Passes, before and after (TVM BaseBeforeAfter style), and the simplifier's rules."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tdsl.lowering import te
from tdsl.lowering.arith.prover import Ctx, bounds, prove, relax
from tdsl.lowering.loop_ir import (Allocate, Barrier, Broadcast, Buffer, BufferLoad, For, ForKind,
                                   If, LoweredFunc, Ramp, Seq, Store, walk_stmt)
from tdsl.lowering.lower import lower
from tdsl.lowering.passes import (bounds_check, flatten, partition, simplify as simplify_pass,
                                  unroll, unswitch, vectorize, verify)
from tdsl.lowering.schedule import Schedule
from tdsl.lowering.arith.simplify import simplify

I = "i64"
i, j, io, ii, f, N = (te.Var(n) for n in ("i", "j", "io", "ii", "f", "N"))


def c(v, dt=I):
    return te.Const(v, dt)


def add(a, b):
    return te.Binary("+", a, b, I)


def mul(a, b):
    return te.Binary("*", a, b, I)


def div(a, b):
    return te.Binary("//", a, b, I)


def mod(a, b):
    return te.Binary("%", a, b, I)


def in_loops(*ranges):
    """A bound callback for `simplify` with ``var in [0, extent)`` for each pair."""
    ctx = Ctx()
    for v, n in ranges:
        ctx = ctx.with_loop(v, c(0), c(n) if isinstance(n, int) else n)
    return lambda e: bounds(e, ctx)


# ---------------------------------------------------------------------------- simplifier

@pytest.mark.parametrize("before, after", [
    (mul(i, c(1)), i),                                              # x * 1
    (add(i, c(0)), i),                                              # x + 0
    (add(c(2), c(3)), c(5)),                                        # constant folding
    (te.Binary("-", add(mul(io, c(8)), ii), mul(io, c(8)), I), ii),  # terms cancel
    (div(mul(i, c(4)), c(4)), i),                                   # (a*c)//c
    (mod(mul(i, c(4)), c(4)), c(0)),                                # (a*c)%c
    (div(add(mul(io, c(8)), ii), c(4)), add(mul(c(2), io), div(ii, c(4)))),  # pull out c*q
    (add(mul(div(f, c(4)), c(4)), mod(f, c(4))), f),                # fuse then split: f
    (div(div(i, c(2)), c(3)), div(i, c(6))),                        # (x//a)//b
    (te.Binary("*", te.Var("x", "f32"), c(1.0, "f32"), "f32"), te.Var("x", "f32")),
    (te.Compare("<", add(i, c(1)), i), c(False, "bool")),
    (te.Intrinsic("min", (add(i, c(3)), i), I), i),
    (te.Select(c(True, "bool"), i, j, I), i),
    (te.Logical("and", c(True, "bool"), te.Compare("<", i, j)), te.Compare("<", i, j)),
])
def test_simplify_rules(before, after):
    assert simplify(before) == after


def test_simplify_in_context():
    """Inside ``for ii in [0, 4)``: (io*4 + ii) // 4 == io and (io*4 + ii) % 4 == ii."""
    b = in_loops((ii, 4), (io, N))
    x = add(mul(io, c(4)), ii)
    assert simplify(div(x, c(4)), b) == io
    assert simplify(mod(x, c(4)), b) == ii
    assert simplify(te.Compare("<", ii, c(4)), b) == c(True, "bool")
    assert simplify(te.Compare("<", x, mul(N, c(4))), b) == c(True, "bool")
    assert str(simplify(te.Compare("<", x, N), b)) == "ii + 4 * io < N"   # unknown: kept


def test_simplify_float_keeps_nan_semantics():
    x = te.Var("x", "f32")
    e = te.Binary("*", x, c(0.0, "f32"), "f32")
    assert simplify(e) == e                     # x * 0.0 is NaN for x = inf


def _exprs():
    leaf = st.one_of(st.sampled_from([i, j, N]), st.integers(-9, 9).map(c))

    def grow(sub):
        return st.one_of(
            st.tuples(st.sampled_from("+-*"), sub, sub).map(lambda t: te.Binary(*t, I)),
            st.tuples(st.sampled_from(["//", "%"]), sub, st.integers(1, 6).map(c))
            .map(lambda t: te.Binary(*t, I)),
            st.tuples(st.sampled_from(["min", "max"]), sub, sub)
            .map(lambda t: te.Intrinsic(t[0], (t[1], t[2]), I)),
        )
    return st.recursive(leaf, grow, max_leaves=8)


def _value(e, env):
    match e:
        case te.Var(name):
            return env[name]
        case te.Const(v):
            return v
        case te.Binary(op, a, b):
            x, y = _value(a, env), _value(b, env)
            return {"+": x + y, "-": x - y, "*": x * y}.get(op) if op in ("+", "-", "*") \
                else (x // y if op == "//" else x % y)
        case te.Unary("-", a):
            return -_value(a, env)
        case te.Intrinsic(name, (a, b)):
            return (min if name == "min" else max)(_value(a, env), _value(b, env))
        case te.Compare(op, a, b):
            return eval(f"{_value(a, env)} {op} {_value(b, env)}")
    raise AssertionError(e)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(e=_exprs(), vi=st.integers(0, 5), vj=st.integers(-20, 20), vn=st.integers(1, 30))
def test_simplify_preserves_value(e, vi, vj, vn):
    """At random points. Without context any values; in context ``i`` is in its loop range
    and the other variables, which no loop binds, are sizes (>= 0), as in lowered code."""
    env = {"i": vi, "j": vj, "N": vn}
    assert _value(simplify(e), env) == _value(e, env)
    env["j"] = abs(vj)
    assert _value(simplify(e, in_loops((i, 6))), env) == _value(e, env)


def test_simplify_fixed_point_limit():
    from tdsl.lowering.arith import simplify as S
    old = S._RULES_FOR
    try:
        # A rule that undoes itself: the loop must stop and say so.
        flip = (lambda e, b: te.Binary("+", e.b, e.a, I),)
        S._RULES_FOR = {te.Binary: flip}
        with pytest.raises(RuntimeError, match="converge"):
            S.simplify(add(i, j))
    finally:
        S._RULES_FOR = old


# ---------------------------------------------------------------------------- bounds

def test_bounds_and_proofs():
    ctx = Ctx().with_loop(io, c(0), div(add(N, c(3)), c(4))).with_loop(ii, c(0), c(4))
    x = add(mul(io, c(4)), ii)
    assert bounds(x, ctx)[0] == 0
    assert prove(te.Compare("<", x, N), ctx) is None               # the tail: unknown
    guarded = ctx.with_cond(te.Compare("<", x, N))
    assert prove(te.Compare("<", x, N), guarded) is True
    assert prove(te.Compare(">=", x, c(0)), ctx) is True
    main = Ctx().with_loop(io, c(0), div(N, c(4))).with_loop(ii, c(0), c(4))
    assert prove(te.Compare("<", x, N), main) is True               # 4*(N//4) <= N
    assert prove(te.Compare("<", ii, c(0)), ctx) is False


def test_relax_gives_the_tile():
    lo, hi = relax(add(add(mul(io, c(4)), ii), c(2)), {ii: (c(0), c(3))})
    assert (lo, hi) == (add(mul(c(4), io), c(2)), add(mul(c(4), io), c(5)))


# ---------------------------------------------------------------------------- passes on ops

def vector_add():
    n = te.Var("n")
    A, B = te.placeholder("A", (n,)), te.placeholder("B", (n,))
    C = te.compute("C", (n,), lambda x: A[x] + B[x], ["x"])
    return te.Function("vadd", (A, B), (C,), (n,))


def _ifs(func):
    return [s for s in walk_stmt(func.body) if isinstance(s, If)]


def test_divisible_split_has_no_guard():
    fn = vector_add()
    func = lower(fn, Schedule(fn).split("C", "x", 4), shapes={"n": 16})
    assert _ifs(func) == []
    assert func.attrs["unproven_accesses"] == 0


def test_tail_split_has_a_guard():
    """``4 * x.o + x.i < 18``: the bounds proof uses the guard, so no other check appears."""
    fn = vector_add()
    func = lower(fn, Schedule(fn).split("C", "x", 4), shapes={"n": 18})
    (guard,) = _ifs(func)
    assert str(guard.cond) == "x.i + 4 * x.o < 18"
    assert func.attrs["unproven_accesses"] == 0


def test_symbolic_split_guard_and_partition():
    fn = vector_add()
    s = Schedule(fn).split("C", "x", 8).vectorize("C", "x.i")
    func = lower(fn, s)
    main, tail = [s for s in walk_stmt(func.body) if isinstance(s, For)][:2]
    assert str(main.extent) == "n // 8" and str(tail.min) == "n // 8"
    assert not any(isinstance(x, If) for x in walk_stmt(main.body))     # main: vector code
    assert isinstance(main.body, Store) and isinstance(main.body.indices[0], Ramp)
    assert any(isinstance(x, If) for x in walk_stmt(tail.body))         # tail: guarded
    assert func.attrs["unproven_accesses"] == 0


def test_constant_tail_becomes_straight_line():
    fn = vector_add()
    func = lower(fn, Schedule(fn).split("C", "x", 8).vectorize("C", "x.i"), shapes={"n": 20})
    text = str(func)
    assert "C[ramp(8 * x.o, 1, 8)]" in text                           # two full vectors
    assert "vectorized x.i in [0, 8)" in text and "x.i + 16 < 20" in text  # one guarded tail


def test_bounds_check_guards_unprovable_accesses():
    """``B[i] = A[i + 1]`` over ``i in [0, 4)`` with ``A`` of 4 elements: the load is not
    provable, so it is guarded; the proof costs nothing where it succeeds."""
    a, b = Buffer("A", "f32", (c(4),)), Buffer("B", "f32", (c(4),))
    body = For(i, c(0), c(4), ForKind.SERIAL,
               Store(b, (i,), BufferLoad(a, (add(i, c(1)),), "f32")))
    func = bounds_check.run(LoweredFunc("f", (a, b), body, (), 1))
    assert func.attrs["unproven_accesses"] == 1
    store = func.body.body
    assert isinstance(store.value, te.Select)
    assert store.value.t.predicate is not None
    from tdsl.lowering.interp import run
    np.testing.assert_array_equal(run(func, [np.arange(4, dtype=np.float32)])[0], [1, 2, 3, 0])
    ok = LoweredFunc("f", (a, b), For(i, c(0), c(4), ForKind.SERIAL,
                                      Store(b, (i,), BufferLoad(a, (i,), "f32"))), (), 1)
    assert bounds_check.run(ok).body == ok.body


def test_bounds_check_uses_select_conditions():
    fn = vector_add()
    n = fn.shape_vars[0]
    A = fn.inputs[0]
    Cc = te.compute("C", (n,), lambda x: te.select(te.binary(">=", x, 1), A[x - 1], 0.0), ["x"])
    g = te.Function("shift", (A,), (Cc,), (n,))
    func = lower(g, Schedule(g))
    assert func.attrs["unproven_accesses"] == 0


def test_flatten_row_major_and_aligned():
    a = Buffer("A", "f32", (c(3), c(5)))
    assert str(flatten.flat_index(a, (i, j))) == "5 * i + j"
    aligned = flatten.aligned_strides((c(3), c(5)), {0: (8, 1)})
    assert aligned == (c(9), c(1))                        # 5 -> 9 == 1*8 + 1
    t = Buffer("T", "f32", (c(3), c(5)), "local", aligned)
    body = Allocate(t, Store(t, (i, j), c(0.0, "f32")))
    func = flatten.run(LoweredFunc("f", (), For(i, c(0), c(3), ForKind.SERIAL,
                                                For(j, c(0), c(5), ForKind.SERIAL, body)), (), 0))
    alloc = [s for s in walk_stmt(func.body) if isinstance(s, Allocate)][0]
    assert alloc.buffer.shape == (c(27),)
    assert str(alloc.body.indices[0]) == "9 * i + j"
    verify.run(func)


def test_vectorize_contiguous_and_broadcast():
    a, s_, b = (Buffer("A", "f32", (c(16),)), Buffer("s", "f32", (c(1),)),
                Buffer("B", "f32", (c(16),)))
    body = Store(b, (add(i, c(8)),), te.Binary("*", BufferLoad(a, (i,), "f32"),
                                              BufferLoad(s_, (c(0),), "f32"), "f32"))
    func = LoweredFunc("f", (a, s_, b), For(i, c(0), c(8), ForKind.VECTORIZED, body), (), 2,
                       {"flattened": True})
    out = vectorize.run(func).body
    assert out == Store(b, (Ramp(c(8), c(1), 8, "i64x8"),), te.Binary(
        "*", BufferLoad(a, (Ramp(c(0), c(1), 8, "i64x8"),), "f32x8"),
        Broadcast(BufferLoad(s_, (c(0),), "f32"), 8, "f32x8"), "f32x8"))



def test_vectorize_f32_exp_is_a_vector_intrinsic():
    """The C backends have a whole-vector f32 exp (softmax's rows): exp of a contiguous load
    vectorizes to exp of the vector load; f64 exp keeps its loop."""
    a, b = Buffer("A", "f32", (c(16),)), Buffer("B", "f32", (c(16),))
    body = Store(b, (i,), te.Intrinsic("exp", (BufferLoad(a, (i,), "f32"),), "f32"))
    func = LoweredFunc("f", (a, b), For(i, c(0), c(8), ForKind.VECTORIZED, body), (), 1,
                       {"flattened": True})
    ramp = Ramp(c(0), c(1), 8, "i64x8")
    assert vectorize.run(func).body == Store(b, (ramp,), te.Intrinsic(
        "exp", (BufferLoad(a, (ramp,), "f32x8"),), "f32x8"))
    a64, b64 = Buffer("A", "f64", (c(16),)), Buffer("B", "f64", (c(16),))
    loop = For(i, c(0), c(8), ForKind.VECTORIZED,
               Store(b64, (i,), te.Intrinsic("exp", (BufferLoad(a64, (i,), "f64"),), "f64")))
    func = LoweredFunc("f", (a64, b64), loop, (), 1, {"flattened": True})
    assert vectorize.run(func).body == loop

@pytest.mark.parametrize("why, body, extent", [
    ("strided", lambda a, b: Store(b, (i,), BufferLoad(a, (mul(i, c(2)),), "f32")), 8),
    ("not a power of two", lambda a, b: Store(b, (i,), BufferLoad(a, (i,), "f32")), 6),
    ("a call", lambda a, b: Store(b, (i,), te.Intrinsic("log", (BufferLoad(a, (i,), "f32"),),
                                                          "f32")), 8),
    ("a guard", lambda a, b: If(te.Compare("<", i, c(5)), Store(b, (i,), c(0.0, "f32"))), 8),
])
def test_vectorize_keeps_the_loop(why, body, extent):
    a, b = Buffer("A", "f32", (c(16),)), Buffer("B", "f32", (c(16),))
    loop = For(i, c(0), c(extent), ForKind.VECTORIZED, body(a, b))
    func = LoweredFunc("f", (a, b), loop, (), 1, {"flattened": True})
    assert vectorize.run(func).body == loop, why


def test_unroll_copies_small_loops():
    b = Buffer("B", "f32", (c(4),))
    loop = For(i, c(0), c(3), ForKind.UNROLLED, Store(b, (i,), c(1.0, "f32")))
    func = simplify_pass.run(unroll.run(LoweredFunc("f", (b,), loop, (), 0)))
    assert func.body == Seq(tuple(Store(b, (c(k),), c(1.0, "f32")) for k in range(3)))
    big = For(i, c(0), c(1000), ForKind.UNROLLED, Store(b, (c(0),), c(1.0, "f32")))
    assert unroll.run(LoweredFunc("f", (b,), big, (), 0)).body == big   # kept, for a pragma



def test_unroll_keeps_a_loop_over_scalar_vector_loops_a_loop():
    """Copies of a vectorized loop that stayed a loop (symbolic extent) are no registers,
    only work for gcc: the unrolled loop around it becomes a plain loop."""
    b = Buffer("B", "f32", (N,))
    inner = For(j, c(0), N, ForKind.VECTORIZED, Store(b, (j,), c(1.0, "f32")))
    loop = For(i, c(0), c(4), ForKind.UNROLLED, inner)
    out = unroll.run(LoweredFunc("f", (b,), loop, (), 0)).body
    assert out == For(i, c(0), c(4), ForKind.SERIAL, inner)

def test_simplify_pass_drops_empty_and_trivial_loops():
    b = Buffer("B", "f32", (c(4),))
    body = Seq((For(i, c(0), c(0), ForKind.SERIAL, Store(b, (i,), c(1.0, "f32"))),
                For(j, c(2), c(1), ForKind.SERIAL, Store(b, (j,), c(2.0, "f32"))),
                If(te.Compare("<", c(1), c(2)), Store(b, (c(3),), c(3.0, "f32")))))
    out = simplify_pass.run(LoweredFunc("f", (b,), body, (), 0)).body
    assert out == Seq((Store(b, (c(2),), c(2.0, "f32")), Store(b, (c(3),), c(3.0, "f32"))))



def test_simplify_pass_keeps_a_one_iteration_parallel_loop_but_not_its_variable():
    """The loop stays (an outlined region), its value goes into the body: an index
    ``256 * i`` becomes the constant a register tile needs."""
    b = Buffer("B", "f32", (c(512),))
    loop = For(i, c(1), c(1), ForKind.PARALLEL, Store(b, (add(mul(i, c(256)), c(3)),),
                                                      c(1.0, "f32")))
    out = simplify_pass.run(LoweredFunc("f", (b,), loop, (), 0)).body
    assert out == For(i, c(1), c(1), ForKind.PARALLEL, Store(b, (c(259),), c(1.0, "f32")))

def test_partition_only_for_vectorized_and_unrolled_guards():
    b = Buffer("B", "f32", (c(20),))
    guard = te.Compare("<", add(mul(io, c(8)), ii), c(20))
    inner = If(guard, Store(b, (add(mul(io, c(8)), ii),), c(1.0, "f32")))
    for kind, parts in ((ForKind.VECTORIZED, 2), (ForKind.UNROLLED, 2), (ForKind.SERIAL, 1)):
        loop = For(io, c(0), c(3), ForKind.SERIAL, For(ii, c(0), c(8), kind, inner))
        out = partition.run(LoweredFunc("f", (b,), loop, (), 0)).body
        assert (len(out.stmts) if isinstance(out, Seq) else 1) == parts


def _tile_with_tail_guard():
    """for blk (parallel): for k: if (blk % 3 * 8 + 7 < 20) B[k] = 1 -- a register tile's
    last row guard after its loops were fused (not linear in blk: partition can't)."""
    b = Buffer("B", "f32", (c(20),))
    guard = te.Compare("<", add(mul(mod(i, c(3)), c(8)), c(7)), c(20))
    body = If(guard, Store(b, (j,), c(1.0, "f32")))
    return b, guard, For(i, c(0), c(6), ForKind.PARALLEL, For(j, c(0), c(20), ForKind.SERIAL,
                                                              body))


def test_unswitch_takes_an_invariant_test_out_of_the_loop():
    b, guard, loop = _tile_with_tail_guard()
    out = unswitch.run(LoweredFunc("f", (b,), loop, (), 0)).body
    assert isinstance(out.body, If) and out.body.cond == guard
    fast, slow = out.body.then, out.body.orelse
    assert fast == For(j, c(0), c(20), ForKind.SERIAL, Store(b, (j,), c(1.0, "f32")))
    assert slow == loop.body                      # the tail keeps its test, once


@pytest.mark.parametrize("why", ["depends on the loop", "reads a buffer", "barrier"])
def test_unswitch_leaves_what_it_must(why):
    b = Buffer("B", "f32", (c(20),))
    if why == "depends on the loop":
        body = If(te.Compare("<", j, c(7)), Store(b, (j,), c(1.0, "f32")))
        loop = For(j, c(0), c(20), ForKind.SERIAL, body)
    else:
        cond = te.Compare("<", BufferLoad(b, (c(0),), "f32"), c(1.0, "f32")) \
            if why == "reads a buffer" else te.Compare("<", i, c(7))
        body = If(cond, Store(b, (j,), c(1.0, "f32")))
        if why == "barrier":
            body = Seq((Barrier(), body))
        loop = For(j, c(0), c(20), ForKind.SERIAL, body)
    assert unswitch.run(LoweredFunc("f", (b,), loop, (), 0)).body == loop


def test_unswitch_does_not_copy_a_huge_loop():
    b, guard, loop = _tile_with_tail_guard()
    inner = loop.body
    big = dataclasses.replace(inner, body=Seq((inner.body,) * (unswitch.MAX_STATEMENTS // 2)))
    assert unswitch.run(LoweredFunc("f", (b,), big, (), 0)).body == big

def test_verify_catches_broken_invariants():
    b = Buffer("B", "f32", (c(4),))
    with pytest.raises(AssertionError, match="not bound"):
        verify.run(LoweredFunc("f", (b,), Store(b, (i,), c(1.0, "f32")), (), 0))
    t = Buffer("T", "f32", (c(4),))
    with pytest.raises(AssertionError, match="allocated"):
        verify.run(LoweredFunc("f", (b,), Store(t, (c(0),), c(1.0, "f32")), (), 0))
    nested = For(i, c(0), c(2), ForKind.SERIAL, For(i, c(0), c(2), ForKind.SERIAL,
                                                   Store(b, (i,), c(1.0, "f32"))))
    with pytest.raises(AssertionError, match="shadows"):
        verify.run(LoweredFunc("f", (b,), nested, (), 0))


def test_dump_ir(monkeypatch, capsys):
    monkeypatch.setenv("TDSL_DUMP_IR", "1")
    fn = vector_add()
    lower(fn, Schedule(fn), shapes={"n": 4})
    err = capsys.readouterr().err
    for name in ("build_nests", "simplify", "partition", "bounds_check", "flatten",
                 "vectorize", "unroll"):
        assert f"--- after {name} ---" in err


def test_vectorize_symbolic_extent_keeps_a_pragma_loop():
    """Vectorizing a loop of unknown extent is legal: it stays a VECTORIZED loop."""
    fn = vector_add()
    func = lower(fn, Schedule(fn).vectorize("C", "x"))
    (loop,) = [s for s in walk_stmt(func.body) if isinstance(s, For)]
    assert loop.kind is ForKind.VECTORIZED and str(loop.extent) == "n"


def test_unrolling_is_bounded_and_refused_early():
    """Unrolled loops nested until the C would take gcc minutes: a ScheduleError naming the
    loop, at lowering (a random schedule once kept gcc busy for 605 s)."""
    import tdsl
    from tdsl.errors import ScheduleError
    op = tdsl.stdlib["matmul"]
    s = op.schedule("naive").split("C", "i", 64).split("C", "j", 64) \
        .reorder("C", "i.o", "j.o", "i.i", "j.i").unroll("C", "i.i").unroll("C", "j.i")
    with pytest.raises(ScheduleError, match="unrolling i.i .* makes .* statements"):
        op.lower(schedule=s, shapes={"M": 128, "N": 128, "K": 8})
    op.lower(schedule=s.split("C", "k", 2), shapes={"M": 8, "N": 8, "K": 8})


@pytest.mark.parametrize("k, m, const, coef_b", [(16, 256, 0, 1), (4, 12, 8, 1), (2, 6, -2, 1),
                                                 (8, 8 * 5, 3, 1), (6, 18, 0, -1)])
def test_a_row_split_off_a_flat_index_divides_out(k, m, const, coef_b):
    """``(k * a + b) // m == a // (m / k)`` and ``(k * a + b) % m == k * (a % (m / k)) + b``
    when ``k`` divides ``m`` and ``0 <= b < k`` (a reshape's flat index split into runs of a
    row: ``(16 * r + l) // 256 == r // 16``), checked at every point of the loops, with a
    constant whose remainder by ``k`` joins ``b``; where ``b`` may leave ``[0, k)`` (a
    negative coefficient) the rule does not apply, and the value is kept all the same."""
    a, b = te.Var("a"), te.Var("b")
    bx = in_loops((a, 40), (b, k - const % k))
    x = add(add(mul(a, c(k)), mul(b, c(coef_b))), c(const))
    for op in (div, mod):
        e = op(x, c(m))
        got = simplify(e, bx)
        for va in range(40):
            for vb in range(k - const % k):
                env = {"a": va, "b": vb}
                assert _value(got, env) == _value(e, env), (str(e), str(got), env)
        if coef_b > 0:
            assert "b" not in str(got) or op is mod
            assert f"// {m // k}" in str(got) or f"% {m // k}" in str(got), str(got)
