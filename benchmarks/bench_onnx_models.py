"""Imported ONNX models: tdsl (`tdsl.onnx_import.OnnxModule`) beside onnxruntime, in one run.

    python benchmarks/bench_onnx_models.py                 # every tests/models/*.onnx
    python benchmarks/bench_onnx_models.py --seq 128       # and larger exports (needs torch)
    python benchmarks/bench_onnx_models.py --profile       # and each tdsl kernel's time
    OMP_NUM_THREADS=1 python benchmarks/bench_onnx_models.py   # one thread for both

Each ``tests/models/NAME.onnx`` is run on the inputs of ``NAME.npz`` beside it (whatever
models are there, those of ``make_torch_models.py`` and any other). ``--seq S`` (and
``--batch B``, ``--dim D``) re-export the BERT encoder, the GPT block and a ViT of
``make_torch_models.py``'s classes at larger sizes into a temporary folder. Two convolution
cases written with onnx's helper API are always run: a 1-D convolution (Conv1d, as an audio
CNN's, kernel 9) and a 2-D one of the same work (3x3 over as many outputs), so their times
can be compared ("x 2-D" = conv2d ms / conv1d ms; 1 means the 1-D one is as fast as the
2-D one for its work); the 2-D one also as the direct sum ("direct": no Winograd, which
does fewer multiplies than the work counted). A U-Net decoder's 2x bilinear upsampling of
64 x 64 x 64 runs with them.

onnxruntime runs with as many intra-op threads as tdsl's OpenMP: ``OMP_NUM_THREADS`` if set,
else the machine's cores. Machines here are shared and noisy: the two are timed in turn
(interleaved rounds) and each figure is the median over the rounds of each round's median;
read the ratio "x ort" = onnxruntime ms / tdsl ms (> 1 means tdsl is faster).

``--profile`` prints each model's `GraphModule.profile` (`tdsl.graph_profile`): each fused
kernel of its tdsl build timed alone, in the model's order (the best of several passes over
the whole graph), with its share, schedule, GFLOP/s or GB/s, and a total per anchor op.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_graphs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "models"


def threads() -> int:
    return int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)


timer = bench_graphs.timer     # a median of a burst of calls


def ort_session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads()
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


# ------------------------------------------------------------------ the models

def npz_inputs(npz):
    d = np.load(npz)
    keys = sorted((k for k in d.files if k.startswith("input_")), key=lambda k: int(k[6:]))
    return [d[k] for k in keys]


def shipped():
    for onnx_path in sorted(MODELS.glob("*.onnx")):
        npz = onnx_path.with_suffix(".npz")
        if not npz.exists():
            print(f"({onnx_path.name}: no {npz.name} beside it, skipped)")
            continue
        yield onnx_path.stem, onnx_path, npz_inputs(npz)


def exported(args, folder: Path):
    """BERT, GPT and ViT of make_torch_models.py's classes at larger sizes."""
    try:
        import torch
    except ImportError:
        print("(torch not installed: the larger exports are skipped)")
        return
    sys.path.insert(0, str(MODELS))
    import make_torch_models as M
    b, s, d = args.batch, args.seq, args.dim
    heads = max(1, d // 64)
    g = torch.Generator().manual_seed(2)

    def export(name, model, inputs, names, dynamic):
        torch.manual_seed(0)
        model.eval()
        path = folder / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, tuple(inputs), str(path), opset_version=17,
                              input_names=names, dynamic_axes=dynamic, dynamo=False)
        return name, path, [t.numpy() for t in inputs]

    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.int64)
    mask[-1, s * 2 // 3:] = 0
    yield export(f"bert d{d} L2 {b}x{s}", M.Bert(1000, d, heads, 4 * d, 2, s), [ids, mask],
                 ["input_ids", "attention_mask"],
                 {"input_ids": {0: "N", 1: "S"}, "attention_mask": {0: "N", 1: "S"}})
    torch.manual_seed(0)
    yield export(f"gpt d{d} {b}x{s}", M.GPTBlock(1000, d, heads, 4 * d, s), [ids], ["ids"],
                 {"ids": {0: "N", 1: "S"}})
    torch.manual_seed(0)
    image = 4 * int(round(np.sqrt(s)))          # about s patches of 4x4
    yield export(f"vit d{d} {b}x3x{image}x{image}", M.ViT(d, heads, 4 * d, 2, 4, image),
                 [torch.randn(b, 3, image, image, generator=g)], ["image"],
                 {"image": {0: "N"}})


def conv_cases(folder: Path, c=32, f=64, length=4000, k=9, hw=(40, 100)):
    """A Conv1d of an audio CNN (kernel k, length L, 'same' padding) and a 2-D convolution
    of the same work: a 3x3 kernel (k = 9 taps) over H x W = L outputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    bias = rng.standard_normal(f).astype(np.float32)
    for rank, kernel, spatial in ((1, [k], [length]), (2, [3, 3], list(hw))):
        w = (rng.standard_normal([f, c, *kernel]) / np.sqrt(c * k)).astype(np.float32)
        x = rng.standard_normal([1, c, *spatial]).astype(np.float32)
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=kernel,
                                pads=[q // 2 for q in kernel] * 2)
        relu = helper.make_node("Relu", ["y"], ["z"])
        graph = helper.make_graph(
            [node, relu], f"conv{rank}d",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, f, *spatial])],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        path = folder / f"conv{rank}d.onnx"
        onnx.save(model, str(path))
        what = f"k{k} L{length}" if rank == 1 else f"3x3 {hw[0]}x{hw[1]}"
        yield f"conv{rank}d {c}->{f} {what}", path, [x]
        if rank == 2:          # the direct sum, the 1-D one's algorithm (no Winograd)
            yield f"conv2d {c}->{f} {what} direct", path, [x], {"winograd": False}


def resize_case(folder: Path, c=64, hw=64):
    """A U-Net decoder's 2x bilinear upsampling (Resize, linear, half_pixel) of c x hw x hw,
    at a size where the resize itself is worth timing (the shipped U-Net's is 16 x 8 x 8)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    x = np.random.default_rng(0).standard_normal([1, c, hw, hw]).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    graph = helper.make_graph(
        [node], "upsample", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 2 * hw, 2 * hw])],
        [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    path = folder / "upsample.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    yield f"upsample2x bilinear {c}x{hw}x{hw}", path, [x]


# ------------------------------------------------------------------ timing

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, help="also export BERT, GPT and ViT at this sequence "
                   "length (ViT: about this many patches) into a temporary folder")
    p.add_argument("--batch", type=int, default=1, help="the batch of --seq's exports")
    p.add_argument("--dim", type=int, default=256, help="the model width of --seq's exports")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--only", help="only models whose name contains this")
    p.add_argument("--no-conv", action="store_true",
                   help="skip the 1-D/2-D conv cases and the upsampling")
    p.add_argument("--profile", action="store_true", help="print each tdsl kernel's time")
    p.add_argument("--flags", default="", help="extra C compiler flags for tdsl's kernels "
                   "(an A/B of a code-generation flag, e.g. -ftree-loop-if-convert)")
    args = p.parse_args(argv)

    from tdsl.onnx_import import OnnxModule
    print(f"threads: tdsl OpenMP {os.environ.get('OMP_NUM_THREADS', 'default')}, "
          f"onnxruntime intra-op {threads()}; {args.rounds} interleaved rounds, medians")
    print(f"{'model':<34}{'tdsl ms':>10}{'ort ms':>10}{'x ort':>8}{'kernels':>9}"
          f"{'max |diff|':>12}")
    conv_ms = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cases = list(shipped())
        if not args.no_conv:
            cases += list(conv_cases(tmp)) + list(resize_case(tmp))
        if args.seq:
            cases += list(exported(args, tmp))
        for name, path, inputs, *options in cases:
            if args.only and args.only not in name:
                continue
            opts = dict(options[0]) if options else {}
            if args.flags:
                opts["flags"] = tuple(args.flags.split())
            try:
                mod = OnnxModule(path, **opts)
                gm = mod.module(mod.bind(*inputs))
            except Exception as e:                       # a model that doesn't import yet
                print(f"{name:<34}  tdsl: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                continue
            sess = ort_session(path)
            feed = {i.name: a for i, a in zip(sess.get_inputs(), inputs)}
            ours, theirs = gm(*inputs), sess.run(None, feed)
            ours = ours if isinstance(ours, tuple) else (ours,)
            diff = max(float(np.max(np.abs(np.asarray(a, np.float64) - b)))
                       if np.size(b) else 0.0 for a, b in zip(ours, theirs))
            runs = {"tdsl": timer(lambda: gm(*inputs)),
                    "ort": timer(lambda: sess.run(None, feed))}
            got: dict[str, list] = {k: [] for k in runs}
            for r in range(args.rounds):
                for k in (runs if r % 2 == 0 else reversed(list(runs))):
                    got[k].append(runs[k]())
            ms = {k: statistics.median(v) * 1e3 for k, v in got.items()}
            kernels = len(gm._last.compiled.functions)
            print(f"{name:<34}{ms['tdsl']:10.3f}{ms['ort']:10.3f}"
                  f"{ms['ort'] / ms['tdsl']:8.2f}{kernels:>9}{diff:12.2e}", flush=True)
            if name.startswith(("conv1d", "conv2d")):
                conv_ms[name[:6] + (" direct" if name.endswith("direct") else "")] = \
                    ms["tdsl"]
            if args.profile:
                print(f"\n{name}:")
                print(gm.profile(*inputs))
                print(flush=True)
    if "conv1d" in conv_ms:
        for k in ("conv2d", "conv2d direct"):
            if k in conv_ms:
                print(f"conv1d vs {k} of the same work: x 2-D = "
                      f"{conv_ms[k] / conv_ms['conv1d']:.2f} (tdsl {k} ms / conv1d ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
