"""Converters of the quantized operators: QuantizeLinear, DequantizeLinear, QLinearConv, QLinearMatMul, MatMulInteger, ConvInteger, DynamicQuantizeLinear."""
from __future__ import annotations

from .registry import converter  # noqa: F401
