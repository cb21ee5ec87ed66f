"""Measuring tuning candidates: parallel builds, then isolated, timed runs one at a time.

A batch goes in two phases, so that no build (nor other tuner work) runs beside a timing:
on a machine with few cores a compile next to a timing corrupts it.

1. Build: worker processes lower, print and compile (through the content-addressed
   `BuildCache`) every configuration. A `ScheduleError` is "invalid"; any other failure,
   or a worker that dies or runs over ``build_timeout``, is "build_error" (the worker is
   replaced).
2. Run: one persistent runner process calls each library once as a warm-up, compares the
   first output with the reference ("wrong"), then times it: ``repeats`` repeats of as many
   calls as last ``min_seconds / repeats``, the median time per call. The parent only
   waits on the runner's pipe, with a limit for the whole candidate: a runner that dies is
   a "crash" (with its signal), one that runs over is killed ("timeout"); it is restarted
   when next needed and the batch goes on.

Workers are fresh interpreters (`tdsl.tuner.workers`): never forked.
"""
from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import shutil
import statistics
import tempfile
import time
import weakref
from collections import deque
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from pathlib import Path

import numpy as np

from ..backends import compile_func, load_func
from ..emit_c.build import BuildResult
from ..emit_c.c import CModule
from ..errors import CallError, ScheduleError, TdslError
from ..lowering.loop_ir import LoweredFunc
from ..lowering.lower import lower
from ..target import Target, as_target
from .log import machine_fingerprint
from .workers import Worker, short, stop_all

STATUSES = ("ok", "invalid", "build_error", "crash", "timeout", "wrong", "run_error")
# The runner keeps every library it loaded (unloading one under OpenMP crashed, see
# emit_c.kernel), so it is replaced after this many candidates to bound its memory.
RUNNER_RECYCLE = 500


