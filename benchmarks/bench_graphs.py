"""Whole models: tdsl fused (and memory-planned) beside the same graph unfused, and beside
onnxruntime and PyTorch where installed, in one run, with ratios.

    python benchmarks/bench_graphs.py              # small CNN and the ResNet-18-style stack
    python benchmarks/bench_graphs.py --resnet50   # and ResNet-50 at 1x3x224x224
    python benchmarks/bench_graphs.py --threads 1  # one thread for tdsl and onnxruntime
    python benchmarks/bench_graphs.py --imported   # and the models exported from PyTorch

The ResNets are built with onnx's helper API (random weights; `tests/onnx_models.py`) and
imported with `tdsl import`'s converter, so they need the onnx package. Machines here are
shared and noisy: each figure is the best of several rounds, the variants timed in turn;
read the ratios ("x unfused" = unfused time / fused time, > 1 means fusion wins; "as
written" is one kernel per op with no constant folding or layout pass either, the graph
without its passes). "fused" and "unfused" take Graph.build's default layout; "NCHWc" and
"NCHW" are the fused graph with the blocked layout pass on and off ("x layout" = NCHW time /
NCHWc time, > 1 means the blocked layout wins); "direct" is NCHWc with the 3x3 convolutions
summed directly rather than by Winograd's F(2x2, 3x3) ("x wino" = direct / NCHWc).

    python benchmarks/bench_graphs.py --resnet50 --profile      # and where the time goes
    python benchmarks/bench_graphs.py --resnet50 --target "c -march=x86-64-v3"   # AVX2 code

``--profile`` times each fused kernel of the default build alone, in the model's order (each
the best of several passes over the whole graph, so its inputs and weights are as cold as in
a call of the model), and prints its time, share, GFLOP/s (convolutions and dense layers,
counted as the direct sum: a Winograd kernel's figure is what the direct sum would need) and
a total per anchor op. ``--target`` builds for another target than the host's (an AVX2
build, ``-march=x86-64-v3``, runs on an AVX-512 host too; onnxruntime still picks its own
kernels for the host, so compare such a build with itself, not with onnxruntime).
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
from tdsl.graph_api import BLOCKED_LAYOUT_DEFAULT
from tdsl.graph_profile import kernel_times

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


def kernel_flops(c, group) -> int:
    """The multiply-adds x 2 of a fused kernel's anchor, as the direct sum; 0 if not a
    convolution or dense layer."""
    node = c.ir.nodes[group.anchor]
    if not node.op.startswith(("conv2d", "depthwise_conv2d", "dense")):
        return 0
    out = np.prod(c.ir.shape_of(node.outputs[0], c.sizes))
    w = c.ir.shape_of(node.inputs[1], c.sizes)
    if node.op.startswith("conv2d_winograd"):          # U: [4, 4, CB, CI, FB, FI]
        return int(2 * out * w[2] * w[3] * 9)
    if node.op.startswith("depthwise"):                # [CB, KH, KW, CI] or [C, 1, KH, KW]
        return int(2 * out * (w[1] * w[2] if len(w) == 4 and w[1] != 1 else w[2] * w[3]))
    if node.op.startswith("conv2d_nchwc"):             # [FB, CB, KH, KW, CI, FI]
        return int(2 * out * w[1] * w[2] * w[3] * w[4])
    if node.op.startswith("conv2d"):                   # [F, C, KH, KW]
        return int(2 * out * w[1] * w[2] * w[3])
    x = c.ir.shape_of(node.inputs[0], c.sizes)         # dense: [M, K]
    return int(2 * out * x[-1])


def profile(name, module, x, target, ghz=None, passes=20):
    """Each fused kernel's time (`kernel_times`), share and rate against the FMA peak."""
    c, best = kernel_times(module, [x], passes)
    total = sum(best)
    peak = tdsl.Target(target).peak_gflops(ghz)
    print(f"\nprofile of {name} ({len(best)} kernels, {total * 1e3:.2f} ms summed; target "
          f"'{target}', FMA peak {peak:.0f} GFLOP/s at "
          f"{f'{ghz} GHz' if ghz else 'the reported clock (--ghz to give the real one)'})")
    print(f"  {'kernel':<6}{'ms':>8}{'share':>7}{'GFLOP/s':>9}{'%peak':>7}  ops -> output")
    by_op: dict[str, float] = {}
    for i, (g, f, t) in enumerate(zip(c.groups, c.functions, best)):
        anchor = c.ir.nodes[g.anchor]
        by_op[anchor.op] = by_op.get(anchor.op, 0.0) + t
        flops = kernel_flops(c, g)
        rate = f"{flops / t / 1e9:9.1f}{100 * flops / t / 1e9 / peak:6.0f}%" if flops else \
            f"{'-':>9}{'-':>7}"
        shape = "x".join(map(str, c.ir.shape_of(f.outputs[0], c.sizes)))
        attrs = ",".join(f"{k}={v}" for k, v in anchor.attrs)
        print(f"  k{i:<5}{t * 1e3:8.3f}{100 * t / total:6.1f}%{rate}  {'+'.join(f.ops)} -> "
              f"{shape}{' ' + attrs if attrs else ''}")
    print("  per anchor op:")
    for op, t in sorted(by_op.items(), key=lambda kv: -kv[1]):
        print(f"    {op:<28}{t * 1e3:8.3f} ms {100 * t / total:5.1f}%")


