"""Winograd's F(4x4, 3x3) (`conv2d_winograd4_nchwc`, `winograd4_weights`): the op against
numpy and against the direct sum at sizes 4 does not divide, random schedules from its knob
space, AVX2 code, and the layout pass's choice between F(4x4), F(2x2) and the direct sum.

Precision: F(4x4)'s transforms have entries up to 8 (At) and 5 (Bt) and G's 1/6 and 1/24
are inexact in f32, so its result differs from the direct sum by more than F(2x2)'s. On
random data (unit-normal inputs, weights scaled by 1 / sqrt(9 C)) the largest difference
measured, relative to the largest output, was 7.5e-6 at 64 channels, 8.5e-6 at 128, 1.1e-5
at 256 and 1.6e-5 at 512 (F(2x2): 0.9e-6 to 2.7e-6), growing about as sqrt(C). The tests
bound it by 1e-4 of the largest output: 6x the worst seen, well below an error that a
wrong transform entry makes (about the output's own size). An elementwise rtol means
nothing for the outputs near zero that a sum of signed products makes.
"""
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.lowering.graph import layout
from tdsl.graph_api import CompiledGraph
from tdsl.tuner.log import Workload
from tdsl.tuner.task import Task

import numpy_ref as ref
from block_targets import BLOCKS, isa_target, run_target
from test_graph_layout import winograd_net

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
LANES = tdsl.Target().lanes
OP = tdsl.stdlib["conv2d_winograd4_nchwc"]
REL = 1e-4             # of the largest output (the module's docstring)


def _case(cb, ci, fb, fi, h, w, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, cb, h, w, ci), dtype=np.float32)
    wt = (rng.standard_normal((fb * fi, cb * ci, 3, 3)) / np.sqrt(9 * cb * ci)).astype(
        np.float32)
    direct = ref.conv2d_nchwc(x, ref.pack_conv_weights(wt, ci, fi), padding=1)
    return x, wt, direct


def _close(got, want):
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= REL, f"max error {err:.2e} of the largest output, above {REL}"


def test_the_weights_and_the_numpy_reference_are_the_direct_sum():
    x, wt, direct = _case(2, 3, 2, 2, 9, 6)
    u = tdsl.stdlib["winograd4_weights"].reference(wt, in_block=3, out_block=2)
    np.testing.assert_allclose(u, ref.winograd4_weights(wt, 3, 2), rtol=1e-6, atol=1e-7)
    # in float64 the transforms are exact: the numpy reference is the direct sum to 1e-6
    np.testing.assert_allclose(ref.conv2d_winograd4_nchwc(x, u), direct, rtol=1e-5, atol=1e-5)
    _close(OP.reference(x, u), direct)


@needs_gcc
@pytest.mark.parametrize("h, w", [(5, 7), (9, 6), (13, 14), (4, 1), (1, 3), (28, 30)])
def test_odd_sizes_match_the_direct_sum(h, w):
    """A last tile past a size that 4 does not divide reads zeros and stores only what is
    inside: every size from 1 to 3 past a multiple of 4 (and one row or column alone)."""
    x, wt, direct = _case(2, LANES, 3, LANES, h, w, seed=h * 31 + w)
    u = ref.winograd4_weights(wt, LANES, LANES)
    kernel = OP.build(shapes=OP.sizes_of(x, u))
    got = kernel(x, u)
    _close(got, direct)
    np.testing.assert_allclose(got, ref.conv2d_winograd4_nchwc(x, u), rtol=1e-3,
                               atol=REL * np.abs(direct).max())


@needs_gcc
@pytest.mark.parametrize("whole", [0, 1])
def test_products_per_row_of_tiles_or_for_all_tiles_match_numpy(whole):
    x, wt, direct = _case(2, LANES, 3, LANES, 10, 15, seed=whole)
    u = ref.winograd4_weights(wt, LANES, LANES)
    got = OP.build(shapes=OP.sizes_of(x, u), config={"whole": whole})(x, u)
    _close(got, direct)


@needs_gcc
@pytest.mark.parametrize("level", ["c -march=x86-64-v3", "c -march=x86-64-v4"])
def test_random_schedules_from_the_knob_space_match_numpy(level):
    """The default and six configurations drawn from the space, at a size neither 4 nor
    the register tiles divide, for AVX2 and AVX-512 (run where the host has the ISA)."""
    target = isa_target(8 if "v3" in level else 16)
    lanes = tdsl.Target(target).lanes
    sizes = {"N": 1, "CB": 2, "CI": lanes, "H": 11, "W": 13, "FB": 4, "FI": lanes}
    task = Task(Workload.make("std", "conv2d_winograd4_nchwc", sizes, {}, target))
    space = task.space
    rng = np.random.default_rng(7)
    indices = [space.default_index(), *space.sample(rng, 6, exclude=[space.default_index()])]
    x, wt, direct = _case(2, lanes, 4, lanes, 11, 13, seed=3)
    u = ref.winograd4_weights(wt, lanes, lanes)
    runs = tdsl.Target(target).unrunnable_reason() is None
    for i in indices:
        config = space.config(i)
        kernel = OP.build(target, shapes=sizes, config=config)
        if runs:
            err = np.abs(kernel(x, u) - direct).max() / np.abs(direct).max()
            assert err <= REL, (config, err)


