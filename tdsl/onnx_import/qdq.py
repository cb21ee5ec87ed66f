"""The QDQ pattern (what onnxruntime's ``quantize_static(quant_format=QDQ)`` writes):

    DequantizeLinear(x_q) ─┐
    DequantizeLinear(w_q) ─┼─> Conv | Gemm | MatMul  [-> Relu]  -> QuantizeLinear -> y_q
    DequantizeLinear(b_q) ─┘      (float)

is compiled as the integer operator onnxruntime runs for it (QLinearConv, QGemm,
QLinearMatMul): products of the integers, less their zero points, summed in i32 with the
i32 bias, requantized as `quantized` does (MLAS: ``f32(acc) * (x_scale * w_scale /
y_scale)`` rounded half to even, plus the zero point, saturated); a Relu between the op and
its QuantizeLinear is ``max(y, y_zero_point)``, which is exactly quantize(relu(v)). The
float graph computes the same up to its float rounding; the integer one is bit-exact with
onnxruntime, which fuses the same pattern. A Conv runs as `quantized.qlinear_conv` routes
it: by the int8 dot product (VNNI), by the i16 one on other x86 CPUs (std conv2d_i16 on the
centred values), or, where the integer sum f32 holds exactly (the bound
`quantized._conv_f32_exact` checks on the constant weights), as std conv2d on the centred
values (past the bound, as two, one per base-16 digit of the weights:
`quantized._SPLIT_WEIGHTS`), with the requantization (and the Relu) as its epilogue: the
tuned schedule and the blocked layout, the same integers.

Recognised when: x's scale and zero point are per tensor; the weights are constants (int8
or uint8) per tensor or per output channel; the bias (if any) is a constant int32 whose
scale is x_scale * w_scale and zero point 0; the float op's output (and the Relu's) has one
reader, the QuantizeLinear, with a per-tensor scale and zero point; Gemm has alpha = beta =
1 and no transA; MatMul's B is 2-D. Anything else keeps the float route, exactly as ONNX
defines it. A DequantizeLinear whose readers are all fused is not emitted; one of a
constant is computed at import.

DequantizeLinear -> MaxPool | Flatten | Reshape | Transpose | Squeeze | Unsqueeze ->
QuantizeLinear of one per-tensor scale and zero point is that op on the integers (exact:
quantize(dequantize(q)) is q, and dequantize is increasing).

Registration: this module wraps the converters of DequantizeLinear, QuantizeLinear, Conv,
Gemm, MatMul, Relu and the moves above in `registry.CONVERTERS` (their families stay
theirs), so it is imported after them.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from . import conv as _conv, elementwise as _elementwise, linalg as _linalg  # noqa: F401
from . import quantized as Q
from . import templates as T
from .registry import CONVERTERS, opt

_INT8 = (np.int8, np.uint8)


def _state(cv):
    """Per-converter bookkeeping: producers and readers of each value, deferred
    DequantizeLinear nodes, the nodes already computed by a fusion."""
    st = getattr(cv, "_qdq_state", None)
    if st is None or st["graph"] is not cv.graph:
        prod, readers = {}, {}
        for n in cv.graph.node:
            for o in n.output:
                prod[o] = n
            for i in n.input:
                readers.setdefault(i, []).append(n)
        st = {"graph": cv.graph, "prod": prod, "readers": readers,
              "outputs": {o.name for o in cv.graph.output}, "deferred": {}, "done": set()}
        cv._qdq_state = st
    return st


def _attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _static(cv, name):
    return cv.static.get(name) if name else None


def _sole_reader(st, name, op_type):
    r = st["readers"].get(name, [])
    if name in st["outputs"] or len(r) != 1 or r[0].op_type != op_type:
        return None
    return r[0]


def _scalar(a, dtypes):
    return a is not None and a.size == 1 and a.dtype.type in dtypes


def _dq_of(cv, st, name):
    """The DequantizeLinear producing ``name`` as (q, scale, zero point names, attrs)."""
    n = st["prod"].get(name)
    if n is None or n.op_type != "DequantizeLinear":
        return None
    a = _attrs(n)
    if int(a.get("block_size", 0)) or "output_dtype" in a:
        return None
    return SimpleNamespace(q=n.input[0], s=n.input[1], z=opt(n, 2), axis=a.get("axis", 1),
                           node=n)


def _per_channel_ok(cv, dq, rank, axis, channels):
    """w's scale and zero point per tensor, or 1-D of ``channels`` along ``axis``."""
    s, z = _static(cv, dq.s), _static(cv, dq.z)
    if s is None or s.dtype != np.float32 or (dq.z and z is None):
        return False
    for v in (s, z) if z is not None else (s,):
        if v.size == 1:
            continue
        if v.ndim != 1 or v.size != channels or dq.axis % rank != axis:
            return False
    return True


