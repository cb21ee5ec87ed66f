"""Converters of the signal-processing operators: DFT, STFT, the windows (Hann, Hamming,
Blackman) and MelWeightMatrix.

A DFT is a product with the DFT matrix, computed here for the static length (no FFT): one
sum over the transformed axis, whose real and imaginary parts (the last axis of size 1 or 2,
ONNX's layout of complex values) each read a coefficient of that matrix, a weight of the
graph. forward and inverse, onesided (rfft, and irfft from the one-sided half), dft_length
cropping or zero-padding and any axis but the last are supported. STFT frames the signal
in the same sum (its window a weight, or a tensor of the graph). The windows and the mel
matrix have static inputs: they are computed here (by ONNX's reference implementation);
a size given as a graph input is asked for as a constant.
"""
from __future__ import annotations

import numpy as np

from . import templates as T
from ..lowering.dtypes import to_numpy
from .registry import converter, opt


def _reference(cv, node):
    """The outputs of ``node`` of static inputs, by onnx's reference implementation."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    vals = [np.asarray(cv.value(n)) for n in node.input if n]
    names = [n for n in node.input if n]
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in zip(names, vals)]
    outs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None)
            for o in node.output if o]
    g = helper.make_graph([node], "fold", ins, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", cv.opset)])
    try:
        res = ReferenceEvaluator(m).run(None, dict(zip(names, vals)))
    except Exception as e:                     # the reference's own errors for bad inputs
        raise cv.error(f"can't be computed: {str(e).splitlines()[0] if str(e) else e!r}") \
            from None
    for o, r in zip([o for o in node.output if o], res):
        cv.static[o] = np.asarray(r)


@converter("HannWindow", "HammingWindow", "BlackmanWindow",
           attrs=("output_datatype", "periodic"))
def window(cv, node, a):
    _reference(cv, node)


@converter("MelWeightMatrix", attrs=("output_datatype",))
def mel_weight_matrix(cv, node, a):
    _reference(cv, node)


# ---------------------------------------------------------------------------- DFT

def _dft_matrix(n_in: int, length: int, inverse: bool, onesided: bool):
    """W[c_out, c_in, k, j]: the coefficient of input element j (part c_in: 0 real, 1
    imaginary) in output element k (part c_out), and the output's length and parts."""
    if inverse and onesided:                   # irfft: the first length // 2 + 1 bins
        n_used = min(n_in, length // 2 + 1)
        k = np.arange(length)[:, None]
        j = np.arange(n_used)[None, :]
        w = np.where((j == 0) | ((length % 2 == 0) & (j == length // 2)), 1.0, 2.0)
        th = 2 * np.pi * j * k / length
        out = np.zeros((1, 2, length, n_used))
        out[0, 0] = w * np.cos(th) / length
        out[0, 1] = -w * np.sin(th) / length
        return out
    n_used = min(n_in, length)
    n_out = length // 2 + 1 if onesided else length
    k = np.arange(n_out)[:, None]
    j = np.arange(n_used)[None, :]
    th = 2 * np.pi * j * k / length
    c, s = np.cos(th), np.sin(th)
    out = np.zeros((2, 2, n_out, n_used))
    if inverse:          # x = 1/L sum X e^{+i th}
        out[0, 0], out[0, 1], out[1, 0], out[1, 1] = c, -s, s, c
        out /= length
    else:                # X = sum x e^{-i th}
        out[0, 0], out[0, 1], out[1, 0], out[1, 1] = c, s, -s, c
    return out


def _dft_text(x_shape, dtype, axis, w_shape, frames=None) -> str:
    """Y[..., k, ..., c] = sum[j](W[c, 0, k, j] X[..., j, ..., 0] (+ W[c, 1, k, j] X[.., 1]))
    (``frames``: (hop, frame count, window?) for STFT, whose X is [B, L, C] and Y
    [B, F, K, 2])."""
    c_out, c_in_w, n_out, n_used = w_shape
    c_in = x_shape[-1]
    if frames is None:
        out_shape = list(x_shape[:-1]) + [c_out]
        out_shape[axis] = n_out
        i = T.idx(len(out_shape))
        xi = list(i)
        xi[axis] = "j"
        k = i[axis]
        guard = None
    else:
        hop, nf, has_window = frames
        out_shape = [x_shape[0], nf, n_out, c_out]
        i = T.idx(4)
        k = i[2]
        pos = f"{i[1]} * {hop} + j"
        xi = [i[0], pos, ""]
        guard = f"{pos} < {x_shape[1]}"
    c = i[-1]
    terms = []
    for p in range(min(c_in, c_in_w)):
        xs = xi[:-1] + [str(p)]
        terms.append(f"W[{c}, {p}, {k}, j] * {T.at('X', xs)}")
    body = " + ".join(terms)
    params = [f"X: {T.ty(x_shape, dtype)}", f"W: {T.ty(w_shape, dtype)}"]
    if frames is not None and frames[2]:
        params.append(f"G: {T.ty([n_used], dtype)}")
        body = f"G[j] * ({body})"
    if guard:
        body = f"select({guard}, {body}, {T.lit(0.0, dtype)})"
    return (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(out_shape, dtype)} {{\n"
            f"    {T.at('Y', i)} = sum[j: {n_used}]({body})\n}}\n")


def _float_signal(cv, name):
    x = cv.tensor(name)
    if x.dtype not in ("f32", "f64"):
        raise cv.error(f"a signal of dtype {x.dtype} (supported: f32, f64)")
    if not x.shape or x.shape[-1] not in (1, 2):
        raise cv.error(f"a signal of shape {list(x.shape)}: its last axis is 1 (real) or "
                       f"2 (real, imaginary)")
    return x


def _weight(cv, out, w, dtype):
    name = f"{out}#dft"
    cv.static[name] = w.astype(to_numpy(dtype))
    return cv.tensor(name)


@converter("DFT", attrs=("axis", "inverse", "onesided"))
def dft(cv, node, a):
    x = _float_signal(cv, node.input[0])
    r = len(x.shape)
    if cv.opset >= 20:
        if "axis" in a:
            raise cv.error("attribute 'axis' is DFT-17's (opset 20 gives it as an input)")
        ax = opt(node, 2)
        axis = int(np.asarray(cv.value(ax)).reshape(())) if ax else -2
    else:
        axis = int(a.get("axis", 1))
    if not -r <= axis < r or axis % r == r - 1:
        raise cv.error(f"axis {axis} of a signal of rank {r} (not the last, complex axis)")
    axis %= r
    inverse, onesided = bool(a.get("inverse", 0)), bool(a.get("onesided", 0))
    n = x.shape[axis]
    ln = opt(node, 1)
    if ln:
        length = int(np.asarray(cv.value(ln)).reshape(()))
    else:
        length = 2 * (n - 1) if inverse and onesided else n
    if length < 1:
        raise cv.error(f"a DFT of length {length}")
    w = _dft_matrix(n, length, inverse, onesided)
    wt = _weight(cv, node.output[0], w, x.dtype)
    text = _dft_text(list(x.shape), x.dtype, axis, list(w.shape))
    shape = list(x.shape[:-1]) + [w.shape[0]]
    shape[axis] = w.shape[2]
    cv.call(node.output[0], cv.op("dft", text), [x, wt], shape, dtype=x.dtype)


@converter("STFT", attrs=("onesided",))
def stft(cv, node, a):
    x = _float_signal(cv, node.input[0])
    if len(x.shape) != 3:
        raise cv.error(f"a signal of shape {list(x.shape)} (STFT's is [batch, length, 1 "
                       f"or 2])")
    hop = int(np.asarray(cv.value(node.input[1])).reshape(()))
    win, fl = opt(node, 2), opt(node, 3)
    length = int(np.asarray(cv.value(fl)).reshape(())) if fl else None
    wsize = cv.shape(win)[0] if win else None
    if length is None:
        length = wsize if wsize is not None else x.shape[1]
    wsize = wsize if wsize is not None else length
    if hop < 1 or length < 1 or length > x.shape[1]:
        raise cv.error(f"frame_step {hop} and frame length {length} for a signal of "
                       f"length {x.shape[1]}")
    nf = 1 + (x.shape[1] - length) // hop
    onesided = bool(a.get("onesided", 1))
    w = _dft_matrix(wsize, length, False, onesided)          # [2, 2, K, min(wsize, L)]
    n_used = w.shape[3]
    args = [x]
    has_window = False
    if win and cv.is_static(win):
        w = w * np.asarray(cv.static[win], np.float64)[:n_used]
    elif win:
        has_window = True
    wt = _weight(cv, node.output[0], w, x.dtype)
    args.append(wt)
    if has_window:
        g = cv.tensor(win)
        if g.dtype != x.dtype:
            raise cv.error(f"a window of dtype {g.dtype} for a signal of {x.dtype}")
        if g.shape[0] != n_used:
            cut = f"{node.output[0]}#window"
            text = T.slice_(list(g.shape), [0], [1], [n_used], g.dtype)
            cv.call(cut, cv.op("slice", text), [g], (n_used,), dtype=g.dtype)
            g = cv.tensors[cut]
        args.append(g)
    text = _dft_text(list(x.shape), x.dtype, None, list(w.shape), (hop, nf, has_window))
    cv.call(node.output[0], cv.op("stft", text), args, (x.shape[0], nf, w.shape[2], 2),
            dtype=x.dtype)
