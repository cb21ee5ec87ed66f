"""Property-based testing of ops, for tdsl's own tests and for users' pytest suites.

    from hypothesis import given
    import tdsl.testing as tt

    @given(tt.cases(op))
    def test_my_op(case):
        tt.check_case(op, case)          # builds for C, compares with the reference

A `Case` is a draw of everything that varies: the rank (rank-generic ops), the sizes, the
input values and a schedule. Sizes are drawn for the sizes named as whole dimensions of the
inputs; draws whose output would be empty or whose input shapes disagree are discarded.
Schedules are random combinations of split (factors that do and don't divide), reorder,
vectorize, unroll, parallel and compute_inline/compute_root, kept only when legal.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from .arrays import input_shapes, random_arguments, random_array  # noqa: F401 (re-exported)
from .emit_c.kernel import build_kernel
from .errors import ScheduleError
from .frontend.to_te import ranks_for_pack
from .lowering import te
from .lowering.default_schedule import default_schedule
from .lowering.lower import lower
from .lowering.schedule import Schedule


@dataclass
class Case:
    ranks: list[int] | None
    sizes: dict[str, int]
    arrays: list = field(repr=False)
    schedule: Schedule | None = field(repr=False)
    steps: list = field(default_factory=list)     # the schedule, readable, for reports

    def __repr__(self) -> str:
        shapes = [getattr(a, "shape", ()) for a in self.arrays]
        return f"Case(sizes={self.sizes}, shapes={shapes}, schedule={self.steps})"


@st.composite
def schedules(draw, fn: te.Function):
    """A random legal schedule for ``fn`` (the automatic default is one of the choices)."""
    if draw(st.booleans()):
        return default_schedule(fn), ["auto"]
    sched, steps = Schedule(fn), []
    for t in fn.stages():
        if t in fn.outputs:
            continue
        choice = draw(st.sampled_from(["root", "inline"]))
        if choice == "inline" and not isinstance(t.op.body, te.Reduce) and not any(
                isinstance(e, te.Reduce) for e in te.walk(t.op.body)):
            sched, steps = sched.compute_inline(t.name), steps + [f"inline {t.name}"]
    for t in fn.outputs:
        data = [ax.var.name for ax in t.op.axes]
        if not data:
            continue
        axis = draw(st.sampled_from(data))
        factor = draw(st.sampled_from([1, 2, 3, 4, 5, 8, 16]))
        sched = sched.split(t.name, axis, factor, f"{axis}_o", f"{axis}_i")
        steps.append(f"split {t.name}.{axis} by {factor}")
        inner = f"{axis}_i"
        if axis == data[-1] and draw(st.booleans()):
            sched, steps = sched.vectorize(t.name, inner), steps + [f"vectorize {inner}"]
        elif draw(st.booleans()):
            sched, steps = sched.unroll(t.name, inner), steps + [f"unroll {inner}"]
        if draw(st.booleans()):
            outer = f"{axis}_o" if axis == data[0] else data[0]
            sched, steps = sched.parallel(t.name, outer), steps + [f"parallel {outer}"]
    return sched, steps


@st.composite
def cases(draw, op, attrs: dict | None = None, max_size: int = 9, schedules_too=True):
    attrs = dict(attrs or {})
    rank = draw(st.integers(1, 4))
    ranks = ranks_for_pack(op.ast, rank)
    fn = op.function(ranks, **attrs)
    sizes = {v.name: draw(st.integers(1, max_size), label=v.name) for v in fn.shape_vars}
    shapes = input_shapes(fn, sizes)
    assume(shapes is not None)
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    arrays = [random_array(s, t.dtype, rng) if s else random_array((), t.dtype, rng)[()]
              for s, t in zip(shapes, fn.inputs)]
    sched, steps = draw(schedules(fn)) if schedules_too else (None, [])
    return Case(ranks, sizes, arrays, sched, steps)


def check_case(op, case: Case, attrs: dict | None = None, rtol=1e-4, atol=1e-4, target="c"):
    """Build ``op`` for ``target`` with the case's schedule, run it, compare with the
    reference."""
    attrs = dict(attrs or {})
    try:
        func = lower(case.schedule.fn, case.schedule, target=target) if case.schedule else None
    except ScheduleError:
        assume(False)           # an illegal combination: not a failure of the op
    kernel = build_kernel(func, target=target) if func is not None else \
        op.build(target, ranks=case.ranks, **attrs)
    got = kernel(*case.arrays)
    want = op.reference(*case.arrays, **attrs)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)


def run_property_test(module, op_name: str | None, target: str, examples: int) -> int:
    """``tdsl test``: property-test each op; print a shrunk counterexample on failure."""
    names = [op_name] if op_name else (module.own_ops() or sorted(module))
    failed = 0
    for name in names:
        op = module[name]
        if op.attr_names and any(a.default is None for a in op.ast.attrs):
            print(f"{name}: skipped (attributes without defaults: give them in a test)")
            continue

        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(cases(op))
        def prop(case):
            check_case(op, case, target=target)

        try:
            prop()
        except Exception as e:      # hypothesis re-raises the shrunk failure
            failed += 1
            print(f"{name}: FAILED\n{e}", file=sys.stderr)
        else:
            print(f"{name}: ok ({examples} examples)")
    return 1 if failed else 0
