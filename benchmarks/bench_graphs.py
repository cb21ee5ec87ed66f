"""Whole models: tdsl fused (and memory-planned) beside the same graph unfused, and beside
onnxruntime and PyTorch where installed, in one run, with ratios.

    python benchmarks/bench_graphs.py              # small CNN and the ResNet-18-style stack
    python benchmarks/bench_graphs.py --resnet50   # and ResNet-50 at 1x3x224x224
    python benchmarks/bench_graphs.py --threads 1  # one thread for tdsl and onnxruntime
    python benchmarks/bench_graphs.py --imported   # and the models exported from PyTorch
    python benchmarks/bench_graphs.py --all --no-variants   # issue 26's models table only
    python benchmarks/bench_graphs.py --call-path --no-variants   # a call's cost over its kernels

The models table (``--mobilenetv2``, ``--bert``, ``--int8``, ``--int8-resnet50``, ``--resnet50`` with
``--no-variants``; ``--all`` is the four) times tdsl's default build, tdsl tuned (with
``--tuning-log LOG``: each model built with that log, e.g. `tdsl tune --graph`'s at 64
trials per kernel; "-" without one), onnxruntime and PyTorch (eager: BERT's layer as
torch.nn.TransformerEncoderLayer with the same weights, a CNN op by op with
torch.nn.functional; none for the int8 block) in turn, with "x ort" = onnxruntime ms / tdsl
ms (> 1: tdsl is faster), "x torch" likewise, each output's largest difference from
onnxruntime's, and the issue's goals: ResNet-50 >= 1.3x onnxruntime, MobileNetV2 >= 1.5x,
the BERT-base layer >= 1.2x, the int8 ResNet block (onnxruntime's quantize_static, QDQ:
uint8 activations, int8 per-channel weights; onnxruntime runs it as QLinearConv) >= 2x its
f32 form and >= 1x onnxruntime's.

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

``--profile`` prints the default build's `GraphModule.profile` (`tdsl.graph_profile`): each
fused kernel timed alone, in the model's order (each the best of several passes over the
whole graph, so its inputs and weights are as cold as in a call of the model), its time,
share, GFLOP/s and % of peak (convolutions and dense layers, counted as the direct sum: a
Winograd kernel's figure is what the direct sum would need) or GB/s, and a total per
anchor op; against the measured FMA peak, or the formula's at ``--ghz``. Its time "at the
peak" (each f32 convolution and dense layer at 100%, Winograd's products alone) gives each
goal's line the most these kernels could reach against onnxruntime on this machine.
``--target`` builds for another target than the host's (an AVX2 build,
``-march=x86-64-v3``, runs on an AVX-512 host too; onnxruntime still picks its own kernels
for the host, so compare such a build with itself, not with onnxruntime).
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


def profile(name, module, x, ghz=None, passes=20):
    """Each fused kernel's time, share and rate (`GraphModule.profile`): against the
    formula's FMA peak at ``ghz`` if given, else the measured one."""
    print(f"\n{name}:")
    p = module.profile(x, passes=passes, peak="formula" if ghz else "measured", ghz=ghz)
    print(p)
    return p


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
        text, params = convert_model(model, "net", target=args.target)
        shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
        yield name, tdsl.loads(text)["net"], params, shape, model


# ------------------------------------------------------------------ issue 26's models table

# and the int8 block >= 2x its f32 form (printed below)
GOALS = {"ResNet-50 1x3x224x224": ("x ort", 1.3), "MobileNetV2": ("x ort", 1.5),
         "BERT-base": ("x ort", 1.2), "int8 block": ("x ort", 1.0)}


def model_cases(args):
    """(name, ONNX model) of the models table: ResNet-50, MobileNetV2, a BERT-base encoder
    layer, the ResNet basic block in f32 and int8 (QDQ); as the flags ask."""
    import onnx_models
    if args.resnet50:
        yield "ResNet-50 1x3x224x224", onnx_models.resnet50()
    if args.mobilenetv2:
        yield "MobileNetV2 1x3x224x224", onnx_models.mobilenetv2()
    if args.bert:
        yield f"BERT-base layer 1x{args.seq}x768", onnx_models.bert_base_layer(seq=args.seq)
    if args.int8:
        f32, q = onnx_models.resnet_block_int8()
        yield "ResNet block f32 1x64x56x56", f32
        yield "int8 block (QDQ) 1x64x56x56", q
    if args.int8_resnet50:
        yield "ResNet-50 int8 (QDQ) 1x3x224x224", onnx_models.quantize_qdq(
            onnx_models.resnet50())


