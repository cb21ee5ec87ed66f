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

import functools
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


def scale_shift(x, scale, shift):
    x, scale, shift = _f64(x, scale, shift)
    return _out(x * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1))


# ------------------------------------------------------------------------------ conv / pools

def _out_size(size: int, k: int, stride: int, padding: int, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def _pad_hw(x, padding: int, value: float = 0.0):
    """``x`` with ``padding`` elements of ``value`` around its last two dimensions."""
    pw = [(0, 0)] * (x.ndim - 2) + [(padding, padding)] * 2
    return np.pad(x, pw, mode="constant", constant_values=value)


def _windows(x, kh: int, kw: int, stride: int, padding: int, dilation: int = 1,
             pad_value: float = 0.0):
    """For each tap (r, s) of a kh x kw window: ``(r, s, patch)``, ``patch[..., y, x]`` being
    the padded input at (stride y + dilation r, stride x + dilation s)."""
    oh = _out_size(x.shape[-2], kh, stride, padding, dilation)
    ow = _out_size(x.shape[-1], kw, stride, padding, dilation)
    xp = _pad_hw(x, padding, pad_value)
    for r in range(kh):
        for s in range(kw):
            r0, s0 = r * dilation, s * dilation
            yield r, s, xp[..., r0:r0 + stride * (oh - 1) + 1:stride,
                           s0:s0 + stride * (ow - 1) + 1:stride]


def conv2d(x, w, stride=1, padding=0, dilation=1):
    """ONNX Conv / torch conv2d, NCHW, groups = 1, no bias, zero padding."""
    x, w = _f64(x, w)
    assert x.shape[1] == w.shape[1]
    kh, kw = w.shape[2:]
    return _out(sum(np.einsum("nchw,fc->nfhw", patch, w[:, :, r, s])
                    for r, s, patch in _windows(x, kh, kw, stride, padding, dilation)))


def depthwise_conv2d(x, w, stride=1, padding=0, dilation=1):
    """conv2d with groups = C and one filter per group: W is [C, 1, KH, KW]."""
    x, w = _f64(x, w)
    c = x.shape[1]
    assert w.shape[:2] == (c, 1)
    kh, kw = w.shape[2:]
    return _out(sum(patch * w[:, 0, r, s].reshape(1, c, 1, 1)
                    for r, s, patch in _windows(x, kh, kw, stride, padding, dilation)))


def max_pool2d(x, kernel, stride=None, padding=0):
    """ONNX MaxPool (floor mode): padding is -inf, stride defaults to the kernel."""
    stride = kernel if stride is None else stride
    (x,) = _f64(x)
    patches = (p for _, _, p in _windows(x, kernel, kernel, stride, padding, 1, -np.inf))
    return _out(functools.reduce(np.maximum, patches))


def max_pool2d_u8(x, kernel, stride=None, padding=0):
    """MaxPool of u8 values: padding is 0, the type's least."""
    stride = kernel if stride is None else stride
    x = np.asarray(x, np.uint8)
    patches = (p for _, _, p in _windows(x, kernel, kernel, stride, padding, 1, 0))
    return functools.reduce(np.maximum, patches)


def avg_pool2d(x, kernel, stride=None, padding=0):
    """ONNX AveragePool with count_include_pad = 0: each window's sum over its in-bounds
    elements, divided by how many there are."""
    stride = kernel if stride is None else stride
    (x,) = _f64(x)
    total = sum(p for _, _, p in _windows(x, kernel, kernel, stride, padding))
    ones = np.ones(x.shape[2:])
    count = sum(p for _, _, p in _windows(ones, kernel, kernel, stride, padding))
    return _out(total / count)


def global_avg_pool2d(x):
    (x,) = _f64(x)
    return _out(x.mean(axis=(2, 3)))


# ------------------------------------------------------------ blocked layout (NCHW[x]c)
# Each blocked op is its NCHW op between an unblocking and a reblocking done by numpy
# reshapes, so these share nothing with the blocked ops' index expressions.

def to_nchwc(x, block):
    x = np.asarray(x)
    n, c, h, w = x.shape
    cb = c // block
    return np.ascontiguousarray(
        x[:, :cb * block].reshape(n, cb, block, h, w).transpose(0, 1, 3, 4, 2)).astype(F32)


def from_nchwc(x):
    x = np.asarray(x)
    n, cb, h, w, ci = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * ci, h, w)).astype(F32)


