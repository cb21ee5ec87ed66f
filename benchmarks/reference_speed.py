"""Time the numpy reference evaluator on the two shapes it must handle quickly.

The reference is the oracle for every backend test, so it has to stay fast on realistic
sizes: a 256^3 matmul and a 3x3 same-padded conv2d (1x64x56x56, 64 filters), the latter
written as a padded stage plus a sum over c, r, s. Prints times; asserts nothing about speed.

    python benchmarks/reference_speed.py
"""
from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

# Run from a checkout without installing: the package lives one level up.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from tdsl.lowering import te  # noqa: E402
from tdsl.lowering.reference.semantics import evaluate  # noqa: E402


def matmul_fn() -> te.Function:
    M, K, N = te.Var("M"), te.Var("K"), te.Var("N")
    A = te.placeholder("A", (M, K))
    B = te.placeholder("B", (K, N))
    k = te.reduce_axis(K, "k")
    C = te.compute("C", (M, N), lambda i, j: te.reduce("sum", A[i, k.var] * B[k.var, j], k),
                   axis_names=["i", "j"])
    return te.Function("matmul", (A, B), (C,), (M, K, N))


def conv_fn() -> te.Function:
    N, C, H, W, F = (te.Var(n) for n in "NCHWF")
    X = te.placeholder("X", (N, C, H, W))
    Wt = te.placeholder("Wt", (F, C, 3, 3))
    Xp = te.compute(
        "Xp", (N, C, H + 2, W + 2),
        lambda n, c, y, x: te.select(
            te.binary("and", te.binary("and", te.binary(">=", y, 1), te.binary("<=", y, H)),
                      te.binary("and", te.binary(">=", x, 1), te.binary("<=", x, W))),
            X[n, c, y - 1, x - 1], 0.0),
        axis_names=["n", "c", "y", "x"])
    c, r, s = te.reduce_axis(C, "rc"), te.reduce_axis(3, "r"), te.reduce_axis(3, "s")
    Y = te.compute(
        "Y", (N, F, H, W),
        lambda n, f, y, x: te.reduce(
            "sum", Xp[n, c.var, y + r.var, x + s.var] * Wt[f, c.var, r.var, s.var], (c, r, s)),
        axis_names=["n", "f", "y", "x"])
    return te.Function("conv2d", (X, Wt), (Y,), (N, C, H, W, F))


def best_of(fn, args, repeat=5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        evaluate(fn, args)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    b = rng.standard_normal((256, 256), dtype=np.float32)
    t_ref = best_of(matmul_fn(), [a, b])
    t0 = time.perf_counter()
    a @ b
    t_np = time.perf_counter() - t0
    print(f"matmul 256x256x256        reference {t_ref * 1e3:8.2f} ms   (numpy a @ b "
          f"{t_np * 1e3:.2f} ms)")

    x = rng.standard_normal((1, 64, 56, 56), dtype=np.float32)
    w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
    t_ref = best_of(conv_fn(), [x, w])
    print(f"conv2d 1x64x56x56, 64x3x3 reference {t_ref * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