@dataclass(frozen=True)
class MeasureResult:
    index: int                  # the configuration's index in task.space
    config: dict
    status: str                 # one of STATUSES
    seconds: float | None       # median time of one call (status "ok" only)
    message: str = ""           # the error, a few lines at most
    build_seconds: float = 0.0
    machine: str = ""           # the fingerprint of the machine that measured it
    # `Target.facts` of the target there (a dask worker resolves "c" as its own CPU)
    facts: dict | None = field(default=None, compare=False, hash=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Built:
    """A compiled candidate, as a build job hands it to the runner (all picklable)."""
    func: LoweredFunc
    module: CModule
    library: BuildResult
    target: Target
    device_source: str = ""     # GPU targets: the kernels' source (CUDA, OpenCL C)


# ------------------------------------------------------------------ jobs (in worker processes)

def build_candidate(template, config: dict, shapes: dict, target: Target):
    """Lower, print and compile one configuration for ``target``:
    ``(status, Built | message, seconds)``."""
    start = time.perf_counter()
    try:
        func = lower(template.fn, template, config, shapes, target=target)
        module, library, device_source = compile_func(func, target)
        status, value = "ok", Built(func, module, library, target, device_source)
    except ScheduleError as exc:
        status, value = "invalid", short(str(exc))
    except TdslError as exc:                 # gcc's errors are BuildErrors
        status, value = "build_error", short(str(exc))
    except Exception as exc:                 # a compiler bug: recorded, the search goes on
        status, value = "build_error", short(f"internal error: {type(exc).__name__}: {exc}")
    return status, value, time.perf_counter() - start


_DATA: dict[str, tuple] = {}        # the runner's task data: directory -> (inputs, expected)


def run_candidate(built: Built, data_dir: str, rtol: float, atol: float,
                  min_seconds: float, repeats: int, flush_bytes: int = 0):
    """Warm up, check and time one built candidate: ``(status, seconds | None, message)``;
    with ``flush_bytes``, each timed call after that many bytes are written (`time_cold`)."""
    inputs, expected = load_task_data(data_dir)
    try:
        kernel = load_func(built.func, built.module, built.library, built.target,
                           built.device_source)
        result = kernel(*inputs)            # the warm-up, with every argument check
    except (CallError, MemoryError, TdslError) as exc:
        return "run_error", None, short(f"{type(exc).__name__}: {exc}")
    outputs = list(result) if isinstance(result, tuple) else [result]
    wrong = compare(outputs[0], expected, rtol, atol)
    if wrong:
        return "wrong", None, wrong
    # checked and marshalled once: a checked call costs more than a small kernel takes
    call, _ = kernel.bind(*inputs, out=result)
    if flush_bytes:
        return "ok", time_cold(call, min_seconds, repeats, flush_bytes), ""
    return "ok", time_calls(call, min_seconds, repeats), ""


_FLUSH: dict[int, np.ndarray] = {}


def time_cold(call, min_seconds: float, repeats: int, flush_bytes: int) -> float:
    """The median time of single calls, each after ``flush_bytes`` of other data are read
    and written, so the call finds its inputs and weights out of cache as a kernel does in
    a model, after other kernels ran (TVM's ``enable_cpu_cache_flush`` for graph tuning):
    at least ``repeats`` calls, more until the calls took ``min_seconds``, 1000 at most."""
    buf = _FLUSH.setdefault(flush_bytes, np.zeros(max(flush_bytes // 8, 1)))
    times: list[float] = []
    gc.disable()
    try:
        while len(times) < repeats or sum(times) < min_seconds and len(times) < 1000:
            buf += 1.0
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return statistics.median(times)


def time_calls(call, min_seconds: float, repeats: int) -> float:
    """The median over ``repeats`` repeats of the time per call, a repeat making enough calls
    to last ``min_seconds / repeats``. The number is calibrated from one call up (those
    calls are more warm-up, alike for every candidate)."""
    target = min_seconds / max(repeats, 1)
    gc.disable()            # a collection inside a repeat is noise, not the kernel's time
    try:
        number = 1
        while (t := _timed(call, number)) < target:
            # aim a little past the target from the rate seen; at most 10x more per step
            number = max(number + 1, min(10 * number, math.ceil(1.2 * number * target /
                                                                max(t, 1e-9))))
        times = [_timed(call, number) / number for _ in range(repeats)]
    finally:
        gc.enable()
    return statistics.median(times)


def _timed(call, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        call()
    return time.perf_counter() - start


def compare(out, expected, rtol: float, atol: float) -> str:
    """Why ``out`` is not ``expected`` ("" when it matches). Integers and bools must be
    equal; floats within ``atol * scale + rtol * |expected|``, ``scale`` the mean magnitude
    of the reference (at least 1): a reduction's rounding error grows with its terms, not
    with each result, and a result near 0 by cancellation would fail a purely relative
    test. NaN matches NaN and an infinity itself; NaN where a number is expected is wrong."""
    out, expected = np.asarray(out), np.asarray(expected)
    if out.shape != expected.shape:
        return f"output shape {out.shape}, expected {expected.shape}"
    with np.errstate(invalid="ignore", over="ignore"):
        if not any(np.issubdtype(a.dtype, np.floating) for a in (out, expected)):
            bad = out != expected
        else:           # in the arrays' own precision: this runs for every candidate
            magnitude = np.abs(expected)
            finite = np.isfinite(magnitude)
            scale = max(1.0, float(np.mean(magnitude, where=finite, dtype=np.float64))
                        if finite.any() else 1.0)
            bad = ~(np.abs(out - expected) <= atol * scale + rtol * magnitude) | ~finite
            if bad.any():       # where not finite: NaN matches NaN, an infinity itself
                bad &= finite | ~((np.isnan(expected) & np.isnan(out)) | (out == expected))
        count = int(np.count_nonzero(bad))
        if not count:
            return ""
        err = np.abs(out.astype(np.float64) - expected.astype(np.float64))
    err = np.where(np.isnan(err), np.inf, err)
    at = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0))), out.shape)
    return (f"max error {float(err[at]):.3g} at {tuple(int(i) for i in at)}: got "
            f"{out[at].item():.7g}, expected {expected[at].item():.7g} ({count} of "
            f"{out.size} elements differ)")


def save_task_data(directory, inputs, expected) -> str:
    """Write the inputs and the expected first output as .npy files (once per directory)."""
    directory = Path(directory)
    if not (directory / "expected.npy").exists():
        directory.mkdir(parents=True, exist_ok=True)
        for i, a in enumerate(inputs):
            np.save(directory / f"input{i}.npy", np.asarray(a))
        np.save(directory / "expected.npy", np.asarray(expected))   # last: marks it complete
    return str(directory)


def load_task_data(directory: str):
    if directory not in _DATA:
        _DATA.clear()       # one task at a time: keep the memory of one
        d = Path(directory)
        inputs = [np.load(d / f"input{i}.npy") for i in range(len(list(d.glob("input*"))))]
        inputs = [a[()] if a.ndim == 0 else a for a in inputs]    # rank 0: numpy scalars
        _DATA[directory] = (inputs, np.load(d / "expected.npy"))
    return _DATA[directory]


def data_key(task, seed: int) -> str:
    key = json.dumps([task.workload.to_json(), seed], sort_keys=True, default=str)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


# The jobs a worker process runs (`workers.serve`), by name.
JOBS = {"build": build_candidate, "run": run_candidate}


# -------------------------------------------------------------------------- the measurer

FOLDER_PREFIX = "tdsl-measure-"


def sweep_stale_folders(root: str | None = None) -> None:
    """Remove the measurement folders of tuners that died without cleaning up (SIGKILL runs
    no finalizer): ``tdsl-measure-<pid>-*`` of ours whose process is gone."""
    root = Path(root or tempfile.gettempdir())
    for folder in root.glob(f"{FOLDER_PREFIX}*-*"):
        pid = folder.name[len(FOLDER_PREFIX):].split("-", 1)[0]
        try:
            if not pid.isdigit() or folder.is_symlink() or \
                    folder.stat().st_uid != os.getuid() or _alive(int(pid)):
                continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalMeasurer:
    """Builds in ``build_workers`` processes, times in one runner process, on this machine.

        with LocalMeasurer(timeout=10) as m:
            results = m.measure(task, [3, 17, 42])
    """

    def __init__(self, build_workers: int | None = None, timeout: float = 10.0,
                 build_timeout: float = 120.0, min_seconds: float = 0.2, repeats: int = 5,
                 rtol: float = 1e-3, atol: float = 1e-3, seed: int = 0,
                 flush_bytes: int = 0):
        self.build_workers = max(1, build_workers or os.cpu_count() or 1)
        self.flush_bytes = flush_bytes      # > 0: time each call with the caches flushed
        self.timeout, self.build_timeout = timeout, build_timeout
        self.min_seconds, self.repeats = min_seconds, repeats
        self.rtol, self.atol, self.seed = rtol, atol, seed
        sweep_stale_folders()
        self.tmp = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
        self._builders: list[Worker] = []
        self._runner: list[Worker] = []      # zero or one
        self._all: list[Worker] = []         # every live process, for clean-up at exit
        self._runs = 0
        self._finalizer = weakref.finalize(self, stop_all, self._all, self.tmp)

    def __enter__(self) -> "LocalMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._kill_all()        # idle workers hold nothing worth a graceful exit
        self._finalizer()

    def measure(self, task, indices: list[int]) -> list[MeasureResult]:
        """Build then time configurations ``indices`` of ``task``; results in that order."""
        configs = {i: task.space.config(i) for i in indices}
        directory = Path(self.tmp) / data_key(task, self.seed)
        if not (directory / "expected.npy").exists():
            inputs = task.inputs(self.seed)
            save_task_data(directory, inputs, task.reference(inputs))
        done = self.measure_configs(task.template, task.shapes, configs, str(directory),
                                    task.target)
        return [done[i] for i in indices]

    def measure_configs(self, template, shapes: dict, configs: dict[int, dict],
                        data_dir: str, target: Target | str = "c") -> dict[int, MeasureResult]:
        """`measure` on plain data (what a remote worker is sent): ``configs`` maps indices
        to configurations, ``data_dir`` is one `save_task_data` wrote."""
        target = as_target(target)
        try:
            builds = self._build_all(template, shapes, configs, target)
            facts = target.facts()
            return {i: replace(self._run(i, configs[i], builds[i], data_dir), facts=facts)
                    for i in configs}
        except BaseException:
            self._kill_all()    # KeyboardInterrupt (or a bug here): no process left behind
            raise

    def _build_all(self, template, shapes, configs: dict[int, dict],
                   target: Target) -> dict[int, tuple]:
        """Every build of the batch, in parallel, all done before any timing starts."""
        results: dict[int, tuple] = {}
        queue = deque()
        for i, config in configs.items():
            try:
                template.knob_values(config)      # a broken `require` needs no process
                queue.append(i)
            except ScheduleError as exc:
                results[i] = ("invalid", short(str(exc)), 0.0)
        self._start(self._builders, min(self.build_workers, len(queue)))
        busy: dict[Worker, tuple[int, float]] = {}      # -> (index, start)
        while queue or busy:
            for w in self._builders:
                if queue and w not in busy:
                    i = queue.popleft()
                    w.send("build", (template, configs[i], shapes, target))
                    busy[w] = (i, time.monotonic())
            first = min(start for _, start in busy.values())
            wait([w.conn for w in busy],
                 timeout=max(0.0, first + self.build_timeout - time.monotonic()))
            for w, (i, start) in list(busy.items()):
                elapsed = time.monotonic() - start
                if not w.conn.poll(0) and elapsed < self.build_timeout:
                    continue
                del busy[w]
                kind, reply = w.receive(0)
                if kind == "ok" and reply[0] == "ok":
                    results[i] = reply[1]
                    continue
                why = reply[1] if kind == "ok" else \
                    f"the build ran over {self.build_timeout:g} s" if kind == "timeout" else \
                    f"the build process died: {reply}"
                results[i] = ("build_error", why, elapsed)
                if kind != "ok":
                    self._replace(self._builders, w)
        return results

    def _run(self, index: int, config: dict, build: tuple, data_dir: str) -> MeasureResult:
        status, built, build_seconds = build
        if status != "ok":
            return MeasureResult(index, config, status, None, built, build_seconds,
                                 machine_fingerprint())
        self._start(self._runner, 1)
        runner = self._runner[0]
        runner.send("run", (built, data_dir, self.rtol, self.atol, self.min_seconds,
                            self.repeats, self.flush_bytes))
        kind, reply = runner.receive(self.timeout)     # the parent does nothing else
        if kind == "ok" and reply[0] == "ok":
            status, seconds, message = reply[1]
        elif kind == "ok":
            status, seconds, message = "run_error", None, reply[1]
        elif kind == "timeout":
            status, seconds, message = "timeout", None, f"ran over {self.timeout:g} s"
        else:
            status, seconds, message = "crash", None, reply
        self._runs += 1
        if kind != "ok" or self._runs % RUNNER_RECYCLE == 0:
            self._replace(self._runner, runner, start=False)   # restarted when next needed
        return MeasureResult(index, config, status, seconds, message, build_seconds,
                             machine_fingerprint())

    def _kill_all(self) -> None:
        stop_all(self._all)
        self._builders.clear()
        self._runner.clear()

    def _start(self, pool: list, n: int) -> None:
        """Have ``n`` live workers in ``pool``: new ones start together, then are awaited
        (so no start counts in a candidate's time limit)."""
        for w in [w for w in pool if not w.alive()]:
            self._replace(pool, w, start=False)
        fresh = [Worker() for _ in range(n - len(pool))]
        self._all.extend(fresh)
        pool.extend(fresh)
        for w in fresh:
            w.wait_ready()

    def _replace(self, pool: list, w: Worker, start: bool = True) -> None:
        w.kill()
        pool.remove(w)
        self._all.remove(w)
        if start:
            self._start(pool, len(pool) + 1)
