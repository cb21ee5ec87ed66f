"""Schedules as data: the fluent API, knobs, and every illegal primitive refused with a
message that names the stage, the axis and the loops (Halide's test/error, as a table)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_lower import OPS, check
from tdsl.errors import ScheduleError, Source, Span
from tdsl.lowering.lower import lower
from tdsl.lowering.passes import apply_schedule
from tdsl.lowering.schedule import (ComputeAt, Fuse, Knob, KnobDecl, Schedule, Split, Tile,
                                    Vectorize)


def sched(name):
    return Schedule(OPS[name].build())


# ---------------------------------------------------------------------------- the API

def test_methods_return_new_schedules():
    s = sched("matmul")
    s2 = s.split("C", "i", 8)
    assert s.directives == () and s2.directives == (Split("C", "i", 8, "i.o", "i.i"),)
    assert s2.split("C", "j", 4) is not s2


def test_default_names():
    assert Split("C", "i", 8).outer == "i.o"
    t = Tile("C", "i", "j", 4, 8)
    assert (t.xo, t.yo, t.xi, t.yi) == ("i.o", "j.o", "i.i", "j.i")
    assert Fuse("C", ("i", "j")).fused == "i.j.f"
    s = sched("matmul").cache_read("A", "local").cache_write("C", "local")
    assert [d.name for d in s.directives] == ["A.local", "C.local"]


def test_spans_do_not_count_in_equality():
    src = Source("m.tdsl", "schedule matmul {\n  vectorize(C.k)\n}\n")
    assert Vectorize("C", "k", Span(src, 2, 3)) == Vectorize("C", "k")


def test_from_directives_round_trip():
    s = sched("matmul").knob("t", [4, 8]).split("C", "i", Knob("t")).parallel("C", "i.o")
    again = Schedule.from_directives(s.fn, s.directives, s.knobs)
    assert again == s


def test_knobs_resolve_to_defaults_and_config():
    s = sched("matmul").knob("t", [4, 8, 16], default=8).split("C", "i", Knob("t"))
    assert s.default_config() == {"t": 8}
    assert s.resolve()[0].factor == 8
    assert s.resolve({"t": 16})[0].factor == 16
    assert KnobDecl("u", (3, 5)).default == 3


def test_tile_is_splits_and_reorder():
    fn = OPS["matmul"].build()
    g = apply_schedule.run(fn, Schedule(fn).tile("C", "i", "j", 4, 8).directives)
    assert g.stages["C"].leaves == ["i.o", "j.o", "i.i", "j.i", "k"]


# ---------------------------------------------------------------------------- illegal ones

ILLEGAL = [
    # (op, schedule, config, expected message)
    ("matmul", lambda s: s.split("Q", "i", 4), None, "Q is not a stage; stages are: C"),
    ("matmul", lambda s: s.split("A", "i", 4), None, "A is an input"),
    ("matmul", lambda s: s.split("C", "q", 4), None,
     "In schedule of C, can't split q: C has no axis q; loops are: i, j, k"),
    ("matmul", lambda s: s.split("C", "i", 4).split("C", "i", 2), None,
     "i is no longer a loop"),
    ("matmul", lambda s: s.split("C", "i", 0), None, "the factor must be an integer >= 1"),
    ("matmul", lambda s: s.split("C", "i", 2.5), None, "the factor must be an integer"),
    ("matmul", lambda s: s.split("C", "i", 2, outer="j"), None, "already has an axis named j"),
    ("matmul", lambda s: s.reorder("C", "i", "i"), None, "i appears twice"),
    ("matmul", lambda s: s.fuse("C", "i", "k"), None, "not adjacent"),
    ("matmul", lambda s: s.fuse("C", "j", "k"), None, "can't be fused with a reduction axis"),
    ("matmul", lambda s: s.tile("C", "i", "j", 4, 4).vectorize("C", "k"), None,
     "In schedule of C, can't vectorize k: it is a reduction axis (iterations would race on "
     "C); loops are: i.o, j.o, i.i, j.i, k"),
    ("matmul", lambda s: s.parallel("C", "k"), None, "can't parallel k: it is a reduction"),
    ("matmul", lambda s: s.bind("C", "i", "warp.x"), None, "unknown thread tag"),
    ("matmul", lambda s: s.vectorize("C", "j").parallel("C", "j"), None,
     "j is already vectorized"),
    ("matmul", lambda s: s.vectorize("C", "j").split("C", "j", 4), None,
     "j is already vectorized"),
    ("matmul", lambda s: s.compute_inline("C"), None, "C is an output of the op"),
    ("matmul", lambda s: s.compute_at("C", "C", "i"), None, "C is an output"),
    ("matmul", lambda s: s.split("C", "i", 2).cache_write("C", "local"), None,
     "cache_write must come before"),
    ("matmul", lambda s: s.cache_read("A", "texture"), None, "unknown scope 'texture'"),
    ("matmul", lambda s: s.cache_read("A", "local", ["Q"]), None, "Q does not read A"),
    ("matmul", lambda s: s.storage_align("C", "i", 8, 0), None, "C is an output"),
    ("matmul", lambda s: s.split("C", "i", Knob("t")), None, "knob t is not declared"),
    ("matmul", lambda s: s.knob("t", [4, 8]).split("C", "i", Knob("t")), {"t": 3},
     "sets knob t to 3, which is not one of its choices [4, 8]"),
    ("matmul", lambda s: s.knob("t", [4, 8]), {"zz": 1}, "does not declare"),
    ("blur", lambda s: s.compute_at("T", "C", "zz"), None,
     "In schedule of T, can't compute T at C.zz: C has no loop zz; loops of C are: i"),
    ("blur", lambda s: s.split("C", "i", 4).compute_at("T", "C", "i.o")
     .reorder("C", "i.i", "i.o"), None,
     "stage T is computed at i.o, and the reorder moves i.i across it"),
    ("blur", lambda s: s.compute_at("T", "C", "i").split("C", "i", 2), None,
     "stage T is computed at i"),
    ("blur", lambda s: s.compute_at("T", "C", "i").compute_inline("C"), None,
     "C is an output"),
    ("blur", lambda s: s.split("T", "t", 2).compute_inline("T"), None,
     "its loops were transformed"),
    ("blur", lambda s: s.storage_align("T", "t", 8, 0), None,
     "the innermost dimension has stride 1"),
    ("transpose_add", lambda s: s.storage_align("T", "a", 8, 9), None,
     "the offset 9 must be less than the factor 8"),
    ("softmax", lambda s: s.compute_inline("m"), None, "it has a reduction"),
    ("softmax", lambda s: s.compute_at("m", "y", "i"), None, "y does not read m"),
    ("softmax", lambda s: s.compute_at("e", "y", "i"), None, "e is also read by s"),
    ("softmax", lambda s: s.compute_at("s", "y", "i").compute_at("e", "y", "i")
     .compute_root("s"), None, "its reader s is no longer computed at y.i"),
    ("softmax", lambda s: s.split("y", "i", 2).compute_at("s", "y", "i.o")
     .compute_at("e", "y", "i.i"), None, "e is also read by s"),
    ("softmax", lambda s: s.compute_inline("e").compute_at("e", "y", "i"), None,
     "the stage was inlined"),
    ("softmax", lambda s: s.compute_inline("e").compute_root("e"), None, "was inlined"),
]


@pytest.mark.parametrize("case", range(len(ILLEGAL)), ids=[c[3][:40] for c in ILLEGAL])
def test_illegal_schedules_are_refused(case):
    name, make, config, message = ILLEGAL[case]
    s = make(sched(name))
    with pytest.raises(ScheduleError) as info:
        lower(s.fn, s, config)
    assert message in str(info.value)


def test_error_points_at_the_schedule_line():
    src = Source("matmul.tdsl", "schedule matmul for cpu {\n    vectorize(C.k)\n}\n")
    span = Span(src, 2, 5, 2, 19)
    s = Schedule.from_directives(OPS["matmul"].build(), [Vectorize("C", "k", span)])
    with pytest.raises(ScheduleError) as info:
        lower(s.fn, s)
    assert info.value.span == span
    text = str(info.value)
    assert text.startswith("matmul.tdsl:2:5: schedule error: In schedule of C, can't "
                           "vectorize k")
    assert "        vectorize(C.k)\n        ^^^^^^^^^^^^^^" in text


def test_knob_declared_twice():
    with pytest.raises(ScheduleError, match="declared twice"):
        sched("matmul").knob("t", [1]).knob("t", [2])
    with pytest.raises(ScheduleError, match="not one of its choices"):
        KnobDecl("t", (1, 2), default=3)


def test_a_literal_knob_default_outside_its_choices_is_refused_at_its_span():
    """`knob t in [4, 8] = 16` was silently replaced by 8; a default computed from the
    target's constants still takes the nearest choice below it."""
    import tdsl
    op = tdsl.loads("op f(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] }\n"
                    "schedule f for cpu {\n    knob t in [4, 8] = 16\n"
                    "    io, ii = split(Y.i, t)\n}\n")["f"]
    with pytest.raises(ScheduleError, match=r"the default 16 of knob t is not one of its "
                                            r"choices \[4, 8\]") as info:
        op.schedule()
    assert (info.value.span.line, info.value.span.col) == (3, 24)
    computed = tdsl.loads("op f(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] }\n"
                          "schedule f for cpu { knob t in [4, 8] = 4 * lanes\n"
                          "    io, ii = split(Y.i, t) }\n")["f"]
    assert computed.schedule().default_config() == {"t": 8}


