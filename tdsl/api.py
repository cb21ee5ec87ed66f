"""The public objects: `Module` (a checked .tdsl file), `Op` (one operator in it) and
`Graph` (one model in it, from `graph_api`).

This module sits on top of the pipeline: it drives the front end, the reference evaluator,
lowering and the emitters, and nothing below imports it.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np

from .emit_c.kernel import build_kernel
from .emulate import build_emulated
from .emit_cuda import build_cuda
from .emit_opencl import build_opencl
from .errors import BuildError, CallError, ScheduleError
from .frontend import ast, unparse
from .frontend.program import OpDefinition, Program, load_program, program_from_text, \
    std_program
from .frontend.schedules import block_serves, to_schedule
from .frontend.to_te import ranks_for_pack
from .graph_api import Graph, GraphModule
from .lowering import sizes, te
from .lowering.default_schedule import default_schedule
from .lowering.intrinsics import INTRINSICS
from .lowering.loop_ir import LoweredFunc
from .lowering.lower import lower
from .lowering.reference.semantics import evaluate
from .lowering.schedule import Schedule
from .per_rank import PerRankKernel
from .specialize import ShapeSpecializingKernel
from .target import Target, as_target
from .tuner.log import Workload, content_digest, read_log, require_log, select_record

# target kind -> the function that builds a lowered function into a callable kernel
BACKENDS = {"c": build_kernel, "c-embedded": build_emulated, "cuda": build_cuda,
            "opencl": build_opencl}


class Op:
    """One operator. ``op.reference(*arrays, **attrs)`` is its meaning, computed with numpy."""

    def __init__(self, definition: OpDefinition, module: "Module"):
        self._def = definition
        self.module = module

    @property
    def name(self) -> str:
        return self._def.name

    @property
    def ast(self) -> ast.OpDef:
        return self._def.ast

    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.ast.params]

    @property
    def attr_names(self) -> list[str]:
        return [a.name for a in self.ast.attrs]

    def content_digest(self) -> str:
        """A digest of this op's source and its schedule blocks: what tuning logs key
        records by (not the file's path)."""
        blocks = [b for prog in {id(p): p for p in (self._def.program, self.module.program)}
                  .values() for b in prog.schedules if b.op == self.name]
        return content_digest(self.ast, blocks)

    def signature(self) -> str:
        """``name(A: f32[M, K], B: f32[K, N]; alpha: float = 1.0) -> C: f32[M, N]``"""
        return unparse.signature(self.ast)

    def function(self, ranks: list[int] | None = None, **attrs) -> te.Function:
        """The tensor-expression function for these attributes (and argument ranks, for
        rank-generic ops)."""
        return self._def.instantiate(attrs, ranks, error_type=CallError)

    # ---------------------------------------------------------------- schedules and builds

    def schedule_names(self, target: Target | str = "c") -> list[str]:
        """Names of the schedule blocks written for this op and target."""
        return list(self._schedule_defs(as_target(target)))

    def _schedule_defs(self, target: Target) -> dict:
        out = {}
        for prog in (self._def.program, self.module.program):
            for sdef in prog.schedules:
                if sdef.op == self.name and block_serves(sdef.target, target.kind):
                    out.setdefault(sdef.name, sdef)
        return out

    def schedule(self, name: str | None = None, target: Target | str = "c", ranks=None,
                 shapes=None, **attrs) -> Schedule:
        """The schedule called ``name`` (a block in the source) for ``target``, as a
        `Schedule` value that Python code can extend with more primitives. The block reads
        the target's facts (``lanes``, ``registers``, ...).

        ``None`` picks the block named ``default`` when there is one, else the automatic
        default schedule; ``"auto"`` is always the automatic one, ``"naive"`` no schedule.
        """
        target = as_target(target)
        shapes = _checked_shapes(shapes)
        fn = self.function(_ranks(self, ranks, shapes), **attrs)
        defs = self._schedule_defs(target)
        if name is None:
            name = "default" if "default" in defs else "auto"
        if name == "auto":
            return default_schedule(fn, shapes, target)
        if name == "naive":
            return Schedule(fn)
        if name not in defs:
            raise ScheduleError(f"op {self.name} has no schedule '{name}' for {target}",
                                hint=f"schedules: {', '.join(['auto', 'naive', *defs])}")
        return to_schedule(defs[name], fn, INTRINSICS, shapes, target)

    def lower(self, schedule=None, shapes: dict | None = None, config: dict | None = None,
              target: Target | str = "c", ranks=None, **attrs) -> LoweredFunc:
        """The loop nest (print it to read it)."""
        target = as_target(target)
        shapes = _checked_shapes(shapes)
        sched = self._resolve_schedule(schedule, target, ranks, shapes, attrs)
        return lower(sched.fn, sched, config, shapes, target=target)

    def build(self, target: Target | str = "c", schedule=None, shapes: dict | None = None,
              config: dict | None = None, flags=None, ranks=None, tuning_log=None,
              specialize: bool = True, **attrs):
        """Compile to a `Kernel` that takes and returns numpy arrays.

        ``shapes`` fixes sizes at build time (``{"M": 64}``); sizes left out are read from
        the arguments at each call. ``schedule`` is a name, a `Schedule`, or None (see
        `schedule`); ``config`` fills its knobs (the defaults otherwise). ``tuning_log``
        (a `tdsl tune` log) supplies the best configuration recorded for this workload that
        is legal for ``target`` (see `tuned_config`); without one, a warning says the
        defaults are used. ``target`` is a
        `Target` or its string (``"c"``, ``"c -march=x86-64-v3"``); ``flags`` are added to
        its compiler flags.

        A host kernel with sizes left to the call is loop-partitioned, and fast at any
        size; with ``specialize`` (the default) it also builds itself for each shape it is
        called at a second time, as ``shapes=`` would, and keeps up to eight such builds
        (`tdsl.specialize`). ``specialize=False`` keeps the one generic kernel.
        """
        target = as_target(target)
        if target.kind not in BACKENDS:
            raise BuildError(f"target '{target}' has no backend yet",
                             hint=f"backends: {', '.join(BACKENDS)}")
        if tuning_log is not None:
            require_log(tuning_log)         # now, not at a rank-generic kernel's first call
        if ranks is None and _pack_of(self) and not _pack_rank(self, shapes) and \
                not isinstance(schedule, Schedule):
            # rank-generic, no rank named: one kernel per argument ranks, on first call
            return PerRankKernel(self.name, self.param_names, lambda r: self.build(
                target, schedule, shapes, config, flags, r, tuning_log, specialize, **attrs))
        tuned = config
        if tuning_log is not None and config is None:
            tuned = self.tuned_config(tuning_log, shapes, target, schedule, **attrs)
        func = self.lower(schedule, shapes, tuned, target, ranks, **attrs)
        # the sizes in ``shapes`` are already constants of the lowered function
        kernel = BACKENDS[target.kind](func, target=target, flags=tuple(flags or ()))
        if not (specialize and target.kind == "c" and func.shape_vars and
                target.unrunnable_reason() is None):
            return kernel
        return ShapeSpecializingKernel(kernel, lambda sizes: self.build(
            target, schedule, {**(shapes or {}), **sizes}, config, flags, ranks, tuning_log,
            False, **attrs), lambda *arrays: self.sizes_of(*arrays, **attrs))

    def tuned_config(self, tuning_log, shapes: dict | None, target: Target | str = "c",
                     schedule=None, **attrs) -> dict | None:
        """The best configuration in ``tuning_log`` for this op at ``shapes`` (every size
        given), these attributes and schedule name that is legal for ``target`` (its knobs
        are the schedule's, its values among their choices, every ``require`` holds for
        this target's lanes and registers), preferring records measured for this very
        target (`tdsl.tuner.log.select_record`). Records measured for other targets, or
        illegal here, are skipped with one warning that counts them; None, with a warning,
        when no record applies. A log that does not exist is a `TuningLogError`."""
        target = as_target(target)
        name = schedule if isinstance(schedule, str) else None
        workload = Workload.make(self.module.name, self.name, shapes or {}, attrs,
                                 str(target), name, self.content_digest())
        records = read_log(require_log(tuning_log))
        sched = self._resolve_schedule(schedule, target, None, shapes, attrs)
        knobs = set(sched.default_config())

        def check(config):
            # a record made before a knob was renamed or dropped cannot configure this
            # schedule; one measured elsewhere may break a `require` of this target
            if not set(config) <= knobs:
                return (f"whose knobs are not this schedule's "
                        f"({', '.join(sorted(knobs)) or 'none'})", None)
            try:
                sched.knob_values(config)
            except ScheduleError as e:
                return (f"illegal for {target} with {target.lanes} lanes and "
                        f"{target.registers} registers"), e.message
            return None

        chosen = select_record(records, workload, target.facts(), check)
        message = chosen.warning(tuning_log, workload)
        if message:
            warnings.warn(message, stacklevel=3)
        return None if chosen.record is None else chosen.record["config"]

    def _resolve_schedule(self, schedule, target, ranks, shapes, attrs) -> Schedule:
        if isinstance(schedule, Schedule):
            self._check_owns(schedule, attrs)
            return schedule
        return self.schedule(schedule, target, ranks, shapes, **attrs)

    def _check_owns(self, schedule: Schedule, attrs: dict) -> None:
        """A `Schedule` is made for one function: this op, at some attributes and ranks.
        Lowering follows the schedule's function, so one made for another op (or other
        attributes) would build that instead, silently."""
        fn = schedule.fn
        attrs = attrs or dict(fn.attrs)
        try:
            mine = self.function([t.ndim for t in fn.inputs], **attrs)
        except CallError:
            mine = None
        if mine is None or fn.name != self.name or str(mine) != str(fn):
            given = ", ".join(f"{k}={v}" for k, v in attrs.items())
            raise ScheduleError(f"this schedule was made for op {fn.name}"
                                f"{'' if fn.name != self.name else ' with other attributes'}"
                                f", not for {self.name}{f' with {given}' if given else ''}",
                                hint=f"make it from this op: {self.name}.schedule(...)")

    def sizes_of(self, *arrays, **attrs) -> dict[str, int]:
        """The sizes these arguments bind, e.g. ``{"M": 64, "K": 32, "N": 16}``, to build
        a kernel specialised to them: ``op.build(shapes=op.sizes_of(a, b))``."""
        fn = self.function([np.ndim(a) for a in arrays], **attrs)
        sizes = {}
        for t, a in zip(fn.inputs, arrays):
            for dim, n in zip(t.shape, np.shape(a)):
                if isinstance(dim, te.Var):
                    sizes.setdefault(dim.name, int(n))
        return sizes

    def reference(self, *arrays, **attrs):
        """Evaluate with numpy: an ndarray, or a tuple of them for several outputs."""
        ranks = [np.ndim(a) for a in arrays]
        fn = self.function(ranks, **attrs)
        outs = evaluate(fn, arrays)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self) -> str:
        return f"<tdsl.Op {self.signature()}>"


