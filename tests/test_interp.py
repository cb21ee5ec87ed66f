"""The loop-IR interpreter: hand-built programs, its checks and its semantics."""
import numpy as np
import pytest

from tdsl.errors import CallError
from tdsl.lowering import te
from tdsl.lowering.interp import OutOfBounds, run
from tdsl.lowering.loop_ir import (AddressOf, Allocate, Broadcast, Buffer, BufferLoad, Call,
                                   Evaluate, For, ForKind, If, LoweredFunc, Ramp, Seq, Store)

I = "i64"


def c(v, dt=I):
    return te.Const(v, dt)


def loop(var, n, body, kind=ForKind.SERIAL):
    return For(var, c(0), n if isinstance(n, te.Expr) else c(n), kind, body)


def copy_func(n_in, n_out, index):
    """``B[i] = A[index(i)]`` for i in [0, n_out)."""
    a, b = Buffer("A", "f32", (c(n_in),)), Buffer("B", "f32", (c(n_out),))
    i = te.Var("i")
    body = loop(i, n_out, Store(b, (i,), BufferLoad(a, (index(i),), "f32")))
    return LoweredFunc("copy", (a, b), body, (), 1)


def test_copy_and_shift():
    f = copy_func(8, 6, lambda i: te.Binary("+", i, c(2), I))
    a = np.arange(8, dtype=np.float32)
    (out,) = run(f, [a])
    np.testing.assert_array_equal(out, a[2:])


def test_out_of_bounds_load_raises():
    f = copy_func(8, 7, lambda i: te.Binary("+", i, c(2), I))
    with pytest.raises(OutOfBounds, match="A"):
        run(f, [np.zeros(8, np.float32)])


def test_negative_index_raises():
    f = copy_func(8, 3, lambda i: te.Binary("-", i, c(1), I))
    with pytest.raises(OutOfBounds):
        run(f, [np.zeros(8, np.float32)])


def test_out_of_bounds_per_dimension_before_flattening():
    """A multi-dimensional access is checked per dimension: [0, 5] in a 4x4 buffer is out,
    even though its flat offset 5 is inside."""
    a, b = Buffer("A", "f32", (c(4), c(4))), Buffer("B", "f32", (c(1),))
    body = Store(b, (c(0),), BufferLoad(a, (c(0), c(5)), "f32"))
    with pytest.raises(OutOfBounds):
        run(LoweredFunc("f", (a, b), body, (), 1), [np.zeros((4, 4), np.float32)])


