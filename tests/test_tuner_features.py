"""The tuner's cost-model features: fixed length, finite, sensitive to the schedule, and right
on programs small enough to check by hand."""
import itertools
import math

import numpy as np
import pytest

import tdsl
from tdsl.errors import ScheduleError
from tdsl.lowering import te
from tdsl.lowering.loop_ir import (AddressOf, Allocate, Barrier, Broadcast, Buffer, BufferLoad,
                                   Call, Evaluate, For, ForKind, If, LetStmt, LoweredFunc, Ramp,
                                   Seq, Store)
from tdsl.lowering.lower import lower
from tdsl.lowering.schedule import TensorIntrin
from tdsl.tuner.features import FEATURE_NAMES, feature_vector, schedule_features

STD = tdsl.load("std")
I64 = "i64"

# (op, attributes, sizes): sizes None leaves every shape variable symbolic
CASES = [
    ("matmul", {}, dict(M=48, N=40, K=24)),
    ("matmul", {}, None),
    ("conv2d", dict(padding=1), dict(N=1, C=8, IH=14, IW=14, F=16, KH=3, KW=3)),
    ("softmax", dict(ranks=2), dict(N=16, D=40)),
    ("depthwise_conv2d", dict(padding=1), dict(N=1, C=8, IH=12, IW=12, KH=3, KW=3)),
    ("add", dict(ranks=3), dict(S0=2, S1=6, S2=40)),
    ("gelu", dict(ranks=2), None),
]


def log(x):
    return math.log2(1 + x)


def features(vec) -> dict:
    return dict(zip(FEATURE_NAMES, vec))


def check_vector(v):
    assert isinstance(v, np.ndarray) and v.dtype == np.float64
    assert v.shape == (len(FEATURE_NAMES),)
    assert np.isfinite(v).all()


def test_names_are_unique():
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)


@pytest.mark.parametrize("name,attrs,shapes", CASES)
@pytest.mark.parametrize("which", [None, "auto", "naive"])
def test_fixed_length_and_finite(name, attrs, shapes, which):
    sched = STD[name].schedule(which, **attrs)
    v = schedule_features(sched, None, shapes)
    check_vector(v)
    assert v.any()
    np.testing.assert_array_equal(v, schedule_features(sched, None, shapes))  # deterministic
    # the fully lowered program (vectorized, unrolled, flattened) is read too
    check_vector(feature_vector(lower(sched.fn, sched, None, shapes)))


def test_matmul_configs_give_different_vectors():
    """Every legal configuration of the std matmul template is a different loop program."""
    sched = STD["matmul"].schedule()
    knobs = {k.name: k.choices for k in sched.knobs}
    assert {"ti", "tj"} <= set(knobs)
    shapes = dict(M=256, N=256, K=256)
    vectors = []
    for values in itertools.product(*knobs.values()):
        try:
            vectors.append(schedule_features(sched, dict(zip(knobs, values)), shapes).tobytes())
        except ScheduleError:
            continue                # a configuration the template's constraints refuse
    assert len(vectors) >= 16
    assert len(set(vectors)) == len(vectors)


def test_a_register_tile_schedule_is_read():
    """The std matmul schedule's shape, written here so the test does not follow the template:
    a local 8 x 64 tile, vectorized by 16, unrolled, row blocks in parallel."""
    sched = (STD["matmul"].schedule("naive").cache_write("C", "local")
             .tile("C", "i", "j", 8, 64).compute_at("C.local", "C", "j.o")
             .split("C.local", "j", 16).reorder("C.local", "k", "i", "j.o", "j.i")
             .unroll("C.local", "i").unroll("C.local", "j.o").vectorize("C.local", "j.i")
             .parallel("C", "i.o"))
    f = features(schedule_features(sched, None, dict(M=1024, N=1024, K=1024)))
    # innermost first: j.i (16, vectorized), j.o (4, unrolled), i (8, unrolled), k, j.o, i.o
    kinds = ["vectorized", "unrolled", "unrolled", "serial", "serial", "parallel"]
    extents = [16, 4, 8, 1024, 16, 128]
    for level, (kind, extent) in enumerate(zip(kinds, extents)):
        assert f[f"L{level}.{kind}"] == 1.0
        assert f[f"L{level}.extent"] == log(extent)
    assert f["out.local"] == 1.0 and f["in0.local"] == 0.0            # C.local, then A and B
    assert f["L3.in0.stride"] == log(1) and f["L3.in1.stride"] == log(1024)   # along k
    assert f["L2.in0.bytes"] == log(8 * 4)              # A: 8 rows of one column
    assert f["prog.local_bytes"] == log(8 * 64 * 4)
    assert f["stmt.flops"] == f["prog.flops"] == log(2 * 1024 ** 3)


def naive_matmul(parallel: bool):
    sched = STD["matmul"].schedule("naive")
    if parallel:
        sched = sched.parallel("C", "i")
    return features(schedule_features(sched, None, dict(M=4, N=8, K=16)))


