"""Lowering: a tensor-expression function and a schedule become a loop program.

    fn, schedule, config ──apply_schedule──▶ stage graph ──build_nests──▶ LoweredFunc
        ──▶ the passes of `PIPELINE`, in order ──▶ LoweredFunc for the emitters

`PIPELINE` is a named list; each pass is a module of `tdsl.lowering.passes` with one entry
``run(func) -> func`` whose docstring says what holds before and after. Flags:

- ``TDSL_DUMP_IR=1`` prints the IR after building the nests and after every pass (stderr);
- ``verify=True`` (or ``TDSL_VERIFY=1``) runs `passes.verify` after every step.
"""
from __future__ import annotations

import dataclasses
import os
import sys

from . import te
from .default_schedule import default_schedule
from .loop_ir import LoweredFunc
from .read_regions import reads
from .passes import (apply_schedule, barriers, bounds_check, build_nests, flatten,
                     hoist_divisions, partition, prefetch, promote_accumulators, reduce_lanes,
                     simplify, thread_reduce, unroll, unswitch, vectorize,
                     verify as verify_pass)
from .schedule import Schedule
from .sizes import stage_shapes
from .thread_bindings import check as check_thread_bindings
from .validate import check_sizes
from ..target import as_target

PIPELINE = [
    ("prefetch", prefetch.run),          # the next block's data, a slice per iteration,
                                         # while the loops are whole
    ("simplify", simplify.run),          # fold the index arithmetic of the splits and fuses
    ("partition", partition.run),        # split off tails whose guard blocks vectorization
    ("simplify", simplify.run),          # one-iteration tails become straight-line code
    ("bounds_check", bounds_check.run),  # prove or guard every access (multi-dimensional)
    ("flatten", flatten.run),            # multi-dimensional -> flat offsets
    ("simplify", simplify.run),
    ("vectorize", vectorize.run),        # straight-line vectorized loops -> ramps/broadcasts
    ("reduce_lanes", reduce_lanes.run),  # a short max/min (an rfactor's sum) as a tree
    ("unswitch", unswitch.run),          # a whole register tile's test (partition), before
                                         # its tail's lane loops make the tile a plain loop
    ("unroll", unroll.run),              # small unrolled loops -> copies
    ("simplify", simplify.run),
    ("promote_accumulators", promote_accumulators.run),  # a chunked sum's partial sums
                                         # in registers across each chunk
    ("unswitch", unswitch.run),          # tests that a loop does not change, taken before it
    ("hoist_divisions", hoist_divisions.run),    # x // size once per outer iteration
]

# GPU targets: cross-thread reductions become log-depth steps (warp shuffles where the
# target has them), then barriers go in, while guards are still where the schedule put them
# (the pass moves guards off the barriers; the in-bounds pass then guards what it cannot
# prove). No prefetch: the GPU languages print none; no lane trees: a thread's values are
# scalars there.
GPU_PIPELINE = [("simplify", simplify.run), ("barriers", barriers.run),
                *(p for p in PIPELINE[2:] if p[0] != "reduce_lanes")]


def gpu_pipeline(target) -> list:
    return [("thread_reduce", lambda f: thread_reduce.run(f, target)), *GPU_PIPELINE]


def lower(fn: te.Function, schedule: Schedule | None = None, config: dict | None = None,
          shapes: dict[str, int] | None = None, *, target=None, verify: bool = False,
          pipeline=None) -> LoweredFunc:
    """Lower ``fn`` under ``schedule`` (`default_schedule` when None; ``Schedule(fn)`` is the
    naive nest) with the tuner ``config`` for its knobs (defaults when None). ``shapes``
    binds shape variables to constants; the others stay symbolic in ``shape_vars``.
    ``target`` (the host by default) shapes the default schedule."""
    check_sizes(fn)
    target = as_target(target)
    if schedule is None:
        schedule = default_schedule(fn, shapes, target)
    verify = verify or os.environ.get("TDSL_VERIFY") == "1"
    dump = os.environ.get("TDSL_DUMP_IR") == "1"
    directives = schedule.resolve(config)
    graph = apply_schedule.run(fn, directives)
    check_thread_bindings(graph, directives, target)
    func = build_nests.run(graph, shapes)
    # what the algorithm reads and the sizes it writes, for the per-call checks of kernels
    # and the interpreter (the reference's errors, before anything runs)
    func = dataclasses.replace(func, attrs={**func.attrs, "reads": reads(fn),
                                            "stage_shapes": stage_shapes(fn),
                                            "fixed_sizes": dict(shapes or {})})
    _after("build_nests", func, dump, verify)
    if pipeline is None:
        pipeline = gpu_pipeline(target) if target.is_gpu else PIPELINE
    for name, step in pipeline:
        func = step(func)
        _after(name, func, dump, verify)
    return func


def _after(name: str, func: LoweredFunc, dump: bool, verify: bool) -> None:
    if dump:
        print(f"--- after {name} ---\n{func}\n", file=sys.stderr)
    if verify:
        verify_pass.run(func)
