"""GraphModule.profile and `tdsl graph --profile`: a row per fused kernel, shares that sum to
one, convolutions' and dense layers' flops as the direct formula counts them."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

import tdsl
from tdsl.cli import main

CNN = Path(__file__).resolve().parent.parent / "examples" / "models" / "small_cnn.tdsl"
ROW = re.compile(r"  k\d+ ")            # a kernel's line of the table


def direct_conv_flops(n, f, oh, ow, c, kh, kw) -> int:
    return 2 * n * f * oh * ow * c * kh * kw


# small_cnn at B=1: conv 3->32 3x3 pad 1 on 32x32; two convs 32->32 3x3 pad 1 on 16x16 (after
# the 2x2 pool); dense 32->10 with its bias
CONVS = [direct_conv_flops(1, 32, 32, 32, 3, 3, 3)] + \
    [direct_conv_flops(1, 32, 16, 16, 32, 3, 3)] * 2
DENSE = 2 * 1 * 10 * 32 + 10


@pytest.fixture(scope="module")
def cnn():
    g = tdsl.load(CNN)["small_cnn"]
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return g, g.random_params(), x


@pytest.mark.parametrize("layout", [False, True], ids=["nchw", "blocked"])
def test_profile_rows(cnn, layout):
    """Blocked, the 3x3 convolutions are Winograd's: counted as the direct sum all the same."""
    g, params, x = cnn
    m = g.build(params=params, layout=layout)
    p = m.profile(x, passes=3, peak=100.0)
    c = m.compiled(x)
    assert len(p.rows) == len(c.functions)
    assert [r.index for r in p.rows] == list(range(len(c.functions)))
    assert [r.ops for r in p.rows] == ["+".join(f.ops) for f in c.functions]
    assert sum(r.share for r in p.rows) == pytest.approx(1.0)
    assert all(r.seconds > 0 and r.bytes > 0 and r.gbps > 0 for r in p.rows)
    assert p.call_seconds > 0 and p.call_best <= p.call_seconds
    assert p.kernel_seconds == pytest.approx(sum(r.seconds for r in p.rows))
    convs = [r for r in p.rows if r.anchor.startswith("conv2d")]
    assert [r.flops for r in convs] == CONVS
    assert all(r.bound == "compute" for r in convs)
    # with SIMD, the blocked layout runs the two 16x16 convolutions by Winograd
    winograd = 2 if layout and tdsl.Target("c").lanes > 1 else 0
    assert [r.anchor.startswith("conv2d_winograd") for r in convs].count(True) == winograd
    assert [r.direct_equivalent for r in convs].count(True) == winograd
    (dense,) = [r for r in p.rows if r.anchor.startswith("dense")]
    assert dense.flops == DENSE
    for r in convs + [dense]:
        assert r.gflops == pytest.approx(r.flops / r.seconds / 1e9)
        assert r.peak_percent == pytest.approx(r.gflops)           # of a 100 GFLOP/s peak
    pools = [r for r in p.rows if "pool" in r.anchor]
    assert pools and all(r.bound == "memory" for r in pools)
    assert [op for op, *_ in p.by_op()][0] == max(p.by_op(), key=lambda e: e[1])[0]
    assert sum(n for *_, n in p.by_op()) == len(p.rows)
    text = str(p)
    assert sum(bool(ROW.match(line)) for line in text.splitlines()) == len(p.rows)
    assert "per anchor op:" in text and "peak 100 GFLOP/s fp32 FMA, as given" in text
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.rows[0].seconds = 0.0


@pytest.mark.parametrize("layout", [False, True], ids=["nchw", "blocked"])
def test_the_time_at_the_peak_counts_what_the_fma_peak_bounds(cnn, layout):
    """At a peak no kernel reaches, each f32 convolution and dense layer takes its flops at
    that rate (a Winograd one its tiles' products: (m + 2)^2 per m x m outputs per channel
    pair), and the memory-bound kernels their measured time."""
    g, params, x = cnn
    m = g.build(params=params, layout=layout)
    peak = 1e6                                        # GFLOP/s
    p = m.profile(x, passes=2, peak=peak)
    for r in p.rows:
        if r.anchor.startswith("conv2d_winograd"):
            e = 6 if r.anchor.startswith("conv2d_winograd4") else 4
            tiles = (16 // (e - 2)) ** 2                # the 16x16 maps, 32 -> 32 channels
            assert r.peak_seconds == pytest.approx(2 * tiles * e * e * 32 * 32 / peak / 1e9)
        elif r.bound == "compute":
            assert r.peak_seconds == pytest.approx(r.flops / peak / 1e9)
        else:
            assert r.peak_seconds == r.seconds
    assert p.peak_seconds == pytest.approx(sum(r.peak_seconds for r in p.rows))
    assert p.peak_seconds < p.kernel_seconds
    assert f"at the peak {p.peak_seconds * 1e3:.3f} ms" in str(p)


def test_profile_formula_peak(cnn):
    g, params, x = cnn
    m = g.build(params=params, layout=False)
    p = m.profile(x, passes=1, peak="formula", ghz=2.0)
    assert p.peak_gflops == pytest.approx(tdsl.Target("c").peak_gflops(2.0))
    assert "2.00 GHz, as given" in p.peak_source
    with pytest.raises(tdsl.TdslError, match="peak must be"):
        m.profile(x, peak="fast")


def test_cli_profile(capsys):
    assert main(["graph", str(CNN), "--profile", "--shape", "B=1", "--passes", "2",
                 "--peak", "formula", "--layout", "off"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if ROW.match(line)]
    assert len(rows) == 6                        # as `tdsl graph --layout off` lists them
    assert "conv2d+bias_add+relu" in rows[0] and "per anchor op:" in out
    assert "profile of graph small_cnn at B=1" in out


@pytest.mark.parametrize("argv, message", [
    (["--shape", "Q=1"], "graph small_cnn has no size Q"),
    (["--shape", "B=x"], "--shape expects NAME=INT"),
    (["--shape", "B=1", "--graph", "nope"], "has no graph 'nope'"),
    ([], "give the size B with --shape"),
])
def test_cli_profile_errors(capsys, argv, message):
    assert main(["graph", str(CNN), "--profile", *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
