"""`Graph` (a checked ``graph`` block) and `GraphModule` (a graph compiled for the host).

``tdsl.load(path)["net"]`` is a `Graph`. ``g.reference(*inputs, params=...)`` runs each op's
reference; ``g.build(target="c", params="w.npz")`` runs the graph passes (constant folding,
fusion, memory planning), compiles one kernel per fused group and returns a callable
`GraphModule`. Sizes left symbolic by the inputs and weights (a batch ``B``) are bound at
the first call with new shapes, and the kernels compiled for them then (cached after).
"""
from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np

from .emit_c.graph_runner import GraphRunner
from .emit_c.kernel import build_kernel
from .errors import BuildError, CallError, ScheduleError, TdslError
from .frontend import ast, unparse
from .frontend.program import std_program
from .frontend.schedules import to_schedule
from .graph_weights import bind_sizes, check_inputs, load_params, sizes_text
from .lowering.default_schedule import default_schedule
from .lowering.dtypes import to_numpy
from .lowering.graph import compose, fold, fuse, layout, memory
from .lowering.graph.ir import Graph as GraphIR, eval_size
from .lowering.intrinsics import INTRINSICS
from .lowering.lower import lower
from .lowering.reference.semantics import evaluate
from .lowering.schedule import CacheWrite
from .lowering.sizes import (ALIGNED_MIN_BYTES, check_allocation, empty as checked_empty,
                             nbytes as exact_nbytes)
from .target import Target, as_target
from .tuner.log import Workload, best_record, read_log

# Whether Graph.build keeps activations between convolutions in NCHW[lanes]c by default
# (docs/graphs.md, "Layout", has the measurements that decided it).
BLOCKED_LAYOUT_DEFAULT = True


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

    def signature(self) -> str:
        """``graph mlp(x: f32[B, 784]) -> y: f32[B, 10]; params w1: f32[784, 128], ...``"""
        return unparse.graph_signature(self.module.program.graphs[self.name])

    def __repr__(self) -> str:
        return f"<tdsl.Graph {self.name}: {len(self.ir.nodes)} ops>"

    def __str__(self) -> str:
        return str(self.ir)

    def load_params(self, params) -> dict[str, np.ndarray]:
        """The weights from a ``.npz`` path or a mapping, checked against the ``param``s."""
        return load_params(params, self.ir)

    def random_params(self, seed: int = 0, shapes: dict | None = None) -> dict:
        """Random weights of the declared shapes (``shapes`` gives sizes they leave open):
        normal with a spread of 1/sqrt(fan-in), a batch_norm's variance positive; integer
        weights (int8 models) over the whole int8 range, wider ones (int32 biases) over
        +-3000, the size of a few accumulated int8 products."""
        rng = np.random.default_rng(seed)
        sizes = dict(shapes or {})
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
            dtype = to_numpy(v.dtype)
            if np.issubdtype(dtype, np.integer):
                low, high = (-3000, 3000) if np.iinfo(dtype).bits > 8 else \
                    (np.iinfo(dtype).min, np.iinfo(dtype).max)
                out[name] = rng.integers(low, high + 1, shape).astype(dtype)
                continue
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            a = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
            if name in positive:
                a = rng.uniform(0.5, 1.5, shape)
            out[name] = a.astype(to_numpy(v.dtype))
        return out

    def reference(self, *inputs, params=None):
        """Evaluate with each op's numpy reference: an array, or a tuple for several outputs."""
        weights = load_params(params, self.ir)
        arrays = check_inputs(self.ir, inputs)
        sizes = bind_sizes(self.ir, {**weights, **arrays})
        env = {**weights, **arrays}
        for node in self.ir.nodes:
            outs = evaluate(node.fn, [env[i] for i in node.inputs], node.sizes(sizes))
            env.update(zip(node.outputs, outs))
        outs = tuple(env[o] for o in self.ir.outputs)
        return outs[0] if len(outs) == 1 else outs

    def build(self, target: Target | str = "c", params=None, fuse: bool = True,
              fold: bool = True, shapes: dict | None = None, flags=None,
              tuning_log=None, layout: bool | None = None,
              winograd: bool = True) -> "GraphModule":
        """Compile for ``target`` (a `Target` or its string): one kernel per fused group
        (per op with ``fuse=False``), weight-only parts folded at build time (``fold=False``:
        not), the intermediates in one planned arena. ``shapes`` fixes sizes the inputs would
        otherwise tell; ``flags`` are added to the target's compiler flags; ``tuning_log``
        (from tuning the fused kernels, `tdsl.tuner.fused_task`) gives each kernel the best
        configuration it records on this machine (the schedule's defaults otherwise).
        ``layout``: keep activations between convolutions in the blocked layout NCHW[lanes]c
        (`tdsl.lowering.graph.layout`); None takes `BLOCKED_LAYOUT_DEFAULT` (docs/graphs.md
        says why). ``winograd``: with the blocked layout, 3x3 convolutions of stride 1 and
        padding 1 run as Winograd's F(4x4, 3x3) or F(2x2, 3x3) by size
        (`conv2d_winograd4_nchwc`, `conv2d_winograd_nchwc`; `layout.winograd_tiles`); False
        keeps the direct sum."""
        target = as_target(target)
        if target.kind == "c-embedded":
            return EmulatedGraph(self.emit_embedded(target, params, shapes, fuse, fold),
                                 target, flags)
        if target.kind != "c":
            raise BuildError(
                f"graphs build for the 'c' (host C) and 'c-embedded' targets only, not "
                f"'{target}' (kind {target.kind})",
                hint="build each op for this target with Op.build; `tdsl graph --target "
                     f"{target.kind}` shows the fused kernels the graph would have")
        weights = load_params(params, self.ir)
        return GraphModule(self, weights, target, fuse, fold, dict(shapes or {}), flags,
                           tuning_log, BLOCKED_LAYOUT_DEFAULT if layout is None else layout,
                           winograd)


    def emit_embedded(self, target: Target | str = "c-embedded", params=None,
                      shapes: dict | None = None, fuse: bool = True, fold: bool = True):
        """The graph as one embedded ``.c``/``.h`` pair (`tdsl.emit_c.embedded_graph`):
        ``int <graph>_run(inputs..., outputs..., void *arena)``, the weights static const,
        every intermediate and kernel workspace in one planned arena. Every size must be
        known from the weights and ``shapes`` (a batch ``B``)."""
        from .emit_c.embedded_graph import Step, emit_embedded_graph
        target = as_target(target)
        weights = load_params(params, self.ir)
        sizes = bind_sizes(self.ir, weights, shapes)
        compiled = CompiledGraph(self, weights, sizes, fuse, fold, target)
        steps = []
        for f in compiled.functions:
            sched, _ = _schedule_for(f, self.module, target)
            try:
                func = lower(f.fn, sched, None, target=target)
            except ScheduleError as e:
                warnings.warn(f"{f.fn.name}: {e.message}; using the automatic schedule",
                              stacklevel=2)
                func = lower(f.fn, default_schedule(f.fn, None, target), target=target)
            steps.append(Step(func, tuple(f.inputs), tuple(f.outputs)))
        return emit_embedded_graph(self.name, steps, list(compiled.ir.inputs),
                                   list(compiled.ir.outputs), compiled.weights, target)


