"""Knob spaces: templates with `if` and `require`, numbering, sampling and walks."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl
from tdsl.errors import ScheduleError
from tdsl.frontend import unparse
from tdsl.frontend.parse import parse
from tdsl.lowering.schedule import KnobDecl, KnobExpr, Knob, Schedule
from tdsl.tuner.space import ConfigSpace

TEMPLATE = """
op mm(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N] {
    C[i, j] = sum[k](A[i, k] * B[k, j])
}
schedule mm for cpu {
    knob ti in [2, 4, 8] = 4
    knob tj in [16, 32, 64] = 32
    knob cache in [true, false] = true
    knob order in ["ij", "ji"] = "ij"
    require ti * tj <= 256
    if cache {
        CL = cache_write(C, local)
        io, jo, ii, ji = tile(C.i, C.j, ti, tj)
        compute_at(CL, C.jo)
        jv, jl = split(CL.j, 16)
        reorder(CL.k, CL.i, jv, jl)
        vectorize(jl)
    } else {
        io, jo, ii, ji = tile(C.i, C.j, ti, tj)
        if order == "ji" {
            reorder(jo, io)
        }
    }
    cv, cl = split(ji, tj // 16)
    parallel(io)
}
"""


@pytest.fixture(scope="module")
def mm():
    return tdsl.loads(TEMPLATE)["mm"]


def test_template_round_trips_through_the_printer():
    module = parse(TEMPLATE)
    again = parse(unparse.module(module))
    assert again == module


def test_if_picks_directives_by_knob(mm):
    s = mm.schedule()
    cached = s.resolve({"cache": True})
    plain = s.resolve({"cache": False, "order": "ji"})
    assert any(type(d).__name__ == "CacheWrite" for d in cached)
    assert not any(type(d).__name__ == "CacheWrite" for d in plain)
    assert any(type(d).__name__ == "Reorder" and d.axes == ("jo", "io") for d in plain)
    split = [d for d in plain if type(d).__name__ == "Split" and d.axis == "ji"][0]
    assert split.factor == 2                     # tj // 16 with tj = 32


def test_require_rejects_a_configuration_with_the_constraint_in_the_message(mm):
    with pytest.raises(ScheduleError, match="breaks `require"):
        mm.schedule().resolve({"ti": 8, "tj": 64})


@pytest.mark.parametrize("cfg", [{"cache": True, "ti": 8, "tj": 32},
                                 {"cache": False, "order": "ji", "ti": 2, "tj": 64},
                                 {"cache": False, "order": "ij", "ti": 4, "tj": 16}])
def test_every_branch_computes_the_product(mm, cfg):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((37, 19)).astype(np.float32)
    b = rng.standard_normal((19, 70)).astype(np.float32)
    got = mm.build(config=cfg)(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_knob_inside_if_is_an_error():
    src = TEMPLATE.replace('if order == "ji" {', 'if order == "ji" {\n knob x in [1]')
    with pytest.raises(ScheduleError, match="inside an `if`"):
        tdsl.loads(src)["mm"].schedule()


def test_unknown_name_in_condition_is_an_error():
    src = TEMPLATE.replace("if cache {", "if cached {")
    with pytest.raises(ScheduleError, match="'cached' is not a knob"):
        tdsl.loads(src)["mm"].schedule()


def test_space_counts_only_valid_configurations(mm):
    space = ConfigSpace.from_schedule(mm.schedule())
    assert space.total == 3 * 3 * 2 * 2
    # ti * tj <= 256 rules out (8, 64) only
    assert len(space) == space.total - 2 * 2
    assert all(space.config(i)["ti"] * space.config(i)["tj"] <= 256
               for i in space.valid_indices())
    assert "ti in [2, 4, 8]" in space.describe()


@given(st.integers(0, 35))
def test_index_and_config_are_inverse(i):
    space = ConfigSpace((KnobDecl("a", (1, 2, 3)), KnobDecl("b", (True, False)),
                         KnobDecl("c", ("x", "y", "z", "w")), KnobDecl("d", (7, 9, 11))))
    assert space.index(space.config(i * 2)) == i * 2


def test_default_index_is_the_defaults(mm):
    space = ConfigSpace.from_schedule(mm.schedule())
    assert space.config(space.default_index()) == {"ti": 4, "tj": 32, "cache": True,
                                                   "order": "ij"}


@settings(max_examples=30)
@given(st.integers(0, 2 ** 16))
def test_sample_is_distinct_valid_and_excludes(seed):
    space = ConfigSpace((KnobDecl("a", tuple(range(8))), KnobDecl("b", tuple(range(8)))),
                        (KnobExpr("<", (KnobExpr("+", (Knob("a"), Knob("b"))), 9)),))
    rng = np.random.default_rng(seed)
    exclude = set(space.sample(rng, 5))
    picked = space.sample(rng, 10, exclude=exclude)
    assert len(picked) == len(set(picked)) == 10
    assert not set(picked) & exclude
    assert all(space.is_valid(i) for i in picked)
    assert len(space.sample(rng, 1000)) == len(space)     # asks for more than there is


def test_neighbour_changes_exactly_one_knob_and_stays_valid():
    space = ConfigSpace((KnobDecl("a", tuple(range(6))), KnobDecl("b", tuple(range(6))),
                         KnobDecl("c", (0, 1))),
                        (KnobExpr("!=", (Knob("a"), Knob("b"))),))
    rng = np.random.default_rng(1)
    i = space.index({"a": 1, "b": 2, "c": 0})
    for _ in range(200):
        j = space.neighbour(i, rng)
        assert space.is_valid(j)
        diff = sum(x != y for x, y in zip(space.digits(i), space.digits(j)))
        assert diff == 1
        i = j


def test_python_templates_use_when_and_require():
    fn = tdsl.loads(TEMPLATE)["mm"].function()
    s = (Schedule(fn).knob("f", [4, 8]).knob("par", [False, True])
         .require(KnobExpr(">=", (Knob("f"), 4)))
         .split("C", "i", Knob("f"), "io", "ii")
         .when({"par": True}, lambda s: s.parallel("C", "io"),
               lambda s: s.unroll("C", "ii")))
    kinds = [type(d).__name__ for d in s.resolve({"par": True})]
    assert kinds == ["Split", "Parallel"]
    assert [type(d).__name__ for d in s.resolve({})] == ["Split", "Unroll"]
    with pytest.raises(ScheduleError, match="not one of its choices"):
        s.resolve({"f": 5})


FACTORS = """
op mm(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N] {
    C[i, j] = sum[k](A[i, k] * B[k, j])
}
schedule mm for cpu {
    knob tj in factors(N, 64) = 32
    knob ti in factors(M)
    io, ii = split(C.i, ti)
    jo, ji = split(C.j, tj)
    vectorize(ji)
}
"""


def test_factor_knobs_take_their_choices_from_the_sizes():
    op = tdsl.loads(FACTORS)["mm"]
    s = op.schedule(shapes={"M": 12, "N": 96, "K": 5})
    choices = {k.name: k.choices for k in s.knobs}
    assert choices["tj"] == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)
    assert choices["ti"] == (1, 2, 3, 4, 6, 12)
    assert s.default_config() == {"tj": 32, "ti": 1}
    # a default that does not divide falls to the nearest factor below it
    assert op.schedule(shapes={"M": 12, "N": 40, "K": 5}).default_config()["tj"] == 20
    a = np.ones((12, 5), np.float32)
    b = np.ones((5, 96), np.float32)
    got = op.build(shapes={"M": 12, "N": 96, "K": 5}, config={"tj": 48, "ti": 4})(a, b)
    np.testing.assert_allclose(got, a @ b)


def test_factor_knobs_need_the_size():
    with pytest.raises(ScheduleError, match=r"factors\(N\) needs the size N"):
        tdsl.loads(FACTORS)["mm"].schedule()
    with pytest.raises(ScheduleError, match="list"):
        tdsl.loads(FACTORS.replace("factors(M)", "divisors(M)"))["mm"].schedule(
            shapes={"M": 4, "N": 4, "K": 4})


def test_a_knob_without_a_default_takes_the_first_configuration_the_requires_allow():
    """`knob t in factors(N)` with `require t >= 2` defaulted to 1, so the untuned build broke
    its own require; written defaults stay as written."""
    op = tdsl.loads("""
op scale(X: f32[N, D]) -> Y: f32[N, D] { Y[n, d] = X[n, d] * 2.0 }
schedule scale for cpu {
    knob t in factors(N)
    knob u in [1, 2, 4]
    knob v in [1, 2] = 1
    require t >= 2
    require t * u >= 6 and u * v > 1
    io, ii = split(Y.n, t)
    jo, ji = split(Y.d, u)
}
""")["scale"]
    s = op.schedule(shapes={"N": 12, "D": 8})
    assert s.default_config() == {"t": 2, "u": 4, "v": 1}
    s.knob_values()                                  # the defaults break no require
    x = np.ones((12, 8), np.float32)
    np.testing.assert_array_equal(op.reference(x), 2 * x)
    assert op.lower(shapes={"N": 12, "D": 8}) is not None


def test_factor_knobs_round_trip():
    assert parse(unparse.module(parse(FACTORS))) == parse(FACTORS)
