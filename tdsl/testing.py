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
vectorize, unroll, parallel and compute_inline/compute_root, kept only when legal; or, from
`adversarial_schedules`, the combinations that broke kernels before: chains of
cache_read/cache_write, compute_at at split and fused loops, storage_align, fuse of
attached stages.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from .arrays import input_shapes, random_arguments, random_array  # noqa: F401 (re-exported)
from .api import BACKENDS
from .emit_c.kernel import build_kernel
from .emit_c.sanitized import run_sanitized
from .errors import CallError, ScheduleError, TdslError
from .frontend.to_te import ranks_for_pack
from .lowering import te
from .lowering.default_schedule import default_schedule
from .lowering.lower import lower
from .lowering.passes import apply_schedule
from .lowering.schedule import Schedule
from .target import as_target


@dataclass
class Case:
    ranks: list[int] | None
    sizes: dict[str, int]
    arrays: list = field(repr=False)
    schedule: Schedule | None = field(repr=False)
    steps: list = field(default_factory=list)     # the schedule, readable, for reports
    config: dict | None = None                    # the knobs of a schedule block

    def __repr__(self) -> str:
        shapes = [getattr(a, "shape", ()) for a in self.arrays]
        return f"Case(sizes={self.sizes}, shapes={shapes}, schedule={self.steps})"


@st.composite
def schedules(draw, fn: te.Function):
    """A random legal schedule for ``fn`` (the automatic default is one of the choices)."""
    kind = draw(st.sampled_from(["auto", "simple", "adversarial"]))
    if kind == "auto":
        return default_schedule(fn), ["auto"]
    if kind == "adversarial":
        return draw(adversarial_schedules(fn))
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


GPU_FACTORS = [1, 2, 3, 5, 8, 16, 32, 64, 128]


