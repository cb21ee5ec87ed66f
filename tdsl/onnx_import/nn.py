"""Converters of the neural-network operators: Conv, Gemm, MatMul, pooling,
BatchNormalization, Softmax/LogSoftmax, LRN."""
from __future__ import annotations

import math

import numpy as np

from . import templates as T
from .registry import converter, opt as _opt


def _pads(cv, a, spatial, kernel, strides, dilations, in_hw):
    pad = a.get("auto_pad", b"NOTSET")
    pad = pad.decode() if isinstance(pad, bytes) else pad
    if pad in ("NOTSET", ""):
        p = [int(v) for v in a.get("pads", [0] * 2 * spatial)]
        return p
    if pad == "VALID":
        return [0] * 2 * spatial
    out = []
    for k in range(spatial):            # SAME_UPPER / SAME_LOWER
        o = math.ceil(in_hw[k] / strides[k])
        total = max(0, (o - 1) * strides[k] + dilations[k] * (kernel[k] - 1) + 1 - in_hw[k])
        lo = total // 2 if pad == "SAME_UPPER" else total - total // 2
        out.append((lo, total - lo))
    return [p[0] for p in out] + [p[1] for p in out]


def _symmetric(pads, strides, dilations):
    """The single padding, stride and dilation of a std op, or None if they differ."""
    if len(set(pads)) == 1 and len(set(strides)) == 1 and len(set(dilations)) == 1:
        return pads[0], strides[0], dilations[0]
    return None


def _attrs(**kw) -> str:
    defaults = {"stride": 1, "padding": 0, "dilation": 1}
    return ", ".join(f"{k}={v}" for k, v in kw.items() if defaults.get(k) != v)


@converter("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads",
                          "strides"))
def conv(cv, node, a):
    x, w = cv.tensor(node.input[0]), cv.tensor(node.input[1])
    if len(x.shape) != 4:
        raise cv.error(f"only 2-D convolutions (NCHW) are supported, got rank {len(x.shape)}")
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    group = a.get("group", 1)
    strides = [int(v) for v in a.get("strides", [1, 1])]
    dil = [int(v) for v in a.get("dilations", [1, 1])]
    pads = _pads(cv, a, 2, (kh, kw), strides, dil, (h, wd))
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
    shape = (n, f, oh, ow)
    sym = _symmetric(pads, strides, dil)
    out = node.output[0] if not _opt(node, 2) else node.output[0] + "#conv"
    if sym and group == 1:
        cv.call(out, "conv2d", [x, w], shape,
                _attrs(stride=sym[1], padding=sym[0], dilation=sym[2]))
    elif sym and group == c == f and cg == 1:
        cv.call(out, "depthwise_conv2d", [x, w], shape,
                _attrs(stride=sym[1], padding=sym[0], dilation=sym[2]))
    else:
        text = T.conv(list(x.shape), list(w.shape), list(shape), strides, pads, dil, group)
        cv.call(out, cv.op("conv", text), [x, w], shape)
    if _opt(node, 2):
        b = cv.tensor(node.input[2])
        cv.call(node.output[0], "bias_add", [cv.tensors[out], b], shape)


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


@converter("MaxPool", "AveragePool", attrs=("auto_pad", "ceil_mode", "count_include_pad",
                                            "kernel_shape", "pads", "strides", "dilations",
                                            "storage_order"))
def pool(cv, node, a):
    x = cv.tensor(node.input[0])
    if len(x.shape) != 4:
        raise cv.error("only 2-D pooling (NCHW) is supported")
    if any(d != 1 for d in a.get("dilations", [1, 1])) or a.get("storage_order", 0):
        raise cv.error("pooling with dilations or a column-major storage order")
    if len(node.output) > 1 and node.output[1]:
        raise cv.error("MaxPool's indices output")
    n, c, h, w = x.shape
    kernel = [int(v) for v in a["kernel_shape"]]
    strides = [int(v) for v in a.get("strides", [1, 1])]
    pads = _pads(cv, a, 2, kernel, strides, [1, 1], (h, w))
    ceil = a.get("ceil_mode", 0)
    out = []
    for k, size in enumerate((h, w)):
        span = size + pads[k] + pads[k + 2] - kernel[k]
        o = (-(-span // strides[k]) if ceil else span // strides[k]) + 1
        if ceil and (o - 1) * strides[k] >= size + pads[k]:
            o -= 1                       # the last window must start inside the input
        out.append(o)
    shape = (n, c, out[0], out[1])
    kind = "max" if node.op_type == "MaxPool" else "avg"
    count_pad = bool(a.get("count_include_pad", 0))
    sym = _symmetric(pads, strides, [1, 1])
    std_ok = sym and kernel[0] == kernel[1] and not ceil and \
        (kind == "max" or not count_pad or sym[0] == 0)
    if std_ok:
        attrs = f"kernel={kernel[0]}" + (f", stride={sym[1]}" if sym[1] != kernel[0] else "") \
            + (f", padding={sym[0]}" if sym[0] else "")
        cv.call(node.output[0], f"{kind}_pool2d", [x], shape, attrs)
    else:
        text = T.pool(list(x.shape), list(shape), kernel, strides, pads, kind, count_pad)
        cv.call(node.output[0], cv.op(f"{kind}pool", text), [x], shape)


@converter("GlobalAveragePool", "GlobalMaxPool")
def global_pool(cv, node, a):
    x = cv.tensor(node.input[0])
    n, c = x.shape[:2]
    if node.op_type == "GlobalAveragePool":
        mid = node.output[0] + "#gap"
        cv.call(mid, "global_avg_pool2d", [x], (n, c))
        cv.reshape(node.output[0], mid, (n, c, 1, 1))
    else:
        cv.call(node.output[0], cv.op("gmaxpool", T.global_pool(list(x.shape), "max")), [x],
                (n, c, 1, 1))


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


@converter("Softmax", "LogSoftmax", attrs=("axis",))
def softmax(cv, node, a):
    x = cv.tensor(node.input[0])
    rank, log = len(x.shape), node.op_type == "LogSoftmax"
    axis = a.get("axis", 1 if cv.opset < 13 else -1) % rank
    std = "log_softmax" if log else "softmax"
    if cv.opset < 13 and axis != rank - 1:
        # before opset 13: the input is flattened to 2-D at axis, normalised per row
        rows = (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))
        mid = node.output[0] + "#2d"
        cv.reshape(mid, node.input[0], rows)
        cv.call(mid + "#sm", std, [cv.tensors[mid]], rows)
        cv.reshape(node.output[0], mid + "#sm", x.shape)
    elif rank == 2 and axis == 1:
        cv.call(node.output[0], std, [x], x.shape)
    else:
        cv.call(node.output[0], cv.op(std, T.softmax(list(x.shape), axis, log)), [x], x.shape)


@converter("LRN", attrs=("alpha", "beta", "bias", "size"))
def lrn(cv, node, a):
    x = cv.tensor(node.input[0])
    text = T.lrn(list(x.shape), int(a["size"]), a.get("alpha", 1e-4), a.get("beta", 0.75),
                 a.get("bias", 1.0))
    cv.call(node.output[0], cv.op("lrn", text), [x], x.shape)
