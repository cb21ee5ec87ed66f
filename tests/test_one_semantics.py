"""Builds and calls that the reference refuses are refused by kernels too, at build time
where the mistake is already visible then (issue 9): a schedule applied to another op,
attributes that make a size undefined."""
import math
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.errors import CallError, ScheduleError
from tdsl.lowering.dtypes import to_numpy

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

TWO_OPS = """
op negate(X: f32[N]) -> Y: f32[N] { Y[i] = -X[i] }
op double(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * 2.0 }
"""


def test_a_schedule_belongs_to_its_op():
    m = tdsl.loads(TWO_OPS)
    with pytest.raises(ScheduleError, match="made for op double, not for negate"):
        m["negate"].lower(schedule=m["double"].schedule())


def test_a_schedule_belongs_to_its_attributes():
    op = tdsl.stdlib["max_pool2d"]
    s = op.schedule(kernel=2, stride=2)
    op.lower(schedule=s)                         # the schedule's own attributes
    op.lower(schedule=s, kernel=2, stride=2)
    with pytest.raises(ScheduleError, match="other attributes"):
        op.lower(schedule=s, kernel=2, stride=1)


@pytest.mark.parametrize("name, attrs, shape", [
    ("max_pool2d", {"kernel": 2, "stride": 0}, (1, 1, 4, 4)),
    ("conv2d", {"stride": 0}, None)])
def test_stride_zero_is_refused_at_build_with_the_reference_error(name, attrs, shape):
    op = tdsl.stdlib[name]
    args = [np.ones(shape, np.float32)] if shape else \
        [np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)]
    with pytest.raises(CallError, match="divides by zero"):
        op.reference(*args, **attrs)
    with pytest.raises(CallError, match="divides by zero"):
        op.lower(**attrs)


BOOLS = """
op to_int(M: bool[N]) -> Y: i32[N] { Y[i] = i32(M[i]) }
op same(M: bool[N], Q: bool[N]) -> Y: bool[N] { Y[i] = M[i] == Q[i] }
"""


@needs_gcc
def test_bool_bytes_other_than_0_and_1_mean_true_everywhere():
    m = tdsl.loads(BOOLS)
    raw = np.array([0, 1, 2, 255, 2, 0, 128, 1] * 4, np.uint8)
    mask, truth = raw.view(np.bool_), raw != 0
    for name, args, want in [("to_int", (mask,), truth.astype(np.int32)),
                             ("same", (mask, np.ones(32, bool)), truth)]:
        np.testing.assert_array_equal(m[name].reference(*args), want)
        np.testing.assert_array_equal(m[name].build()(*args), want)


SUBTRACTED = """
op conv1d_valid(X: f32[N], Wt: f32[K]) -> Y: f32[N - K + 1] {
    Y[i] = sum[k](X[i + k] * Wt[k])
}
op halves(X: f32[N]) -> (Lo: f32[N // 2], Hi: f32[N - N // 2]) {
    Lo[i] = X[i]
    Hi[i] = X[N // 2 + i]
}
"""


@needs_gcc
def test_one_size_binder_for_subtracted_and_halved_sizes():
    """The docs' examples: random inputs (tdsl run/test/tune), kernels, the interpreter and
    the reference all bind N - K + 1 and N - N // 2 (three binders used to disagree)."""
    from tdsl.arrays import random_arguments
    from tdsl.lowering import interp
    m = tdsl.loads(SUBTRACTED)
    for name, sizes in [("conv1d_valid", {"N": 9, "K": 3}), ("halves", {"N": 7})]:
        op = m[name]
        args = random_arguments(op, sizes, {})
        want = op.reference(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = op.build()(*args)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5)
        for g, w in zip(interp.run(op.lower(), args), want):
            np.testing.assert_allclose(g, w, rtol=1e-5)


@needs_gcc
def test_kernel_and_reference_refuse_sizes_with_the_same_words():
    m = tdsl.loads(SUBTRACTED)
    bad = (np.ones(4, np.float32), np.ones(6, np.float32))
    with pytest.raises(CallError) as ref:
        m["conv1d_valid"].reference(*bad)
    with pytest.raises(CallError) as got:
        m["conv1d_valid"].build()(*bad)
    assert "negative" in str(ref.value) and "negative" in str(got.value)


@needs_gcc
@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("kernel, stride, height", [(2, None, 1), (3, 1, 2), (4, 1, 2),
                                                    (3, 2, 2)])
