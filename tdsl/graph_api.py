"""`Graph` (a checked ``graph`` block) and `GraphModule` (a graph compiled for the host).

``tdsl.load(path)["net"]`` is a `Graph`. ``g.reference(*inputs, params=...)`` runs each op's
reference; ``g.build(target="c", params="w.npz")`` runs the graph passes (constant folding,
fusion, memory planning), compiles one kernel per fused group and returns a callable
`GraphModule`. Sizes left symbolic by the inputs and weights (a batch ``B``) are bound at
the first call with new shapes, and the kernels compiled for them then (cached after).
"""
from __future__ import annotations

import warnings
import zipfile
from pathlib import Path

import numpy as np

from .emit_c.kernel import build_kernel
from .errors import BuildError, CallError, ScheduleError, TdslError
from .frontend.program import std_program
from .frontend.schedules import to_schedule
from .lowering import te
from .lowering.default_schedule import default_schedule
from .lowering.dtypes import to_numpy
from .lowering.graph import compose, fold, fuse, memory
from .lowering.graph.ir import Graph as GraphIR, eval_size
from .lowering.graph.patterns import classify
from .lowering.intrinsics import INTRINSICS
from .lowering.lower import lower
from .lowering.reference import evaluate
from .target import Target, as_target
from .tuner.log import Workload, best_record, read_log


class Graph:
    """A model: ``graph.inputs``, ``graph.outputs``, ``graph.params`` (weight names)."""

    def __init__(self, ir: GraphIR, module):
        self.ir = ir
        self.module = module

    @property
    def name(self) -> str:
        return self.ir.name

    @property
    def inputs(self) -> list[str]:
        return list(self.ir.inputs)

    @property
    def outputs(self) -> list[str]:
        return list(self.ir.outputs)

    @property
    def params(self) -> list[str]:
        return list(self.ir.params)

    def __repr__(self) -> str:
        return f"<tdsl.Graph {self.name}: {len(self.ir.nodes)} ops>"

    def __str__(self) -> str:
        return str(self.ir)

    def load_params(self, params) -> dict[str, np.ndarray]:
        """The weights from a ``.npz`` path or a mapping, checked against the ``param``s."""
        return load_params(params, self.ir)

    def random_params(self, seed: int = 0, shapes: dict | None = None) -> dict:
        """Random weights of the declared shapes (``shapes`` gives sizes they leave open):
        normal with a spread of 1/sqrt(fan-in), a batch_norm's variance positive."""
        rng = np.random.default_rng(seed)
        sizes = {te.Var(k): v for k, v in (shapes or {}).items()}
        positive = {n.inputs[4] for n in self.ir.nodes if n.op == "batch_norm"
                    and len(n.inputs) == 5}
        out = {}
        for name in self.ir.params:
            v = self.ir.value(name)
            try:
                shape = tuple(eval_size(d, sizes) for d in v.shape)
            except KeyError as e:
                raise TdslError(f"weight '{name}' has the size {e.args[0]}: give it with "
                                f"shapes=") from None
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            a = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
            if name in positive:
                a = rng.uniform(0.5, 1.5, shape)
            out[name] = a.astype(to_numpy(v.dtype))
        return out

    def reference(self, *inputs, params=None):
        """Evaluate with each op's numpy reference: an array, or a tuple for several outputs."""
        weights = load_params(params, self.ir)
        arrays = _check_inputs(self.ir, inputs)
        sizes = bind_sizes(self.ir, {**weights, **arrays})
        env = {**weights, **arrays}
        for node in self.ir.nodes:
            outs = evaluate(node.fn, [env[i] for i in node.inputs], node.sizes(sizes))
            env.update(zip(node.outputs, outs))
        outs = tuple(env[o] for o in self.ir.outputs)
        return outs[0] if len(outs) == 1 else outs

    def build(self, target: Target | str = "c", params=None, fuse: bool = True,
              fold: bool = True, shapes: dict | None = None, flags=None,
              tuning_log=None) -> "GraphModule":
        """Compile for ``target`` (a `Target` or its string): one kernel per fused group
        (per op with ``fuse=False``), weight-only parts folded at build time (``fold=False``:
        not), the intermediates in one planned arena. ``shapes`` fixes sizes the inputs would
        otherwise tell; ``flags`` are added to the target's compiler flags; ``tuning_log``
        (from tuning the fused kernels, `tdsl.tuner.fused_task`) gives each kernel the best
        configuration it records on this machine (the schedule's defaults otherwise)."""
        target = as_target(target)
        if target.kind != "c":
            raise BuildError(f"graphs build for the host C target only, not '{target}'")
        weights = load_params(params, self.ir)
        return GraphModule(self, weights, target, fuse, fold, dict(shapes or {}), flags,
                           tuning_log)


