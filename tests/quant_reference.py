"""Independent numpy implementations of the int8 standard-library ops (tdsl/dsl/std/quant.tdsl).

Written from what TFLite's reference kernels compute, stated as exact arithmetic rather than
as their bit tricks, so that they check tdsl's code instead of copying it:

- QuantizeMultiplier: real = M * 2^(shift - 31) with M the 31-bit mantissa rounded half away
  from zero, found with exact fractions (no frexp);
- SaturatingRoundingDoublingHighMul(a, b) is round(a * b / 2^31) with ties towards +inf
  (the nudge-and-truncate of gemmlowp does exactly that), saturated at INT32_MAX;
- RoundingDivideByPOT(x, e) is round(x / 2^e) with ties away from zero;

each in Python integers per element. Convolutions pad explicitly with the input zero point and
loop over the kernel taps; everything else is whole-array numpy in int64.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1


def quantize_multiplier(real: float) -> tuple[int, int]:
    if real == 0:
        return 0, 0
    exact = Fraction(real)
    shift = 0
    while exact >= 1:                  # bring the mantissa into [1/2, 1)
        exact /= 2
        shift += 1
    while exact < Fraction(1, 2):
        exact *= 2
        shift -= 1
    scaled = exact * 2 ** 31
    mantissa = int(scaled + Fraction(1, 2))       # positive: half away from zero
    if mantissa == 2 ** 31:
        mantissa, shift = 2 ** 30, shift + 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return 2 ** 31 - 1, 30
    return mantissa, shift


def _wrap32(v: int) -> int:
    return (v + 2 ** 31) % 2 ** 32 - 2 ** 31


def _round_half_up(q: Fraction) -> int:
    return int((q + Fraction(1, 2)).__floor__())


def _round_half_away(q: Fraction) -> int:
    n = int((abs(q) + Fraction(1, 2)).__floor__())
    return n if q >= 0 else -n


def scale_one(x: int, multiplier: int, shift: int) -> int:
    a = _wrap32(x * 2 ** max(shift, 0))
    if a == INT32_MIN and multiplier == INT32_MIN:
        high = INT32_MAX
    else:
        high = _round_half_up(Fraction(a * multiplier, 2 ** 31))
    return _round_half_away(Fraction(high, 2 ** max(-shift, 0)))


def requantize(acc, real: float) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier of every element by QuantizeMultiplier(real)."""
    m, s = quantize_multiplier(real)
    flat = [scale_one(int(v), m, s) for v in np.asarray(acc, np.int64).ravel()]
    return np.asarray(flat, np.int64).reshape(np.shape(acc))


def _saturate(v) -> np.ndarray:
    return np.clip(np.asarray(v, np.int64), -128, 127).astype(np.int8)


def _i64(*arrays):
    return [np.asarray(a, np.int64) for a in arrays]


def qdense(x, w, bias, x_zp=0, w_zp=0, y_zp=0, scale=1.0):
    x, w, bias = _i64(x, w, bias)
    acc = (x - x_zp) @ (w - w_zp).T + bias
    return _saturate(requantize(acc, scale) + y_zp)


def _conv(xp, w, stride, out_h, out_w, depthwise):
    n, c = xp.shape[:2]
    f, kh, kw = w.shape[0], w.shape[2], w.shape[3]
    acc = np.zeros((n, f, out_h, out_w), np.int64)
    for r in range(kh):
        for s in range(kw):
            window = xp[:, :, r:r + stride * (out_h - 1) + 1:stride,
                        s:s + stride * (out_w - 1) + 1:stride]
            if depthwise:
                acc += window * w[None, :, 0, r, s, None, None]
            else:
                acc += np.einsum("nchw,fc->nfhw", window, w[:, :, r, s])
    return acc


def _qconv(x, w, bias, stride, padding, x_zp, w_zp, y_zp, scale, depthwise):
    x, w, bias = _i64(x, w, bias)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)),
                constant_values=x_zp) - x_zp
    out_h = (x.shape[2] + 2 * padding - w.shape[2]) // stride + 1
    out_w = (x.shape[3] + 2 * padding - w.shape[3]) // stride + 1
    acc = _conv(xp, w - w_zp, stride, out_h, out_w, depthwise) + bias[None, :, None, None]
    return _saturate(requantize(acc, scale) + y_zp)


def qconv2d(x, w, bias, stride=1, padding=0, x_zp=0, w_zp=0, y_zp=0, scale=1.0):
    return _qconv(x, w, bias, stride, padding, x_zp, w_zp, y_zp, scale, depthwise=False)


def qdepthwise_conv2d(x, w, bias, stride=1, padding=0, x_zp=0, w_zp=0, y_zp=0, scale=1.0):
    return _qconv(x, w, bias, stride, padding, x_zp, w_zp, y_zp, scale, depthwise=True)


def qadd(a, b, a_zp=0, b_zp=0, y_zp=0, a_scale=1.0, b_scale=1.0, y_scale=1.0):
    """TFLite's int8 ADD (left shift 20, each input over twice the larger input scale)."""
    a, b = _i64(a, b)
    twice_max = 2.0 * max(a_scale, b_scale)
    sa = requantize((a - a_zp) * (1 << 20), a_scale / twice_max)
    sb = requantize((b - b_zp) * (1 << 20), b_scale / twice_max)
    return _saturate(requantize(sa + sb, twice_max / ((1 << 20) * y_scale)) + y_zp)


def qrelu(x, x_zp=0):
    return np.maximum(np.asarray(x), np.int8(x_zp)).astype(np.int8)


def qclamp(x, lo=-128, hi=127):
    return np.clip(np.asarray(x), lo, hi).astype(np.int8)


def _pool_windows(x, kernel, stride, padding, fill):
    x = np.asarray(x, np.int64)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)),
                constant_values=fill)
    valid = np.pad(np.ones(x.shape, bool), ((0, 0), (0, 0), (padding, padding),
                                            (padding, padding)))
    out_h = (x.shape[2] + 2 * padding - kernel) // stride + 1
    out_w = (x.shape[3] + 2 * padding - kernel) // stride + 1
    for r in range(kernel):
        for s in range(kernel):
            sl = (slice(None), slice(None), slice(r, r + stride * (out_h - 1) + 1, stride),
                  slice(s, s + stride * (out_w - 1) + 1, stride))
            yield xp[sl], valid[sl]


def qmax_pool2d(x, kernel, stride=None, padding=0):
    stride = kernel if stride is None else stride
    best = None
    for window, _ in _pool_windows(x, kernel, stride, padding, -10 ** 6):
        best = window if best is None else np.maximum(best, window)
    return _saturate(np.maximum(best, -128))


def qavg_pool2d(x, kernel, stride=None, padding=0):
    stride = kernel if stride is None else stride
    total = count = 0
    for window, valid in _pool_windows(x, kernel, stride, padding, 0):
        total = total + window
        count = count + valid.astype(np.int64)
    out = [_round_half_away(Fraction(int(t), int(c))) for t, c in
           zip(np.ravel(total), np.ravel(count))]
    return _saturate(np.asarray(out, np.int64).reshape(np.shape(total)))


OPS = {f.__name__: f for f in (qdense, qconv2d, qdepthwise_conv2d, qadd, qrelu, qclamp,
                               qmax_pool2d, qavg_pool2d)}