def test_the_default_tile_follows_the_registers_and_the_rows():
    """Per row of tiles 7 tiles x 4 vectors on AVX-512; on AVX2, one vector x 14 tiles
    where a row (or, computing all tiles at once, the image) has 14, else x 7: the
    broadcast input needs a register of its own there (AVX-512's FMA reads it from memory),
    and 7 x 2 spilled an accumulator. For all tiles at once (the weights outweigh 4x the
    products: 256 x 14 x 14) the tile spans two rows of 4 tiles, 8 x 2 (8 x 1). Where the
    weights (36 * C * F floats) do not fit in L2, they are prefetched and all tiles are
    computed at once (128 x 28 x 28)."""
    def default(target, c, hw):
        t = tdsl.Target(target)
        shapes = dict(N=1, CB=c // t.lanes, CI=t.lanes, H=hw, W=hw, FB=c // t.lanes,
                      FI=t.lanes)
        knobs = {k.name: k.default for k in OP.schedule(target=target, shapes=shapes).knobs}
        assert knobs.pop("pf") == int(36 * c * c * 4 >= t.constants()["l2"])
        assert knobs.pop("bdrow") == 1
        return knobs
    v4, v3 = "c -march=x86-64-v4", "c -march=x86-64-v3"
    assert default(v4, 64, 56) == {"tx": 7, "nb": 4, "whole": 0}
    whole = int(36 * 128 * 128 * 4 >= tdsl.Target(v3).constants()["l2"])
    assert default(v3, 128, 28) == {"tx": 14 if whole else 7, "nb": 1, "whole": whole}
    assert default(v3, 64, 56) == {"tx": 14, "nb": 1, "whole": 0}
    assert default(v3, 32, 28) == {"tx": 7, "nb": 1, "whole": 0}
    assert default(v3, 512, 7) == {"tx": 4, "nb": 2, "whole": 1}
    assert default(v4, 256, 14) == {"tx": 8, "nb": 2, "whole": 1}
    assert default(v3, 256, 14) == {"tx": 8, "nb": 1, "whole": 1}
    # 16 registers: accumulators, a weight vector per block and the broadcast input
    for c, hw in [(16, 112), (64, 56), (128, 28), (32, 28), (256, 14), (512, 7), (64, 9)]:
        tile = default(v3, c, hw)
        assert tile["nb"] * tile["tx"] + tile["nb"] + 1 <= 16, (c, hw, tile)


def _net(c: int, s: int):
    return winograd_net(c, s, s)


def test_the_rule_takes_f4_from_28_within_the_weight_limit():
    assert layout.winograd_tiles((56, 56), 64, 64) == 4
    assert layout.winograd_tiles((28, 30), 128, 128) == 4
    assert layout.winograd_tiles((27, 56), 64, 64) == 2        # below 28: F(2x2)
    assert layout.winograd_tiles((14, 14), 256, 256) == 2      # 9.4 MiB for F(4x4)
    assert layout.winograd_tiles((56, 56), 256, 256) == 2
    assert layout.winograd_tiles((14, 14), 512, 512) == 2       # 16 MiB for F(2x2)
    assert layout.winograd_tiles((7, 7), 512, 512) == 2         # 7 x 7 from 512 channels
    assert layout.winograd_tiles((7, 7), 256, 256) is None
    assert layout.winograd_tiles((6, 6), 512, 512) is None
    assert layout.winograd_tiles((7, 7), 1024, 512) is None     # 32 MiB


@pytest.mark.parametrize("block", BLOCKS)
def test_the_layout_pass_picks_f4_where_the_rule_says(block):
    for (c, s), want in (((32, 28), "conv2d_winograd4_nchwc"),
                         ((32, 16), "conv2d_winograd_nchwc"), ((32, 7), "conv2d_nchwc")):
        g = _net(c, s)
        ops = [n.op for n in CompiledGraph(g, g.random_params(), {}, True, True,
                                           isa_target(block), blocked=True).ir.nodes]
        assert ops.count(want) == 2, (c, s, ops)


@needs_gcc
@pytest.mark.parametrize("block", BLOCKS)
def test_a_graph_runs_f4_with_its_epilogues_and_the_weights_folded(block):
    target = run_target(block)
    g = _net(2 * block, 30)            # 8 x 8 tiles, the last a half one
    p = g.random_params()
    x = np.random.default_rng(2).standard_normal((1, 2 * block, 30, 30)).astype(np.float32)
    want = g.reference(x, params=p)
    m = g.build(target, params=p)
    _close(m(x), want)
    c = m.compiled(x)
    groups = [tuple(c.ir.nodes[i].op for i in grp.nodes) for grp in c.groups]
    assert ("conv2d_winograd4_nchwc", "bias_add_nchwc", "relu") in groups
    assert ("conv2d_winograd4_nchwc", "add", "relu") in groups
    assert not any(n.op == "winograd4_weights" for n in c.ir.nodes)    # folded
    assert c.weights["w1_winograd"].shape == (6, 6, 2, block, 2, block)
