"""The graph-level layout pass: activations between convolutions in NCHW[lanes]c.

Layout on and off, fused and unfused, give the same numbers (and the ops' references'); the
blocked ops' references are checked against independent numpy; the blocked width is the
target's lanes (a target with other lanes blocks by them); the residual add of a ResNet
block fuses into the blocked convolution; concatenations, splits and slices over blocked
channels, whole blocks or not, match the reference (a property test); `tdsl graph` prints
the layouts. Builds need gcc.

Both block widths, 8 (AVX2) and 16 (AVX-512), are tested whatever the host: the graphs the
passes make for ``c -march=x86-64-v3`` and ``-v4`` are checked as they are, and the numbers
on a target of each width that runs here (`block_targets`: the other width's vectors forced
by ``-lanes``, AVX2 code carrying 16-float vectors in register pairs); a kernel for the ISA
the host lacks is built, not run.
"""
from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import tdsl
from tdsl import cli
from tdsl.api import stdlib
from tdsl.graph_api import CompiledGraph
from tdsl.lowering.graph.patterns import vectors_along_output
from tdsl.target import Target, as_target

sys.path.insert(0, str(Path(__file__).resolve().parent))
from block_targets import BLOCKS, isa_target, run_target  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "models"
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
TOL = dict(rtol=1e-4, atol=1e-4)


def load(name: str) -> tdsl.Graph:
    return tdsl.load(EXAMPLES / f"{name}.tdsl")[name]


