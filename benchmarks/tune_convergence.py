"""How fast the tuners converge: gbt (model-guided) against random search, like for like.

    python benchmarks/tune_convergence.py                       # matmul 1024 and conv2d 128x28x28
    python benchmarks/tune_convergence.py --trials 64 --seeds 2 --cases matmul
    python benchmarks/tune_convergence.py --transfer            # also gbt warmed by a 512 log
    python benchmarks/tune_convergence.py --plot curves.png     # matplotlib (tdsl[plot])

For each case and tuner, every seed tunes from an empty log with the same trial budget;
the table gives the best GFLOP/s found after every ``--every`` trials (mean over seeds, and
the range), then how many trials gbt needed to reach random search's final best, the tuned
speed beside numpy / PyTorch, and the tuner's own share of the time (model fit and search).
Machines here are shared and noisy: compare within one run.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tdsl.tuner.log import Workload
from tdsl.tuner.measure import LocalMeasurer
from tdsl.tuner.task import Task
from tdsl.tuner.transfer import history_from_logs
from tdsl.tuner.tune import Progress, plot_curves, tune

try:
    import torch
    torch.set_num_threads(2)
except ImportError:
    torch = None

CASES = {
    "matmul": (Workload.make("std", "matmul", {"M": 1024, "N": 1024, "K": 1024}),
               Workload.make("std", "matmul", {"M": 512, "N": 512, "K": 512})),
    "conv2d": (Workload.make("std", "conv2d", {"N": 1, "C": 128, "IH": 28, "IW": 28,
                                               "F": 128, "KH": 3, "KW": 3}, {"padding": 1}),
               Workload.make("std", "conv2d", {"N": 1, "C": 64, "IH": 56, "IW": 56,
                                               "F": 64, "KH": 3, "KW": 3}, {"padding": 1})),
}


def median_time(fn, repeats=7) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def baselines(task: Task) -> dict[str, float]:
    """GFLOP/s of numpy (matmul) and PyTorch where they implement the op."""
    x = task.inputs()
    out = {}
    if task.workload.op == "matmul":
        out["numpy"] = task.flops / median_time(lambda: x[0] @ x[1]) / 1e9
    if torch is not None:
        t = [torch.from_numpy(a) for a in x]
        if task.workload.op == "matmul":
            out["torch"] = task.flops / median_time(lambda: t[0] @ t[1]) / 1e9
        if task.workload.op == "conv2d":
            pad = task.attrs.get("padding", 0)
            out["torch"] = task.flops / median_time(
                lambda: torch.nn.functional.conv2d(t[0], t[1], padding=pad)) / 1e9
    return out


def run_case(name, args, measurer, tmp: Path):
    workload, source = CASES[name]
    task = Task(workload)
    print(f"\n## {workload}: {task.space.describe()}", flush=True)
    tuners = ["gbt", "random"]
    history = None
    if args.transfer:
        log = tmp / f"{name}-source.jsonl"
        print(f"transfer source: tuning {source} for {args.trials // 2} trials", flush=True)
        tune(Task(source), args.trials // 2, log, "gbt", measurer, compare_numpy=False)
        history = history_from_logs([log], exclude=workload)
        tuners.insert(1, "gbt+transfer")
    curves, results = {}, {}
    for tuner in tuners:
        for seed in range(args.seeds):
            log = tmp / f"{name}-{tuner}-{seed}.jsonl"
            result = tune(task, args.trials, log, tuner.split("+")[0], measurer,
                          args.batch, seed, history if "transfer" in tuner else None,
                          Progress(args.trials, quiet=not sys.stderr.isatty()),
                          compare_numpy=False)
            curves.setdefault(tuner, []).append(result.curve)
            results.setdefault(tuner, []).append(result)
            print(f"{tuner} seed {seed}: best {result.best_gflops:.1f} GFLOP/s "
                  f"{result.best_config}; search+model "
                  f"{100 * result.search_seconds / result.total_seconds:.0f}% of "
                  f"{result.total_seconds:.0f} s", flush=True)
    report(name, task, curves, results, args)
    return curves


def report(name, task, curves, results, args):
    tuners = list(curves)
    print(f"\nbest GFLOP/s after N trials (mean over {args.seeds} seeds, [min-max])")
    print("trials  " + "".join(f"{t:>24}" for t in tuners))
    for n in range(args.every, args.trials + 1, args.every):
        cells = []
        for t in tuners:
            at = [c[min(n, len(c)) - 1] for c in curves[t]]
            cells.append(f"{np.mean(at):8.1f} [{min(at):6.1f}-{max(at):6.1f}]")
        print(f"{n:6d}  " + "".join(f"{c:>24}" for c in cells))
    target = np.mean([c[-1] for c in curves["random"]])
    for t in tuners:
        if t == "random":
            continue
        reach = [next((i + 1 for i, v in enumerate(c) if v >= target), None)
                 for c in curves[t]]
        shown = ", ".join("never" if r is None else str(r) for r in reach)
        print(f"{t} reaches random search's final best ({target:.1f}) after: {shown} trials"
              f" (budget {args.trials})")
    best = max(r.best_gflops for rs in results.values() for r in rs)
    default = next((r.default_gflops for rs in results.values() for r in rs
                    if r.default_gflops), None)
    line = f"best tuned {best:.1f} GFLOP/s"
    if default:
        line += f"; default schedule {default:.1f} ({best / default:.2f}x)"
    for k, g in baselines(task).items():
        line += f"; {k} {g:.1f} (tuned/{k} {best / g:.2f}x)"
    print(line)
    share = [r.search_seconds / r.total_seconds for rs in results.values() for r in rs
             if r.tuner == "gbt" and r.total_seconds]
    if share:
        print(f"gbt's own time (model fit + search): {100 * np.mean(share):.0f}% of tuning")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default="matmul,conv2d")
    p.add_argument("--trials", type=int, default=128)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--every", type=int, default=16)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--transfer", action="store_true")
    p.add_argument("--plot", metavar="PNG")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalMeasurer() as measurer:
        for name in args.cases.split(","):
            curves = run_case(name, args, measurer, Path(tmp))
            if args.plot:
                n = max(len(c) for cs in curves.values() for c in cs)
                mean = {t: list(np.mean([c + c[-1:] * (n - len(c)) for c in cs], axis=0))
                        for t, cs in curves.items()}
                path = Path(args.plot)
                out = path.with_name(f"{path.stem}-{name}{path.suffix}")
                plot_curves(mean, out, f"{name}: best GFLOP/s (mean of {args.seeds} seeds)")
                print(f"plot: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
