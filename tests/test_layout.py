"""Layout from the schedule (`pack`, `pad`): the textbook conv2d / depthwise_conv2d / dense of
the standard library get their blocked and padded layouts from their schedules, on every
x86 ISA level (SSE4.2, AVX2 and AVX-512: blocks of 4, 8 and 16 lanes), with default and
random legal configurations, run where this host has the ISA and built where it lacks it
(AVX-512 on an AVX2 host), and the 16-lane blocks run on AVX2 too (``-lanes=16``: 16-float
vectors in register pairs); a user's own textbook conv takes the same schedule; illegal
layouts are schedule errors at the line."""
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tdsl
from tdsl.lowering.loop_ir import Allocate, walk_stmt
from tdsl.lowering.schedule import Schedule
from tdsl.errors import CallError, TdslError
from tdsl.target import Target
from tdsl.tuner.log import Workload
from tdsl.tuner.task import Task

# the ISA levels, and AVX2 code with AVX-512's 16 lanes (which runs on either host)
TARGETS = ["c", "c -march=x86-64-v2", "c -march=x86-64-v3", "c -march=x86-64-v4",
           "c -march=x86-64-v3 -lanes=16"]
STD = Path(tdsl.__file__).parent / "dsl" / "std"


def _target(spec: str) -> Target:
    """The target, skipping where this machine cannot even build for it (no x86 compiler)."""
    try:
        return Target(spec)
    except TdslError as e:
        pytest.skip(f"{spec} does not build here: {e}")


def _check(kernel, arrays, want, target: Target, **kw):
    """``kernel(*arrays)`` matches ``want`` where it can run here; where the host lacks the
    target's ISA, the library is built and a call is refused (never run: SIGILL)."""
    if target.unrunnable_reason():
        assert Path(kernel.lib_path).exists()
        with pytest.raises(CallError, match="cannot run here"):
            kernel(*arrays)
        return
    np.testing.assert_allclose(kernel(*arrays), want, rtol=1e-4, atol=1e-4, **kw)


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)


