"""tdsl's compiled C beside numpy (and PyTorch and onnxruntime where installed), in one run,
with ratios.

    python benchmarks/bench_ops.py            # everything, with the hand schedules' defaults
    python benchmarks/bench_ops.py matmul     # cases whose name contains "matmul"
    python benchmarks/bench_ops.py --tune 64 --log tuned.jsonl conv    # tuned first (gbt)
    python benchmarks/bench_ops.py --log tuned.jsonl                   # apply an earlier log
    python benchmarks/bench_ops.py --target "c -march=x86-64-v3"       # another target
    python benchmarks/bench_ops.py --target opencl     # OpenCL (PoCL here) beside tdsl's C
    python benchmarks/bench_ops.py --target cuda       # CUDA beside PyTorch's cuBLAS/cuDNN

Machines here are shared and noisy: read the ratios, not the absolute times. tdsl, numpy,
PyTorch and onnxruntime (2 threads each) are timed in turn, three rounds; each figure is the best round's median of repeats
after a warm-up (interference only ever adds time, and taking turns gives each the same
chances); "ratio" is the baseline's time over tdsl's (> 1 means tdsl is faster).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings

import numpy as np

import tdsl
from tdsl.emit_c.peak import PeakGauge
from tdsl.emit_cuda import unavailable_reason as cuda_unavailable_reason
from tdsl.tuner.log import Workload
from tdsl.tuner.task import Task
from tdsl.tuner.tune import tune

try:
    import torch
    torch.set_num_threads(2)
except ImportError:          # PyTorch is optional: its column is left empty
    torch = None

try:
    import onnx
    import onnxruntime
except ImportError:          # so is onnxruntime (the `onnx` extra)
    onnxruntime = None

CHAIN = """
# gelu(x * a + b) in one pass
op gelu_affine(X: f32[N]; a: float = 1.5, b: float = 0.25) -> Y: f32[N] {
    Y[i] = 0.5 * (X[i] * a + b) * (1.0 + erf((X[i] * a + b) * 0.7071067811865476))
}
op dense_relu(X: f32[N, K], W: f32[M, K], b: f32[M]) -> Y: f32[N, M] {
    P: f32[N, M]
    P[n, m] = sum[k](X[n, k] * W[m, k])
    Y[n, m] = max(P[n, m] + b[m], 0.0)
}
# the textbook algorithm; W^T packed per block of output features by the schedule
schedule dense_relu for cpu {
    Wp = cache_read(W, global, P)
    wo, wi = pack(Wp.ax0, 2 * lanes)
    parallel(wo)
    io, jo, ii, ji = tile(Y.n, Y.m, min(registers * 3 // 8, l1 // 4096), 2 * lanes)
    compute_at(P, Y.jo)
    jv, jl = split(P.m, lanes)
    reorder(P.k, P.n, jv, jl)
    unroll(P.n)
    unroll(jv)
    vectorize(jl)
    cv, cl = split(ji, lanes)
    unroll(ii)
    unroll(cv)
    vectorize(cl)
    parallel(io)
}
"""


ROUNDS = 3


def timeit(fn, min_time=0.3, repeats=7) -> float:
    # the previous library's threads spin-wait for a while after its last call (OpenBLAS's
    # and OpenMP's do), taking cores from whoever runs next: let them go idle first
    time.sleep(0.25)
    fn()                                   # warm-up: page faults, lazy loading, caches
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    inner = max(1, int(min_time / repeats / once))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def rand(*shape):
    return np.random.default_rng(0).standard_normal(shape, dtype=np.float32)


def _erf(x):
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float32)


def cases(target):
    std = tdsl.stdlib
    extra = tdsl.loads(CHAIN, "bench.tdsl")
    for n in (512, 1024, 2048):
        a, b = rand(n, n), rand(n, n)
        yield (f"matmul {n}", 2 * n ** 3, std["matmul"], (a, b), {},
               lambda a=a, b=b: a @ b,
               (lambda ta=_t(a), tb=_t(b): ta @ tb) if torch else None)
    n = 1024
    x, w, bias = rand(n, n), rand(n, n), rand(n)
    yield ("dense+bias+relu 1024", 2 * n ** 3, extra["dense_relu"], (x, w, bias), {},
           lambda: np.maximum(x @ w.T + bias, 0),
           (lambda tx=_t(x), tw=_t(w), tb=_t(bias): torch.relu(torch.addmm(tb, tx, tw.T)))
           if torch else None)
    yield ("dense 1024 (std)", 2 * n ** 3, std["dense"], (x, w, bias), {},
           lambda: x @ w.T + bias,
           (lambda tx=_t(x), tw=_t(w), tb=_t(bias): torch.addmm(tb, tx, tw.T))
           if torch else None)
    for c, hw in ((64, 56), (128, 28), (256, 14)):
        x, w = rand(1, c, hw, hw), rand(c, c, 3, 3)
        yield (f"conv2d {c}x{hw}x{hw}->{c}", 2 * c * c * 9 * hw * hw, std["conv2d"], (x, w),
               {"padding": 1}, None,
               (lambda tx=_t(x), tw=_t(w): torch.nn.functional.conv2d(tx, tw, padding=1))
               if torch else None)
    # the same layers as the graph runs them: blocked activations, Winograd's F(2x2, 3x3) on
    # weights transformed at build time (its rate: the direct sum's flops over its time);
    # 512 x 7 x 7 is ResNet-50's last stage, the smallest size the graph gives Winograd
    lanes = target.lanes
    for c, hw in ((64, 56), (128, 28), (256, 14), (512, 7)):
        x, w = rand(1, c, hw, hw), rand(c, c, 3, 3)
        xb = std["to_nchwc"].reference(x, block=lanes)
        u = std["winograd_weights"].reference(w, in_block=lanes, out_block=lanes)
        yield (f"winograd {c}x{hw}x{hw} NCHW{lanes}c", 2 * c * c * 9 * hw * hw,
               std["conv2d_winograd_nchwc"], (xb, u), {}, None,
               (lambda tx=_t(x), tw=_t(w): torch.nn.functional.conv2d(tx, tw, padding=1))
               if torch else None)
    x, w = rand(1, 256, 28, 28), rand(256, 1, 3, 3)
    yield ("depthwise 256x28x28", 2 * 256 * 9 * 28 * 28, std["depthwise_conv2d"], (x, w),
           {"padding": 1}, None,
           (lambda tx=_t(x), tw=_t(w): torch.nn.functional.conv2d(tx, tw, padding=1,
                                                                    groups=256))
           if torch else None)
    x = rand(4096, 1024)
    yield ("softmax 4096x1024", None, std["softmax"], (x,), {},
           lambda: _np_softmax(x), (lambda tx=_t(x): torch.softmax(tx, 1)) if torch else None)
    g, bb = rand(1024), rand(1024)
    yield ("layer_norm 4096x1024", None, std["layer_norm"], (x, g, bb), {},
           lambda: _np_layer_norm(x, g, bb),
           (lambda tx=_t(x), tg=_t(g), tb=_t(bb):
            torch.nn.functional.layer_norm(tx, (1024,), tg, tb)) if torch else None)
    x = rand(1 << 24)
    yield ("gelu(x*a+b) 16M (GB/s)", 8 * (1 << 24), extra["gelu_affine"], (x,), {},
           lambda: _np_gelu_affine(x),
           (lambda tx=_t(x): torch.nn.functional.gelu(tx * 1.5 + 0.25)) if torch else None)


def _t(a):
    return torch.from_numpy(a) if torch else None


# onnxruntime: the same computation as one ONNX node (or two), the tensors as graph inputs
ORT_NODES = {
    "matmul": lambda: [("MatMul", ["x0", "x1"], {})],
    "dense+bias+relu": lambda: [("Gemm", ["x0", "x1", "x2"], {"transB": 1}),
                                ("Relu", ["t"], {})],
    "dense": lambda: [("Gemm", ["x0", "x1", "x2"], {"transB": 1})],
    "conv2d": lambda: [("Conv", ["x0", "x1"], {"pads": [1, 1, 1, 1]})],
    "depthwise": lambda: [("Conv", ["x0", "x1"], {"pads": [1, 1, 1, 1], "group": 256})],
    "softmax": lambda: [("Softmax", ["x0"], {"axis": 1})],
    "layer_norm": lambda: [("LayerNormalization", ["x0", "x1", "x2"], {"axis": 1})],
}


def ort_fn(name, arrays):
    """An onnxruntime session computing case ``name`` on ``arrays`` (None when onnxruntime
    is not installed or the case has no ONNX form)."""
    key = name.split(" ")[0]
    if onnxruntime is None or key not in ORT_NODES:
        return None
    from onnx import TensorProto, helper
    nodes, prev = [], None
    for k, (op, ins, attrs) in enumerate(ORT_NODES[key]()):
        ins = [prev if i == "t" else i for i in ins]
        prev = f"y{k}"
        nodes.append(helper.make_node(op, ins, [prev], **attrs))
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, a.shape)
              for i, a in enumerate(arrays)]
    graph = helper.make_graph(nodes, key, inputs,
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 2, 1, 3
    sess = onnxruntime.InferenceSession(model.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])
    feed = {f"x{i}": a for i, a in enumerate(arrays)}
    return lambda: sess.run(None, feed)


def _np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _np_layer_norm(x, g, b):
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def _np_gelu_affine(x):
    y = x * np.float32(1.5) + np.float32(0.25)
    # numpy has no erf: the usual numpy user reaches for the tanh form, one ufunc pass each
    return 0.5 * y * (1 + np.tanh(0.7978845608 * (y + 0.044715 * y * y * y)))


def tune_case(op, shapes, attrs, trials, log, target):
    """Tune a standard-library op at these sizes (its records go to ``log``)."""
    task = Task(Workload.make("std", op.name, shapes, attrs, str(target)))
    result = tune(task, trials, log, "gbt", compare_numpy=False)
    print(f"  tuned {task.workload} ({len(task.space)} configurations): "
          f"{result.trials} trials, best {result.best_config}", file=sys.stderr, flush=True)


def main(argv):
    p = argparse.ArgumentParser(description="tdsl beside numpy and PyTorch")
    p.add_argument("filters", nargs="*", help="only cases whose name contains one of these")
    p.add_argument("--log", help="build with the best configurations of this tuning log")
    p.add_argument("--tune", type=int, metavar="TRIALS",
                   help="first tune each standard-library case for TRIALS trials into --log")
    p.add_argument("--target", default="c", help="what to build for (default: c, this "
                   "machine), e.g. 'c -march=x86-64-v3'")
    args = p.parse_args(argv)
    if args.tune and not args.log:
        p.error("--tune needs --log")
    target = tdsl.Target(args.target)
    if target.is_gpu:
        return gpu_main(args, target)
    if target.unrunnable_reason():
        p.error(target.unrunnable_reason())
    peak = PeakGauge(target)        # re-measured, and said so, if a kernel beats it
    print(f"target: {target}: {target.lanes} lanes, {target.registers} registers; "
          f"fp32 FMA peak measured now {peak.peak.describe()} (formula: "
          f"{target.peak_gflops():.0f}; `tdsl target --measure`)")
    print(f"{'case':28} {'tdsl ms':>9} {'numpy ms':>9} {'torch ms':>9} {'ort ms':>9} "
          f"{'vs numpy':>9} {'vs torch':>9} {'vs ort':>9} {'tdsl rate':>12}")
    for name, work, op, arrays, attrs, np_fn, torch_fn in cases(target):
        if args.filters and not any(f in name for f in args.filters):
            continue
        # specialised to the sizes, as an ahead-of-time compiler for a fixed workload is
        shapes = op.sizes_of(*arrays, **attrs)
        std = op.module.name == "std"
        if args.tune and std and op.schedule(target=target, shapes=shapes, **attrs).knobs:
            tune_case(op, shapes, attrs, args.tune, args.log, target)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # no record: the defaults, as without a log
            kernel = op.build(target=target, shapes=shapes,
                              tuning_log=args.log if std else None, **attrs)
        out = kernel(*arrays)
        ref = op.reference(*arrays, **attrs) if arrays[0].size <= (1 << 22) else None
        if ref is not None:
            np.testing.assert_allclose(out, ref, rtol=2e-3, atol=2e-3)
        fns = [lambda: kernel(*arrays), np_fn, torch_fn, ort_fn(name, arrays)]
        best = [math.inf if f else None for f in fns]
        for _ in range(ROUNDS):
            best = [min(b, timeit(f)) if f else None for b, f in zip(best, fns)]
        t, tn, tt, to = best
        rate = ""
        if work and "GB/s" in name:
            rate = f"{work / t / 1e9:.1f} GB/s"
        elif work:
            rate = f"{work / t / 1e9:.1f} GFLOP/s"
            if name.startswith("matmul"):
                rate += f" ({peak.percent(work / t / 1e9)})"
        print(f"{name:28} {t * 1e3:9.3f} {_ms(tn)} {_ms(tt)} {_ms(to)} {_ratio(tn, t)} "
              f"{_ratio(tt, t)} {_ratio(to, t)} {rate:>12}", flush=True)


# ---------------------------------------------------------------------------- GPU targets

def gpu_cases(target):
    """(name, flops, op, arrays, attrs, torch function or None). On OpenCL (PoCL on a CPU
    here) sizes small enough for a CPU; on CUDA matmul 4096 and ResNet-18's 3x3 convs."""
    std = tdsl.stdlib
    sizes = (256, 512) if target.kind == "opencl" else (1024, 4096)
    for n in sizes:
        yield f"matmul {n}", 2 * n ** 3, std["matmul"], (rand(n, n), rand(n, n)), {}, \
            lambda a, b: a @ b
    convs = ((64, 56),) if target.kind == "opencl" else ((64, 56), (128, 28), (256, 14),
                                                          (512, 7))
    for c, hw in convs:
        yield (f"conv2d {c}x{hw}x{hw}->{c}", 2 * c * c * 9 * hw * hw, std["conv2d"],
               (rand(1, c, hw, hw), rand(c, c, 3, 3)), {"padding": 1},
               lambda x, w: torch.nn.functional.conv2d(x, w, padding=1))
    # the rest of the standard library's GPU schedules, at one ResNet/MobileNet-like size
    # each (names without "conv2d" or "matmul": scripts/gpu_check.sh filters on those)
    F = torch.nn.functional if torch is not None else None
    c, hw = (32, 56) if target.kind == "opencl" else (256, 56)
    yield (f"depthwise {c}x{hw}x{hw} 3x3", 2 * c * 9 * hw * hw, std["depthwise_conv2d"],
           (rand(1, c, hw, hw), rand(c, 1, 3, 3)), {"padding": 1},
           lambda x, w: F.conv2d(x, w, padding=1, groups=w.shape[0]))
    out = (hw + 2 - 3) // 2 + 1
    yield (f"max_pool {c}x{hw}x{hw} 3/2", c * 9 * out * out, std["max_pool2d"],
           (rand(1, c, hw, hw),), {"kernel": 3, "stride": 2, "padding": 1},
           lambda x: F.max_pool2d(x, 3, 2, 1))
    yield (f"avg_pool {c}x{hw}x{hw} 3/2", c * 9 * out * out, std["avg_pool2d"],
           (rand(1, c, hw, hw),), {"kernel": 3, "stride": 2, "padding": 1},
           lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False))
    n = 8 if target.kind == "opencl" else 64
    yield (f"global_pool {n}x512x7x7", n * 512 * 49, std["global_avg_pool2d"],
           (rand(n, 512, 7, 7),), {}, lambda x: x.mean(dim=(2, 3)))
    rows, d = (64, 1024) if target.kind == "opencl" else (4096, 4096)
    yield (f"softmax {rows}x{d}", 5 * rows * d, std["softmax"], (rand(rows, d),), {},
           lambda x: torch.softmax(x, -1))
    yield (f"layer_norm {rows}x{d}", 8 * rows * d, std["layer_norm"],
           (rand(rows, d), rand(d), rand(d)), {},
           lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b))