class Module:
    """A checked .tdsl file: ``module["matmul"]`` is an `Op`, ``module["net"]`` a `Graph`."""

    def __init__(self, program: Program, name: str):
        self._program = program
        self.name = name
        self._ops = {n: Op(d, self) for n, d in program.all_ops().items()}
        self._graphs = {n: Graph(g, self) for n, g in program.checked_graphs.items()}

    @property
    def program(self) -> Program:
        return self._program

    def __getitem__(self, name: str) -> Op | Graph:
        if name in self._graphs:
            return self._graphs[name]
        try:
            return self._ops[name]
        except KeyError:
            graphs = f"; graphs: {', '.join(self._graphs)}" if self._graphs else ""
            raise KeyError(f"no op '{name}' in {self.name} (ops: "
                           f"{', '.join(sorted(self._ops))}{graphs})") from None

    def __contains__(self, name: str) -> bool:
        return name in self._ops or name in self._graphs

    def graphs(self) -> list[str]:
        """The graphs defined in this file, in source order."""
        return list(self._graphs)

    def __iter__(self):
        return iter(self._ops)

    def own_ops(self) -> list[str]:
        """The ops defined in this file itself (not imported), in source order."""
        return list(self._program.ops)

    def __repr__(self) -> str:
        return f"<tdsl.Module {self.name}: {len(self._ops)} ops>"


