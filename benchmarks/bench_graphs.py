"""Whole models: tdsl fused (and memory-planned) beside the same graph unfused, and beside
onnxruntime and PyTorch where installed, in one run, with ratios.

    python benchmarks/bench_graphs.py              # small CNN and the ResNet-18-style stack
    python benchmarks/bench_graphs.py --resnet50   # and ResNet-50 at 1x3x224x224
    python benchmarks/bench_graphs.py --threads 1  # one thread for tdsl and onnxruntime

The ResNets are built with onnx's helper API (random weights; `tests/onnx_models.py`) and
imported with `tdsl import`'s converter, so they need the onnx package. Machines here are
shared and noisy: each figure is the best of several rounds, the variants timed in turn;
read the ratios ("x unfused" = unfused time / fused time, > 1 means fusion wins; "as
written" is one kernel per op with no constant folding either, the graph without its passes).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import tdsl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def timer(fn, seconds=0.3):
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.05:
        fn()
        n += 1
    reps = max(3, int(n * seconds / 0.05))

    def run():
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)
    return run


def ort_runner(model, x):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if os.environ.get("OMP_NUM_THREADS"):
        so.intra_op_num_threads = int(os.environ["OMP_NUM_THREADS"])
        so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    name = model.graph.input[0].name
    return lambda: sess.run(None, {name: x})


def cases(args):
    g = tdsl.load(ROOT / "examples" / "models" / "small_cnn.tdsl")["small_cnn"]
    yield "small CNN 1x3x32x32", g, g.random_params(), (1, 3, 32, 32), None
    try:
        import onnx_models
        from tdsl.onnx_import import convert_model
    except ImportError:
        print("(onnx not installed: the ResNet rows are skipped)")
        return
    models = [("ResNet-18 stack 1x64x56x56", onnx_models.resnet18_stack())]
    if args.resnet50:
        models.append(("ResNet-50 1x3x224x224", onnx_models.resnet50()))
    for name, model in models:
        text, params = convert_model(model, "net")
        shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
        yield name, tdsl.loads(text)["net"], params, shape, model


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--resnet50", action="store_true")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, help="threads for tdsl (OpenMP) and onnxruntime "
                   "alike (default: theirs); 1 gives steadier figures on a loaded machine")
    args = p.parse_args(argv)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)     # read when libgomp loads
    print(f"threads: {os.environ.get('OMP_NUM_THREADS', 'default')}")
    print(f"{'model':<28}{'fused ms':>10}{'unfused':>10}{'as written':>11}{'ort':>10}"
          f"{'x unfused':>11}{'x written':>11}{'x ort':>8}{'kernels':>10}{'peak/naive':>12}")
    for name, g, params, shape, model in cases(args):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        fused = g.build(params=params)
        unfused = g.build(params=params, fuse=False)
        written = g.build(params=params, fuse=False, fold=False)
        ref = g.reference(x, params=params)
        for m in (fused, unfused, written):
            np.testing.assert_allclose(m(x), ref, rtol=1e-3, atol=1e-3)
        runs = {"fused": timer(lambda: fused(x)), "unfused": timer(lambda: unfused(x)),
                "written": timer(lambda: written(x))}
        ort = ort_runner(model, x) if model is not None else None
        if ort is not None:
            runs["ort"] = timer(ort)
        best = {k: float("inf") for k in runs}
        for _ in range(args.rounds):
            for k, run in runs.items():
                best[k] = min(best[k], run())
        c = fused.compiled(x)
        ms = {k: v * 1e3 for k, v in best.items()}
        ort_ms = f"{ms['ort']:10.2f}" if "ort" in ms else f"{'-':>10}"
        x_ort = f"{ms['ort'] / ms['fused']:8.2f}" if "ort" in ms else f"{'-':>8}"
        print(f"{name:<28}{ms['fused']:10.2f}{ms['unfused']:10.2f}{ms['written']:11.2f}{ort_ms}"
              f"{ms['unfused'] / ms['fused']:11.2f}{ms['written'] / ms['fused']:11.2f}{x_ort}"
              f"{len(c.functions):>5}/{len(g.ir.nodes):<4}"
              f"{c.plan.peak_bytes / max(c.plan.naive_bytes, 1):12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
