"""Flash and RAM of the embedded C, per example: what `arm-none-eabi-size` reports for each
op's object at -Os for a Cortex-M4 (hard float), its arena (the header's ARENA_BYTES) beside
the naive sum of its intermediates (one buffer each, no reuse), and the bytes of the weights
a model would keep in flash.

    python benchmarks/embedded_size.py [--target "c-embedded -mcpu=cortex-m4"]

First the example graphs, each one .c/.h pair (examples/models: the int8 keyword-spotting
DS-CNN with random int8 weights, the float MLP and MobileNet block with random weights):
flash (text + data: the static const weights and the code) against the goal of the weights'
own bytes plus 8 KB, the arena against the naive sum of intermediates and against the largest
set of values live at one time. Then the DS-CNN's layers as single ops (the total counts each
distinct kernel once) and some float ops. Needs arm-none-eabi-gcc and its binutils.
"""
from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np

import tdsl
from tdsl.emit_c.embedded import emit_embedded
from tdsl.emit_c.embedded_build import can_measure, code_size, compile_object

DSCNN_BLOCKS = 4
DSCNN = [   # (row label, op, sizes, attributes, how many layers of the model it stands for)
    ("conv 10x4 s2, 1->64", "qconv2d",
     dict(N=1, C=1, IH=49, IW=10, F=64, KH=10, KW=4), dict(stride=2, scale=0.0021), 1),
    ("depthwise 3x3, 64", "qdepthwise_conv2d",
     dict(N=1, C=64, IH=20, IW=4, KH=3, KW=3), dict(padding=1, scale=0.013), DSCNN_BLOCKS),
    ("pointwise 1x1, 64->64", "qconv2d",
     dict(N=1, C=64, IH=20, IW=4, F=64, KH=1, KW=1), dict(scale=0.0042), DSCNN_BLOCKS),
    ("relu", "qrelu", dict(S0=1, S1=64, S2=20, S3=4), dict(x_zp=-128), 2 * DSCNN_BLOCKS + 1),
    ("avg pool 4x4", "qavg_pool2d", dict(N=1, C=64, IH=20, IW=4), dict(kernel=4), 1),
    ("dense 320->12", "qdense", dict(N=1, K=320, M=12), dict(scale=0.0061), 1),
]
FLOAT = [
    ("matmul 32x32x32", "matmul", dict(M=32, K=32, N=32), {}),
    ("dense 64->10", "dense", dict(N=1, K=64, M=10), {}),
    ("conv2d 3x3, 8->16 @16x16", "conv2d", dict(N=1, C=8, IH=16, IW=16, F=16, KH=3, KW=3),
     dict(padding=1)),
    ("depthwise 3x3, 16 @16x16", "depthwise_conv2d", dict(N=1, C=16, IH=16, IW=16, KH=3, KW=3),
     dict(padding=1)),
    ("softmax 4x100", "softmax", dict(N=4, D=100), {}),
    ("layer_norm 4x100", "layer_norm", dict(N=4, D=100), {}),
    ("max_pool2d 3x3 s2 @16x16", "max_pool2d", dict(N=1, C=16, IH=16, IW=16),
     dict(kernel=3, stride=2, padding=1)),
]


def weight_bytes(op, sizes, attrs) -> int:
    """Bytes of every input after the first (the weights and bias of a layer)."""
    fn = op.function(None if op.name != "qrelu" else [len(sizes)], **attrs)
    total = 0
    for t in fn.inputs[1:]:
        n = 1
        for d in t.shape:
            n *= sizes[d.name] if hasattr(d, "name") else int(d.value)
        total += n * np.dtype({"i8": np.int8, "i32": np.int32, "f32": np.float32}[t.dtype]).itemsize
    return total


GRAPHS = [("kws_dscnn_int8", None), ("mlp", {"B": 1}), ("mobilenet_block", {"B": 1})]
MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"


