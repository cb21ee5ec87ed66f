"""int8 convolutions of ResNet's shapes: std `qlinear_conv2d_nchwc` on 16-channel blocks with
the vector dot product (`vpdpbusd` where the CPU has VNNI), on 64-channel blocks summed in AMX
tiles (where `Target.amx`), and onnxruntime's QLinearConv, in turn, in one run, with ratios.

    python benchmarks/bench_int8_convs.py              # one thread
    python benchmarks/bench_int8_convs.py --threads 2

Every output is checked bit for bit against the numpy form of MLAS's arithmetic
(tests/numpy_ref.py) before it is timed. Each figure is the best of several rounds of
repeated calls, the three taken in turn (machines here are shared and noisy: read the
ratios). "G/s" is products per second; "x vnni" and "x ort" are those times over the tiles'.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

LAYERS = [  # (channels, filters, size, kernel, stride, padding): ResNet-50's kinds
    (64, 64, 56, 3, 1, 1), (64, 128, 56, 3, 2, 1), (128, 128, 28, 3, 1, 1),
    (256, 256, 14, 3, 1, 1), (512, 512, 7, 3, 1, 1), (256, 64, 56, 1, 1, 0),
    (1024, 256, 14, 1, 1, 0), (256, 512, 28, 1, 2, 0)]


def blocked(a, block):
    n, c, h, w = a.shape
    return np.ascontiguousarray(a.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def ort_session(c, f, k, stride, pad, w, b, scale_x, scale_w, scale_y, x_zp, y_zp, hw):
    """onnxruntime running one QLinearConv node, or None without onnxruntime."""
    try:
        import onnxruntime
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    inits = [numpy_helper.from_array(np.array(scale_x, np.float32), "xs"),
             numpy_helper.from_array(np.array(x_zp, np.uint8), "xz"),
             numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(scale_w.astype(np.float32), "ws"),
             numpy_helper.from_array(np.zeros(f, np.int8), "wz"),
             numpy_helper.from_array(np.array(scale_y, np.float32), "ys"),
             numpy_helper.from_array(np.array(y_zp, np.uint8), "yz"),
             numpy_helper.from_array(b, "b")]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], strides=[stride] * 2, pads=[pad] * 4)
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info(
        "x", TensorProto.UINT8, [1, c, hw, hw])], [helper.make_tensor_value_info(
            "y", TensorProto.UINT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    so.log_severity_level = 3
    return onnxruntime.InferenceSession(model.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])


def best_time(fn, rounds: int, reps: int = 10) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)     # read when libgomp loads
    import tdsl
    from numpy_ref import qlinear_conv2d as reference
    std = tdsl.load("std")
    target = tdsl.Target("c")
    print(f"target: {target}; amx {target.amx}; threads {args.threads}")
    print(f"{'layer':28} {'vnni us':>9} {'tiles us':>9} {'ort us':>9} {'tiles G/s':>10} "
          f"{'x vnni':>7} {'x ort':>6}")
    rng = np.random.default_rng(0)
    for c, f, hw, k, stride, pad in LAYERS:
        x = rng.integers(0, 256, (1, c, hw, hw)).astype(np.uint8)
        w = rng.integers(-128, 128, (f, c, k, k)).astype(np.int8)
        scale_w = rng.uniform(1e-3, 4e-3, f)
        scale_x, scale_y, x_zp, y_zp = 0.02, 0.05, 125, 120
        s = (scale_x * scale_w / scale_y).astype(np.float32)
        bias = rng.integers(-40000, 40000, f).astype(np.int32)
        b = (bias - x_zp * w.reshape(f, -1).astype(np.int32).sum(1)).astype(np.int32)
        attrs = dict(stride=stride, padding=pad, x_zp=x_zp, y_zp=y_zp)
        want = reference(x, w, b, s, **attrs)
        oh = want.shape[2]
        times = {}
        for name, block, config in (("vnni", 16, {"tiles": 0}), ("tiles", 64, {"tiles": 1})):
            if name == "tiles" and not target.amx:
                continue
            wp = std["pack_qconv_weights"].build(in_block=block, out_block=block)(w)
            kernel = std["qlinear_conv2d_nchwc"].build(
                shapes=dict(N=1, CB=c // block, IH=hw, IW=hw, CI=block, FB=f // block, KH=k,
                            KW=k, CQ=block // 4, FI=block),
                config=config if target.amx else None, **attrs)
            call = (blocked(x, block), wp, b.reshape(-1, block), s.reshape(-1, block))
            assert (kernel(*call) == blocked(want, block)).all(), (name, c, f, hw)
            times[name] = (kernel, call)
        sess = ort_session(c, f, k, stride, pad, w, bias, scale_x, scale_w, scale_y, x_zp,
                           y_zp, hw)
        if sess is not None:
            times["ort"] = (lambda xx, sess=sess: sess.run(None, {"x": xx})[0], (x,))
        best = {n: float("inf") for n in times}
        for _ in range(3):                    # in turn, so each meets the same noise
            for n, (fn, call) in times.items():
                best[n] = min(best[n], best_time(lambda: fn(*call), args.rounds))
        us = {n: t * 1e6 for n, t in best.items()}
        products = c * f * k * k * oh * oh

        def col(n):
            return f"{us[n]:9.0f}" if n in us else f"{'-':>9}"
        rate = f"{products / best['tiles'] / 1e9:10.0f}" if "tiles" in best else f"{'-':>10}"
        vs = [f"{us[n] / us['tiles']:.2f}" if n in us and "tiles" in us else "-"
              for n in ("vnni", "ort")]
        name = f"{c}->{f} {k}x{k} s{stride} {hw}x{hw}"
        print(f"{name:28} {col('vnni')} {col('tiles')} {col('ort')} {rate} {vs[0]:>7} "
              f"{vs[1]:>6}", flush=True)


if __name__ == "__main__":
    main()