def test_a_pool_input_smaller_than_its_kernel_is_refused(name, kernel, stride, height):
    """At stride 1 the output size ``(IH - kernel) // 1 + 1`` would be 0 for IH = kernel - 1,
    an empty array; the reference and the kernel refuse it in the same words, before any
    output is allocated."""
    op = tdsl.stdlib[name]
    attrs = {"kernel": kernel} if stride is None else {"kernel": kernel, "stride": stride}
    x = np.ones((1, 1, height, 4), np.float32)
    with pytest.raises(CallError, match="smaller than a window") as ref:
        op.reference(x, **attrs)
    with pytest.raises(CallError, match="smaller than a window") as got:
        op.build(**attrs)(x)
    assert str(got.value) == str(ref.value)
    assert op.reference(np.ones((1, 1, kernel, kernel), np.float32), **attrs).shape == \
        (1, 1, 1, 1)                                # a window that just fits is one output


@needs_gcc
def test_an_output_larger_than_memory_is_refused_before_allocation(monkeypatch):
    from tdsl.lowering import sizes
    monkeypatch.setattr(sizes, "memory_bytes", lambda: 1 << 20)
    op = tdsl.loads(TWO_OPS)["double"]
    x = np.ones(1 << 19, np.float32)            # 2 MiB in, 2 MiB out
    with pytest.raises(CallError, match="more than this machine"):
        op.reference(x)
    with pytest.raises(CallError, match="more than this machine"):
        op.build()(x)


@needs_gcc
def test_a_rank_generic_op_builds_without_naming_the_rank():
    """One kernel per argument ranks, built on first call and kept (as a jit does)."""
    kernel = tdsl.stdlib["relu"].build(target="c")
    rng = np.random.default_rng(0)
    for shape in [(5,), (2, 3), (2, 3, 4), (4, 1)]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(kernel(x), np.maximum(x, 0))
    assert sorted(kernel.kernels) == [(1,), (2,), (3,)]
    with pytest.raises(CallError, match="takes 1 argument"):
        kernel()


@pytest.mark.parametrize("value", ["4", 4.7, -1, True, None])
def test_sizes_given_by_name_are_checked(value):
    with pytest.raises(CallError, match=r"shapes\['N'\] must be a non-negative integer"):
        tdsl.loads(TWO_OPS)["double"].lower(shapes={"N": value})


# --------------------------------------------------------------------------- issue 28
# A float cast to an integer type truncates toward zero and saturates to the type's range;
# NaN gives 0 (docs/semantics.md, "Casts"). C leaves `(int32_t)x` undefined there, and the
# machines disagreed: x86 (reference, host C, PoCL) gave INT_MIN, Arm saturated, RISC-V took
# NaN to INT_MAX.

CAST_TYPES = ("i8", "i16", "i32", "i64", "u8")
CASTS = "\n".join(
    f"op cast_{f}(X: {f}[N]) -> ({', '.join(f'Y{t}: {t}[N]' for t in CAST_TYPES)}) {{\n"
    + "\n".join(f"    Y{t}[i] = {t}(X[i])" for t in CAST_TYPES) + "\n}"
    for f in ("f32", "f64"))
CAST_EDGES = [math.inf, -math.inf, math.nan, -math.nan, 3e9, -3e9, 1e20, -1e20, 0.0, -0.0,
              -0.5, 0.5, -0.99, 1.5, -1.5, 2.0 ** 31, 2.0 ** 31 - 128, 2.0 ** 31 - 1,
              2.0 ** 31 - 0.5, -2.0 ** 31, -2.0 ** 31 - 1, -2.0 ** 31 - 256, 127.5, 128.0,
              -128.5, -129.0, 255.5, 256.0, -1.0, 32767.5, 32768.0, -32768.9, -32769.0,
              2.0 ** 63, -2.0 ** 63, 2.0 ** 63 - 2 ** 39, 2.0 ** 62, 1e-30, -1e-30]


def _saturated(x: float, dtype: str) -> int:
    """The rule, written independently of tdsl: trunc, clamp, NaN -> 0."""
    info = np.iinfo(to_numpy(dtype))
    if x != x:
        return 0
    if math.isinf(x):
        return int(info.max) if x > 0 else int(info.min)
    return min(max(math.trunc(x), int(info.min)), int(info.max))


