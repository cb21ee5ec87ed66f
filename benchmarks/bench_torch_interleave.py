"""tdsl's kernels beside PyTorch's in one process (issue 25).

Prints, in one run:

1. the round trip of a small kernel call on numpy arrays and on PyTorch tensors (the
   tensor path's overhead over numpy's, the goal is <= 2 us), and
2. an interleaved A/B of small kernels (tens of microseconds, where OpenMP's spin-waiting
   shows): a tdsl depthwise convolution and softmax beside torch's, called in turn with no
   pause, against each one's time alone. The goal is each within 15% of its time alone.

    python benchmarks/bench_torch_interleave.py [--order tdsl-first|torch-first] [--calls N]

Which OpenMP runtime(s) the process has mapped is printed too: one runtime shared by both
libraries is the fix (`tdsl.emit_c.omp`); two means two thread pools spin on the cores.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def _median_us(fn, calls: int) -> float:
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    return statistics.median(ts) / 1e3


def _interleaved_us(fa, fb, calls: int) -> tuple[float, float]:
    ta, tb = [], []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fa()
        t1 = time.perf_counter_ns()
        fb()
        t2 = time.perf_counter_ns()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
    return statistics.median(ta) / 1e3, statistics.median(tb) / 1e3


def round_trip(batches: int) -> None:
    """A 64-element kernel called on numpy arrays and on tensors, in alternating batches
    of 500 calls; the fastest batch of each (the least disturbed by other processes)."""
    import torch
    import tdsl
    import tdsl.torch  # noqa: F401
    src = tdsl.loads("op add1(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] + 1.0 }")["add1"]
    x = np.ones(64, np.float32)
    t = torch.ones(64)
    for label, k in (("sizes fixed (a Kernel)", src.build(shapes={"N": 64})),
                     ("sizes from the call (specialising)", src.build()),
                     ("rank-generic std relu", tdsl.stdlib["relu"].build())):
        for _ in range(3):
            k(x), k(t)
        a, b = [], []
        for _ in range(batches):
            a.append(_batch_us(lambda: k(x)))
            b.append(_batch_us(lambda: k(t)))
        a.sort()
        b.sort()
        print(f"round trip, {label:<35} numpy {a[0]:5.2f} us, torch {b[0]:5.2f} us: "
              f"overhead {b[0] - a[0]:+.2f} us (median {b[len(b) // 2] - a[len(a) // 2]:+.2f})"
              f" (goal <= 2 us)")


def _batch_us(fn, n: int = 500) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def second_runtime(tmp: Path) -> Path:
    """A copy of the system's libgomp under another soname (``libgomp.so.7``): what a
    PyTorch wheel bundling ``libgomp-<hash>.so.1`` brings, a runtime the loader does not
    take for the one gcc's code asks for."""
    import ctypes.util
    src = Path("/usr/lib/x86_64-linux-gnu/libgomp.so.1")
    if not src.exists():
        src = Path(ctypes.util.find_library("gomp") or "libgomp.so.1")
    data = src.read_bytes()
    assert b"libgomp.so.1\x00" in data
    dst = tmp / "libgomp.so.7"
    dst.write_bytes(data.replace(b"libgomp.so.1\x00", b"libgomp.so.7\x00"))
    return dst


def interleave(order: str, calls: int, two: bool = False, rounds: int = 15) -> list[float]:
    if order == "torch-first":
        import torch
    if two:
        # the state before the fix: tdsl's kernels bound to a runtime of their own
        import ctypes
        import os
        import tempfile
        copy = second_runtime(Path(tempfile.mkdtemp()))
        ctypes.CDLL(str(copy), mode=os.RTLD_GLOBAL)
        from tdsl.emit_c import omp
        omp.share_loaded_runtime = lambda: None
    import tdsl
    std = tdsl.stdlib
    dw = std["depthwise_conv2d"].build(shapes={"N": 1, "C": 64, "IH": 56, "IW": 56,
                                               "KH": 3, "KW": 3}, padding=1)
    sm = std["softmax"].build(shapes={"N": 256, "D": 512})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = rng.standard_normal((64, 1, 3, 3)).astype(np.float32)
    s = rng.standard_normal((256, 512)).astype(np.float32)
    run_dw, _ = dw.bind(x, w)
    run_sm, _ = sm.bind(s)
    import torch
    import torch.nn.functional as F
    tx, tw, ts = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(s)

    def torch_dw():
        F.conv2d(tx, tw, padding=1, groups=64)

    def torch_sm():
        torch.softmax(ts, 1)

    from tdsl.emit_c import omp
    print(f"order {order}; OpenMP runtimes mapped: {', '.join(omp.loaded_runtimes()) or 'none'}"
          f"; tdsl threads {omp.thread_count()}, torch threads {torch.get_num_threads()}")
    ratios = []
    for name, fa, fb in (("depthwise 1x64x56x56 3x3", run_dw, torch_dw),
                         ("softmax 256x512", run_sm, torch_sm)):
        for f in (fa, fb):
            _median_us(f, 200)
        # rounds of (A alone, B alone, A and B interleaved), each the median of its calls;
        # the least disturbed round of each kind (other processes share the cores)
        alone_a, alone_b, inter_a, inter_b = [], [], [], []
        for _ in range(rounds):
            alone_a.append(_median_us(fa, calls))
            alone_b.append(_median_us(fb, calls))
            ia, ib = _interleaved_us(fa, fb, calls)
            inter_a.append(ia)
            inter_b.append(ib)
        alone_a, alone_b, inter_a, inter_b = map(min, (alone_a, alone_b, inter_a, inter_b))
        ra, rb = inter_a / alone_a, inter_b / alone_b
        ratios += [ra, rb]
        print(f"  {name:<26} tdsl alone {alone_a:8.1f} us, interleaved {inter_a:8.1f} us "
              f"({ra:4.2f}x) | torch alone {alone_b:8.1f} us, interleaved {inter_b:8.1f} us "
              f"({rb:4.2f}x)")
    return ratios


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--order", choices=["tdsl-first", "torch-first"], default="tdsl-first")
    p.add_argument("--calls", type=int, default=200, help="calls per round")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--skip-round-trip", action="store_true")
    p.add_argument("--batches", type=int, default=200, help="round trip: batches of 500 calls")
    p.add_argument("--two-runtimes", action="store_true",
                   help="bind tdsl's kernels to a second libgomp, as before the fix (or on "
                        "hosts whose torch wheel bundles libgomp-<hash>.so.1 without it)")
    a = p.parse_args(argv)
    ratios = interleave(a.order, a.calls, a.two_runtimes, a.rounds)
    worst = max(ratios)
    print(f"worst interleaved/alone: {worst:.2f}x (goal <= 1.15x): "
          f"{'met' if worst <= 1.15 else 'NOT met'}")
    if not a.skip_round_trip:
        round_trip(a.batches)


if __name__ == "__main__":
    main()
