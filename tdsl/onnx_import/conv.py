"""Converters of the convolution, pooling and resizing of any rank: Conv, ConvTranspose,
MaxPool, AveragePool, LpPool, the global pools, Resize, Upsample, Col2Im.

2-D NCHW f32 convolutions and pools with symmetric attributes call the standard library's
``conv2d`` / ``depthwise_conv2d`` / ``max_pool2d`` / ``avg_pool2d`` (tuned schedules, and the
graph's blocked-layout pass knows them; a u8 MaxPool, a quantized model's, ``max_pool2d_u8``),
and so do 1-D ones (height 1) and 3-D ones of
constant weights (depths into the batch, depth taps into the channels); every other
configuration (asymmetric pads, groups, dilated pools, ceil mode ...) is an op written here
for its shapes: one reduction over the channels and kernel offsets, the padding a
``select``. Resize computes each resized axis's source indices and weights now, with numpy,
as params: its kernel is a gather and a blend of a few taps per axis.
"""
from __future__ import annotations

import math

import numpy as np

from . import templates as T
from .elementwise import storage_via_f32
from .registry import converter, opt as _opt, text as _text

_FLOATS = ("f32", "f64")


# ---------------------------------------------------------------------------- helpers

def _pads(cv, a, spatial, kernel, strides, dilations, in_hw):
    """The ONNX ``pads`` ([lo..., hi...]) of a node: explicit, or from ``auto_pad``."""
    pad = _text(a.get("auto_pad", b"NOTSET"))
    if pad in ("NOTSET", ""):
        p = [int(v) for v in a.get("pads", [0] * 2 * spatial)]
        if len(p) != 2 * spatial:
            raise cv.error(f"pads has {len(p)} values, expected {2 * spatial}")
        return p
    if pad == "VALID":
        return [0] * 2 * spatial
    if pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise cv.error(f"auto_pad {pad!r}")
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


def _ints(cv, a, key, n, default):
    v = a.get(key)
    v = [int(x) for x in v] if v is not None else [default] * n
    if len(v) != n:
        raise cv.error(f"{key} has {len(v)} values, expected {n}")
    return v


def _affine(o, s, k, d, p) -> str:
    """``o * s + k * d - p`` written briefly."""
    terms = [o if s == 1 else f"{o} * {s}", k if d == 1 else f"{k} * {d}"]
    e = " + ".join(terms)
    return e if p == 0 else f"{e} - {p}" if p > 0 else f"{e} + {-p}"


def _window(out_sp, in_sp, kernel, strides, dil, pads_lo, oi, ki):
    """Subscripts of a window read and the conditions that keep it inside the input."""
    subs, conds = [], []
    for d in range(len(in_sp)):
        e = _affine(oi[d], strides[d], ki[d], dil[d], pads_lo[d])
        subs.append(e)
        if pads_lo[d] > 0:
            conds.append(f"{e} >= 0")
        if (out_sp[d] - 1) * strides[d] + (kernel[d] - 1) * dil[d] - pads_lo[d] >= in_sp[d]:
            conds.append(f"{e} < {in_sp[d]}")
    return subs, conds


def _guard(conds, load, other):
    return f"select({' and '.join(conds)}, {load}, {other})" if conds else load


def _lowest(dtype):
    if dtype in _FLOATS:
        return "-inf"
    info = np.iinfo({"i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
                     "u8": np.uint8}[dtype])
    return str(int(info.min)) if info.min >= 0 else f"({int(info.min)})"


def _float_input(cv, name, what):
    x = cv.tensor(name)
    if x.dtype not in _FLOATS:
        raise cv.error(f"{what} on {x.dtype} tensors (supported: f32, f64)")
    return x


def _bias(cv, name, f, dtype):
    """The bias tensor ``name`` of a layer of ``f`` output channels, checked: [f] of
    ``dtype``."""
    b = cv.tensor(name)
    if b.shape != (f,) or b.dtype != dtype:
        raise cv.error(f"a bias of {b.type}, expected {T.ty([f], dtype)}")
    return b


# ---------------------------------------------------------------------------- convolution

def _conv_text(xs, ws, ys, strides, pads_lo, dil, group, bias, dtype):
    sp = len(xs) - 2
    oi, ki = T.idx(sp, "o"), T.idx(sp, "k")
    cg, fg = ws[1], ys[1] // group
    subs, conds = _window(ys[2:], xs[2:], ws[2:], strides, dil, pads_lo, oi, ki)
    gi = "f" if fg == 1 else f"f // {fg}"
    chan = "c" if group == 1 else f"{gi} + c" if cg == 1 else f"{gi} * {cg} + c"
    red = ", ".join([f"c: {cg}"] + [f"{k}: {n}" for k, n in zip(ki, ws[2:])])
    load = _guard(conds, f"X[n, {chan}, {', '.join(subs)}]", "0.0")
    params = f"X: {T.ty(xs, dtype)}, W: {T.ty(ws, dtype)}"
    tail = ""
    if bias:
        params += f", B: {T.ty([ys[1]], dtype)}"
        tail = " + B[f]"
    return (f"op {{name}}({params}) -> Y: {T.ty(ys, dtype)} {{\n"
            f"    Y[n, f, {', '.join(oi)}] = sum[{red}](\n"
            f"        {load} * W[f, c, {', '.join(ki)}]){tail}\n}}\n")


def _conv1d_as_2d(cv, node, x, w, shape, pads, stride, dil, group, bias):
    """A 1-D f32 convolution (or depthwise one) as std ``conv2d`` of height 1, by the
    schedule's choice: the generic N-D op's automatic schedule runs a 1-D convolution
    a few hundred times slower than std conv2d's register-tiled one for the same work.
    The input is viewed as [N, C, 1, L] with the padding (any, asymmetric too) written
    along L by the same copy, so the std op runs with padding 0: a height of 1 with a
    kernel height of 1 gives one output row for every stride and dilation."""
    n, c, length = x.shape
    lo, hi = pads
    f, cg, k = w.shape
    out = node.output[0]
    x4 = out + "#x2d"
    if lo or hi:
        text = (f"op {{name}}(X: {T.ty([n, c, length], 'f32')}) -> "
                f"Y: {T.ty([n, c, 1, length + lo + hi], 'f32')} {{\n"
                f"    Y[n, c, h, w] = " +
                _guard([e for e in (f"w >= {lo}" if lo else "",
                                    f"w < {length + lo}" if hi else "") if e],
                       f"X[n, c, {'w - ' + str(lo) if lo else 'w'}]", "0.0") + "\n}\n")
        cv.call(x4, cv.op("pad1d", text), [x], (n, c, 1, length + lo + hi))
    else:
        text = (f"op {{name}}(X: {T.ty([n, c, length], 'f32')}) -> "
                f"Y: {T.ty([n, c, 1, length], 'f32')} {{\n    Y[n, c, h, w] = X[n, c, w]\n}}\n")
        cv.call(x4, cv.op("unsqueeze", text), [x], (n, c, 1, length))
    w4 = out + "#w2d"
    cv.reshape(w4, node.input[1], (f, cg, 1, k))
    y4 = out + "#conv"
    shape4 = (shape[0], shape[1], 1, shape[2])
    cv.call(y4, "conv2d" if group == 1 else "depthwise_conv2d",
            [cv.tensors[x4], cv.tensor(w4)], shape4, _attrs(stride=stride, dilation=dil))
    if bias:
        b = _bias(cv, bias, f, "f32")
        yb = out + "#bias"
        cv.call(yb, "bias_add", [cv.tensors[y4], b], shape4)
        y4 = yb
    # direct subscripts, not a reshape's flat-index arithmetic (a division per element)
    text = (f"op {{name}}(X: {T.ty(shape4, 'f32')}) -> Y: {T.ty(shape, 'f32')} {{\n"
            f"    Y[n, f, w] = X[n, f, 0, w]\n}}\n")
    cv.call(out, cv.op("squeeze", text), [cv.tensors[y4]], shape)