def pack_conv_weights(w, in_block, out_block):
    w = np.asarray(w)
    f, c, kh, kw = w.shape
    fb, cb = f // out_block, c // in_block
    w = w[:fb * out_block, :cb * in_block].reshape(fb, out_block, cb, in_block, kh, kw)
    return np.ascontiguousarray(w.transpose(0, 2, 4, 5, 3, 1)).astype(F32)


def pack_dense_weights(w, block):
    """[M, K] -> [ceil(M / block), K, block]: panels of ``block`` rows of W, transposed, the
    last padded with zeros."""
    w = np.asarray(w)
    m, k = w.shape
    mb = -(-m // block)
    padded = np.zeros((mb * block, k), F32)
    padded[:m] = w
    return np.ascontiguousarray(padded.reshape(mb, block, k).transpose(0, 2, 1))


def dense_packed(x, wp, b):
    mb, k, mi = np.shape(wp)
    w = np.asarray(wp).transpose(0, 2, 1).reshape(mb * mi, k)[:np.shape(b)[0]]
    return dense(x, w, b)

def _unpack_conv_weights(w):
    """[FB, CB, KH, KW, CI, FI] back to [FB * FI, CB * CI, KH, KW]."""
    fb, cb, kh, kw, ci, fi = w.shape
    return np.asarray(w).transpose(0, 5, 1, 4, 2, 3).reshape(fb * fi, cb * ci, kh, kw)


def pack_channels(b, block):
    b = np.asarray(b)
    cb = b.shape[0] // block
    return b[:cb * block].reshape(cb, block).astype(F32)


def conv2d_nchwc(x, w, stride=1, padding=0, dilation=1):
    y = conv2d(from_nchwc(x), _unpack_conv_weights(w), stride, padding, dilation)
    return to_nchwc(y, np.shape(w)[5])


def conv2d_nchwc_valid(x, w, stride=1, dilation=1):
    return conv2d_nchwc(x, w, stride, 0, dilation)


def pack_depthwise_weights(w, block):
    w = np.asarray(w)
    c, _, kh, kw = w.shape
    cb = c // block
    return np.ascontiguousarray(
        w[:cb * block, 0].reshape(cb, block, kh, kw).transpose(0, 2, 3, 1)).astype(F32)


def depthwise_conv2d_nchwc(x, w, stride=1, padding=0, dilation=1):
    cb, kh, kw, ci = np.shape(w)
    w_nchw = np.asarray(w).transpose(0, 3, 1, 2).reshape(cb * ci, 1, kh, kw)
    return to_nchwc(depthwise_conv2d(from_nchwc(x), w_nchw, stride, padding, dilation), ci)


def bias_add_nchwc(x, b):
    x, b = _f64(x, b)
    return _out(x + b[None, :, None, None, :])


def batch_norm_nchwc(x, gamma, beta, mean, var, eps=1e-5):
    ci = np.shape(x)[4]
    flat = [np.asarray(v).reshape(-1) for v in (gamma, beta, mean, var)]
    return to_nchwc(batch_norm(from_nchwc(x), *flat, eps), ci)


def scale_shift_nchwc(x, scale, shift):
    x, scale, shift = _f64(x, scale, shift)
    return _out(x * scale[None, :, None, None, :] + shift[None, :, None, None, :])


def subsample_nchwc(x, stride):
    return np.asarray(x)[:, :, ::stride, ::stride, :]


def max_pool2d_nchwc(x, kernel, stride=None, padding=0):
    return to_nchwc(max_pool2d(from_nchwc(x), kernel, stride, padding), np.shape(x)[4])


def global_avg_pool2d_nchwc(x):
    return global_avg_pool2d(from_nchwc(x))


# ---------------------------------------------------------------------------------- winograd
# F(2x2, 3x3) with the transform matrices as matrices (Lavin and Gray), in float64

_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def _winograd_weights(w, g, in_block, out_block):
    """[F, C, 3, 3] -> G w Gt per channel pair, [a, a, C/in_block, in_block, F/out_block,
    out_block] for G of a rows."""
    (w,) = _f64(w)
    f, c = w.shape[:2]
    cb, fb, a = c // in_block, f // out_block, g.shape[0]
    u = np.einsum("er,fcrs,us->eucf", g, w[:fb * out_block, :cb * in_block], g)
    return _out(u.reshape(a, a, cb, in_block, fb, out_block))


def _filters_outer(u):
    """[a, a, CB, CI, FB, FI] -> [a, a, FB, CB, CI, FI] (F(2x2)'s layout)."""
    return np.ascontiguousarray(np.asarray(u).transpose(0, 1, 4, 2, 3, 5))


def _winograd_conv(x, u, bt, at):
    """3x3, padding 1, stride 1: each m x m output tile is At [U (.) (Bt d B)] A summed over
    the input channels, d the tile's a x a input window (At is m x a); U as
    `_winograd_weights` makes it."""
    m, a = at.shape
    n, cb, h, w_, ci = np.shape(x)
    (xx, uu) = _f64(from_nchwc(x), u)
    _, _, _, _, fb, fi = uu.shape
    uu = uu.reshape(a, a, cb * ci, fb * fi)
    th, tw = (h + m - 1) // m, (w_ + m - 1) // m
    xp = np.zeros((n, cb * ci, m * th + 2, m * tw + 2))
    xp[:, :, 1:h + 1, 1:w_ + 1] = xx
    # d[n, c, ty, tx, i, j] = xp[n, c, m ty + i, m tx + j]
    d = np.stack([np.stack([xp[:, :, i:i + m * th:m, j:j + m * tw:m] for j in range(a)], -1)
                  for i in range(a)], -2)
    v = np.einsum("ea,nctyab,ub->nctyeu", bt, d, bt)
    mm = np.einsum("nctyeu,eucf->nftyeu", v, uu)
    y = np.einsum("ie,nftyeu,ju->nftiyj", at, mm, at)
    y = y.reshape(n, fb * fi, m * th, m * tw)[:, :, :h, :w_]
    return to_nchwc(_out(y), fi)


def winograd_weights(w, in_block, out_block):
    return _filters_outer(_winograd_weights(w, _G, in_block, out_block))


def conv2d_winograd_nchwc(x, u):
    # U [4, 4, FB, CB, CI, FI] back to [4, 4, CB, CI, FB, FI]
    return _winograd_conv(x, np.asarray(u).transpose(0, 1, 3, 4, 2, 5), _BT, _AT)


# F(4x4, 3x3), the points 0, 1, -1, 2, -2 and infinity

_BT4 = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                 [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64)
_G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64)
_AT4 = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                 [0, 1, -1, 8, -8, 1]], np.float64)