def _match(cv, node):
    """The fusion of a Conv / Gemm / MatMul node, or None."""
    st = _state(cv)
    if node.op_type not in ("Conv", "Gemm", "MatMul") or node.domain not in ("", "ai.onnx"):
        return None
    out = node.output[0]
    relu = _sole_reader(st, out, "Relu")
    q = _sole_reader(st, relu.output[0] if relu else out, "QuantizeLinear")
    if q is None:
        return None
    qa = _attrs(q)
    ys, yz = _static(cv, q.input[1]), _static(cv, opt(q, 2))
    if int(qa.get("block_size", 0)) or "output_dtype" in qa or not _scalar(ys, (np.float32,)) \
            or not _scalar(yz, _INT8):
        return None
    x, w = _dq_of(cv, st, node.input[0]), _dq_of(cv, st, node.input[1])
    if x is None or w is None:
        return None
    xs, xz = _static(cv, x.s), _static(cv, x.z)
    if not _scalar(xs, (np.float32,)) or (x.z and not _scalar(xz, _INT8)):
        return None
    if x.q in cv.static:
        xdt = cv.static[x.q].dtype.type
    elif x.q in cv.tensors:
        xdt = {"i8": np.int8, "u8": np.uint8}.get(cv.tensors[x.q].dtype)
    elif xz is not None:             # not computed yet (a lookahead): its zero point's type
        xdt = xz.dtype.type
    else:
        return None
    if xdt not in _INT8 or (xz is not None and xz.dtype.type != xdt):
        return None
    wq = _static(cv, w.q)
    if wq is None or wq.dtype.type not in _INT8:
        return None
    a = _attrs(node)
    if node.op_type == "Conv":
        if wq.ndim < 3 or not _per_channel_ok(cv, w, wq.ndim, 0, wq.shape[0]):
            return None
        channels, bias_at = wq.shape[0], 2
    elif node.op_type == "Gemm":
        if float(a.get("alpha", 1.0)) != 1.0 or float(a.get("beta", 1.0)) != 1.0 or \
                int(a.get("transA", 0)) or wq.ndim != 2:
            return None
        tb = int(a.get("transB", 0))
        channels = wq.shape[0 if tb else 1]
        if not _per_channel_ok(cv, w, 2, 0 if tb else 1, channels):
            return None
        bias_at = 2
    else:
        if wq.ndim != 2 or not _per_channel_ok(cv, w, 2, 1, wq.shape[1]):
            return None
        channels, bias_at = wq.shape[1], None
    bias = None
    if bias_at is not None and opt(node, bias_at):
        b = _dq_of(cv, st, node.input[bias_at])
        if b is None:
            return None
        bq, bs, bz = _static(cv, b.q), _static(cv, b.s), _static(cv, b.z)
        if bq is None or bq.dtype != np.int32 or bq.ndim != 1 or bq.size != channels or \
                bs is None or (bz is not None and np.any(bz != 0)) or (b.z and bz is None):
            return None
        want = (xs.reshape(-1)[0] * _static(cv, w.s).astype(np.float32)).astype(np.float32)
        if not np.allclose(np.broadcast_to(bs.reshape(-1), (channels,)),
                           np.broadcast_to(want.reshape(-1), (channels,)), rtol=1e-6, atol=0):
            return None
        bias = b
    return SimpleNamespace(node=node, x=x, w=w, bias=bias, relu=relu, q=q, attrs=a)


# operators that move or select values: on the integers of one scale and zero point they
# are what they are on the dequantized floats, and quantize(dequantize(q)) is q
_MOVES = ("MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze")


