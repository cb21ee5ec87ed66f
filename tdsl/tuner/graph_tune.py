"""Tuning a whole graph under one budget, as AutoTVM's task extraction does.

    result = tune_graph(graph, params=w, inputs=[x], trials=64, log="net.jsonl")
    print(result.summary())
    tuned = graph.build(params=w, tuning_log="net.jsonl")

1. Extract: the graph is built with its schedules' defaults and called once; each fused
   kernel whose schedule has knobs is a task (`fused_task.FusedTask`). Kernels that compile
   to the same C (ResNet's repeated blocks: the same fused ops at the same sizes) are one
   task, standing for all of them.
2. Weigh: each kernel is timed alone inside the model (`graph_profile.kernel_times`); a
   task's weight is the summed time of the kernels it stands for (its time times its count).
3. Share: ``trials`` is per distinct task *on average*: the budget is ``trials x tasks``
   trials in all, each task gets a floor (``floor``, 8 by default, so that every one is
   tried), and the rest goes in proportion to weight (`share_trials`); a task whose space
   holds fewer configurations than its share gets its whole space and the rest goes to the
   others. AutoTVM's ``tune_tasks`` gives each task ``n_trial``; here the heavy kernels
   get more of the same total.
4. Tune: heaviest first, each with `tune.tune`, every candidate timed call by call with
   the caches flushed before each (``cache_flush``, as TVM recommends for graph tuning:
   in the model a kernel runs after other kernels, its weights out of cache, while a
   kernel timed over and over runs hot), then its best configuration and its
   default measured once more (`_confirm`: a busy moment only ever slows a timing, and
   the build takes each kernel's fastest record). Transfer learning: the configurations
   measured for the tasks already tuned with the same anchor op (the same template) are
   training data that warm the next one's cost model (as `transfer.history_from_logs` does
   for op tasks), so its first batch is already model-guided.
5. Resume: the log's records of a task (on this machine) count toward its share and are
   never measured again; the budget counts them too (`plan_trials`), so a second run with
   the same ``trials`` measures nothing, and a larger ``trials`` tops every task up.
6. Report: the whole model, called end to end, with the default build and with the log
   applied (``Graph.build(tuning_log=log)``), the median of ``rounds`` calls of each.

A kernel standing for others (a duplicate) gets the best record of its task copied under
its own workload in the log (message ``same kernel as ...``), so a build finds every
kernel's configuration by its own name. Candidates that crash, hang or compute wrong
results are recorded and tuning goes on (`measure`); an interrupt ends the run after the
record being written (the log stays whole).
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..arrays import random_array
from ..errors import TdslError
from ..graph_profile import kernel_times
from ..graph_weights import bind_sizes
from ..lowering.dtypes import to_numpy
from ..target import as_target
from .fused_task import FusedTask
from .log import (LogWriter, best_record, machine_fingerprint, make_record, read_log,
                  records_for)
from .measure import LocalMeasurer
from .model import normalise
from .search import ModelTuner, make_tuner
from .tune import Progress, TuneResult, check_tunable, tune

FLOOR = 8               # trials every task gets at least (its whole space when smaller)
COPIED = "same kernel as "      # the message of a record copied to a duplicate kernel


# ------------------------------------------------------------------- the budget

def share_trials(weights, total: int, floor: int = FLOOR, caps=None) -> list[int]:
    """``total`` trials shared among tasks of these ``weights`` (their time in the model):
    each gets ``min(floor, cap)``, the rest goes in proportion to weight, and no task more
    than its ``cap`` (the configurations its space holds; none by default), what a cap
    leaves over going to the others. Rounded by largest remainder, so the shares sum to
    ``total`` (to the sum of the caps when that is smaller). When ``total`` cannot give
    every task its floor, it is split evenly, the heaviest taking what does not divide."""
    n = len(weights)
    if n == 0:
        return []
    w = [max(float(x), 0.0) for x in weights]
    caps = [math.inf] * n if caps is None else [max(int(c), 0) for c in caps]
    total = int(min(total, sum(caps)))
    heavy = sorted(range(n), key=lambda i: (-w[i], i))
    floors = [min(floor, c) for c in caps]
    if sum(floors) >= total:                # not enough for every floor: an even split
        shares = [min(c, total // n) for c in caps]
        while sum(shares) < total:
            for i in heavy:
                if shares[i] < caps[i] and sum(shares) < total:
                    shares[i] += 1
        return shares
    exact = [float(f) for f in floors]
    active = [i for i in range(n) if floors[i] < caps[i]]
    rest = total - sum(floors)
    while active and rest > 1e-9:           # water-filling: proportional, up to the caps
        weight = sum(w[i] for i in active)
        part = {i: rest * (w[i] / weight if weight > 0 else 1 / len(active)) for i in active}
        full = [i for i in active if exact[i] + part[i] >= caps[i]]
        if not full:
            for i in active:
                exact[i] += part[i]
            break
        for i in full:
            rest -= caps[i] - exact[i]
            exact[i] = caps[i]
        active = [i for i in active if i not in full]
    shares = [int(math.floor(e + 1e-9)) for e in exact]
    # largest remainder first, the heavier task on a tie
    order = sorted(range(n), key=lambda i: (-(exact[i] - shares[i]), -w[i], i))
    for i in order:
        if sum(shares) >= total:
            break
        if shares[i] < caps[i]:
            shares[i] += 1
    return shares


def plan_trials(weights, total: int, done, floor: int = FLOOR, caps=None) -> list[int]:
    """How many trials each task is tuned to, its ``done`` log records included (what
    `tune.tune` takes): its share (`share_trials`), but the budget ``total`` counts what the
    log holds, so a task's deficit is only made up while budget is left (heaviest first).
    A run over a log that a run with the same ``total`` finished measures nothing, even
    when the weights, timed again, came out a little different."""
    shares = share_trials(weights, total, floor, caps)
    caps = [math.inf] * len(shares) if caps is None else caps
    left = max(0, total - sum(min(d, c) for d, c in zip(done, caps)))
    out = list(done)
    for i in sorted(range(len(shares)), key=lambda i: (-weights[i], i)):
        extra = min(max(0, shares[i] - done[i]), left)
        out[i] += extra
        left -= extra
    return out


# ------------------------------------------------------------------- tasks

@dataclass
class GraphTask:
    """One distinct fused kernel: ``task`` (the first kernel of its kind), ``kernels``
    (the indices in the compiled graph of every kernel it stands for), ``seconds`` (their
    summed time in the model: its weight)."""
    task: FusedTask
    kernels: tuple[int, ...]
    seconds: float
    anchor: str
    trials: int = 0             # what it is tuned to, log records included
    done: int = 0               # its records in the log before this run
    warm: bool = False          # its cost model started from earlier tasks' measurements
    result: TuneResult | None = None

    @property
    def name(self) -> str:
        return self.task.workload.op

    def best_ms(self) -> float | None:
        r = self.result
        if r is None or not r.best_gflops:
            return None
        return self.task.flops / (r.best_gflops * 1e9) * 1e3

    def default_ms(self) -> float | None:
        r = self.result
        if r is None or not r.default_gflops:
            return None
        return self.task.flops / (r.default_gflops * 1e9) * 1e3


def extract_tasks(module, inputs, target="c", passes: int = 20):
    """``(compiled graph, tasks heaviest first, seconds per kernel)``: the distinct fused
    kernels with knobs of a built graph module, weighed by their time on ``inputs``."""
    compiled, seconds = kernel_times(module, inputs, passes)
    target = as_target(target)
    groups: dict[str, list[int]] = {}
    for k, kernel in enumerate(compiled.kernels):
        groups.setdefault(kernel.source, []).append(k)   # equal C: one kernel
    tasks = []
    for ks in groups.values():
        task = FusedTask(compiled, ks[0], compiled.module, target)
        if len(task.space) <= 1:
            continue
        tasks.append(GraphTask(task, tuple(ks), sum(seconds[k] for k in ks),
                               compiled.functions[ks[0]].anchor.op))
    tasks.sort(key=lambda t: (-t.seconds, t.kernels[0]))
    return compiled, tasks, seconds


def graph_inputs(graph, weights: dict, shapes: dict | None = None, seed: int = 0) -> list:
    """Random inputs of a graph at the sizes its weights and ``shapes`` fix."""
    sizes = bind_sizes(graph.ir, weights, shapes, partial=True)
    missing = [s for s in graph.ir.sizes if s not in sizes]
    if missing:
        raise TdslError(f"graph {graph.name}: give the size{'s' * (len(missing) > 1)} "
                        f"{', '.join(missing)}, e.g. --shape {missing[0]}=1")
    rng = np.random.default_rng(seed)
    out = []
    for name in graph.ir.inputs:
        v = graph.ir.value(name)
        a = random_array(graph.ir.shape_of(name, sizes), v.dtype, rng)
        out.append(np.asarray(a, dtype=to_numpy(v.dtype)))
    return out


# ------------------------------------------------------------------- the run

@dataclass
class GraphTuneResult:
    graph: str
    tasks: list[GraphTask]
    kernels: int                        # fused kernels in the model
    budget: int                         # trials in all (trials x tasks)
    before: float | None = None         # seconds per model call, default build
    after: float | None = None          # and with the log applied
    measured: int = 0                   # trials measured in this run
    max_difference: float | None = None  # largest |tuned - default| of the outputs
    interrupted: bool = False
    seconds: float = 0.0
    lines: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float | None:
        return self.before / self.after if self.before and self.after else None

    def summary(self) -> str:
        return "\n".join(self.lines)


def tune_graph(graph, params=None, inputs=None, trials: int = 64, log="tune.jsonl",
               target="c", shapes: dict | None = None, floor: int = FLOOR, tuner="gbt",
               measurer=None, batch_size: int = 16, seed: int = 0, timeout: float = 10.0,
               rounds: int = 30, passes: int = 20, layout: bool | None = None,
               winograd: bool = True, transfer: bool = True, confirm: bool = True,
               cache_flush: bool = True,
               stream=None,
               trial_progress: bool = False) -> GraphTuneResult:
    """Tune the distinct fused kernels of ``graph`` (a `tdsl.Graph`) under one budget of
    ``trials`` per task on average (``trials x tasks`` in all, shared by weight, at least
    ``floor`` each: see the module's doc), appending to ``log``, and time the whole model
    before and after. ``params``: the weights (a mapping or an .npz; random ones when None);
    ``inputs``: the model's inputs (random ones at ``shapes`` when None). One line per task
    and the before/after lines go to ``stream`` (stdout; None there for quiet: pass
    ``False``)."""
    started = time.perf_counter()
    out = sys.stdout if stream is None else stream

    def say(line: str) -> None:
        result.lines.append(line)
        if out:
            print(line, file=out, flush=True)

    target = as_target(target)
    own_measurer = measurer is None
    check_tunable(target, local=own_measurer or isinstance(measurer, LocalMeasurer))
    weights = graph.load_params(params) if params is not None else \
        graph.random_params(shapes=shapes)
    if inputs is None:
        inputs = graph_inputs(graph, weights, shapes)
    build = dict(target=target, params=weights, shapes=shapes, layout=layout,
                 winograd=winograd)
    default = graph.build(**build)
    compiled, tasks, seconds = extract_tasks(default, inputs, target, passes)
    result = GraphTuneResult(graph.name, tasks, len(compiled.functions), trials * len(tasks))
    records = read_log(log) if log is not None else []
    machine = machine_fingerprint()
    for t in tasks:
        t.done = len({_key(r["config"]) for r in
                      records_for(records, t.task.workload, machine)})
    caps = [len(t.task.space) for t in tasks]
    plan = plan_trials([t.seconds for t in tasks], result.budget, [t.done for t in tasks],
                       floor, caps)
    for t, n in zip(tasks, plan):
        t.trials = n
    total = sum(seconds)
    tuned_share = sum(t.seconds for t in tasks) / total if total else 0.0
    say(f"graph {graph.name}: {len(compiled.functions)} fused kernels, {len(tasks)} distinct "
        f"with knobs ({100 * tuned_share:.0f}% of the kernels' {total * 1e3:.3f} ms); "
        f"{result.budget} trials ({trials} per task on average, at least {floor} each, "
        f"shared by weight), log {log}")
    history: dict[str, list] = defaultdict(list)       # anchor op -> [(xs, ys)] of tasks done
    measurer = LocalMeasurer(timeout=timeout, flush_bytes=flush_bytes(target)
                             if cache_flush else 0) if own_measurer else measurer
    try:
        for i, t in enumerate(tasks):
            task = t.task
            warm = _history(history[t.anchor]) if transfer else None
            t.warm = warm is not None
            search = make_tuner(tuner, task, seed, warm)
            progress = Progress(t.trials) if trial_progress else None
            t.result = r = tune(task, t.trials, log, search, measurer, batch_size, seed,
                                progress=progress, compare_numpy=False)
            result.measured += r.trials - r.resumed
            if confirm and r.trials > r.resumed and not r.interrupted and r.best_config:
                try:
                    _confirm(t, measurer, log)
                except KeyboardInterrupt:
                    r.interrupted = True
            _fastest(t, log)
            if isinstance(search, ModelTuner) and search.measured:
                done = list(search.measured)
                history[t.anchor].append((search.features(done),
                                          normalise([search.measured[j] for j in done])))
            _copy_to_duplicates(t, compiled, log)
            say(_task_line(i, len(tasks), t, total))
            if r.interrupted:
                result.interrupted = True
                break
    finally:
        if own_measurer:
            measurer.close()
    if result.interrupted:
        say("interrupted: the log holds what was measured; run again to go on")
        result.seconds = time.perf_counter() - started
        return result
    tuned = graph.build(**build, tuning_log=log) if log is not None else default
    which = tuned.compiled(*inputs).schedules
    result.before, result.after = _time_models(default, tuned, inputs, rounds)
    result.max_difference = _max_difference(tuned(*inputs), default(*inputs))
    n_tuned = sum("(tuned)" in s for s in which)
    say(f"model time before: {result.before * 1e3:.3f} ms (default schedules, median of "
        f"{rounds} calls)")
    say(f"model time after:  {result.after * 1e3:.3f} ms ({n_tuned} of "
        f"{len(which)} kernels tuned from the log): {result.speedup:.2f}x; outputs within "
        f"{result.max_difference:.2g} of the default build's")
    result.seconds = time.perf_counter() - started
    say(f"measured {result.measured} new trials in {result.seconds:.1f} s")
    return result


def flush_bytes(target) -> int:
    """What is written between two timed calls of a candidate (``cache_flush``): four times
    the L2 cache, at least 8 MiB, enough to push a kernel's weights out of the caches."""
    l2 = as_target(target).facts().get("l2") or 0
    return max(4 * int(l2), 8 << 20)


def _key(config) -> tuple:
    return tuple(sorted(config.items())) if isinstance(config, dict) else ()


def _history(parts):
    if not parts:
        return None
    return np.vstack([x for x, _ in parts]), np.concatenate([y for _, y in parts])


def _task_line(i: int, n: int, t: GraphTask, total: float) -> str:
    r = t.result
    count = f" x{len(t.kernels)}" if len(t.kernels) > 1 else ""
    share = 100 * t.seconds / total if total else 0.0
    best, default = t.best_ms(), t.default_ms()
    text = f"[{i + 1}/{n}] {t.name}{count} ({share:.0f}% of the time): {r.trials} trials"
    if r.resumed:
        text += f" ({r.resumed} from the log)"
    text += f", best {best:.3f} ms" if best is not None else ", nothing ran"
    if default is not None and best is not None:
        text += f" (default {default:.3f} ms, {default / best:.2f}x)"
    if r.errors:
        text += f", {r.errors} failed"
    if t.warm:
        text += ", warm-started"
    return text


def _confirm(t: GraphTask, measurer, log) -> None:
    """Measure the task's best configuration and its default once more and log both: a
    timing is only ever slowed by the machine's load, and the build takes the fastest
    record of each kernel, so a default that a busy moment made look slow (or a best that
    a quiet one made look fast) does not decide alone (`_fastest` then reads both back)."""
    r, task = t.result, t.task
    default = task.space.default_index()
    picks = [task.space.index(r.best_config)]
    if default not in picks and r.default_gflops:
        picks.append(default)
    measured = measurer.measure(task, picks)
    writer = LogWriter(log) if log is not None else None
    try:
        for m in measured:
            if not (m.ok and m.seconds):
                continue
            gflops = task.flops / m.seconds / 1e9
            if writer is not None:
                writer.write(make_record(task.workload, m.config, m.status, m.seconds, gflops,
                                         "confirming", m.machine,
                                         getattr(m, "facts", None) or task.target.facts()))
    finally:
        if writer is not None:
            writer.close()


def _fastest(t: GraphTask, log) -> None:
    """``t.result``'s best and default as the build sees them: the fastest record of any
    configuration, and of the default (a resumed result counts each one's first only)."""
    r, task = t.result, t.task
    if log is None or r is None:
        return
    mine = [x for x in records_for(read_log(log), task.workload, machine_fingerprint())
            if x.get("status") == "ok" and isinstance(x.get("seconds"), (int, float))
            and x["seconds"] > 0]
    if not mine:
        return
    best = min(mine, key=lambda x: x["seconds"])
    r.best_config = dict(best["config"])
    r.best_gflops = task.flops / best["seconds"] / 1e9
    default = task.space.config(task.space.default_index())
    times = [x["seconds"] for x in mine if x["config"] == default]
    if times:
        r.default_gflops = task.flops / min(times) / 1e9


def _copy_to_duplicates(t: GraphTask, compiled, log) -> None:
    """Write the task's best record under the workload of every other kernel it stands
    for, unless that kernel's best record in the log already has that configuration."""
    r = t.result
    if log is None or len(t.kernels) < 2 or r is None or r.best_config is None:
        return
    module, target = compiled.module, t.task.target
    from ..graph_api import fused_workload
    seconds = t.task.flops / (r.best_gflops * 1e9)
    machine = machine_fingerprint()
    records = read_log(log)
    with LogWriter(log) as writer:
        for k in t.kernels[1:]:
            w = fused_workload(module, compiled.ir.name, compiled.functions[k], target)
            theirs = best_record(records, w, machine)
            if theirs is not None and theirs["config"] == r.best_config:
                continue
            writer.write(make_record(w, r.best_config, "ok", seconds, r.best_gflops,
                                     COPIED + t.name))


def _max_difference(got, want) -> float:
    pairs = zip(got if isinstance(got, tuple) else (got,),
                want if isinstance(want, tuple) else (want,))
    return max((float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
                for a, b in pairs), default=0.0)


def _time_models(a, b, inputs, rounds: int) -> tuple[float, float]:
    """Median seconds per call of two modules, called in turn (so that a change in the
    machine's load falls on both)."""
    a(*inputs), b(*inputs)                      # warm-up
    ta, tb = [], []
    for _ in range(rounds):
        for m, ts in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            m(*inputs)
            ts.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)