def winograd4_weights(w, in_block, out_block):
    return _winograd_weights(w, _G4, in_block, out_block)


def conv2d_winograd4_nchwc(x, u):
    return _winograd_conv(x, u, _BT4, _AT4)


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
    return _pad_hw(np.asarray(x), padding).astype(F32)


def flatten(x):
    """ONNX Flatten(axis=1) / torch.flatten(x, 1)."""
    x = np.asarray(x)
    return x.reshape(x.shape[0], -1).astype(F32)


def concat(x, y):
    return np.concatenate([np.asarray(x), np.asarray(y)], axis=1).astype(F32)



# ---- onnxruntime's QLinearConv on u8 activations and i8 weights (MLAS's arithmetic)

def qlinear_conv2d(x, w, b, s, stride=1, padding=0, dilation=1, x_zp=0, y_zp=0, lo=0,
                   hi=255):
    """The i32 sum over the input padded with ``x_zp``, plus ``b``, converted to f32, times
    ``s``, rounded half to even, plus ``y_zp``, clamped to [lo, hi], as u8."""
    x, w = np.asarray(x), np.asarray(w)
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.full((n, c, h + 2 * padding, wd + 2 * padding), x_zp, np.int64)
    xp[:, :, padding:padding + h, padding:padding + wd] = x
    oh = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    acc = np.zeros((n, f, oh, ow), np.int64)
    for r in range(kh):
        for q in range(kw):
            patch = xp[:, :, r * dilation:r * dilation + stride * (oh - 1) + 1:stride,
                       q * dilation:q * dilation + stride * (ow - 1) + 1:stride]
            acc += np.einsum("nchw,fc->nfhw", patch, w[:, :, r, q].astype(np.int64))
    acc = (acc + np.asarray(b, np.int64).reshape(1, -1, 1, 1)).astype(np.int32)
    v = np.rint(acc.astype(F32) * np.asarray(s, F32).reshape(1, -1, 1, 1)) + F32(y_zp)
    return np.clip(v, lo, hi).astype(np.uint8)