# op, arrays, attributes: sizes no tile divides, strides and dilations
CASES = {
    "conv2d": (lambda: (_rand(1, 5, 9, 13), _rand(19, 5, 3, 3, seed=1)), {"padding": 1}),
    "conv2d-strided": (lambda: (_rand(2, 3, 11, 10), _rand(9, 3, 3, 3, seed=1)),
                       {"stride": 2, "dilation": 2, "padding": 2}),
    "depthwise_conv2d": (lambda: (_rand(1, 4, 10, 33), _rand(4, 1, 3, 3, seed=1)),
                         {"padding": 1}),
    "depthwise_conv2d-strided": (lambda: (_rand(2, 3, 9, 17), _rand(3, 1, 3, 3, seed=1)),
                                 {"stride": 2, "dilation": 2, "padding": 2}),
    "dense": (lambda: (_rand(13, 17), _rand(45, 17, seed=1), _rand(45, seed=2)), {}),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_default_schedules_match_the_reference_on_each_target(case, target):
    t = _target(target)
    op = tdsl.stdlib[case.split("-")[0]]
    make, attrs = CASES[case]
    arrays = make()
    for shapes in (op.sizes_of(*arrays, **attrs), None):        # fixed and free sizes
        kernel = op.build(target=target, shapes=shapes, **attrs)
        _check(kernel, arrays, op.reference(*arrays, **attrs), t,
               err_msg=f"{case} on {target}")


SIZES = {
    "conv2d": ({"N": (1, 2), "C": (1, 5), "IH": (3, 10), "IW": (3, 17), "F": (1, 35),
                "KH": (3, 3), "KW": (3, 3)}, {"padding": 1}),
    "depthwise_conv2d": ({"N": (1, 2), "C": (1, 4), "IH": (3, 10), "IW": (3, 35),
                          "KH": (3, 3), "KW": (3, 3)}, {"padding": 1}),
    "dense": ({"N": (1, 20), "M": (1, 50), "K": (1, 12)}, {}),
    "matmul": ({"M": (1, 20), "N": (1, 50), "K": (1, 12)}, {}),
    "batch_matmul": ({"B": (1, 3), "M": (1, 12), "N": (1, 40), "K": (1, 9)}, {}),
}


@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_random_legal_configurations_match_the_reference(data):
    """A drawn op, target, sizes and configuration of the op's template for that target."""
    name = data.draw(st.sampled_from(sorted(SIZES)), label="op")
    target = data.draw(st.sampled_from(TARGETS), label="target")
    try:
        t = Target(target)
    except TdslError:
        assume(False)                   # no compiler for it here
    ranges, attrs = SIZES[name]
    sizes = {k: data.draw(st.integers(lo, hi), label=k) for k, (lo, hi) in ranges.items()}
    task = Task(Workload.make("std", name, sizes, attrs, target=target))
    valid = task.space.valid_indices()
    config = task.space.config(valid[data.draw(st.integers(0, len(valid) - 1), label="i")])
    inputs = task.inputs(seed=1)
    kernel = task.op.build(target=target, shapes=sizes, config=config, **attrs)
    _check(kernel, inputs, task.reference(inputs) if not t.unrunnable_reason() else None, t,
           err_msg=f"{name} {config} at {sizes} on {target}")


@pytest.mark.parametrize("name", ["matmul", "batch_matmul"])
def test_matmul_default_packs_b_per_column_block(name):
    """pack = true: B is read from a [N/tj, K, tj] copy (tj = 2 lanes by default), whole
    vectors of it per reduction step; the result is unchanged."""
    op = tdsl.stdlib[name]
    lead = (2,) if name == "batch_matmul" else ()
    a, b = _rand(*lead, 9, 7), _rand(*lead, 7, 37, seed=1)
    kernel = op.build(shapes=op.sizes_of(a, b))
    t = Target("c")
    assert f"tdsl_load_f32x{t.lanes}(&Bp[" in kernel.source
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_conv2d_default_tile_fits_the_targets_registers(target):
    """registers/16 blocks of `lanes` filters x 7 columns of named vector accumulators (14 on
    AVX-512, 7 on AVX2 and SSE), reading the packed weights as whole vectors."""
    t = _target(target)
    op = tdsl.stdlib["conv2d"]
    x, w = _rand(1, 8, 14, 14), _rand(32, 8, 3, 3)
    source = op.build(target=target, shapes=op.sizes_of(x, w, padding=1), padding=1).source
    tile = t.registers // 16 * 7
    assert f"tdsl_f32x{t.lanes} PL_0" in source
    assert f"PL_{tile - 1}" in source and f"PL_{tile}," not in source and \
        f"PL_{tile};" not in source
    assert f"tdsl_load_f32x{t.lanes}(&Wp[" in source


@pytest.mark.parametrize("target", TARGETS)
def test_depthwise_tile_is_padded_to_whole_vectors(target):
    """pad(YL.x, lanes), pad(YL.y, ty): the channel's output tile is ceil(OW / lanes) whole
    vectors wide, and every access is proven in bounds (no guard in the tile loops)."""
    t = _target(target)
    op = tdsl.stdlib["depthwise_conv2d"]
    shapes = dict(N=1, C=3, IH=28, IW=28, KH=3, KW=3)
    func = op.lower(None, shapes, {"ty": 3}, target, None, padding=1)
    sizes = {s.buffer.name: s.buffer.shape[0].value for s in walk_stmt(func.body)
             if isinstance(s, Allocate)}
    assert sizes["YL"] == math.ceil(28 / t.lanes) * t.lanes * 30
    assert func.attrs["unproven_accesses"] == 0


@pytest.mark.parametrize("name", ["conv2d", "depthwise_conv2d"])
def test_the_textbook_convs_test_their_padding_once_per_input_element(name):
    """The ops' zero padding is a guarded read; the schedule's padded copy of X (cache_read +
    pad) holds the zeros, so the only test left in the C is the copy's, none in the sum."""
    op = tdsl.stdlib[name]
    x = _rand(1, 16, 14, 14)
    w = _rand(32, 16, 3, 3) if name == "conv2d" else _rand(16, 1, 3, 3)
    k = op.build(shapes=op.sizes_of(x, w, padding=1), padding=1)
    body = k.source[k.source.index("int tdsl_"):]
    assert body.count(" ? ") == 1 and re.search(r"Xp\[[^]]*\] = [^;]* \? X\[", body)
    np.testing.assert_allclose(k(x, w), op.reference(x, w, padding=1), rtol=1e-4, atol=1e-4)


GUARDED = """
op dw(X: f32[C, H, W], K: f32[C, 3, 3]) -> Y: f32[C, H, W] {
    Y[c, y, x] = sum[r, s](select(y + r >= 1 and y + r < H + 1 and x + s >= LO
                                  and x + s < W + 1, X[c, y + r - 1, x + s - 1], 0.0)
                           * K[c, r, s])
}
schedule dw for c {
    Xp = cache_read(X, global, Y)
    compute_at(Xp, Y.c)
    pad(Xp.ax1)
    PADS
}
"""


@pytest.mark.parametrize("lo, pads, selects", [
    ("1", "pad(Xp.ax2)", 1),     # every conjunct bounds a padded index: the sum has no test
    ("2", "pad(Xp.ax2)", 2),     # x + s >= 2 also drops the first column: a real test, kept
    ("1", "", 2),                # W not padded: the copy has no zeros there, the test stays
])
def test_a_guarded_read_of_a_padded_copy_keeps_every_test_it_needs(lo, pads, selects):
    op = tdsl.loads(GUARDED.replace("LO", lo).replace("PADS", pads), "dw.tdsl")["dw"]
    x, w = _rand(3, 6, 7), _rand(3, 3, 3, seed=1)
    for shapes in (op.sizes_of(x, w), None):
        k = op.build(shapes=shapes)
        body = k.source[k.source.index("int tdsl_"):]
        assert body.count(" ? ") == selects, body
        np.testing.assert_allclose(k(x, w), op.reference(x, w), rtol=1e-5, atol=1e-5)


def _std_block(file: str, op: str) -> str:
    text = (STD / file).read_text()
    return re.search(rf"^schedule {op} for (?:cpu|c) {{.*?^}}", text, re.S | re.M).group(0)


USER_CONV = """
# my own convolution, as in a textbook (names of my choosing for the sizes)
op conv2d(X: f32[N, C, H, W], W: f32[F, C, 3, 3]; padding: int = 1)
    -> Y: f32[N, F, H + 2 * padding - 2, W + 2 * padding - 2] {
    Y[n, f, y, x] = sum[c, r, s](select(y + r >= padding and y + r < H + padding
                                        and x + s >= padding and x + s < W + padding,
                                        X[n, c, y + r - padding, x + s - padding], 0.0)
                                 * W[f, c, r, s])
}
"""


@pytest.mark.parametrize("target", TARGETS)
def test_a_users_textbook_conv_takes_the_std_schedule(target):
    """The standard library's schedule block, pasted under a user's own textbook conv,
    gives the same C: the same speed, because the speed is all in the schedule."""
    mine = tdsl.loads(USER_CONV + _std_block("conv.tdsl", "conv2d"), "mine.tdsl")["conv2d"]
    std = tdsl.stdlib["conv2d"]
    x, w = _rand(1, 16, 14, 14), _rand(32, 16, 3, 3)
    k_mine = mine.build(target=target, shapes=mine.sizes_of(x, w, padding=1), padding=1)
    k_std = std.build(target=target, shapes=std.sizes_of(x, w, padding=1), padding=1)
    _check(k_mine, (x, w), std.reference(x, w, padding=1), _target(target))
    assert k_mine.source == k_std.source


# ------------------------------------------------------------------------ the primitives

MATMUL = tdsl.loads("""
op matmul(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N] {
    C[i, j] = sum[k](A[i, k] * B[k, j])
}
""", "mm.tdsl")["matmul"]


def test_pack_from_python_blocks_an_input_through_a_cache_stage():
    """B packed per block of 8 columns, [N/8, K, 8], from the Python Schedule methods (the
    cache stage of an input has axes ax0, ax1, ...)."""
    fn = MATMUL.function()
    s = (Schedule(fn).cache_read("B", "global", ["C"], name="Bp").pack("Bp", "ax1", 8, "jb", "jl")
         .parallel("Bp", "jb").split("C", "j", 8).reorder("C", "j.o", "i", "k", "j.i")
         .vectorize("C", "j.i"))
    a, b = _rand(7, 5), _rand(5, 21, seed=1)
    func = MATMUL.lower(s, {"M": 7, "K": 5, "N": 21})
    sizes = {x.buffer.name: x.buffer.shape for x in walk_stmt(func.body)
             if isinstance(x, Allocate)}
    assert sizes["Bp"][0].value == 3 * 5 * 8                  # ceil(21 / 8) blocks, padded
    kernel = MATMUL.build(schedule=s, shapes={"M": 7, "K": 5, "N": 21})
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def _schedule_error(body: str, match: str):
    text = """
op mm(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N] {
    T: f32[M, N]
    T[i, j] = sum[k](A[i, k] * B[k, j])
    C[i, j] = T[i, j] * 2.0
}
schedule mm for cpu {
""" + body + "\n}\n"
    op = tdsl.loads(text, "bad.tdsl")["mm"]
    with pytest.raises(tdsl.ScheduleError, match=match) as err:
        op.build(shapes={"M": 4, "K": 3, "N": 8})
    return err.value


@pytest.mark.parametrize("body,match", [
    ("    pack(C.j, 4)", "C is an output"),
    ("    pad(C.j, 4)", "C is an output"),
    ("    pack(T.q, 4)", "q is not a dimension of T"),
    ("    pack(T.k, 4)", "k is not a dimension of T"),
    ("    split(T.j, 2)\n    pack(T.j, 4)", "before the other directives on T"),
    ("    pack(T.j, 0)", "factor must be an integer >= 1"),
    ("    pad(T.j, 0)", "multiple must be an integer >= 1"),
    ("    pack(T.j, 4)\n    pack(T.j, 2)", "j is not a dimension of T"),
    ("    pad(T.j, 4)\n    pad(T.j, 8)", "already padded to a multiple of 4"),
])
def test_illegal_layouts_are_schedule_errors_at_the_line(body, match):
    err = _schedule_error(body, match)
    last = body.splitlines()[-1].strip()
    assert err.span is not None and last in str(err)           # the caret is on that line