class EmulatedGraph:
    """A graph built for ``c-embedded``, called on numpy arrays by running it natively or
    under QEMU (tdsl.emulate): ``y = graph.build("c-embedded -mcpu=cortex-m4", params=w)(x)``.
    ``module`` is the `EmbeddedModule` (source, header, arena_bytes)."""

    def __init__(self, module, target, flags=None):
        from .emulate import Bench, args_of, harness_source
        self.module = module
        self.target = as_target(target)
        self._bench = Bench(self.target)
        self._bench.build({f"{module.name}.c": module.source, f"{module.name}.h": module.header,
                           "main.c": harness_source(f"{module.name}.h", module.entry,
                                                    args_of(module.params, module.num_inputs),
                                                    module.arena_bytes)}, tuple(flags or ()))

    def __call__(self, *inputs):
        from .emulate import shape_of
        ins = self.module.params[:self.module.num_inputs]
        if len(inputs) != len(ins):
            raise CallError(f"graph {self.module.name} takes {len(ins)} input(s), got "
                            f"{len(inputs)}")
        for b, a in zip(ins, inputs):
            if not isinstance(a, np.ndarray) or a.dtype != to_numpy(b.dtype) or \
                    a.shape != shape_of(b):
                raise CallError(f"input '{b.name}' must be a {to_numpy(b.dtype)} array of "
                                f"shape {shape_of(b)} (the sizes this build fixed)")
        outs = self._bench.run(list(inputs), [(shape_of(b), to_numpy(b.dtype)) for b in
                                              self.module.params[self.module.num_inputs:]])
        return outs[0] if len(outs) == 1 else tuple(outs)