class CompiledGraph:
    """The graph after the passes, at concrete sizes: ``ir`` (folded), ``groups``,
    ``functions`` (one fused `te.Function` each), ``plan`` (the `MemoryPlan`), ``notes``
    (what folding did). ``kernels`` are filled in when built."""

    def __init__(self, graph: Graph, weights: dict, sizes: dict[str, int], fuse_ops: bool,
                 fold_consts: bool):
        ir, notes = graph.ir, ()
        self.module = graph.module
        if fold_consts:
            ir, weights, notes = fold.run(ir, weights, _std_op, sizes)
        self.ir, self.weights, self.notes, self.sizes = ir, weights, notes, dict(sizes)
        self.groups = fuse.run(ir, fuse_ops)
        self.functions = [compose.run(ir, g, sizes, f"{ir.name}_k{k}_{ir.nodes[g.anchor].op}")
                          for k, g in enumerate(self.groups)]
        steps = [(f.inputs, f.outputs) for f in self.functions]
        nbytes = {v: _nbytes(ir, v, sizes) for f in self.functions for v in f.outputs}
        self.plan = memory.run(steps, nbytes, external=ir.outputs)
        self.kernels: list = []
        self.schedules: list[str] = []

    def build(self, module, target: Target, flags, tuning_log=None) -> None:
        records = read_log(tuning_log) if tuning_log is not None else []
        for f in self.functions:
            sched, how = _schedule_for(f, module, target)
            best = best_record(records, fused_workload(module, self.ir.name, f, target)) \
                if records else None
            if best is not None:
                how += " (tuned)"
            try:
                func = lower(f.fn, sched, best["config"] if best else None, target=target)
            except ScheduleError as e:
                # the anchor's schedule does not fit the fused function (a user's schedule
                # naming a stage fusion removed): the automatic one always does
                warnings.warn(f"{f.fn.name}: {e.message}; using the automatic schedule",
                              stacklevel=4)
                func = lower(f.fn, default_schedule(f.fn, None, target), target=target)
                how = "auto (fallback)"
            self.kernels.append(build_kernel(func, target=target, flags=tuple(flags or ())))
            self.schedules.append(how)

    def describe(self) -> str:
        """The graph after the passes: kernels and their ops, layouts, the memory plan."""
        lines = [f"graph {self.ir.name} at {_sizes_text(self.sizes)}"]
        lines += [f"  folded: {n}" for n in self.notes]
        lines.append(f"kernels ({len(self.functions)} for {len(self.ir.nodes)} ops):")
        for k, (g, f) in enumerate(zip(self.groups, self.functions)):
            how = f"  schedule: {self.schedules[k]}" if self.schedules else ""
            nodes = [self.ir.nodes[i] for i in g.nodes]
            ops = " + ".join(f"{n.op}->{n.outputs[0]}" for n in nodes)
            lines.append(f"  k{k} [{g.pattern.name.lower()}, anchor "
                         f"{self.ir.nodes[g.anchor].op}] {ops}{how}")
            outs = ", ".join(f"{o}: {_shape_text(self.ir, o, self.sizes)} NCHW"
                             if len(self.ir.value(o).shape) == 4 else
                             f"{o}: {_shape_text(self.ir, o, self.sizes)}" for o in f.outputs)
            lines.append(f"      ({', '.join(f.inputs)}) -> {outs}")
        p = self.plan
        lines.append(f"memory plan: peak {p.peak_bytes} bytes, naive sum {p.naive_bytes} "
                     f"bytes ({p.peak_bytes / max(p.naive_bytes, 1):.2f}x)")
        for s in p.slots:
            lines.append(f"  {s.name:<16} offset {s.offset:>10}  size {s.size:>10}  "
                         f"live k{s.first}..k{s.last}")
        return "\n".join(lines)


