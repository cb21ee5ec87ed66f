"""Independent numpy implementations of the standard-library ops (the test oracle's oracle).

Written straight from the ONNX / PyTorch definitions, without looking at how the .tdsl files
or the reference evaluator compute them: explicit padding plus a loop over kernel offsets for
convolutions and pools, whole-array numpy for the rest. Everything is computed in float64 from
the float32 inputs and rounded to float32 once at the end, so these are at least as accurate
as any float32 implementation; the tests compare with a tolerance.

Each function takes the same positional arrays and keyword attributes (with the same
defaults) as ``tdsl.stdlib[name].reference``.
"""
from __future__ import annotations

import math

import numpy as np

F32 = np.float32


def _f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def _out(y) -> np.ndarray:
    return np.asarray(y).astype(F32)


# ------------------------------------------------------------------------------- elementwise

def add(x, y):
    x, y = _f64(x, y)
    return _out(x + y)


def sub(x, y):
    x, y = _f64(x, y)
    return _out(x - y)


def mul(x, y):
    x, y = _f64(x, y)
    return _out(x * y)


def div(x, y):
    x, y = _f64(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _out(x / y)


def relu(x):
    (x,) = _f64(x)
    return _out(np.where(x > 0, x, 0.0))


def sigmoid(x):
    (x,) = _f64(x)
    # The two-sided form never overflows exp.
    e = np.exp(-np.abs(x))
    return _out(np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)))


def tanh(x):
    (x,) = _f64(x)
    return _out(np.tanh(x))


def exp(x):
    (x,) = _f64(x)
    with np.errstate(over="ignore"):
        return _out(np.exp(x))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    """PyTorch's GELU(approximate='none'): x * Phi(x) = x/2 * (1 + erf(x / sqrt 2))."""
    (x,) = _f64(x)
    if x.size == 0:
        return _out(x)
    return _out(0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))))


def leaky_relu(x, alpha=0.01):
    (x,) = _f64(x)
    return _out(np.where(x >= 0, x, np.float64(F32(alpha)) * x))


def clip(x, lo=-math.inf, hi=math.inf):
    """ONNX Clip / torch.clamp: min(max(x, lo), hi), so lo > hi gives hi everywhere."""
    (x,) = _f64(x)
    lo, hi = float(F32(lo)), float(F32(hi))
    return _out(np.minimum(np.maximum(x, lo), hi))


def bias_add(x, b):
    x, b = _f64(x, b)
    return _out(x + b.reshape(1, -1, 1, 1))


# ------------------------------------------------------------------------------------ linalg

def matmul(a, b):
    a, b = _f64(a, b)
    return _out(a @ b)


def batch_matmul(a, b):
    a, b = _f64(a, b)
    return _out(np.matmul(a, b))


def dense(x, w, b):
    """torch.nn.functional.linear: X @ W.T + b with W stored [out, in]."""
    x, w, b = _f64(x, w, b)
    return _out(x @ w.T + b)


# -------------------------------------------------------------------------------------- norm

def softmax(x):
    (x,) = _f64(x)
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return _out(e / e.sum(axis=-1, keepdims=True))


def log_softmax(x):
    (x,) = _f64(x)
    z = x - x.max(axis=-1, keepdims=True)
    return _out(z - np.log(np.exp(z).sum(axis=-1, keepdims=True)))


def layer_norm(x, gamma, beta, eps=1e-5):
    """Over the last axis, biased variance, eps inside the square root."""
    x, gamma, beta = _f64(x, gamma, beta)
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return _out((x - mu) / np.sqrt(var + float(F32(eps))) * gamma + beta)


def batch_norm(x, gamma, beta, mean, var, eps=1e-5):
    """Inference-mode BatchNormalization (running statistics), NCHW."""
    x, gamma, beta, mean, var = _f64(x, gamma, beta, mean, var)
    c = lambda v: v.reshape(1, -1, 1, 1)  # noqa: E731
    return _out((x - c(mean)) / np.sqrt(c(var) + float(F32(eps))) * c(gamma) + c(beta))


# ------------------------------------------------------------------------------ conv / pools