def torch_runner(model, x):
    """PyTorch (eager, inference mode) running ``model``: BERT's layer as
    torch.nn.TransformerEncoderLayer holding its weights (PyTorch's fused fast path), a CNN
    op by op with torch.nn.functional (what an nn.Module of Conv2d, BatchNorm2d and ReLU6
    in eval mode runs: no batch norm folded). None where PyTorch is not installed or the
    model has ops this does not map (the int8 block: PyTorch's quantized CNNs need their
    own model)."""
    try:
        import torch
    except ImportError:
        return None
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    from onnx import helper, numpy_helper
    w = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy())
         for i in model.graph.initializer}
    xt = torch.from_numpy(x)
    ops = {n.op_type for n in model.graph.node}
    if "LayerNormalization" in ops:                    # onnx_models.bert_base_layer
        d, ffn = w["q_w"].shape[0], w["f1_w"].shape[1]
        heads = int(w["heads_shape"][2])
        layer = torch.nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0,
                                                 activation="gelu", layer_norm_eps=1e-12,
                                                 batch_first=True).eval()
        with torch.no_grad():
            layer.self_attn.in_proj_weight.copy_(torch.cat([w["q_w"].T, w["k_w"].T,
                                                            w["v_w"].T]))
            layer.self_attn.in_proj_bias.copy_(torch.cat([w["q_b"], w["k_b"], w["v_b"]]))
            layer.self_attn.out_proj.weight.copy_(w["o_w"].T)
            layer.self_attn.out_proj.bias.copy_(w["o_b"])
            layer.linear1.weight.copy_(w["f1_w"].T)
            layer.linear1.bias.copy_(w["f1_b"])
            layer.linear2.weight.copy_(w["f2_w"].T)
            layer.linear2.bias.copy_(w["f2_b"])
            for n in (1, 2):
                getattr(layer, f"norm{n}").weight.copy_(w[f"ln{n}_g"])
                getattr(layer, f"norm{n}").bias.copy_(w[f"ln{n}_be"])

        def run_bert():
            with torch.inference_mode():
                return layer(xt).numpy()
        return run_bert
    F = torch.nn.functional
    if not ops <= {"Conv", "BatchNormalization", "Relu", "Clip", "Add", "MaxPool",
                   "GlobalAveragePool", "Flatten", "Gemm", "Identity"}:
        return None
    nodes = [(n.op_type, list(n.input), n.output[0],
              {a.name: helper.get_attribute_value(a) for a in n.attribute})
             for n in model.graph.node]
    first, last = model.graph.input[0].name, model.graph.output[0].name

    def run_cnn():
        with torch.inference_mode():
            v = {first: xt, **w}
            for op, ins, out, a in nodes:
                i = [v[n] for n in ins if n]
                if op == "Conv":
                    p = a.get("pads", [0, 0, 0, 0])
                    y = F.conv2d(i[0], i[1], i[2] if len(i) > 2 else None,
                                 a.get("strides", 1), (p[0], p[1]), 1, a.get("group", 1))
                elif op == "BatchNormalization":
                    y = F.batch_norm(i[0], i[3], i[4], i[1], i[2], False, 0.0,
                                     a.get("epsilon", 1e-5))
                elif op == "Relu":
                    y = F.relu(i[0])
                elif op == "Clip":
                    y = F.hardtanh(i[0], float(i[1]), float(i[2]))
                elif op == "Add":
                    y = i[0] + i[1]
                elif op == "MaxPool":
                    y = F.max_pool2d(i[0], a["kernel_shape"], a["strides"], a["pads"][:2])
                elif op == "GlobalAveragePool":
                    y = F.adaptive_avg_pool2d(i[0], 1)
                elif op == "Flatten":
                    y = i[0].flatten(1)
                elif op == "Gemm":
                    y = F.linear(i[0], i[1], i[2])
                else:
                    y = i[0]
                v[out] = y
            return v[last].numpy()
    return run_cnn


