"""tdsl's compiled C beside numpy (and PyTorch where installed), in one run, with ratios.

    python benchmarks/bench_ops.py            # everything
    python benchmarks/bench_ops.py matmul     # cases whose name contains "matmul"

Machines here are shared and noisy: read the ratios, not the absolute times. Each figure is
the median of repeats after a warm-up; "ratio" is the baseline's time over tdsl's (> 1 means
tdsl is faster).
"""
from __future__ import annotations

import math
import statistics
import sys
import time

import numpy as np

import tdsl

try:
    import torch
    torch.set_num_threads(2)
except ImportError:          # PyTorch is optional: its column is left empty
    torch = None

CHAIN = """
# gelu(x * a + b) in one pass
op gelu_affine(X: f32[N]; a: float = 1.5, b: float = 0.25) -> Y: f32[N] {
    Y[i] = 0.5 * (X[i] * a + b) * (1.0 + erf((X[i] * a + b) * 0.7071067811865476))
}
op dense_relu(X: f32[N, K], W: f32[M, K], b: f32[M]) -> Y: f32[N, M] {
    Wt: f32[K, M]
    Wt[k, m] = W[m, k]
    P: f32[N, M]
    P[n, m] = sum[k](X[n, k] * Wt[k, m])
    Y[n, m] = max(P[n, m] + b[m], 0.0)
}
schedule dense_relu for cpu {
    io, jo, ii, ji = tile(Y.n, Y.m, 12, 32)
    compute_at(P, Y.jo)
    jv, jl = split(P.m, 16)
    reorder(P.k, P.n, jv, jl)
    unroll(P.n)
    unroll(jv)
    vectorize(jl)
    cv, cl = split(ji, 16)
    unroll(ii)
    unroll(cv)
    vectorize(cl)
    parallel(io)
    parallel(Wt.k)
}
"""


def timeit(fn, min_time=0.3, repeats=7) -> float:
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


def cases():
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
    for c, hw in ((64, 56), (128, 28), (256, 14)):
        x, w = rand(1, c, hw, hw), rand(c, c, 3, 3)
        yield (f"conv2d {c}x{hw}x{hw}->{c}", 2 * c * c * 9 * hw * hw, std["conv2d"], (x, w),
               {"padding": 1}, None,
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


def main(filters):
    print(f"{'case':28} {'tdsl ms':>9} {'numpy ms':>9} {'torch ms':>9} "
          f"{'vs numpy':>9} {'vs torch':>9} {'tdsl rate':>12}")
    for name, work, op, args, attrs, np_fn, torch_fn in cases():
        if filters and not any(f in name for f in filters):
            continue
        # specialised to the sizes, as an ahead-of-time compiler for a fixed workload is
        shapes = op.sizes_of(*args, **attrs)
        kernel = op.build(target="c", shapes=shapes, **attrs)
        out = kernel(*args)
        ref = op.reference(*args, **attrs) if args[0].size <= (1 << 22) else None
        if ref is not None:
            np.testing.assert_allclose(out, ref, rtol=2e-3, atol=2e-3)
        t = timeit(lambda: kernel(*args))
        tn = timeit(np_fn) if np_fn else None
        tt = timeit(torch_fn) if torch_fn else None
        rate = ""
        if work and "GB/s" in name:
            rate = f"{work / t / 1e9:.1f} GB/s"
        elif work:
            rate = f"{work / t / 1e9:.1f} GFLOP/s"
        print(f"{name:28} {t * 1e3:9.3f} {_ms(tn)} {_ms(tt)} {_ratio(tn, t)} {_ratio(tt, t)} "
              f"{rate:>12}", flush=True)


def _ms(t):
    return f"{t * 1e3:9.3f}" if t else f"{'-':>9}"


def _ratio(base, t):
    return f"{base / t:9.2f}" if base else f"{'-':>9}"


if __name__ == "__main__":
    main(sys.argv[1:])
