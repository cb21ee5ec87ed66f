"""Converters of the convolution, pooling and resizing of any rank: Conv, ConvTranspose, MaxPool, AveragePool, LpPool, Resize, Upsample."""
from __future__ import annotations

from .registry import converter  # noqa: F401