@st.composite
def gpu_schedules(draw, fn: te.Function, target):
    """A random legal GPU schedule for ``fn``: the automatic one, or random tiles and
    bindings: each stage computed at root either has its data loops fused and split in
    blocks of threads on x, or its last two data loops tiled over 2-D blocks (the loops
    outside run in every thread), or (a reduction) a block per element with the reduction
    split across its threads (a cross-thread reduction); intermediates are inlined or
    computed at root at random."""
    if draw(st.booleans()):
        return default_schedule(fn, None, target), ["auto"]
    sched, steps = Schedule(fn), []
    for t in fn.stages():
        if t in fn.outputs:
            continue
        if draw(st.booleans()) and not any(isinstance(e, te.Reduce)
                                           for e in te.walk(t.op.body)):
            sched, steps = sched.compute_inline(t.name), steps + [f"inline {t.name}"]
    inlined = {d.stage for d in sched.directives}
    for t in fn.stages():
        data = [ax.var.name for ax in t.op.axes]
        if t.name in inlined or not data:
            continue
        factors = [f for f in GPU_FACTORS if f <= target.max_threads]
        body = t.op.body
        if isinstance(body, te.Reduce) and draw(st.booleans()):
            # a block per output element, its reduction across the block's threads
            raxes = [ax.var.name for ax in body.axes]
            block, red = data[0], raxes[0]
            if len(data) > 1:
                block = "f"
                sched = sched.fuse(t.name, *data, fused=block)
            if len(raxes) > 1:
                red = "r"
                sched = sched.fuse(t.name, *raxes, fused=red)
            factor = draw(st.sampled_from(factors))
            sched = sched.bind(t.name, block, "blockIdx.x").split(t.name, red, factor, "ro", "rt") \
                .bind(t.name, "rt", "threadIdx.x")
            steps.append(f"a block per {t.name} element, its reduction split by {factor} "
                         f"across threads")
            continue
        if len(data) >= 2 and draw(st.booleans()):
            fx, fy = draw(st.sampled_from(factors)), draw(st.sampled_from(factors))
            if fx * fy > target.max_threads:
                fy = max(1, target.max_threads // fx)
            x, y = data[-2:]
            sched = sched.tile(t.name, x, y, fx, fy, "bx", "by", "tx", "ty")
            for axis, tag in (("bx", "blockIdx.y"), ("by", "blockIdx.x"),
                              ("tx", "threadIdx.y"), ("ty", "threadIdx.x")):
                sched = sched.bind(t.name, axis, tag)
            steps.append(f"tile {t.name}.{x},{y} by {fx}x{fy}, bound to 2-D blocks")
            continue
        axis = data[0]
        if len(data) > 1:
            axis = "f"
            sched = sched.fuse(t.name, *data, fused=axis)
        factor = draw(st.sampled_from(factors))
        sched = sched.split(t.name, axis, factor, "b", "t").bind(t.name, "b", "blockIdx.x") \
            .bind(t.name, "t", "threadIdx.x")
        steps.append(f"fuse {t.name}'s data loops, split by {factor}, bound to x")
    return sched, steps


ADVERSARIAL_STEPS = ["cache_read", "cache_write", "compute_at", "split", "fuse", "reorder",
                     "storage_align", "unroll", "vectorize", "parallel", "compute_inline"]


@st.composite
def adversarial_schedules(draw, fn: te.Function, max_steps: int = 8):
    """A legal schedule of up to ``max_steps`` primitives drawn one at a time on the stage
    graph the previous ones made (so later steps act on cache stages, split and fused loops);
    a step the schedule refuses is dropped."""
    sched, steps = Schedule(fn), []
    for _ in range(draw(st.integers(1, max_steps))):
        g = apply_schedule.run(fn, sched.resolve())
        live = g.live()
        verb = draw(st.sampled_from(ADVERSARIAL_STEPS))
        stage = draw(st.sampled_from(live))
        leaves = g.stages[stage].leaves
        if verb == "cache_read":
            tensors = [t for t in [*g.inputs, *live] if g.readers(t)]
            if not tensors:
                continue
            src = draw(st.sampled_from(tensors))
            reader = draw(st.sampled_from(g.readers(src)))
            step = (f"cache_read({src}, local, [{reader}])",
                    lambda s: s.cache_read(src, "local", [reader]))
        elif verb == "cache_write":
            step = (f"cache_write({stage}, local)", lambda s: s.cache_write(stage, "local"))
        elif verb == "compute_at":
            consumer = draw(st.sampled_from(live))
            if not g.stages[consumer].leaves:
                continue
            axis = draw(st.sampled_from(g.stages[consumer].leaves))
            step = (f"compute_at({stage}, {consumer}.{axis})",
                    lambda s: s.compute_at(stage, consumer, axis))
        elif verb == "compute_inline":
            step = (f"compute_inline({stage})", lambda s: s.compute_inline(stage))
        elif not leaves:
            continue
        elif verb == "split":
            axis, factor = draw(st.sampled_from(leaves)), draw(st.sampled_from([2, 3, 4, 16]))
            step = (f"split({stage}.{axis}, {factor})", lambda s: s.split(stage, axis, factor))
        elif verb in ("fuse", "reorder"):
            if len(leaves) < 2:
                continue
            k = draw(st.integers(0, len(leaves) - 2))
            a, b = leaves[k], leaves[k + 1]
            step = (f"fuse({stage}.{a}, {stage}.{b})", lambda s: s.fuse(stage, a, b)) \
                if verb == "fuse" else \
                (f"reorder({stage}.{b}, {stage}.{a})", lambda s: s.reorder(stage, b, a))
        elif verb == "storage_align":
            dims = [iv.var.name for iv in g.stages[stage].data]
            if not dims:
                continue
            dim, factor = draw(st.sampled_from(dims)), draw(st.sampled_from([2, 4, 16]))
            step = (f"storage_align({stage}.{dim}, {factor}, 1)",
                    lambda s: s.storage_align(stage, dim, factor, 1))
        else:
            axis = draw(st.sampled_from(leaves))
            step = (f"{verb}({stage}.{axis})", lambda s: getattr(s, verb)(stage, axis))
        text, apply = step
        try:
            candidate = apply(sched)
            apply_schedule.run(fn, candidate.resolve())
        except ScheduleError:
            continue
        sched, steps = candidate, steps + [text]
    return sched, steps


@st.composite
def block_schedules(draw, op, names: list[str], target, ranks, sizes, attrs):
    """One of the op's own schedule blocks, with its knobs at random choices (those its
    ``require``s allow): ``(schedule, config, steps)``."""
    name = draw(st.sampled_from(names))
    sched = op.schedule(name, target, ranks, sizes, **attrs)
    config = {k.name: draw(st.sampled_from(list(k.choices)), label=k.name)
              for k in sched.knobs}
    try:
        sched.knob_values(config)
    except ScheduleError:
        assume(False)           # outside the block's space
    return sched, config, [f"block {name}"] + [f"{k} = {v}" for k, v in config.items()]


@st.composite
def cases(draw, op, attrs: dict | None = None, max_size: int = 9, schedules_too=True,
          target="c"):
    """Sizes, inputs and a schedule for ``op``: automatic, random, adversarial, or one of the
    op's own blocks for ``target`` at a random configuration of its knobs. On a GPU target
    the random schedules are `gpu_schedules` (tiles and thread bindings)."""
    attrs = dict(attrs or {})
    target = as_target(target)
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
    config = None
    blocks = op.schedule_names(target) if schedules_too else []
    if blocks and draw(st.booleans()):
        sched, config, steps = draw(block_schedules(op, blocks, target, ranks, sizes, attrs))
    else:
        strategy = gpu_schedules(fn, target) if target.is_gpu else schedules(fn)
        sched, steps = draw(strategy) if schedules_too else (None, [])
    return Case(ranks, sizes, arrays, sched, steps, config)


def check_case(op, case: Case, attrs: dict | None = None, rtol=1e-4, atol=1e-4, target="c",
               sanitize: bool = False):
    """Build ``op`` for ``target`` with the case's schedule, run it, compare with the
    reference. ``sanitize`` runs the kernel built under the address and undefined-behaviour
    sanitizers (in a child process; see `emit_c.sanitized`) instead of the release build."""
    attrs = dict(attrs or {})
    schedule = case.schedule or op.schedule(target=target, ranks=case.ranks, **attrs)
    embedded = as_target(target).kind == "c-embedded"
    # an embedded build fixes every size (its arena is sized then) and runs emulated
    shapes = op.sizes_of(*case.arrays, **attrs) if embedded else None
    try:
        func = lower(schedule.fn, schedule, case.config, shapes, target=target)
    except ScheduleError:
        if case.config is not None:
            raise               # the op's own block, at a configuration of its space
        assume(False)           # an illegal combination: not a failure of the op
    def run():
        if embedded:
            from .emulate import EmulatedKernel
            return EmulatedKernel(func, target)(*case.arrays)
        return run_sanitized(func, case.arrays, target) if sanitize else \
            _build(func, target)(*case.arrays)
    try:
        want = op.reference(*case.arrays, **attrs)
    except CallError as refused:
        # sizes the op's meaning refuses (a packed operand too small for its reads): the
        # kernel must refuse them too, and the case is not one to compare
        try:
            run()
        except CallError:
            assume(False)
        raise AssertionError(f"the reference refuses these arguments ({refused.message}), "
                             f"the kernel computed a result") from None
    got = run()
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w, t in zip(got, want, schedule.fn.outputs):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        compare(t.name, g, w, rtol, atol)


def compare(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> None:
    """An AssertionError naming the worst element unless ``got`` matches ``want``."""
    if got.dtype.kind == "f":
        bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        err = np.where(bad, np.abs(got.astype(np.float64) - want), 0)
    else:
        bad = got != want
        err = np.where(bad, np.abs(got.astype(np.float64) - want.astype(np.float64)), 0)
    if not bad.any():
        return
    worst = np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))),
                             got.shape) if got.ndim else ()
    raise AssertionError(f"output {name}: {int(bad.sum())} of {got.size} elements differ; "
                         f"the worst, {name}[{', '.join(map(str, worst))}], is {got[worst]!r} "
                         f"where the reference has {want[worst]!r}")