def largest_live_set(graph, weights, shapes) -> int:
    """Bytes of the graph's intermediate values live at once at the busiest kernel."""
    from tdsl.graph_api import CompiledGraph, bind_sizes
    compiled = CompiledGraph(graph, weights, bind_sizes(graph.ir, weights, shapes), True, True)
    first, last = {}, {}
    for k, f in enumerate(compiled.functions):
        for v in f.outputs:
            first[v] = last[v] = k
        for v in f.inputs:
            if v in first:
                last[v] = k
    inner = [v for v in first if v not in compiled.ir.outputs]
    size = {v: int(np.prod(compiled.ir.shape_of(v, compiled.sizes))) *
            np.dtype({"i8": np.int8, "i32": np.int32, "f32": np.float32}[
                compiled.ir.value(v).dtype]).itemsize for v in inner}
    return max((sum(size[v] for v in inner if first[v] <= k <= last[v])
                for k in range(len(compiled.functions))), default=0)


def graph_rows(target, tmp: Path) -> None:
    print(f"{'graph':18} {'text':>7} {'data':>5} {'bss':>4} {'weights':>8} {'folded':>7} "
          f"{'code':>6} {'arena':>7} {'live max':>8} {'naive':>7}")
    for name, shapes in GRAPHS:
        graph = tdsl.load(MODELS / f"{name}.tdsl")[name]
        weights = graph.random_params(shapes=shapes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")    # fused kernels' schedule fallbacks
            module = graph.emit_embedded(target, weights, shapes)
        size = code_size(compile_object(module, target, tmp / name, flags=("-Os",)), target)
        wbytes = sum(a.nbytes for a in weights.values())
        print(f"{name:18} {size.text:7} {size.data:5} {size.bss:4} {wbytes:8} "
              f"{module.const_bytes:7} {size.flash - module.const_bytes:6} "
              f"{module.arena_bytes:7} "
              f"{largest_live_set(graph, weights, shapes):8} {module.naive_bytes:7}")
    print("(weights: as given; folded: the static const arrays after constant folding;\n"
          " code = text + data - folded: the kernels and the entry; goals for the int8 DS-CNN:"
          " code <= 8192, arena <= live max)")


def measure(target, op, sizes, attrs, tmp: Path):
    module = emit_embedded(op.lower(None, sizes, target=target, **attrs), target=target)
    size = code_size(compile_object(module, target, tmp / op.name, flags=("-Os",)), target)
    return module, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="c-embedded -mcpu=cortex-m4")
    args = parser.parse_args()
    target = tdsl.Target(args.target)
    if not can_measure(target):
        raise SystemExit(f"{target.compiler} and its binutils are needed")
    std = tdsl.stdlib
    print(f"target: {target} ({target.compiler} -Os; bytes)")
    head = f"{'example':28} {'text':>6} {'data':>5} {'bss':>4} {'arena':>6} {'naive':>6} " \
           f"{'weights':>8}"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print()
        graph_rows(target, tmp)
        print("\nint8 DS-CNN layers (keyword spotting, 49x10 MFCC in, 12 classes out)")
        print(head)
        code = weights = 0
        for label, name, sizes, attrs, count in DSCNN:
            op = std[name]
            module, size = measure(target, op, sizes, attrs, tmp)
            w = weight_bytes(op, sizes, attrs)
            code += size.text + size.data
            weights += w * count
            times = f" x{count}" if count > 1 else ""
            print(f"{label + times:28} {size.text:6} {size.data:5} {size.bss:4} "
                  f"{module.arena_bytes:6} {module.naive_bytes:6} {w * count:8}")
        print(f"{'total (each kernel once)':28} {code:6} {'':5} {'':4} {'':6} {'':6} "
              f"{weights:8}")
        print(f"flash: {weights} B of weights + {code} B of kernels = {weights + code} B "
              f"(goal: weights + 8192; {'met' if code <= 8192 else 'missed'}, before an entry "
              f"function)")
        print("\nfloat ops")
        print(head)
        for label, name, sizes, attrs in FLOAT:
            op = std[name]
            module, size = measure(target, op, sizes, attrs, tmp)
            print(f"{label:28} {size.text:6} {size.data:5} {size.bss:4} "
                  f"{module.arena_bytes:6} {module.naive_bytes:6} "
                  f"{weight_bytes(op, sizes, attrs):8}")


if __name__ == "__main__":
    main()