def models_table(args):
    """tdsl's default build, tdsl tuned (``--tuning-log``), onnxruntime and PyTorch per model,
    timed in turn, with the ratios and each output's largest difference from onnxruntime's."""
    from tdsl.onnx_import import convert_model
    t = args.target
    print(f"\n{'model':<30}{'tdsl ms':>9}{'tuned':>9}{'ort':>9}{'torch':>9}{'x ort':>7}"
          f"{'tuned x':>8}{'x torch':>8}{'|d| ort':>10}{'|d| torch':>10}{'kernels':>8}")
    ms_of, goals, at_peak = {}, [], {}      # at_peak: name -> ms at the peak (--profile)
    for name, model in model_cases(args):
        text, params = convert_model(model, "net", target=t)
        g = tdsl.loads(text)["net"]
        shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        built = g.build(t, params=params)
        got = built(x)
        runs = {"tdsl": timer(lambda: built(x))}
        if args.tuning_log:            # a log of `tdsl tune --graph` (64 trials per kernel)
            tuned = g.build(t, params=params, tuning_log=args.tuning_log)
            tuned(x)
            runs["tuned"] = timer(lambda: tuned(x))
        ort, want = ort_runner(model, x), None
        if ort is not None:
            want = ort()[0]
            runs["ort"] = timer(ort)
        th = torch_runner(model, x) if not args.no_torch else None
        d_torch = None
        if th is not None:
            d_torch = float(np.abs(th() - (want if want is not None else got)).max())
            runs["torch"] = timer(th)
        best = {k: float("inf") for k in runs}
        for _ in range(args.rounds):
            for k, run in runs.items():
                # the previous library's threads spin-wait a while after its last call
                # (OpenMP's, onnxruntime's, PyTorch's), taking the cores: let them go idle
                time.sleep(0.2)
                best[k] = min(best[k], run())
        ms = {k: v * 1e3 for k, v in best.items()}
        ms_of[name] = ms

        def col(k, w=9):
            return f"{ms[k]:{w}.2f}" if k in ms else f"{'-':>{w}}"

        def ratio(k, of="tdsl", w=7):
            return f"{ms[k] / ms[of]:{w}.2f}" if k in ms and of in ms else f"{'-':>{w}}"
        d_ort = f"{float(np.abs(got - want).max()):10.2e}" if want is not None else f"{'-':>10}"
        d_th = f"{d_torch:10.2e}" if d_torch is not None else f"{'-':>10}"
        kernels = len(built.compiled(x).functions)
        print(f"{name:<30}{col('tdsl')}{col('tuned')}{col('ort')}{col('torch')}{ratio('ort')}"
              f"{ratio('ort', 'tuned', 8)}{ratio('torch', 'tdsl', 8)}{d_ort}{d_th}{kernels:>8}",
              flush=True)
        prof = None
        if args.profile and not (name.startswith("ResNet-50") and not args.no_variants):
            prof = profile(name, built, x, args.ghz)
            at_peak[name] = prof.peak_seconds * 1e3
            print(flush=True)
        for key, (what, want_ratio) in GOALS.items():
            if name.startswith(key) and "ort" in ms:
                # with --profile: the most this build's kernels could give at the FMA peak
                bound = f"; at the peak <= {ms['ort'] / (prof.peak_seconds * 1e3):.2f}" \
                    if prof else ""
                goals.append(f"{key}: {what} {ms['ort'] / ms['tdsl']:.2f} "
                             f"(goal >= {want_ratio}{bound})")
    f32 = next((v for k, v in ms_of.items() if k.startswith("ResNet block f32")), None)
    q_name = next((k for k in ms_of if k.startswith("int8 block")), None)
    q = ms_of.get(q_name)
    if f32 and q:
        # with --profile: the int8 kernels at their dot product's peak, the f32 form as run
        bound = f"; int8 at the peak <= {f32['tdsl'] / at_peak[q_name]:.2f}" \
            if q_name in at_peak else ""
        line = (f"int8 block: tdsl f32 / int8 = {f32['tdsl'] / q['tdsl']:.2f} "
                f"(goal >= 2{bound})")
        if "ort" in f32 and "ort" in q:
            line += f"; onnxruntime f32 / int8 = {f32['ort'] / q['ort']:.2f}"
        goals.insert(0, line)
    if goals:
        print("goals (x ort = onnxruntime ms / tdsl ms, > 1 means tdsl is faster):")
        for line in goals:
            print("  " + line)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--resnet50", action="store_true")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--threads", type=int, help="threads for tdsl (OpenMP) and onnxruntime "
                   "alike (default: theirs); 1 gives steadier figures on a loaded machine")
    p.add_argument("--profile", action="store_true",
                   help="print each fused kernel's time in the default build")
    p.add_argument("--target", default="c", help="the tdsl target (default: the host)")
    p.add_argument("--ghz", type=float, help="the clock for --profile's %% of peak, by the "
                   "formula (default: the measured peak)")
    p.add_argument("--imported", action="store_true", help="then the models exported from "
                   "PyTorch (tests/models/*.onnx: BERT, GPT, ViT, the LSTM keyword spotter, "
                   "the GRU tagger, the audio CNN, DCGAN, U-Net, the 3-D conv block, the "
                   "quantized CNN), imported, beside onnxruntime (bench_onnx_models.py)")
    p.add_argument("--mobilenetv2", action="store_true", help="MobileNetV2 at 1x3x224x224 in "
                   "the models table (tdsl, tuned, onnxruntime, PyTorch)")
    p.add_argument("--bert", action="store_true", help="a BERT-base encoder layer (d 768, 12 "
                   "heads, FFN 3072) at 1 x --seq in the models table")
    p.add_argument("--seq", type=int, default=128, help="--bert's sequence length (128)")
    p.add_argument("--int8", action="store_true", help="a ResNet basic block (64 channels, "
                   "56x56) in f32 and int8 (onnxruntime's quantize_static, QDQ) in the models "
                   "table, with the int8 / f32 ratio")
    p.add_argument("--int8-resnet50", action="store_true", help="ResNet-50 quantized by "
                   "onnxruntime's quantize_static (QDQ) in the models table")
    p.add_argument("--all", action="store_true", help="--resnet50 --mobilenetv2 --bert --int8")
    p.add_argument("--no-variants", action="store_true", help="skip the first table (fused, "
                   "layout, Winograd and unfused variants); the models table only")
    p.add_argument("--no-torch", action="store_true", help="no PyTorch column")
    p.add_argument("--call-path", action="store_true", help="what a graph module's call "
                   "costs beyond its kernels (the MLP example, the small CNN; goal <= 2 us)")
    p.add_argument("--tuning-log", help="the models table's 'tuned' column: each model built "
                   "with this log of tuned kernels (`tdsl tune --graph`, 64 trials per kernel)")
    args = p.parse_args(argv)
    if args.all:
        args.resnet50 = args.mobilenetv2 = args.bert = args.int8 = True
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)     # read when libgomp loads
    print(f"threads: {os.environ.get('OMP_NUM_THREADS', 'default')}")
    if args.call_path:
        call_path_table()
    if not args.no_variants:
        variants_table(args)
    if args.mobilenetv2 or args.bert or args.int8 or args.int8_resnet50 or \
            (args.resnet50 and args.no_variants):
        models_table(args)
    if args.imported:
        import bench_onnx_models
        print(flush=True)
        return bench_onnx_models.main(["--no-conv", "--rounds", str(args.rounds)]
                                      + (["--profile"] if args.profile else []))
    return 0