def _torch_cuda_seconds(fn, arrays) -> float | None:
    """cuBLAS/cuDNN through PyTorch, data on the GPU, timed with CUDA events."""
    if torch is None or not torch.cuda.is_available():
        return None
    dev = [torch.from_numpy(a).cuda() for a in arrays]
    torch.backends.cuda.matmul.allow_tf32 = False      # fp32 against fp32
    torch.backends.cudnn.allow_tf32 = False
    fn(*dev)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        fn(*dev)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def gpu_main(args, target) -> int:
    """Kernel times with the data on the device (no copies): tdsl's GPU kernels beside
    tdsl's own C build on this CPU (OpenCL: what the OpenCL path costs when the device is
    the CPU, PoCL) and beside PyTorch on the GPU (CUDA: cuBLAS, cuDNN), ratios > 1 meaning
    tdsl's GPU build is faster."""
    host = tdsl.Target("c")
    print(f"target: {target} (warp {target.warp}, {target.max_threads} threads, "
          f"{target.shared_bytes // 1024} KiB shared per block)")
    print(f"{'case':28} {target.kind + ' ms':>10} {'C ms':>9} {'torch ms':>9} "
          f"{'C/' + target.kind:>9} {'torch/tdsl':>10} {'tdsl rate':>14}")
    for name, work, op, arrays, attrs, torch_fn in gpu_cases(target):
        if args.filters and not any(f in name for f in args.filters):
            continue
        shapes = op.sizes_of(*arrays, **attrs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kernel = op.build(target=target, shapes=shapes, tuning_log=args.log, **attrs)
        if target.kind == "cuda" and cuda_unavailable_reason() is not None:
            print(f"{name:28} built; not run: {cuda_unavailable_reason()}", flush=True)
            continue
        out = kernel(*arrays)                       # checked once, with the copies
        np.testing.assert_allclose(out, op.reference(*arrays, **attrs), rtol=2e-3, atol=2e-3)
        t = min(kernel.device_seconds(*arrays, reps=3 if target.kind == "opencl" else 20)
                for _ in range(ROUNDS))
        tc = None
        if target.kind == "opencl":                  # the same op built as C for this CPU
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ckernel = op.build(target=host, shapes=shapes, **attrs)
            tc = min(timeit(lambda: ckernel(*arrays)) for _ in range(ROUNDS))
        tt = _torch_cuda_seconds(torch_fn, arrays) if target.kind == "cuda" else None
        print(f"{name:28} {t * 1e3:10.3f} {_ms(tc)} {_ms(tt)} {_ratio(tc, t)} "
              f"{_ratio(tt, t):>10} {work / t / 1e9:9.1f} GFLOP/s", flush=True)
    return 0


def _ms(t):
    return f"{t * 1e3:9.3f}" if t else f"{'-':>9}"


def _ratio(base, t):
    return f"{base / t:9.2f}" if base else f"{'-':>9}"


if __name__ == "__main__":
    main(sys.argv[1:])