def test_floor_division_and_modulo_like_python():
    a, b = Buffer("A", "i32", (c(6),)), Buffer("B", "i32", (c(6),))
    i = te.Var("i")
    x = BufferLoad(a, (i,), "i32")
    val = te.Binary("+", te.Binary("//", x, c(3, "i32"), "i32"),
                    te.Binary("*", te.Binary("%", x, c(4, "i32"), "i32"), c(10, "i32"), "i32"),
                    "i32")
    f = LoweredFunc("f", (a, b), loop(i, 6, Store(b, (i,), val)), (), 1)
    x = np.array([-7, -1, 0, 5, 7, -12], np.int32)
    (out,) = run(f, [x])
    np.testing.assert_array_equal(out, x // 3 + (x % 4) * 10)


def test_select_is_lazy():
    """The untaken branch of a select is not evaluated, so a guarded load never faults."""
    a, b = Buffer("A", "f32", (c(4),)), Buffer("B", "f32", (c(5),))
    i = te.Var("i")
    ok = te.Compare("<", i, c(4))
    val = te.Select(ok, BufferLoad(a, (i,), "f32"), c(-1.0, "f32"), "f32")
    f = LoweredFunc("f", (a, b), loop(i, 5, Store(b, (i,), val)), (), 1)
    (out,) = run(f, [np.arange(4, dtype=np.float32)])
    np.testing.assert_array_equal(out, [0, 1, 2, 3, -1])


def test_and_short_circuits():
    a, b = Buffer("A", "f32", (c(4),)), Buffer("B", "bool", (c(6),))
    i = te.Var("i")
    cond = te.Logical("and", te.Compare("<", i, c(4)),
                      te.Compare(">", BufferLoad(a, (i,), "f32"), c(1.0, "f32")))
    f = LoweredFunc("f", (a, b), loop(i, 6, Store(b, (i,), cond)), (), 1)
    (out,) = run(f, [np.arange(4, dtype=np.float32)])
    np.testing.assert_array_equal(out, [False, False, True, True, False, False])


def test_vectors_ramp_broadcast_and_predicate():
    a, b = Buffer("A", "f32", (c(8),)), Buffer("B", "f32", (c(8),))
    ramp = Ramp(c(0), c(1), 8, "i64x8")
    load = BufferLoad(a, (ramp,), "f32x8")
    val = te.Binary("*", load, Broadcast(c(2.0, "f32"), 8, "f32x8"), "f32x8")
    f = LoweredFunc("f", (a, b), Store(b, (ramp,), val), (), 1)
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(run(f, [x])[0], 2 * x)
    # A masked load reads nothing where its predicate is false, even out of bounds.
    shifted = Ramp(c(4), c(1), 8, "i64x8")
    pred = te.Compare("<", shifted, Broadcast(c(8), 8, "i64x8"))
    masked = BufferLoad(a, (shifted,), "f32x8", pred)
    g = LoweredFunc("g", (a, b), Store(b, (ramp,), masked), (), 1)
    np.testing.assert_array_equal(run(g, [x])[0], [4, 5, 6, 7, 0, 0, 0, 0])
    h = LoweredFunc("h", (a, b), Store(b, (ramp,), dataclass_replace(masked, None)), (), 1)
    with pytest.raises(OutOfBounds):
        run(h, [x])


def dataclass_replace(load, pred):
    return BufferLoad(load.buffer, load.indices, load.dtype, pred)


def test_local_allocation_is_fresh_and_junk():
    """A local buffer starts as NaN: reading an element nobody wrote shows in the result."""
    a, b = Buffer("A", "f32", (c(2),)), Buffer("B", "f32", (c(2),))
    t = Buffer("t", "f32", (c(2),), "local")
    i = te.Var("i")
    body = Allocate(t, Seq((Store(t, (c(0),), c(1.0, "f32")),
                            loop(i, 2, Store(b, (i,), BufferLoad(t, (i,), "f32"))))))
    (out,) = run(LoweredFunc("f", (a, b), body, (), 1), [np.zeros(2, np.float32)])
    assert out[0] == 1.0 and np.isnan(out[1])


def test_unwritten_output_is_junk():
    f = copy_func(4, 4, lambda i: i)
    f = LoweredFunc("f", f.params, Seq(()), (), 1)
    assert np.isnan(run(f, [np.zeros(4, np.float32)])[0]).all()


def test_shape_variables_from_arguments():
    n = te.Var("N")
    a, b = Buffer("A", "f32", (te.Binary("+", n, c(2), I),)), Buffer("B", "f32", (n,))
    i = te.Var("i")
    body = loop(i, n, Store(b, (i,), BufferLoad(a, (te.Binary("+", i, c(2), I),), "f32")))
    f = LoweredFunc("f", (a, b), body, (n,), 1)
    x = np.arange(9, dtype=np.float32)
    np.testing.assert_array_equal(run(f, [x])[0], x[2:])


def test_bad_arguments_are_call_errors():
    f = copy_func(4, 4, lambda i: i)
    with pytest.raises(CallError, match="f32"):
        run(f, [np.zeros(4, np.float64)])
    with pytest.raises(CallError, match="dimension 0 is 5 but must be 4"):
        run(f, [np.zeros(5, np.float32)])
    with pytest.raises(CallError):
        run(f, [])


def test_output_passed_in_is_written():
    f = copy_func(4, 4, lambda i: i)
    out = np.zeros(4, np.float32)
    run(f, [np.ones(4, np.float32), out])
    np.testing.assert_array_equal(out, 1)


def test_parallel_and_unrolled_loops_run_serially():
    a, b = Buffer("A", "f32", (c(4),)), Buffer("B", "f32", (c(4),))
    i = te.Var("i")
    for kind in (ForKind.PARALLEL, ForKind.UNROLLED, ForKind.VECTORIZED,
                 ForKind.THREAD_BINDING):
        f = LoweredFunc("f", (a, b), loop(i, 4, Store(b, (i,), BufferLoad(a, (i,), "f32")),
                                          kind), (), 1)
        np.testing.assert_array_equal(run(f, [np.arange(4, dtype=np.float32)])[0],
                                      np.arange(4))


def test_rank0_scalar_input():
    s, b = Buffer("s", "f32", ()), Buffer("B", "f32", (c(3),))
    i = te.Var("i")
    f = LoweredFunc("f", (s, b), loop(i, 3, Store(b, (i,), BufferLoad(s, (), "f32"))), (), 1)
    np.testing.assert_array_equal(run(f, [np.float32(2.5)])[0], [2.5] * 3)


def test_if_else():
    a, b = Buffer("A", "f32", (c(1),)), Buffer("B", "f32", (c(4),))
    i = te.Var("i")
    body = loop(i, 4, If(te.Compare("<", i, c(2)), Store(b, (i,), c(1.0, "f32")),
                         Store(b, (i,), c(2.0, "f32"))))
    f = LoweredFunc("f", (a, b), body, (), 1)
    np.testing.assert_array_equal(run(f, [np.zeros(1, np.float32)])[0], [1, 1, 2, 2])


def test_call_outside_view_raises():
    """A micro-kernel call whose strided view would leave the buffer is refused."""
    from tdsl.lowering.schedule import TensorIntrin
    x = te.placeholder("x", (4,))
    y = te.compute("y", (4,), lambda j: x[j] * 2.0, ["j"])
    intrin = TensorIntrin("twice4", te.Function("twice", (x,), (y,)), "")
    a, b = Buffer("A", "f32", (c(6),)), Buffer("B", "f32", (c(6),))
    call = Call("twice4", (AddressOf(a, c(0)), c(1), AddressOf(b, c(1)), c(1)))
    f = LoweredFunc("f", (a, b), Evaluate(call), (), 1, {"tensor_intrinsics":
                                                         {"twice4": intrin}})
    out = np.zeros(6, np.float32)
    run(f, [np.arange(6, dtype=np.float32), out])
    np.testing.assert_array_equal(out, [0, 0, 2, 4, 6, 0])
    bad = LoweredFunc("f", (a, b), Evaluate(Call("twice4", (AddressOf(a, c(3)), c(1),
                                                            AddressOf(b, c(0)), c(1)))),
                      (), 1, f.attrs)
    with pytest.raises(OutOfBounds):
        run(bad, [np.arange(6, dtype=np.float32)])
