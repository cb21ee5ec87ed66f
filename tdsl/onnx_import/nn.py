"""Converters of the neural-network operators: Gemm, BatchNormalization,
Softmax/LogSoftmax, LRN (convolution and pooling are in `conv`, MatMul in `linalg`)."""
from __future__ import annotations

import numpy as np

from . import templates as T
from .registry import converter, opt as _opt


@converter("Gemm", attrs=("alpha", "beta", "transA", "transB", "broadcast"))
def gemm(cv, node, a):
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    ta, tb = a.get("transA", 0), a.get("transB", 0)
    xa, xb, xc = node.input[0], node.input[1], _opt(node, 2)
    sa, sb = cv.shape(xa), cv.shape(xb)
    m = sa[1] if ta else sa[0]
    n = sb[0] if tb else sb[1]
    if cv.is_static(xb) and not tb:                       # dense wants W as [N, K]
        cv.static[xb + "#T"] = np.ascontiguousarray(cv.static[xb].T)
        xb, tb = xb + "#T", 1
    c_ok = xc is None or (cv.is_static(xc) and cv.static[xc].size == n and
                          cv.static[xc].reshape(-1).shape == (n,) and
                          cv.shape(xc)[-1:] == (n,))
    if not ta and tb and alpha == 1.0 and (beta == 1.0 or xc is None) and c_ok:
        bias = (xc or node.output[0]) + "#bias"
        cv.static[bias] = (cv.static[xc].reshape(-1) if xc else np.zeros(n, np.float32))
        cv.call(node.output[0], "dense", [cv.tensor(xa), cv.tensor(xb), cv.tensor(bias)],
                (m, n))
        return
    args = [cv.tensor(xa), cv.tensor(xb)] + ([cv.tensor(xc)] if xc else [])
    text = T.gemm(list(sa), list(cv.shape(xb)), list(args[2].shape) if xc else None, ta, tb,
                  alpha, beta, (m, n))
    cv.call(node.output[0], cv.op("gemm", text), args, (m, n))


@converter("BatchNormalization", attrs=("epsilon", "momentum", "spatial", "is_test",
                                        "training_mode"))
def batch_norm(cv, node, a):
    if a.get("spatial", 1) != 1 or a.get("training_mode", 0):
        raise cv.error("only inference-mode, spatial batch normalization is supported")
    if len([o for o in node.output if o]) > 1:
        raise cv.error("the running statistics outputs (training mode)")
    eps = a.get("epsilon", 1e-5)
    x = cv.tensor(node.input[0])
    if len(x.shape) == 4:
        params = [cv.tensor(i) for i in node.input[1:5]]
        cv.call(node.output[0], "batch_norm", [x, *params], x.shape, f"eps={T.lit(eps)}")
        return
    scale, bias, mean, var = (cv.value(i).astype(np.float64) for i in node.input[1:5])
    k = scale / np.sqrt(var + eps)
    shape = (-1,) + (1,) * (len(x.shape) - 2)
    cv.static[node.output[0] + "#k"] = (k.reshape(shape)).astype(np.float32)
    cv.static[node.output[0] + "#b"] = ((bias - mean * k).reshape(shape)).astype(np.float32)
    cv.elementwise(node.output[0], [node.input[0], node.output[0] + "#k",
                                    node.output[0] + "#b"], "{0} * {1} + {2}", "bn")


def _softmax_f16(shape, axis: int, log: bool) -> str:
    """Softmax (log-softmax) of f16 rounded where ONNX's reference rounds (each numpy op of
    float16): ``X - max``, its exp, the sum (accumulated in f32), the quotient (its log)."""
    i = T.idx(len(shape))
    rest = [v for k, v in enumerate(i) if k != axis]
    red = [s for k, s in enumerate(shape) if k != axis]
    at = list(i)
    at[axis] = "k"
    lhs = f"[{', '.join(rest)}]" if rest else ""
    dims = T.ty(red, "f16") if red else "f16"
    y = f"E[{', '.join(i)}] / S{lhs}"
    return (f"op {{name}}(X: {T.ty(shape, 'f16')}) -> Y: {T.ty(shape, 'f16')} {{\n"
            f"    M: {dims}\n    M{lhs} = max[k: {shape[axis]}](X[{', '.join(at)}])\n"
            f"    E: {T.ty(shape, 'f16')}\n"
            f"    E[{', '.join(i)}] = exp(f16(X[{', '.join(i)}] - M{lhs}))\n"
            f"    S: {dims}\n    S{lhs} = sum[k: {shape[axis]}](E[{', '.join(at)}])\n"
            f"    Y[{', '.join(i)}] = {f'log(f16({y}))' if log else y}\n}}\n")


@converter("Softmax", "LogSoftmax", attrs=("axis",))
def softmax(cv, node, a):
    x = cv.tensor(node.input[0])
    if x.dtype not in ("f32", "f64", "f16"):
        raise cv.error(f"{node.op_type} of {x.dtype}")
    rank, log = len(x.shape), node.op_type == "LogSoftmax"
    axis = a.get("axis", 1 if cv.opset < 13 else -1) % rank
    std = "log_softmax" if log else "softmax"

    def normalise(out, t, axis):
        if t.dtype == "f32" and len(t.shape) == 2 and axis == 1:
            cv.call(out, std, [t], t.shape)
        elif t.dtype == "f16":
            cv.call(out, cv.op(std + "_f16", _softmax_f16(list(t.shape), axis, log)), [t],
                    t.shape, dtype="f16")
        else:
            cv.call(out, cv.op(std, T.softmax(list(t.shape), axis, log, t.dtype)), [t],
                    t.shape, dtype=t.dtype)
    if cv.opset < 13 and axis != rank - 1:
        # before opset 13: the input is flattened to 2-D at axis, normalised per row
        rows = (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))
        mid = node.output[0] + "#2d"
        cv.reshape(mid, node.input[0], rows)
        normalise(mid + "#sm", cv.tensors[mid], 1)
        cv.reshape(node.output[0], mid + "#sm", x.shape)
    else:
        normalise(node.output[0], x, axis)


@converter("LRN", attrs=("alpha", "beta", "bias", "size"))
def lrn(cv, node, a):
    x = cv.tensor(node.input[0])
    text = T.lrn(list(x.shape), int(a["size"]), a.get("alpha", 1e-4), a.get("beta", 0.75),
                 a.get("bias", 1.0))
    cv.call(node.output[0], cv.op("lrn", text), [x], x.shape)
