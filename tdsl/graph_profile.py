"""Where a graph module's time goes: each fused kernel timed alone, bound to the buffers of a
real call, as TVM's debug executor times each operator."""
from __future__ import annotations

import time


def kernel_times(module, inputs, passes: int = 20):
    """``(compiled graph, seconds per kernel)``: each fused kernel of a graph module timed
    alone on these inputs, in the model's order, the best of ``passes`` passes."""
    module(*inputs)
    compiled, _, runs, _ = module._last    # the kernels bound to this call's buffers
    best = [float("inf")] * len(runs)
    for _ in range(passes):
        for i, run in enumerate(runs):
            t = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - t)
    return compiled, best
