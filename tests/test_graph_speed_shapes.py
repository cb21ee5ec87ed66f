"""The register tiles of the blocked convolutions come from the target, not from the code:
16 vector registers (AVX2, x86-64-v3) and 32 (AVX-512, x86-64-v4) give different tiles, each
within the register budget, and every one computes the same numbers. Code shape and
correctness only: no timing here (benchmarks/bench_graphs.py --profile measures)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tdsl
from tdsl.target import Target

AVX2, AVX512 = "c -march=x86-64-v3", "c -march=x86-64-v4"

# ResNet-50's shapes, blocked by the target's lanes: a 1x1 reducing convolution, a 3x3 with
# stride 2, a Winograd layer at 56x56 and one at 8x8
C_, F_ = 256, 64


def _sizes(target: str, c=C_, f=F_, h=56, k=1) -> dict:
    lanes = Target(target).lanes
    return dict(N=1, CB=c // lanes, IH=h, IW=h, CI=lanes, FB=f // lanes, KH=k, KW=k,
                FI=lanes)


def _default(op: str, target: str, shapes: dict, **attrs) -> dict:
    return tdsl.stdlib[op].schedule(target=target, shapes=shapes, **attrs).default_config()


@pytest.mark.parametrize("op,k", [("conv2d_nchwc_valid", 1), ("conv2d_nchwc", 3)])
def test_direct_conv_tile_follows_the_registers(op, k):
    attrs = {"padding": 1, "stride": 2} if k == 3 else {}
    avx2 = _default(op, AVX2, _sizes(AVX2, k=k), **attrs)
    avx512 = _default(op, AVX512, _sizes(AVX512, k=k), **attrs)
    # 16 registers: 4 vectors of output channels x 3 columns, each broadcast input feeding
    # 4 FMAs (1 x 7 fed each broadcast to one FMA and was load-bound)
    assert (avx2["nb"], avx2["ty"], avx2["tx"]) == (4, 1, 3)
    for t, cfg in ((AVX2, avx2), (AVX512, avx512)):
        assert cfg["nb"] * cfg["ty"] * cfg["tx"] <= Target(t).registers - 2
    # 32 registers: 2 x 1 x 7 (each broadcast input feeding 2 FMAs, each weight vector 7)
    assert (avx512["nb"], avx512["ty"], avx512["tx"]) == (2, 1, 7)


@pytest.mark.parametrize("target", [AVX2, AVX512])
def test_direct_conv_tile_leaves_every_thread_a_block_of_filters(target):
    """With 2 blocks of output channels (16 filters on AVX2, 32 on AVX-512) the 3x3 tile
    takes one block and 7 columns, so the parallel loop over blocks has two iterations, not
    one, and the tile still has 7 accumulators, not 3."""
    lanes = Target(target).lanes
    cfg = _default("conv2d_nchwc", target, _sizes(target, c=64, f=2 * lanes, k=3),
                   padding=1)
    assert cfg["nb"] == 1 and cfg["tx"] * cfg["ty"] >= 7


@pytest.mark.parametrize("target", [AVX2, AVX512])
@pytest.mark.parametrize("blocks", [1, 2, 3])
def test_pointwise_tile_takes_few_filter_blocks_whole(target, blocks):
    """With fewer blocks of output channels than a 2 x 7 tile per thread needs (MobileNetV2's
    16, 24 and 32 filters), the 1x1 tile takes them all (each broadcast input feeds every
    block's FMA) and the threads share the output's rows instead of the blocks. On AVX-512
    as many blocks as 7 columns of each fit the registers with 6 to spare: 2 blocks at
    28x28, 43 -> 31 us; MobileNetV2's 3 half-width blocks at 56x56, 145 -> 113 us. On AVX2
    the columns shrink to fit the blocks, their weight vectors and the broadcast input
    (2 x 5, 3 x 3, 4 x 3): one block x 7 columns, 8 loads for 7 FMAs, had run these
    layers at 60% of the FMA peak."""
    t = Target(target)
    cfg = _default("conv2d_nchwc_valid", target,
                   _sizes(target, c=64, f=blocks * t.lanes, k=1))
    want = (blocks, 7) if t.registers >= 32 else {1: (1, 10), 2: (2, 5), 3: (3, 3)}[blocks]
    assert (cfg["nb"], cfg["tx"]) == want
    assert cfg["rows"] == 1
    assert cfg["nb"] * cfg["ty"] * cfg["tx"] <= t.registers - 2


@pytest.mark.parametrize("target", [AVX2, AVX512])
@pytest.mark.parametrize("filters", [2, 4, 8])
def test_first_conv_tile_shares_each_broadcast_across_filter_blocks(target, filters):
    """An RGB image's convolution (one input channel per block, ResNet-50's 7x7/2 stem):
    each tap broadcasts tx input values, so the tile takes two filter blocks where the
    parallel loop still gets two iterations of them (1.13 -> 0.94 ms on AVX-512, one
    thread), one with fewer; on AVX2 2 x 1 x 4 where it has 8 blocks (4 x 1 x 3, as the
    other convolutions take, spilled an accumulator here: 12 + 4 weight vectors + the
    broadcast input are 17 registers)."""
    t = Target(target)
    shapes = dict(N=1, CB=3, IH=224, IW=224, CI=1, FB=filters, KH=7, KW=7, FI=t.lanes)
    cfg = _default("conv2d_nchwc", target, shapes, padding=3, stride=2)
    big = filters * t.registers >= 128
    want = ((2, 1, 4) if big else (1, 1, 7)) if t.registers == 16 else \
        ((2, 1, 7) if big else (1, 1, 7))
    assert (cfg["nb"], cfg["ty"], cfg["tx"]) == want
    assert cfg["nb"] * cfg["ty"] * cfg["tx"] <= t.registers - 2


@pytest.mark.parametrize("w,expect", [(56, (1, 14)), (8, (2, 7))])
def test_winograd_tile_follows_the_registers_and_the_width(w, expect):
    lanes = Target(AVX2).lanes
    shapes = dict(N=1, CB=64 // lanes, H=w, W=w, CI=lanes, FB=64 // lanes, FI=lanes)
    cfg = _default("conv2d_winograd_nchwc", AVX2, shapes)
    assert (cfg["nb"], cfg["tx"]) == expect
    wide = _default("conv2d_winograd_nchwc", AVX512,
                    dict(shapes, CB=4, CI=16, FB=4, FI=16))
    assert wide["nb"] * wide["tx"] <= Target(AVX512).registers - 2


def _runnable(target: str) -> bool:
    return Target(target).unrunnable_reason() is None


@pytest.mark.parametrize("target", [AVX2, AVX512, "c"])
def test_default_tiles_compute_the_reference(target):
    if not _runnable(target):
        pytest.skip(f"{target} does not run on this host")
    t = Target(target)
    rng = np.random.default_rng(0)
    lanes = t.lanes
    std = tdsl.stdlib
    # odd sizes: column and filter-block tails of the 4 x 3 and 2 x 7 tiles
    x = rng.standard_normal((1, 2, 11, 13, lanes), dtype=np.float32)
    w1 = rng.standard_normal((3, 2, 1, 1, lanes, lanes), dtype=np.float32)
    w3 = rng.standard_normal((5, 2, 3, 3, lanes, lanes), dtype=np.float32)
    op = std["conv2d_nchwc_valid"]
    got = op.build(target, shapes=op.sizes_of(x, w1))(x, w1)
    np.testing.assert_allclose(got, op.reference(x, w1), rtol=1e-4, atol=1e-4)
    op = std["conv2d_nchwc"]
    got = op.build(target, shapes=op.sizes_of(x, w3, padding=1, stride=2), padding=1,
                   stride=2)(x, w3)
    np.testing.assert_allclose(got, op.reference(x, w3, padding=1, stride=2), rtol=1e-4,
                               atol=1e-4)
    # an RGB stem's tile (one input channel per block, 8 filter blocks: AVX2's 2 x 1 x 4),
    # 7x7 at stride 2 over a width that leaves the columns a tail
    rgb = rng.standard_normal((1, 3, 21, 23, 1), dtype=np.float32)
    w7 = rng.standard_normal((8, 3, 7, 7, 1, lanes), dtype=np.float32)
    got = op.build(target, shapes=op.sizes_of(rgb, w7, padding=3, stride=2), padding=3,
                   stride=2)(rgb, w7)
    np.testing.assert_allclose(got, op.reference(rgb, w7, padding=3, stride=2), rtol=1e-4,
                               atol=1e-4)


def test_avx2_source_holds_the_tile_in_named_vectors():
    """The 4 x 3 tile on AVX2 is 12 named 8-lane accumulators, none more (a spilled array
    would have no names)."""
    lanes = Target(AVX2).lanes
    op = tdsl.stdlib["conv2d_nchwc_valid"]
    func = op.lower(target=AVX2, shapes=_sizes(AVX2, h=14))
    from tdsl.emit_c.c import emit_c
    module = emit_c(func, target=Target(AVX2))
    source = getattr(module, "source", None) or str(module)
    names = set(re.findall(r"\bYL_(\d+)\b", source))
    assert f"tdsl_f32x{lanes} YL_0" in source
    assert max(map(int, names)) == 11
