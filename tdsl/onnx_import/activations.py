"""Converters of the activation functions."""
from __future__ import annotations

from . import templates as T
from .registry import converter


@converter("LeakyRelu", attrs=("alpha",))
def leaky_relu(cv, node, a):
    t = cv.tensor(node.input[0])
    cv.call(node.output[0], "leaky_relu", [t], t.shape, f"alpha={T.lit(a.get('alpha', 0.01))}")
