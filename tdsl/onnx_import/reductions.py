"""Converters of the reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin, CumSum, TopK, Hardmax."""
from __future__ import annotations

from .registry import converter  # noqa: F401
