"""The tuning loop: propose a batch, measure it, log it, learn, repeat.

    task = Task(Workload.make("std", "matmul", {"M": 1024, "N": 1024, "K": 1024}))
    result = tune(task, trials=64, log="tune.jsonl")
    print(result.summary())

The log makes the loop restartable: records of this workload on this machine already in the
log count as trials and teach the tuner, and are never measured again. Ctrl-C ends the loop
after the record being written; the log stays whole and the result covers what was done.
The default configuration is always among the first batch, so the summary can compare.
"""
from __future__ import annotations

import statistics
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field

from ..errors import ScheduleError, TdslError
from ..lowering.dtypes import is_float
from .log import LogWriter, machine_fingerprint, make_record, read_log, records_for
from .measure import LocalMeasurer
from .search import ModelTuner, Tuner, make_tuner
from .task import Task


@dataclass
class TuneResult:
    task: Task
    tuner: str
    best_config: dict | None = None
    best_gflops: float = 0.0
    default_gflops: float | None = None
    numpy_gflops: float | None = None
    curve: list[float] = field(default_factory=list)     # best GFLOP/s after each trial
    statuses: Counter = field(default_factory=Counter)
    # failing status -> its distinct messages, in the order first seen (the summary shows
    # the first: an internal error must reach the console, not only the log)
    messages: dict[str, list[str]] = field(default_factory=dict)
    resumed: int = 0
    model_quality: tuple[float, float] | None = None      # (Kendall tau, top-k recall)
    search_seconds: float = 0.0          # the tuner's own work: model fits and search
    total_seconds: float = 0.0
    interrupted: bool = False

    @property
    def trials(self) -> int:
        return len(self.curve)

    @property
    def errors(self) -> int:
        return sum(n for s, n in self.statuses.items() if s != "ok")

    @property
    def unit(self) -> str:
        """GFLOP/s for an op with a float output; GOP/s (integer operations) otherwise."""
        floats = any(is_float(t.dtype) for t in self.task.fn.outputs)
        return "GFLOP/s" if floats else "GOP/s"

    def summary(self) -> str:
        w = self.task.workload
        lines = [f"tuned {w} with {self.tuner}: {self.trials} trials"
                 + (f" ({self.resumed} from the log)" if self.resumed else "")
                 + (", interrupted" if self.interrupted else "")]
        if self.best_config is None:
            lines.append("no configuration ran successfully")
        else:
            lines.append(f"best configuration: {self.best_config}  "
                         f"{_rate(self.best_gflops)} {self.unit}")
        for name, g in (("default schedule", self.default_gflops),
                        ("numpy (reference)", self.numpy_gflops)):
            if g:
                ratio = f"  (best is {_ratio(self.best_gflops / g)})" if self.best_gflops \
                    else ""
                lines.append(f"{name}: {_rate(g)} {self.unit}{ratio}")
        if self.statuses:
            lines.append("results: " + ", ".join(f"{n} {s}" for s, n in
                                                 sorted(self.statuses.items())))
        for status, found in sorted(self.messages.items()):
            first = found[0].replace("\n", "\n    ")
            more = len(found) - 1
            lines.append(f"  {status}: {first}" + (
                f"\n    (and {more}{'+' * (more >= MESSAGES_KEPT - 1)} other "
                f"message{'s' * (more > 1)}: see the log)" if more else ""))
        if self.model_quality is not None:
            tau, recall = self.model_quality
            lines.append(f"cost model on unseen batches: Kendall tau {tau:.2f}, "
                         f"top-25% recall {recall:.2f}")
        if self.total_seconds > 0:
            lines.append(f"time: {self.total_seconds:.1f} s, of which search and model "
                         f"{self.search_seconds:.1f} s "
                         f"({100 * self.search_seconds / self.total_seconds:.0f}%)")
        return "\n".join(lines)


