"""Every configuration of the standard library's tuning templates computes the op: hypothesis
draws a configuration and awkward sizes (the whole spaces run under ``-m slow``)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tdsl.tuner.log import Workload
from tdsl.tuner.task import Task

# op -> (the range each size is drawn from, attributes)
TEMPLATED = {
    "matmul": ({"M": (1, 40), "N": (1, 70), "K": (1, 20)}, {}),
    "batch_matmul": ({"B": (1, 3), "M": (1, 30), "N": (1, 50), "K": (1, 12)}, {}),
    "dense": ({"N": (1, 30), "M": (1, 70), "K": (1, 20)}, {}),
    "conv2d": ({"N": (1, 2), "C": (1, 5), "IH": (3, 12), "IW": (3, 20), "F": (1, 40),
                "KH": (3, 3), "KW": (3, 3)}, {"padding": 1}),
    "depthwise_conv2d": ({"N": (1, 2), "C": (1, 5), "IH": (3, 12), "IW": (3, 40),
                          "KH": (3, 3), "KW": (3, 3)}, {"padding": 1}),
    "conv2d_nchwc": ({"N": (1, 2), "CB": (1, 3), "IH": (3, 12), "IW": (3, 20), "CI": (1, 4),
                      "FB": (1, 5), "KH": (3, 3), "KW": (3, 3), "FI": (1, 16)},
                     {"padding": 1, "stride": 2}),
    "depthwise_conv2d_nchwc": ({"N": (1, 2), "CB": (1, 3), "IH": (3, 12), "IW": (3, 20),
                                "CI": (1, 8), "KH": (3, 3), "KW": (3, 3)}, {"padding": 1}),
    "softmax": ({"N": (1, 9), "D": (1, 70)}, {}),
    "layer_norm": ({"N": (1, 9), "D": (1, 70)}, {}),
}


def check(name, sizes, attrs, index=None):
    task = Task(Workload.make("std", name, sizes, attrs))
    if index is None:
        indices = task.space.valid_indices()
    else:
        indices = [task.space.valid_indices()[index % len(task.space)]]
    inputs = task.inputs(seed=1)
    want = task.reference(inputs)
    for i in indices:
        kernel = task.op.build(shapes=sizes, config=task.space.config(i), **attrs)
        got = kernel(*inputs)
        got = got[0] if isinstance(got, tuple) else got
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"{name} {task.space.config(i)} at {sizes}")


@pytest.mark.parametrize("name", sorted(TEMPLATED))
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_a_drawn_configuration_matches_the_reference(name, data):
    ranges, attrs = TEMPLATED[name]
    sizes = {k: data.draw(st.integers(lo, hi), label=k) for k, (lo, hi) in ranges.items()}
    check(name, sizes, attrs, data.draw(st.integers(0, 10 ** 6), label="config"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TEMPLATED))
def test_every_configuration_matches_the_reference(name):
    ranges, attrs = TEMPLATED[name]
    check(name, {k: hi - 1 for k, (lo, hi) in ranges.items()}, attrs)
