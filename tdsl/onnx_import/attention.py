"""Converters of the attention: the Attention operator, RotaryEmbedding, and the exporters' attention subgraph."""
from __future__ import annotations

from .registry import converter  # noqa: F401