class GraphModule:
    """A compiled graph: ``y = module(x)`` on numpy arrays (a tuple for several outputs).

    ``module.compiled(...)`` is the `CompiledGraph` for the sizes of some inputs (its
    ``plan``, ``groups``, ``kernels``)."""

    def __init__(self, graph: Graph, weights, target, fuse_ops, fold_consts, shapes, flags,
                 tuning_log=None):
        self.graph = graph
        self._tuning_log = tuning_log
        self._weights = weights
        self._target, self._fuse, self._fold, self._flags = target, fuse_ops, fold_consts, flags
        self._shapes = shapes
        self._runs: dict[tuple, tuple] = {}
        known = bind_sizes(graph.ir, weights, shapes, partial=True)
        if all(s in known for s in graph.ir.sizes):
            self._prepare(known)

    def compiled(self, *inputs) -> CompiledGraph:
        return self._for(_check_inputs(self.graph.ir, inputs))[0]

    def __call__(self, *inputs):
        arrays = _check_inputs(self.graph.ir, inputs)
        compiled, staging, runs, outputs = self._for(arrays)
        for name, a in arrays.items():
            np.copyto(staging[name], a)
        for run in runs:
            run()
        outs = tuple(o.copy() for o in outputs)
        return outs[0] if len(outs) == 1 else outs

    def _for(self, arrays):
        key = tuple(a.shape for a in arrays.values())
        if key not in self._runs:
            sizes = bind_sizes(self.graph.ir, {**self._weights, **arrays}, self._shapes)
            self._prepare(sizes, key)
        return self._runs[key]

    def _prepare(self, sizes: dict[str, int], key=None):
        ir = self.graph.ir
        compiled = CompiledGraph(self.graph, self._weights, sizes, self._fuse, self._fold)
        compiled.build(self.graph.module, self._target, self._flags, self._tuning_log)
        arena = _aligned_empty(compiled.plan.peak_bytes)
        buffers = {}
        for name in ir.inputs:
            buffers[name] = np.empty(ir.shape_of(name, sizes), to_numpy(ir.value(name).dtype))
        for name in ir.outputs:
            buffers[name] = np.empty(ir.shape_of(name, sizes), to_numpy(ir.value(name).dtype))
        for slot in compiled.plan.slots:
            v = compiled.ir.value(slot.name)
            dtype = to_numpy(v.dtype)
            view = arena[slot.offset:slot.offset + slot.size].view(dtype)
            buffers[slot.name] = view.reshape(compiled.ir.shape_of(slot.name, sizes))
        buffers.update({k: np.ascontiguousarray(w) for k, w in compiled.weights.items()})
        runs = []
        for f, kernel in zip(compiled.functions, compiled.kernels):
            outs = tuple(buffers[o] for o in f.outputs)
            run, _ = kernel.bind(*(buffers[i] for i in f.inputs),
                                 out=outs[0] if len(outs) == 1 else outs)
            runs.append(run)
        entry = (compiled, {n: buffers[n] for n in ir.inputs}, runs,
                 [buffers[n] for n in ir.outputs])
        if key is None:
            key = tuple(buffers[n].shape for n in ir.inputs)
        self._runs[key] = entry


# ---------------------------------------------------------------------------- helpers

def _std_op(name: str):
    return std_program().resolve_op(name)


def fused_workload(module, graph: str, f: compose.FusedFunction, target: Target) -> Workload:
    """A fused kernel's identity in tuning logs: the graph's file, ``graph/op+op+...@out``,
    the anchor op's sizes and attributes, the target."""
    name = f"{graph}/{'+'.join(f.ops)}@{f.outputs[0]}"
    return Workload.make(module.name, name, dict(f.anchor_sizes), dict(f.anchor.attrs),
                         str(target))


def _schedule_for(f: compose.FusedFunction, module, target: Target):
    """The anchor op's schedule for ``target`` (its ``default`` block), else the automatic
    one; with a word on which."""
    op = f.anchor.op
    defs = module[op]._schedule_defs(target) if op in module else {}
    if "default" in defs:
        return to_schedule(defs["default"], f.fn, INTRINSICS, dict(f.anchor_sizes),
                           target), f"{op}'s"
    return default_schedule(f.fn, None, target), "auto"


