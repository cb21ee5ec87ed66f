"""promote_accumulators: a chunked sum's partial sums live in registers across each chunk.

The pass is checked on hand-made loop IR (what it promotes, what it must leave alone, and
that the interpreter computes the same values before and after), and end to end on the
blocked 1x1 convolution's chunked schedule (kc > 0), against the numpy reference and in the
C it prints."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl
from tdsl.emit_c import emit_c
from tdsl.lowering import interp, te
from tdsl.lowering.loop_ir import (Allocate, Buffer, BufferLoad, For, ForKind, If, LoweredFunc,
                                   Ramp, Seq, Store, walk_stmt)
from tdsl.lowering.passes import promote_accumulators

I = "i64"
k, t = te.Var("k"), te.Var("t")


def c(v):
    return te.Const(v, I)


def add(a, b):
    return te.Binary("+", a, b, I)


def mul(a, b):
    return te.Binary("*", a, b, I)


def ramp(base, lanes=4):
    return Ramp(base, c(1), lanes, f"i64x{lanes}")


def chunk_sum(offsets=(0, 4), index_of=None, guard=None, extent=c(8), lanes=4):
    """``for t in [0, 2): for k in [0, extent): Y[t*8 + off ..] += X[k*4 ..]`` over
    ``offsets``: X is [32], Y is [16]."""
    x = Buffer("X", "f32", (c(32),))
    y = Buffer("Y", "f32", (c(16),))
    stores = []
    for off in offsets:
        at = ramp(index_of(off) if index_of else add(mul(t, c(8)), c(off)), lanes)
        value = te.Binary("+", BufferLoad(y, (at,), f"f32x{lanes}"),
                          BufferLoad(x, (ramp(mul(k, c(4)), lanes),), f"f32x{lanes}"),
                          f"f32x{lanes}")
        store = Store(y, (at,), value)
        stores.append(If(guard, store) if guard is not None else store)
    inner = For(k, c(0), extent, ForKind.SERIAL, Seq(tuple(stores)))
    body = For(t, c(0), c(2), ForKind.SERIAL, inner)
    return LoweredFunc("f", (x, y), body, (), 1, {"flattened": True})


def tiles(func):
    return [s.buffer for s in walk_stmt(func.body) if isinstance(s, Allocate)]


def y_accesses_inside_k(func):
    loop = next(s for s in walk_stmt(func.body) if isinstance(s, For) and s.var is k)
    out = [s for s in walk_stmt(loop.body) if isinstance(s, Store) and s.buffer.name == "Y"]
    for s in walk_stmt(loop.body):
        if isinstance(s, Store):
            out += [e for e in te.walk(s.value)
                    if isinstance(e, BufferLoad) and e.buffer.name == "Y"]
    return out


def run_both(func):
    x = np.arange(32, dtype=np.float32)
    y = np.linspace(-1, 1, 16, dtype=np.float32)
    before = interp.run(func, [x, y.copy()])
    after = interp.run(promote_accumulators.run(func), [x, y.copy()])
    return before, after


def test_invariant_slots_move_to_a_local_tile_around_the_loop():
    func = chunk_sum()
    out = promote_accumulators.run(func)
    [tile] = tiles(out)
    assert tile.scope == "local" and tile.shape == (c(8),)     # two vectors of 4
    assert not y_accesses_inside_k(out)                        # the loop reads the tile only
    for a, b in zip(*run_both(func)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("why, func", [
    ("the index reads the loop's variable",
     chunk_sum(index_of=lambda off: add(mul(k, c(0)), add(k, c(off))))),
    ("two slots overlap", chunk_sum(offsets=(0, 2))),
    ("an access is under an If", chunk_sum(guard=te.Compare("<", t, c(1), "bool"))),
])
def test_left_alone(why, func):
    out = promote_accumulators.run(func)
    assert out.body == func.body, why
    for a, b in zip(*run_both(func)):
        np.testing.assert_array_equal(a, b)


def test_a_buffer_allocated_inside_the_loop_stays_there():
    x = Buffer("X", "f32", (c(32),))
    y = Buffer("Y", "f32", (c(32),))
    tmp = Buffer("T", "f32", (c(4),), "global")
    load = BufferLoad(x, (ramp(mul(k, c(4))),), "f32x4")
    body = Allocate(tmp, Seq((Store(tmp, (ramp(c(0)),), load),
                              Store(y, (ramp(mul(k, c(4))),),
                                    BufferLoad(tmp, (ramp(c(0)),), "f32x4")))))
    func = LoweredFunc("f", (x, y), For(k, c(0), c(8), ForKind.SERIAL, body), (), 1,
                       {"flattened": True})
    assert promote_accumulators.run(func).body == func.body


def test_a_loop_that_may_not_run_touches_nothing():
    """With a symbolic extent the tile's loads and stores happen only if the loop runs: at
    extent 0 the interpreter would fault on nothing, and Y is unchanged."""
    n = te.Var("n")
    func = chunk_sum(extent=n)
    func = LoweredFunc(func.name, func.params, func.body, (n,), 1, func.attrs)
    out = promote_accumulators.run(func)
    assert any(isinstance(s, If) for s in walk_stmt(out.body))
    x = np.arange(32, dtype=np.float32)
    y = np.linspace(-1, 1, 16, dtype=np.float32)
    for extent in (0, 3):
        [want] = interp.run(func, [x, y.copy()], {"n": extent})
        [got] = interp.run(out, [x, y.copy()], {"n": extent})
        np.testing.assert_array_equal(got, want)


L = 16      # the channel block of the cases below (any lanes: the schedule reads the target)


@settings(max_examples=6, deadline=None)
@given(cb=st.integers(1, 9), fb=st.integers(1, 6), h=st.integers(1, 9), w=st.integers(1, 16),
       nb=st.sampled_from([1, 2, 3, 4]), kc=st.sampled_from([2, 4, 8]),
       ry=st.sampled_from([1, 2, 4, 7]), tx=st.sampled_from([3, 7]), fixed=st.booleans())
def test_chunked_1x1_conv_matches_the_reference(cb, fb, h, w, nb, kc, ry, tx, fixed):
    op = tdsl.stdlib["conv2d_nchwc_valid"]
    rng = np.random.default_rng(cb * 100 + fb * 10 + h)
    x = rng.standard_normal((1, cb, h, w, L)).astype(np.float32)
    wt = rng.standard_normal((fb, cb, 1, 1, L, L)).astype(np.float32)
    shapes = dict(N=1, CB=cb, IH=h, IW=w, CI=L, FB=fb, KH=1, KW=1, FI=L) if fixed else None
    kernel = op.build(shapes=shapes, specialize=False,
                      config=dict(nb=nb, tx=tx, ty=1, order="crs", rows=1, kc=kc, ry=ry))
    np.testing.assert_allclose(kernel(x, wt), op.reference(x, wt), rtol=1e-4, atol=1e-4)


def test_chunked_1x1_conv_keeps_its_accumulators_in_named_vectors():
    """ResNet-50's 512 -> 128 1x1 at 28x28 on a 32-register target: the default schedule
    chunks the sum (4 input blocks at a time) and the tile of 4 x 7 vectors is promoted."""
    op = tdsl.stdlib["conv2d_nchwc_valid"]
    target = tdsl.Target("c -march=x86-64-v4 -l1=49152")
    shapes = dict(N=1, CB=32, IH=28, IW=28, CI=target.lanes, FB=8, KH=1, KW=1,
                  FI=target.lanes)
    defaults = op.schedule(target=target, shapes=shapes).default_config()
    assert defaults["kc"] > 0 and defaults["nb"] * defaults["tx"] <= target.registers - 2
    source = emit_c(op.lower(shapes=shapes, target=target), target=target).source
    assert "YL_acc_27" in source and "YL_acc_28" not in source


@pytest.mark.parametrize("channels, stride, march, chunked", [
    (256, 1, "x86-64-v4", False),   # two blocks' weights, 32 KiB, fit L1: one pass
    (512, 1, "x86-64-v4", True),    # 64 KiB do not
    (512, 2, "x86-64-v4", False),   # stride 2 read half of each row: chunks were slower
    (512, 1, "x86-64-v3", False),   # 16 registers: not measured, the 4 x 3 tile stays
])
def test_the_sum_is_chunked_where_the_tiles_weights_leave_l1(channels, stride, march,
                                                              chunked):
    target = tdsl.Target(f"c -march={march} -l1=32768")
    lanes = target.lanes
    shapes = dict(N=1, CB=channels // lanes, IH=28, IW=28, CI=lanes, FB=128 // lanes,
                  KH=1, KW=1, FI=lanes)
    cfg = tdsl.stdlib["conv2d_nchwc_valid"].schedule(target=target, shapes=shapes,
                                                     stride=stride).default_config()
    assert (cfg["kc"] > 0) == chunked
    assert cfg["ry"] == (4 if chunked else 1)   # 4 rows of 28: the partial sums in L1