def _match_move(cv, node):
    """DequantizeLinear -> MaxPool | Flatten | Reshape ... -> QuantizeLinear of the same
    per-tensor scale and zero point (what quantize_static writes around them): the op on
    the integers. None if not."""
    st = _state(cv)
    if node.op_type not in _MOVES or node.domain not in ("", "ai.onnx") or \
            len(node.output) != 1:
        return None
    x = _dq_of(cv, st, node.input[0])
    q = _sole_reader(st, node.output[0], "QuantizeLinear")
    if x is None or q is None or not x.z or not opt(q, 2):
        return None
    qa = _attrs(q)
    if int(qa.get("block_size", 0)) or "output_dtype" in qa:
        return None
    xs, xz, ys, yz = (_static(cv, n) for n in (x.s, x.z, q.input[1], q.input[2]))
    if not (_scalar(xs, (np.float32,)) and _scalar(ys, (np.float32,)) and
            _scalar(xz, _INT8) and _scalar(yz, _INT8)) or xz.dtype != yz.dtype or \
            xs.reshape(-1)[0] != ys.reshape(-1)[0] or not xs.reshape(-1)[0] > 0 or \
            xz.reshape(-1)[0] != yz.reshape(-1)[0]:
        return None
    if x.q in cv.tensors and cv.tensors[x.q].dtype != {np.int8: "i8", np.uint8: "u8"}[
            xz.dtype.type]:
        return None
    return SimpleNamespace(node=node, x=x, q=q, move=True)


def _fusable(cv, node):
    return _match(cv, node) is not None or _match_move(cv, node) is not None


def _materialize(cv, names):
    """Emit the deferred DequantizeLinear nodes among ``names`` (a fusion not taken)."""
    st = _state(cv)
    for n in names:
        dq = st["deferred"].pop(n, None)
        if dq is not None:
            keep = cv.node
            cv.node = dq
            if not _fold_dequantize(cv, dq, _attrs(dq)):
                _dequantize(cv, _node_with_vectors(cv, dq), _attrs(dq))
            cv.node = keep


def _vector(cv, name):
    """A rank-0 constant as one of shape [1] (c-embedded passes a rank-0 weight to a
    kernel as its array, where the kernel takes a value: a [1] one is read as an array)."""
    a = cv.static.get(name) if name else None
    if a is None or a.ndim:
        return name
    cv.static.setdefault(name + "#1", a.reshape(1))
    return name + "#1"


def _node_with_vectors(cv, node):
    return SimpleNamespace(input=[node.input[0]] + [_vector(cv, n) for n in node.input[1:]],
                           output=list(node.output), name=node.name, op_type=node.op_type)


def _emit(cv, m):
    node, x, w, q = m.node, m.x, m.w, m.q
    x = SimpleNamespace(q=x.q, s=_vector(cv, x.s), z=_vector(cv, x.z))
    w = SimpleNamespace(q=w.q, s=_vector(cv, w.s), z=_vector(cv, w.z))
    q = SimpleNamespace(input=[q.input[0]] + [_vector(cv, n) for n in q.input[1:]],
                        output=q.output)
    yq = q.output[0]
    out = yq + "#int" if m.relu else yq
    wz = w.z or None
    if node.op_type == "Conv":
        inputs = [x.q, x.s, x.z or "", w.q, w.s, w.z or "", q.input[1], q.input[2]]
        if m.bias is not None:
            inputs.append(m.bias.q)
        Q.qlinear_conv(cv, SimpleNamespace(input=inputs, output=[yq]), m.attrs,
                       relu=bool(m.relu))
        _state(cv)["done"].update(id(n) for n in (m.relu, m.q) if n is not None)
        return
    else:
        b = w.q
        if node.op_type == "Gemm" and int(m.attrs.get("transB", 0)):
            b = w.q + "#T"
            cv.static[b] = np.ascontiguousarray(cv.static[w.q].T)
        params, args, acc, shape, i = Q._matmul_parts(cv, node, x.q, b, x.z or None, wz)
        # Acc is the sum alone, the bias added where it is requantized: a stage that is one
        # reduction gets the default schedule's matmul loop order (k outside, the columns
        # vectorized inside); `sum + Bias` inside Acc left a lane loop over strided columns
        # of B (ResNet-50's int8 classifier: 1.35 ms)
        summed = T.at("Acc", i)
        if m.bias is not None:
            bt = cv.tensor(m.bias.q)
            params.append(f"Bias: {bt.type}")
            args.append(bt)
            summed = f"({summed} + Bias[{i[-1]}])"

        def per_column(s):
            return "" if not s else "[0]" if int(np.prod(s)) == 1 else f"[{i[-1]}]"
        rq_params, rq_args, body, dt = Q._requantize(
            cv, summed, [("AS", x.s, Q._scalar_sub), ("BS", w.s, per_column),
                                 ("YS", q.input[1], Q._scalar_sub)], q.input[2])
        text = (f"op {{name}}({', '.join(params + rq_params)}) -> Y: {T.ty(shape, dt)} {{\n"
                f"    Acc: {T.ty(shape, 'i32')}\n    {T.at('Acc', i)} = {acc}\n"
                f"    {T.at('Y', i)} = {body}\n}}\n")
        cv.call(out, cv.op("qdq_matmul", text), args + rq_args, shape, dtype=dt)
    if m.relu:
        cv.elementwise(yq, [out, q.input[2]], "max({0}, {1})", "qdq_relu")
    st = _state(cv)
    st["done"].update(id(n) for n in (m.relu, m.q) if n is not None)


