"""Every std op at the edge of its validity: the reference and the compiled C kernel accept
the same calls, refuse the others with the same words, and agree on the values (issue 24,
docs/semantics.md).

The sizes are drawn where validity changes: for a size with a positive part in a floor
division's numerator (``IH`` in ``(IH + 2 * padding - dilation * (KH - 1) - 1) // stride``,
``C`` in ``C // block``), the values that make a numerator -1, 0 or 1, or one less than or a
multiple of its divisor (an output of size 0 or 1, the smallest input that is valid, the
largest one that is not); the other sizes are 0 to 3. Attributes are drawn from a few
stride, dilation, padding and block combinations, the ones that broke the kernel among them
(``conv2d(stride=2, dilation=3)`` on a 7x7 image and a 3x3 kernel, whose lowered output size
``(IH - 3 * KH) // 2 + 2`` has a negative numerator on that valid call).
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tdsl
import tdsl.testing as tt
from tdsl.errors import CallError
from tdsl.frontend.to_te import ranks_for_pack
from tdsl.lowering import te
from tdsl.lowering.arith.evaluate import UnboundVar, eval_index
from tdsl.lowering.arith.linear import exact

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

# (stride, padding, dilation): unit, the issue's two, a stride past the window, padding
CONV = [dict(stride=1, padding=0, dilation=1), dict(stride=2, padding=0, dilation=3),
        dict(stride=1, padding=0, dilation=3), dict(stride=3, padding=1, dilation=2)]
QCONV = [dict(stride=1, padding=0), dict(stride=2, padding=1), dict(stride=3, padding=0)]
POOL = [dict(kernel=1), dict(kernel=3, stride=1), dict(kernel=2, stride=3, padding=1),
        dict(kernel=3, stride=2, padding=1)]
ATTRS = {
    "conv2d": CONV, "depthwise_conv2d": CONV, "conv2d_nchwc": CONV,
    "depthwise_conv2d_nchwc": CONV,
    "conv2d_nchwc_valid": [dict(stride=1, dilation=1), dict(stride=2, dilation=3),
                           dict(stride=1, dilation=3)],
    "qconv2d": QCONV, "qdepthwise_conv2d": QCONV,
    "max_pool2d": POOL, "avg_pool2d": POOL, "qmax_pool2d": POOL, "qavg_pool2d": POOL,
    "max_pool2d_nchwc": POOL, "max_pool2d_u8": POOL, "max_pool2d_nchwc_u8": POOL,
    "subsample_nchwc": [dict(stride=1), dict(stride=2), dict(stride=3)],
    "pad2d": [dict(padding=0), dict(padding=2)],
    "to_nchwc": [dict(block=1), dict(block=3)], "pack_channels": [dict(block=2)],
    "pack_conv_weights": [dict(in_block=1, out_block=2), dict(in_block=2, out_block=3)],
    "pack_depthwise_weights": [dict(block=2)], "pack_dense_weights": [dict(block=3)],
    "winograd_weights": [dict(in_block=2, out_block=1)],
    "winograd4_weights": [dict(in_block=2, out_block=1)],
    "qlinear_conv2d": [dict(stride=1, padding=0), dict(stride=2, padding=1, x_zp=9)],
    "qlinear_conv2d_nchwc": [dict(stride=1, padding=0), dict(stride=2, padding=1, x_zp=9)],
    "to_nchwc_u8": [dict(block=1), dict(block=3)], "pack_channels_i32": [dict(block=2)],
    "pack_qconv_weights": [dict(in_block=4, out_block=2)],
    "conv2d_i16": [dict(stride=1, dilation=1), dict(stride=2, dilation=3)],
    "conv2d_nchwc_i16": [dict(stride=1, dilation=1), dict(stride=2, dilation=3)],
    "pack_conv_weights_i16": [dict(in_block=2, out_block=3)],
    "to_nchwc_i16": [dict(block=1), dict(block=3)], "to_nchwc_i32": [dict(block=2)],
}
_KERNELS: dict = {}


def kernel(name: str, attrs: dict):
    """The op built for C with these attributes, once per test session (the build, not a
    call, is what takes time)."""
    key = (name, tuple(sorted(attrs.items())))
    if key not in _KERNELS:
        _KERNELS[key] = tdsl.stdlib[name].build(target="c", **attrs)
    return _KERNELS[key]


def _divisions(fn: te.Function):
    return [x for t in fn.stages() for dim in t.shape for x in te.walk(dim)
            if isinstance(x, te.Binary) and x.op in ("//", "%")]


def _near_an_edge(n: int, d: int) -> bool:
    """A numerator ``n`` over the divisor ``d`` where an output size changes."""
    return n in (-1, 0, 1) or (d > 0 and 0 <= n <= 2 * d and n % d in (0, d - 1))


@st.composite
def edge_calls(draw, op):
    attrs = draw(st.sampled_from(ATTRS.get(op.name, [{}])), label="attrs")
    ranks = ranks_for_pack(op.ast, draw(st.integers(1, 3), label="rank"))
    fn = op.function(ranks, **attrs)
    # the sizes with a positive part in a numerator are drawn near its edges, once the others
    # (the kernel's extent, the channels) are known
    edge: dict[str, list] = {}
    for x in _divisions(fn):
        form = exact(x.a)
        for v in te.free_vars(x.a):
            if form is not None and form.coeff(v) > 0:
                edge.setdefault(v.name, []).append(x)
    sizes = {v.name: draw(st.sampled_from([0, 1, 1, 2, 3]), label=v.name)
             for v in fn.shape_vars if v.name not in edge}
    for name in sorted(edge):
        near = set()
        for n in range(24):
            env = {**sizes, name: n}
            for x in edge[name]:
                try:
                    if _near_an_edge(eval_index(x.a, env), eval_index(x.b, env)):
                        near.add(n)
                except (UnboundVar, ZeroDivisionError):
                    pass                # another edge size is in it: any value is an edge
        sizes[name] = draw(st.sampled_from(sorted(near) or [0, 1, 2, 3]), label=name)
    shapes = []
    for t in fn.inputs:
        try:
            shape = tuple(eval_index(d, sizes) for d in t.shape)
        except (UnboundVar, ZeroDivisionError):
            shape = None
        if shape is None or min(shape, default=0) < 0:
            shape = tuple(max(0, sizes.get(getattr(d, "name", ""), 1)) for d in t.shape)
        shapes.append(shape)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16), label="seed"))
    arrays = [tt.random_array(s, t.dtype, rng) if s else tt.random_array((), t.dtype, rng)[()]
              for s, t in zip(shapes, fn.inputs)]
    return attrs, arrays


def _outcome(run):
    """``("ok", outputs)`` or ``("refused", message)``."""
    try:
        out = run()
    except CallError as e:
        return "refused", str(e)
    return "ok", out if isinstance(out, tuple) else (out,)


def _words(message: str) -> str:
    """What a refusal must say alike: all of it, but of a read out of bounds the read and
    its stage (the reference names the first element outside, a kernel's region check
    the range of the read, see test_read_regions)."""
    return message.split(" reads ")[0] if "index out of bounds" in message else message


def _said(outcome) -> str:
    return f"refused ({outcome[1]})" if outcome[0] == "refused" else "accepted"


@pytest.mark.parametrize("name", sorted(tdsl.stdlib))
def test_reference_and_kernel_agree_at_the_edges(name):
    op = tdsl.stdlib[name]

    @settings(max_examples=12, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(edge_calls(op))
    def check(call):
        attrs, arrays = call
        want = _outcome(lambda: op.reference(*arrays, **attrs))
        got = _outcome(lambda: kernel(name, attrs)(*arrays))
        shapes = [getattr(a, "shape", ()) for a in arrays]
        assert got[0] == want[0], (f"{name}({attrs}) on {shapes}: the reference "
                                   f"{_said(want)}, the kernel {_said(got)}")
        if want[0] == "refused":
            assert _words(got[1]) == _words(want[1])
            return
        for k, (g, w) in enumerate(zip(got[1], want[1])):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
            with np.errstate(invalid="ignore"):     # inf - inf where both are -inf
                tt.compare(f"{name} output {k}", g, w, rtol=1e-4, atol=1e-4)

    check()


@pytest.mark.parametrize("name, attrs, shapes, out", [
    ("conv2d", dict(stride=2, dilation=3), [(1, 1, 7, 7), (1, 1, 3, 3)], (1, 1, 1, 1)),
    ("conv2d", dict(stride=2, dilation=3), [(1, 1, 8, 9), (1, 1, 3, 3)], (1, 1, 1, 2)),
    ("depthwise_conv2d", dict(stride=2, dilation=3), [(1, 2, 7, 7), (2, 1, 3, 3)],
     (1, 2, 1, 1))])
def test_the_issues_calls_are_accepted_by_both(name, attrs, shapes, out):
    """The smallest valid image for a 3x3 kernel at dilation 3 (a 7x7 window) at stride 2:
    the lowered size's normal form takes the constant out of the floor division, which once
    made the kernel refuse what the reference accepts."""
    op = tdsl.stdlib[name]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = op.reference(*args, **attrs)
    assert want.shape == out
    np.testing.assert_allclose(kernel(name, attrs)(*args), want, rtol=1e-5, atol=1e-6)
    small = [rng.standard_normal((1, shapes[0][1], 6, 7)).astype(np.float32), args[1]]
    with pytest.raises(CallError, match="smaller than a window") as ref:
        op.reference(*small, **attrs)
    with pytest.raises(CallError, match="smaller than a window") as got:
        kernel(name, attrs)(*small)
    assert str(got.value) == str(ref.value)


CONV1D = """
op conv1d(X: f32[N, C, L], W: f32[F, C, K]; stride: int = 1, dilation: int = 1)
    -> Y: f32[N, F, (L - dilation * (K - 1) - 1) // stride + 1] {
    Y[n, f, x] = sum[c, r](X[n, c, x * stride + r * dilation] * W[f, c, r])
}
"""


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_a_users_conv1d_with_one_tap_at_dilation_3(stride):
    """L = 1, K = 1: the window is one element whatever the dilation; one output."""
    op = tdsl.loads(CONV1D)["conv1d"]
    x, w = np.full((1, 1, 1), 2.0, np.float32), np.full((1, 1, 1), 3.0, np.float32)
    want = op.reference(x, w, dilation=3, stride=stride)
    np.testing.assert_array_equal(want, [[[6.0]]])
    np.testing.assert_array_equal(op.build(dilation=3, stride=stride)(x, w), want)
