"""Generated C run for real on the machines it is built for: natively, under qemu-aarch64 /
qemu-arm / qemu-riscv64 (static Linux programs), and on Cortex-M3 and M4F boards under
qemu-system-arm (newlib-nano, semihosting files). Float ops match the reference within a
tolerance, int8 ops bit for bit (the independent reference of quant_reference.py).

Also issue 8's check of the host C backend on another ISA: the ``c`` kind's C (OpenMP, GNU
vectors) built for ``c -march=armv8-a`` by aarch64-linux-gnu-gcc and run under qemu-aarch64.

Each test skips, naming the tool, where a cross compiler or QEMU is missing. The float cases
beyond a core five run under ``-m slow``.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import tdsl
from tdsl.emulate import EmulatedKernel, run_host_c

from embedded_cases import (FLOAT_CASES, QUANT_CASES, TARGETS, float_inputs, quant_inputs,
                            target_or_skip)

CORE_FLOAT = ["matmul", "conv2d", "depthwise_conv2d", "softmax", "relu"]
MORE_FLOAT = [n for n in FLOAT_CASES if n not in CORE_FLOAT]
RTOL = ATOL = 2e-5


def _run_float(spec, name):
    target = target_or_skip(spec)
    op, arrays, sizes, attrs = float_inputs(name)
    kernel = op.build(target, shapes=sizes, **attrs)
    assert isinstance(kernel, EmulatedKernel)
    np.testing.assert_allclose(kernel(*arrays), op.reference(*arrays, **attrs),
                               rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", CORE_FLOAT)
@pytest.mark.parametrize("spec", TARGETS)
def test_float_ops_on_target(spec, name):
    _run_float(spec, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", MORE_FLOAT)
@pytest.mark.parametrize("spec", TARGETS)
def test_more_float_ops_on_target(spec, name):
    _run_float(spec, name)


@pytest.mark.parametrize("name", sorted(QUANT_CASES))
@pytest.mark.parametrize("spec", TARGETS)
def test_int8_ops_on_target_are_bit_exact(spec, name):
    target = target_or_skip(spec)
    op, arrays, sizes, attrs, want = quant_inputs(name)
    got = op.build(target, shapes=sizes, **attrs)(*arrays)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(QUANT_CASES))
def test_int8_ops_on_a_cortex_m0(name):
    """ARMv6-M, no FPU, 16 KB of RAM (micro:bit): the smallest board QEMU emulates."""
    test_int8_ops_on_target_are_bit_exact("c-embedded -mcpu=cortex-m0", name)


def test_cortex_m55_helium_vectors():
    """MVE: the printer uses 128-bit vector types, the board (mps3-an547) runs them."""
    target = target_or_skip("c-embedded -mcpu=cortex-m55")
    op, arrays, sizes, attrs = float_inputs("matmul")
    kernel = op.build(target, shapes=sizes, **attrs)
    assert "tdsl_f32x4" in kernel.source
    np.testing.assert_allclose(kernel(*arrays), op.reference(*arrays), rtol=RTOL, atol=ATOL)


def test_wrong_input_is_a_call_error():
    target = target_or_skip("c-embedded")
    op, arrays, sizes, attrs = float_inputs("relu")
    kernel = op.build(target, shapes=sizes)
    with pytest.raises(tdsl.CallError, match="shape"):
        kernel(arrays[0][:1])
    with pytest.raises(tdsl.CallError, match="float32"):
        kernel(arrays[0].astype(np.float64))



def test_size_zero_inputs_and_outputs_run():
    """Issue 28: a row sum over D = 0 (an empty input) and over N = 0 (an empty output) run
    as the reference does, instead of "input 0 could not be read"."""
    target = target_or_skip("c-embedded")
    op = tdsl.loads("op rs(X: f32[N, D]) -> (Y: f32[N]) {\n    Y[n] = sum[d](X[n, d])\n}")["rs"]
    for n, d in ((3, 0), (0, 4)):
        x = np.zeros((n, d), np.float32)
        got = op.build(target, shapes={"N": n, "D": d})(x)
        np.testing.assert_array_equal(got, op.reference(x))


# --------------------------------------------------------------------------- issue 8

HOST_C_OPS = ["matmul", "conv2d", "softmax", "relu", "depthwise_conv2d"]


@pytest.mark.parametrize("name", HOST_C_OPS)
def test_host_c_for_armv8_runs_under_qemu_aarch64(name):
    target = target_or_skip("c -march=armv8-a")
    op, arrays, sizes, attrs = float_inputs(name)
    func = op.lower(None, sizes, target=target, **attrs)
    (got,) = run_host_c(func, target, arrays)
    np.testing.assert_allclose(got, op.reference(*arrays, **attrs), rtol=RTOL, atol=ATOL)



def test_run_host_c_on_an_unlowered_function_says_what_it_takes():
    """Issue 28: op.function() (a te.Function) was a raw AttributeError from the printer."""
    op = tdsl.loads("op inc(X: f32[N]) -> (Y: f32[N]) {\n    Y[n] = X[n] + 1.0\n}")["inc"]
    for wrong in (op.function(), op):
        with pytest.raises(tdsl.CallError, match="takes a LoweredFunc.*op.lower"):
            run_host_c(wrong, "c", [np.zeros(3, np.float32)])


# --------------------------------------------------------------------------- requantize

RQ_SCALES = (0.3, 1e-6, 0.9999999, 3.7, 2.0 ** -31, 0.5)
RQ_OP = "op rq(X: i32[N]) -> ({outs}) {{\n{body}\n}}".format(
    outs=", ".join(f"Y{k}: i32[N]" for k in range(len(RQ_SCALES))),
    body="\n".join(f"    Y{k}[i] = requantize(X[i], {s!r})" for k, s in enumerate(RQ_SCALES)))


@pytest.mark.parametrize("spec", TARGETS)
def test_requantize_is_bit_exact_on_target(spec):
    """The C helper's 64-bit multiply, arithmetic shifts and wrapping left shift agree with
    the exact reference on every architecture, at the int32 extremes too."""
    import quant_reference as qref
    target = target_or_skip(spec)
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.integers(-2 ** 31, 2 ** 31, 400),
                        rng.integers(-3000, 3000, 200),
                        [-2 ** 31, 2 ** 31 - 1, -1, 0, 1, -2 ** 30, 2 ** 30]]).astype(np.int32)
    op = tdsl.loads(RQ_OP)["rq"]
    outs = op.build(target, shapes={"N": x.size})(x)
    for scale, got in zip(RQ_SCALES, outs):
        m, s = qref.quantize_multiplier(scale)
        want = [qref._wrap32(qref.scale_one(int(v), m, s)) for v in x]
        assert got.tolist() == want, scale


def test_tdsl_test_property_tests_an_embedded_target(capsys):
    """``tdsl test --target c-embedded``: drawn shapes, values and schedules, each built with
    its sizes fixed and run as a program."""
    from tdsl import cli
    target_or_skip("c-embedded")
    assert cli.main(["test", "std", "--op", "qadd", "--target", "c-embedded",
                     "--examples", "2"]) == 0
    assert "qadd: ok (2 examples)" in capsys.readouterr().out


# --------------------------------------------------------------------------- issue 26

def _assembly(func, target) -> str:
    """The assembly the target's compiler makes of ``func``'s C (gcc -S)."""
    import subprocess
    from tdsl.emit_c.c import emit_c
    return subprocess.run([target.compiler, *target.flags, "-S", "-x", "c", "-", "-o", "-"],
                          input=emit_c(func, target=target).source, capture_output=True,
                          text=True, check=True).stdout


@pytest.mark.parametrize("spec,instruction", [("c -march=armv8.6-a+i8mm", "usdot"),
                                              ("c -march=armv8.2-a+dotprod", "sdot"),
                                              ("c -march=armv8-a", None)])
def test_int8_convolution_on_arm_uses_its_dot_product_where_the_isa_has_one(spec,
                                                                            instruction):
    """std qlinear_conv2d_nchwc built for Arm and run under qemu-aarch64, bit-exact with
    MLAS's arithmetic (tests/numpy_ref.py): with I8MM (Armv8.6) the dot product of four u8
    activations and four i8 weights per lane is one usdot; with Armv8.2's dot product it is
    sdot of the activations less 128 and a correction of 128 times the weights' sum. Either
    way the target counts as having an int8 dot product (QLinearConv imports to it); plain
    Armv8 keeps the lane loop. The activations span 0-255, both sides of 128."""
    from numpy_ref import qlinear_conv2d as reference
    from test_int8_dot import _data, blocked
    target = target_or_skip(spec)
    std = tdsl.load("std")
    h, w, k = 5, 7, 3
    x, wt, b, s, attrs = _data(dict(seed=4, c=8, f=8, h=h, w=w, k=k, stride=1, padding=1,
                                    dilation=1, x_zp=130, y_zp=7, lo=0, hi=255))
    wp = std["pack_qconv_weights"].build(in_block=4, out_block=4)(wt)
    func = std["qlinear_conv2d_nchwc"].lower(
        None, dict(N=1, CB=2, IH=h, IW=w, CI=4, FB=2, KH=k, KW=k, CQ=1, FI=4), target=target,
        **attrs)
    (got,) = run_host_c(func, target, [blocked(x, 4), wp, b.reshape(-1, 4), s.reshape(-1, 4)])
    np.testing.assert_array_equal(got, blocked(reference(x, wt, b, s, **attrs), 4))
    asm = _assembly(func, target)
    assert target.has_int8_dot == (instruction is not None)
    used = set(re.findall(r"\b(usdot|sdot)\b", asm))
    assert used == ({instruction} if instruction else set())


# a q register stored to or loaded from the stack: a spill of the register tile
_Q_STACK = re.compile(r"\b(?:str|ldr)\s+q\d+, \[sp|\b(?:stp|ldp)\s+q\d+, q\d+, \[sp")


@pytest.mark.parametrize("spec", ["c -march=armv8.2-a+dotprod", "c -march=armv8.6-a+i8mm"])
def test_int8_convolution_tile_on_arm_stays_in_registers(spec):
    """AArch64 has no broadcast operand, so each column of qlinear_conv2d_nchwc's register
    tile takes a register for its four bytes (and sdot one per weight vector for its
    correction): the 4 x 7 tile that 32 AVX-512 registers hold spilled there. The default
    tile for 32 registers of 4 lanes keeps everything in registers (aarch64 gcc -S: no q
    register to or from the stack), where 4 x 7 does not."""
    target = target_or_skip(spec)
    op = tdsl.load("std")["qlinear_conv2d_nchwc"]
    sizes = dict(N=1, CB=16, IH=14, IW=14, CI=4, FB=16, KH=3, KW=3, CQ=1, FI=4)
    attrs = dict(stride=1, padding=1, dilation=1, x_zp=3, y_zp=2)
    default = op.schedule(target=target, shapes=sizes, stride=1, padding=1).knob_values()

    def stack_traffic(config):
        func = op.lower(None, sizes, target=target, config=config, **attrs)
        return len(_Q_STACK.findall(_assembly(func, target)))

    assert stack_traffic(default) == 0
    assert stack_traffic({**default, "nb": 4, "tx": 7}) > 0
