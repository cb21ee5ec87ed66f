"""Fixed-point requantization exactly as TensorFlow Lite's reference kernels do it.

A real multiplier (``x_scale * w_scale / y_scale``) becomes, at build time, an int32
``multiplier`` in [2^30, 2^31) and a power-of-two ``shift`` with
``real == multiplier * 2^(shift - 31)`` (`quantize_multiplier`, TFLite's QuantizeMultiplier).
At run time an int32 accumulator ``x`` is scaled with integers only
(`multiply_by_quantized_multiplier`, TFLite's MultiplyByQuantizedMultiplier):

    left, right = max(shift, 0), max(-shift, 0)
    a    = x * 2^left                          (int32, wrapping)
    high = SaturatingRoundingDoublingHighMul(a, multiplier)
         = (a * multiplier + nudge) / 2^31     (int64, C division: toward zero;
                                                nudge = 2^30 if the product >= 0 else
                                                1 - 2^30; INT32_MAX when a and the
                                                multiplier are both INT32_MIN)
    out  = RoundingDivideByPOT(high, right)    (an arithmetic shift, rounding half away
                                                from zero)

In .tdsl this is ``requantize(acc, scale)`` (acc an i32 expression, scale a constant float
expression of the op's attributes); the front end turns the scale into
``Intrinsic("requantize", (acc, multiplier, shift))`` so nothing at run time is a float.
The C emitter prints the same steps (`tdsl.emit_c.helpers`), this module is what the numpy
evaluators compute.
"""
from __future__ import annotations

import math

import numpy as np

INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(multiplier, shift) for a real multiplier >= 0, as TFLite's QuantizeMultiplier:
    frexp, the mantissa rounded half away from zero to 31 fractional bits; a mantissa that
    rounds up to 1.0 is halved; a shift below -31 gives 0 (the value underflows), one above
    30 saturates to the largest multiplier."""
    real = float(real)
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"a requantization scale must be finite and >= 0, got {real}")
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)            # real = q * 2^shift, q in [0.5, 1)
    q_fixed = math.floor(q * 2 ** 31 + 0.5)  # exact: q * 2^31 < 2^31 has <= 53 bits
    if q_fixed == 2 ** 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return 2 ** 31 - 1, 30
    return int(q_fixed), shift


def multiply_by_quantized_multiplier(x, multiplier, shift) -> np.ndarray:
    """Elementwise over numpy arrays (broadcasting); int32 in, int32 out."""
    x = np.asarray(x).astype(np.int64)
    m = np.asarray(multiplier).astype(np.int64)
    shift = np.asarray(shift).astype(np.int64)
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    a = (x << left) & 0xFFFFFFFF                        # x * 2^left, wrapped to int32
    a = np.where(a >= 2 ** 31, a - 2 ** 32, a)
    ab = a * m                                          # |ab| <= 2^62: exact in int64
    total = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where(total >= 0, total >> 31, -((-total) >> 31))   # divide toward zero
    high = np.where((a == INT32_MIN) & (m == INT32_MIN), INT32_MAX, high)
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (high < 0)
    out = (high >> right) + ((high & mask) > threshold)
    return out.astype(np.int32)
