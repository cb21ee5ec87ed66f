"""Tuning a graph's fused kernels: each is a task of its own, its space the anchor op's
schedule template applied to the fused function (conv2d + bias_add + relu is tuned as one
kernel, with conv2d's knobs).

    module = graph.build(params=w)
    for task in fused_tasks(module.compiled(x)):
        tune(task, 32, log="net.jsonl")
    tuned = graph.build(params=w, tuning_log="net.jsonl")
"""
from __future__ import annotations

from ..graph_api import CompiledGraph, _schedule_for, fused_workload
from ..target import Target, as_target
from .space import ConfigSpace
from .task import Task, flop_count


class FusedTask(Task):
    """One fused kernel of a compiled graph, at its concrete sizes."""

    def __init__(self, compiled: CompiledGraph, k: int, module, target: Target | str = "c"):
        target = as_target(target)
        f = compiled.functions[k]
        self.workload = fused_workload(module, compiled.ir.name, f, target)
        self.shapes, self.attrs, self.op, self.target = {}, {}, None, target
        self.template = _schedule_for(f, module, target)[0]
        self.fn = self.template.fn
        self.space = ConfigSpace.from_schedule(self.template)
        self.flops = flop_count(self.fn, {})


def fused_tasks(compiled: CompiledGraph, target: Target | str = "c",
                tunable_only: bool = True) -> list[FusedTask]:
    """A task per fused kernel (with ``tunable_only``, those whose schedule has knobs)."""
    module = compiled.module
    tasks = [FusedTask(compiled, k, module, target) for k in range(len(compiled.functions))]
    return [t for t in tasks if len(t.space) > 1 or not tunable_only]