_dequantize = CONVERTERS["DequantizeLinear"]
_quantize = CONVERTERS["QuantizeLinear"]


def _fold_dequantize(cv, node, a):
    """DequantizeLinear of constants, computed now as ONNX's reference does (f32)."""
    x, s, z = _static(cv, node.input[0]), _static(cv, node.input[1]), \
        _static(cv, opt(node, 2))
    if x is None or s is None or (opt(node, 2) and z is None) or s.dtype != np.float32 or \
            int(a.get("block_size", 0)) or "output_dtype" in a or \
            x.dtype.type not in (np.int8, np.uint8, np.int16, np.int32) or \
            (z is not None and z.size != s.size):
        return False
    if s.size == 1 or s.ndim == 0:
        shape = ()
    elif s.ndim == 1 and x.ndim:
        axis = int(a.get("axis", 1)) % x.ndim
        if x.shape[axis] != s.size:
            return False
        shape = [1] * x.ndim
        shape[axis] = s.size
    else:
        return False
    v = x.astype(np.float32)
    if z is not None:
        v = v - z.astype(np.float32).reshape(shape)
    cv.static[node.output[0]] = (v * s.reshape(shape)).astype(np.float32)
    return True


def _dequantize_qdq(cv, node, a):
    st = _state(cv)
    out = node.output[0]
    readers = st["readers"].get(out, [])
    if readers and out not in st["outputs"] and \
            all(_fusable(cv, r) for r in readers):
        st["deferred"][out] = node          # read only by fused ops: not emitted
        return
    if not _fold_dequantize(cv, node, a):
        _dequantize(cv, _node_with_vectors(cv, node), a)


def _quantize_qdq(cv, node, a):
    if id(node) in _state(cv)["done"]:
        return                              # computed by a fusion
    _materialize(cv, node.input)
    _quantize(cv, _node_with_vectors(cv, node), a)


def _wrap_float(fn):
    def convert(cv, node, a):
        m = _match(cv, node)
        if m is not None:
            _emit(cv, m)
            return
        _materialize(cv, node.input)
        fn(cv, node, a)
    convert.__wrapped__ = fn
    return convert


def _wrap_move(fn):
    def convert(cv, node, a):
        m = _match_move(cv, node)
        if m is None:
            _materialize(cv, node.input)
            return fn(cv, node, a)
        _materialize(cv, node.input[1:])
        fn(cv, SimpleNamespace(input=[m.x.q, *node.input[1:]], output=[m.q.output[0]],
                               name=node.name, op_type=node.op_type, domain=node.domain,
                               attribute=node.attribute), a)
        _state(cv)["done"].add(id(m.q))
    convert.__wrapped__ = fn
    return convert


def _wrap_done(fn):
    def convert(cv, node, a):
        if id(node) in _state(cv)["done"]:
            return                          # computed by a fusion
        _materialize(cv, node.input)
        fn(cv, node, a)
    convert.__wrapped__ = fn
    return convert


CONVERTERS["DequantizeLinear"] = _dequantize_qdq
CONVERTERS["QuantizeLinear"] = _quantize_qdq
for _op in ("Conv", "Gemm", "MatMul"):
    CONVERTERS[_op] = _wrap_float(CONVERTERS[_op])
CONVERTERS["Relu"] = _wrap_done(CONVERTERS["Relu"])
for _op in _MOVES:
    CONVERTERS[_op] = _wrap_move(CONVERTERS[_op])
