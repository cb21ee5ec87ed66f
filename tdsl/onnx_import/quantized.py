"""Converters of the quantized operators: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Integer products accumulate in i32. Requantization follows onnxruntime (MLAS): the i32
accumulator times the f32 scale ``x_scale * w_scale / y_scale``, rounded half to even, plus
the zero point, saturated to the output type. Scales and zero points are per tensor, per
axis, or (Quantize/DequantizeLinear, opset 21) per block along the axis. Only the integer
types tdsl carries (u8, i8, i16, u16, i32) are supported; float8, 4-bit and 2-bit ones are refused
by the importer.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from ..lowering.dtypes import MINIFLOATS
from . import templates as T
from .registry import converter, opt

RANGES = {"u8": (0, 255), "i8": (-128, 127), "i16": (-32768, 32767), "u16": (0, 65535)}


def _qrange(cv, dtype):
    if dtype not in RANGES:
        raise cv.error(f"quantization to {dtype} (supported: u8, i8, i16, u16)")
    return RANGES[dtype]


def _param_sub(shape, x_rank, axis, block, idx):
    """Subscripts of a scale or zero point of ``shape`` for an element at ``idx`` of a rank
    ``x_rank`` tensor: per tensor, per axis (1-D along ``axis``) or per block."""
    if len(shape) == 0:
        return ""
    if int(np.prod(shape)) == 1 and (len(shape) != x_rank or not block):
        return f"[{', '.join(['0'] * len(shape))}]"
    if block:
        subs = [f"{i} // {block}" if k == axis else i for k, i in enumerate(idx)]
        return f"[{', '.join(subs)}]"
    return f"[{idx[axis]}]"


def _scaled_operand(cv, name, x_rank, axis, block, idx, key):
    """(param declaration, term) of a scale or zero point input."""
    t = cv.tensor(name)
    return f"{key}: {t.type}", f"{key}{_param_sub(t.shape, x_rank, axis, block, idx)}", t


def _per_tensor(cv, node, a, x):
    """The constant scale and zero point (None if absent) of a QuantizeLinear or
    DequantizeLinear whose scale and zero point are each one constant element, of an input
    of rank >= 1 and no block; else None. Such a node is written as an op of any rank with
    them as literals, one input: the graph's layout pass runs it on blocked activations
    (fused into the int8 convolution's neighbours) as it runs relu."""
    sc = cv.static.get(node.input[1])
    zp = cv.static.get(opt(node, 2)) if opt(node, 2) else None
    if sc is None or sc.size != 1 or (opt(node, 2) and (zp is None or zp.size != 1)) or \
            not x.shape or int(a.get("block_size", 0)):
        return None
    return sc.reshape(()), None if zp is None else zp.reshape(())


def _generic_op(cv, kind, node, x, out, body):
    text = (f"op {{name}}(X: {x.dtype}[*S]) -> Y: {out}[*S] {{\n"
            f"    Y[*i] = {body}\n}}\n")
    cv.call(node.output[0], cv.op(kind, text), [x], x.shape, dtype=out)


@converter("QuantizeLinear", attrs=("axis", "block_size", "output_dtype", "saturate",
                                    "precision"))
def quantize(cv, node, a):
    x = cv.tensor(node.input[0])
    if x.dtype not in ("f32", "f64"):
        raise cv.error(f"QuantizeLinear of {x.dtype}")
    from .convert import tdsl_dtype
    scalars = _per_tensor(cv, node, a, x)
    if scalars is not None and scalars[1] is not None and \
            tdsl_dtype(scalars[1].dtype, "QuantizeLinear's zero point") in RANGES:
        sc, zp = scalars
        out = tdsl_dtype(zp.dtype, "QuantizeLinear's zero point")
        lo, hi = _qrange(cv, out)
        _generic_op(cv, "quantize", node, x, out,
                    f"{out}(min(max(round(X[*i] / ({T.lit(sc, x.dtype)})) + "
                    f"({T.lit(zp, x.dtype)}), {T.lit(lo)}), {T.lit(hi)}))")
        return
    rank = len(x.shape)
    axis = a.get("axis", 1) % max(rank, 1)
    block = int(a.get("block_size", 0))
    i = T.idx(rank)
    decl_s, s, ts = _scaled_operand(cv, node.input[1], rank, axis, block, i, "S")
    args, params = [x, ts], [f"X: {x.type}", decl_s]
    if opt(node, 2):
        decl_z, z, tz = _scaled_operand(cv, node.input[2], rank, axis, block, i, "Z")
        out = tz.dtype
        args.append(tz)
        params.append(decl_z)
        zero = f" + {x.dtype}({z})"
    else:
        out = "u8"
        if "output_dtype" in a:
            from onnx import helper
            from .convert import tdsl_dtype
            out = tdsl_dtype(helper.tensor_dtype_to_np_dtype(a["output_dtype"]),
                             "QuantizeLinear's output_dtype")
        zero = ""
    if out in MINIFLOATS:
        body = _quantize_float(a, out, f"{T.at('X', i)} / {s}", zero, x.dtype)
    else:
        lo, hi = _qrange(cv, out)
        body = (f"{out}(min(max(round({T.at('X', i)} / {s}){zero}, {T.lit(lo)}), "
                f"{T.lit(hi)}))")
    text = (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(x.shape, out)} {{\n"
            f"    {T.at('Y', i)} = {body}\n}}\n")
    cv.call(node.output[0], cv.op("quantize", text), args, x.shape, dtype=out)


def _quantize_float(a, out, scaled, zero, dtype) -> str:
    """QuantizeLinear's value for a float output type, as ONNX's reference computes it:
    ``x / scale`` cast to nearest even, saturated to the type's largest value for the 8-bit
    floats unless ``saturate=0`` (f4e2m1 saturates always, and adds its zero point)."""
    if out == "f4e2m1":
        return f"{out}({scaled}{zero})"
    return T.saturated(scaled, out, dtype) if a.get("saturate", 1) else f"{out}({scaled})"


@converter("DequantizeLinear", attrs=("axis", "block_size", "output_dtype", "precision"))
def dequantize(cv, node, a):
    x = cv.tensor(node.input[0])
    if x.dtype not in ("u8", "i8", "i16", "u16", "i32", *MINIFLOATS):
        raise cv.error(f"DequantizeLinear of {x.dtype}")
    from .convert import tdsl_dtype
    scalars = _per_tensor(cv, node, a, x)
    if scalars is not None and x.dtype not in MINIFLOATS:
        sc, zp = scalars
        out = tdsl_dtype(sc.dtype, "DequantizeLinear's scale")
        value = f"{out}(X[*i])" if zp is None else f"({out}(X[*i]) - ({T.lit(zp, out)}))"
        _generic_op(cv, "dequantize", node, x, out, f"{value} * ({T.lit(sc, out)})")
        return
    rank = len(x.shape)
    axis = a.get("axis", 1) % max(rank, 1)
    block = int(a.get("block_size", 0))
    i = T.idx(rank)
    decl_s, s, ts = _scaled_operand(cv, node.input[1], rank, axis, block, i, "S")
    out = ts.dtype
    args, params = [x, ts], [f"X: {x.type}", decl_s]
    value = f"{out}({T.at('X', i)})"
    if opt(node, 2):
        decl_z, z, tz = _scaled_operand(cv, node.input[2], rank, axis, block, i, "Z")
        args.append(tz)
        params.append(decl_z)
        value = f"({value} - {out}({z}))"
    text = (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(x.shape, out)} {{\n"
            f"    {T.at('Y', i)} = {value} * {s}\n}}\n")
    cv.call(node.output[0], cv.op("dequantize", text), args, x.shape, dtype=out)


@converter("DynamicQuantizeLinear")
def dynamic_quantize(cv, node, a):
    x = cv.float_tensor(node.input[0])
    rank = len(x.shape)
    i = T.idx(rank, "r")
    ranges = ", ".join(f"{v}: {n}" for v, n in zip(i, x.shape))
    load = T.at("X", i)
    j = T.idx(rank)
    # as onnxruntime: the range always holds 0; scale 1 for a constant zero input
    text = (f"op {{name}}(X: {x.type}) -> (Y: {T.ty(x.shape, 'u8')}, S: f32, Z: u8) {{\n"
            f"    Hi: f32\n    Hi = max(max[{ranges}]({load}), 0.0)\n"
            f"    Lo: f32\n    Lo = min(min[{ranges}]({load}), 0.0)\n"
            f"    Sc: f32\n    Sc = select(Hi == Lo, 1.0, Hi - Lo) / 255.0\n"
            f"    Zf: f32\n    Zf = round(max(0.0, min(255.0, 0.0 - Lo / Sc)))\n"
            f"    {T.at('Y', j)} = u8(min(max(round({T.at('X', j)} / Sc) + Zf, 0.0), "
            f"255.0))\n"
            f"    S = Sc\n    Z = u8(Zf)\n}}\n")
    _call_outputs(cv, node, cv.op("dynamic_quantize", text), [x],
                  [(x.shape, "u8"), ((), "f32"), ((), "u8")])


def _call_outputs(cv, node, func, args, outs):
    """``y, s, z = func(args)`` for the node's outputs (an unused one gets a fresh name)."""
    from .convert import Tensor
    ts = []
    for k, (shape, dtype) in enumerate(outs):
        name = node.output[k] if len(node.output) > k and node.output[k] else \
            f"{node.output[0]}#unused{k}"
        ts.append((name, Tensor(cv.fresh(name), shape, dtype)))
    cv.lines.append(f"    {', '.join(t.name for _, t in ts)} = "
                    f"{func}({', '.join(t.name for t in args)})")
    for name, t in ts:
        cv.tensors[name] = t


def _centered(cv, name, zp_name, key, sub, zp_sub):
    """(params, args, term): an integer operand as i32 minus its zero point."""
    t = cv.tensor(name)
    if t.dtype not in ("u8", "i8"):
        raise cv.error(f"'{name}' is {t.dtype}; u8 or i8 expected")
    params, args = [f"{key}: {t.type}"], [t]
    term = f"i32({key}{sub})"
    if zp_name:
        z = cv.tensor(zp_name)
        params.append(f"{key}Z: {z.type}")
        args.append(z)
        zsub = zp_sub(z.shape)
        term = f"({term} - i32({key}Z{zsub}))"
    return params, args, term


def _matmul_parts(cv, node, a_name, b_name, azp, bzp):
    sa, sb = cv.shape(a_name), cv.shape(b_name)
    if len(sa) < 2 or len(sb) < 2:
        raise cv.error("a matmul of a vector")
    batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    shape = batch + (sa[-2], sb[-1])
    i = T.idx(len(shape))
    pa = len(shape) - len(sa)
    a_sub = [("0" if n == 1 else i[pa + k]) for k, n in enumerate(sa[:-2])] + [i[-2], "k"]
    pb = len(shape) - len(sb)
    b_sub = [("0" if n == 1 else i[pb + k]) for k, n in enumerate(sb[:-2])] + ["k", i[-1]]

    def zp_a(s):                       # per tensor, or per row of A
        return "" if not s else "[0]" if int(np.prod(s)) == 1 else f"[{i[-2]}]"

    def zp_b(s):                       # per tensor, or per column of B
        return "" if not s else "[0]" if int(np.prod(s)) == 1 else f"[{i[-1]}]"
    pa_, aa, ta = _centered(cv, a_name, azp, "A", f"[{', '.join(a_sub)}]", zp_a)
    pb_, ab, tb = _centered(cv, b_name, bzp, "B", f"[{', '.join(b_sub)}]", zp_b)
    acc = f"sum[k: {sa[-1]}]({ta} * {tb})"
    return pa_ + pb_, aa + ab, acc, shape, i


@converter("MatMulInteger")
def matmul_integer(cv, node, a):
    params, args, acc, shape, i = _matmul_parts(cv, node, node.input[0], node.input[1],
                                                opt(node, 2), opt(node, 3))
    text = (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(shape, 'i32')} {{\n"
            f"    {T.at('Y', i)} = {acc}\n}}\n")
    cv.call(node.output[0], cv.op("matmul_integer", text), args, shape, dtype="i32")


def _requantize(cv, acc, scales, y_zp, f16_scales=False):
    """(params, args, body): onnxruntime's requantization of an i32 ``acc``. With
    ``f16_scales`` (QLinearMatMul) three f16 scales are taken as ONNX's reference takes
    them: their product and quotient rounded to f16 per operation, times the accumulator
    in f64 (exact there)."""
    params, args = [], []
    factors = []
    half = f16_scales and all(cv.dtype(name) == "f16" for _, name, _ in scales)
    for key, name, sub in scales:
        t = cv.tensor(name) if half else cv.float_tensor(name)
        params.append(f"{key}: {t.type}")
        args.append(t)
        factors.append(f"{key}{sub(t.shape)}")
    scale = f"{factors[0]} * {factors[1]} / {factors[2]}"
    if half:
        z = cv.tensor(y_zp)
        lo, hi = _qrange(cv, z.dtype)
        zsub = "" if not z.shape else "[0]"
        scale = f"f64(f16(f16({factors[0]} * {factors[1]}) / {factors[2]}))"
        body = (f"{z.dtype}(min(max(round(f64({acc}) * {scale}) + f64(YZ{zsub}), "
                f"{T.lit(lo)}), {T.lit(hi)}))")
        return params + [f"YZ: {z.type}"], args + [z], body, z.dtype
    z = cv.tensor(y_zp)
    params.append(f"YZ: {z.type}")
    args.append(z)
    zsub = "" if not z.shape else "[0]"
    lo, hi = _qrange(cv, z.dtype)
    body = (f"{z.dtype}(min(max(round(f32({acc}) * ({scale})) + f32(YZ{zsub}), "
            f"{T.lit(lo)}), {T.lit(hi)}))")
    return params, args, body, z.dtype


def _scalar_sub(s):
    return "" if not s else "[0]"


@converter("QLinearMatMul")
def qlinear_matmul(cv, node, a):
    x = node.input
    params, args, acc, shape, i = _matmul_parts(cv, node, x[0], x[3], x[2], x[5])
    rq_params, rq_args, body, out = _requantize(
        cv, T.at("Acc", i), [("AS", x[1], _scalar_sub), ("BS", x[4], _scalar_sub),
                             ("YS", x[6], _scalar_sub)], x[7],
        f16_scales=True)
    text = (f"op {{name}}({', '.join(params + rq_params)}) -> Y: {T.ty(shape, out)} {{\n"
            f"    Acc: {T.ty(shape, 'i32')}\n    {T.at('Acc', i)} = {acc}\n"
            f"    {T.at('Y', i)} = {body}\n}}\n")
    cv.call(node.output[0], cv.op("qlinear_matmul", text), args + rq_args, shape, dtype=out)


def _conv_parts(cv, node, a, x_name, w_name, xzp, wzp):
    """(params, args, acc, out shape, index names) of an integer convolution of any rank."""
    xs, ws = cv.shape(x_name), cv.shape(w_name)
    spatial = len(xs) - 2
    group = int(a.get("group", 1))
    kernel = [int(k) for k in a.get("kernel_shape", ws[2:])]
    strides = [int(v) for v in a.get("strides", [1] * spatial)]
    dil = [int(v) for v in a.get("dilations", [1] * spatial)]
    pad = a.get("auto_pad", b"NOTSET")
    pad = pad.decode() if isinstance(pad, bytes) else pad
    if pad in ("NOTSET", ""):
        pads = [int(v) for v in a.get("pads", [0] * 2 * spatial)]
    elif pad == "VALID":
        pads = [0] * 2 * spatial
    else:
        lo, hi = [], []
        for k in range(spatial):
            o = math.ceil(xs[2 + k] / strides[k])
            total = max(0, (o - 1) * strides[k] + dil[k] * (kernel[k] - 1) + 1 - xs[2 + k])
            first = total // 2 if pad == "SAME_UPPER" else total - total // 2
            lo.append(first)
            hi.append(total - first)
        pads = lo + hi
    outs = [(xs[2 + k] + pads[k] + pads[k + spatial] - dil[k] * (kernel[k] - 1) - 1)
            // strides[k] + 1 for k in range(spatial)]
    n, c = xs[:2]
    f, cg = ws[:2]
    fg = f // group
    o = [f"y{k}" for k in range(spatial)]
    r = [f"r{k}" for k in range(spatial)]
    pos = [f"{o[k]} * {strides[k]} + {r[k]} * {dil[k]} - {pads[k]}" for k in range(spatial)]
    inside = " and ".join(f"{p} >= 0 and {p} < {xs[2 + k]}" for k, p in enumerate(pos))
    chan = "c" if group == 1 else f"m // {fg} * {cg} + c"

    def zp_x(s):
        return "" if not s else "[0]"

    def zp_w(s):                        # per tensor, or per output channel
        return "" if not s else "[0]" if int(np.prod(s)) == 1 else "[m]"
    px, ax, tx = _centered(cv, x_name, xzp, "X", f"[b, {chan}, {', '.join(pos)}]", zp_x)
    pw, aw, tw = _centered(cv, w_name, wzp, "W", f"[m, c, {', '.join(r)}]", zp_w)
    ranges = ", ".join([f"c: {cg}"] + [f"{r[k]}: {kernel[k]}" for k in range(spatial)])
    acc = f"sum[{ranges}](select({inside}, {tx} * {tw}, 0))"
    return px + pw, ax + aw, acc, (n, f, *outs), ["b", "m"] + o


@converter("ConvInteger", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads",
                                 "strides"))
def conv_integer(cv, node, a):
    params, args, acc, shape, i = _conv_parts(cv, node, a, node.input[0], node.input[1],
                                              opt(node, 2), opt(node, 3))
    text = (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(shape, 'i32')} {{\n"
            f"    {T.at('Y', i)} = {acc}\n}}\n")
    cv.call(node.output[0], cv.op("conv_integer", text), args, shape, dtype="i32")


@converter("QLinearConv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads",
                                 "strides"))
def qlinear_conv(cv, node, a, relu=False):
    """``relu``: the result's max with its zero point (QDQ's Conv -> Relu -> Q)."""
    if _conv_u8(cv, node, a, relu) or _conv_i16(cv, node, a, relu) or \
            _conv_f32_exact(cv, node, a, relu):
        return
    if relu:
        out = node.output[0]
        qlinear_conv(cv, SimpleNamespace(input=node.input, output=[out + "#int"]), a)
        cv.elementwise(out, [out + "#int", node.input[7]], "max({0}, {1})", "qdq_relu")
        return
    x = node.input
    params, args, acc, shape, i = _conv_parts(cv, node, a, x[0], x[3], x[2], x[5])
    if opt(node, 8):
        bias = cv.tensor(x[8])
        if bias.dtype != "i32":
            raise cv.error(f"QLinearConv's bias is {bias.dtype}; i32 expected")
        params.append(f"Bias: {bias.type}")
        args.append(bias)
        acc = f"{acc} + Bias[m]"

    def per_channel(s):
        return "" if not s else "[0]" if int(np.prod(s)) == 1 else "[m]"
    rq_params, rq_args, body, out = _requantize(
        cv, T.at("Acc", i), [("XS", x[1], _scalar_sub), ("WS", x[4], per_channel),
                             ("YS", x[6], _scalar_sub)], x[7])
    text = (f"op {{name}}({', '.join(params + rq_params)}) -> Y: {T.ty(shape, out)} {{\n"
            f"    Acc: {T.ty(shape, 'i32')}\n    {T.at('Acc', i)} = {acc}\n"
            f"    {T.at('Y', i)} = {body}\n}}\n")
    cv.call(node.output[0], cv.op("qlinear_conv", text), args + rq_args, shape, dtype=out)


def _groups_of_4(c: int) -> int:
    """The channels the dot product's groups of four leave unused: 1 for an RGB image."""
    return -c % 4


def _padded_channels(cv, out, xt, w, xz):
    """The input and weights of an int8 convolution with channels not a multiple of 4
    (an RGB image), padded to one: the input's extra channels x_zp, the weights' 0, so the
    sum and B (which subtracts x_zp times each filter's weight sum) are unchanged. The
    dot product then does 4 products where 3 are real, still 3x the f32 FMA's rate:
    ResNet-50's 7x7/2 stem at 224 x 224 took 2.28 ms on the float route, 0.76 ms so (Zen 4,
    AVX-512 VNNI, one thread)."""
    n, c, ih, iw = xt.shape
    c4 = c + _groups_of_4(c)
    text = (f"op {{name}}(X: {xt.type}) -> Y: {T.ty([n, c4, ih, iw], 'u8')} {{\n"
            f"    Y[b, k, h, w] = select(k < {c}, X[b, k, h, w], u8({xz}))\n}}\n")
    cv.call(out + "#x4", cv.op("qconv_channels", text), [xt], (n, c4, ih, iw), dtype="u8")
    cv.static[out + "#w4"] = np.pad(w, ((0, 0), (0, c4 - c), (0, 0), (0, 0)))
    return cv.tensors[out + "#x4"], cv.tensor(out + "#w4")


def _conv_u8(cv, node, a, relu=False) -> bool:
    """QLinearConv of u8 activations and symmetric i8 weights as std ``qlinear_conv2d``
    (which the graph runs on blocked activations with the int8 dot product): B = bias -
    x_zp * (each filter's weight sum), S = x_scale * w_scale / y_scale per filter (in f32,
    as the float route and `_requantize` make it), ``relu`` as the clamp's lower bound.
    False (nothing emitted) unless: 2-D, constant u8 zero points and f32 scales per tensor
    (the weights' per tensor or per output channel), constant i8 weights of zero point 0,
    no grouping, multiples of 4 filters and of 4 channels (the dot product's groups) or
    channels padded to one with at least 3 of each 4 products real (`_padded_channels`),
    one stride, dilation and padding for every side, a
    constant i32 bias, B within i32, and a target with an int8 dot product (VNNI): without
    one, integer products run at a fraction of the f32 FMA rate (x86-64-v3, 64 -> 64
    channels 3x3 at 56x56: 35 ms against 2.1 for the float route), and the float route
    is exact within its bound."""
    from .conv import _attrs, _pads
    if not cv.int8_dot:
        return False
    x = list(node.input) + [""] * (9 - len(node.input))
    xt = cv.tensors.get(x[0])
    w, ws = cv.static.get(x[3]), cv.static.get(x[4])
    if xt is None or xt.dtype != "u8" or len(xt.shape) != 4 or \
            not all(isinstance(d, (int, np.integer)) for d in xt.shape[1:]) or \
            w is None or ws is None or w.dtype != np.int8 or w.ndim != 4 or \
            ws.dtype != np.float32:
        return False
    n, c, ih, iw = xt.shape
    f, cg, kh, kw = w.shape
    xs, ys = (_static_scalar(cv, k, (np.float32,)) for k in (x[1], x[6]))
    xz = _static_scalar(cv, x[2], (np.uint8,)) if x[2] else np.zeros((), np.uint8)
    yz = _static_scalar(cv, x[7], (np.uint8,)) if x[7] else np.zeros((), np.uint8)
    wz = cv.static.get(x[5]) if x[5] else np.zeros((), np.int8)
    bias = cv.static.get(x[8]) if x[8] else np.zeros(f, np.int32)
    if xs is None or ys is None or xz is None or yz is None or wz is None or np.any(wz) or \
            int(a.get("group", 1)) != 1 or cg != c or 3 * _groups_of_4(c) > c or f % 4 or \
            not all(v.size == 1 or (v.ndim == 1 and v.size == f) for v in (ws, wz)) or \
            bias is None or bias.dtype != np.int32 or bias.shape != (f,) or \
            list(a.get("kernel_shape", [kh, kw])) != [kh, kw]:
        return False
    strides = [int(v) for v in a.get("strides", [1, 1])]
    dil = [int(v) for v in a.get("dilations", [1, 1])]
    pads = _pads(cv, a, 2, [kh, kw], strides, dil, (ih, iw))
    if len(set(strides)) != 1 or len(set(dil)) != 1 or len(set(pads)) != 1:
        return False
    b = bias.astype(np.int64) - int(xz) * w.astype(np.int64).reshape(f, -1).sum(axis=1)
    if np.abs(b).max(initial=0) >= 1 << 31:
        return False
    scale = np.broadcast_to((xs * ws.reshape(-1)).astype(np.float32) / ys, (f,))
    out = node.output[0]
    cv.static[out + "#b"] = b.astype(np.int32)
    cv.static[out + "#scale"] = np.ascontiguousarray(scale, np.float32)
    oh = (ih + 2 * pads[0] - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (iw + 2 * pads[0] - dil[0] * (kw - 1) - 1) // strides[0] + 1
    if oh < 1 or ow < 1:
        return False
    attrs = _attrs(stride=strides[0], padding=pads[0], dilation=dil[0])
    extra = ", ".join(f"{k}={v}" for k, v in (("x_zp", int(xz)), ("y_zp", int(yz)),
                                               ("lo", int(yz) if relu else 0)) if v)
    wt = cv.tensor(x[3])
    if _groups_of_4(c):
        xt, wt = _padded_channels(cv, out, xt, w, int(xz))
    cv.call(out, "qlinear_conv2d", [xt, wt, cv.tensor(out + "#b"),
                                    cv.tensor(out + "#scale")], (n, f, oh, ow),
            ", ".join(t for t in (attrs, extra) if t), dtype="u8")
    return True


# A conv's i32 sum computed by std conv2d in f32 (its tuned schedule; the graph's blocked
# layout) is the same integer when every partial sum is one: the products of two centred
# 8-bit values are integers below 2^16, and a sum of integers whose magnitudes add up to no
# more than 2^24 is exact in f32 in any order (FMA or not). With constant weights the bound
# is known at import: max over filters of sum |w - w_zp| times the largest |x - x_zp| the
# input type allows, plus the largest |bias|.
_F32_EXACT = 1 << 24


def _static_scalar(cv, name, dtypes):
    v = cv.static.get(name) if name else None
    if v is None or v.size != 1 or v.dtype.type not in dtypes:
        return None
    return v.reshape(())


# A sum past `_F32_EXACT` splits its weights: w - w_zp = 16 high + low, low in [-8, 7], so
# that two f32 convolutions of the same centred input, one on each digit, are each exact,
# and the epilogue adds 16 high + low + bias in i32 before it requantizes. Twice the
# products, on a target without an int8 dot product: an int8 ResNet-50's 3x3 layers of 256
# and 512 channels, past the bound, had run as generic integer ops there (111 ms each at
# 256 x 14 x 14 for x86-64-v3 code, one thread).
_SPLIT_WEIGHTS = 16


def _exact_conv(cv, node, a, relu):
    """The constants of a QLinearConv that `_conv_i16` and `_conv_f32_exact` can take (with
    ``relu``, the QDQ pattern's Relu, for `_requantize_sums`), or
    None: 2-D, constant weights, scales and zero points (the weights' per tensor or per
    output channel), a constant bias, one stride and one dilation for both axes, a plain
    or depthwise grouping, a sum within i32. ``wc``: the centred weights (i64)."""
    from .conv import _pads
    x = list(node.input) + [""] * (9 - len(node.input))
    xt = cv.tensors.get(x[0])
    if xt is None or xt.dtype not in ("u8", "i8") or len(xt.shape) != 4 or \
            not all(isinstance(d, (int, np.integer)) for d in xt.shape[1:]):
        return None
    n, c, ih, iw = xt.shape
    xdt = {"u8": np.uint8, "i8": np.int8}[xt.dtype]
    xs, ys = (_static_scalar(cv, k, (np.float32,)) for k in (x[1], x[6]))
    xz = _static_scalar(cv, x[2], (xdt,)) if x[2] else np.zeros((), xdt)
    yz = _static_scalar(cv, x[7], (np.uint8, np.int8)) if x[7] else np.zeros((), np.uint8)
    w, ws = cv.static.get(x[3]), cv.static.get(x[4])
    if xs is None or ys is None or xz is None or yz is None or w is None or ws is None or \
            w.ndim != 4 or w.dtype.type not in (np.int8, np.uint8) or ws.dtype != np.float32:
        return None
    f, cg, kh, kw = w.shape
    wz = cv.static.get(x[5]) if x[5] else np.zeros((), w.dtype)
    if wz is None or wz.dtype != w.dtype or \
            not all(v.size == 1 or (v.ndim == 1 and v.size == f) for v in (ws, wz)):
        return None
    group = int(a.get("group", 1))
    if not (group == 1 and cg == c) and not (group == c == f and cg == 1):
        return None
    if list(a.get("kernel_shape", [kh, kw])) != [kh, kw]:
        return None
    strides = [int(v) for v in a.get("strides", [1, 1])]
    dil = [int(v) for v in a.get("dilations", [1, 1])]
    if len(set(strides)) != 1 or len(set(dil)) != 1:
        return None
    pads = _pads(cv, a, 2, [kh, kw], strides, dil, (ih, iw))
    bias = cv.static.get(x[8]) if x[8] else np.zeros(f, np.int32)
    if bias is None or bias.dtype != np.int32 or bias.shape != (f,):
        return None
    lo_x, hi_x = RANGES[xt.dtype]
    wc = w.astype(np.int64) - wz.astype(np.int64).reshape(-1, 1, 1, 1)
    q = SimpleNamespace(xt=xt, xs=xs, ys=ys, xz=xz, yz=yz, ws=ws, wc=wc, bias=bias, f=f,
                        relu=relu, group=group, stride=strides[0], dilation=dil[0], pads=pads,
                        x_max=max(hi_x - int(xz), int(xz) - lo_x),
                        bias_max=int(np.abs(bias.astype(np.int64)).max(initial=0)))
    hp, wp = ih + pads[0] + pads[2], iw + pads[1] + pads[3]
    oh = (hp - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wp - dil[1] * (kw - 1) - 1) // strides[1] + 1
    if oh < 1 or ow < 1 or _bound(q, wc) + q.bias_max >= 1 << 31:
        return None
    q.shape = (n, f, oh, ow)
    return q


def _bound(q, weights) -> int:
    """The largest magnitude a filter's sum of products can reach (no bias)."""
    return q.x_max * int(np.abs(weights).reshape(q.f, -1).sum(axis=1).max())


def _centred_input(cv, out, q, dtype, channels=None) -> str:
    """The input of `_exact_conv` ``q`` minus its zero point, in ``dtype`` (f32, i16), with
    the padding written as 0 (so the std op runs unpadded; no Winograd, whose transforms
    round), and as many channels past the input's as ``channels`` adds, 0 too: a node
    ``out#xf`` (f32) or ``out#x16``."""
    xt, pads = q.xt, q.pads
    n, c, ih, iw = xt.shape
    channels = channels or c
    hp, wp = ih + pads[0] + pads[2], iw + pads[1] + pads[3]
    subs = [f"h - {pads[0]}" if pads[0] else "h", f"w - {pads[1]}" if pads[1] else "w"]
    conds = [cond for cond in (f"c < {c}" if channels > c else "",
                               f"h >= {pads[0]}" if pads[0] else "",
                               f"h < {ih + pads[0]}" if pads[2] else "",
                               f"w >= {pads[1]}" if pads[1] else "",
                               f"w < {iw + pads[1]}" if pads[3] else "") if cond]
    zero = T.lit(float(q.xz)) if dtype == "f32" else f"{dtype}({int(q.xz)})"
    value = f"{dtype}(X[n, c, {', '.join(subs)}]) - {zero}"
    if conds:
        value = f"select({' and '.join(conds)}, {value}, {dtype}(0))"
    text = (f"op {{name}}(X: {xt.type}) -> Y: {T.ty([n, channels, hp, wp], dtype)} {{\n"
            f"    Y[n, c, h, w] = {value}\n}}\n")
    name = out + ("#xf" if dtype == "f32" else "#x16")
    cv.call(name, cv.op("qconv_input", text), [xt], (n, channels, hp, wp), dtype=dtype)
    return name


def _requantize_sums(cv, out, q, params, args, terms, exact_f32) -> None:
    """The epilogue of an exact convolution's sums ``terms`` (read at ``[n, f, y, x]``):
    the bias added and the requantization as _requantize writes it (f32(acc) *
    (x_scale * w_scale / y_scale) in f32, rounded half to even, plus the zero point,
    saturated), ``relu`` folded into its lower bound. ``exact_f32``: the one term is f32
    and adds the bias exactly in f32, else the terms are i32."""
    scale = (q.xs * q.ws.reshape(-1)).astype(np.float32) / q.ys
    dt = {np.uint8: "u8", np.int8: "i8"}[q.yz.dtype.type]
    lo, hi = RANGES[dt]
    if q.relu:
        lo = max(lo, int(q.yz))
    params, args, terms = list(params), list(args), list(terms)
    if np.any(q.bias):
        cv.static[out + "#bf"] = q.bias.astype(np.float32 if exact_f32 else np.int32)
        bt = cv.tensor(out + "#bf")
        params.append(f"B: {bt.type}")
        args.append(bt)
        terms.append("B[f]")
    acc = " + ".join(terms)
    acc = f"({acc})" if exact_f32 else f"f32({acc})"
    if scale.size == 1:
        factor = T.lit(float(scale.reshape(-1)[0]))
    else:
        cv.static[out + "#scale"] = scale.astype(np.float32)
        st = cv.tensor(out + "#scale")
        params.append(f"S: {st.type}")
        args.append(st)
        factor = "S[f]"
    body = (f"{dt}(min(max(round({acc} * {factor}) + {T.lit(float(q.yz))}, {T.lit(float(lo))}), "
            f"{T.lit(float(hi))}))")
    text = (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(q.shape, dt)} {{\n"
            f"    Y[n, f, y, x] = {body}\n}}\n")
    cv.call(out, cv.op("requantize", text), args, q.shape, dtype=dt)


def _conv_i16(cv, node, a, relu=False) -> bool:
    """QLinearConv as std ``conv2d_i16`` on a target that multiplies pairs of i16 and adds
    them in i32 in one instruction (`Target.has_i16_dot`, x86's vpmaddwd) but has no int8
    dot product (or the int8 route refused): the centred input ``i16(x) - x_zp`` with the
    padding written as 0 and the weights ``w - w_zp`` (both within [-255, 255]) summed in
    i32, exact with no bound but i32's, then the epilogue of `_requantize_sums`. The graph
    runs it blocked (``conv2d_nchwc_i16``: 2 x lanes products an instruction, twice the f32
    FMA's; x86-64-v3, 64 -> 64 channels 3x3 at 56x56: 1.42 ms against 2.13 for the f32
    route on Zen 4). False (nothing emitted) unless `_exact_conv` takes it, ungrouped, with
    filters a multiple of 4 and channels too (the layout's blocks are then pairs) or padded
    to one with at least 3 of each 4 products real (an RGB image: 0 in the input and the
    weights, as `_padded_channels` pads the u8 route's)."""
    q = _exact_conv(cv, node, a, relu) if cv.i16_dot else None
    if q is None or q.group != 1 or q.f % 4 or 3 * _groups_of_4(q.xt.shape[1]) > q.xt.shape[1]:
        return False
    out = node.output[0]
    c = q.xt.shape[1]
    c4 = c + _groups_of_4(c)
    x16 = _centred_input(cv, out, q, "i16", c4)
    cv.static[out + "#w16"] = np.pad(q.wc, ((0, 0), (0, c4 - c), (0, 0), (0, 0))) \
        .astype(np.int16)
    from .conv import _attrs
    cv.call(out + "#acc", "conv2d_i16", [cv.tensors[x16], cv.tensor(out + "#w16")], q.shape,
            _attrs(stride=q.stride, dilation=q.dilation), dtype="i32")
    _requantize_sums(cv, out, q, [f"X: {T.ty(q.shape, 'i32')}"], [cv.tensors[out + "#acc"]],
                     ["X[n, f, y, x]"], exact_f32=False)
    return True


def _conv_f32_exact(cv, node, a, relu=False) -> bool:
    """QLinearConv as std ``conv2d`` / ``depthwise_conv2d`` on the centred input in f32
    (`_centred_input`), bit-exact with the integer op (see ``_F32_EXACT``): the weights
    ``f32(w - w_zp)`` are computed now (in two digits past the bound,
    `_SPLIT_WEIGHTS`), and `_requantize_sums` adds the bias and requantizes. False
    (nothing emitted) where `_exact_conv` does not take it or past the bound in two digits."""
    q = _exact_conv(cv, node, a, relu)
    if q is None:
        return False
    parts = ((1, q.wc),)
    if _bound(q, q.wc) + q.bias_max > _F32_EXACT:
        # past the bound, the weights in two digits of base 16 (`_SPLIT_WEIGHTS`): int8's
        # within [-8, 8] each, so each sum is exact in f32 for up to 8,000 taps of 255
        half = _SPLIT_WEIGHTS // 2
        low = (q.wc + half) % _SPLIT_WEIGHTS - half
        parts = ((_SPLIT_WEIGHTS, (q.wc - low) // _SPLIT_WEIGHTS), (1, low))
        if max(_bound(q, p) for _, p in parts) > _F32_EXACT:
            return False
    out = node.output[0]
    xf = _centred_input(cv, out, q, "f32")
    from .conv import _attrs
    params, args, terms = [], [], []
    for k, (digit, weights) in enumerate(parts):
        tag = str(k) if len(parts) > 1 else ""         # one sum keeps the plain names
        cv.static[out + f"#wf{tag}"] = weights.astype(np.float32)
        cv.call(out + f"#acc{tag}", "conv2d" if q.group == 1 else "depthwise_conv2d",
                [cv.tensors[xf], cv.tensor(out + f"#wf{tag}")], q.shape,
                _attrs(stride=q.stride, dilation=q.dilation))
        params.append(f"X{tag}: {T.ty(q.shape, 'f32')}")
        args.append(cv.tensors[out + f"#acc{tag}"])
        terms.append(f"X{tag}[n, f, y, x]" if len(parts) == 1 else
                     f"i32(X{tag}[n, f, y, x])" + (f" * {digit}" if digit != 1 else ""))
    _requantize_sums(cv, out, q, params, args, terms, exact_f32=len(parts) == 1)
    return True
