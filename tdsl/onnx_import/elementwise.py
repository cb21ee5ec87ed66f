"""Converters of the elementwise arithmetic operators: Add, Sub, Mul, Div, Sum, the unary
math functions, Clip. Operands broadcast by numpy's rules; a static scalar is a literal."""
from __future__ import annotations

import math

import numpy as np

from . import templates as T
from .registry import converter, opt as _opt


_BINARY = {"Add": ("{0} + {1}", np.add, "add"), "Sub": ("{0} - {1}", np.subtract, "sub"),
           "Mul": ("{0} * {1}", np.multiply, "mul"), "Div": ("{0} / {1}", np.divide, "div")}


@converter(*_BINARY, attrs=("axis", "broadcast"))
def binary(cv, node, a):
    expr, fn, std = _BINARY[node.op_type]
    x, y = node.input
    if "broadcast" in a and a.get("broadcast") and "axis" in a:
        raise cv.error("the opset-1 broadcast attribute with an axis")
    if cv.is_static(x) and cv.is_static(y):
        r = fn(cv.static[x], cv.static[y])
        cv.static[node.output[0]] = r.astype(cv.static[x].dtype) if node.op_type != "Div" \
            or cv.static[x].dtype.kind == "f" else r.astype(np.int64)
        return
    sx, sy = cv.shape(x), cv.shape(y)
    if sx == sy and not cv.is_static(x) and not cv.is_static(y):
        cv.call(node.output[0], std, [cv.tensor(x), cv.tensor(y)], sx)
        return
    if node.op_type == "Add" and cv.is_static(x) and not cv.is_static(y):
        x, y, sx, sy = y, x, sy, sx                       # commutative: the constant second
    if node.op_type == "Add" and len(sx) == 4 and cv.is_static(y) and \
            not cv.is_static(x) and tuple(sy) in ((sx[1], 1, 1), (1, sx[1], 1, 1)):
        bias = y + "#bias"                                 # per channel: a bias_add
        cv.static[bias] = cv.static[y].reshape(-1)
        cv.call(node.output[0], "bias_add", [cv.tensor(x), cv.tensor(bias)], sx)
        return
    cv.elementwise(node.output[0], [x, y], expr, std)


@converter("Sum")
def sum_(cv, node, a):
    names = list(node.input)
    if len(names) == 1:
        cv.alias(node.output[0], names[0])
        return
    expr = " + ".join(f"{{{k}}}" for k in range(len(names)))
    cv.elementwise(node.output[0], names, expr, "sum")


_UNARY_STD = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp"}
_UNARY_EXPR = {"Neg": "-{0}", "Abs": "abs({0})", "Sqrt": "sqrt({0})", "Log": "log({0})",
               "Reciprocal": "1.0 / {0}", "Floor": "floor({0})", "Ceil": "ceil({0})"}


@converter(*_UNARY_STD, *_UNARY_EXPR)
def unary(cv, node, a):
    x = node.input[0]
    if node.op_type in _UNARY_STD:
        t = cv.tensor(x)
        cv.call(node.output[0], _UNARY_STD[node.op_type], [t], t.shape)
    else:
        cv.elementwise(node.output[0], [x], _UNARY_EXPR[node.op_type], node.op_type.lower())


@converter("Clip", attrs=("min", "max"))
def clip(cv, node, a):
    lo, hi = a.get("min", -math.inf), a.get("max", math.inf)
    if _opt(node, 1):
        lo = float(cv.value(node.input[1]).reshape(()))
    if _opt(node, 2):
        hi = float(cv.value(node.input[2]).reshape(()))
    t = cv.tensor(node.input[0])
    cv.call(node.output[0], "clip", [t], t.shape, f"lo={T.lit(lo)}, hi={T.lit(hi)}")
