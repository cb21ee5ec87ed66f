"""The int8 convolution of issue 26 and the vector code under it, against numpy:

- the vectorizer's dot-product idiom (``dot4_u8i8``: vpdpbusd with VNNI, a lane loop
  without), through std ``qlinear_conv2d_nchwc`` at awkward sizes, strides, dilations,
  paddings, zero points and clamps, built for the host and for x86-64-v3 (no VNNI: the
  fallback), bit-exact with MLAS's arithmetic written in numpy; the plain NCHW
  ``qlinear_conv2d`` likewise;
- the i16 dot product (``dot2_i16``: vpmaddwd, vpdpwssd with VNNI, a lane loop off x86)
  through std ``conv2d_nchwc_i16``, exact, for the host, x86-64-v3 and x86-64 (SSE2);
- vector conversions between floats and integers (the saturating float-to-integer one:
  NaN, infinities, out of range, halves) and the vector ``round``, each equal to the scalar
  code of the same op;
- which kernels keep gcc's if-conversion (`target._reads_under_select`).
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl
from numpy_ref import conv2d_i16, qlinear_conv2d as reference
from tdsl.target import _reads_under_select

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
STD = tdsl.load("std")
X86 = tdsl.target.as_target("c").arch == "x86_64"


def blocked(a, block):
    """NCHW -> NCHW[block]c."""
    n, c, h, w = a.shape
    return np.ascontiguousarray(a.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


@st.composite
def cases(draw):
    ci = draw(st.sampled_from([4, 8, 16]))
    fi = draw(st.sampled_from([4, 8, 16]))
    cb, fb = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    k = draw(st.integers(1, 3))
    stride, dilation, padding = draw(st.integers(1, 2)), draw(st.integers(1, 2)), \
        draw(st.integers(0, 2))
    span = dilation * (k - 1) + 1
    h = draw(st.integers(max(1, span - 2 * padding), 11))
    wd = draw(st.integers(max(1, span - 2 * padding), 11))
    lo = draw(st.integers(0, 60))
    return dict(c=cb * ci, ci=ci, f=fb * fi, fi=fi, k=k, stride=stride, dilation=dilation,
                padding=padding, h=h, w=wd, x_zp=draw(st.integers(0, 255)),
                y_zp=draw(st.integers(0, 255)), lo=lo, hi=draw(st.integers(lo, 255)),
                seed=draw(st.integers(0, 2 ** 31)))


def _data(p):
    rng = np.random.default_rng(p["seed"])
    x = rng.integers(0, 256, (1, p["c"], p["h"], p["w"])).astype(np.uint8)
    w = rng.integers(-128, 128, (p["f"], p["c"], p["k"], p["k"])).astype(np.int8)
    b = rng.integers(-40000, 40000, p["f"]).astype(np.int32)
    s = rng.uniform(1e-4, 3e-3, p["f"]).astype(np.float32)
    attrs = {k: p[k] for k in ("stride", "padding", "dilation", "x_zp", "y_zp", "lo", "hi")}
    return x, w, b, s, attrs


@pytest.mark.parametrize("target", ["c"] + (["c -march=x86-64-v3"] if X86 else []))
@settings(max_examples=8, deadline=None)
@given(p=cases())
def test_blocked_int8_convolution_is_bit_exact_with_mlas_arithmetic(target, p):
    x, w, b, s, attrs = _data(p)
    want = reference(x, w, b, s, **attrs)
    wp = STD["pack_qconv_weights"].build(target=target, in_block=p["ci"],
                                         out_block=p["fi"])(w)
    op = STD["qlinear_conv2d_nchwc"]
    kernel = op.build(target=target, shapes=dict(N=1, CB=p["c"] // p["ci"], IH=p["h"],
                                                 IW=p["w"], CI=p["ci"], FB=p["f"] // p["fi"],
                                                 KH=p["k"], KW=p["k"], CQ=p["ci"] // 4,
                                                 FI=p["fi"]), **attrs)
    assert "tdsl_dot4_u8i8_" in kernel.source         # the idiom was recognised
    got = kernel(blocked(x, p["ci"]), wp, b.reshape(-1, p["fi"]), s.reshape(-1, p["fi"]))
    np.testing.assert_array_equal(got, blocked(want, p["fi"]))


@settings(max_examples=10, deadline=None)
@given(p=cases())
def test_plain_int8_convolution_is_bit_exact_with_mlas_arithmetic(p):
    x, w, b, s, attrs = _data(p)
    got = STD["qlinear_conv2d"].build(**attrs)(x, w, b, s)
    np.testing.assert_array_equal(got, reference(x, w, b, s, **attrs))


@pytest.mark.skipif(not X86, reason="an x86 target")
def test_the_register_tile_calls_the_vnni_dot_product():
    """Built for an AVX-512 VNNI CPU, the register tile's products are vpdpbusd; for
    x86-64-v3 (no VNNI), they are not."""
    sizes = dict(N=1, CB=1, IH=3, IW=16, CI=16, FB=4, KH=3, KW=3, CQ=4, FI=16)
    op = STD["qlinear_conv2d_nchwc"]
    kernel = op.build(target="c -march=icelake-server", shapes=sizes)
    assert "tdsl_dot4_u8i8_i32x16(Acc_" in kernel.source    # on the register tile
    if shutil.which("objdump"):
        import subprocess
        asm = subprocess.run(["objdump", "-d", str(kernel.lib_path)], capture_output=True,
                             text=True).stdout
        assert "vpdpbusd" in asm
        plain = op.build(target="c -march=x86-64-v3", shapes=sizes)
        assert "vpdpbusd" not in subprocess.run(["objdump", "-d", str(plain.lib_path)],
                                                capture_output=True, text=True).stdout


@pytest.mark.parametrize("target", ["c"] + (["c -march=x86-64-v3", "c -march=x86-64"]
                                             if X86 else []))
@settings(max_examples=8, deadline=None)
@given(p=cases())
def test_blocked_i16_convolution_is_exact(target, p):
    """conv2d_nchwc_i16 (an int8 convolution's centred values on x86 without VNNI): the
    i16 dot product (vpmaddwd; SSE2's 4 lanes, AVX2's 8, AVX-512's 16; the lane loop off
    x86) against numpy's sums in int64, values over the whole centred range."""
    rng = np.random.default_rng(p["seed"])
    k, stride, dilation = p["k"], p["stride"], p["dilation"]
    h, wd = (max(v, dilation * (k - 1) + 1) for v in (p["h"], p["w"]))
    x = rng.integers(-255, 256, (1, p["c"], h, wd)).astype(np.int16)
    w = rng.integers(-255, 256, (p["f"], p["c"], k, k)).astype(np.int16)
    want = conv2d_i16(x, w, stride=stride, dilation=dilation)
    wp = STD["pack_conv_weights_i16"].build(target=target, in_block=p["ci"],
                                            out_block=p["fi"])(w)
    kernel = STD["conv2d_nchwc_i16"].build(
        target=target, stride=stride, dilation=dilation,
        shapes=dict(N=1, CB=p["c"] // p["ci"], IH=h, IW=wd, CI=p["ci"], FB=p["f"] // p["fi"],
                    KH=k, KW=k, CQ=p["ci"] // 2, FI=p["fi"]))
    assert "tdsl_dot2_i16_" in kernel.source          # the idiom was recognised
    np.testing.assert_array_equal(kernel(blocked(x, p["ci"]), wp), blocked(want, p["fi"]))


def test_the_interpreter_runs_the_i16_dot_product():
    """The lowered conv2d_nchwc_i16 (its dot2_i16 intrinsics) run by the loop interpreter
    gives numpy's sums: the semantics the C helper is checked against."""
    from tdsl.lowering import interp
    rng = np.random.default_rng(9)
    x = rng.integers(-255, 256, (1, 8, 3, 7)).astype(np.int16)
    w = rng.integers(-255, 256, (8, 8, 3, 3)).astype(np.int16)
    wp = STD["pack_conv_weights_i16"].build(in_block=8, out_block=8)(w)
    func = STD["conv2d_nchwc_i16"].lower(
        shapes=dict(N=1, CB=1, IH=3, IW=7, CI=8, FB=1, KH=3, KW=3, CQ=4, FI=8),
        target="c -march=x86-64-v3")
    assert "dot2_i16(" in str(func)
    (got,) = interp.run(func, [blocked(x, 8), wp])
    np.testing.assert_array_equal(got, blocked(conv2d_i16(x, w), 8))


@pytest.mark.skipif(not X86 or shutil.which("objdump") is None, reason="x86 and objdump")
@pytest.mark.parametrize("march, instruction", [("x86-64-v3", "vpmaddwd"),
                                                ("icelake-server", "vpdpwssd")])
def test_the_i16_register_tile_calls_the_x86_instruction(march, instruction):
    """The i16 dot product is one pmaddwd (and an add) without VNNI, one vpdpwssd with."""
    import subprocess
    target = f"c -march={march}"
    lanes = tdsl.Target(target).lanes           # the blocks the layout pass gives it
    sizes = dict(N=1, CB=1, IH=3, IW=16, CI=lanes, FB=4, KH=3, KW=3, CQ=lanes // 2, FI=lanes)
    kernel = STD["conv2d_nchwc_i16"].build(target=target, shapes=sizes)
    asm = subprocess.run(["objdump", "-d", str(kernel.lib_path)], capture_output=True,
                         text=True).stdout
    assert instruction in asm


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, 127.4,
                    127.6, 128.0, -128.6, -129.0, 255.0, 255.9, 256.0, 300.0, -1.0, 65535.9,
                    65536.0, 2147483520.0, 2147483648.0, -2147483648.0, -3e9, 3e9, 1e20,
                    -1e20, 5e18, 9.3e18, 1.9e19])


def _vector_and_scalar(src: str, n: int, target="c"):
    op = tdsl.loads(src)["c"]
    return op.build(target, shapes=dict(N=n)), \
        op.build(target, schedule=op.schedule("naive"), shapes=dict(N=n))


# the host, and on x86 AVX2 and SSE2 code: without AVX-512's narrowing moves the small
# integer types are packed with saturation (`emit_c.helpers._X86_PACK`)
TARGETS = ["c"] + (["c -march=x86-64-v3", "c -march=x86-64"] if X86 else [])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fdt", ["f32", "f64"])
@pytest.mark.parametrize("idt", ["u8", "i8", "i16", "u16", "i32", "u32", "i64", "u64"])
def test_vector_float_to_integer_casts_saturate_as_the_scalar_ones(fdt, idt, target):
    rng = np.random.default_rng(3)
    x = np.resize(np.concatenate([SPECIAL, SPECIAL[::-1], rng.standard_normal(64) * 1e3]),
                  128).astype({"f32": np.float32, "f64": np.float64}[fdt])
    vec, scalar = _vector_and_scalar(f"op c(X: {fdt}[N]) -> Y: {idt}[N] "
                                     f"{{ Y[i] = {idt}(X[i]) }}", 128, target)
    if target != "c" and fdt == "f32" and idt in ("u8", "i8", "i16"):
        assert "_mm_packs_epi32" in vec.source
    assert f"tdsl_{fdt}x" in vec.source               # converted as whole vectors
    np.testing.assert_array_equal(vec(x), scalar(x))


@pytest.mark.parametrize("idt", ["u8", "i8", "i16", "u16"])
def test_a_float_through_a_small_integer_and_back_is_the_two_casts(idt):
    """``f32(u8(x))`` (a requantize, then the dequantize after it) clamps and truncates
    in floats, as one helper: the two casts' values, NaN -> 0 included."""
    rng = np.random.default_rng(5)
    x = np.resize(np.concatenate([SPECIAL, SPECIAL[::-1], rng.standard_normal(64) * 1e3]),
                  128).astype(np.float32)
    src = f"op c(X: f32[N]) -> Y: f32[N] {{ Y[i] = f32({idt}(X[i] * 0.5)) * 2.0 }}"
    vec, scalar = _vector_and_scalar(src, 128)
    assert f"_through_{idt}(" in vec.source
    np.testing.assert_array_equal(vec(x), scalar(x))
    np.testing.assert_array_equal(vec(x), tdsl.loads(src)["c"].reference(x))


@pytest.mark.parametrize("idt", ["u8", "i8", "i16", "i32"])
def test_vector_integer_to_float_and_round_match_the_scalar_ones(idt):
    info = np.iinfo({"u8": np.uint8, "i8": np.int8, "i16": np.int16, "i32": np.int32}[idt])
    x = np.random.default_rng(4).integers(info.min, info.max, 96, endpoint=True)
    x = x.astype(info.dtype)
    vec, scalar = _vector_and_scalar(f"op c(X: {idt}[N]) -> Y: f32[N] "
                                     f"{{ Y[i] = round(f32(X[i]) * 0.5) }}", 96)
    assert "__builtin_convertvector" in vec.source and "tdsl_round_f32x" in vec.source
    np.testing.assert_array_equal(vec(x), scalar(x))
    np.testing.assert_array_equal(vec(x), np.rint(x.astype(np.float32) * np.float32(0.5)))


def in_a_loop(statement: str, end: str = "n") -> str:
    """``statement`` in a loop as the printers write it (``end``: its iterations)."""
    return f"for (int64_t i = 0; i < {end}; ++i) {{\n    {statement}\n}}"


def test_if_conversion_stays_on_for_whole_vector_selects():
    """gcc 12's if-conversion bug needs a scalar load under a select; a select between a
    whole-vector load and a broadcast (a padded copy) keeps the flag off."""
    assert not _reads_under_select(in_a_loop(
        "tdsl_store_u8x16(&Xp[i], y >= 1 ? tdsl_load_u8x16(&X[i - 912]) : "
        "tdsl_bcast_u8x16(0));"))
    assert _reads_under_select(in_a_loop("Y[i] = c ? B[i] : 0;"))
    assert _reads_under_select(in_a_loop("Y[i] = c ? tdsl_load_f32x16(&B[i]) + A[j] : 0;"))


def test_if_conversion_stays_on_where_the_condition_reads_the_loads():
    """A load the statement reads before the select's `?` is read unconditionally: the
    select needs no masked load of it (tanh of a loaded value, an LSTM step's gates). A
    branch's other loads, a load after `&&` and a nested index still take the flag."""
    x = "P[256 * b + j] + M[256 * b + j]"
    assert not _reads_under_select(in_a_loop(
        f"I[64 * b + j] = fabsf({x}) < 0.625f ? {x} + {x} * 0.5f : "
        f"({x} < 0.0f ? -1.0f : 1.0f) * tdsl_exp_f32({x});"))
    assert not _reads_under_select(in_a_loop("H[j] = O[j] * (Cn[j] < 0.0f ? -Cn[j] : Cn[j]);"))
    assert _reads_under_select(in_a_loop("Y[i] = A[i] >= 0.0f ? A[i] : A[i] * B[i];"))      # PRelu
    assert _reads_under_select(in_a_loop("Y[i] = i < n && A[i] > 0.0f ? A[i] : 0.0f;"))
    assert _reads_under_select(in_a_loop("Y[i] = A[i] > 0.0f ? A[K[i]] : 0.0f;"))


def test_if_conversion_stays_on_where_every_loop_fills_a_vector():
    """gcc 12 masks wrongly only in a loop shorter than a vector (3 to 15 iterations of
    16-lane code, 3 to 7 of 8-lane code on a Zen 4; never 17 to 48): a select reading a load
    in a loop of at least `lanes` iterations, or outside every loop, keeps if-conversion (a
    padded copy's `inside ? X[i] : 0` along a row of 34 ran 3x slower without it); one in a
    shorter loop or a loop of a size known only at the call takes the flag."""
    guarded = "Y[i] = c ? B[i] : 0;"
    assert not _reads_under_select(in_a_loop(guarded, "34"), lanes=16)
    assert not _reads_under_select(in_a_loop(guarded, "16"), lanes=16)
    assert _reads_under_select(in_a_loop(guarded, "15"), lanes=16)
    assert _reads_under_select(in_a_loop(guarded, "n"), lanes=16)
    assert not _reads_under_select(guarded, lanes=16)
    # the innermost loop counts, and a block inside it is still in it
    nested = "\n".join(["for (int64_t j = 0; j < 3; ++j) {",
                        "    for (int64_t i = 0; i < 34; ++i) {",
                        "        if (c) {", f"            {guarded}", "        }",
                        "    }", "}"])
    assert not _reads_under_select(nested, lanes=16)
    assert _reads_under_select(nested.replace("i < 34", "i < 5"), lanes=16)
