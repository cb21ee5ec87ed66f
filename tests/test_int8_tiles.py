"""int8 convolutions summed in AMX tiles (issue 26): `qlinear_conv2d_nchwc`'s ``tiles``
schedule, the stateful tensor intrinsic ``amx_u8i8_16x64x64`` under it, the ``amx`` target
constant and the graph layout that gives int8 activations blocks of 64 channels.

Bit-exact against numpy's MLAS arithmetic:

- on the host target, through the tiles themselves where the CPU has AMX-INT8;
- on ``c -march=x86-64-v3 -amx=1``, whose C has no AMX: the same calls sum in memory;
- in the loop-IR interpreter (init sets the sums to zero, finish is nothing).

Built for ``-march=sapphirerapids`` on any x86 host, the kernel's machine code has the tile
instructions (objdump), without running it.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl
from numpy_ref import qlinear_conv2d as reference
from tdsl.errors import ScheduleError
from tdsl.lowering import interp
from tdsl.target import TargetError, as_target
from test_int8_dot import _data, blocked

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
STD = tdsl.load("std")
X86 = as_target("c").arch == "x86_64"
HOST_AMX = as_target("c").amx == 1
PORTABLE = "c -march=x86-64-v3 -amx=1"      # the tiles schedule, its C without AMX
TARGETS = (["c"] if HOST_AMX else []) + ([PORTABLE] if X86 else [])
INTRIN = "amx_u8i8_16x64x64"


def _sizes(p):
    return dict(N=1, CB=p["c"] // 64, IH=p["h"], IW=p["w"], CI=64, FB=p["f"] // 64,
                KH=p["k"], KW=p["k"], CQ=16, FI=64)


@st.composite
def cases(draw):
    """Blocks of 64 channels and filters; widths that end inside a tile of 16 columns, span
    several, or are one column; taps, strides, paddings and dilations that read past a
    row."""
    k, stride, dilation, padding = draw(st.integers(1, 3)), draw(st.integers(1, 2)), \
        draw(st.integers(1, 2)), draw(st.integers(0, 2))
    span = dilation * (k - 1) + 1
    lo = draw(st.integers(0, 60))
    return dict(c=64 * draw(st.integers(1, 2)), f=64 * draw(st.integers(1, 2)), k=k,
                stride=stride, dilation=dilation, padding=padding,
                h=draw(st.integers(max(1, span - 2 * padding), 5)),
                w=draw(st.integers(max(1, span - 2 * padding), 37)),
                x_zp=draw(st.integers(0, 255)), y_zp=draw(st.integers(0, 255)), lo=lo,
                hi=draw(st.integers(lo, 255)), seed=draw(st.integers(0, 2 ** 31)))


@pytest.mark.skipif(not TARGETS, reason="an x86 target (AMX on the host, or x86-64-v3 C)")
@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=8, deadline=None)
@given(p=cases())
def test_tiled_int8_convolution_is_bit_exact_with_mlas_arithmetic(target, p):
    x, w, b, s, attrs = _data(p)
    want = reference(x, w, b, s, **attrs)
    wp = STD["pack_qconv_weights"].build(target=target, in_block=64, out_block=64)(w)
    kernel = STD["qlinear_conv2d_nchwc"].build(target=target, shapes=_sizes(p), **attrs)
    assert f"{INTRIN}(" in kernel.source and f"{INTRIN}_finish(" in kernel.source
    got = kernel(blocked(x, 64), wp, b.reshape(-1, 64), s.reshape(-1, 64))
    np.testing.assert_array_equal(got, blocked(want, 64))


def test_the_interpreter_runs_the_tiled_schedule():
    """One tile of one tap (the interpreter runs a call's 64K products one by one, 6 s)."""
    p = dict(c=64, f=64, k=1, stride=1, dilation=1, padding=0, h=1, w=3, x_zp=3, y_zp=9,
             lo=0, hi=255, seed=5)
    x, w, b, s, attrs = _data(p)
    wp = STD["pack_qconv_weights"].build(in_block=64, out_block=64)(w)
    func = STD["qlinear_conv2d_nchwc"].lower(shapes=_sizes(p), target=PORTABLE, **attrs)
    calls = str(func)
    assert f"{INTRIN}_init(" in calls and f"{INTRIN}_finish(" in calls
    (got,) = interp.run(func, [blocked(x, 64), wp, b.reshape(-1, 64), s.reshape(-1, 64)])
    np.testing.assert_array_equal(got, blocked(reference(x, w, b, s, **attrs), 64))


def test_the_tiles_are_the_default_only_where_they_apply():
    """On an AMX target: blocks of 64 channels and filters take the tiles, at any stride;
    another block keeps the vector schedule; a target without AMX never offers them (the
    knob's only choice is 0)."""
    op = STD["qlinear_conv2d_nchwc"]
    base = dict(N=1, CB=1, IH=4, IW=20, CI=64, FB=1, KH=3, KW=3, CQ=16, FI=64)

    def tiles(target, stride=1, **sizes):
        sched = op.schedule(target=target, shapes={**base, **sizes}, stride=stride)
        return {k.name: k for k in sched.knobs}["tiles"]
    assert tiles(PORTABLE).default == 1
    assert tiles(PORTABLE, stride=2).default == 1
    assert tiles(PORTABLE, CI=16, CB=4, CQ=4).default == 0
    assert tiles(PORTABLE, FI=16, FB=4).default == 0
    assert tiles("c -march=x86-64-v3").choices == (0,)


@pytest.mark.skipif(not X86, reason="an x86 target")
def test_sapphire_rapids_code_has_the_tile_instructions():
    kernel = STD["qlinear_conv2d_nchwc"].build(
        target="c -march=sapphirerapids",
        shapes=dict(N=1, CB=1, IH=4, IW=20, CI=64, FB=1, KH=3, KW=3, CQ=16, FI=64), padding=1)
    if shutil.which("objdump") is None:
        pytest.skip("needs objdump (binutils)")
    asm = subprocess.run(["objdump", "-d", str(kernel.lib_path)], capture_output=True,
                         text=True).stdout
    for instruction in ("tdpbusd", "tileloadd", "tilestored", "ldtilecfg", "sttilecfg"):
        assert instruction in asm


def test_the_amx_constant_comes_from_the_isa_and_may_be_set():
    assert as_target("c -amx=1").constants()["amx"] == 1
    assert as_target("c -amx=0").constants()["amx"] == 0
    if X86:
        assert as_target("c -march=x86-64-v3").amx == 0
        assert as_target("c -march=sapphirerapids").amx == 1
        assert as_target("c -march=sapphirerapids -amx=0").amx == 0
    with pytest.raises(TargetError, match="-amx must be 0 or 1"):
        as_target("c -amx=2")


def test_a_host_that_refuses_the_tiles_keeps_int8_on_vnni(monkeypatch):
    """Where Linux (or a sandbox) refuses the tiles' state to the process, the host target
    says amx = 0: the tile kernels would run their plain-C fallback. A target naming its
    CPU is built for that CPU, wherever it is built."""
    import tdsl.target as tt
    monkeypatch.setattr(tt, "host_grants_amx", lambda: False)
    resolve = tt._parse.__wrapped__            # past the cache of resolved targets
    assert resolve("c").amx == 0
    if X86:
        assert resolve("c -march=sapphirerapids").amx == 1


def test_a_data_loop_inside_the_reduction_is_refused_for_a_stateful_intrinsic():
    """The sums stay in the tiles across the reduction loops around the call: a data loop
    among them would mix two outputs' sums."""
    src = """
op conv(X: u8[N, CB, IH, IW, CI], W: i8[FB, CB, KH, KW, CQ, FI, 4])
    -> Y: i32[N, FB, IH - KH + 1, IW - KW + 1, FI] {
    Y[n, fb, y, x, fi] = sum[cb, r, s, cq, k](i32(X[n, cb, y + r, x + s, cq * 4 + k])
                                              * i32(W[fb, cb, r, s, cq, fi, k]))
}
schedule conv for cpu {
    reorder(Y.n, Y.fb, Y.cb, Y.r, Y.y, Y.s, Y.x, Y.fi, Y.cq, Y.k)
    tensorize(Y.x, "amx_u8i8_16x64x64")
}
"""
    op = tdsl.loads(src)["conv"]
    sizes = dict(N=1, CB=1, IH=3, IW=18, CI=64, FB=1, KH=3, KW=3, CQ=16, FI=64)
    with pytest.raises(ScheduleError, match="y between them would move the output"):
        op.lower(shapes=sizes, target=PORTABLE)


def _release_tiles():
    """A function that gives the tiles back (TILERELEASE), as a library finishing its
    own AMX work may, in a shared object of its own."""
    import tempfile
    from pathlib import Path
    d = Path(tempfile.mkdtemp())
    (d / "r.c").write_text("#include <immintrin.h>\nvoid release(void) { _tile_release(); }\n")
    subprocess.run(["gcc", "-O2", "-mamx-tile", "-shared", "-fPIC", str(d / "r.c"), "-o",
                    str(d / "r.so")], check=True)
    return ctypes.CDLL(str(d / "r.so")).release


@pytest.mark.skipif(not HOST_AMX, reason="a CPU with AMX-INT8 (Sapphire Rapids or later)")
def test_tiles_released_between_calls_are_configured_again():
    p = dict(c=64, f=64, k=3, stride=1, dilation=1, padding=1, h=4, w=20, x_zp=3, y_zp=9,
             lo=0, hi=255, seed=7)
    x, w, b, s, attrs = _data(p)
    wp = STD["pack_qconv_weights"].build(in_block=64, out_block=64)(w)
    kernel = STD["qlinear_conv2d_nchwc"].build(shapes=_sizes(p), **attrs)
    args = (blocked(x, 64), wp, b.reshape(-1, 64), s.reshape(-1, 64))
    first = kernel(*args)
    _release_tiles()()
    np.testing.assert_array_equal(kernel(*args), first)
    np.testing.assert_array_equal(first, blocked(reference(x, w, b, s, **attrs), 64))


@pytest.mark.skipif(not TARGETS, reason="an x86 target (AMX on the host, or x86-64-v3 C)")
@pytest.mark.parametrize("target", TARGETS)
def test_an_int8_resnet_block_runs_on_tiles_bit_exact_with_onnxruntime(target):
    """onnxruntime's quantize_static of a 64-channel ResNet block: its int8 activations
    blocked by 64 from the quantized input on (no conversion between the convolutions),
    both convolutions on tiles, the output equal to onnxruntime's."""
    pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
    ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime")
    import onnx_models
    from tdsl.onnx_import import convert_model
    _, q = onnx_models.resnet_block_int8(c=64, hw=10)
    x = np.random.default_rng(3).standard_normal((1, 64, 10, 10)).astype(np.float32)
    text, params = convert_model(q, "net")
    module = tdsl.loads(text)["net"].build(target, params=params)
    got = module(x)
    sess = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, sess.run(None, {q.graph.input[0].name: x})[0])
    compiled = module.compiled(x)
    described = compiled.describe()
    assert "NCHW64c" in described and "NCHW16c" not in described and "NCHW8c" not in described
    tiled = [k for k in compiled.kernels if f"{INTRIN}(" in k.source]
    assert len(tiled) == 2