def _rate(g: float) -> str:
    """A throughput as printed: one decimal, or three significant digits below 1 (the
    reference evaluator on a small op runs at a few MFLOP/s, which ".1f" showed as 0.0)."""
    return f"{g:.1f}" if g >= 1 else f"{g:.3g}"


def _ratio(r: float) -> str:
    return f"{r:.2f}x" if r < 100 else f"{r:.0f}x"


def tune(task: Task, trials: int, log=None, tuner="gbt", measurer=None,
         batch_size: int = 16, seed: int = 0, history=None, progress=None,
         compare_numpy: bool = True) -> TuneResult:
    """Tune ``task`` until ``trials`` configurations of it are measured (log records
    included) or its space is exhausted; returns what was found. ``tuner`` is a name of
    `search.TUNERS` or a `Tuner`; ``measurer`` defaults to a `LocalMeasurer`; ``history``
    is transfer-learning data (`transfer.history_from_logs`) for the gbt tuner."""
    started = time.perf_counter()
    check_tunable(task.target, local=measurer is None or isinstance(measurer, LocalMeasurer))
    search = tuner if isinstance(tuner, Tuner) else make_tuner(tuner, task, seed, history)
    result = TuneResult(task, search.name)
    own_measurer = measurer is None
    measurer = LocalMeasurer() if own_measurer else measurer
    done = _resume(task, log, search, result)
    writer = LogWriter(log) if log is not None else None
    progress = progress or Progress(trials, quiet=True)
    # a space smaller than ``trials`` ends the run early: count to what will be measured
    progress.limit(min(trials, result.trials + max(search.remaining(), 0)))
    progress.show(result)
    default = task.space.default_index()
    try:
        while result.trials < trials and search.remaining() > 0:
            t0 = time.perf_counter()
            n = min(batch_size, trials - result.trials)
            first = [default] if default not in done and task.space.is_valid(default) else []
            # dict.fromkeys: the tuner may propose the default too
            batch = list(dict.fromkeys(first + search.next_batch(n - len(first))))
            result.search_seconds += time.perf_counter() - t0
            if not batch:
                break
            measured = measurer.measure(task, batch)
            learned = []
            for r in measured:
                gflops = task.flops / r.seconds / 1e9 if r.ok and r.seconds else None
                if writer is not None:
                    writer.write(make_record(task.workload, r.config, r.status, r.seconds,
                                             gflops, r.message, r.machine,
                                             getattr(r, "facts", None) or task.target.facts()))
                done[r.index] = gflops
                _account(result, r.index, r.config, r.status, gflops, default, r.message)
                learned.append((r.index, gflops))
                progress.show(result)
            t0 = time.perf_counter()
            search.update(learned)
            result.search_seconds += time.perf_counter() - t0
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        if writer is not None:
            writer.close()
        if own_measurer:
            measurer.close()
        progress.close(result)
    if isinstance(search, ModelTuner):
        result.model_quality = search.summary_quality()
    if compare_numpy and not result.interrupted:
        result.numpy_gflops = task.flops / _time_reference(task) / 1e9
    result.total_seconds = time.perf_counter() - started
    return result


def _resume(task: Task, log, search, result: TuneResult) -> dict[int, float | None]:
    """Feed the log's records of this task (this machine) to the tuner and the result."""
    done: dict[int, float | None] = {}
    if log is None:
        return done
    default = task.space.default_index()
    stale = 0
    for rec in records_for(read_log(log), task.workload, machine_fingerprint()):
        try:
            index = task.space.index(rec["config"])
        except (ScheduleError, TypeError, AttributeError):
            stale += 1               # written by another version of the template
            continue
        if index in done:
            continue
        gflops = rec.get("gflops") if rec.get("status") == "ok" else None
        done[index] = gflops
        _account(result, index, rec["config"], rec.get("status", "?"), gflops, default,
                 rec.get("message") or "")
    if stale:
        warnings.warn(f"{log}: skipped {stale} record(s) of {task.workload} whose knobs are "
                      f"not this schedule's ({', '.join(task.space.names) or 'none'}): "
                      "a knob renamed or its choices changed since", stacklevel=3)
    result.resumed = len(done)
    search.update(list(done.items()))
    return done


