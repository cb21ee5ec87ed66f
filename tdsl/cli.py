"""The ``tdsl`` command. Every FILE argument may be ``std`` (the standard library).

User mistakes print as `TdslError`s (file:line:col, the line, a caret) and exit 1; a Python
traceback from here is a bug in tdsl.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from . import __version__
from .api import load
from .arrays import random_arguments
from .emit_c.c import emit_c
from .errors import ErrorList, TdslError
from .frontend import ast
from .target import as_target
from .tuner.log import require_log


def cmd_check(args) -> int:
    from .frontend.block_checks import application_errors
    status = 0
    for path in args.files:
        try:
            with warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always")     # each file's own, even if seen before
                try:
                    mod = load(path)
                finally:
                    for w in warned:            # a line each (unused params, ...)
                        print(f"warning: {w.message}", file=sys.stderr)
            found = application_errors(mod.program)   # every schedule block, applied
            if found:
                raise found[0] if len(found) == 1 else ErrorList(found)
        except ErrorList as e:
            print(e.render(), file=sys.stderr)
            print(f"{path}: {len(e.errors)} errors", file=sys.stderr)
            status = 1
        except TdslError as e:
            print(e.render(), file=sys.stderr)
            print(f"{path}: 1 error", file=sys.stderr)
            status = 1
        else:
            n = len(warned)
            print(f"{path}: ok ({_counted(mod)}"
                  + (f", {n} warning{'s' * (n != 1)}" if n else "") + ")")
    return status


def _counted(mod) -> str:
    """What a checked file defines: "3 ops", "2 graphs", "1 op, 1 graph" (the standard
    library's ops for std; a file of graph blocks does not count the ops it imports)."""
    ops = mod.own_ops() or (list(mod) if mod.name == "std" else [])
    parts = [f"{n} {word}{'s' * (n != 1)}" for n, word in
             ((len(ops), "op"), (len(mod.graphs()), "graph")) if n or word == "op"]
    return ", ".join(parts)


def cmd_ops(args) -> int:
    """The signatures of the file's own ops, then of its graphs (the standard library's
    ops for std; never the ops a file imports)."""
    mod = load(args.file)
    names = mod.own_ops() or (sorted(mod) if mod.name == "std" else [])
    for name in [*names, *mod.graphs()]:
        print(mod[name].signature())
    return 0


def parse_shapes(text: str | None) -> dict[str, int] | None:
    """``M=64,N=32`` -> ``{"M": 64, "N": 32}``: each size named once, a positive integer."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name or not value.isdigit():
            raise TdslError(f"--shape expects NAME=INT pairs separated by commas, got "
                            f"'{part}'")
        if name in out:
            raise TdslError(f"--shape gives {name} twice ({name}={out[name]}, {name}={value})")
        if int(value) < 1:
            raise TdslError(f"--shape {name}={value}: a size fixed here must be at least 1")
        out[name] = int(value)
    return out


def check_shape_names(op, shapes: dict | None, attrs: dict) -> None:
    """Every name in --shape is a size of the op (a typo would otherwise be ignored)."""
    known = {v.name for v in op.function(None, **attrs).shape_vars} if not \
        _is_rank_generic(op) else None
    for name in shapes or ():
        if known is not None and name not in known:
            raise TdslError(f"--shape {name}: {op.name} has no size {name} (sizes: "
                            f"{', '.join(sorted(known)) or 'none'})")


def _is_rank_generic(op) -> bool:
    return any(isinstance(d, ast.PackDim) for p in op.ast.params for d in p.type.dims or ())


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


_BOOLS = {"true": True, "True": True, "false": False, "False": False}


def parse_attrs(items: list[str] | None) -> dict:
    """``--attr stride=2 --attr alpha=0.1`` -> ``{"stride": 2, "alpha": 0.1}``: each value an
    int, a float or a bool (``true``/``false``, or Python's ``True``/``False``)."""
    out = {}
    for item in items or ():
        name, eq, value = item.partition("=")
        name, v = name.strip(), value.strip()
        if not eq or not name:
            raise TdslError(f"--attr expects NAME=VALUE, got '{item}'")
        if v in _BOOLS:
            out[name] = _BOOLS[v]
            continue
        try:
            out[name] = int(v)
        except ValueError:
            try:
                out[name] = float(v)
            except ValueError:
                raise TdslError(f"--attr {name}={v}: the value must be an int, a float or "
                                f"true/false, got '{v}'") from None
    return out


def _op_of(args):
    mod = load(args.file)
    names = mod.own_ops()
    if args.op is None:
        if len(names) != 1:
            raise TdslError(f"{args.file} has {len(names)} ops; pick one with --op "
                            f"({', '.join(names)})")
        return mod[names[0]]
    if args.op not in mod:
        raise TdslError(f"no op '{args.op}' in {args.file} (ops: {', '.join(sorted(mod))})")
    return mod[args.op]


def cmd_lower(args) -> int:
    op = _op_of(args)
    print(op.lower(args.schedule, parse_shapes(args.shape), target=args.target,
                   **parse_attrs(args.attr)))
    return 0


def cmd_emit(args) -> int:
    op = _op_of(args)
    target = as_target(args.target)
    if target.kind not in ("c", "c-embedded", "cuda", "opencl"):
        raise TdslError(f"tdsl emit prints C, CUDA and OpenCL; target '{target}' has no "
                        f"printer yet")
    func = op.lower(args.schedule, parse_shapes(args.shape), target=target,
                    **parse_attrs(args.attr))
    if target.kind == "cuda":
        from .emit_cuda import emit_cuda
        print(emit_cuda(func, target=target).source)       # kernels and launcher, one .cu
        return 0
    if target.kind == "opencl":
        from .emit_opencl import emit_opencl
        source = emit_opencl(func, target=target)
        print(f"{source.kernels}\n/* ---- host side (C) ---- */\n{source.host}")
        return 0
    if target.kind == "c-embedded":
        from .emit_c.embedded import emit_embedded
        module = emit_embedded(func, target=target)
        print(module.header)
        print(module.source)
        return 0
    print(emit_c(func, target=target).source)   # the sizes are constants of the function
    return 0


def cmd_target(args) -> int:
    """What tdsl knows of a target: lanes, registers, caches, compiler, peak."""
    target = as_target(args.spec)
    print(target.describe())
    if args.measure:
        from .emit_c.peak import measure_peak
        print(f"measured   {measure_peak(target).describe()}: fp32 FMA on all cores, a short "
              f"loop of independent vector FMAs")
        # the int8 convolutions' dot product: u8 x i8 in fours, or (x86 without VNNI, as
        # the ONNX importer chooses) i16 pairs
        kind = "dot2_i16" if target.has_i16_dot and not target.has_int8_dot else "dot4_u8i8"
        print(f"measured   {measure_peak(target, kind=kind).describe()}: the int8 dot product "
              f"({kind}, 2 operations a product) on all cores")
    return 0


def cmd_build(args) -> int:
    mod = load(args.file)
    if args.op is not None and args.op not in mod:
        raise TdslError(f"no op '{args.op}' in {args.file} (ops: {', '.join(sorted(mod))})")
    names = [args.op] if args.op else mod.own_ops()
    if not names and args.graph is None:
        raise TdslError(f"{args.file} defines no op of its own; pick one with --op "
                        f"(ops: {', '.join(sorted(mod))})")
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TdslError(f"can't create the output directory {out}: {e.strerror}") from None
    shapes, attrs = parse_shapes(args.shape), parse_attrs(args.attr)
    if args.tuning_log is not None:
        require_log(args.tuning_log)        # a log that is not there is an error, not defaults
    if args.graph is not None:
        return _build_embedded_graph(mod, out, shapes, args)
    if as_target(args.target).kind == "c-embedded":
        return _build_embedded(mod, names, out, shapes, attrs, args)
    kind = as_target(args.target).kind
    for name in names:
        kernel = mod[name].build(args.target, args.schedule, shapes,
                                 tuning_log=args.tuning_log, **attrs)
        source = f"{name}.cu" if kind == "cuda" else f"{name}.c"     # OpenCL: the host C
        files = [source, f"{name}.h", f"lib{name}.so"]
        try:
            (out / source).write_text(kernel.source)
            (out / f"{name}.h").write_text(kernel.header)
            if kind == "opencl":        # the kernels, also inside the host C as a string
                (out / f"{name}.cl").write_text(kernel.device_source)
                files.insert(1, f"{name}.cl")
            shutil.copyfile(kernel.lib_path, out / f"lib{name}.so")
        except OSError as e:
            raise TdslError(f"can't write to {out}: {e.strerror}") from None
        print(f"{name}: {', '.join(str(out / f) for f in files)}")
    return 0


def _build_embedded_graph(mod, out: Path, shapes, args) -> int:
    """``--graph NAME --params W.npz``: the graph as one embedded .c/.h pair."""
    target = as_target(args.target)
    names = mod.graphs()
    if args.graph not in names:
        raise TdslError(f"{args.file} has no graph '{args.graph}' (graphs: "
                        f"{', '.join(names) or 'none'})")
    if args.params is None:
        raise TdslError(f"graph {args.graph} needs its weights: --params W.npz")
    if target.kind == "c":
        return _build_host_graph(mod[args.graph], out, shapes, args)
    if target.kind != "c-embedded":
        raise TdslError(f"tdsl build --graph writes C for the host (c) or a c-embedded "
                        f"target, not '{target}'",
                        hint="e.g. --target 'c-embedded -mcpu=cortex-m4'")
    module = mod[args.graph].emit_embedded(target, args.params, shapes)
    _write_embedded(module, out, target)
    return 0


def _build_host_graph(graph, out: Path, shapes, args) -> int:
    """``--graph NAME --target c``: each fused kernel's .c, .h and library, with the best
    configuration ``--tuning-log`` holds for it (`tdsl tune --graph`)."""
    from .tuner.graph_tune import graph_inputs
    weights = graph.load_params(args.params)
    inputs = graph_inputs(graph, weights, shapes)       # every size known, or an error
    module = graph.build(args.target, params=weights, shapes=shapes,
                         tuning_log=args.tuning_log)
    compiled = module.compiled(*inputs)
    tuned = sum("(tuned)" in s for s in compiled.schedules)
    print(f"{graph.name}: {len(compiled.kernels)} kernels in {out}, {tuned} tuned"
          + (f" from {args.tuning_log}" if args.tuning_log else ""))
    for k, (kernel, how) in enumerate(zip(compiled.kernels, compiled.schedules)):
        stem = f"{graph.name}_k{k}"
        try:
            (out / f"{stem}.c").write_text(kernel.source)
            (out / f"{stem}.h").write_text(kernel.header)
            shutil.copyfile(kernel.lib_path, out / f"lib{stem}.so")
        except OSError as e:
            raise TdslError(f"can't write to {out}: {e.strerror}") from None
        print(f"  k{k} {'+'.join(compiled.functions[k].ops)}: {stem}.c, lib{stem}.so "
              f"(schedule: {how})")
    return 0


def _write_embedded(module, out: Path, target) -> None:
    from .emit_c.embedded_build import can_measure, code_size, compile_object
    (out / f"{module.name}.c").write_text(module.source)
    (out / f"{module.name}.h").write_text(module.header)
    print(f"{module.name}: {out / (module.name + '.c')}, {out / (module.name + '.h')}")
    print(f"  entry {module.entry}, arena {module.arena_bytes} bytes "
          f"({module.macro}_ARENA_BYTES; {module.naive_bytes} without reuse)")
    if can_measure(target):
        with tempfile.TemporaryDirectory() as tmp:
            size = code_size(compile_object(module, target, tmp), target)
        isa = [f for f in target.flags if f.startswith(("-O", "-mcpu", "-march", "-mfloat"))]
        print(f"  code ({target.compiler} {' '.join(isa)}): "
              f"text {size.text}, data {size.data}, bss {size.bss} bytes")
    else:
        print(f"  code size: {target.compiler} or its binutils are not installed")


def _build_embedded(mod, names, out: Path, shapes, attrs, args) -> int:
    """The .c/.h pair of each op; its arena, and its code size where the compiler is here."""
    from .emit_c.embedded import emit_embedded
    target = as_target(args.target)
    for name in names:
        if name not in mod:
            raise TdslError(f"no op '{name}' in {args.file} (ops: {', '.join(sorted(mod))})")
        func = mod[name].lower(args.schedule, shapes, target=target, **attrs)
        _write_embedded(emit_embedded(func, target=target), out, target)
    return 0


def cmd_run(args) -> int:
    """Build, call on random inputs, compare with the reference, and time it."""
    op = _op_of(args)
    shapes, attrs = parse_shapes(args.shape) or {}, parse_attrs(args.attr)
    check_shape_names(op, shapes, attrs)
    # specialised to the sizes given (the others are read off the inputs at each call; an
    # embedded build fixes every size, its arena is sized then, and runs emulated)
    kernel = op.build(args.target, args.schedule, shapes or None, **attrs)
    arrays = random_arguments(op, shapes, attrs, seed=0)
    outs = kernel(*arrays)
    refs = op.reference(*arrays, **attrs)
    outs, refs = (outs, refs) if isinstance(outs, tuple) else ((outs,), (refs,))
    for o, r in zip(outs, refs):
        err = float(np.max(np.abs(o.astype(np.float64) - r))) if o.size else 0.0
        print(f"output {o.shape} {o.dtype}: max |tdsl - reference| = {err:.3g}")
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < 0.5:
        kernel(*arrays)
        n += 1
    print(f"time: {(time.perf_counter() - t0) / n * 1e3:.3f} ms per call ({n} calls)")
    return 0


def cmd_tune(args) -> int:
    """Search the op's knob space, log every measurement, print the best configuration."""
    # imported here: the tuner pulls in scikit-learn, which the other commands don't need
    from .tuner.distributed import DaskMeasurer
    from .tuner.log import Workload
    from .tuner.measure import LocalMeasurer
    from .tuner.task import Task
    from .tuner.transfer import history_from_logs
    from .tuner.tune import Progress, check_tunable, plot_curves, tune
    if args.graph is not None:
        return _tune_graph(args)
    op = _op_of(args)
    check_tunable(as_target(args.target), local=not args.dask)     # before anything runs
    shapes = parse_shapes(args.shape) or {}
    check_shape_names(op, shapes, parse_attrs(args.attr))
    if args.plot:           # checked now, not after the whole tuning run
        _check_writable(args.plot, "--plot")
    for path in args.transfer_log or ():
        if not Path(path).is_file():
            raise TdslError(f"--transfer-log {path}: no such file")
    workload = Workload.make(args.file, op.name, shapes, parse_attrs(args.attr),
                             str(as_target(args.target)), args.schedule, op.content_digest())
    task = Task(workload)
    print(f"tuning {workload}: {task.space.describe()}", file=sys.stderr)
    history = history_from_logs(args.transfer_log, exclude=workload) \
        if args.transfer_log else None
    measurer = _dask_measurer(DaskMeasurer, args) if args.dask else \
        LocalMeasurer(timeout=args.timeout)
    try:
        result = tune(task, args.trials, args.log, args.tuner, measurer, args.batch,
                      args.seed, history, Progress(args.trials))
    finally:
        measurer.close()
    print(result.summary())
    if args.plot:
        plot_curves({args.tuner: result.curve}, args.plot, str(workload))
        print(f"curve: {args.plot}")
    if result.interrupted:
        return 130
    return 1 if result.best_config is None and result.trials else 0   # nothing ran


def _tune_graph(args) -> int:
    """``tdsl tune FILE --graph NAME``: the graph's distinct fused kernels under one budget
    (`tdsl.tuner.graph_tune`), then the whole model's time before and after."""
    from .tuner.distributed import DaskMeasurer
    from .tuner.graph_tune import tune_graph
    from .tuner.tune import check_tunable, plot_curves
    for flag, value in (("--op", args.op), ("--schedule", args.schedule),
                        ("--attr", args.attr), ("--transfer-log", args.transfer_log)):
        if value:
            raise TdslError(f"tdsl tune --graph takes no {flag}: a graph's kernels take "
                            "their anchor op's schedule"
                            + (", and warm each other's cost models" if
                               flag == "--transfer-log" else ""))
    check_tunable(as_target(args.target), local=not args.dask)
    mod = load(args.file)
    names = mod.graphs()
    if args.graph not in names:
        raise TdslError(f"{args.file} has no graph '{args.graph}' (graphs: "
                        f"{', '.join(names) or 'none'})")
    if args.plot:
        _check_writable(args.plot, "--plot")
    if args.params is not None and not Path(args.params).is_file():
        raise TdslError(f"--params {args.params}: no such file")
    measurer = _dask_measurer(DaskMeasurer, args) if args.dask else None   # None: flushing
    try:
        result = tune_graph(mod[args.graph], args.params, None, args.trials, args.log,
                            args.target, parse_shapes(args.shape), args.floor, args.tuner,
                            measurer, args.batch, args.seed, args.timeout,
                            trial_progress=True)
    finally:
        if measurer is not None:
            measurer.close()
    if args.plot:
        plot_curves({t.name: t.result.curve for t in result.tasks if t.result is not None},
                    args.plot, f"graph {args.graph}")
        print(f"curves: {args.plot}")
    return 130 if result.interrupted else 0


def _check_writable(path: str, what: str) -> None:
    parent = Path(path).resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise TdslError(f"{what} {path}: the directory {parent} does not exist or is not "
                        "writable")


def _dask_measurer(dask_measurer, args):
    """A measurer on the dask scheduler at --dask, or a TdslError if none answers."""
    try:
        return dask_measurer(args.dask, timeout=args.timeout)
    except ImportError as e:
        raise TdslError(str(e)) from None
    except (OSError, TimeoutError, ValueError) as e:
        raise TdslError(f"--dask {args.dask}: no dask scheduler answers there ({e})",
                        hint="start one with `dask scheduler`, or drop --dask") from None


def cmd_graph(args) -> int:
    """The graph after the passes: kernels and the ops fused in each, layouts, memory plan."""
    from .graph_api import BLOCKED_LAYOUT_DEFAULT, CompiledGraph, Graph
    from .graph_weights import bind_sizes
    mod = load(args.file)
    names = mod.graphs()
    if not names:
        raise TdslError(f"{args.file} defines no graph")
    name = args.graph or names[0]
    if args.graph is None and len(names) > 1:
        raise TdslError(f"{args.file} defines several graphs ({', '.join(names)}): "
                        f"say which with --graph")
    if name not in names:
        raise TdslError(f"{args.file} has no graph '{name}' (graphs: {', '.join(names)})")
    graph: Graph = mod[name]
    shapes = parse_shapes(args.shape) or {}
    unknown = [s for s in shapes if s not in graph.ir.sizes]
    if unknown:
        raise TdslError(f"--shape {unknown[0]}: graph {name} has no size {unknown[0]} "
                        f"(sizes: {', '.join(graph.ir.sizes) or 'none'})")
    weights = graph.load_params(args.params) if args.params else \
        graph.random_params(shapes=shapes)
    sizes = bind_sizes(graph.ir, weights, shapes, partial=True)
    missing = [s for s in graph.ir.sizes if s not in sizes]
    if missing:
        raise TdslError(f"graph {name}: give the size{'s' * (len(missing) > 1)} "
                        f"{', '.join(missing)} with --shape, e.g. --shape {missing[0]}=1")
    blocked = BLOCKED_LAYOUT_DEFAULT if args.layout is None else args.layout == "on"
    if args.profile:        # built, called on random inputs, each kernel timed
        from .arrays import random_array
        module = graph.build(args.target, params=weights, fuse=not args.no_fuse,
                             fold=not args.no_fold, shapes=sizes, layout=blocked,
                             winograd=args.winograd != "off")
        rng = np.random.default_rng(0)
        inputs = [random_array(graph.ir.shape_of(n, sizes), graph.ir.value(n).dtype, rng)
                  for n in graph.ir.inputs]
        print(module.profile(*inputs, passes=args.passes, peak=args.peak))
        return 0
    compiled = CompiledGraph(graph, weights, sizes, not args.no_fuse, not args.no_fold,
                             args.target, blocked, args.winograd != "off")
    print(compiled.describe())
    if args.plan_json:
        import json
        Path(args.plan_json).write_text(json.dumps(compiled.plan.as_dict(), indent=1))
    return 0


def cmd_import(args) -> int:
    from .onnx_import import import_onnx
    constants = {}
    for item in args.const:
        key, sep, path = item.partition("=")
        if not sep or not key:
            raise TdslError(f"--const {item}: expected INPUT=FILE.npy")
        try:
            constants[key] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise TdslError(f"--const {item}: can't read {path} as a .npy file: {e}") from None
    dims = {}
    for item in args.dim:
        key, sep, value = item.partition("=")
        if not sep or not key or not value.strip().isdigit():
            raise TdslError(f"--dim {item}: expected NAME=N, N a positive integer")
        dims[key] = int(value)
    out = import_onnx(args.model, args.output, args.name, constants, dims, args.target)
    print(f"wrote {out.tdsl} and {out.npz} (graph {out.graph}: {out.nodes} ops, "
          f"{out.params} weights)")
    return 0


def cmd_test(args) -> int:
    from .testing import run_property_test
    mod = load(args.file)
    if args.op is not None and args.op not in mod:
        raise TdslError(f"no op '{args.op}' in {args.file} (ops: {', '.join(sorted(mod))})")
    return run_property_test(mod, args.op, args.target, args.examples,
                             parse_attrs(args.attr))


TARGET_HELP = ("what to build for (default: c, this machine), e.g. 'c -march=x86-64-v3'; "
               "`tdsl target SPEC` shows what it means")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdsl", description="The tdsl tensor compiler.")
    p.add_argument("--version", action="version", version=f"tdsl {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("check", help="check .tdsl files; print every error found")
    c.add_argument("files", nargs="+", metavar="FILE")
    c.set_defaults(run=cmd_check)

    o = sub.add_parser("ops", help="list the signatures of FILE's ops and graphs")
    o.add_argument("file", metavar="FILE")
    o.set_defaults(run=cmd_ops)

    tg = sub.add_parser("target", help="print what tdsl knows of a target (default: this "
                        "machine): vector lanes, registers, caches, compiler flags, FMA peak")
    tg.add_argument("spec", nargs="?", default="c", metavar="TARGET",
                    help="e.g. 'c', 'c -march=x86-64-v3', 'c -march=armv8-a'")
    tg.add_argument("--measure", action="store_true",
                    help="also measure the fp32 FMA peak and the int8 dot product's with a short "
                    "loop on every core")
    tg.set_defaults(run=cmd_target)

    def op_command(name, help_text, run):
        c = sub.add_parser(name, help=help_text)
        c.add_argument("file", metavar="FILE")
        c.add_argument("--op", help="the op (needed when FILE has several)")
        c.add_argument("--shape", help="sizes fixed at build time, e.g. M=64,N=32,K=16")
        c.add_argument("--schedule", help="a schedule name (default: the op's 'default' "
                       "schedule, else the automatic one; 'naive' for none)")
        c.add_argument("--attr", action="append", metavar="NAME=VALUE",
                       help="an attribute, e.g. --attr stride=2 (repeatable)")
        c.add_argument("--target", default="c", help=TARGET_HELP)
        c.set_defaults(run=run)
        return c

    op_command("lower", "print an op's loop nest", cmd_lower)
    op_command("emit", "print the generated source", cmd_emit)
    b = op_command("build", "write .c, .h and the shared library (c-embedded: the .c/.h "
                   "pair, its arena and code size)", cmd_build)
    b.add_argument("-o", "--output", required=True, metavar="DIR")
    b.add_argument("--graph", metavar="NAME", help="build this graph of FILE (with --params; "
                   "for a c-embedded target: one .c/.h pair, weights static const; for the "
                   "host: each fused kernel's .c, .h and library, --tuning-log applied)")
    b.add_argument("--params", metavar="W.npz", help="the graph's weights")
    b.add_argument("--tuning-log", metavar="PATH", help="apply the best configuration that "
                   "this `tdsl tune` log holds for the op at --shape and is legal for "
                   "--target, preferring records measured for that target (others are "
                   "skipped with a warning)")
    op_command("run", "build, run on random inputs, compare with the reference, time",
               cmd_run)

    tu = op_command("tune", "search the schedule's knobs for the fastest configuration",
                    cmd_tune)
    tu.add_argument("--trials", type=positive_int, default=64, help="configurations to measure, "
                    "counting those already in the log (default 64); with --graph, per "
                    "distinct fused kernel on average: N x kernels in all, shared by each "
                    "kernel's time in the model, at least --floor each")
    tu.add_argument("--graph", metavar="NAME", help="tune this graph of FILE: its distinct "
                    "fused kernels under one budget, heaviest first, each warming the next's "
                    "cost model; prints the whole model's time before and after")
    tu.add_argument("--params", metavar="W.npz", help="with --graph: the weights (default: "
                    "random ones); --shape gives the sizes they leave open, e.g. B=1")
    tu.add_argument("--floor", type=positive_int, default=8, help="with --graph: trials every "
                    "kernel gets at least (its whole space when smaller; default 8)")
    tu.add_argument("--log", default="tune.jsonl", metavar="PATH",
                    help="JSON-lines log to resume from and append to (default tune.jsonl)")
    tu.add_argument("--tuner", default="gbt", choices=["gbt", "random", "grid"])
    tu.add_argument("--batch", type=positive_int, default=16,
                    help="configurations per round")
    tu.add_argument("--seed", type=int, default=0)
    tu.add_argument("--timeout", type=float, default=10.0,
                    help="seconds one candidate may run before it counts as hung")
    tu.add_argument("--transfer-log", action="append", metavar="PATH",
                    help="earlier logs whose records warm the cost model (repeatable)")
    tu.add_argument("--dask", metavar="ADDRESS", help="measure on a dask.distributed "
                    "scheduler's workers (pip install 'tdsl[distributed]')")
    tu.add_argument("--plot", metavar="PNG", help="draw best GFLOP/s against trials "
                    "(pip install 'tdsl[plot]')")

    gr = sub.add_parser("graph", help="print a graph after the passes: fused kernels, "
                        "layouts, memory plan")
    gr.add_argument("file", metavar="FILE")
    gr.add_argument("--graph", help="the graph (needed when FILE has several)")
    gr.add_argument("--shape", help="sizes the weights don't fix, e.g. B=1")
    gr.add_argument("--params", metavar="NPZ", help="weights (default: random ones)")
    gr.add_argument("--no-fuse", action="store_true", help="one kernel per op")
    gr.add_argument("--no-fold", action="store_true", help="no constant folding")
    gr.add_argument("--plan-json", metavar="PATH", help="write the memory plan as JSON")
    gr.add_argument("--layout", choices=("on", "off"), help="activations between convolutions "
                    "blocked, NCHW[lanes]c (default: Graph.build's)")
    gr.add_argument("--winograd", choices=("on", "off"), help="3x3 stride-1 convolutions on "
                    "blocked activations as Winograd's F(4x4, 3x3) or F(2x2, 3x3), by size "
                    "(default: on)")
    gr.add_argument("--target", default="c", help="the target whose schedules the fused "
                    "kernels take (default: c, this machine)")
    gr.add_argument("--profile", action="store_true", help="build it, call it on random "
                    "inputs and print each fused kernel's time, share, GFLOP/s and %% of peak "
                    "or GB/s, beside the whole call's time")
    gr.add_argument("--passes", type=positive_int, default=20, help="--profile: the passes "
                    "each kernel's best time and the call's median are taken over (default 20)")
    gr.add_argument("--peak", choices=("measured", "formula"), default="measured",
                    help="--profile: the FMA peak measured on this machine (about 1.5 s) or by "
                         "the formula at the reported clock (default: measured)")
    gr.set_defaults(run=cmd_graph)

    im = sub.add_parser("import", help="convert an ONNX model to a .tdsl graph and an .npz "
                        "of its weights (pip install 'tdsl[onnx]')")
    im.add_argument("model", metavar="MODEL.onnx")
    im.add_argument("-o", "--output", required=True, metavar="DIR/NAME.tdsl")
    im.add_argument("--name", help="the graph's name (default: the output file's stem)")
    im.add_argument("--const", action="append", metavar="INPUT=FILE.npy", default=[],
                    help="make a graph input a constant of the values in FILE.npy (an input "
                         "that gives a shape, axes or pads); repeatable")
    im.add_argument("--dim", action="append", metavar="NAME=N", default=[],
                    help="the value of a symbolic input dimension (a batch N, a sequence "
                         "length S; default 1, with a warning); repeatable")
    im.add_argument("--target", default="c", help="the target the graph is for, where a "
                    "layer's fastest form depends on the CPU (an int8 convolution in "
                    "integers where it has VNNI, else in f32); " + TARGET_HELP)
    im.set_defaults(run=cmd_import)

    t = sub.add_parser("test", help="property-test ops: random shapes, values, schedules")
    t.add_argument("file", metavar="FILE")
    t.add_argument("--op", help="only this op (default: every op of FILE)")
    t.add_argument("--target", default="c", help=TARGET_HELP)
    t.add_argument("--examples", type=positive_int, default=20, help="examples per op")
    t.add_argument("--attr", action="append", metavar="NAME=VALUE",
                   help="an attribute for the ops that have it, e.g. --attr kernel=2 "
                        "(repeatable); needed for attributes without defaults")
    t.set_defaults(run=cmd_test)
    return p


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings as one line for a user: not the Python source line that raised them."""
    return f"warning: {message}\n"


def main(argv: list[str] | None = None) -> int:
    warnings.formatwarning = _format_warning
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except TdslError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except BrokenPipeError:          # `tdsl ops std | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