def _cast_case(f: str):
    x = np.array(CAST_EDGES * 2, dtype=to_numpy(f))[:67]        # 67: past any vector width, with a tail
    want = [np.array([_saturated(float(v), t) for v in x], to_numpy(t)) for t in CAST_TYPES]
    return tdsl.loads(CASTS)[f"cast_{f}"], x, want


def _check_casts(got, want, where):
    for t, g, w in zip(CAST_TYPES, got, want):
        assert g.dtype == w.dtype, (where, t)
        np.testing.assert_array_equal(g, w, err_msg=f"{where}: {t}(x)")


@pytest.mark.parametrize("f", ["f32", "f64"])
def test_float_to_int_casts_saturate_in_the_reference_and_interpreter(f):
    from tdsl.lowering import interp
    op, x, want = _cast_case(f)
    _check_casts(op.reference(x), want, "reference")
    _check_casts(interp.run(op.lower(), [x]), want, "interpreter")


@needs_gcc
@pytest.mark.parametrize("f", ["f32", "f64"])
def test_float_to_int_casts_saturate_in_host_c(f):
    op, x, want = _cast_case(f)
    _check_casts(op.build()(x), want, "host C")
    _check_casts(op.build(shapes={"N": x.size})(x), want, "host C, N fixed")


VECTOR_CASTS = """
op vcast(X: f32[N]) -> (A: i32[N], B: u8[N], C: i8[N]) {
    A[i] = i32(X[i])
    B[i] = u8(X[i])
    C[i] = i8(X[i] * 2.0)
}
schedule vcast for cpu {
    io, ii = split(A.i, 8)
    vectorize(ii)
    jo, ji = split(B.i, 16)
    vectorize(ji)
    ko, ki = split(C.i, 4)
    vectorize(ki)
}
"""


@needs_gcc
def test_vectorized_float_to_int_casts_saturate():
    op = tdsl.loads(VECTOR_CASTS)["vcast"]
    x = np.array(CAST_EDGES * 2, np.float32)[:67]
    want = [np.array([_saturated(float(v), t) for v in x], to_numpy(t)) for t in ("i32", "u8")]
    want.append(np.array([_saturated(float(np.float32(v) * np.float32(2)), "i8") for v in x],
                         np.int8))
    for where, got in [("reference", op.reference(x)), ("host C", op.build()(x))]:
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, err_msg=where)


CLAMPED_CASTS = """
op clamped(X: f32[N]) -> (A: u8[N], B: i8[N], C: u8[N], D: i16[N]) {
    A[i] = u8(min(max(round(X[i] * 0.5) + 3.0, 0.0), 255.0))
    B[i] = i8(max(min(X[i], 300.0), -128.0))
    C[i] = u8(min(max(X[i], 10.0), 200.0))
    D[i] = i16(min(40000.0, X[i]))
}
"""


@needs_gcc
@pytest.mark.parametrize("vector", [False, True])
def test_a_clamp_past_the_range_of_the_cast_is_dropped(vector):
    """``u8(min(max(v, 0), 255))`` is ``u8(v)``: the cast saturates and NaN gives 0 either
    way, so the simplifier drops the clamp; one inside the range (C) stays."""
    from tdsl.emit_c.c import emit_c
    op = tdsl.loads(CLAMPED_CASTS)["clamped"]
    sched = op.schedule("naive")
    if vector:
        for out in "ABCD":
            sched = sched.split(out, "i", 16, outer="o", inner="l").vectorize(out, "l")
    body = emit_c(op.lower(sched)).source.split("static int")[-1]
    for out in "ABCD":                      # each store, vector and scalar
        stores = [line for line in body.split("\n")
                  if f"&{out}[" in line or line.strip().startswith(f"{out}[")]
        assert stores and all(("_min_" in line) == (out == "C") for line in stores), out
    x = np.array(CAST_EDGES * 2, np.float32)[:67]
    got = op.build(schedule=sched, shapes={"N": x.size})(x)
    for g, w in zip(got, op.reference(x)):
        np.testing.assert_array_equal(g, w)
    half = np.rint(x * np.float32(0.5)) + np.float32(3.0)
    np.testing.assert_array_equal(got[0], [_saturated(float(v), "u8") for v in half])