@pytest.mark.parametrize("directive", ["do, di = split(Y.d, 4)", "reorder(Y.d, Y.n)",
                                       "vectorize(Y.d)", "unroll(Y.d)"])
def test_a_nested_reductions_axis_says_why_it_cant_be_scheduled(directive):
    """`Y[n] = 1.0 + sum[d](...)`: d is no loop of Y; the error said only "Y has no axis d"."""
    import tdsl
    op = tdsl.loads("op f(X: f32[N, D]) -> Y: f32[N] { Y[n] = 1.0 + sum[d](X[n, d]) }\n"
                    f"schedule f for cpu {{ {directive} }}\n")["f"]
    with pytest.raises(ScheduleError, match="d is the axis of a sum nested in an "
                                            "expression") as info:
        op.lower()
    assert "a stage of its own" in info.value.hint and "rfactor(Y.d, F)" in info.value.hint
    rf = tdsl.loads("op f(X: f32[N, D]) -> Y: f32[N] { Y[n] = 1.0 + sum[d](X[n, d]) }\n"
                    "schedule f for cpu { P = rfactor(Y.d, 4)\n reorder(P.d_o, P.d_i)\n"
                    " vectorize(P.d_i) }\n")["f"]
    rf.lower()                                       # what the hint offers applies


def test_compute_at_then_reorder_outside_is_fine():
    """Reordering loops that stay on the same side of the attach point is legal."""
    check("matmul", lambda s: s.cache_read("A", "local", ["C"]).tile("C", "i", "j", 2, 4)
          .compute_at("A.local", "C", "i.i").reorder("C", "j.o", "i.o"))


