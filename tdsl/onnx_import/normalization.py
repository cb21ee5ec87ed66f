"""Converters of the normalization: LayerNormalization, RMSNormalization, GroupNormalization, InstanceNormalization, LpNormalization, MeanVarianceNormalization, and the losses."""
from __future__ import annotations

from .registry import converter  # noqa: F401