def test_naive_matmul_by_hand():
    """``for i in 4: for j in 8: C[i, j] = 0; for k in 16: C[i, j] += A[i, k] * B[k, j]``,
    A 4 x 16, B 16 x 8, C 4 x 8, all f32: the update is the main statement."""
    f = naive_matmul(parallel=False)
    # strides in elements, innermost loop first: k, j, i
    assert [f[f"L{n}.out.stride"] for n in range(3)] == [log(0), log(1), log(8)]
    assert [f[f"L{n}.in0.stride"] for n in range(3)] == [log(1), log(0), log(16)]
    assert [f[f"L{n}.in1.stride"] for n in range(3)] == [log(8), log(1), log(0)]
    assert [f[f"L{n}.extent"] for n in range(4)] == [log(16), log(8), log(4), 0.0]
    assert all(f[f"L{n}.serial"] == 1.0 for n in range(3))
    assert not any(f[f"L{n}.{k}"] for n in range(6) for k in ("parallel", "vectorized",
                                                                 "unrolled"))
    # bytes touched from each loop inward: C one element, then a row, then all of it ...
    assert [f[f"L{n}.out.bytes"] for n in range(3)] == [log(4), log(32), log(128)]
    assert [f[f"L{n}.in1.bytes"] for n in range(3)] == [log(64), log(512), log(512)]
    # ... and reused 16 times (k) per element, for A 8 times (j) once j is inside
    assert [f[f"L{n}.out.reuse"] for n in range(3)] == [log(16), log(16), log(16)]
    assert [f[f"L{n}.in0.reuse"] for n in range(3)] == [log(1), log(8), log(8)]
    # past the outermost loop the whole-nest values repeat
    assert f["L5.in1.bytes"] == f["in1.bytes"] == log(512) and f["L5.in1.stride"] == 0.0
    assert f["stmt.flops"] == log(2 * 4 * 8 * 16) and f["stmt.ops"] == log(2)
    assert f["prog.flops"] == log(2 * 4 * 8 * 16)     # the init stores add no operations
    assert f["stmt.work_share"] == 1.0
    assert f["prog.stmts"] == log(2) and f["prog.loops"] == log(3)
    assert f["prog.allocs"] == 0.0 and f["prog.parallel_loops"] == 0.0
    # flops over the bytes of C, A and B (the init touches C once more)
    assert f["prog.intensity"] == log(1024 / (128 + 128 + 256 + 512))


def test_parallel_one_hot():
    f = naive_matmul(parallel=True)
    assert f["L2.parallel"] == 1.0 and f["L2.serial"] == 0.0
    assert f["L1.parallel"] == 0.0 and f["L0.parallel"] == 0.0
    assert f["stmt.parallel"] == log(4) and f["prog.parallel_loops"] == log(1)


def test_tensorized_call_counts_the_intrinsic_work():
    a, b = te.placeholder("a", (4,)), te.placeholder("b", (4, 8))
    kk = te.reduce_axis(4, "kk")
    c = te.compute("c", (8,), lambda j: te.reduce("sum", a[kk.var] * b[kk.var, j], kk), ["jj"])
    gemv = TensorIntrin("gemv_4x8", te.Function("gemv", (a, b), (c,)), "/* C */")
    sched = (STD["matmul"].schedule("naive").split("C", "j", 8).split("C", "k", 4)
             .reorder("C", "i", "j.o", "k.o", "k.i", "j.i").tensorize("C", "k.i", gemv))
    f = features(schedule_features(sched, None, dict(M=3, N=16, K=8)))
    assert f["prog.calls"] == log(1)
    # the call does 4 * 8 multiply-adds (2 operations each), 3 * 2 * 2 times
    assert f["stmt.flops"] == f["prog.flops"] == log(3 * 2 * 2 * 4 * 8 * 2)


def test_every_statement_kind_is_read():
    """A hand-built program with each statement and vector expression of the loop IR."""
    n, i, t, v = te.Var("n"), te.Var("i"), te.Var("t"), te.Var("v")
    X = Buffer("X", "f32", (n,))
    Y = Buffer("Y", "f32", (te.Const(64, I64),))
    S = Buffer("S", "f32", (te.Const(16, I64),), scope="shared")
    one, c16 = te.Const(1, I64), te.Const(16, I64)
    load = BufferLoad(X, (te.Binary("+", i, v, I64),), "f32")
    vec = Store(Y, (Ramp(te.Binary("*", i, c16, I64), one, 16, "i64x16"),),
                Broadcast(te.Const(0.0, "f32"), 16, "f32x16"))
    body = Seq((
        Barrier(),
        LetStmt(v, te.Binary("*", t, te.Const(2, I64), I64), Seq((
            If(te.Compare("<", i, te.Const(4, I64)),
               Store(S, (i,), te.Binary("*", load, load, "f32")),
               Evaluate(Call("opaque", (AddressOf(S, i), 3)))),
            Evaluate(te.Const(0, I64)),
        ))),
        vec,
    ))
    inner = For(i, te.Const(0, I64), te.Binary("//", n, c16, I64), ForKind.UNROLLED,
                Allocate(S, body))
    outer = For(t, te.Const(0, I64), te.Const(4, I64), ForKind.THREAD_BINDING,
                For(te.Var("w"), te.Const(0, I64), te.Const(2, I64), ForKind.VTHREAD, inner),
                thread_tag="threadIdx.x")
    func = LoweredFunc("every", (X, Y), outer, (n,), num_inputs=1)
    f = features(feature_vector(func))
    check_vector(np.array(list(f.values())))
    assert f["prog.barriers"] == log(1) and f["prog.calls"] == log(1)
    assert f["prog.allocs"] == log(1) and f["prog.local_bytes"] == log(64)
    # n // 16 with n unbound counts n as 64: 4 iterations; X[i + 2 t] moves by 2 along t
    assert f["L0.extent"] == log(4) and f["L0.unrolled"] == 1.0
    assert f["L1.unrolled"] == 1.0 and f["L2.parallel"] == 1.0     # vthread; thread axis
    assert f["L0.in0.stride"] == log(1) and f["L2.in0.stride"] == log(2)


def test_nothing_stored():
    func = LoweredFunc("empty", (), Seq(()))
    v = feature_vector(func)
    check_vector(v)
    assert not v.any()
