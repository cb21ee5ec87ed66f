"""Every std op's knob space, for AVX2 and for AVX-512, whatever the host.

For each of ``c -march=x86-64-v3`` (8 lanes, 16 registers) and ``c -march=x86-64-v4`` (16
lanes, 32 registers), the tuner's space of each std op's schedule template is made for that
target; its default configuration must be legal there, and the default plus a few sampled
legal configurations are lowered and compiled with gcc for it. Where the host has the ISA
(`Target.unrunnable_reason`), each kernel also runs and is compared with the reference. So
a CI host of either kind catches what breaks the other kind's users.
"""
import numpy as np
import pytest

import tdsl
from tdsl.errors import TdslError
from tdsl.frontend import ast
from tdsl.tuner.log import Workload
from tdsl.tuner.task import Task

LEVELS = {"v3": "c -march=x86-64-v3", "v4": "c -march=x86-64-v4"}

# Every std op whose CPU schedule declares knobs: small sizes that no tile divides, and the
# attributes to build with.
TEMPLATED = {
    "matmul": ({"M": 13, "N": 37, "K": 9}, {}),
    "batch_matmul": ({"B": 2, "M": 7, "N": 21, "K": 5}, {}),
    "dense": ({"N": 5, "M": 37, "K": 9}, {}),
    "dense_packed": ({"N": 5, "M": 32, "MB": 2, "MI": 16, "K": 9}, {}),
    "conv2d": ({"N": 1, "C": 3, "IH": 7, "IW": 11, "F": 19, "KH": 3, "KW": 3},
               {"padding": 1}),
    "depthwise_conv2d": ({"N": 1, "C": 3, "IH": 7, "IW": 19, "KH": 3, "KW": 3},
                         {"padding": 1}),
    "conv2d_nchwc": ({"N": 1, "CB": 2, "IH": 7, "IW": 11, "CI": 3, "FB": 2, "KH": 3, "KW": 3,
                      "FI": 16}, {"padding": 1}),
    "conv2d_nchwc_valid": ({"N": 1, "CB": 2, "IH": 7, "IW": 11, "CI": 3, "FB": 2, "KH": 3,
                            "KW": 3, "FI": 16}, {}),
    "depthwise_conv2d_nchwc": ({"N": 1, "CB": 2, "IH": 7, "IW": 11, "CI": 8, "KH": 3, "KW": 3},
                               {"padding": 1}),
    "conv2d_winograd_nchwc": ({"N": 1, "CB": 2, "H": 5, "W": 7, "CI": 3, "FB": 2, "FI": 16},
                              {}),
    "conv2d_winograd4_nchwc": ({"N": 1, "CB": 2, "H": 9, "W": 7, "CI": 3, "FB": 2, "FI": 16},
                               {}),
    "qlinear_conv2d_nchwc": ({"N": 1, "CB": 2, "IH": 7, "IW": 11, "CI": 8, "FB": 3, "KH": 3,
                              "KW": 3, "CQ": 2, "FI": 16}, {"padding": 1, "x_zp": 5}),
    "conv2d_i16": ({"N": 1, "C": 3, "IH": 7, "IW": 13, "F": 19, "KH": 3, "KW": 3}, {}),
    "conv2d_nchwc_i16": ({"N": 1, "CB": 2, "IH": 9, "IW": 13, "CI": 8, "FB": 3, "KH": 3,
                          "KW": 3, "CQ": 4, "FI": 16}, {"stride": 1}),
    "softmax": ({"N": 3, "D": 37}, {}),
    "layer_norm": ({"N": 3, "D": 37}, {}),
    "max_pool2d": ({"N": 1, "C": 3, "IH": 9, "IW": 13}, {"kernel": 3, "stride": 2}),
    "max_pool2d_nchwc": ({"N": 1, "CB": 2, "IH": 9, "IW": 13, "CI": 16},
                         {"kernel": 3, "stride": 2, "padding": 1}),
    "max_pool2d_u8": ({"N": 1, "C": 3, "IH": 9, "IW": 13}, {"kernel": 3, "stride": 2}),
    "max_pool2d_nchwc_u8": ({"N": 1, "CB": 2, "IH": 9, "IW": 13, "CI": 16},
                            {"kernel": 3, "stride": 2, "padding": 1}),
    "avg_pool2d": ({"N": 1, "C": 3, "IH": 9, "IW": 13}, {"kernel": 3, "stride": 2}),
    "global_avg_pool2d": ({"N": 1, "C": 3, "H": 5, "W": 19}, {}),
}
SAMPLED = 2          # legal configurations drawn beside the default, per op and target


def _target(level: str) -> tdsl.Target:
    try:
        return tdsl.Target(LEVELS[level])
    except TdslError as e:                      # not an x86-64 gcc
        pytest.skip(f"cannot build for {LEVELS[level]} here: {e.message}")


def test_the_table_holds_every_templated_std_op():
    """A new template is checked here as soon as it is written: add it to TEMPLATED."""
    templated = set()
    for level in LEVELS:
        target = _target(level)
        for name in tdsl.stdlib:
            for block in tdsl.stdlib[name]._schedule_defs(target).values():
                if any(isinstance(s, ast.KnobDecl) for s in block.body):
                    templated.add(name)
    assert templated == set(TEMPLATED)


@pytest.mark.parametrize("level", sorted(LEVELS))
@pytest.mark.parametrize("name", sorted(TEMPLATED))
def test_the_knob_space_builds_for_the_target(name, level):
    target = _target(level)
    sizes, attrs = TEMPLATED[name]
    task = Task(Workload.make("std", name, sizes, attrs, str(target)))
    space = task.space
    assert task.target == target and space.names, f"{name} has no knobs for {target}"
    default = space.default_index()
    assert space.is_valid(default), \
        f"{name}'s default configuration {space.config(default)} is illegal for {target}"
    rng = np.random.default_rng(sum(map(ord, name + level)))
    indices = [default, *space.sample(rng, SAMPLED, exclude=[default])]
    runs = target.unrunnable_reason() is None
    if runs:
        inputs = task.inputs(seed=1)
        want = task.reference(inputs)
    for i in indices:
        config = space.config(i)
        kernel = task.op.build(target, shapes=sizes, config=config, **attrs)
        assert kernel.lib_path.exists(), f"{name} {config} for {target}"
        if not runs:
            continue           # compiled for an ISA this CPU lacks: building is the check
        got = kernel(*inputs)
        got = got[0] if isinstance(got, tuple) else got
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"{name} {config} for {target} at {sizes}")