def _unblock(x):
    n, cb, h, w, ci = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, cb * ci, h, w)


def _block(x, block):
    n, c, h, w = x.shape
    cb = c // block
    return np.ascontiguousarray(x[:, :cb * block].reshape(n, cb, block, h, w)
                                .transpose(0, 1, 3, 4, 2))


def qlinear_conv2d_nchwc(x, w, b, s, **attrs):
    """qlinear_conv2d on blocked activations; ``w`` as pack_qconv_weights makes it."""
    x, w = np.asarray(x), np.asarray(w)
    fb, cb, kh, kw, cq, fi, four = w.shape
    plain_w = w.transpose(0, 5, 1, 4, 6, 2, 3).reshape(fb * fi, cb * cq * four, kh, kw)
    plain_x = _unblock(x)[:, :cb * cq * four]
    y = qlinear_conv2d(plain_x, plain_w, np.ravel(b), np.ravel(s), **attrs)
    return _block(y, fi)


def _pack_groups(w, in_block, out_block, group):
    """Weights [F, C, KH, KW] as [F/o, C/i, KH, KW, i/group, o, group]: each ``group``
    consecutive input channels of a filter together (a dot product's operand)."""
    w = np.asarray(w)
    f, c, kh, kw = w.shape
    fb, cb, cq = f // out_block, c // in_block, in_block // group
    fo, co, r, q, cqi, fii, k = np.ix_(range(fb), range(cb), range(kh), range(kw), range(cq),
                                      range(out_block), range(group))
    return w[fo * out_block + fii, co * in_block + cqi * group + k, r, q]


def pack_qconv_weights(w, in_block, out_block):
    return _pack_groups(w, in_block, out_block, 4)


def pack_conv_weights_i16(w, in_block, out_block):
    return _pack_groups(w, in_block, out_block, 2)


def conv2d_i16(x, w, stride=1, dilation=1):
    """The i32 sum of i16 products over an unpadded input (int64 here, wrapped to i32 as
    the kernel's sums wrap)."""
    x, w = np.asarray(x, np.int64), np.asarray(w, np.int64)
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    oh = (h - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd - dilation * (kw - 1) - 1) // stride + 1
    acc = np.zeros((n, f, oh, ow), np.int64)
    for r in range(kh):
        for q in range(kw):
            patch = x[:, :, r * dilation:r * dilation + stride * (oh - 1) + 1:stride,
                      q * dilation:q * dilation + stride * (ow - 1) + 1:stride]
            acc += np.einsum("nchw,fc->nfhw", patch, w[:, :, r, q])
    return acc.astype(np.int32)


def conv2d_nchwc_i16(x, w, **attrs):
    """conv2d_i16 on blocked inputs; ``w`` as pack_conv_weights_i16 makes it."""
    x, w = np.asarray(x), np.asarray(w)
    fb, cb, kh, kw, cq, fi, two = w.shape
    plain_w = w.transpose(0, 5, 1, 4, 6, 2, 3).reshape(fb * fi, cb * cq * two, kh, kw)
    return _block(conv2d_i16(_unblock(x)[:, :cb * cq * two], plain_w, **attrs), fi)


def pack_channels_i32(b, block):
    b = np.asarray(b)
    cb = b.shape[0] // block
    return b[:cb * block].reshape(cb, block)


def max_pool2d_nchwc_u8(x, kernel, stride=None, padding=0):
    return _block(max_pool2d_u8(_unblock(np.asarray(x)), kernel, stride, padding),
                  np.shape(x)[4])


def to_nchwc_u8(x, block):
    return _block(np.asarray(x), block)


def from_nchwc_u8(x):
    return np.ascontiguousarray(_unblock(np.asarray(x)))


to_nchwc_i16 = to_nchwc_i32 = to_nchwc_u8
from_nchwc_i16 = from_nchwc_i32 = from_nchwc_u8

ALL = {name: fn for name, fn in list(globals().items())
       if callable(fn) and not name.startswith("_") and fn.__module__ == __name__}
