"""A tuning task: one op at fixed sizes and attributes for one target, and its template.

The `Workload` (`tdsl.tuner.log`) is the task's identity, written into every log record and
matched when a log is applied. The `Task` holds what tuning needs: the schedule template (a `Schedule` with knobs), its
`ConfigSpace`, the op's flop count (for GFLOP/s) and the inputs and reference output that
every candidate is checked against.
"""
from __future__ import annotations

import math

import numpy as np

from ..api import load
from ..arrays import random_inputs
from ..errors import TdslError
from ..lowering import sizes, te
from ..lowering.loop_ir import LoweredFunc
from ..lowering.lower import lower
from ..lowering.reference.semantics import evaluate as reference_evaluate
from ..lowering.schedule import Schedule
from ..target import as_target
from .log import Workload
from .space import ConfigSpace


class Task:
    """A workload made ready to tune. ``template`` overrides the op's own schedule (a
    Python-built template, e.g. in tests); it must be a schedule of the same op."""

    def __init__(self, workload: Workload, template: Schedule | None = None):
        self.workload = workload
        self.shapes = dict(workload.shapes)
        self.attrs = dict(workload.attrs)
        self.op = load(workload.file)[workload.op]
        self.target = as_target(workload.target)
        self.template = template or self.op.schedule(workload.schedule, self.target,
                                                     shapes=self.shapes, **self.attrs)
        self.fn = self.template.fn
        missing = [v.name for v in self.fn.shape_vars if v.name not in self.shapes]
        if missing:
            raise TdslError(f"tuning {workload.op} needs every size: give "
                            f"{', '.join(missing)} (e.g. --shape {missing[0]}=256)")
        self.space = ConfigSpace.from_schedule(self.template)
        self.flops = flop_count(self.fn, self.shapes)

    def lower(self, config: dict | None) -> LoweredFunc:
        return lower(self.fn, self.template, config, self.shapes, target=self.target)

    def inputs(self, seed: int = 0) -> list:
        return random_inputs(self.fn, self.shapes, seed)

    def reference(self, inputs) -> np.ndarray:
        """The first output, as the reference evaluator computes it."""
        return reference_evaluate(self.fn, inputs)[0]

    def __repr__(self) -> str:
        return f"Task({self.workload}, {self.space.describe()})"


def flop_count(fn: te.Function, shapes: dict[str, int]) -> int:
    """Arithmetic operations of ``fn`` at these sizes: per stage, the points of its domain
    (times the reduction's extent) times the operations per point, a reduction's combine
    counting one (so a matmul is 2·M·N·K, a conv2d 2·N·F·OH·OW·C·KH·KW). Copies, selects
    and index arithmetic count nothing; at least 1. It counts the stages as the algorithm
    writes them: conv2d's blocks of 16 filters count whole when F is not a multiple."""
    env = {v.name: shapes[v.name] for v in fn.shape_vars}
    total = 0
    for t in fn.stages():
        points = math.prod(sizes.value(ax.extent, env, t.name) for ax in t.op.axes)
        body = t.op.body
        if isinstance(body, te.Reduce):
            points *= math.prod(sizes.value(ax.extent, env, t.name) for ax in body.axes)
            ops = _arith_ops(body.body) + 1
        else:
            ops = _arith_ops(body)
        total += points * ops
    return max(total, 1)


def _arith_ops(e) -> int:
    """Operations on values: index arithmetic (in loads' subscripts, or in conditions on
    indices) is address computation, not work, and is not counted."""
    if isinstance(e, te.Load) or not isinstance(e, te.Expr):
        return 0
    counts = e.dtype not in (te.INDEX, "bool") and (
        isinstance(e, (te.Binary, te.Intrinsic)) or (isinstance(e, te.Unary) and e.op == "-"))
    return int(counts) + sum(_arith_ops(c) for c in te.children(e))