def _conv3d_as_2d(cv, node, x, shape, pads, strides, dil, bias):
    """A 3-D f32 convolution of constant weights as one std ``conv2d``: the output depths
    go into the batch and the depth taps into the channels (``Xf[n * OD + d, kd * C + c]``
    is the input at depth ``d * sd + kd * dd - pd``, zero outside; the weights
    ``Wf[f, kd * C + c] = W[f, c, kd]`` are rearranged now), so the register-tiled 2-D
    schedule runs the whole sum; a copy puts the output back in NCDHW with the bias. The
    copy holds KD times the input (for a 1-deep kernel it is a transpose). The generic
    N-D op's automatic schedule ran conv3d_block's layers 6-10x slower."""
    n, c, depth, ih, iw = x.shape
    w = cv.static[node.input[1]]
    f, _, kd, kh, kw = w.shape
    od = shape[2]
    sd, dd = strides[0], dil[0]
    pd = pads[0]
    hw = pads[1:3] + pads[4:6]
    sym = len(set(hw)) == 1
    ph, pw = (0, 0) if sym else (pads[1], pads[2])
    hp, wp = (ih, iw) if sym else (ih + pads[1] + pads[4], iw + pads[2] + pads[5])
    b, k = "b", "k"
    d_in = _affine(f"{b} % {od}", sd, f"{k} // {c}", dd, pd)
    subs = [f"{b} // {od}", f"{k} % {c}", d_in, f"h - {ph}" if ph else "h",
            f"w - {pw}" if pw else "w"]
    conds = []
    if pd > 0:
        conds.append(f"{d_in} >= 0")
    if (od - 1) * sd + (kd - 1) * dd - pd >= depth:
        conds.append(f"{d_in} < {depth}")
    if ph:
        conds.append(f"h >= {ph}")
    if hp > ih + ph:
        conds.append(f"h < {ih + ph}")
    if pw:
        conds.append(f"w >= {pw}")
    if wp > iw + pw:
        conds.append(f"w < {iw + pw}")
    nb = n * od
    xf_shape = (nb, kd * c, hp, wp)
    load = f"X[{', '.join(subs)}]"
    text = (f"op {{name}}(X: {x.type}) -> Y: {T.ty(xf_shape, 'f32')} {{\n"
            f"    Y[b, k, h, w] = {_guard(conds, load, '0.0')}\n}}\n")
    out = node.output[0]
    cv.call(out + "#x2d", cv.op("conv3d_input", text), [x], xf_shape)
    cv.static[out + "#w2d"] = np.ascontiguousarray(
        w.transpose(0, 2, 1, 3, 4).reshape(f, kd * c, kh, kw)).astype(np.float32)
    y_shape = (nb, f, shape[3], shape[4])
    cv.call(out + "#y2d", "conv2d", [cv.tensors[out + "#x2d"], cv.tensor(out + "#w2d")],
            y_shape, _attrs(stride=strides[1], padding=pads[1] if sym else 0,
                            dilation=dil[1]))
    params, args, tail = [f"X: {T.ty(y_shape, 'f32')}"], [cv.tensors[out + "#y2d"]], ""
    if bias:
        bt = _bias(cv, bias, f, "f32")
        params.append(f"B: {bt.type}")
        args.append(bt)
        tail = " + B[f]"
    text = (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(shape, 'f32')} {{\n"
            f"    Y[n, f, d, h, w] = X[n * {od} + d, f, h, w]{tail}\n}}\n")
    cv.call(out, cv.op("conv3d_output", text), args, shape)


@converter("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads",
                          "strides"))
