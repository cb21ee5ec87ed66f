"""Cases shared by the embedded tests: ops with awkward fixed sizes, their inputs, and the
targets (toolchains) to build them for, each with the tool whose absence skips it."""
from __future__ import annotations

import numpy as np
import pytest

import tdsl
from tdsl.emulate import missing_tool

import quant_reference as qref

# float std ops: (name, sizes, attributes)
FLOAT_CASES = {
    "matmul": ({"M": 5, "K": 7, "N": 9}, {}),
    "dense": ({"N": 3, "K": 10, "M": 6}, {}),
    "conv2d": ({"N": 1, "C": 3, "IH": 9, "IW": 7, "F": 5, "KH": 3, "KW": 3},
               {"padding": 1, "stride": 2}),
    "depthwise_conv2d": ({"N": 1, "C": 3, "IH": 9, "IW": 8, "KH": 3, "KW": 3},
                         {"padding": 1}),
    "softmax": ({"N": 3, "D": 37}, {}),
    "relu": ({"S0": 3, "S1": 17}, {}),
    "layer_norm": ({"N": 2, "D": 19}, {}),
    "max_pool2d": ({"N": 1, "C": 2, "IH": 7, "IW": 6}, {"kernel": 3, "stride": 2, "padding": 1}),
    "avg_pool2d": ({"N": 1, "C": 2, "IH": 7, "IW": 6}, {"kernel": 3, "stride": 2, "padding": 1}),
    "gelu": ({"S0": 23}, {}),
    "tanh": ({"S0": 23}, {}),
}

# int8 std ops: (name, input shapes, attributes)
QUANT_CASES = {
    "qdense": ([(3, 17), (5, 17), (5,)], dict(x_zp=-3, w_zp=2, y_zp=7, scale=0.00731)),
    "qconv2d": ([(1, 3, 7, 5), (4, 3, 3, 3), (4,)],
                dict(stride=2, padding=1, x_zp=5, w_zp=-1, y_zp=-9, scale=0.0123)),
    "qdepthwise_conv2d": ([(1, 5, 6, 7), (5, 1, 3, 3), (5,)],
                          dict(stride=1, padding=1, x_zp=-128, w_zp=3, y_zp=11, scale=0.041)),
    "qadd": ([(3, 11), (3, 11)], dict(a_zp=4, b_zp=-6, y_zp=1, a_scale=0.02, b_scale=0.035,
                                      y_scale=0.05)),
    "qrelu": ([(2, 13)], dict(x_zp=-17)),
    "qclamp": ([(29,)], dict(lo=-20, hi=90)),
    "qmax_pool2d": ([(1, 3, 7, 6)], dict(kernel=3, stride=2, padding=1)),
    "qavg_pool2d": ([(1, 3, 7, 6)], dict(kernel=3, stride=2, padding=1)),
}

# targets of the checks: the host's portable C, Linux boards, Cortex-M (soft and hard float)
TARGETS = ["c-embedded", "c-embedded -march=armv8-a", "c-embedded -mtriple=arm-linux-gnueabihf",
           "c-embedded -march=rv64gc", "c-embedded -mcpu=cortex-m3",
           "c-embedded -mcpu=cortex-m4"]


def target_or_skip(spec: str) -> tdsl.Target:
    """The target, or a skip naming the missing tool."""
    try:
        target = tdsl.as_target(spec)
    except tdsl.TdslError as exc:        # the compiler itself is missing
        pytest.skip(f"{spec}: {exc.message if hasattr(exc, 'message') else exc}")
    why = missing_tool(target)
    if why:
        pytest.skip(f"{spec}: {why}")
    return target


def float_inputs(name: str, seed: int = 0):
    sizes, attrs = FLOAT_CASES[name]
    op = tdsl.stdlib[name]
    ranks = [len(sizes)] if name in ("relu", "gelu", "tanh") else None
    fn = op.function(ranks, **attrs)
    rng = np.random.default_rng(seed)
    arrays = []
    for t in fn.inputs:
        shape = [sizes[d.name] if hasattr(d, "name") else int(d.value) for d in t.shape]
        arrays.append(rng.standard_normal(shape).astype(np.float32))
    return op, arrays, sizes, attrs


def quant_inputs(name: str, seed: int = 0):
    shapes, attrs = QUANT_CASES[name]
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(-128, 128, size=s).astype(np.int8) if i < 2 or name not in (
        "qdense", "qconv2d", "qdepthwise_conv2d") else
        rng.integers(-30000, 30000, size=s).astype(np.int32) for i, s in enumerate(shapes)]
    op = tdsl.stdlib[name]
    return op, arrays, op.sizes_of(*arrays, **attrs), attrs, qref.OPS[name](*arrays, **attrs)