def call_path_table(calls: int = 2000, rounds: int = 7):
    """A graph module's call beside its C entry point called alone (the kernels in order,
    bound to the last call's buffers), and a 16-value kernel's call beside its bound run
    (`Kernel.bind`), each the best of ``rounds`` x ``calls`` calls, rounds interleaved: the
    difference is what the call path costs (issue 26: <= 2 us for a graph module)."""
    print(f"{'call path':<28}{'call us':>9}{'kernels us':>11}{'overhead us':>12}")
    cases = []
    for path, shape in (("mlp.tdsl", (1, 784)), ("small_cnn.tdsl", (1, 3, 32, 32))):
        g = tdsl.load(ROOT / "examples" / "models" / path)[path.removesuffix(".tdsl")]
        module = g.build(params=g.random_params(shapes={"B": 1}))
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        module(x)
        # the C entry point, nothing of Python's call
        cases.append((g.name + " B=1", lambda m=module, x=x: m(x), module._last.run))
    kernel = tdsl.loads("op add_one(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] + 1.0 }")[
        "add_one"].build(shapes={"N": 16})
    x16 = np.ones(16, np.float32)
    kernel(x16)
    cases.append(("kernel, 16 values", lambda: kernel(x16), kernel.bind(x16)[0]))
    for name, call, kernels in cases:
        best = {"call": float("inf"), "kernels": float("inf")}
        for _ in range(rounds):
            for which, fn in (("call", call), ("kernels", kernels)):
                t = time.perf_counter()
                for _ in range(calls):
                    fn()
                best[which] = min(best[which], (time.perf_counter() - t) / calls * 1e6)
        print(f"{name:<28}{best['call']:9.2f}{best['kernels']:11.2f}"
              f"{best['call'] - best['kernels']:12.2f}", flush=True)


def variants_table(args):
    """Per model of `cases`: tdsl fused, NCHWc, direct, NCHW, unfused, as written, ort."""
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
            profile(name, builds[default], x, args.ghz)
            print(flush=True)


if __name__ == "__main__":
    sys.exit(main())
