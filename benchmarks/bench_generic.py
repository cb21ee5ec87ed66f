"""Kernels built without shapes beside the same ops built with them, in one run, with ratios.

    python benchmarks/bench_generic.py            # every case of bench_ops.py
    python benchmarks/bench_generic.py matmul     # cases whose name contains "matmul"

Three builds of each op: ``shapes=`` (sizes fixed at build time, constants in the C),
``specialize=False`` (the one generic kernel: sizes read from the arguments at each call,
loop-partitioned) and the default build without shapes (generic at a shape's first call,
built for the shape at its second). "generic/fixed" and "auto/fixed" are the fixed build's
time over the others' (1.0: as fast). Timed in turn, three rounds, as bench_ops.py does:
read the ratios, not the absolute times, on a shared machine.
"""
from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_ops import ROUNDS, cases, timeit  # noqa: E402

import tdsl  # noqa: E402


def main(argv) -> int:
    target = tdsl.Target("c")
    print(f"target: {target}: {target.lanes} lanes, {target.registers} registers")
    print(f"{'case':28} {'fixed ms':>9} {'generic ms':>11} {'auto ms':>9} "
          f"{'generic/fixed':>14} {'auto/fixed':>11}")
    for name, _work, op, arrays, attrs, _np, _torch in cases(target):
        if argv and not any(f in name for f in argv):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fixed = op.build(target=target, shapes=op.sizes_of(*arrays, **attrs), **attrs)
            generic = op.build(target=target, specialize=False, **attrs)
            auto = op.build(target=target, **attrs)
        want = fixed(*arrays)
        for k in (generic, auto, auto):         # auto's second call builds for the shape
            np.testing.assert_allclose(k(*arrays), want, rtol=2e-3, atol=2e-3)
        fns = [lambda k=k: k(*arrays) for k in (fixed, generic, auto)]
        best = [math.inf] * 3
        for _ in range(ROUNDS):
            best = [min(b, timeit(f)) for b, f in zip(best, fns)]
        t_fixed, t_generic, t_auto = best
        print(f"{name:28} {t_fixed * 1e3:9.3f} {t_generic * 1e3:11.3f} {t_auto * 1e3:9.3f} "
              f"{t_fixed / t_generic:14.2f} {t_fixed / t_auto:11.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