def load_params(params, ir: GraphIR) -> dict[str, np.ndarray]:
    """Weights from a ``.npz`` path (loaded with pickling refused: an array of Python
    objects is an error, never code run) or a mapping; each checked against its
    ``param``: none missing, none extra, dtypes exact, ranks and fixed sizes agreeing."""
    if params is None:
        params = {}
    if isinstance(params, (str, Path)):
        try:
            with np.load(params, allow_pickle=False) as npz:
                params = {k: npz[k] for k in npz.files}
        except OSError as e:
            raise TdslError(f"can't read weights {params}: {e}") from None
        except ValueError as e:
            raise TdslError(f"can't read weights {params}: {e}",
                            hint="weights are numeric arrays; object arrays (pickles) are "
                                 "refused") from None
        except (zipfile.BadZipFile, EOFError) as e:
            raise TdslError(f"can't read weights {params}: not an .npz file ({e})") from None
    values = ir.value_map()
    missing = [p for p in ir.params if p not in params]
    if missing:
        raise TdslError(f"graph {ir.name}: weight '{missing[0]}' is missing"
                        + (f" (and {', '.join(missing[1:])})" if missing[1:] else ""),
                        ir.span, hint=f"the weights given: {', '.join(params) or 'none'}")
    extra = [k for k in params if k not in ir.params]
    if extra:
        raise TdslError(f"graph {ir.name} has no param '{extra[0]}'", ir.span,
                        hint=f"its params: {', '.join(ir.params) or 'none'}")
    out = {}
    for name in ir.params:
        a = params[name]
        if not isinstance(a, np.ndarray):
            raise TdslError(f"weight '{name}' must be a numpy array, got {type(a).__name__}")
        _check_array(f"weight '{name}'", a, values[name])
        out[name] = np.ascontiguousarray(a)
    bind_sizes(ir, out, partial=True)        # sizes named by several weights agree
    return out


def _check_array(what: str, a: np.ndarray, v) -> None:
    want = to_numpy(v.dtype)
    if a.dtype != want:
        raise TdslError(f"{what} is {a.dtype}, expected {want} ({v.dtype})",
                        hint=f"convert it: a.astype(np.{want})")
    if a.ndim != len(v.shape):
        raise TdslError(f"{what} has shape {a.shape}, expected rank {len(v.shape)} "
                        f"([{', '.join(map(str, v.shape))}])")


def _check_inputs(ir: GraphIR, inputs) -> dict[str, np.ndarray]:
    if len(inputs) != len(ir.inputs):
        raise CallError(f"graph {ir.name} takes {len(ir.inputs)} input(s) "
                        f"({', '.join(ir.inputs)}), got {len(inputs)}")
    out = {}
    for name, a in zip(ir.inputs, inputs):
        if not isinstance(a, np.ndarray):
            raise CallError(f"input '{name}' must be a numpy.ndarray, got {type(a).__name__}")
        try:
            _check_array(f"input '{name}'", a, ir.value(name))
        except TdslError as e:
            raise CallError(e.message, hint=e.hint) from None
        out[name] = a
    return out


def bind_sizes(ir: GraphIR, arrays: dict, given: dict | None = None, partial=False
               ) -> dict[str, int]:
    """The graph's sizes from ``given`` and the arrays' shapes (plain size names bind,
    every other dimension is checked); with ``partial``, sizes nothing tells are left out."""
    sizes = {k: int(v) for k, v in (given or {}).items()}
    values = ir.value_map()
    for name, a in arrays.items():
        for dim, n in zip(values[name].shape, a.shape):
            if isinstance(dim, te.Var):
                sizes.setdefault(dim.name, int(n))
    env = {te.Var(k): v for k, v in sizes.items()}
    for name, a in arrays.items():
        v = values[name]
        for d, (dim, n) in enumerate(zip(v.shape, a.shape)):
            try:
                expect = eval_size(dim, env)
            except KeyError:
                continue
            if expect != n:
                kind = "weight" if v.kind == "param" else "input"
                raise TdslError(f"{kind} '{name}' has shape {a.shape}, but dimension {d} "
                                f"must be {dim} = {expect}",
                                hint=f"'{name}' is declared [{', '.join(map(str, v.shape))}]"
                                     f" with {_sizes_text(sizes)}")
    if not partial:
        missing = [s for s in ir.sizes if s not in sizes]
        if missing:
            raise CallError(f"graph {ir.name}: size {missing[0]} is not known from the inputs "
                            f"or weights; give it with shapes={{'{missing[0]}': ...}}")
    return sizes


def _nbytes(ir: GraphIR, v: str, sizes) -> int:
    n = int(np.prod(ir.shape_of(v, sizes), dtype=np.int64))
    return n * to_numpy(ir.value(v).dtype).itemsize


def _aligned_empty(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + memory.ALIGN, np.uint8)
    start = -raw.ctypes.data % memory.ALIGN
    return raw[start:start + nbytes]


def _shape_text(ir, v, sizes) -> str:
    return "x".join(map(str, ir.shape_of(v, sizes)))


def _sizes_text(sizes) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(sizes.items())) or "fixed sizes"


def pattern_of(fn: te.Function) -> str:
    return classify(fn).name.lower()