ROUND_TRIPS = """
op round_trips(X: f32[N]) -> (A: f32[N], B: f32[N], C: f32[N], D: f32[N]) {
    A[i] = f32(u8(round(X[i] * 0.5) + 3.0))
    B[i] = f32(i8(round(X[i]) - 1.0))
    C[i] = f32(u8(X[i] * 0.5))
    D[i] = f32(i16(round(X[i] * 0.25) * 2.0 - 3.0))
}
"""


@needs_gcc
@pytest.mark.parametrize("lanes", [1, 8, 16])
def test_a_round_trip_through_a_small_integer_type_truncates_only_what_is_not_whole(lanes):
    """``f32(u8(v))`` vectorized is a clamp and a truncation in floats, the truncation left
    out where v is a whole number already (a round, and sums and products of whole
    numbers): the same values either way, NaN -> 0 (not i8's -128) included."""
    op = tdsl.loads(ROUND_TRIPS)["round_trips"]
    sched = op.schedule("naive")
    if lanes > 1:
        for out in "ABCD":
            sched = sched.split(out, "i", lanes, outer="o", inner="l").vectorize(out, "l")
    x = np.array(CAST_EDGES * 2, np.float32)[:67]
    k = op.build(schedule=sched, shapes={"N": x.size})
    if lanes > 1:
        assert k.source.count("_whole(") == 3 + 3   # A, B and D's helpers and calls
    f = np.float32
    with np.errstate(invalid="ignore", over="ignore"):
        v = [np.rint(x * f(0.5)) + f(3.0), np.rint(x) - f(1.0), x * f(0.5),
             np.rint(x * f(0.25)) * f(2.0) - f(3.0)]
    for g, w, t, name in zip(k(x), v, ("u8", "i8", "u8", "i16"), "ABCD"):
        np.testing.assert_array_equal(g, [_saturated(float(e), t) for e in w], err_msg=name)


@needs_gcc
@pytest.mark.parametrize("lanes", [1, 4, 8, 16])
def test_min_max_with_a_constant_keep_nans(lanes):
    """A clamp against a constant is one compare and select (the constant is no NaN), or
    where a tie needs no side (the constant second, or a nonzero one first) x86's min/max
    instruction (8 and 16 lanes, where the host has AVX or AVX-512), with numpy's results:
    NaN propagates from either side. (Which zero a tie of -0.0 and 0.0 gives, IEEE leaves
    open and numpy's own loops differ on.)"""
    op = tdsl.loads("op k(X: f32[N]) -> (A: f32[N], B: f32[N], C: f32[N], D: f32[N]) {\n"
                    "    A[i] = max(X[i], 0.0)\n    B[i] = max(-0.0, X[i])\n"
                    "    C[i] = min(X[i], -0.0)\n    D[i] = min(6.0, max(0.0, X[i]))\n}")["k"]
    sched = op.schedule("naive")
    if lanes > 1:
        for out in "ABCD":
            sched = sched.split(out, "i", lanes, outer="o", inner="l").vectorize(out, "l")
    k = op.build(schedule=sched, shapes={"N": 35})
    assert "_xk_f32" in k.source and "_kx_f32" in k.source
    x = np.array([np.nan, 0.0, -0.0, 1.0, -1.0, 6.0, 7.0, np.inf, -np.inf, -np.nan] * 4,
                 np.float32)[:35]
    zero, six = np.float32(0.0), np.float32(6.0)
    want = [np.maximum(x, zero), np.maximum(-zero, x), np.minimum(x, -zero),
            np.minimum(six, np.maximum(zero, x))]
    for g, w in zip(k(x), want):
        np.testing.assert_array_equal(g, w)


def test_casts_from_integers_and_constants_need_no_clamp():
    """The fast path: an integer source is the plain C cast, a constant folds; the helper
    is emitted only for a float source, once per pair of types."""
    from tdsl.emit_c.c import emit_c
    m = tdsl.loads("""
op widen(X: i8[N]) -> Y: i32[N] { Y[i] = i32(X[i]) + i32(u8(X[i])) }
op consts(X: i32[N]) -> Y: i32[N] { Y[i] = X[i] + i32(f32(N) * 1e10) }
op twice(X: f32[N]) -> Y: i32[N] { Y[i] = i32(X[i]) + i32(X[i] * 2.0) }
""")
    assert "tdsl_f32_to" not in emit_c(m["widen"].lower()).source
    src = emit_c(m["twice"].lower()).source
    assert src.count("tdsl_f32_to_i32(float x)") == 1 and "tdsl_f32_to_i32(X" in src
    from tdsl.lowering.arith.simplify import fold_constants
    from tdsl.lowering import te
    for value, dtype, want in [(3e9, "i32", 2 ** 31 - 1), (math.nan, "i8", 0),
                               (-math.inf, "u8", 0), (-1e20, "i64", -2 ** 63)]:
        folded = fold_constants(te.Cast(te.Const(value, "f32"), dtype), None)
        assert folded == te.Const(want, dtype)