class CompiledGraph:
    """The graph after the passes, at concrete sizes: ``ir`` (folded), ``groups``,
    ``functions`` (one fused `te.Function` each), ``plan`` (the `MemoryPlan`), ``notes``
    (what folding did), ``layouts`` and ``layout_notes`` (what the layout pass did).
    ``kernels`` are filled in when built."""

    def __init__(self, graph: Graph, weights: dict, sizes: dict[str, int], fuse_ops: bool,
                 fold_consts: bool, target: Target | str = "c", blocked: bool = False,
                 winograd: bool = True):
        ir, notes = graph.ir, ()
        self.module = graph.module
        self.target = target = as_target(target)
        if fold_consts:
            ir, weights, notes = fold.run(ir, weights, _std_op, sizes)
        self.layouts: dict[str, str] = {}       # value -> NCHW / NCHW16c (4- and 5-D)
        self.layout_notes: tuple[str, ...] = ()
        if blocked and target.kind == "c" and target.lanes > 1:   # the host, with SIMD
            ir, self.layouts, self.layout_notes = layout.run(ir, _std_op, sizes, target.lanes,
                                                             winograd, int8_tiles=target.amx)
            if fold_consts:         # the packed weights, computed now rather than per call
                ir, weights, packed = fold.run(ir, weights, _std_op, sizes)
                if packed:
                    notes += (f"{len(packed)} weights packed for the blocked ops",)
        # every weight on a cache line's boundary, as the arena's values are: numpy's
        # arrays start 16 bytes into one, or anywhere, so a kernel's vector loads of them
        # split cache lines, by an offset that changed from build to build (an LSTM's
        # recurrent weights: 0.085 ms with them aligned, 0.117 at 32 bytes off)
        weights = {k: _on_cache_lines(v) for k, v in weights.items()}
        self.ir, self.weights, self.notes, self.sizes = ir, weights, notes, dict(sizes)
        self.groups = fuse.run(ir, fuse_ops)
        self.functions = [
            compose.run(ir, g, sizes, _kernel_name(ir, g),
                        _caches(self.module, ir.nodes[g.anchor], target))
            for g in self.groups]
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

    def layout_of(self, v: str) -> str | None:
        """``NCHW``, ``NCHW16c`` (blocked by 16 channels), or None for a value of other rank."""
        return self.layouts.get(v) or layout.layout_name(self.ir.shape_of(v, self.sizes))

    def describe(self) -> str:
        """The graph after the passes: kernels and their ops, layouts, the memory plan."""
        lines = [f"graph {self.ir.name} at {sizes_text(self.sizes)}"]
        lines += [f"  folded: {n}" for n in self.notes]
        if self.layouts:
            blocked = sorted({v for v in self.layouts.values() if v != "NCHW"},
                             key=lambda v: -int(v[4:-1]))       # NCHW16c before NCHW3c
            lines.append(f"  layout: {', '.join(blocked) or 'NCHW'} between convolutions "
                         f"(lanes {self.target.lanes})")
        lines += [f"  layout: {n}" for n in self.layout_notes]
        lines.append(f"kernels ({len(self.functions)} for {len(self.ir.nodes)} ops):")
        for k, (g, f) in enumerate(zip(self.groups, self.functions)):
            how = f"  schedule: {self.schedules[k]}" if self.schedules else ""
            nodes = [self.ir.nodes[i] for i in g.nodes]
            ops = " + ".join(f"{n.op}->{n.outputs[0]}" for n in nodes)
            lines.append(f"  k{k} [{g.pattern.name.lower()}, anchor "
                         f"{self.ir.nodes[g.anchor].op}] {ops}{how}")
            outs = ", ".join(f"{o}: {_shape_text(self.ir, o, self.sizes)} {self.layout_of(o)}"
                             if self.layout_of(o) else
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
    ``plan``, ``groups``, ``kernels``). The kernels are bound once per input shapes, so a
    call checks and marshals nothing per kernel: it points the bound table at the caller's
    arrays and at fresh outputs (strided or bool inputs are copied into buffers of the
    binding's own); for the same reason one module is not to be called from two threads
    at once."""

    def __init__(self, graph: Graph, weights, target, fuse_ops, fold_consts, shapes, flags,
                 tuning_log=None, blocked: bool = False, winograd: bool = True):
        self.graph = graph
        self._blocked, self._winograd = blocked, winograd
        self._tuning_log = tuning_log
        self._weights = weights
        self._target, self._fuse, self._fold, self._flags = target, fuse_ops, fold_consts, flags
        self._shapes = shapes
        self._runs: dict[tuple, tuple] = {}
        self._last: _Bound | None = None         # the entry of `_runs` the last call used
        known = bind_sizes(graph.ir, weights, shapes, partial=True)
        if all(s in known for s in graph.ir.sizes):
            self._prepare(known)

    def compiled(self, *inputs) -> CompiledGraph:
        return self._for(check_inputs(self.graph.ir, inputs)).compiled

    def profile(self, *inputs, passes: int = 20, peak="measured", ghz: float | None = None,
                integer_peak="measured"):
        """Where a call on these inputs spends its time: each fused kernel timed alone (the
        best of ``passes``), its share, GFLOP/s and % of the target's peak or GB/s, beside the
        whole call's time; a `tdsl.graph_profile.GraphProfile`, whose ``str`` is the table.
        ``peak``: ``"measured"``, ``"formula"`` (at ``ghz``) or GFLOP/s; ``integer_peak``,
        the integer kernels' dot product's: ``"measured"``, GOP/s or None."""
        from .graph_profile import profile
        return profile(self, inputs, passes, peak, ghz, integer_peak)

    def __call__(self, *inputs):
        # the lean path, for inputs of the same shapes and dtypes as the last call: a small
        # model runs in tens of microseconds, and the full check took a few of them
        bound = self._last
        if bound is not None:
            lean = bound.lean
            outs = lean(inputs) if lean is not None else None
            if outs is not None:
                return outs
            with bound.run.lock:
                bindings = _bindings(bound, inputs)
                if bindings is not None:
                    return _run(bound, bindings)
        if not all(isinstance(a, np.ndarray) for a in inputs):
            from .torch_bridge import interop       # tensors in, tensors out, no copy
            if any(interop.is_foreign(a) for a in inputs):
                return interop.call(lambda *a, out=None: self(*a), inputs, None,
                                    self.graph.ir.inputs)
        arrays = check_inputs(self.graph.ir, inputs)
        self._last = bound = self._for(arrays)
        with bound.run.lock:
            return _run(bound, _bindings(bound, list(arrays.values()), checked=True))

    def _staged(self, inputs) -> "_Bound":
        """The entry for ``inputs``, with them copied into its staging buffers (what the
        kernels' own bound calls read: `graph_profile`)."""
        self(*inputs)
        for a, staged in zip(check_inputs(self.graph.ir, inputs).values(),
                             self._last.inputs.values()):
            staged[...] = a
        return self._last

    def _for(self, arrays):
        key = tuple(a.shape for a in arrays.values())
        if key not in self._runs:
            sizes = bind_sizes(self.graph.ir, {**self._weights, **arrays}, self._shapes)
            self._prepare(sizes, key)
        return self._runs[key]

    def _prepare(self, sizes: dict[str, int], key=None):
        ir = self.graph.ir
        compiled = CompiledGraph(self.graph, self._weights, sizes, self._fuse, self._fold,
                                 self._target, self._blocked, self._winograd)
        # what this call allocates, checked before anything is compiled or allocated
        staged = {name: (ir.shape_of(name, sizes), to_numpy(ir.value(name).dtype),
                         f"{'input' if name in ir.inputs else 'output'} '{name}' of graph "
                         f"{ir.name}") for name in (*ir.inputs, *ir.outputs)}
        for shape, dtype, what in staged.values():
            check_allocation(shape, dtype, what)
        arena_what = f"the arena of graph {ir.name}'s intermediates"
        check_allocation((compiled.plan.peak_bytes + memory.ALIGN,), np.uint8, arena_what)
        compiled.build(self.graph.module, self._target, self._flags, self._tuning_log)
        arena = checked_empty((compiled.plan.peak_bytes,), np.uint8, arena_what, aligned=True)
        buffers = {name: checked_empty(*staged[name]) for name in (*ir.inputs, *ir.outputs)}
        # zeroed once: a kernel bound to a bool buffer of leftover bytes other than 0 and 1
        # would be bound to a normalised copy, never seeing what the calls write
        arena.fill(0)
        for b in buffers.values():
            b.fill(0)
        for slot in compiled.plan.slots:
            v = compiled.ir.value(slot.name)
            dtype = to_numpy(v.dtype)
            view = arena[slot.offset:slot.offset + slot.size].view(dtype)
            buffers[slot.name] = view.reshape(compiled.ir.shape_of(slot.name, sizes))
        buffers.update({k: np.require(w, requirements="C") for k, w in compiled.weights.items()})
        runs, calls = [], []
        for f, kernel in zip(compiled.functions, compiled.kernels):
            outs = tuple(buffers[o] for o in f.outputs)
            args = [buffers[i] for i in f.inputs]
            out = outs[0] if len(outs) == 1 else outs
            runs.append(kernel.bind(*args, out=out)[0])      # each alone: `profile`
            calls.append(kernel.c_call(*args, out=out))
        # the whole graph in one call into C, not a Python loop over its kernels
        run_all = GraphRunner(calls, as_target(self._target))
        entry = _Bound(compiled, {n: buffers[n] for n in ir.inputs}, runs,
                       [buffers[n] for n in ir.outputs], run_all,
                       *_call_slots(compiled, buffers, run_all))
        if key is None:
            key = tuple(buffers[n].shape for n in ir.inputs)
        self._runs[key] = entry


# ---------------------------------------------------------------------------- helpers

@dataclasses.dataclass(frozen=True)
class _Bound:
    """A graph module's kernels bound for one set of input shapes: the `CompiledGraph`,
    the staging buffers of its inputs (by name) and of its outputs, each kernel's own bound
    call (``runs``, for `profile`), the `GraphRunner` of them all, and the runner's table
    slots of each input and output (`_call_slots`)."""
    compiled: "CompiledGraph"
    inputs: dict
    runs: list
    outputs: list
    run: GraphRunner
    input_slots: list
    output_slots: list | None

    @functools.cached_property
    def input_specs(self) -> tuple:
        """``(shape, dtype, staging buffer, slots)`` per input, for `_bindings`."""
        return tuple((b.shape, b.dtype, b, slots)
                     for b, slots in zip(self.inputs.values(), self.input_slots))

    @functools.cached_property
    def lean(self):
        """``call(inputs)``: the outputs of a call on contiguous, aligned arrays of this
        binding's shapes and dtypes, bound where they lie, the outputs fresh arrays bound
        too (`GraphRunner.lean_call`); it returns None for any other inputs, which
        `_bindings` and `_run` take. None where some input or output is copied through its
        staging buffer."""
        if self.output_slots is None or any(s is None for s in self.input_slots):
            return None
        inputs = [(b.shape, b.dtype, slots)
                  for b, slots in zip(self.inputs.values(), self.input_slots)]
        outputs = [(shape, dtype, slots, allocate)
                   for (shape, dtype, allocate), slots in zip(self.output_specs,
                                                              self.output_slots)]
        return self.run.lean_call(inputs, outputs)

    @functools.cached_property
    def output_specs(self) -> tuple:
        """``(shape, dtype, allocate)`` per output: ``allocate(shape, dtype)`` makes a call's
        fresh array (large ones on a cache line: `sizes.empty`)."""
        return tuple((o.shape, o.dtype, np.empty if o.nbytes < ALIGNED_MIN_BYTES else
                      functools.partial(checked_empty, what="an output of graph "
                                        f"{self.compiled.ir.name}")) for o in self.outputs)


def _call_slots(compiled: "CompiledGraph", buffers: dict, runner: GraphRunner):
    """``(input_slots, output_slots)``: where in the runner's table each graph input and
    output lies, so that a call binds the caller's arrays and fresh outputs there instead
    of copying through the staging buffers. An input's entry is None (copied) when it is
    empty, bool (the kernels read a normalised copy), an output too, or a view of it is
    bound; ``output_slots`` is None (all copied out) unless every output is a distinct
    value some kernel writes whole, bound at its start only."""
    ir = compiled.ir
    written = {o for f in compiled.functions for o in f.outputs}
    inputs = []
    for n in ir.inputs:
        b = buffers[n]
        inputs.append(None if b.nbytes == 0 or b.dtype == np.bool_ or n in ir.outputs
                      else runner.slots_of(b))
    outputs = None
    if len(set(ir.outputs)) == len(ir.outputs) and \
            all(n in written and n not in ir.inputs and n not in compiled.weights and
                buffers[n].nbytes for n in ir.outputs):
        outputs = [runner.slots_of(buffers[n]) for n in ir.outputs]
        if any(not slots for slots in outputs):
            outputs = None
    return inputs, outputs


def _bindings(bound: "_Bound", inputs, checked: bool = False):
    """The runner's bindings of a call's ``inputs`` to ``bound`` (`GraphRunner.run_on`):
    each read where it lies when its slots allow (contiguous, aligned), else copied into
    its staging buffer. None, unless ``checked``, where an input is not an array of the
    entry's shape and dtype."""
    if len(inputs) != len(bound.input_specs):
        return None
    bindings = []
    for a, (shape, dtype, staged, slots) in zip(inputs, bound.input_specs):
        if not checked and (type(a) is not np.ndarray or a.shape != shape or
                            a.dtype != dtype):
            return None
        if slots is not None and a.flags.c_contiguous and a.flags.aligned:
            bindings.append((slots, a))
        else:
            staged[...] = a
    return bindings


def _run(bound: "_Bound", bindings):
    """The kernels of ``bound`` on these input ``bindings``, the outputs written into fresh
    arrays (large ones on a cache line: `sizes.empty`), else copied out of their staging
    buffers. Copying both ways cost a 1x64x56x56 block 37 us of its 1.28 ms."""
    if bound.output_slots is None:
        bound.run.run_on(bindings)
        outs = [o.copy() for o in bound.outputs]
    else:
        outs = [allocate(shape, dtype) for shape, dtype, allocate in bound.output_specs]
        bound.run.run_on(bindings + list(zip(bound.output_slots, outs)))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _std_op(name: str):
    return std_program().resolve_op(name)


def _kernel_name(ir: GraphIR, group: fuse.Group) -> str:
    """The ops, in order (``conv2d_bias_add_relu``): equal groups print equal C."""
    return "_".join(ir.nodes[i].op for i in group.nodes)[:60]


def fused_workload(module, graph: str, f: compose.FusedFunction, target: Target) -> Workload:
    """A fused kernel's identity in tuning logs: the graph's file, ``graph/op+op+...@out``,
    the anchor op's sizes and attributes, the target."""
    name = f"{graph}/{'+'.join(f.ops)}@{f.outputs[0]}"
    return Workload.make(module.name, name, dict(f.anchor_sizes), dict(f.anchor.attrs),
                         str(target))


def _default_block(module, op: str, target: Target):
    if op not in module:            # an op a graph pass inserted (conv2d_nchwc): std's
        from .api import stdlib
        module = stdlib()
    return (module[op]._schedule_defs(target) if op in module else {}).get("default")


def _caches(module, anchor, target: Target) -> tuple[str, ...]:
    """The names the anchor's schedule gives its output's caches, outermost first (``P =
    cache_write(Y, local)``, ``PL = cache_write(P, local)`` as top-level statements), for
    `compose.run` to split the output stage the same way."""
    block = _default_block(module, anchor.op, target)
    names, stage = [], anchor.fn.outputs[0].name
    for st in block.body if block is not None else ():
        if isinstance(st, ast.SchedCall) and st.func == "cache_write" and st.targets and \
                st.args and isinstance(st.args[0], ast.Name) and st.args[0].id == stage:
            names.append(st.targets[0])
            stage = st.targets[0]
    return tuple(names)


def _schedule_for(f: compose.FusedFunction, module, target: Target):
    """The anchor op's schedule for ``target`` (its ``default`` block), else the automatic
    one; with a word on which. When fusion split the anchor's output as the schedule's
    ``cache_write`` would have, that directive is dropped: its work is done."""
    op = f.anchor.op
    block = _default_block(module, op, target)
    if block is None:
        return default_schedule(f.fn, None, target), "auto"
    sched = to_schedule(block, f.fn, INTRINSICS, dict(f.anchor_sizes), target)
    if f.dropped:
        made = set(zip((f.fn.outputs[0].name,) + f.dropped[:-1], f.dropped))
        kept = [d for d in sched.directives
                if not (isinstance(d, CacheWrite) and (d.stage, d.name) in made)]
        sched = dataclasses.replace(sched, directives=tuple(kept))
    return sched, f"{op}'s"


def _nbytes(ir: GraphIR, v: str, sizes) -> int:
    return exact_nbytes(ir.shape_of(v, sizes), to_numpy(ir.value(v).dtype))   # no int64 wrap


def _on_cache_lines(a):
    """``a`` itself where it starts on an `memory.ALIGN` boundary, else an aligned copy."""
    if not isinstance(a, np.ndarray) or a.size == 0 or a.ctypes.data % memory.ALIGN == 0:
        return a
    out = checked_empty(a.shape, a.dtype, "a weight", aligned=True)
    out[...] = a
    return out


def _shape_text(ir, v, sizes) -> str:
    return "x".join(map(str, ir.shape_of(v, sizes)))


