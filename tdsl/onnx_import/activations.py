"""Converters of the activation functions: Gelu, Elu, Selu, Celu, Softplus, Softsign,
HardSigmoid, HardSwish, Swish, Mish, PRelu, ThresholdedRelu, Shrink, LeakyRelu.

At f32 the standard library's ``leaky_relu`` and ``gelu`` (the exact form) are used; any
other case is an op written for the node, with the formulas of ONNX's reference (f32 and f64;
Shrink on integers too). Attributes are literals."""
from __future__ import annotations

import math

from . import templates as T
from .elementwise import FLOATS, INTS, _emit, _need
from .registry import converter, text


def _f(v) -> str:
    return T.lit(float(v))


def _unary(cv, node, expr: str, kind: str, allowed=FLOATS) -> None:
    x = node.input[0]
    _need(cv, node, cv.dtype(x), allowed)
    _emit(cv, node.output[0], [x], expr, kind)


@converter("LeakyRelu", attrs=("alpha",))
def leaky_relu(cv, node, a):
    x, alpha = node.input[0], a.get("alpha", 0.01)
    if cv.dtype(x) == "f32" and not cv.is_static(x):
        t = cv.tensor(x)
        cv.call(node.output[0], "leaky_relu", [t], t.shape, f"alpha={T.lit(alpha)}")
        return
    _unary(cv, node, f"select({{0}} >= 0.0, {{0}}, {_f(alpha)} * {{0}})", "leaky_relu")


@converter("Gelu", attrs=("approximate",))
def gelu(cv, node, a):
    x = node.input[0]
    approx = text(a.get("approximate", "none"))
    if approx not in ("none", "tanh"):
        raise cv.error(f"approximate='{approx}' (none and tanh are)")
    if approx == "none":
        if cv.dtype(x) == "f32" and not cv.is_static(x):
            t = cv.tensor(x)
            cv.call(node.output[0], "gelu", [t], t.shape)
            return
        expr = f"0.5 * {{0}} * (1.0 + erf({{0}} * {_f(1 / math.sqrt(2))}))"
    else:
        # 0.5 x (1 + tanh(u)) = x sigmoid(2u), exactly: tdsl's sigmoid is its inlined exp,
        # where tanh is a libm call per element (a GPT block's GELU took half its time)
        expr = (f"{{0}} * sigmoid({_f(2 * math.sqrt(2 / math.pi))} * "
                f"({{0}} + 0.044715 * {{0}} * {{0}} * {{0}}))")
    _unary(cv, node, expr, "gelu")


@converter("Elu", attrs=("alpha",))
def elu(cv, node, a):
    alpha = _f(a.get("alpha", 1.0))
    _unary(cv, node, f"select({{0}} > 0.0, {{0}}, {alpha} * (exp({{0}}) - 1.0))", "elu")


@converter("Selu", attrs=("alpha", "gamma"))
def selu(cv, node, a):
    alpha = _f(a.get("alpha", 1.67326319217681884765625))
    gamma = _f(a.get("gamma", 1.05070102214813232421875))
    _unary(cv, node, f"{gamma} * select({{0}} > 0.0, {{0}}, {alpha} * (exp({{0}}) - 1.0))",
           "selu")


@converter("Celu", attrs=("alpha",))
def celu(cv, node, a):
    alpha = float(a.get("alpha", 1.0))
    _unary(cv, node, f"max({{0}}, 0.0) + min(0.0, {_f(alpha)} * (exp({{0}} / {_f(alpha)}) "
                     f"- 1.0))", "celu")


# log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))
_SOFTPLUS = "(max({0}, 0.0) + log(1.0 + exp(-abs({0}))))"


@converter("Softplus")
def softplus(cv, node, a):
    _unary(cv, node, _SOFTPLUS, "softplus")


@converter("Softsign")
def softsign(cv, node, a):
    _unary(cv, node, "{0} / (1.0 + abs({0}))", "softsign")


@converter("HardSigmoid", attrs=("alpha", "beta"))
def hard_sigmoid(cv, node, a):
    alpha, beta = _f(a.get("alpha", 0.2)), _f(a.get("beta", 0.5))
    _unary(cv, node, f"max(0.0, min(1.0, {alpha} * {{0}} + {beta}))", "hard_sigmoid")


@converter("HardSwish")
def hard_swish(cv, node, a):
    _unary(cv, node, f"{{0}} * max(0.0, min(1.0, {_f(1 / 6)} * {{0}} + 0.5))", "hard_swish")


@converter("Swish", attrs=("alpha",))
def swish(cv, node, a):
    alpha = float(a.get("alpha", 1.0))
    inner = "{0}" if alpha == 1.0 else f"{_f(alpha)} * {{0}}"
    _unary(cv, node, f"{{0}} * sigmoid({inner})", "swish")


@converter("Mish")
def mish(cv, node, a):
    _unary(cv, node, f"{{0}} * tanh({_SOFTPLUS})", "mish")


@converter("PRelu")
def prelu(cv, node, a):
    x, slope = node.input
    _need(cv, node, cv.dtype(x), FLOATS + INTS)
    zero = T.lit(0, cv.dtype(x))
    _emit(cv, node.output[0], [x, slope], f"select({{0}} > {zero}, {{0}}, {{0}} * {{1}})",
          "prelu")


@converter("ThresholdedRelu", attrs=("alpha",))
def thresholded_relu(cv, node, a):
    _unary(cv, node, f"select({{0}} > {_f(a.get('alpha', 1.0))}, {{0}}, 0.0)",
           "thresholded_relu")


@converter("Shrink", attrs=("bias", "lambd"))
def shrink(cv, node, a):
    x = node.input[0]
    dtype = cv.dtype(x)
    bias, lambd = float(a.get("bias", 0.0)), float(a.get("lambd", 0.5))
    if dtype in FLOATS:
        b, lo, hi, zero = _f(bias), _f(-lambd), _f(lambd), "0.0"
    else:
        # integers: the comparisons against the float bounds, the bias an integer
        if bias != int(bias):
            raise cv.error(f"Shrink on {dtype} with a fractional bias ({bias})")
        b, zero = str(int(bias)), "0"
        # x < -lambd  <=>  x <= ceil(-lambd) - 1 ;  x > lambd  <=>  x >= floor(lambd) + 1
        lo, hi = math.ceil(-lambd) - 1, math.floor(lambd) + 1
        expr = (f"select({{0}} <= {lo}, {{0}} + {b}, select({{0}} >= {hi}, {{0}} - {b}, "
                f"{zero}))")
        _unary(cv, node, expr, "shrink", INTS)
        return
    _unary(cv, node, f"select({{0}} < {lo}, {{0}} + {b}, select({{0}} > {hi}, {{0}} - {b}, "
                     f"{zero}))", "shrink")