def rand(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def blocked(x: np.ndarray, k: int) -> np.ndarray:
    """NCHW -> NCHW[k]c, in numpy."""
    n, c, h, w = x.shape
    return x.reshape(n, c // k, k, h, w).transpose(0, 1, 3, 4, 2)


# ---------------------------------------------------------------------------- the ops

def test_the_blocked_ops_references_agree_with_numpy():
    std = stdlib()
    x, w = rand((2, 8, 6, 7)), rand((12, 8, 3, 3), 2)
    xb = std["to_nchwc"].reference(x, block=4)
    np.testing.assert_array_equal(xb, blocked(x, 4))
    np.testing.assert_array_equal(std["from_nchwc"].reference(xb), x)
    wp = std["pack_conv_weights"].reference(w, in_block=4, out_block=6)
    np.testing.assert_array_equal(wp, w.reshape(2, 6, 2, 4, 3, 3).transpose(0, 2, 4, 5, 3, 1))
    want = std["conv2d"].reference(x, w, stride=2, padding=1)
    got = std["conv2d_nchwc"].reference(xb, wp, stride=2, padding=1)
    np.testing.assert_allclose(got, blocked(want, 6), rtol=1e-5, atol=1e-5)
    want = std["conv2d"].reference(x, w, stride=2)
    got = std["conv2d_nchwc_valid"].reference(xb, wp, stride=2)
    np.testing.assert_allclose(got, blocked(want, 6), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(std["global_avg_pool2d_nchwc"].reference(xb),
                               x.mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)
    dw = rand((8, 1, 3, 3), 3)
    dwp = std["pack_depthwise_weights"].reference(dw, block=4)
    np.testing.assert_array_equal(dwp, dw[:, 0].reshape(2, 4, 3, 3).transpose(0, 2, 3, 1))
    np.testing.assert_allclose(
        std["depthwise_conv2d_nchwc"].reference(xb, dwp, stride=2, padding=1),
        blocked(std["depthwise_conv2d"].reference(x, dw, stride=2, padding=1), 4),
        rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(std["max_pool2d_nchwc"].reference(xb, kernel=2),
                                  blocked(std["max_pool2d"].reference(x, kernel=2), 4))


def test_only_a_contraction_vectorized_along_the_output_takes_a_residual():
    std = stdlib()
    assert vectors_along_output(std["conv2d_nchwc"].function())
    assert vectors_along_output(std["matmul"].function())
    assert not vectors_along_output(std["conv2d"].function())
    assert vectors_along_output(std["depthwise_conv2d_nchwc"].function())
    assert not vectors_along_output(std["depthwise_conv2d"].function())


# ---------------------------------------------------------------------------- the pass

@pytest.mark.parametrize("block", BLOCKS)
def test_the_small_cnn_runs_blocked_between_its_convs_with_the_residual_fused(block):
    g = load("small_cnn")
    c = CompiledGraph(g, g.random_params(), {"B": 1}, True, True, isa_target(block), True)
    kernels = [tuple(c.ir.nodes[i].op for i in grp.nodes) for grp in c.groups]
    assert kernels == [
        ("to_nchwc",),                                       # the input, at the edge
        ("conv2d_nchwc", "bias_add_nchwc", "relu"), ("max_pool2d_nchwc",),
        # the 3x3 convolutions on blocked inputs, by Winograd's F(2x2, 3x3)
        ("conv2d_winograd_nchwc", "bias_add_nchwc", "relu"),
        ("conv2d_winograd_nchwc", "bias_add_nchwc", "add", "relu"),   # the residual block
        ("global_avg_pool2d_nchwc",), ("dense_packed",)]
    assert c.layouts["r1"] == f"NCHW{block}c" and c.layouts["x"] == "NCHW"
    assert c.ir.shape_of("r1", c.sizes) == (1, 32 // block, 32, 32, block)
    # the packed weights were computed at build time: no kernel packs them
    assert not any(n.op.startswith(("pack_", "winograd_weights")) for n in c.ir.nodes)
    assert c.weights["n1_w_packed"].shape == (32 // block, 3, 3, 3, 1, block)
    assert c.weights["n2_w_winograd"].shape == (4, 4, 32 // block, 32 // block, block, block)


@pytest.mark.parametrize("block", BLOCKS)
def test_the_block_is_the_targets_lanes(block):
    g = load("small_cnn")
    for target in (isa_target(block), f"c -lanes={block}", run_target(block)):
        c = CompiledGraph(g, g.random_params(), {"B": 1}, True, True, target, True)
        assert c.ir.shape_of("r2", c.sizes) == (1, 32 // block, 16, 16, block), target


@needs_gcc
def test_a_kernel_for_an_isa_the_host_lacks_is_built_not_run():
    """Each ISA's graph is compiled here; it runs where the host has the ISA."""
    g = load("small_cnn")
    p = g.random_params()
    x = rand((1, 3, 32, 32))
    for block in BLOCKS:
        target = isa_target(block)
        c = CompiledGraph(g, p, {"B": 1}, True, True, target, True)
        c.build(g.module, as_target(target), None)
        assert c.kernels and all(Path(k.lib_path).exists() for k in c.kernels)
        why = Target(target).unrunnable_reason()
        if why is None:
            np.testing.assert_allclose(g.build(target, params=p)(x), g.reference(x, params=p),
                                       **TOL)
        else:
            with pytest.raises(tdsl.TdslError, match="cannot run here"):
                g.build(target, params=p)(x)


@pytest.mark.parametrize("target", ["c -lanes=1", "c-embedded -mcpu=cortex-m55"])
def test_no_blocking_without_simd_or_off_the_host(target):
    if target.startswith("c-embedded") and shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed (the Cortex-M target needs it)")
    g = load("small_cnn")
    c = CompiledGraph(g, g.random_params(), {"B": 1}, True, True, target, True)
    assert not c.layouts and "conv2d" in {n.op for n in c.ir.nodes}


def test_an_op_without_a_blocked_form_gets_nchw_back_once():
    g = tdsl.loads("""import std
graph g(x: f32[1, 16, 8, 8]) -> (y: f32[1, 16, 8, 8], z: f32[1, 16, 10, 10]) {
    param w: f32[16, 16, 3, 3]
    c = conv2d(x, w; padding=1)
    y = sigmoid(c)
    z = pad2d(c; padding=1)
}""")["g"]
    c = CompiledGraph(g, g.random_params(), {}, False, True, "c -lanes=8", True,
                      winograd=False)
    ops = [n.op for n in c.ir.nodes]
    assert ops == ["to_nchwc", "conv2d_nchwc", "sigmoid", "from_nchwc", "pad2d",
                   "from_nchwc"]
    assert c.ir.nodes[-1].outputs == ("y",) and c.layouts["y"] == "NCHW"


@needs_gcc
def test_the_way_back_to_nchw_is_a_kernel_of_its_own():
    """from_nchwc before an op with no blocked form is not fused with it: fused, the op
    would read the blocked value a channel at a time, its loop unvectorized."""
    g = tdsl.loads("""import std
op scaled(X: f32[N, C, H, W], S: f32[C]) -> Y: f32[N, C, H, W] {
    Y[n, c, h, w] = X[n, c, h, w] * S[c] + 1.0
}
graph g(x: f32[1, 16, 8, 8]) -> y: f32[1, 16, 8, 8] {
    param w: f32[16, 16, 3, 3]
    param s: f32[16]
    c = conv2d(x, w; padding=1)
    y = scaled(c, s)
}""")["g"]
    params = g.random_params()
    m = g.build("c -lanes=8", params=params, layout=True, winograd=False)
    x = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(np.float32)
    got = m(x)
    c = m.compiled(x)
    groups = [[c.ir.nodes[i].op for i in grp.nodes] for grp in c.groups]
    assert ["from_nchwc"] in groups and ["scaled"] in groups, groups
    want = g.build("c", params=params, layout=False)(x)
    np.testing.assert_allclose(got, want, **TOL)


def test_a_blocked_graph_output_read_by_an_nchw_op_is_still_computed():
    g = tdsl.loads("""import std
graph g(x: f32[1, 8, 6, 6]) -> (c: f32[1, 8, 6, 6], z: f32[1, 8, 8, 8]) {
    param w: f32[8, 8, 3, 3]
    c = conv2d(x, w; padding=1)
    z = pad2d(c; padding=1)
}""")["g"]
    c = CompiledGraph(g, g.random_params(), {}, False, True, "c -lanes=8", True)
    assert [(n.op, n.outputs) for n in c.ir.nodes] == [
        ("to_nchwc", ("x_nchw8c",)), ("conv2d_nchwc", ("c_nchwc",)), ("from_nchwc", ("c",)),
        ("pad2d", ("z",))]


# ---------------------------------------------------------------------------- numbers

def test_a_mobilenet_block_stays_blocked_through_its_depthwise_convs():
    g = load("mobilenet_block")
    c = CompiledGraph(g, g.random_params(), {"B": 1}, True, True, "c -lanes=8", True)
    ops = [n.op for n in c.ir.nodes]
    assert ops.count("to_nchwc") == 1 and ops.count("from_nchwc") == 1
    assert ops[-1] == "from_nchwc" and "depthwise_conv2d_nchwc" in ops
    assert [tuple(f.ops) for f in c.functions][1] == ("depthwise_conv2d_nchwc",
                                                      "bias_add_nchwc", "clip")


BN_AFTER_RELU = """import std
graph g(x: f32[1, 16, 12, 12]) -> y: f32[1, 16, 12, 12] {
    param w1: f32[16, 16, 3, 3]
    param w2: f32[16, 16, 3, 3]
    param ga: f32[16]
    param be: f32[16]
    param mu: f32[16]
    param va: f32[16]
    c1 = conv2d(x, w1; padding=1)
    r1 = relu(c1)
    n1 = batch_norm(r1, ga, be, mu, va)
    y = conv2d(n1, w2; padding=1)
}"""


@needs_gcc
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("fold", [True, False])
def test_a_batch_norm_that_is_not_folded_stays_blocked(fold, block):
    """A batch_norm after a relu cannot fold into the convolution's weights: with folding it
    is a scale_shift (its scale and shift computed at build time), without it stays a
    batch_norm; either runs blocked, its vectors packed like a bias, not between a
    from_nchwc and a to_nchwc (fused into a pool after it, that round trip ran scalar, 5x
    slower)."""
    g = tdsl.loads(BN_AFTER_RELU)["g"]
    p = g.random_params()
    p["va"] = np.abs(p["va"]) + 0.1
    target = run_target(block)
    c = CompiledGraph(g, p, {}, True, fold, target, True)
    ops = [n.op for n in c.ir.nodes]
    blocked = "scale_shift_nchwc" if fold else "batch_norm_nchwc"
    assert blocked in ops and not {"batch_norm", "scale_shift"} & set(ops)
    assert ops.count("to_nchwc") == ops.count("from_nchwc") == 1      # at the edges only
    x = rand((1, 16, 12, 12))
    m = g.build(target, params=p, fold=fold, layout=True)
    np.testing.assert_allclose(m(x), g.reference(x, params=p), **TOL)
    # folded, no square root is left in the kernel; unfolded, its rsqrt is whole-vector
    # code, alone or in a convolution's epilogue: a lane loop there made the fused small CNN
    # (fold=False) 1.2x slower than one kernel per op
    built = m.compiled(x)
    kernels = [k for f, k in zip(built.functions, built.kernels) if blocked in f.fn.name]
    assert kernels and all(("sqrt" in k.source) == (not fold) for k in kernels)
    if not fold:
        assert all("tdsl_sqrt_f32x" in k.source for k in kernels)
    small = load("small_cnn")
    c = CompiledGraph(small, small.random_params(), {"B": 1}, True, False, target, True)
    kernels = [tuple(c.ir.nodes[i].op for i in grp.nodes) for grp in c.groups]
    assert ("conv2d_nchwc", "batch_norm_nchwc", "relu") in kernels


@needs_gcc
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("name, shape", [("small_cnn", (2, 3, 32, 32)),
                                         ("mobilenet_block", (1, 32, 28, 28))])
def test_layout_on_and_off_fused_and_unfused_agree(name, shape, block):
    g = load(name)
    p = g.random_params()
    x = rand(shape)
    want = g.reference(x, params=p)
    target = run_target(block)
    for kw in (dict(layout=True), dict(layout=False), dict(layout=True, fuse=False),
               dict(layout=True, fold=False)):
        np.testing.assert_allclose(g.build(target, params=p, **kw)(x), want, **TOL,
                                   err_msg=f"{kw} on {target}")


@needs_gcc
def test_a_resnet_block_with_a_strided_shortcut_at_other_lanes():
    g = tdsl.loads("""import std
graph g(x: f32[1, 8, 9, 9]) -> y: f32[1, 16, 5, 5] {
    param w1: f32[16, 8, 3, 3]
    param b1: f32[16]
    param w2: f32[16, 16, 3, 3]
    param ws: f32[16, 8, 1, 1]
    c1 = conv2d(x, w1; stride=2, padding=1)
    a1 = bias_add(c1, b1)
    r1 = relu(a1)
    c2 = conv2d(r1, w2; padding=1)
    sc = conv2d(x, ws; stride=2)
    s = add(c2, sc)
    y = relu(s)
}""")["g"]
    p = g.random_params()
    x = rand((1, 8, 9, 9))
    want = g.reference(x, params=p)
    for lanes in (4, *BLOCKS):
        m = g.build(f"c -lanes={lanes}" if lanes == 4 else run_target(lanes), params=p,
                    layout=True)
        np.testing.assert_allclose(m(x), want, **TOL)
        c = m.compiled(x)
        assert c.layouts["r1"] == f"NCHW{lanes}c"
        assert ("conv2d_nchwc", "add", "relu") in [
            tuple(c.ir.nodes[i].op for i in grp.nodes) for grp in c.groups]


@needs_gcc
@pytest.mark.parametrize("block", BLOCKS)
def test_strided_1x1_convolutions_read_one_subsampled_copy_at_stride_1(block):
    # ResNet v1's downsampling block: its first 1x1 and its shortcut both stride 2 over
    # the same input. A 1x1 convolution reads every other pixel and row there, so the
    # layout pass makes the strided input once, contiguous, and both run at stride 1.
    g = tdsl.loads("""import std
graph g(x: f32[1, 16, 9, 9]) -> y: f32[1, 32, 5, 5] {
    param w1: f32[32, 16, 1, 1]
    param ws: f32[32, 16, 1, 1]
    param w3: f32[16, 16, 1, 1]
    c1 = conv2d(x, w1; stride=2)
    sc = conv2d(x, ws; stride=2)
    s = add(c1, sc)
    y = relu(s)
    z = conv2d(x, w3; stride=3)
}""")["g"]
    p = g.random_params()
    x = rand((1, 16, 9, 9))
    m = g.build(run_target(block), params=p, layout=True)
    np.testing.assert_allclose(m(x), g.reference(x, params=p), **TOL)
    nodes = m.compiled(x).ir.nodes
    subsampled = {dict(n.attrs)["stride"]: n.outputs[0] for n in nodes
                  if n.op == "subsample_nchwc"}
    convs = [n for n in nodes if n.op == "conv2d_nchwc_valid"]
    assert sorted(subsampled) == [2, 3]
    assert [n.inputs[0] for n in convs].count(subsampled[2]) == 2
    assert all("stride" not in dict(n.attrs) for n in convs)


WINOGRAD_NET = """import std
graph g(x: f32[1, C, H, W]) -> y: f32[1, C, H, W] {
    param w1: f32[C, C, 3, 3]
    param b1: f32[C]
    param w2: f32[C, C, 3, 3]
    c1 = conv2d(x, w1; padding=1)
    a1 = bias_add(c1, b1)
    r1 = relu(a1)
    c2 = conv2d(r1, w2; padding=1)
    s = add(c2, x)
    y = relu(s)
}"""


def winograd_net(c: int, h: int, w: int):
    """Two 3x3 convolutions with a bias, relus and a residual add: what Winograd takes."""
    text = WINOGRAD_NET.replace("C", str(c)).replace("H", str(h)).replace("W", str(w))
    return tdsl.loads(text)["g"]


@needs_gcc
@pytest.mark.parametrize("block", BLOCKS)
def test_3x3_convolutions_large_enough_run_by_winograd_with_their_epilogues(block):
    target = run_target(block)
    g = winograd_net(64, 14, 15)
    p = g.random_params()
    x = rand((1, 64, 14, 15))          # 7 x 8 tiles (an odd width: a last half tile)
    want = g.reference(x, params=p)
    m = g.build(target, params=p)
    np.testing.assert_allclose(m(x), want, rtol=2e-4, atol=2e-4)
    c = m.compiled(x)
    groups = [tuple(c.ir.nodes[i].op for i in grp.nodes) for grp in c.groups]
    assert ("conv2d_winograd_nchwc", "bias_add_nchwc", "relu") in groups
    assert ("conv2d_winograd_nchwc", "add", "relu") in groups
    direct = g.build(target, params=p, winograd=False)
    np.testing.assert_allclose(direct(x), want, **TOL)
    assert "conv2d_winograd_nchwc" not in [n.op for n in direct.compiled(x).ir.nodes]


@pytest.mark.parametrize("block", BLOCKS)
def test_winograd_is_left_to_convolutions_it_speeds_up(block):
    # 7 columns (4 x 4 tiles for 49 outputs), or 1024 channels (64 MiB of transformed
    # weights, past the 16 MiB measured): the direct sum
    for c, w in ((64, 7), (1024, 14)):
        g = winograd_net(c, 14, w)
        ops = [n.op for n in CompiledGraph(g, g.random_params(), {}, True, True,
                                           isa_target(block), blocked=True).ir.nodes]
        assert "conv2d_nchwc" in ops and "conv2d_winograd_nchwc" not in ops, (c, w)


@needs_gcc
def test_a_fused_dense_takes_dense_s_schedule_without_a_warning():
    g = load("mlp")
    p = g.random_params()
    x = rand((3, 784))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = g.build(params=p, layout=False)
        np.testing.assert_allclose(m(x), g.reference(x, params=p), **TOL)
    c = m.compiled(x)
    assert [tuple(f.ops) for f in c.functions] == [("dense", "relu"), ("dense",)]
    assert c.schedules == ["dense's", "dense's"]
    # dense's schedule packs W^T per block of columns (Wp), as the op alone does
    assert "Wp" in c.kernels[0].source and "Wp" in stdlib()["dense"].build(
        shapes={"N": 3, "K": 784, "M": 128}).source


@pytest.mark.parametrize("block", BLOCKS)
def test_a_graphs_dense_weights_are_packed_once_at_build_time(block):
    """With the layout pass, dense reads weights packed at build time (constant folding),
    panels of 2 x lanes features, the last one padded: no call packs them."""
    g = load("mlp")
    p = g.random_params()
    x = rand((3, 784))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = g.build(run_target(block), params=p, layout=True)
        np.testing.assert_allclose(m(x), g.reference(x, params=p), **TOL)
    c = m.compiled(x)
    assert [tuple(f.ops) for f in c.functions] == [("dense_packed", "relu"), ("dense_packed",)]
    assert c.schedules == ["dense_packed's", "dense_packed's"]
    assert not any(n.op.startswith("pack_") for n in c.ir.nodes)
    panel = 2 * block
    assert c.weights["w2_packed"].shape == (-(-10 // panel), 128, panel)
    np.testing.assert_array_equal(c.weights["w2_packed"][0, :, :min(10, panel)],
                                  p["w2"][:panel].T)


@needs_gcc
def test_tdsl_graph_prints_the_layouts(capsys):
    assert cli.main(["graph", str(EXAMPLES / "small_cnn.tdsl"), "--shape", "B=1",
                     "--layout", "on", "--target", "c -lanes=8"]) == 0
    out = capsys.readouterr().out
    assert "layout: NCHW8c, NCHW1c between convolutions (lanes 8)" in out
    assert "conv2d_winograd_nchwc->c3 + bias_add_nchwc->n3 + add->s3 + relu->r3" in out
    assert "-> r3: 1x4x16x16x8 NCHW8c" in out
    assert cli.main(["graph", str(EXAMPLES / "small_cnn.tdsl"), "--shape", "B=1",
                     "--winograd", "off"]) == 0
    out = capsys.readouterr().out
    assert "conv2d_nchwc->c3 + bias_add_nchwc->n3 + add->s3 + relu->r3" in out
    assert "winograd" not in out
    assert cli.main(["graph", str(EXAMPLES / "small_cnn.tdsl"), "--shape", "B=1",
                     "--layout", "off"]) == 0
    out = capsys.readouterr().out
    assert "NCHW8c" not in out and "-> r1: 1x32x32x32 NCHW" in out


def test_a_blocked_conv_kernel_is_a_tuning_task_with_conv2d_nchwc_s_knobs():
    from tdsl.tuner.fused_task import fused_tasks
    g = load("small_cnn")
    c = CompiledGraph(g, g.random_params(), {"B": 1}, True, True, "c", True)
    tasks = fused_tasks(c)
    conv = next(t for t in tasks if t.workload.op.endswith(
        "conv2d_nchwc+bias_add_nchwc+relu@r1"))
    assert {"nb", "tx", "order", "rows"} <= set(conv.space.names) and len(conv.space) > 1
    wino = next(t for t in tasks if t.workload.op.endswith(
        "conv2d_winograd_nchwc+bias_add_nchwc+add+relu@r3"))
    assert set(wino.space.names) == {"tx", "nb", "whole", "pf"} and len(wino.space) > 1


# ---------------------------------------------------------------------------- channel ops

CHANNEL_OPS = """import std
op concat3(A: f32[N, C1, H, W], B: f32[N, C2, H, W], D: f32[N, C3, H, W])
    -> Y: f32[N, C1 + C2 + C3, H, W] {
    Y[n, c, h, w] = select(c < C1, A[n, c, h, w],
                           select(c < C1 + C2, B[n, c - C1, h, w], D[n, c - C1 - C2, h, w]))
}
op slice_c(X: f32[N, C, H, W]; lo: int, k: int) -> Y: f32[N, k, H, W] {
    Y[n, c, h, w] = X[n, c + lo, h, w]
}
op split_c(X: f32[N, C, H, W]; k: int) -> (A: f32[N, k, H, W], B: f32[N, C - k, H, W]) {
    A[n, c, h, w] = X[n, c, h, w]
    B[n, c, h, w] = X[n, c + k, h, w]
}
"""


def channel_graph(block: int, kind: str, chans: tuple[int, ...], lo: int, k: int) -> str:
    """Convolutions to ``chans`` channels (blocked where ``block`` divides them), a
    ``kind`` over their channels (concat of all of them; slice ``[lo, lo + k)`` or split at
    ``k`` of the first), each result read by a convolution to ``block`` channels (so its input
    is converted to the blocked layout when whole blocks)."""
    body, params = [], []
    for i, c in enumerate(chans):
        params.append(f"    param w{i}: f32[{c}, 8, {1 + 2 * (i % 2)}, {1 + 2 * (i % 2)}]")
        body.append(f"    a{i} = conv2d(x, w{i}; padding={i % 2})")
    if kind == "concat":
        op = "concat" if len(chans) == 2 else "concat3"
        body.append(f"    c = {op}({', '.join(f'a{i}' for i in range(len(chans)))})")
        reads = [("c", sum(chans))]
    elif kind == "slice":
        body.append(f"    c = slice_c(a0; lo={lo}, k={k})")
        reads = [("c", k)]
    else:
        body.append(f"    p, q = split_c(a0; k={k})")
        reads = [("p", k), ("q", chans[0] - k)]
    outs = []
    for j, (v, c) in enumerate(reads):
        params.append(f"    param u{j}: f32[{block}, {c}, 1, 1]")
        body.append(f"    y{j} = conv2d({v}, u{j})")
        outs.append(f"y{j}: f32[1, {block}, 6, 5]")
    head = f"graph g(x: f32[1, 8, 6, 5]) -> ({', '.join(outs)}) {{"
    return CHANNEL_OPS + "\n".join([head, *params, *body, "}"]) + "\n"


@st.composite
def channel_cases(draw):
    block = draw(st.sampled_from(BLOCKS), label="block")
    # whole blocks (the layout pass keeps those blocked) or not (those stay NCHW)
    chan = st.one_of(st.sampled_from([block, 2 * block, 4 * block]),
                     st.integers(1, 3 * block))
    kind = draw(st.sampled_from(["concat", "slice", "split"]), label="kind")
    if kind == "concat":
        chans = tuple(draw(st.lists(chan, min_size=2, max_size=3), label="channels"))
        return block, kind, chans, 0, 0
    c = draw(chan.filter(lambda n: n >= 2), label="channels")
    cut = st.one_of(st.sampled_from([m for m in range(block, c, block)] or [1]),
                    st.integers(1, c - 1))
    if kind == "split":
        return block, kind, (c,), 0, draw(cut, label="k")
    lo = draw(st.one_of(st.just(0), cut), label="lo")
    k = draw(st.integers(1, c - lo), label="k")
    return block, kind, (c,), lo, k


@needs_gcc
@settings(max_examples=10, deadline=None)
@given(channel_cases())
# SqueezeNet's fire module (64 + 64) and DenseNet's dense block (64 + 32 + 32), at each width
@example((8, "concat", (64, 64), 0, 0)).via("SqueezeNet's refused fire module")
@example((8, "concat", (64, 32, 32), 0, 0)).via("DenseNet-121's refused concat")
@example((16, "concat", (64, 64), 0, 0))
@example((16, "concat", (8, 16, 24), 0, 0))       # a blocked input at an offset of 8
@example((8, "slice", (32,), 12, 16))
@example((16, "split", (48,), 16, 16))
def test_channel_concat_split_and_slice_in_the_blocked_layout_match_the_reference(case):
    """Concatenations, slices and splits over channels of blocked activations, whole blocks
    or not, at both block widths: the from_nchwc and to_nchwc around them fuse with them,
    and their reads of a blocked input under a channel guard must pass the call's region
    check (SqueezeNet's and DenseNet-121's concats were refused there at 8 lanes)."""
    block, kind, chans, lo, k = case
    g = tdsl.loads(channel_graph(block, kind, chans, lo, k))["g"]
    p = g.random_params()
    x = rand((1, 8, 6, 5))
    want = g.reference(x, params=p)
    m = g.build(run_target(block), params=p, layout=True)
    got = m(x)
    for a, b in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(a, b, **TOL, err_msg=str(case))
    assert f"NCHW{block}c" in m.compiled(x).layouts.values()
