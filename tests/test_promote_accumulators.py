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
    """ResNet-50's 512 -> 128 1x1 at 28x28: the default schedule chunks the sum and the
    tile's nb x tx vectors are promoted, each a named vector variable."""
    op = tdsl.stdlib["conv2d_nchwc_valid"]
    for march in ("x86-64-v4", "x86-64-v3"):
        target = tdsl.Target(f"c -march={march} -l1=49152")
        shapes = dict(N=1, CB=512 // target.lanes, IH=28, IW=28, CI=target.lanes,
                      FB=128 // target.lanes, KH=1, KW=1, FI=target.lanes)
        cfg = op.schedule(target=target, shapes=shapes).default_config()
        vectors = cfg["nb"] * cfg["tx"]
        assert cfg["kc"] > 0 and vectors <= target.registers - 2
        source = emit_c(op.lower(shapes=shapes, target=target), target=target).source
        assert f"YL_acc_{vectors - 1}" in source and f"YL_acc_{vectors}" not in source


# (op, kernel size, input channels, stride, -march, chunked, rows of partial sums) at 28x28
# with 128 filters and a 32 KiB L1: chunked where the one-pass tile's weights (nb blocks of
# filters over the whole sum) pass L1, on either register count
CHUNKING = [
    ("conv2d_nchwc_valid", 1, 256, 1, "x86-64-v4", False, 1),  # 2 x 256 x 16 floats: 32 KiB
    ("conv2d_nchwc_valid", 1, 512, 1, "x86-64-v4", True, 4),   # 64 KiB
    ("conv2d_nchwc_valid", 1, 512, 2, "x86-64-v4", True, 7),   # 14 output rows: 7 at a time
    ("conv2d_nchwc_valid", 1, 256, 1, "x86-64-v3", False, 1),  # 4 x 256 x 8 floats: 32 KiB
    ("conv2d_nchwc_valid", 1, 512, 1, "x86-64-v3", True, 4),
    ("conv2d_nchwc", 3, 16, 1, "x86-64-v4", False, 1),          # 2 x 16 x 9 x 16: 18 KiB
    ("conv2d_nchwc", 3, 64, 2, "x86-64-v4", True, 7),
    ("conv2d_nchwc", 3, 64, 1, "x86-64-v3", True, 4),
]


@pytest.mark.parametrize("op, k, channels, stride, march, chunked, rows", CHUNKING)
def test_the_sum_is_chunked_where_the_tiles_weights_leave_l1(op, k, channels, stride, march,
                                                              chunked, rows):
    target = tdsl.Target(f"c -march={march} -l1=32768")
    lanes = target.lanes
    shapes = dict(N=1, CB=channels // lanes, IH=28, IW=28, CI=lanes, FB=128 // lanes,
                  KH=k, KW=k, FI=lanes)
    attrs = {"stride": stride, **({"padding": 1} if k == 3 else {})}
    cfg = tdsl.stdlib[op].schedule(target=target, shapes=shapes, **attrs).default_config()
    assert (cfg["kc"] > 0) == chunked
    assert cfg["ry"] == rows


@settings(max_examples=6, deadline=None)
@given(cb=st.integers(1, 5), fb=st.integers(1, 5), h=st.integers(1, 9), w=st.integers(1, 16),
       stride=st.sampled_from([1, 2]), kc=st.sampled_from([1, 2, 4]),
       ry=st.sampled_from([1, 2, 7]), fixed=st.booleans())
def test_chunked_3x3_conv_matches_the_reference(cb, fb, h, w, stride, kc, ry, fixed):
    op = tdsl.stdlib["conv2d_nchwc"]
    rng = np.random.default_rng(cb * 100 + fb * 10 + h)
    x = rng.standard_normal((1, cb, h, w, L)).astype(np.float32)
    wt = rng.standard_normal((fb, cb, 3, 3, L, L)).astype(np.float32)
    attrs = dict(padding=1, stride=stride)
    shapes = op.sizes_of(x, wt, **attrs) if fixed else None
    config = dict(op.schedule(shapes=shapes, **attrs).default_config(), ty=1, order="crs",
                  rows=False, kc=kc, ry=ry)
    kernel = op.build(shapes=shapes, specialize=False, config=config, **attrs)
    np.testing.assert_allclose(kernel(x, wt), op.reference(x, wt, **attrs), rtol=1e-4,
                               atol=1e-3)


@pytest.mark.parametrize("op, k", [("conv2d_nchwc_valid", 1), ("conv2d_nchwc", 3)])
def test_the_chunked_default_holds_for_inputs_narrower_than_the_stride(op, k):
    """ry's default divides by the output's width (IW // stride): a 1-pixel input at stride
    2 (a Conv3d's depth folded into the batch, a pooled map) made that 0 and the default a
    division by zero. It is at least one row now."""
    target = tdsl.Target("c -march=x86-64-v4 -l1=32768")
    lanes = target.lanes
    shapes = dict(N=1, CB=512 // lanes, IH=1, IW=1, CI=lanes, FB=128 // lanes, KH=k, KW=k,
                  FI=lanes)
    attrs = {"stride": 2, **({"padding": 1} if k == 3 else {})}
    cfg = tdsl.stdlib[op].schedule(target=target, shapes=shapes, **attrs).default_config()
    assert cfg["kc"] > 0 and cfg["ry"] == 1