def cases(args):
    g = tdsl.load(ROOT / "examples" / "models" / "small_cnn.tdsl")["small_cnn"]
    yield "small CNN 1x3x32x32", g, g.random_params(), (1, 3, 32, 32), None
    # a batch of 8: activations of 1 MiB, past L1 and half of L2, where a pass over memory
    # that fusion saves costs more than the call it saves (at batch 1 they are 32-128 KiB)
    yield "small CNN 8x3x32x32", g, g.random_params(), (8, 3, 32, 32), None
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
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--threads", type=int, help="threads for tdsl (OpenMP) and onnxruntime "
                   "alike (default: theirs); 1 gives steadier figures on a loaded machine")
    p.add_argument("--profile", action="store_true",
                   help="print each fused kernel's time in the default build")
    p.add_argument("--target", default="c", help="the tdsl target (default: the host)")
    p.add_argument("--ghz", type=float, help="the clock for --profile's %% of peak (default: "
                   "the reported one, often the base clock under a hypervisor)")
    p.add_argument("--imported", action="store_true", help="then the models exported from "
                   "PyTorch (tests/models/*.onnx: BERT, GPT, ViT, the LSTM keyword spotter, "
                   "the GRU tagger, the audio CNN, DCGAN, U-Net, the 3-D conv block, the "
                   "quantized CNN), imported, beside onnxruntime (bench_onnx_models.py)")
    args = p.parse_args(argv)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)     # read when libgomp loads
    print(f"threads: {os.environ.get('OMP_NUM_THREADS', 'default')}")
    print(f"{'model':<28}{'fused ms':>9}{'NCHWc':>9}{'direct':>9}{'NCHW':>9}{'unfused':>9}"
          f"{'written':>9}{'ort':>9}{'x layout':>9}{'x wino':>8}{'x unfused':>10}{'x ort':>7}"
          f"{'kernels':>10}{'peak/naive':>11}")
    for name, g, params, shape, model in cases(args):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        t = args.target
        builds = {"NCHWc": g.build(t, params=params, layout=True),
                  "direct": g.build(t, params=params, layout=True, winograd=False),
                  "NCHW": g.build(t, params=params, layout=False),
                  "unfused": g.build(t, params=params, fuse=False),
                  "written": g.build(t, params=params, fuse=False, fold=False, layout=False)}
        ref = g.reference(x, params=params)
        for m in builds.values():
            np.testing.assert_allclose(m(x), ref, rtol=1e-3, atol=1e-3)
        runs = {k: timer(lambda m=m: m(x)) for k, m in builds.items()}
        ort = ort_runner(model, x) if model is not None else None
        if ort is not None:
            runs["ort"] = timer(ort)
        best = {k: float("inf") for k in runs}
        for _ in range(args.rounds):
            for k, run in runs.items():
                best[k] = min(best[k], run())
        default = "NCHWc" if BLOCKED_LAYOUT_DEFAULT else "NCHW"
        c = builds[default].compiled(x)
        ms = {k: v * 1e3 for k, v in best.items()}
        ms["fused"] = ms[default]
        ort_ms = f"{ms['ort']:9.2f}" if "ort" in ms else f"{'-':>9}"
        x_ort = f"{ms['ort'] / ms['fused']:7.2f}" if "ort" in ms else f"{'-':>7}"
        print(f"{name:<28}{ms['fused']:9.2f}{ms['NCHWc']:9.2f}{ms['direct']:9.2f}"
              f"{ms['NCHW']:9.2f}{ms['unfused']:9.2f}{ms['written']:9.2f}{ort_ms}"
              f"{ms['NCHW'] / ms['NCHWc']:9.2f}{ms['direct'] / ms['NCHWc']:8.2f}"
              f"{ms['unfused'] / ms['fused']:10.2f}{x_ort}"
              f"{len(c.functions):>5}/{len(g.ir.nodes):<4}"
              f"{c.plan.peak_bytes / max(c.plan.naive_bytes, 1):11.2f}", flush=True)
        if args.profile:
            profile(name, builds[default], x, t, args.ghz)
            print(flush=True)
    if args.imported:
        import bench_onnx_models
        print(flush=True)
        return bench_onnx_models.main(["--no-conv", "--rounds", str(args.rounds)]
                                      + (["--profile"] if args.profile else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