def test_float_to_int_casts_saturate_under_opencl():
    from tdsl.emit_opencl import unavailable_reason
    if unavailable_reason() is not None:
        pytest.skip(f"OpenCL: {unavailable_reason()}")
    op, x, want = _cast_case("f32")
    _check_casts(op.build(target="opencl")(x), want, "OpenCL")


def test_float_to_int_casts_saturate_under_cuda():
    """Where no GPU is here: the helpers at least compile with nvcc, device and host."""
    import shutil as sh
    from tdsl.emit_cuda import emit_cuda, unavailable_reason
    op, x, want = _cast_case("f32")
    if unavailable_reason() is None:
        _check_casts(op.build(target="cuda")(x), want, "CUDA")
        return
    if sh.which("nvcc") is None:
        pytest.skip(f"CUDA: {unavailable_reason()}")
    import subprocess
    import tempfile
    target = tdsl.Target("cuda")
    src = emit_cuda(op.lower(target=target), target=target).source
    assert "tdsl_f32_to_i32(X" in src
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/casts.cu"
        with open(path, "w") as fh:
            fh.write(src)
        subprocess.run(["nvcc", "-c", path, "-o", f"{d}/casts.o"], check=True)


@pytest.mark.parametrize("spec", ["c-embedded", "c-embedded -march=armv8-a",
                                  "c-embedded -mtriple=arm-linux-gnueabihf",
                                  "c-embedded -march=rv64gc", "c-embedded -mcpu=cortex-m4",
                                  "c-embedded -mcpu=cortex-m3"])
def test_float_to_int_casts_saturate_on_embedded_targets(spec):
    """Under qemu: Arm saturated in hardware already, RISC-V took NaN to INT_MAX, and
    Cortex-M3 (no FPU) converts in libgcc; all now give the one rule."""
    from embedded_cases import target_or_skip
    target = target_or_skip(spec)
    for f in ("f32", "f64"):
        op, x, want = _cast_case(f)
        _check_casts(op.build(target, shapes={"N": x.size})(x), want, f"{spec} {f}")


def test_host_c_casts_on_armv8_under_qemu():
    from tdsl.emulate import missing_tool, run_host_c
    try:
        target = tdsl.Target("c -march=armv8-a")
    except tdsl.TdslError as exc:
        pytest.skip(str(exc))
    if missing_tool(target):
        pytest.skip(missing_tool(target))
    op, x, want = _cast_case("f32")
    _check_casts(run_host_c(op.lower(None, {"N": x.size}, target=target), target, [x]),
                 want, "host C on armv8-a")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("src", ["i8", "u8", "i16", "u16"])
@pytest.mark.parametrize("dst", ["i32", "u32", "i64", "f32", "f64"])
def test_vector_widening_casts_go_through_the_widening_helper(src, dst):
    """A vector cast from 8- or 16-bit integers to wider ones or floats: numpy's values at
    the source's extremes, and the C through `tdsl_widen_` (one pmovsx/pmovzx, or one
    doubling of the element at a time): gcc 12 converts 8 -> 32 bits lane by lane when
    asked in one step, which made an int8 classifier 10x slow."""
    info = np.iinfo(to_numpy(src))
    x = np.resize(np.array([info.min, info.max, 0, 1, info.max // 3, info.max - 1],
                           to_numpy(src)), 64)
    op = tdsl.loads(f"op w(X: {src}[N]) -> Y: {dst}[N] {{ Y[i] = {dst}(X[i]) * {dst}(3) }}")["w"]
    k = op.build(shapes={"N": 64})
    np.testing.assert_array_equal(k(x), x.astype(to_numpy(dst)) * np.array(3, to_numpy(dst)))
    if dst in ("i32", "u32", "f32"):      # wider results print lane by lane here
        assert f"tdsl_widen_{src}x" in k.source
