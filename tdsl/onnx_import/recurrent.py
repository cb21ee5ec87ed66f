"""Converters of the recurrent networks: LSTM, GRU, RNN."""
from __future__ import annotations

from .registry import converter  # noqa: F401