def counterexample(case: Case | None, error: Exception) -> str:
    """The shrunk failure, readable: sizes, the schedule's steps, and what went wrong (the
    worst element of a mismatch)."""
    lines = []
    if case is not None:
        lines += [f"  sizes: {', '.join(f'{k}={v}' for k, v in case.sizes.items())}",
                  f"  schedule: {'; '.join(case.steps) or 'the default'}"]
    message = getattr(error, "message", None) or str(error).strip().splitlines()[0]
    return "\n".join(lines + [f"  {type(error).__name__}: {message}"])


def _build(func, target):
    """The kernel of ``func`` for ``target`` through its backend (C, CUDA, OpenCL, ...);
    C through this module's `build_kernel`, the seam tests replace."""
    target = as_target(target)
    if target.kind == "c":
        return build_kernel(func, target=target)
    return BACKENDS[target.kind](func, target=target)


def run_property_test(module, op_name: str | None, target: str, examples: int,
                      attrs: dict | None = None) -> int:
    """``tdsl test``: property-test each op; print a shrunk counterexample on failure.
    ``attrs`` (``--attr``): attribute values, each given to the ops that have it. An op with
    an attribute that has no default and no value here is skipped, naming it, and the exit
    status is 1 then too: nothing was tested of it."""
    attrs = dict(attrs or {})
    names = [op_name] if op_name else (module.own_ops() or sorted(module))
    unused = set(attrs) - {a for name in names for a in module[name].attr_names}
    if unused:
        raise TdslError(f"--attr {', '.join(sorted(unused))}: no op tested here has "
                        f"{'such attributes' if len(unused) > 1 else 'that attribute'}")
    failed = skipped = 0
    for name in names:
        op = module[name]
        op_attrs = {k: v for k, v in attrs.items() if k in op.attr_names}
        missing = [a for a in op.ast.attrs if a.default is None and a.name not in op_attrs]
        if missing:
            skipped += 1
            print(f"{name}: skipped: attribute{'s' * (len(missing) > 1)} "
                  f"{', '.join(f'{a.name} ({a.kind})' for a in missing)} without a default; "
                  f"give {'them' if len(missing) > 1 else 'it'} with "
                  f"{' '.join(f'--attr {a.name}=VALUE' for a in missing)}", file=sys.stderr)
            continue

        last: list = []         # the case hypothesis replays last is the shrunk one

        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck), print_blob=False)
        @given(cases(op, op_attrs, target=target))
        def prop(case):
            last[:] = [case]
            check_case(op, case, op_attrs, target=target)

        try:
            prop()
        except Exception as e:      # hypothesis re-raises the shrunk failure
            failed += 1
            print(f"{name}: FAILED\n{counterexample(last[0] if last else None, e)}",
                  file=sys.stderr)
        else:
            print(f"{name}: ok ({examples} examples)")
    return 1 if failed or skipped else 0