@storage_via_f32
def conv(cv, node, a):
    x = _float_input(cv, node.input[0], "Conv")
    w = cv.tensor(node.input[1])
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise cv.error(f"a convolution of an input of rank {len(x.shape)} with weights of "
                       f"rank {len(w.shape)} (expected N, C, spatial... for both)")
    if w.dtype != x.dtype:
        raise cv.error(f"weights of dtype {w.dtype} on an input of {x.dtype}")
    sp = len(x.shape) - 2
    n, c = x.shape[:2]
    f, cg = w.shape[:2]
    kernel = list(w.shape[2:])
    group = int(a.get("group", 1))
    if group < 1 or c != cg * group or f % group:
        raise cv.error(f"group {group} with {c} input channels, weights {list(w.shape)}")
    strides = _ints(cv, a, "strides", sp, 1)
    dil = _ints(cv, a, "dilations", sp, 1)
    pads = _pads(cv, a, sp, kernel, strides, dil, x.shape[2:])
    out_sp = [(x.shape[2 + d] + pads[d] + pads[sp + d] - dil[d] * (kernel[d] - 1) - 1)
              // strides[d] + 1 for d in range(sp)]
    if min(out_sp) < 1:
        raise cv.error(f"the kernel {kernel} is larger than the padded input {x.shape[2:]}")
    shape = (n, f, *out_sp)
    bias = _opt(node, 2)
    sym = _symmetric(pads, strides, dil)
    std = sp == 2 and x.dtype == "f32" and sym and \
        (group == 1 or (group == c == f and cg == 1))
    if std:
        out = node.output[0] if not bias else node.output[0] + "#conv"
        cv.call(out, "conv2d" if group == 1 else "depthwise_conv2d", [x, w], shape,
                _attrs(stride=sym[1], padding=sym[0], dilation=sym[2]))
        if bias:
            cv.call(node.output[0], "bias_add", [cv.tensors[out], cv.tensor(bias)], shape)
        return
    if sp == 1 and x.dtype == "f32" and (group == 1 or (group == c == f and cg == 1)):
        _conv1d_as_2d(cv, node, x, w, shape, pads, strides[0], dil[0], group, bias)
        return
    if sp == 3 and x.dtype == "f32" and group == 1 and node.input[1] in cv.static and \
            strides[1] == strides[2] and dil[1] == dil[2] and \
            isinstance(n, (int, np.integer)):
        _conv3d_as_2d(cv, node, x, shape, pads, strides, dil, bias)
        return
    args = [x, w]
    if bias:
        args.append(_bias(cv, bias, f, x.dtype))
    text = _conv_text(list(x.shape), list(w.shape), list(shape), strides, pads[:sp], dil,
                      group, bool(bias), x.dtype)
    cv.call(node.output[0], cv.op(f"conv{sp}d", text), args, shape, dtype=x.dtype)


def _scatter_window(out_sp, in_sp, kernel, strides, dil, pads_lo, oi, ki):
    """The input positions a transposed convolution (or Col2Im) gathers for output ``oi``:
    ``(o + p - k * d) / s`` for the kernel offsets ``k`` that make it an integer inside.
    Returns the input subscripts, their conditions, the kernel subscripts and the ranges of
    the reduction axes ``ki``. Undilated and strided, ``ki`` counts only the offsets of
    ``o``'s phase, ``k = (o + p) % s + s * j`` (ceil(K / s) of them, no stride test)."""
    subs, conds, ks, ranges = [], [], [], []
    for d in range(len(in_sp)):
        s, p, dd, kk = strides[d], pads_lo[d], dil[d], kernel[d]
        u = oi[d] if p == 0 else f"{oi[d]} + {p}" if p > 0 else f"{oi[d]} - {-p}"
        hi = out_sp[d] - 1 + p                       # the largest o + p
        if dd == 1 and s > 1:
            ext = -(-kk // s)
            kx = f"({u}) % {s} + {s} * {ki[d]}" if ext > 1 else f"({u}) % {s}"
            if kk % s:
                conds.append(f"{kx} < {kk}")
            sub = f"({u}) // {s} - {ki[d]}" if ext > 1 else f"({u}) // {s}"
            if min(0, p) // s - (ext - 1) < 0:
                conds.append(f"{sub} >= 0")
            if hi // s >= in_sp[d]:
                conds.append(f"{sub} < {in_sp[d]}")
            ks.append(kx)
            ranges.append(f"{ki[d]}: {ext}")
        else:
            t = f"{u} - {ki[d]}" if dd == 1 else f"{u} - {ki[d]} * {dd}"
            if 0 - p - (kk - 1) * dd < 0:
                conds.append(f"{t} >= 0")
            if s > 1:
                conds.append(f"({t}) % {s} == 0")
                sub = f"({t}) // {s}"
            else:
                sub = t
            if hi // s >= in_sp[d]:
                conds.append(f"{sub} < {in_sp[d]}")
            ks.append(ki[d])
            ranges.append(f"{ki[d]}: {kk}")
        subs.append(sub if in_sp[d] > 1 else "0")
    return subs, conds, ks, ranges


@converter("ConvTranspose", attrs=("auto_pad", "dilations", "group", "kernel_shape",
                                   "output_padding", "output_shape", "pads", "strides"))
@storage_via_f32
def conv_transpose(cv, node, a):
    x = _float_input(cv, node.input[0], "ConvTranspose")
    w = cv.tensor(node.input[1])
    if len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise cv.error(f"a transposed convolution of an input of rank {len(x.shape)} with "
                       f"weights of rank {len(w.shape)}")
    if w.dtype != x.dtype:
        raise cv.error(f"weights of dtype {w.dtype} on an input of {x.dtype}")
    sp = len(x.shape) - 2
    n, c = x.shape[:2]
    group = int(a.get("group", 1))
    if group < 1 or w.shape[0] != c or c % group:
        raise cv.error(f"group {group} with {c} input channels, weights {list(w.shape)}")
    cg, mg = c // group, w.shape[1]
    f = mg * group
    kernel = list(w.shape[2:])
    ks = _ints(cv, a, "kernel_shape", sp, 0) if "kernel_shape" in a else kernel
    strides = _ints(cv, a, "strides", sp, 1)
    dil = _ints(cv, a, "dilations", sp, 1)
    opad = [int(v) for v in a.get("output_padding", [0] * sp)][:sp]
    opad += [0] * (sp - len(opad))
    ins = x.shape[2:]
    full = [strides[d] * (ins[d] - 1) + opad[d] + (ks[d] - 1) * dil[d] + 1
            for d in range(sp)]
    auto = _text(a.get("auto_pad", b"NOTSET"))
    if auto not in ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise cv.error(f"auto_pad {auto!r}")
    if "output_shape" in a or ("pads" not in a and auto in ("SAME_UPPER", "SAME_LOWER")):
        oshape = [int(v) for v in a["output_shape"]] if "output_shape" in a else \
            [ins[d] * strides[d] for d in range(sp)]
        oshape = oshape[-sp:]
        if "pads" in a and "output_shape" in a:
            pads = [int(v) for v in a["pads"]]
        else:
            total = [full[d] - oshape[d] for d in range(sp)]
            lo = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
            pads = lo + [t - lo_ for t, lo_ in zip(total, lo)]
        out_sp = oshape
    else:
        pads = [0] * 2 * sp if auto == "VALID" else _ints(cv, a, "pads", 2 * sp, 0)
        out_sp = [full[d] - pads[d] - pads[sp + d] for d in range(sp)]
    if min(out_sp) < 1:
        raise cv.error(f"an empty output {out_sp}")
    shape = (n, f, *out_sp)
    oi, ki = T.idx(sp, "o"), T.idx(sp, "k")
    subs, conds, ks, ranges = _scatter_window(out_sp, ins, kernel, strides, dil, pads[:sp],
                                              oi, ki)
    if group == 1 and x.dtype == "f32" and cv.is_static(node.input[1]):
        _conv_transpose_as_gemm(cv, node, x, shape, subs, conds, ks, ranges)
        return
    gi = "f" if mg == 1 else f"f // {mg}"
    chan = "c" if group == 1 else f"{gi} + c" if cg == 1 else f"{gi} * {cg} + c"
    wm = "f" if group == 1 else f"f % {mg}"
    red = ", ".join([f"c: {cg}"] + ranges)
    load = _guard(conds, f"X[n, {chan}, {', '.join(subs)}] * W[{chan}, {wm}, "
                         f"{', '.join(ks)}]", "0.0")
    dt = x.dtype
    params = f"X: {T.ty(x.shape, dt)}, W: {T.ty(w.shape, dt)}"
    args, tail = [x, w], ""
    if _opt(node, 2):
        args.append(_bias(cv, node.input[2], f, dt))
        params += f", B: {T.ty([f], dt)}"
        tail = " + B[f]"
    text = (f"op {{name}}({params}) -> Y: {T.ty(shape, dt)} {{\n"
            f"    Y[n, f, {', '.join(oi)}] = sum[{red}](\n        {load}){tail}\n}}\n")
    cv.call(node.output[0], cv.op(f"convtranspose{sp}d", text), args, shape, dtype=dt)


def _conv_transpose_as_gemm(cv, node, x, shape, subs, conds, ks, ranges):
    """A transposed convolution as a GEMM and a col2im gather, as frameworks run it: every
    input pixel times every weight is ``cols = Wt @ X`` (std ``matmul``, at its register-
    tiled speed, with ``Wt`` of [F * K..., C] transposed at import), then each output sums
    the columns of the taps that reach it. The gather does K / stride loads per output and
    dimension and no multiplication; the direct form's automatic schedule ran DCGAN's
    generator 30x slower than onnxruntime."""
    w = cv.value(node.input[1])                  # [C, F, K...]
    c, f, kernel = w.shape[0], w.shape[1], list(w.shape[2:])
    n, ins = x.shape[0], list(x.shape[2:])
    taps, pixels = math.prod(kernel), math.prod(ins)
    out = node.output[0]
    wt = out + "#wt"
    cv.static[wt] = np.ascontiguousarray(
        np.moveaxis(w, 0, -1).reshape(f * taps, c))
    xc = out + "#cols_in"
    cols = out + "#cols"
    if pixels == 1:
        # one input pixel (a generator's latent vector): the GEMM's columns are the batch,
        # narrower than a vector, so it runs as std dense over the rows X [N, C] with the
        # taps as its features, vectors along them and Wt packed once (DCGAN's first
        # layer, 768 x 2 columns: 22.6 us as a matmul at 2% of peak)
        cv.reshape(xc, node.input[0], (n, c))
        cv.static[out + "#zero"] = np.zeros(f * taps, np.float32)
        cv.call(cols, "dense", [cv.tensors[xc], cv.tensor(wt), cv.tensor(out + "#zero")],
                (n, f * taps))
    else:
        if n == 1:
            cv.reshape(xc, node.input[0], (c, pixels))
        else:
            xt = out + "#nc"
            perm = [1, 0, *range(2, 2 + len(ins))]
            cv.call(xt, cv.op("transpose", T.transpose(list(x.shape), perm)), [x],
                    (c, n, *ins))
            cv.reshape(xc, xt, (c, n * pixels))
        cv.call(cols, "matmul", [cv.tensor(wt), cv.tensors[xc]], (f * taps, n * pixels))
    oi = T.idx(len(ins), "o")
    pixel = T.flat_index(ins, [f"({e})" for e in subs])
    tap = T.flat_index(kernel, [f"({e})" for e in ks])
    if len(ins) > 1 and conds:
        # implied by the per-axis conditions, but tdsl's bounds check of a flat offset
        # needs them whole
        conds = [*conds, f"{pixel} >= 0", f"{pixel} < {pixels}", f"{tap} < {taps}"]
    if pixels == 1:           # C [N, F * K...]: the batch's row, the tap's column
        load = _guard(conds, f"C[{'n' if n > 1 else '0'}, f * {taps} + {tap}]", "0.0")
        params = f"C: {T.ty([n, f * taps])}"
    else:
        load = _guard(conds, f"C[f * {taps} + {tap}, "
                             f"{'n * ' + str(pixels) + ' + ' if n > 1 else ''}{pixel}]",
                      "0.0")
        params = f"C: {T.ty([f * taps, n * pixels])}"
    args, tail = [cv.tensors[cols]], ""
    if _opt(node, 2):
        args.append(_bias(cv, node.input[2], f, "f32"))
        params += f", B: {T.ty([f])}"
        tail = " + B[f]"
    text = (f"op {{name}}({params}) -> Y: {T.ty(shape)} {{\n"
            f"    Y[n, f, {', '.join(oi)}] = sum[{', '.join(ranges)}](\n        {load}){tail}\n}}\n")
    cv.call(out, cv.op(f"col2im{len(ins)}d", text), args, shape)


@converter("Col2Im", attrs=("dilations", "pads", "strides"))
def col2im(cv, node, a):
    x = _float_input(cv, node.input[0], "Col2Im")
    image = [int(v) for v in cv.value(node.input[1]).reshape(-1)]
    block = [int(v) for v in cv.value(node.input[2]).reshape(-1)]
    sp = len(image)
    if len(x.shape) != 3 or len(block) != sp:
        raise cv.error(f"an input of rank {len(x.shape)} (expected [N, C * prod(block), L])")
    kprod = int(np.prod(block))
    n, ck, l_ = x.shape
    if ck % kprod:
        raise cv.error(f"{ck} rows is not a multiple of the block size {kprod}")
    c = ck // kprod
    strides = _ints(cv, a, "strides", sp, 1)
    dil = _ints(cv, a, "dilations", sp, 1)
    pads = _ints(cv, a, "pads", 2 * sp, 0)
    nblk = [(image[d] + pads[d] + pads[sp + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1
            for d in range(sp)]
    if int(np.prod(nblk)) != l_:
        raise cv.error(f"{l_} blocks, but the image and block shapes give {nblk}")
    shape = (n, c, *image)
    oi, ki = T.idx(sp, "o"), T.idx(sp, "k")
    subs, conds, ks, ranges = _scatter_window(image, nblk, block, strides, dil, pads[:sp],
                                              oi, ki)
    kst = np.cumprod([1] + block[::-1])[:-1][::-1]
    bst = np.cumprod([1] + nblk[::-1])[:-1][::-1]
    # the flattened subscripts: each term clamped into its range (the conditions keep the
    # read inside; the clamps let the checker see it)
    ks = [k if k in ki else f"min({k}, {m - 1})" for k, m in zip(ks, block)]
    subs = [e if e == "0" else f"max(min({e}, {m - 1}), 0)" for e, m in zip(subs, nblk)]
    klin = " + ".join(f"{k} * {int(s)}" if s != 1 else k for k, s in zip(ks, kst))
    blin = " + ".join(f"{e} * {int(s)}" if s != 1 else e for e, s in zip(subs, bst)
                      if e != "0") or "0"
    red = ", ".join(ranges)
    load = _guard(conds, f"X[n, c * {kprod} + {klin}, {blin}]", "0.0")
    text = (f"op {{name}}(X: {T.ty(x.shape, x.dtype)}) -> Y: {T.ty(shape, x.dtype)} {{\n"
            f"    Y[n, c, {', '.join(oi)}] = sum[{red}](\n        {load})\n}}\n")
    cv.call(node.output[0], cv.op("col2im", text), [x], shape, dtype=x.dtype)


# ---------------------------------------------------------------------------- pooling

def _pool_geometry(cv, a, x_shape, kernel):
    """Strides, dilations, pads ([lo..., hi...]) and output sizes of a pool, as ONNX's
    reference (and onnxruntime) compute them."""
    sp = len(x_shape) - 2
    ins = list(x_shape[2:])
    strides = _ints(cv, a, "strides", sp, 1)
    dil = _ints(cv, a, "dilations", sp, 1)
    ceil = bool(a.get("ceil_mode", 0))
    auto = _text(a.get("auto_pad", b"NOTSET"))
    pads = _pads(cv, a, sp, kernel, strides, dil, ins)
    out = []
    for d in range(sp):
        span = ins[d] + pads[d] + pads[sp + d] - dil[d] * (kernel[d] - 1) - 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-ins[d] // strides[d])
        elif ceil:
            o = -(-span // strides[d]) + 1
            if (o - 1) * strides[d] >= ins[d] + pads[d]:
                o -= 1                       # the last window must start inside the input
        else:
            o = span // strides[d] + 1
        if o < 1:
            raise cv.error(f"the window {kernel} is larger than the padded input {ins}")
        out.append(o)
    return strides, dil, pads, out


def _pool_counts(ins, out, kernel, strides, dil, pads, count_pad):
    """The number of elements each window averages (a static array of the output's spatial
    shape), the product of per-axis counts."""
    sp = len(ins)
    total = np.ones([1] * sp, np.float64)
    for d in range(sp):
        pos = (np.arange(out[d])[:, None] * strides[d] + np.arange(kernel[d])[None, :] *
               dil[d] - pads[d])
        hi = ins[d] + pads[sp + d] if count_pad else ins[d]
        lo = -pads[d] if count_pad else 0
        cnt = ((pos >= lo) & (pos < hi)).sum(axis=1).astype(np.float64)
        shape = [1] * sp
        shape[d] = out[d]
        total = total * cnt.reshape(shape)
    return total


@converter("MaxPool", "AveragePool", "LpPool",
           attrs=("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads",
                  "strides", "dilations", "storage_order", "p"))
@storage_via_f32
def pool(cv, node, a):
    kind = {"MaxPool": "max", "AveragePool": "avg", "LpPool": "lp"}[node.op_type]
    x = cv.tensor(node.input[0])
    if kind != "max" and x.dtype not in _FLOATS:
        raise cv.error(f"{node.op_type} on {x.dtype} tensors (supported: f32, f64)")
    if kind == "max" and x.dtype not in _FLOATS + ("i8", "u8"):
        raise cv.error(f"MaxPool on {x.dtype} tensors (supported: f32, f64, i8, u8)")
    if len(x.shape) < 3:
        raise cv.error(f"pooling an input of rank {len(x.shape)} (expected N, C, spatial...)")
    sp = len(x.shape) - 2
    if "kernel_shape" not in a:
        raise cv.error("a pool without kernel_shape")
    kernel = _ints(cv, a, "kernel_shape", sp, 1)
    strides, dil, pads, out_sp = _pool_geometry(cv, a, x.shape, kernel)
    shape = (*x.shape[:2], *out_sp)
    count_pad = bool(a.get("count_include_pad", 0))
    indices = len(node.output) > 1 and node.output[1]
    ceil = bool(a.get("ceil_mode", 0))
    sym = _symmetric(pads, strides, dil)
    std_pool = {"f32": f"{kind}_pool2d", "u8": "max_pool2d_u8" if kind == "max" else None}
    if sp == 2 and std_pool.get(x.dtype) and kind != "lp" and not indices and sym and \
            sym[2] == 1 and kernel[0] == kernel[1] and not ceil and \
            (kind == "max" or not count_pad or sym[0] == 0):
        attrs = f"kernel={kernel[0]}" + (f", stride={sym[1]}" if sym[1] != kernel[0] else "") \
            + (f", padding={sym[0]}" if sym[0] else "")
        cv.call(node.output[0], std_pool[x.dtype], [x], shape, attrs, dtype=x.dtype)
        return
    dt = x.dtype
    oi, ki = T.idx(sp, "o"), T.idx(sp, "k")
    subs, conds = _window(out_sp, x.shape[2:], kernel, strides, dil, pads[:sp], oi, ki)
    win = ", ".join(f"{k}: {m}" for k, m in zip(ki, kernel))
    load = f"X[n, c, {', '.join(subs)}]"
    lhs = f"[n, c, {', '.join(oi)}]"
    head = f"op {{name}}(X: {T.ty(x.shape, dt)}"
    if kind == "max":
        body = f"    Y{lhs} = max[{win}]({_guard(conds, load, _lowest(dt))})\n"
        if not indices:
            text = head + f") -> Y: {T.ty(shape, dt)} {{\n{body}}}\n"
            cv.call(node.output[0], cv.op(f"maxpool{sp}d", text), [x], shape, dtype=dt)
            return
        _max_pool_indices(cv, node, a, x, shape, kernel, strides, dil, pads, conds, subs,
                          body, head, win, lhs, load)
        return
    if kind == "lp":
        p = a.get("p", 2)
        term = f"{load} * {load}" if p == 2 else f"pow(abs({load}), {T.lit(float(p))})"
        s = f"sum[{win}]({_guard(conds, term, '0.0')})"
        args = [x]
        val = f"sqrt({s})" if p == 2 else f"pow({s}, {T.lit(1.0 / float(p))})"
        text = head + f") -> Y: {T.ty(shape, dt)} {{\n    Y{lhs} = {val}\n}}\n"
        cv.call(node.output[0], cv.op(f"lppool{sp}d", text), args, shape, dtype=dt)
        return
    counts = _pool_counts(x.shape[2:], out_sp, kernel, strides, dil, pads, count_pad)
    s = f"sum[{win}]({_guard(conds, load, '0.0')})"
    if np.all(counts == counts.flat[0]):
        text = head + (f") -> Y: {T.ty(shape, dt)} {{\n"
                       f"    Y{lhs} = {s} / {T.lit(float(counts.flat[0]), dt)}\n}}\n")
        args = [x]
    else:
        name = node.output[0] + "#count"
        cv.static[name] = counts.astype(np.float32 if dt == "f32" else np.float64)
        k = cv.tensor(name)
        text = head + (f", K: {k.type}) -> Y: {T.ty(shape, dt)} {{\n"
                       f"    P: {T.ty(shape, dt)}\n    P{lhs} = {s}\n"
                       f"    Y{lhs} = P{lhs} / K[{', '.join(oi)}]\n}}\n")
        args = [x, k]
    cv.call(node.output[0], cv.op(f"avgpool{sp}d", text), args, shape, dtype=dt)


def _max_pool_indices(cv, node, a, x, shape, kernel, strides, dil, pads, conds, subs, body,
                      head, win, lhs, load):
    """MaxPool with its Indices output: the flat index (over the whole input, row-major, or
    column-major in the spatial axes with storage_order=1) of each window's first maximum
    in window order, as ONNX's reference picks it."""
    sp = len(kernel)
    dt = x.dtype
    ki = T.idx(sp, "k")
    kst = np.cumprod([1] + kernel[::-1])[:-1][::-1]
    klin = " + ".join(f"{k} * {int(s)}" if s != 1 else k for k, s in zip(ki, kst))
    big = int(np.prod(kernel))
    pick = _guard(conds, f"select({load} == Y{lhs}, {klin}, {big})", str(big))
    jbody = f"    J{lhs} = min[{win}]({pick})\n"
    ins = list(x.shape[2:])
    order = int(a.get("storage_order", 0))
    sst = np.cumprod([1] + ins[::-1])[:-1][::-1] if order == 0 else np.cumprod([1] + ins)[:-1]
    plane = int(np.prod(ins))
    oi = T.idx(sp, "o")
    terms = [f"(n * {x.shape[1]} + c) * {plane}"]
    for d in range(sp):
        kd = f"J{lhs} // {int(kst[d])} % {kernel[d]}" if kst[d] != 1 else \
            f"J{lhs} % {kernel[d]}"
        pos = _affine(oi[d], strides[d], f"({kd})", dil[d], pads[d])
        terms.append(f"({pos}) * {int(sst[d])}" if sst[d] != 1 else f"({pos})")
    text = (head + f") -> (Y: {T.ty(shape, dt)}, I: {T.ty(shape, 'i64')}) {{\n{body}"
            f"    J: {T.ty(shape, 'i64')}\n{jbody}"
            f"    I{lhs} = {' + '.join(terms)}\n}}\n")
    name = cv.op(f"maxpool{sp}d_indices", text)
    # a two-output op: called once, each output named in the graph
    y = cv.fresh(node.output[0])
    i = cv.fresh(node.output[1])
    cv.lines.append(f"    {y}, {i} = {name}({x.name})")
    from .convert import Tensor
    cv.tensors[node.output[0]] = Tensor(y, shape, dt)
    cv.tensors[node.output[1]] = Tensor(i, shape, "i64")


@converter("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", attrs=("p",))
@storage_via_f32
def global_pool(cv, node, a):
    x = cv.tensor(node.input[0])
    kind = node.op_type
    ok = _FLOATS + (("i8", "u8") if kind == "GlobalMaxPool" else ())
    if x.dtype not in ok:
        raise cv.error(f"{kind} on {x.dtype} tensors (supported: {', '.join(ok)})")
    if len(x.shape) < 3:
        raise cv.error(f"pooling an input of rank {len(x.shape)} (expected N, C, spatial...)")
    n, c = x.shape[:2]
    sp = len(x.shape) - 2
    shape = (n, c) + (1,) * sp
    if kind == "GlobalAveragePool" and sp == 2 and x.dtype == "f32":
        mid = node.output[0] + "#gap"
        cv.call(mid, "global_avg_pool2d", [x], (n, c))
        cv.reshape(node.output[0], mid, shape)
        return
    ri = T.idx(sp, "r")
    red = ", ".join(ri)
    load = f"X[n, c, {red}]"
    if kind == "GlobalMaxPool":
        body = f"max[{red}]({load})"
    elif kind == "GlobalAveragePool":
        body = f"sum[{red}]({load}) / {T.lit(float(np.prod(x.shape[2:])), x.dtype)}"
    else:
        p = a.get("p", 2)
        body = f"sqrt(sum[{red}]({load} * {load}))" if p == 2 else \
            f"pow(sum[{red}](pow(abs({load}), {T.lit(float(p))})), {T.lit(1.0 / p)})"
    text = (f"op {{name}}(X: {T.ty(x.shape, x.dtype)}) -> Y: {T.ty(shape, x.dtype)} {{\n"
            f"    Y[n, c, {', '.join(T.idx(sp, 'a'))}] = {body}\n}}\n")
    cv.call(node.output[0], cv.op(kind.lower(), text), [x], shape, dtype=x.dtype)


# ---------------------------------------------------------------------------- resizing

def _nearest_coeffs(ratio, mode):
    if float(ratio).is_integer():
        return [0.0, 1.0]
    if mode == "round_prefer_floor":
        return [float(ratio <= 0.5), float(ratio > 0.5)]
    if mode == "round_prefer_ceil":
        return [float(ratio < 0.5), float(ratio >= 0.5)]
    if mode == "floor":
        return [1.0, 0.0]
    return [0.0, 1.0]                                   # ceil


def _cubic_coeffs(ratio, scale, A, antialias):
    if not antialias:
        return [((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A,
                ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1,
                ((A + 2) * (1 - ratio) - (A + 3)) * (1 - ratio) * (1 - ratio) + 1,
                ((A * ((1 - ratio) + 1) - 5 * A) * ((1 - ratio) + 1) + 8 * A)
                * ((1 - ratio) + 1) - 4 * A]
    scale = min(scale, 1.0)

    def coeff(v):
        v = abs(v)
        if v <= 1:
            return (A + 2) * v ** 3 - (A + 3) * v * v + 1
        if v < 2:
            return A * v ** 3 - 5 * A * v * v + 8 * A * v - 4 * A
        return 0.0
    start = int(np.floor(-2 / scale) + 1)
    cs = [coeff(scale * (i - ratio)) for i in range(start, 2 - start)]
    return list(np.array(cs) / sum(cs))


def _linear_coeffs(ratio, scale, antialias):
    if not antialias:
        return [1 - ratio, ratio]
    scale = min(scale, 1.0)
    start = int(np.floor(-1 / scale) + 1)
    args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
    cs = np.clip(1 - np.abs(args), 0, 1)
    return list(cs / cs.sum())


def _resize_axis(in_w, out_w, scale, coeffs_of, ctm, roi, exclude_outside):
    """Per output position of one axis: the source indices [O, taps] (the caller clips
    them to the input), their weights [O, taps] and whether it is extrapolated
    (tf_crop_and_resize), as ONNX's reference resizes one axis."""
    y = np.arange(out_w, dtype=np.float64)
    width = scale * in_w
    extrap = None
    if ctm == "align_corners":
        x = np.zeros(out_w) if width == 1 else y * (in_w - 1) / (width - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        if width == 1:
            x = np.full(out_w, (roi[1] - roi[0]) * (in_w - 1) / 2)
        else:
            x = y * (roi[1] - roi[0]) * (in_w - 1) / (width - 1)
        x = x + roi[0] * (in_w - 1)
        extrap = (x < 0) | (x > in_w - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(out_w, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        offset = in_w / 2 * (1 - out_w / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(ctm)
    xi = np.floor(x).astype(np.int64)
    ratios = np.where(x == xi, 1.0, x - xi)
    coeffs = np.array([coeffs_of(float(r)) for r in ratios], np.float64).reshape(out_w, -1)
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    xp = x + pad
    pp = np.floor(xp).astype(np.int64)
    frac = xp - pp
    if n % 2 == 0:
        off = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        off = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (pp + off)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((idx < 0) | (idx >= in_w), 0.0, coeffs)
        tot = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(tot == 0, 1.0, tot)
    return idx, coeffs, extrap


def _resize(cv, node, x, scales, sizes, roi, mode, nearest_mode, ctm, cubic_a,
            exclude_outside, antialias, extrap_value, axes, policy):
    r = len(x.shape)
    shape_in = list(x.shape)
    if axes is None:
        axes = list(range(r))
    axes = [int(v) % r for v in axes]
    if len(set(axes)) != len(axes):
        raise cv.error(f"repeated axes {axes}")
    full_roi = None
    if roi is not None and roi.size:
        roi = [float(v) for v in roi.reshape(-1)]
        if len(roi) != 2 * len(axes):
            raise cv.error(f"roi has {len(roi)} values, expected {2 * len(axes)}")
        full_roi = [0.0] * r + [1.0] * r
        for i, d in enumerate(axes):
            full_roi[d], full_roi[r + d] = roi[i], roi[len(axes) + i]
    if sizes is not None:
        sizes = [int(v) for v in sizes.reshape(-1)]
        if len(sizes) != len(axes):
            raise cv.error(f"sizes has {len(sizes)} values, expected {len(axes)}")
        out = list(shape_in)
        for i, d in enumerate(axes):
            out[d] = sizes[i]
        sf = [out[d] / shape_in[d] for d in range(r)]
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise cv.error(f"keep_aspect_ratio_policy {policy!r}")
            pick = min if policy == "not_larger" else max
            s = pick(sf[d] for d in axes)
            sf = [s if d in axes else 1.0 for d in range(r)]
            out = [int(s * shape_in[d] + 0.5) if d in axes else shape_in[d]
                   for d in range(r)]
    else:
        sc = scales.reshape(-1)
        if sc.size != len(axes):
            raise cv.error(f"scales has {sc.size} values, expected {len(axes)}")
        full = np.ones(r, sc.dtype)
        for i, d in enumerate(axes):
            full[d] = sc[i]
        out = [int(v) for v in (full * np.array(shape_in)).astype(int)]
        sf = [float(v) for v in full]
    if min(out) < 1:
        raise cv.error(f"an empty output {out}")
    if mode == "nearest":
        if antialias:
            raise cv.error("antialias with mode nearest")

        def coeffs_of(ratio, scale):
            return _nearest_coeffs(ratio, nearest_mode)
    elif mode == "linear":
        def coeffs_of(ratio, scale):
            return _linear_coeffs(ratio, scale, antialias)
    elif mode == "cubic":
        def coeffs_of(ratio, scale):
            return _cubic_coeffs(ratio, scale, cubic_a, antialias)
    else:
        raise cv.error(f"mode {mode!r}")
    if mode != "nearest" and x.dtype not in _FLOATS:
        raise cv.error(f"{mode} resizing of {x.dtype} tensors (supported: f32, f64)")
    dt = x.dtype
    wnp = np.float32 if dt != "f64" else np.float64
    oi = T.idx(r, "i")
    subs, factors, masks, red, params, args = list(oi), [], [], [], [], [x]
    tapped, periods = [], {}                     # the axes summed over taps; the last's period
    for d in range(r):
        trivial = math.isclose(sf[d], 1.0) and out[d] == shape_in[d] and \
            (full_roi is None or (math.isclose(full_roi[d], 0.0) and
                                  math.isclose(full_roi[r + d], 1.0)))
        if trivial:
            continue
        raw, w, ex = _resize_axis(shape_in[d], out[d], sf[d],
                                  lambda q, s=sf[d]: coeffs_of(q, s), ctm,
                                  None if full_roi is None else
                                  [full_roi[d], full_roi[r + d]], exclude_outside)
        keep = np.any(w != 0, axis=0)            # taps never used (nearest) are dropped
        if not keep.any():
            keep[0] = True
        raw, w = raw[:, keep], w[:, keep]
        idx = np.clip(raw, 0, shape_in[d] - 1)
        base = f"{node.output[0]}#resize{d}"
        if mode == "nearest" or (w.shape[1] == 1 and np.all(w == 1.0)):
            pick = idx[np.arange(out[d]), np.argmax(w != 0, axis=1)]
            if np.array_equal(pick, np.arange(out[d])):
                pass
            elif np.array_equal(pick, np.arange(out[d]) // max(1, out[d] // shape_in[d])) \
                    and out[d] % shape_in[d] == 0:
                subs[d] = f"{oi[d]} // {out[d] // shape_in[d]}"
            else:
                cv.static[base + "i"] = pick.astype(np.int32)
                t = cv.tensor(base + "i")
                params.append(f"I{d}: {t.type}")
                args.append(t)
                subs[d] = _clamped(f"I{d}[{oi[d]}]", shape_in[d])
        else:
            # the last axis, if every other axis is summed over taps or kept, may repeat its
            # taps with a period: then its indices are affine and its weights literals
            period = _period(raw, w.astype(wnp), shape_in[d], out[d]) \
                if d == r - 1 and not masks and (ex is None or not ex.any()) and \
                all(subs[a] == oi[a] for a in range(d) if a not in tapped) else None
            tapped.append(d)
            if period is not None:
                periods[d] = period
                factors.append(None)
                red.append(None)
                continue
            taps = f"t{d}"
            cv.static[base + "i"] = idx.astype(np.int32)
            cv.static[base + "w"] = w.astype(wnp)
            ti, tw = cv.tensor(base + "i"), cv.tensor(base + "w")
            params += [f"I{d}: {ti.type}", f"W{d}: {tw.type}"]
            args += [ti, tw]
            subs[d] = _clamped(f"I{d}[{oi[d]}, {taps}]", shape_in[d])
            factors.append(f"W{d}[{oi[d]}, {taps}]")
            red.append(f"{taps}: {w.shape[1]}")
        if ex is not None and ex.any():
            cv.static[base + "e"] = ex.astype(np.bool_)
            te = cv.tensor(base + "e")
            params.append(f"E{d}: {te.type}")
            args.append(te)
            masks.append(f"E{d}[{oi[d]}]")
    if tapped and not masks:
        stages = _separable(subs, factors, red, tapped, periods, oi, shape_in, out, dt)
    else:
        body = " * ".join([f"X[{', '.join(subs)}]"] + factors)
        if red:
            body = f"sum[{', '.join(red)}]({body})"
        if masks:
            body = f"select({' or '.join(masks)}, {T.lit(extrap_value, dt)}, {body})"
        stages = f"    Y[{', '.join(oi)}] = {body}\n"
    text = (f"op {{name}}(X: {T.ty(shape_in, dt)}{''.join(', ' + p for p in params)}) "
            f"-> Y: {T.ty(out, dt)} {{\n{stages}}}\n")
    cv.call(node.output[0], cv.op("resize", text), args, tuple(out), dtype=dt)


def _separable(subs, factors, red, tapped, periods, oi, shape_in, out, dt) -> str:
    """The stages of a resize along axes of taps (bilinear, bicubic), one axis at a time
    from the last, as ONNX's reference interpolates: each stage sums its axis's taps of the
    one before, so a 2-D bilinear resize reads 2 + 2 values an output where one sum over
    the 2 x 2 window read 4 (and multiplied each by two weights). The last axis goes first,
    while the other axes still have their input sizes: its gathers along the contiguous
    axis are the ones that do not vectorize, unless its taps repeat with a period
    (`_periodic_stages`). The next stages gather whole rows."""
    r = len(oi)
    shape = [out[d] if subs[d] != oi[d] and d not in tapped else shape_in[d]
             for d in range(r)]
    source, lines = "X", []
    order = sorted(tapped, reverse=True)
    for j, d in enumerate(order):
        k = tapped.index(d)
        reads = [subs[a] if a == d or (j == 0 and a not in tapped) else oi[a]
                 for a in range(r)]
        name = "Y" if j == len(order) - 1 else f"R{d}"
        if d in periods:
            lines += _periodic_stages(name, shape, periods[d], oi, dt)
        else:
            shape[d] = out[d]
            if name != "Y":
                lines.append(f"    {name}: {T.ty(shape, dt)}")
            lines.append(f"    {name}[{', '.join(oi)}] = sum[{red[k]}]"
                         f"({source}[{', '.join(reads)}] * {factors[k]})")
        source = name
    return "".join(line + "\n" for line in lines)


def _period(raw, w, size, out_size):
    """``(s, lo, hi, off, w)`` where an axis enlarged by a whole factor ``s`` (2x, 4x) reads,
    for output ``o``, inputs ``o // s + off[o % s]`` with weights ``w[o % s]`` (a half-pixel
    bilinear 2x: 0.25, 0.75 and 0.75, 0.25), indices as far as ``lo`` before the axis and
    ``hi`` past it clipped to its ends; None where the taps do not repeat (align_corners,
    a fractional scale, weights renormalized at the ends)."""
    if out_size <= size or out_size % size:
        return None
    s = out_size // size
    off = raw - (np.arange(out_size) // s)[:, None]
    if not (np.array_equal(off, np.tile(off[:s], (size, 1))) and
            np.array_equal(w, np.tile(w[:s], (size, 1)))):
        return None
    return s, max(0, -int(raw.min())), max(0, int(raw.max()) - (size - 1)), off[:s], w[:s]


def _periodic_stages(name, shape, period, oi, dt) -> list[str]:
    """The last axis enlarged by a whole factor with repeating taps: the input's rows with
    their ends repeated (``P``: what clipping an index to the row gives), then each output
    as the sum its phase ``o % s`` takes of ``P`` at ``o // s`` plus constant offsets, its
    weights literals. Every read is affine in the row's position, so the rows vectorize:
    a 2x bilinear upsampling's columns of 64 x 64 x 64 took 0.83 ms as gathers, 0.08 ms
    so (hand-written C, one thread, AVX-512 host)."""
    s, lo, hi, off, w = period
    d, size = len(oi) - 1, shape[-1]
    padded = [*shape[:-1], size + lo + hi]
    o, rows = oi[d], oi[:-1]

    def at(tensor, index):
        return f"{tensor}[{', '.join([*rows, index])}]"
    lines = [f"    P{d}: {T.ty(padded, dt)}",
             f"    P{d}[{', '.join(oi)}] = {at('X', f'min(max({o} - {lo}, 0), {size - 1})')}"]
    phases = [" + ".join(f"{at(f'P{d}', f'{o} // {s} + {int(off[p, t]) + lo}')} * "
                         f"{T.lit(float(w[p, t]), dt)}" for t in range(off.shape[1]))
              for p in range(s)]
    body = phases[-1]
    for p in range(s - 2, -1, -1):
        body = f"select({o} % {s} == {p}, {phases[p]}, {body})"
    shape[d] = size * s
    if name != "Y":
        lines.append(f"    {name}: {T.ty(shape, dt)}")
    lines.append(f"    {name}[{', '.join(oi)}] = {body}")
    return lines


def _clamped(index: str, size: int) -> str:
    """A gathered index that is in [0, size) already (`_resize_axis` clips it), clamped
    there all the same so the checker proves the read: unchecked, each tap's bounds test
    (and its fault flag) cost U-Net's 2x upsampling 12.2 us against 7.8."""
    return f"min(max(i64({index}), 0), {size - 1})"


@converter("Resize", attrs=("antialias", "axes", "coordinate_transformation_mode",
                            "cubic_coeff_a", "exclude_outside", "extrapolation_value",
                            "keep_aspect_ratio_policy", "mode", "nearest_mode"))
def resize(cv, node, a):
    x = cv.tensor(node.input[0])
    mode = _text(a.get("mode", b"nearest"))
    if cv.opset < 11:                 # Resize-10: X, scales; asymmetric, floor
        scales, sizes, roi = cv.value(node.input[1]), None, None
        ctm, nearest = "asymmetric", "floor"
    else:
        roi = cv.value(node.input[1]) if _opt(node, 1) else None
        scales = cv.value(node.input[2]) if _opt(node, 2) else None
        sizes = cv.value(node.input[3]) if _opt(node, 3) else None
        if scales is not None and scales.size == 0:
            scales = None
        if sizes is not None and sizes.size == 0:
            sizes = None
        ctm = _text(a.get("coordinate_transformation_mode", b"half_pixel"))
        nearest = _text(a.get("nearest_mode", b"round_prefer_floor"))
    if (scales is None) == (sizes is None):
        raise cv.error("exactly one of scales and sizes must be given")
    if ctm not in ("half_pixel", "half_pixel_symmetric", "align_corners", "asymmetric",
                   "pytorch_half_pixel", "tf_crop_and_resize"):
        raise cv.error(f"coordinate_transformation_mode {ctm!r}")
    if nearest not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        raise cv.error(f"nearest_mode {nearest!r}")
    if ctm == "tf_crop_and_resize" and (roi is None or roi.size == 0):
        raise cv.error("tf_crop_and_resize without a roi")
    if ctm != "tf_crop_and_resize":
        roi = None
    axes = a.get("axes")
    _resize(cv, node, x, scales, sizes, roi, mode, nearest, ctm,
            float(a.get("cubic_coeff_a", -0.75)), bool(a.get("exclude_outside", 0)),
            bool(a.get("antialias", 0)), float(a.get("extrapolation_value", 0.0)),
            None if axes is None else list(axes),
            _text(a.get("keep_aspect_ratio_policy", b"stretch")))


@converter("Upsample", attrs=("mode", "scales", "height_scale", "width_scale"))
def upsample(cv, node, a):
    x = cv.tensor(node.input[0])
    mode = _text(a.get("mode", b"nearest"))
    if "scales" in a:
        scales = np.array(a["scales"], np.float32)
    elif len(node.input) > 1 and node.input[1]:
        scales = cv.value(node.input[1]).astype(np.float32)
    elif "height_scale" in a:             # Upsample-1
        scales = np.array([1, 1, a["height_scale"], a.get("width_scale", 1)], np.float32)
    else:
        raise cv.error("an Upsample without scales")
    if mode == "bilinear":
        mode = "linear"
    if mode not in ("nearest", "linear"):
        raise cv.error(f"mode {mode!r}")
    if np.any(scales < 1):
        raise cv.error(f"scales {scales.tolist()} below 1 (Upsample only enlarges)")
    _resize(cv, node, x, scales, None, None, mode, "floor", "asymmetric", -0.75, False,
            False, 0.0, None, "stretch")


# ---------------------------------------------------------------------------- GridSample

def _reflect(v: str, lo: float, hi: float, dt: str) -> str:
    """ONNX's reference reflection of coordinate ``v`` into [lo, hi] (by the near border,
    repeatedly), as an expression."""
    if hi <= lo:
        return T.lit(lo, dt)
    rng = hi - lo
    L, H, R = T.lit(lo, dt), T.lit(hi, dt), T.lit(rng, dt)

    def fold(dx, even, odd):
        k = f"floor(({dx}) / {R})"
        r = f"(({dx}) - {k} * {R})"
        return f"select({k} - 2.0 * floor({k} / 2.0) < 0.5, {even(r)}, {odd(r)})"
    below = fold(f"{L} - {v}", lambda r: f"{L} + {r}", lambda r: f"{H} - {r}")
    above = fold(f"{v} - {H}", lambda r: f"{H} - {r}", lambda r: f"{L} + {r}")
    return f"select({v} < {L}, {below}, select({v} > {H}, {above}, {v}))"


@converter("GridSample", attrs=("align_corners", "mode", "padding_mode"))
def grid_sample(cv, node, a):
    x = _float_input(cv, node.input[0], "GridSample")
    g = cv.tensor(node.input[1])
    if g.dtype != x.dtype:
        raise cv.error(f"a grid of {g.dtype} for an input of {x.dtype}")
    sp = len(x.shape) - 2
    if sp < 1 or len(g.shape) != sp + 2 or g.shape[0] != x.shape[0] or g.shape[-1] != sp:
        raise cv.error(f"an input {list(x.shape)} with a grid {list(g.shape)} "
                       f"(expected [N, out..., {sp}])")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(_text(a.get("mode", b"bilinear")),
                                                          _text(a.get("mode", b"bilinear")))
    if mode not in ("linear", "nearest", "cubic"):
        raise cv.error(f"mode {mode!r}")
    pmode = _text(a.get("padding_mode", b"zeros"))
    if pmode not in ("zeros", "border", "reflection"):
        raise cv.error(f"padding_mode {pmode!r}")
    align = bool(a.get("align_corners", 0))
    dt = x.dtype
    n, c = x.shape[:2]
    osp = list(g.shape[1:-1])
    shape = (n, c, *osp)
    oi = T.idx(sp, "o")
    at = f"[n, {', '.join(oi)}]"
    taps = {"nearest": 1, "linear": 2, "cubic": 4}[mode]
    off = {"nearest": 0, "linear": 0, "cubic": 1}[mode]
    lines = []
    ty_o = T.ty([n, *osp], dt)
    ty_t = [n, *osp, taps]
    for d in range(sp):
        dim = x.shape[2 + d]
        lo, hi = (0.0, dim - 1.0) if align else (-0.5, dim - 0.5)
        gv = f"G[n, {', '.join(oi)}, {sp - 1 - d}]"
        den = (f"({gv} + 1.0) / 2.0 * {T.lit(dim - 1.0, dt)}" if align else
               f"(({gv} + 1.0) * {T.lit(float(dim), dt)} - 1.0) / 2.0")
        if mode == "nearest":
            den = f"round({den})"
        lines += [f"    D{d}: {ty_o}", f"    D{d}{at} = {den}"]
        v = f"D{d}{at}"
        if pmode == "border":
            crd = (f"select({v} < {T.lit(lo, dt)} or {v} > {T.lit(hi, dt)}, "
                   f"min(max({v}, 0.0), {T.lit(dim - 1.0, dt)}), {v})")
        elif pmode == "reflection":
            crd = _reflect(v, lo, hi, dt)
        else:
            crd = v
        lines += [f"    Q{d}: {ty_o}", f"    Q{d}{at} = {crd}"]
        q = f"Q{d}{at}"
        tat = f"[n, {', '.join(oi)}, t]"
        if mode == "nearest":
            pos = q
        else:
            pos = f"floor({q}) + {dt}(t)" + (f" - {off}.0" if off else "")
        lines += [f"    R{d}: {T.ty(ty_t, dt)}", f"    R{d}{tat} = {pos}"]
        rv = f"R{d}{tat}"
        src = _reflect(rv, lo, hi, dt) if pmode == "reflection" else rv
        lines += [f"    I{d}: {T.ty(ty_t, 'i64')}",
                  f"    I{d}{tat} = min(max(i64({src}), 0), {dim - 1})"]
        fr = f"({q} - floor({q}))"
        if mode == "nearest":
            wgt = "1.0"
        elif mode == "linear":
            wgt = f"select(t == 0, 1.0 - {fr}, {fr})"
        else:
            A = -0.75
            x1, x2, x3 = f"({fr} + 1.0)", f"(1.0 - {fr})", f"(2.0 - {fr})"
            c0 = f"(({A} * {x1} - {5 * A}) * {x1} + {8 * A}) * {x1} - {4 * A}"
            c1 = f"(({A + 2} * {fr} - {A + 3}) * {fr} * {fr} + 1.0)"
            c2 = f"(({A + 2} * {x2} - {A + 3}) * {x2} * {x2} + 1.0)"
            c3 = f"(({A} * {x3} - {5 * A}) * {x3} + {8 * A}) * {x3} - {4 * A}"
            wgt = (f"select(t == 0, {c0}, select(t == 1, {c1}, "
                   f"select(t == 2, {c2}, {c3})))").replace("(-", "(0.0 - ")
        if pmode == "zeros":
            wgt = (f"select({rv} >= 0.0 and {rv} <= {T.lit(dim - 1.0, dt)}, {wgt}, 0.0)")
        lines += [f"    W{d}: {T.ty(ty_t, dt)}", f"    W{d}{tat} = {wgt}"]
    ti = T.idx(sp, "t")
    subs = [f"I{d}[n, {', '.join(oi)}, {ti[d]}]" for d in range(sp)]
    ws = " * ".join(f"W{d}[n, {', '.join(oi)}, {ti[d]}]" for d in range(sp))
    red = ", ".join(f"{t}: {taps}" for t in ti)
    lines.append(f"    Y[n, c, {', '.join(oi)}] = sum[{red}](X[n, c, {', '.join(subs)}] * {ws})")
    text = (f"op {{name}}(X: {x.type}, G: {g.type}) -> Y: {T.ty(shape, dt)} {{\n"
            + "\n".join(lines) + "\n}\n")
    cv.call(node.output[0], cv.op("gridsample", text), [x, g], shape, dtype=dt)


# ---------------------------------------------------------------------------- DeformConv

@converter("DeformConv", attrs=("dilations", "group", "kernel_shape", "offset_group", "pads",
                                "strides"))
def deform_conv(cv, node, a):
    """A convolution whose every kernel tap reads the input at its position plus a learnt
    offset, bilinearly (zeros outside), times an optional mask: the samples are a stage
    S[n, c, k..., o...] (im2col's shape), then the sum over channels and taps."""
    x = _float_input(cv, node.input[0], "DeformConv")
    w, off = cv.tensor(node.input[1]), cv.tensor(node.input[2])
    dt = x.dtype
    sp = len(x.shape) - 2
    if sp < 1 or len(w.shape) != sp + 2 or len(off.shape) != sp + 2:
        raise cv.error(f"an input {list(x.shape)}, weights {list(w.shape)} and offsets "
                       f"{list(off.shape)} of different ranks")
    if w.dtype != dt or off.dtype != dt:
        raise cv.error("weights or offsets of a dtype other than the input's")
    n, c = x.shape[:2]
    f, cg = w.shape[:2]
    group = int(a.get("group", 1))
    ogr = int(a.get("offset_group", 1))
    kernel = list(w.shape[2:])
    kprod = int(np.prod(kernel))
    if group < 1 or c != cg * group or f % group or c % ogr or \
            off.shape[1] != ogr * kprod * sp or off.shape[0] != n:
        raise cv.error(f"inconsistent shapes: input {list(x.shape)}, weights "
                       f"{list(w.shape)}, offsets {list(off.shape)}, group {group}, "
                       f"offset_group {ogr}")
    strides = _ints(cv, a, "strides", sp, 1)
    dil = _ints(cv, a, "dilations", sp, 1)
    pads = _ints(cv, a, "pads", 2 * sp, 0)
    out_sp = list(off.shape[2:])
    for d in range(sp):
        o = (x.shape[2 + d] + pads[d] + pads[sp + d] - dil[d] * (kernel[d] - 1) - 1) \
            // strides[d] + 1
        if o != out_sp[d]:
            raise cv.error(f"offsets of spatial shape {out_sp}, but the convolution's "
                           f"output is {o} along axis {d}")
    shape = (n, f, *out_sp)
    oi, ki, ti = T.idx(sp, "o"), T.idx(sp, "k"), T.idx(sp, "t")
    cpo = c // ogr
    og = f"c // {cpo}" if ogr > 1 else "0"
    kst = np.cumprod([1] + kernel[::-1])[:-1][::-1]
    klin = " + ".join(f"{k} * {int(s)}" if s != 1 else k for k, s in zip(ki, kst))
    tap = f"({og}) * {kprod} + {klin}" if ogr > 1 else klin
    params = [f"X: {x.type}", f"W: {w.type}", f"Off: {off.type}"]
    args = [x, w, off]
    lines = []
    pat = f"[n, c, {', '.join(ki)}, {', '.join(oi)}]"
    pty = T.ty([n, c, *kernel, *out_sp], dt)
    conds, subs, wts = [], [], []
    for d in range(sp):
        base = _affine(oi[d], strides[d], ki[d], dil[d], pads[d])
        lines += [f"    P{d}: {pty}",
                  f"    P{d}{pat} = {dt}({base}) + Off[n, ({tap}) * {sp} + {d}, "
                  f"{', '.join(oi)}]"]
        p = f"P{d}{pat}"
        idx = f"i64(floor({p})) + {ti[d]}"
        conds += [f"{idx} >= 0", f"{idx} < {x.shape[2 + d]}"]
        subs.append(idx)
        fr = f"({p} - floor({p}))"
        wts.append(f"select({ti[d]} == 0, 1.0 - {fr}, {fr})")
    red = ", ".join(f"{t}: 2" for t in ti)
    load = f"X[n, c, {', '.join(subs)}] * {' * '.join(wts)}"
    lines += [f"    S: {pty}",
              f"    S{pat} = sum[{red}](select({' and '.join(conds)}, {load}, 0.0))"]
    fg = f // group
    gi = "f" if fg == 1 else f"f // {fg}"
    chan = "c" if group == 1 else f"{gi} + c" if cg == 1 else f"{gi} * {cg} + c"
    term = f"S[n, {chan}, {', '.join(ki)}, {', '.join(oi)}] * W[f, c, {', '.join(ki)}]"
    tail = ""
    if _opt(node, 3):
        b = _bias(cv, node.input[3], f, dt)
        params.append(f"B: {b.type}")
        args.append(b)
        tail = " + B[f]"
    if _opt(node, 4):
        m = cv.tensor(node.input[4])
        if m.shape != (n, ogr * kprod, *out_sp) or m.dtype != dt:
            raise cv.error(f"a mask of {m.type}, expected "
                           f"{T.ty([n, ogr * kprod, *out_sp], dt)}")
        params.append(f"M: {m.type}")
        args.append(m)
        mtap = tap.replace("c // ", f"({chan}) // ") if ogr > 1 else klin
        term += f" * M[n, {mtap}, {', '.join(oi)}]"
    red = ", ".join([f"c: {cg}"] + [f"{k}: {m}" for k, m in zip(ki, kernel)])
    lines.append(f"    Y[n, f, {', '.join(oi)}] = sum[{red}]({term}){tail}")
    text = (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(shape, dt)} {{\n"
            + "\n".join(lines) + "\n}\n")
    cv.call(node.output[0], cv.op("deformconv", text), args, shape, dtype=dt)


# ---------------------------------------------------------------------------- RoiAlign

@converter("RoiAlign", attrs=("coordinate_transformation_mode", "mode", "output_height",
                              "output_width", "sampling_ratio", "spatial_scale"))
def roi_align(cv, node, a):
    """Each roi's bins sampled on a fixed sampling_ratio x sampling_ratio grid, bilinearly
    (ONNX's reference: samples past the image by more than one pixel weigh 0, the last row
    and column are clamped), averaged or maxed; the per-axis sample rows, columns and
    weights are stages of the roi."""
    x = _float_input(cv, node.input[0], "RoiAlign")
    rois, bi = cv.tensor(node.input[1]), cv.tensor(node.input[2])
    dt = x.dtype
    if len(x.shape) != 4 or len(rois.shape) != 2 or rois.shape[1] != 4 or \
            bi.shape != (rois.shape[0],) or rois.dtype != dt or \
            bi.dtype not in ("i64", "i32"):
        raise cv.error(f"an input {x.type}, rois {rois.type} and batch indices {bi.type} "
                       f"(expected [N, C, H, W], [R, 4] of the input's dtype, [R] integers)")
    ratio = int(a.get("sampling_ratio", 0))
    if ratio <= 0:
        raise cv.error("sampling_ratio 0 (a sample grid that depends on each roi's size, "
                       "known only at run time): give sampling_ratio > 0")
    mode = _text(a.get("mode", b"avg"))
    if mode not in ("avg", "max"):
        raise cv.error(f"mode {mode!r}")
    ctm = _text(a.get("coordinate_transformation_mode",
                      b"half_pixel" if cv.opset >= 16 else b"output_half_pixel"))
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise cv.error(f"coordinate_transformation_mode {ctm!r}")
    half = ctm == "half_pixel"
    ph_, pw_ = int(a.get("output_height", 1)), int(a.get("output_width", 1))
    scale = float(a.get("spatial_scale", 1.0))
    nr = rois.shape[0]
    c = x.shape[1]
    shape = (nr, c, ph_, pw_)
    L = lambda v: T.lit(v, dt)  # noqa: E731
    lines = []
    for d, (size, pooled, col) in enumerate(((x.shape[2], ph_, 1), (x.shape[3], pw_, 0))):
        s = f"(R[r, {col}] * {L(scale)}" + (" - 0.5)" if half else ")")
        e = f"(R[r, {col + 2}] * {L(scale)}" + (" - 0.5)" if half else ")")
        ext = f"({e} - {s})" if half else f"max({e} - {s}, 1.0)"
        bin_ = f"({ext} / {L(float(pooled))})"
        at = "[r, p, i]"
        t3, t4 = T.ty([nr, pooled, ratio], dt), T.ty([nr, pooled, ratio, 2], dt)
        lines += [f"    C{d}: {t3}",
                  f"    C{d}{at} = {s} + {dt}(p) * {bin_} + ({dt}(i) + 0.5) * {bin_} / "
                  f"{L(float(ratio))}",
                  f"    V{d}: {t3}", f"    V{d}{at} = max(C{d}{at}, 0.0)",
                  f"    F{d}: {t3}", f"    F{d}{at} = floor(V{d}{at})"]
        edge = f"F{d}{at} >= {L(size - 1.0)}"
        lines += [f"    I{d}: {T.ty([nr, pooled, ratio, 2], 'i64')}",
                  f"    I{d}[r, p, i, t] = select({edge}, {size - 1}, i64(F{d}{at}) + t)",
                  f"    W{d}: {t4}",
                  f"    W{d}[r, p, i, t] = select(C{d}{at} < -1.0 or C{d}{at} > "
                  f"{L(float(size))}, 0.0, select({edge}, select(t == 0, 1.0, 0.0), "
                  f"select(t == 0, 1.0 - (V{d}{at} - F{d}{at}), V{d}{at} - F{d}{at})))"]
    bsub = f"min(max(B[r], 0), {x.shape[0] - 1})" if x.shape[0] > 1 else "0"
    val = (f"X[{bsub}, c, I0[r, y, iy, ty], I1[r, x, ix, tx]] * W0[r, y, iy, ty] * "
           "W1[r, x, ix, tx]")
    red = f"iy: {ratio}, ix: {ratio}, ty: 2, tx: 2"
    body = (f"sum[{red}]({val}) / {L(float(ratio * ratio))}" if mode == "avg" else
            f"max[{red}]({val})")
    lines.append(f"    Y[r, c, y, x] = {body}")
    text = (f"op {{name}}(X: {x.type}, R: {rois.type}, B: {bi.type}) -> "
            f"Y: {T.ty(shape, dt)} {{\n" + "\n".join(lines) + "\n}\n")
    cv.call(node.output[0], cv.op("roialign", text), [x, rois, bi], shape, dtype=dt)


# ---------------------------------------------------------------------------- MaxUnpool

@converter("MaxUnpool", attrs=("kernel_shape", "pads", "strides"))
def max_unpool(cv, node, a):
    """Y.flat[I] = X, zeros elsewhere: each output element looks for the last input of
    its (n, c) plane whose index names it (the indices of a MaxPool stay in their plane),
    a scan of the plane (cost: output plane x input plane per channel)."""
    x = cv.tensor(node.input[0])
    ind = cv.tensor(node.input[1])
    sp = len(x.shape) - 2
    if sp < 1 or ind.shape != x.shape or ind.dtype != "i64":
        raise cv.error(f"an input {x.type} with indices {ind.type} (expected i64 of the "
                       f"input's shape)")
    kernel = _ints(cv, a, "kernel_shape", sp, 1)
    strides = _ints(cv, a, "strides", sp, 1)
    pads = _ints(cv, a, "pads", 2 * sp, 0)
    # the indices count in the inferred shape, which sits at the start of output_shape
    inf_sp = [(x.shape[2 + d] - 1) * strides[d] - pads[d] - pads[sp + d] + kernel[d]
              for d in range(sp)]
    out_sp = inf_sp
    if _opt(node, 2):
        out = [int(v) for v in cv.value(node.input[2]).reshape(-1)]
        if len(out) != sp + 2 or out[:2] != list(x.shape[:2]) or \
                any(o < i for o, i in zip(out[2:], inf_sp)):
            raise cv.error(f"output_shape {out} for an input {list(x.shape)} (the inferred "
                           f"shape is {inf_sp})")
        out_sp = out[2:]
    shape = (*x.shape[:2], *out_sp)
    oi, qi = T.idx(sp, "o"), T.idx(sp, "q")
    plane = int(np.prod(inf_sp))
    ost = np.cumprod([1] + inf_sp[::-1])[:-1][::-1]
    inside = [f"{o} < {m}" for o, m, big in zip(oi, inf_sp, out_sp) if big > m]
    ist = np.cumprod([1] + list(x.shape[2:])[::-1])[:-1][::-1]
    flat = " + ".join([f"(n * {x.shape[1]} + c) * {plane}"] +
                      [f"{o} * {int(s)}" if s != 1 else o for o, s in zip(oi, ost)])
    qlin = " + ".join(f"{q} * {int(s)}" if s != 1 else q for q, s in zip(qi, ist))
    red = ", ".join(f"{q}: {m}" for q, m in zip(qi, x.shape[2:]))
    lhs = f"[n, c, {', '.join(oi)}]"
    dec = [f"J{lhs} // {int(s)} % {m}" if s != 1 else f"J{lhs} % {m}"
           for s, m in zip(ist, x.shape[2:])]
    dec[0] = f"J{lhs} // {int(ist[0])}" if ist[0] != 1 else f"J{lhs}"
    find = f"max[{red}](select(I[n, c, {', '.join(qi)}] == {flat}, {qlin}, -1))"
    text = (f"op {{name}}(X: {x.type}, I: {ind.type}) -> Y: {T.ty(shape, x.dtype)} {{\n"
            f"    J: {T.ty(shape, 'i64')}\n"
            f"    J{lhs} = {_guard(inside, find, '-1')}\n"
            f"    Y{lhs} = select(J{lhs} >= 0, X[n, c, {', '.join(dec)}], "
            f"{T.lit(0, x.dtype)})\n}}\n")
    cv.call(node.output[0], cv.op("maxunpool", text), [x, ind], shape, dtype=x.dtype)


# ---------------------------------------------------------------------------- CausalConvWithState, AffineGrid

@converter("CausalConvWithState", attrs=("activation",))
def causal_conv_with_state(cv, node, a):
    """CausalConvWithState (a depthwise causal 1-D convolution over the past state and the
    input, an optional SiLU; the new state) as the function body ONNX defines for it
    (`control.inline_function`): a Concat, a grouped Conv and Slices."""
    from .control import inline_function
    inline_function(cv, node, a)


@converter("AffineGrid", attrs=("align_corners",))
def affine_grid(cv, node, a):
    """AffineGrid as the function body ONNX defines for it (`control.inline_function`);
    the size input gives the output's shape, so it must be known at import."""
    from .control import inline_function
    cv.value(node.input[1])
    inline_function(cv, node, a)