# ---------------------------------------------------------------------------- fuzzing

NAMES = ["i", "j", "k", "i.o", "j.i", "T", "C", "t", "q", "x", "y", "A", "Xp", "Y", "m", "s"]


@pytest.mark.parametrize("name", ["matmul", "blur", "softmax", "conv"])
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_directives_are_refused_or_correct(name, data):
    """Any directive sequence, legal or not: lowering refuses it with a ScheduleError or
    gives a program that computes the right thing. Never another exception."""
    fn = OPS[name].build()
    stages = [t.name for t in fn.stages()] + ["Q"]
    directives = []
    for _ in range(data.draw(st.integers(1, 4))):
        stage = data.draw(st.sampled_from(stages))
        g = apply_schedule.initial(fn)
        leaves = g.stages[stage].leaves if stage in g.stages else []
        axis = data.draw(st.sampled_from(leaves + NAMES))
        other = data.draw(st.sampled_from(leaves + NAMES))
        n = data.draw(st.integers(-1, 9))
        directives.append(data.draw(st.sampled_from([
            Split(stage, axis, n), Tile(stage, axis, other, n, 3), Fuse(stage, (axis, other)),
            ComputeAt(stage, data.draw(st.sampled_from(stages)), axis),
            Vectorize(stage, axis), Schedule(fn).parallel(stage, axis).directives[0],
            Schedule(fn).reorder(stage, other, axis).directives[0],
            Schedule(fn).compute_inline(stage).directives[0],
            Schedule(fn).unroll(stage, axis).directives[0],
        ])))
    s = Schedule.from_directives(fn, directives)
    try:
        apply_schedule.run(fn, s.resolve())
    except ScheduleError:
        return
    check(name, s, {k: 3 for k in OPS[name].shapes})


def test_refused_schedule_changes_nothing_else():
    """Applying is pure: a refused schedule leaves the function usable."""
    fn = OPS["matmul"].build()
    with pytest.raises(ScheduleError):
        lower(fn, Schedule(fn).vectorize("C", "k"))
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    from tdsl.lowering import interp
    out, = interp.run(lower(fn, Schedule(fn), shapes=dict(M=2, N=4, K=3)), [a, b])
    np.testing.assert_array_equal(out, 3)
