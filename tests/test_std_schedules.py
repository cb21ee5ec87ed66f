"""The standard library's hand-written CPU schedules: each builds, with sizes taken at call
time or fixed at build time, and matches the reference on sizes no tile divides."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl

SIZES = st.sampled_from([1, 2, 3, 5, 7, 13, 17, 33])
LANES = tdsl.Target().lanes          # the host's: schedules are written in its vectors


def _check(op, arrays, fixed: bool):
    shapes = op.sizes_of(*arrays) if fixed else None
    kernel = op.build(shapes=shapes)
    np.testing.assert_allclose(kernel(*arrays), op.reference(*arrays), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["matmul", "batch_matmul"])
def test_hand_schedule_is_the_default(name):
    op = tdsl.stdlib[name]
    assert "default" in op.schedule_names()
    # the register tile shows in the C: named vector accumulators, no array of them
    source = op.build(shapes=op.sizes_of(*_arrays(name, 2, 24, 8, 40))).source
    assert f"tdsl_f32x{LANES} CL_0" in source


def _arrays(name, b, m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    if name == "matmul":
        return (rng.standard_normal((m, k), dtype=np.float32),
                rng.standard_normal((k, n), dtype=np.float32))
    return (rng.standard_normal((b, m, k), dtype=np.float32),
            rng.standard_normal((b, k, n), dtype=np.float32))


@pytest.mark.parametrize("b, m, k, n", [(1, 1, 1, 3), (1, 1, 2, 3), (1, 2, 1, 5)])
def test_a_tile_clipped_to_a_few_columns_keeps_its_stores(b, m, k, n):
    # the register tile shrinks to the N columns there are, and its vectorized copy-out reads
    # it with masked loads: gcc 12 dropped the stores into a 3-float stack array so read, and
    # batch_matmul returned stack garbage (stack arrays are now whole 64-byte lines)
    _check(tdsl.stdlib["batch_matmul"], _arrays("batch_matmul", b, m, k, n), fixed=True)


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(["matmul", "batch_matmul"]), b=st.sampled_from([1, 3]), m=SIZES,
       k=SIZES, n=SIZES, fixed=st.booleans())
def test_hand_schedules_match_reference(name, b, m, k, n, fixed):
    _check(tdsl.stdlib[name], _arrays(name, b, m, k, n), fixed)


@settings(max_examples=8, deadline=None)
@given(n=SIZES, k=SIZES, m=SIZES, fixed=st.booleans())
def test_dense_hand_schedule_matches_reference(n, k, m, fixed):
    rng = np.random.default_rng(n * 100 + k * 10 + m)
    x, w = rng.standard_normal((n, k), dtype=np.float32), rng.standard_normal((m, k),
                                                                            dtype=np.float32)
    _check(tdsl.stdlib["dense"], (x, w, rng.standard_normal(m, dtype=np.float32)), fixed)


REGISTERS = tdsl.Target().registers


def _widest_tj(ti: int) -> int:
    """The widest column tile the host's registers hold beside ``ti`` rows (the template's
    ``require ti * tj <= lanes * (registers - 2)``): 3 vectors at ti=4 on AVX2, 6 on AVX-512."""
    return LANES * max(m for m in (1, 2, 3, 4, 5, 6, 8) if ti * m <= REGISTERS - 2)


@pytest.mark.parametrize("ti,tj", [(4, LANES), (4, _widest_tj(4)), (6, _widest_tj(6)),
                                   (8, _widest_tj(8))])
def test_matmul_knobs(ti, tj):
    op = tdsl.stdlib["matmul"]
    a, b = _arrays("matmul", 1, 29, 11, 70)
    kernel = op.build(config={"ti": ti, "tj": tj})
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_unknown_knob_value_is_a_schedule_error():
    with pytest.raises(tdsl.ScheduleError, match="ti"):
        tdsl.stdlib["matmul"].build(config={"ti": 9})


@settings(max_examples=10, deadline=None)
@given(n=st.sampled_from([1, 2]), c=st.sampled_from([1, 3, 5]), f=st.sampled_from([1, 4, 13]),
       h=st.sampled_from([3, 7, 10]), w=st.sampled_from([3, 9, 17]),
       k=st.sampled_from([1, 3]), stride=st.sampled_from([1, 2]),
       padding=st.sampled_from([0, 1, 2]), dilation=st.sampled_from([1, 2]),
       fixed=st.booleans())
def test_conv2d_hand_schedule_matches_reference(n, c, f, h, w, k, stride, padding, dilation,
                                                fixed):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((f, c, k, k), dtype=np.float32)
    _check_conv("conv2d", x, wt, dict(stride=stride, padding=padding, dilation=dilation), fixed)


def _check_conv(name, x, wt, attrs, fixed):
    op = tdsl.stdlib[name]
    (_, _, h, w), k = x.shape, wt.shape[-1]
    reach = attrs["dilation"] * (k - 1) + 1
    if h + 2 * attrs["padding"] < reach or w + 2 * attrs["padding"] < reach:
        return                               # no output position: nothing to compare
    shapes = op.sizes_of(x, wt, **attrs) if fixed else None
    kernel = op.build(shapes=shapes, **attrs)
    np.testing.assert_allclose(kernel(x, wt), op.reference(x, wt, **attrs), rtol=1e-4,
                               atol=1e-4)


@settings(max_examples=10, deadline=None)
@given(n=st.sampled_from([1, 2]), c=st.sampled_from([1, 3, 5]),
       h=st.sampled_from([3, 7, 10]), w=st.sampled_from([3, 9, 17, 33]),
       k=st.sampled_from([1, 3]), stride=st.sampled_from([1, 2]),
       padding=st.sampled_from([0, 1, 2]), dilation=st.sampled_from([1, 2]),
       fixed=st.booleans())
def test_depthwise_hand_schedule_matches_reference(n, c, h, w, k, stride, padding, dilation,
                                                   fixed):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((c, 1, k, k), dtype=np.float32)
    _check_conv("depthwise_conv2d", x, wt,
                dict(stride=stride, padding=padding, dilation=dilation), fixed)


def _conv_arrays(depthwise: bool, c=5, f=19, h=9, w=13, seed=2):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((c, 1, 3, 3) if depthwise else (f, c, 3, 3), dtype=np.float32)
    return x, wt


# the template requires nb * ty * tx <= registers - 2: the third takes as many blocks of
# 7 columns as the host holds (2 on AVX2, 4 on AVX-512)
@pytest.mark.parametrize("config", [{"nb": 1, "tx": 14}, {"nb": 3, "tx": 4, "rows": True},
                                    {"nb": min(4, (REGISTERS - 2) // 7), "tx": 7,
                                     "order": "rsc"}])
def test_conv2d_knobs(config):
    op = tdsl.stdlib["conv2d"]
    x, wt = _conv_arrays(False)
    kernel = op.build(shapes=op.sizes_of(x, wt, padding=1), config=config, padding=1)
    np.testing.assert_allclose(kernel(x, wt), op.reference(x, wt, padding=1), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("ty", [1, 3, 7])
def test_depthwise_knobs(ty):
    op = tdsl.stdlib["depthwise_conv2d"]
    x, wt = _conv_arrays(True)
    kernel = op.build(shapes=op.sizes_of(x, wt, padding=1), config={"ty": ty, "xu": 1 + ty % 2}, padding=1)
    np.testing.assert_allclose(kernel(x, wt), op.reference(x, wt, padding=1), rtol=1e-4,
                               atol=1e-4)


def test_conv2d_schedule_keeps_a_register_tile():
    """The default tile (registers / 16 blocks of `lanes` filters x 7 columns: 14 on
    AVX-512, 7 on AVX2) is that many named vector accumulators, and the packed weights are
    read as whole vectors (tests/test_layout.py checks each target)."""
    from tdsl.target import Target
    t = Target("c")
    op = tdsl.stdlib["conv2d"]
    x, wt = _conv_arrays(False, c=8, f=32, h=14, w=14)
    source = op.build(shapes=op.sizes_of(x, wt, padding=1), padding=1).source
    tile = t.registers // 16 * 7
    assert f"tdsl_f32x{t.lanes} PL_0" in source and f"PL_{tile - 1}" in source
    assert f"PL_{tile}," not in source and f"PL_{tile};" not in source
    assert f"tdsl_load_f32x{t.lanes}(&Wp[" in source


# ------------------------------------------------- row-local norms and the pools (hand schedules)

ROW_OPS = ["softmax", "layer_norm"]
POOLS = ["max_pool2d", "avg_pool2d", "global_avg_pool2d"]


@pytest.mark.parametrize("name", ROW_OPS + POOLS)
def test_norm_and_pool_hand_schedules_are_the_default(name):
    op = tdsl.stdlib[name]
    assert "default" in op.schedule_names()
    attrs = {"kernel": 2} if name in ("max_pool2d", "avg_pool2d") else {}
    assert op.schedule(**attrs).knobs          # a tuning template, not a fixed schedule


@pytest.mark.parametrize("name,config", [("max_pool2d", {"window": "inside"}),
                                         ("max_pool2d", {"window": "outside"}),
                                         ("avg_pool2d", {"at": "y"}),
                                         ("avg_pool2d", {"at": "x"})])
@pytest.mark.parametrize("attrs", [dict(kernel=3, stride=2, padding=1), dict(kernel=2)])
def test_pool_knobs(name, config, attrs):
    op = tdsl.stdlib[name]
    x = np.random.default_rng(0).standard_normal((2, 3, 13, 17), dtype=np.float32)
    got = op.build(config=config, shapes=op.sizes_of(x, **attrs), **attrs)(x)
    np.testing.assert_allclose(got, op.reference(x, **attrs), rtol=1e-4, atol=1e-5)


def _row_arrays(name, n, d, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, d), dtype=np.float32) * 4).astype(np.float32)
    if name == "softmax":
        return (x,)
    return x, rng.standard_normal(d, dtype=np.float32), rng.standard_normal(d, dtype=np.float32)


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(ROW_OPS), n=SIZES, d=st.sampled_from([1, 5, 16, 17, 33, 64, 100]),
       fixed=st.booleans())
def test_row_local_schedules_match_reference(name, n, d, fixed):
    _check(tdsl.stdlib[name], _row_arrays(name, n, d), fixed)


@pytest.mark.parametrize("name", ROW_OPS)
@pytest.mark.parametrize("vectors", [1, 2, 4])
def test_row_local_knobs(name, vectors):
    op = tdsl.stdlib[name]
    arrays = _row_arrays(name, 3, 70)
    kernel = op.build(config={"vec": vectors * LANES})
    np.testing.assert_allclose(kernel(*arrays), op.reference(*arrays), rtol=1e-4, atol=1e-5)


def test_softmax_schedule_is_row_local():
    """One parallel loop over the rows; the row maximum and sum live in it (no workspace of
    the whole tensor); exp is the whole-vector helper, not libm's expf; the output is scaled
    by one reciprocal per row, not divided element by element."""
    op = tdsl.stdlib["softmax"]
    x = _row_arrays("softmax", 64, 256)[0]
    kernel = op.build(shapes=op.sizes_of(x))
    assert kernel.source.count("#pragma omp parallel for") == 1
    assert "tdsl_alloc" not in kernel.source and "expf(" not in kernel.source
    assert f"tdsl_exp_f32x{LANES}(" in kernel.source
    assert "/ tdsl_bcast" not in kernel.source


@settings(max_examples=12, deadline=None)
@given(name=st.sampled_from(POOLS), n=st.sampled_from([1, 2]), c=st.sampled_from([1, 3]),
       h=st.sampled_from([1, 4, 7, 19]), w=st.sampled_from([1, 5, 18, 35]),
       kernel=st.sampled_from([1, 2, 3]), stride=st.sampled_from([1, 2]),
       padding=st.sampled_from([0, 1]), fixed=st.booleans())
def test_pool_hand_schedules_match_reference(name, n, c, h, w, kernel, stride, padding, fixed):
    op = tdsl.stdlib[name]
    x = np.random.default_rng(0).standard_normal((n, c, h, w), dtype=np.float32)
    attrs = {} if name == "global_avg_pool2d" else dict(kernel=kernel, stride=stride,
                                                        padding=padding)
    if attrs and (2 * padding > kernel or h + 2 * padding < kernel
                  or w + 2 * padding < kernel):
        return                               # no output, or windows of padding only
    shapes = op.sizes_of(x, **attrs) if fixed else None
    got = op.build(shapes=shapes, **attrs)(x)
    np.testing.assert_allclose(got, op.reference(x, **attrs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("whole", [0, 1])
@pytest.mark.parametrize("h, w", [(5, 6), (14, 14)])
def test_winograd_products_per_row_of_tiles_or_for_all_tiles_match_numpy(whole, h, w):
    """conv2d_winograd_nchwc computes its 16 channel sums per row of tiles (whole = 0) or
    for every tile at once, each transformed weight read once (whole = 1), which is the
    default where the weights outweigh a row's products (C >= tiles: ResNet's 256 x 14 x 14,
    where re-reading 4 MiB per row from memory cost 1.6-2x the time inside the model)."""
    import numpy_ref as ref
    op = tdsl.stdlib["conv2d_winograd_nchwc"]
    rng = np.random.default_rng(h + whole)
    cb, fb = 2, 3
    x = rng.standard_normal((1, cb, h, w, LANES), dtype=np.float32)
    u = rng.standard_normal((4, 4, fb, cb, LANES, LANES), dtype=np.float32)   # [.., FB, CB, CI, FI]
    got = op.build(shapes=op.sizes_of(x, u), config={"whole": whole})(x, u)
    np.testing.assert_allclose(got, ref.conv2d_winograd_nchwc(x, u), rtol=1e-4, atol=1e-3)
    defaults = {hw: op.schedule(shapes=dict(N=1, CB=256 // LANES, CI=LANES, H=hw, W=hw,
                                            FB=256 // LANES, FI=LANES)).knobs
                for hw in (14, 56)}
    assert [k.default for k in defaults[14] if k.name == "whole"] == [1]
    assert [k.default for k in defaults[56] if k.name == "whole"] == [0]