MESSAGES_KEPT = 8         # distinct messages kept per failing status


def check_tunable(target, local: bool = True) -> None:
    """Refuse, before anything is measured, a target whose candidates cannot be timed: one
    with no build-and-load path here (c-embedded: its kernels run on the device, or under
    an emulator whose timings say nothing of the device's speed) or, measured on this
    machine (``local``), one whose code this machine cannot run."""
    from ..backends import COMPILERS
    if target.kind not in COMPILERS:
        raise TdslError(f"tdsl tune can't measure target '{target}': {target.kind} kernels "
                        f"run on the device (or under an emulator, whose timings say nothing "
                        f"of the device's speed); tunable targets: "
                        f"{', '.join(sorted(COMPILERS))}",
                        hint="build it with its schedule's defaults, or tune the op for a "
                             "host target")
    reason = target.unrunnable_reason() if local else None
    if reason:
        raise TdslError(f"tdsl tune can't measure here: {reason}",
                        hint="tune on a machine that runs it (--dask with such workers)")


def _account(result: TuneResult, index, config, status, gflops, default,
             message: str = "") -> None:
    result.statuses[status] += 1
    if status != "ok" and message:
        found = result.messages.setdefault(status, [])
        if message not in found and len(found) < MESSAGES_KEPT:
            found.append(message)
    if gflops is not None and gflops > result.best_gflops:
        result.best_gflops, result.best_config = gflops, dict(config)
    if index == default and gflops is not None:
        result.default_gflops = gflops
    result.curve.append(result.best_gflops)


def _time_reference(task: Task, repeats: int = 5) -> float:
    """Median seconds of the numpy reference evaluator on the task's inputs."""
    inputs = task.inputs()
    task.reference(inputs)                                   # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        task.reference(inputs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class Progress:
    """One status line on stderr: trials done, best GFLOP/s so far, errors. Redrawn in place
    on a terminal, printed at most every ``every`` trials otherwise (logs, CI)."""

    def __init__(self, total: int, stream=None, quiet: bool = False, every: int = 16):
        self.total, self.quiet, self.every = total, quiet, every
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self._last = -1

    def limit(self, total: int) -> None:
        """At most ``total`` trials will be measured (the space holds no more)."""
        self.total = min(self.total, max(total, 0))

    def show(self, result: TuneResult, force: bool = False) -> None:
        if self.quiet:
            return
        n = result.trials
        if not (force or self.tty) and n != self.total and n - self._last < self.every and n:
            return
        self._last = n
        width = 24
        filled = int(width * min(n, self.total) / max(self.total, 1))
        bar = "#" * filled + "." * (width - filled)
        line = (f"[{bar}] {n}/{self.total} trials  best {result.best_gflops:.1f} "
                f"{result.unit}  errors {result.errors}")
        self.stream.write(("\r" + line) if self.tty else line + "\n")
        self.stream.flush()

    def close(self, result: TuneResult | None = None) -> None:
        """End the line; the last state is shown even when the run stopped short of the
        total (every invalid configuration proposed, interrupted)."""
        if result is not None and not self.quiet:
            # not interrupted, it ended: what it measured was the whole
            total = self.total if result.interrupted else min(self.total, result.trials)
            if result.trials != self._last or total != self.total:
                self.total = total
                self.show(result, force=True)
        if not self.quiet and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def plot_curves(curves: dict[str, list[float]], path, title: str = "") -> None:
    """Best GFLOP/s against trials, one line per tuner (matplotlib: ``tdsl[plot]``)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install 'tdsl[plot]'") from None
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curve in curves.items():
        ax.plot(range(1, len(curve) + 1), curve, label=name)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s so far")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