def _out_size(size: int, k: int, stride: int, padding: int, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def _window(xp, r0: int, s0: int, oh: int, ow: int, stride: int):
    """xp[..., r0 + stride*y, s0 + stride*x] for y < oh, x < ow."""
    return xp[..., r0:r0 + stride * (oh - 1) + 1:stride, s0:s0 + stride * (ow - 1) + 1:stride]


def _pad_hw(x, padding: int, value: float):
    pw = [(0, 0)] * (x.ndim - 2) + [(padding, padding)] * 2
    return np.pad(x, pw, mode="constant", constant_values=value)


def conv2d(x, w, stride=1, padding=0, dilation=1):
    """ONNX Conv / torch conv2d, NCHW, groups = 1, no bias, zero padding."""
    x, w = _f64(x, w)
    n, c, ih, iw = x.shape
    f, c2, kh, kw = w.shape
    assert c == c2
    oh = _out_size(ih, kh, stride, padding, dilation)
    ow = _out_size(iw, kw, stride, padding, dilation)
    xp = _pad_hw(x, padding, 0.0)
    y = np.zeros((n, f, oh, ow))
    for r in range(kh):
        for s in range(kw):
            patch = _window(xp, r * dilation, s * dilation, oh, ow, stride)   # n c oh ow
            y += np.einsum("nchw,fc->nfhw", patch, w[:, :, r, s])
    return _out(y)


def depthwise_conv2d(x, w, stride=1, padding=0, dilation=1):
    """conv2d with groups = C and one filter per group: W is [C, 1, KH, KW]."""
    x, w = _f64(x, w)
    n, c, ih, iw = x.shape
    c2, one, kh, kw = w.shape
    assert c == c2 and one == 1
    oh = _out_size(ih, kh, stride, padding, dilation)
    ow = _out_size(iw, kw, stride, padding, dilation)
    xp = _pad_hw(x, padding, 0.0)
    y = np.zeros((n, c, oh, ow))
    for r in range(kh):
        for s in range(kw):
            patch = _window(xp, r * dilation, s * dilation, oh, ow, stride)
            y += patch * w[:, 0, r, s].reshape(1, c, 1, 1)
    return _out(y)


def max_pool2d(x, kernel, stride=None, padding=0):
    """ONNX MaxPool (floor mode): padding is -inf, stride defaults to the kernel."""
    stride = kernel if stride is None else stride
    (x,) = _f64(x)
    oh = _out_size(x.shape[2], kernel, stride, padding)
    ow = _out_size(x.shape[3], kernel, stride, padding)
    xp = _pad_hw(x, padding, -np.inf)
    y = np.full(x.shape[:2] + (oh, ow), -np.inf)
    for r in range(kernel):
        for s in range(kernel):
            y = np.maximum(y, _window(xp, r, s, oh, ow, stride))
    return _out(y)


def avg_pool2d(x, kernel, stride=None, padding=0):
    """ONNX AveragePool with count_include_pad = 0: each window's sum over its in-bounds
    elements, divided by how many there are."""
    stride = kernel if stride is None else stride
    (x,) = _f64(x)
    oh = _out_size(x.shape[2], kernel, stride, padding)
    ow = _out_size(x.shape[3], kernel, stride, padding)
    xp = _pad_hw(x, padding, 0.0)
    ones = _pad_hw(np.ones(x.shape[2:]), padding, 0.0)
    total = np.zeros(x.shape[:2] + (oh, ow))
    count = np.zeros((oh, ow))
    for r in range(kernel):
        for s in range(kernel):
            total += _window(xp, r, s, oh, ow, stride)
            count += _window(ones, r, s, oh, ow, stride)
    return _out(total / count)


def global_avg_pool2d(x):
    (x,) = _f64(x)
    return _out(x.mean(axis=(2, 3)))


# ------------------------------------------------------------------------------------- shape

def transpose(x):
    return np.ascontiguousarray(np.asarray(x).T).astype(F32)


def reduce_sum(x):
    (x,) = _f64(x)
    return _out(x.sum(axis=-1))


def reduce_max(x):
    (x,) = _f64(x)
    return _out(x.max(axis=-1))


def reduce_mean(x):
    (x,) = _f64(x)
    return _out(x.mean(axis=-1))


def pad2d(x, padding):
    return _pad_hw(np.asarray(x), padding, 0.0).astype(F32)


def flatten(x):
    """ONNX Flatten(axis=1) / torch.flatten(x, 1)."""
    x = np.asarray(x)
    return x.reshape(x.shape[0], -1).astype(F32)


def concat(x, y):
    return np.concatenate([np.asarray(x), np.asarray(y)], axis=1).astype(F32)


ALL = {name: fn for name, fn in list(globals().items())
       if callable(fn) and not name.startswith("_") and fn.__module__ == __name__}