def _ranks(op: Op, ranks, shapes) -> list[int] | None:
    """Argument ranks for a rank-generic op: given, or implied by sizes ``S0, S1, ...``."""
    if ranks is not None:
        return [ranks] * len(op.ast.params) if isinstance(ranks, int) else list(ranks)
    pack = _pack_of(op)
    if pack is None:
        return None
    rank = _pack_rank(op, shapes)
    if rank:
        return ranks_for_pack(op.ast, rank)
    raise CallError(f"op {op.name} is rank-generic (*{pack}): say which rank to build, "
                    f"e.g. ranks=2, or give its sizes, e.g. shapes={{'{pack}0': 8}}")


def _checked_shapes(shapes: dict | None) -> dict | None:
    """Sizes fixed by name: non-negative ints, not "4", 4.7 or -1 (a CallError)."""
    return None if shapes is None else sizes.check_given(shapes, "shapes")


def _pack_of(op: Op) -> str | None:
    """The name of a rank-generic op's pack (``S`` in ``X: f32[*S]``); None for others."""
    return next((d.name for p in op.ast.params for d in p.type.dims or ()
                 if isinstance(d, ast.PackDim)), None)


def _pack_rank(op: Op, shapes) -> int:
    """The rank that sizes ``S0, S1, ...`` in ``shapes`` imply (0: none given)."""
    pack = _pack_of(op)
    return sum(1 for k in shapes or () if pack and k.startswith(pack) and
               k[len(pack):].isdigit())


def load(path) -> Module:
    """Load and check a .tdsl file; ``"std"`` is the standard library."""
    if str(path) == "std":
        return stdlib()
    return Module(load_program(path), str(path))


def loads(text: str, filename: str = "<string>") -> Module:
    """Check .tdsl source text."""
    return Module(program_from_text(text, filename), filename)


@functools.cache
def stdlib() -> Module:
    """The standard library, checked once per process."""
    return Module(std_program(), "std")


__all__ = ["Op", "Module", "Graph", "GraphModule", "load", "loads", "stdlib"]
