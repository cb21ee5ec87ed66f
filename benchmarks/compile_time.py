"""Python-side compile time: .tdsl source to C text, per standard-library op.

    python benchmarks/compile_time.py

Prints the time to check the standard library once (parse, check, tensor expressions), then
for each op at ResNet/BERT-like sizes the time from its `Op` to C source (schedule, lowering
passes, C emission), cold (first lowering in this process) and warm (median of 5).
"""
from __future__ import annotations

import statistics
import time

import tdsl
from tdsl.emit_c.c import emit_c

CONV = {"N": 1, "C": 64, "IH": 56, "IW": 56, "F": 64, "KH": 3, "KW": 3}
CASES = [
    ("matmul", {"M": 1024, "N": 1024, "K": 1024}, {}),
    ("batch_matmul", {"B": 8, "M": 256, "N": 256, "K": 256}, {}),
    ("dense", {"N": 1024, "M": 1024, "K": 1024}, {}),
    ("conv2d", CONV, {"padding": 1}),
    ("depthwise_conv2d", {k: v for k, v in CONV.items() if k != "F"}, {"padding": 1}),
    ("max_pool2d", {"N": 1, "C": 64, "IH": 56, "IW": 56}, {"kernel": 3, "stride": 2}),
    ("softmax", {"N": 4096, "D": 1024}, {}),
    ("layer_norm", {"N": 4096, "D": 1024}, {}),
    ("gelu", {"S0": 4096, "S1": 1024}, {}),
    ("conv2d_winograd_nchwc", {"N": 1, "CB": 4, "CI": 16, "H": 56, "W": 56, "FB": 4, "FI": 16},
     {}),
]


def source_of(op, shapes, attrs):
    return emit_c(op.lower(None, shapes, **attrs)).source


def main() -> None:
    t0 = time.perf_counter()
    std = tdsl.stdlib
    print(f"check the standard library: {1e3 * (time.perf_counter() - t0):.0f} ms (once)")
    print(f"{'op':22} {'cold ms':>8} {'warm ms':>8}  (source to C text; goal < 300 ms)")
    for name, shapes, attrs in CASES:
        op = std[name]
        t0 = time.perf_counter()
        source_of(op, shapes, attrs)
        cold = time.perf_counter() - t0
        warm = []
        for _ in range(5):
            t0 = time.perf_counter()
            source_of(op, shapes, attrs)
            warm.append(time.perf_counter() - t0)
        print(f"{name:22} {1e3 * cold:8.0f} {1e3 * statistics.median(warm):8.0f}")


if __name__ == "__main__":
    main()
