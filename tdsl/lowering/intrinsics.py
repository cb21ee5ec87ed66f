"""Built-in tensor intrinsics (micro-kernels) that ``tensorize(axis, NAME)`` in a schedule
block can name. Python code can pass any `TensorIntrin` to `Schedule.tensorize`."""
from __future__ import annotations

from .schedule import TensorIntrin

INTRINSICS: dict[str, TensorIntrin] = {}


def register(intrin: TensorIntrin) -> TensorIntrin:
    INTRINSICS[intrin.name] = intrin
    return intrin
