"""Converters of the signal-processing operators: DFT, STFT, the windows and MelWeightMatrix."""
from __future__ import annotations
