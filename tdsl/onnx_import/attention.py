"""Converters of the attention: the Attention operator (opset 23+) and RotaryEmbedding, each
one op of stages written for its node's shapes.

Attention follows onnx.reference's op_attention: 3-D inputs ``[B, S, heads * D]`` are read
as ``[B, heads, S, D]`` through their subscripts (no reshape, no transpose); the KV cache is
``concat(past, new)`` on the sequence axis; GQA reads kv head ``h // (Hq / Hkv)``; the
additive bias is the mask (bool: attend or -inf; float: added; padded past its length with
-inf), the causal and sliding-window frontiers (offset by the past length, or by
``nonpad_kv_seqlen[b] - Sq``) and the padding of ``nonpad_kv_seqlen``; the softmax subtracts
the row maximum, and a row whose bias is all -inf gives zeros.
"""
from __future__ import annotations

import re

import numpy as np

from . import templates as T
from .convert import Tensor
from .elementwise import storage_via_f32
from .registry import converter, opt as _opt

NEG = "-inf"


def _call_multi(cv, outs, func: str, args) -> None:
    """``o1, o2 = func(args)`` in the graph body; ``outs`` are (ONNX name, shape, dtype).
    (`Converter.call` names one output; this is the same for several.)"""
    ts = [Tensor(cv.fresh(o), shape, dtype) for o, shape, dtype in outs]
    cv.lines.append(f"    {', '.join(t.name for t in ts)} = "
                    f"{func}({', '.join(a.name for a in args)})")
    for (o, _, _), t in zip(outs, ts):
        cv.tensors[o] = t


def _float_dtype(cv, t: Tensor, what: str) -> str:
    if t.dtype not in ("f32", "f64"):
        raise cv.error(f"{what} is {t.dtype}; Attention is supported on f32 and f64")
    return t.dtype


_PRECISION = {1: "f32", 11: "f64"}


@converter("Attention", attrs=("is_causal", "kv_num_heads", "q_num_heads",
                               "qk_matmul_output_mode", "scale", "softcap",
                               "softmax_precision", "left_window_size", "right_window_size"))
@storage_via_f32
def attention(cv, node, a):
    q_t, k_t, v_t = (cv.tensor(n) for n in node.input[:3])
    dt = _float_dtype(cv, q_t, "Q")
    for t, w in ((k_t, "K"), (v_t, "V")):
        if t.dtype != dt:
            raise cv.error(f"{w} is {t.dtype} and Q {dt} (they must agree)")
    rank = len(q_t.shape)
    if rank not in (3, 4) or len(k_t.shape) != rank or len(v_t.shape) != rank:
        raise cv.error(f"Q, K, V of ranks {len(q_t.shape)}, {len(k_t.shape)}, "
                       f"{len(v_t.shape)} (they must all be 3-D or all 4-D)")
    if rank == 3:
        if "q_num_heads" not in a or "kv_num_heads" not in a:
            raise cv.error("3-D inputs need the q_num_heads and kv_num_heads attributes")
        hq, hkv = int(a["q_num_heads"]), int(a["kv_num_heads"])
        if hq <= 0 or hkv <= 0 or q_t.shape[2] % hq or k_t.shape[2] % hkv or \
                v_t.shape[2] % hkv:
            raise cv.error(f"hidden sizes {q_t.shape[2]}, {k_t.shape[2]}, {v_t.shape[2]} "
                           f"don't divide into {hq} and {hkv} heads")
        bsz, sq, d = q_t.shape[0], q_t.shape[1], q_t.shape[2] // hq
        skv, dk, dv = k_t.shape[1], k_t.shape[2] // hkv, v_t.shape[2] // hkv
    else:
        bsz, hq, sq, d = q_t.shape
        _, hkv, skv, dk = k_t.shape
        dv = v_t.shape[3]
    if dk != d or k_t.shape[0] != bsz or v_t.shape[0] != bsz or \
            (v_t.shape[1] if rank == 3 else v_t.shape[2]) != skv or \
            (rank == 4 and v_t.shape[1] != hkv):
        raise cv.error(f"Q {list(q_t.shape)}, K {list(k_t.shape)}, V {list(v_t.shape)} "
                       f"don't fit one attention")
    if hq % hkv:
        raise cv.error(f"{hq} query heads can't share {hkv} kv heads")
    rep = hq // hkv

    mask_n, pk_n, pv_n, np_n = (_opt(node, k) for k in (3, 4, 5, 6))
    if (pk_n is None) != (pv_n is None):
        raise cv.error("past_key and past_value must be given together")
    if np_n and pk_n:
        raise cv.error("nonpad_kv_seqlen with past_key/past_value")
    outs = list(node.output) + [""] * (4 - len(node.output))
    want_pk, want_pv, want_qk = bool(outs[1]), bool(outs[2]), bool(outs[3])
    mode = int(a.get("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise cv.error(f"qk_matmul_output_mode {mode}")
    sd = dt
    if a.get("softmax_precision") is not None:
        p = int(a["softmax_precision"])
        if p not in _PRECISION:
            raise cv.error(f"softmax_precision {p} (float and double are supported)")
        sd = _PRECISION[p]
    is_causal = bool(a.get("is_causal", 0))
    left, right = int(a.get("left_window_size", -1)), int(a.get("right_window_size", -1))
    softcap = a.get("softcap")
    softcap = float(softcap) if softcap is not None and float(softcap) > 0 else None
    scale = a.get("scale")
    scale = 1 / np.sqrt(d) if scale is None else float(scale)
    s = float(np.asarray(np.sqrt(scale), dtype=np.float32 if dt == "f32" else np.float64))
    scale_lit = T.lit(s * s, dt)

    params = [f"Q: {q_t.type}", f"K: {k_t.type}", f"V: {v_t.type}"]
    args = [q_t, k_t, v_t]
    past = 0
    mask = None
    if mask_n:
        mask = cv.tensor(mask_n)
        if mask.dtype not in ("bool", dt):
            raise cv.error(f"attn_mask is {mask.dtype}; it must be bool or {dt} as Q")
        if not 1 <= len(mask.shape) <= 4:
            raise cv.error(f"attn_mask of rank {len(mask.shape)}")
        params.append(f"M: {mask.type}")
        args.append(mask)
    if pk_n:
        pk_t, pv_t = cv.tensor(pk_n), cv.tensor(pv_n)
        if pk_t.dtype != dt or pv_t.dtype != dt or len(pk_t.shape) != 4 or \
                len(pv_t.shape) != 4 or pk_t.shape[:2] != (bsz, hkv) or \
                pv_t.shape[:2] != (bsz, hkv) or pk_t.shape[3] != dk or \
                pv_t.shape[3] != dv or pk_t.shape[2] != pv_t.shape[2]:
            raise cv.error(f"past_key {list(pk_t.shape)} / past_value {list(pv_t.shape)} "
                           f"don't fit K and V")
        past = pk_t.shape[2]
        params += [f"PK: {pk_t.type}", f"PV: {pv_t.type}"]
        args += [pk_t, pv_t]
    if np_n:
        np_t = cv.tensor(np_n)
        if np_t.dtype not in ("i64", "i32") or np_t.shape != (bsz,):
            raise cv.error(f"nonpad_kv_seqlen of {np_t.type} (it must be i64[{bsz}])")
        params.append(f"NP: {np_t.type}")
        args.append(np_t)
    L = past + skv

    # the op's outputs, and its stages
    results = [("Y", (bsz, sq, hq * dv) if rank == 3 else (bsz, hq, sq, dv), dt, outs[0])]
    stages = []

    def new(name, b, h, s_, x, hd):         # K or V of the node, as [B, H, S, D]
        return f"{name}[{b}, {s_}, {h} * {hd} + {x}]" if rank == 3 else \
            f"{name}[{b}, {h}, {s_}, {x}]"

    def cache(out_name, src, past_name, hd, want, onnx_out):
        if not (past or want):
            return lambda b, h, l_, x: new(src, b, h, l_, x, hd)
        shape = (bsz, hkv, L, hd)
        body = new(src, "b", "h", "l" if not past else f"l - {past}", "x", hd)
        if past:
            body = f"select(l < {past}, {past_name}[b, h, l, x], {body})"
        if want:
            results.append((out_name, shape, dt, onnx_out))
        else:
            stages.append(f"    {out_name}: {T.ty(shape, dt)}")
        stages.append(f"    {out_name}[b, h, l, x] = {body}")
        return lambda b, h, l_, x: f"{out_name}[{b}, {h}, {l_}, {x}]"

    kread = cache("PKo", "K", "PK", dk, want_pk, outs[1])
    vread = cache("PVo", "V", "PV", dv, want_pv, outs[2])

    # the additive bias: which of b, h, q it depends on, and its value at [b, h, q, l]
    m4 = (1,) * (4 - len(mask.shape)) + tuple(mask.shape) if mask is not None else None
    if m4 is not None:
        if m4[-1] > L or m4[0] not in (1, bsz) or m4[1] not in (1, hq) or \
                m4[2] not in (1, sq):
            raise cv.error(f"attn_mask {list(mask.shape)} doesn't broadcast to "
                           f"[{bsz}, {hq}, {sq}, {L}]")
    window = left >= 0 or right >= 0
    offset = str(past) if not np_n else f"i64(NP[b]) - {sq}"
    conds, float_terms = [], []
    dep = [False, False, False]
    if m4 is not None:
        dep = [m4[0] > 1, m4[1] > 1, m4[2] > 1]
        subs = ["0" if n == 1 else v for n, v in zip(m4[:3], "bhq")][4 - len(mask.shape):]
        load = T.at("M", subs + ["l"])
        inside = f"l < {m4[-1]}" if m4[-1] < L else None
        if mask.dtype == "bool":
            conds.append(load if inside is None else f"({inside} and {load})")
        else:
            float_terms.append(load if inside is None else f"select({inside}, {load}, {NEG})")
    if is_causal:
        conds.append(f"l <= q + {offset}" if offset != "0" else "l <= q")
        dep[2] = True
        dep[0] = dep[0] or bool(np_n)
    if window:
        pos = f"(q + {offset})" if offset != "0" else "q"
        if left >= 0:
            conds.append(f"{pos} - l <= {left}")
        if right >= 0:
            conds.append(f"l - {pos} <= {right}")
        dep[2] = True
        dep[0] = dep[0] or bool(np_n)
    if np_n:
        conds.append("l < i64(NP[b])")
        dep[0] = True
    has_bias = bool(conds or float_terms)
    bias_at = "0.0"
    if has_bias:
        terms = list(float_terms)
        if conds:
            terms.append(f"select({' and '.join(conds)}, 0.0, {NEG})")
        bshape = [bsz if dep[0] else 1, hq if dep[1] else 1, sq if dep[2] else 1, L]
        stages.append(f"    Bs: {T.ty(bshape, dt)}")
        stages.append(f"    Bs[b, h, q, l] = {' + '.join(terms)}")
        bsub = ["b" if dep[0] else "0", "h" if dep[1] else "0", "q" if dep[2] else "0"]
        bias_at = f"Bs[{', '.join(bsub)}, l]"
        stages.append(f"    RM: {T.ty(bshape[:3], dt)}")
        stages.append(f"    RM[b, h, q] = max[l: {L}](Bs[b, h, q, l])")
        masked_row = f"RM[{', '.join(bsub)}] == {NEG}"

    # scores: Q K^T scaled (and soft-capped), then the bias added
    qk_shape = (bsz, hq, sq, L)
    kh = "h" if rep == 1 else f"h // {rep}"
    dot = f"sum[x: {d}]({new('Q', 'b', 'h', 'q', 'x', d)} * {kread('b', kh, 'l', 'x')})"
    score = f"{dot} * {scale_lit}"
    if softcap is not None:
        c = T.lit(softcap, dt)
        score = f"{c} * tanh({dot} * {T.lit(s * s / softcap, dt)})"
    qk_out = want_qk and mode in (0, 1)
    qk_bias_out = want_qk and mode == 2
    if qk_out:                          # the scores are an output: a stage of their own
        results.append(("QK", qk_shape, dt, outs[3]))
        stages.append(f"    QK[b, h, q, l] = {score}")
        score = "QK[b, h, q, l]"
    logit = score + (f" + {bias_at}" if has_bias else "")
    if qk_bias_out:
        results.append(("QB", qk_shape, dt, outs[3]))
        stages.append(f"    QB[b, h, q, l] = {logit}")
        logit = "QB[b, h, q, l]"
    if sd != dt:
        logit = f"{sd}({logit})"
    stages.append(f"    Lg: {T.ty(qk_shape, sd)}")
    stages.append(f"    Lg[b, h, q, l] = {logit}")
    # softmax: the row maximum subtracted (0 for a row of -inf), an empty sum read as 1
    stages.append(f"    Mx: {T.ty(qk_shape[:3], sd)}")
    stages.append(f"    Mx[b, h, q] = max[l: {L}](Lg[b, h, q, l])")
    stages.append(f"    E: {T.ty(qk_shape, sd)}")
    stages.append(f"    E[b, h, q, l] = exp(Lg[b, h, q, l] - select(Mx[b, h, q] == {NEG}, "
                  f"0.0, Mx[b, h, q]))")
    stages.append(f"    Sm: {T.ty(qk_shape[:3], sd)}")
    stages.append(f"    Sm[b, h, q] = sum[l: {L}](E[b, h, q, l])")
    prob = "E[b, h, q, l] / select(Sm[b, h, q] == 0.0, 1.0, Sm[b, h, q])"
    if has_bias:
        prob = f"select({masked_row}, 0.0, {prob})"
    if sd != dt:
        prob = f"{dt}({prob})"
    if want_qk and mode == 3:
        results.append(("P", qk_shape, dt, outs[3]))
    else:
        stages.append(f"    P: {T.ty(qk_shape, dt)}")
    stages.append(f"    P[b, h, q, l] = {prob}")
    if rank == 3:
        hh = f"c // {dv}"
        vh = hh if rep == 1 else f"c // {dv * rep}"
        stages.append(f"    Y[b, q, c] = sum[l: {L}](P[b, {hh}, q, l] * "
                      f"{vread('b', vh, 'l', f'c % {dv}')})")
    else:
        stages.append(f"    Y[b, h, q, x] = sum[l: {L}](P[b, h, q, l] * "
                      f"{vread('b', kh, 'l', 'x')})")
    rs = [r for r in results if r[3]]
    head = (f"op {{name}}({', '.join(params)}) -> "
            f"({', '.join(f'{n}: {T.ty(shape, t)}' for n, shape, t, _ in rs)}) {{\n")
    text = head + "\n".join(stages) + "\n}\n"
    _call_multi(cv, [(o, shape, t) for _, shape, t, o in rs], cv.op("attention", text),
                args)


@converter("RotaryEmbedding", attrs=("interleaved", "rotary_embedding_dim", "num_heads"))
def rotary_embedding(cv, node, a):
    x = cv.tensor(node.input[0])
    cos, sin = cv.tensor(node.input[1]), cv.tensor(node.input[2])
    pos_n = _opt(node, 3)
    dt = x.dtype
    if dt not in ("f32", "f64") or cos.dtype != dt or sin.dtype != dt:
        raise cv.error(f"input {dt}, caches {cos.dtype}/{sin.dtype}: RotaryEmbedding is "
                       f"supported on f32 and f64, all alike")
    if len(x.shape) == 4:
        bsz, heads, seq, hd = x.shape
        at = lambda b, s_, h, dd: f"X[{b}, {h}, {s_}, {dd}]"   # noqa: E731
        lhs = "Y[b, h, s, d]"
    elif len(x.shape) == 3:
        heads = int(a.get("num_heads", 0))
        bsz, seq, hidden = x.shape
        if heads <= 0 or hidden % heads:
            raise cv.error(f"a 3-D input needs num_heads dividing its hidden size {hidden}")
        hd = hidden // heads
        at = lhs = None
    else:
        raise cv.error(f"an input of rank {len(x.shape)} (3-D or 4-D)")
    rd = int(a.get("rotary_embedding_dim", 0)) or hd
    if rd % 2 or rd > hd:
        raise cv.error(f"rotary_embedding_dim {rd} for heads of size {hd}")
    half = rd // 2
    params = [f"X: {x.type}", f"C: {cos.type}", f"S: {sin.type}"]
    args = [x, cos, sin]
    if pos_n:
        p = cv.tensor(pos_n)
        if p.dtype not in ("i64", "i32") or p.shape != (bsz, seq) or len(cos.shape) != 2 \
                or cos.shape != sin.shape or cos.shape[1] != half:
            raise cv.error(f"position_ids {p.type} with caches {cos.type}/{sin.type} (it "
                           f"must be [{bsz}, {seq}] with caches [positions, {half}])")
        params.append(f"I: {p.type}")
        args.append(p)
        row = "I[b, s]"
        cs = lambda t, k: f"{t}[{row}, {k}]"    # noqa: E731
    else:
        if cos.shape != (bsz, seq, half) or sin.shape != cos.shape:
            raise cv.error(f"caches {cos.type}/{sin.type} without position_ids (they must "
                           f"be [{bsz}, {seq}, {half}])")
        cs = lambda t, k: f"{t}[b, s, {k}]"     # noqa: E731
    il = a.get("interleaved", 0)
    if lhs:
        stage = f"    {lhs} = " + _rot_body(at, cs, half, rd, hd, il, "d")
    else:                   # 3-D: [B, S, heads * hd], the column c is head * hd + d
        at3 = lambda b, s_, h, dd: f"X[{b}, {s_}, c // {hd} * {hd} + {dd}]"   # noqa: E731
        stage = "    Y[b, s, c] = " + _rot_body(at3, cs, half, rd, hd, il, f"(c % {hd})")
    text = (f"op {{name}}({', '.join(params)}) -> Y: {x.type} {{\n{stage}\n}}\n")
    cv.call(node.output[0], cv.op("rotary", text), args, x.shape, dtype=dt)


def _rot_body(at, cs, half, rd, hd, interleaved, d):
    """The rotated element ``d`` of a head (``at`` reads the head's element): its pair in
    the halves (or the interleaved pairs) turned by the cache's angle ``k``; elements past
    ``rd`` unchanged. Subscripts stay in bounds for every ``d`` (% rather than a select,
    since reads are bounded over both sides of one)."""
    if interleaved:
        k = f"{d} // 2" if rd == hd else f"{d} // 2 % {half}"
        x1, x2 = at("b", "s", "h", f"{k} * 2"), at("b", "s", "h", f"{k} * 2 + 1")
        first = f"{d} % 2 == 0"
    else:
        k = f"{d} % {half}"
        x1, x2 = at("b", "s", "h", k), at("b", "s", "h", f"{k} + {half}")
        first = f"{d} % {rd} < {half}"
    c, s_ = cs("C", k), cs("S", k)
    rot = f"select({first}, {c} * {x1} - {s_} * {x2}, {s_} * {x1} + {c} * {x2})"
    return rot if rd == hd else f"select({d} < {rd}, {rot}, {at('b', 's', 'h', d)})"


# ---------------------------------------------------------------------------- the exporters'
# attention subgraph: MatMul(Q, Kt) [* or / a constant] [+ mask] -> Softmax(last axis) ->
# MatMul(., V), as PyTorch and TensorFlow export scaled dot-product attention, becomes one op
# when its last MatMul is converted (`fuse_subgraph`): the calls the chain's nodes emitted
# are taken back out of the graph body, when nothing else reads what they computed.

_LINE = re.compile(r"^    (.+?) = (\w+)\((.*)\)$")


def _graph_index(cv):
    """(producer node of each value, consumer count of each value, graph output names) of
    the graph being converted (kept for the last conversion only)."""
    g = cv.graph
    if _INDEX.get("converter") is not cv:
        prod, uses = {}, {}
        for n in g.node:
            for o in n.output:
                prod[o] = n
            for i in n.input:
                uses[i] = uses.get(i, 0) + 1
        _INDEX.update(converter=cv, index=(prod, uses, {o.name for o in g.output}))
    return _INDEX["index"]


_INDEX: dict = {}


def _static_scalar(cv, name):
    if name in cv.static and cv.static[name].size == 1 and \
            cv.static[name].dtype.kind == "f":
        return float(cv.static[name].reshape(()))
    return None


def _match(cv, node):
    """The subgraph ending at MatMul ``node``: (q, kt, v, mask, scale ops, absorbed ONNX
    values) or None."""
    prod, uses, outputs = _graph_index(cv)

    def single(name):               # computed by a node, read once, not a graph output
        return name in prod and uses.get(name, 0) == 1 and name not in outputs and \
            name in cv.tensors and name not in cv.static

    p = node.input[0]
    if not single(p) or prod[p].op_type != "Softmax":
        return None
    sm = prod[p]
    absorbed = [p]
    x = sm.input[0]
    if x not in cv.tensors:
        return None
    rank = len(cv.tensors[x].shape)
    axis = next((at.i for at in sm.attribute if at.name == "axis"),
                1 if cv.opset < 13 else -1)
    if axis % max(rank, 1) != rank - 1:
        return None
    mask = None
    scales = []
    while True:
        if not single(x):
            return None
        n = prod[x]
        if n.op_type == "Add" and mask is None and not scales:
            a, b = n.input
            chain = a if a in prod and prod[a].op_type in ("Mul", "Div", "MatMul") else b
            other = b if chain == a else a
            if chain == other:
                return None
            mask, x = other, chain
        elif n.op_type == "Where" and mask is None and not scales and \
                all(cv.is_static(v) for v in n.input[:1]):
            # a causal mask, masked_fill(~keep, -inf): Where(c, -inf, s) is s + M, M = -inf
            # where c and 0 elsewhere (the same scores, the same softmax)
            c, a, b = n.input
            fill = next(((v, o, side) for v, o, side in ((a, b, True), (b, a, False))
                         if _static_scalar(cv, v) is not None), None)
            if fill is None or _static_scalar(cv, fill[0]) != float("-inf") or \
                    fill[1] not in prod:
                return None
            cond = np.asarray(cv.static[c]).astype(bool)
            m = np.where(cond if fill[2] else ~cond, np.float32(-np.inf), np.float32(0))
            mask = x + "#causal"
            cv.static[mask] = m.astype(np.float32)
            x = fill[1]
        elif n.op_type in ("Mul", "Div"):
            a, b = n.input
            if _static_scalar(cv, b) is not None:
                scales.append(("*" if n.op_type == "Mul" else "/", _static_scalar(cv, b)))
                x = a
            elif n.op_type == "Mul" and _static_scalar(cv, a) is not None:
                scales.append(("*", _static_scalar(cv, a)))
                x = b
            else:
                return None
        elif n.op_type == "MatMul":
            absorbed.append(x)
            q, kt = n.input
            break
        else:
            return None
        absorbed.append(x)
    if q not in cv.tensors and q not in cv.static or kt not in cv.tensors and \
            kt not in cv.static:
        return None
    return q, kt, node.input[1], mask, scales[::-1], absorbed


def _sdpa_text(qs, ks, vs, ms, scales, dt, k_perm=None):
    """Y = softmax(Q Kt (scales) + M) V over numpy-broadcast batch dimensions, the row
    maximum subtracted; the normalisation after the product with V. ``ks`` is K's shape as
    the product reads it, ``[.., x, l]``; ``k_perm``, a Transpose the op reads K through:
    K is then stored in the transpose's input order (dimension ``k_perm[j]`` holds the
    product's ``j``)."""
    sq, d = qs[-2:]
    L, dv = ks[-1], vs[-1]
    batch = tuple(np.broadcast_shapes(qs[:-2], ks[:-2], vs[:-2],
                                      *([ms[:-2]] if ms is not None and len(ms) > 2 else [])))
    r = len(batch)
    i = T.idx(r)

    def subs(shape, tail):
        head = T.broadcast_index(list(shape[:-2]), r, i)[1:-1] if len(shape) > 2 else ""
        return [x for x in head.split(", ") if x] + tail

    def sub(shape, tail):
        return ", ".join(subs(shape, tail))

    logical = subs(ks, ["x", "l"])
    k_subs, k_shape = list(logical), list(ks)
    if k_perm is not None:
        for j, axis in enumerate(k_perm):
            k_subs[axis], k_shape[axis] = logical[j], ks[j]
    dot = f"sum[x: {d}](Q[{sub(qs, ['q', 'x'])}] * K[{', '.join(k_subs)}])"
    score = f"P[{', '.join([*i, 'q', 'l'])}]"       # the product is a stage of its own
    for op, c in scales:
        score = f"{score} {op} {T.lit(c, dt)}"
    params = [f"Q: {T.ty(qs, dt)}", f"K: {T.ty(k_shape, dt)}", f"V: {T.ty(vs, dt)}"]
    if ms is not None:
        params.append(f"M: {T.ty(ms, dt)}")
        names = (i + ["q", "l"])[r + 2 - len(ms):]       # right-aligned, as numpy
        msubs = ", ".join("0" if n == 1 else v for n, v in zip(ms, names))
        score = f"{score} + M[{msubs}]"
    bq = lambda *t: ", ".join([*i, *t])       # noqa: E731
    return (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(batch + (sq, dv), dt)} {{\n"
            f"    P: {T.ty(batch + (sq, L), dt)}\n"
            f"    P[{bq('q', 'l')}] = {dot}\n"
            f"    S: {T.ty(batch + (sq, L), dt)}\n"
            f"    S[{bq('q', 'l')}] = {score}\n"
            f"    Mx: {T.ty(batch + (sq,), dt)}\n"
            f"    Mx[{bq('q')}] = max[l: {L}](S[{bq('q', 'l')}])\n"
            f"    E: {T.ty(batch + (sq, L), dt)}\n"
            f"    E[{bq('q', 'l')}] = exp(S[{bq('q', 'l')}] - Mx[{bq('q')}])\n"
            f"    Sm: {T.ty(batch + (sq,), dt)}\n"
            f"    Sm[{bq('q')}] = sum[l: {L}](E[{bq('q', 'l')}])\n"
            f"    O: {T.ty(batch + (sq, dv), dt)}\n"
            f"    O[{bq('q', 'y')}] = sum[l: {L}](E[{bq('q', 'l')}] * V[{sub(vs, ['l', 'y'])}])\n"
            f"    Y[{bq('q', 'y')}] = O[{bq('q', 'y')}] / Sm[{bq('q')}]\n}}\n"), \
        batch + (sq, dv)


def fuse_subgraph(cv, node) -> bool:
    """Convert MatMul ``node`` as the end of an attention subgraph if it is one (see above);
    False (nothing done) otherwise."""
    m = _match(cv, node)
    if m is None:
        return False
    q, kt, v, mask, scales, absorbed = m
    if v not in cv.tensors and v not in cv.static:
        return False
    # K transposed for the product (any Transpose: PyTorch's K.transpose(-2, -1), or the
    # heads' split [b, l, h, x] -> [b, h, x, l]) is read in place: the op's schedule packs
    # it into panels of l once (`_sdpa_schedule`), cheaper than the transpose's own kernel
    prod, uses, outputs = _graph_index(cv)
    k_perm = None
    tn = prod.get(kt)
    if tn is not None and tn.op_type == "Transpose" and uses.get(kt, 0) == 1 and \
            kt not in outputs and kt in cv.tensors and tn.input[0] in cv.tensors:
        r = len(cv.tensors[kt].shape)
        k_perm = next((list(at.ints) for at in tn.attribute if at.name == "perm"),
                      list(range(r))[::-1])
        absorbed = [kt] + absorbed
        kt = tn.input[0]
    qt, kt_t, vt = cv.tensor(q), cv.tensor(kt), cv.tensor(v)
    mt = cv.tensor(mask) if mask is not None else None
    dt = qt.dtype
    if dt not in ("f32", "f64") or any(t.dtype != dt for t in (kt_t, vt, mt) if t):
        return False
    # K's shape as the product reads it, [.., x, l]
    ks = tuple(kt_t.shape) if k_perm is None else tuple(kt_t.shape[a] for a in k_perm)
    if min(len(qt.shape), len(ks), len(vt.shape)) < 2 or \
            qt.shape[-1] != ks[-2] or ks[-1] != vt.shape[-2]:
        return False
    # the values the chain computed, as the unfused graph would shape them
    sshape = cv.tensors[absorbed[-1]].shape
    if mt is not None:
        try:
            if tuple(np.broadcast_shapes(sshape, mt.shape)) != sshape:
                return False
        except ValueError:
            return False
    try:
        want = tuple(np.broadcast_shapes(sshape[:-2], vt.shape[:-2])) + \
            (sshape[-2], vt.shape[-1])
    except ValueError:
        return False
    # the lines to take back: those defining the absorbed values and what only they read
    keep = {t.name for t in (qt, kt_t, vt, mt) if t}
    parsed, parsed_lines = [], list(cv.lines)
    for k, line in enumerate(cv.lines):
        hit = _LINE.match(line)
        if hit is None:
            return False
        outs = hit.group(1).split(", ")
        args = [a.strip() for a in hit.group(3).split(";")[0].split(",") if a.strip()]
        parsed.append((outs, args))
    defined = {o: k for k, (outs, _) in enumerate(parsed) for o in outs}
    drop, todo = set(), [cv.tensors[p].name for p in absorbed]
    while todo:
        name = todo.pop()
        if name in keep or name not in defined:
            continue
        k = defined[name]
        if k in drop:
            continue
        drop.add(k)
        todo += [a for a in parsed[k][1]]
    dropped_names = {o for k in drop for o in parsed[k][0]}
    onnx_outputs = {cv.tensors[o].name for o in _graph_index(cv)[2] if o in cv.tensors}
    for k, (outs, args) in enumerate(parsed):
        if k not in drop and dropped_names & set(args):
            return False                 # something else reads what the chain computed
    if dropped_names & onnx_outputs or dropped_names & keep:
        return False
    text, shape = _sdpa_text(qt.shape, ks, vt.shape, mt.shape if mt is not None else None,
                             scales, dt, k_perm)
    if shape != want:
        return False
    cv.lines[:] = [ln for k, ln in enumerate(cv.lines) if k not in drop]
    # the ops only the dropped calls used go too
    used = {_LINE.match(ln).group(2) for ln in cv.lines}
    for func in {_LINE.match(ln).group(2) for ln in (parsed_lines[k] for k in drop)} - used:
        for t, name in list(cv.ops.items()):
            if name == func:
                del cv.ops[t]
                cv.op_texts[:] = [o for o in cv.op_texts if not o.startswith(f"op {func}(")]
    args = [qt, kt_t, vt] + ([mt] if mt is not None else [])
    # the row-local schedule for rows of at least 4 vectors of AVX-512 (its max and sum
    # take 4 vectors a step); shorter ones ran faster on the automatic one
    l_axis = None if k_perm is None else k_perm[-1]      # where K stores l
    packed = l_axis is not None and l_axis != len(k_perm) - 1
    name = cv.op("attention", text + (_sdpa_schedule(len(shape) - 2, l_axis if packed
                                                     else None) if ks[-1] >= 64 else ""))
    # cv.op names the op's first "{name}"; the schedule's is the second
    cv.op_texts[:] = [t.replace("{name}", name) if t.startswith(f"op {name}(") else t
                      for t in cv.op_texts]
    cv.call(node.output[0], name, args, shape, dtype=dt)
    return True


def _sdpa_schedule(r: int, k_pack_axis: int | None) -> str:
    """Row-local, as std softmax's, a block of ``rb`` query rows at a time (a parallel loop
    over the batch dimensions): their scores S, each row's maximum, exponentials E and sum,
    then their output rows, all in buffers that stay in L1. The two products are register
    tiles, as a matmul's: ``rb`` rows by ``pv`` vectors of l (of y for the output), each
    vector of K (of V) loaded once for all the rows; ``rb * pv = registers * 3 / 4``
    accumulators leave room for the loads and broadcasts. One row at a time (a vector of K
    per multiply-add, its accumulators through memory) ran BERT's heads at 69 GFLOP/s on
    AVX-512, this at 200 (at 62 and 101 with AVX2); the automatic schedule, each stage over
    the whole batch, was 4x slower still. A K whose l is not its innermost dimension
    (``k_pack_axis``, stored transposed) is first copied into panels of ``lanes`` values
    of l, contiguous: 3.3 ms read in place with K as rows, 0.25 packed."""
    batch = ", ".join(f"Y.i{k}" for k in range(r))
    par = f"    blk = fuse({batch})\n    parallel(blk)\n" if r > 1 else \
        "    parallel(Y.i0)\n" if r == 1 else ""
    pack = ("    Kp = cache_read(K, global, P)\n"
            f"    kpo, kpi = pack(Kp.ax{k_pack_axis}, lanes)\n" if k_pack_axis is not None else "")
    stages = ("O", "Sm", "Qs", "Ps", "E", "Mx", "Qm", "Pm", "S", "P")
    return (f"\nschedule {{name}} for cpu {{\n"
            f"    knob rb in [1, 2, 3, 4, 6, 8, 12, 16] = registers * 3 // 8\n"
            f"    knob pv in [1, 2, 4] = 2\n"
            f"{pack}"
            f"    Pm = rfactor(Mx.l, 4 * lanes)\n    Qm = rfactor(Mx.l_i, lanes)\n"
            f"    Ps = rfactor(Sm.l, 4 * lanes)\n    Qs = rfactor(Sm.l_i, lanes)\n"
            f"    qo, qi = split(Y.q, rb)\n"
            + "".join(f"    compute_at({st}, qo)\n" for st in stages) +
            f"    reorder(Qm.l_i_o, Qm.l_i_i)\n    vectorize(Qm.l_i_i)\n"
            f"    reorder(Pm.l_o, Pm.l_i)\n    pu, pl = split(Pm.l_i, lanes)\n"
            f"    unroll(pu)\n    vectorize(pl)\n"
            f"    reorder(Qs.l_i_o, Qs.l_i_i)\n    vectorize(Qs.l_i_i)\n"
            f"    reorder(Ps.l_o, Ps.l_i)\n    su, sl2 = split(Ps.l_i, lanes)\n"
            f"    unroll(su)\n    vectorize(sl2)\n"
            f"    vo, vl = split(S.l, lanes)\n    vectorize(vl)\n"
            f"    plo, pli = split(P.l, pv * lanes)\n    plu, plv = split(pli, lanes)\n"
            f"    reorder(plo, P.x, P.q, plu, plv)\n"
            f"    unroll(P.q)\n    unroll(plu)\n    vectorize(plv)\n"
            f"    eo, el = split(E.l, lanes)\n    vectorize(el)\n"
            f"    oyo, oyi = split(O.y, pv * lanes)\n    oyu, oyv = split(oyi, lanes)\n"
            f"    reorder(oyo, O.l, O.q, oyu, oyv)\n"
            f"    unroll(O.q)\n    unroll(oyu)\n    vectorize(oyv)\n"
            f"    zo, zl = split(Y.y, lanes)\n    vectorize(zl)\n"
            f"{par}}}\n")


# ---------------------------------------------------------------------------- LinearAttention

@converter("LinearAttention", attrs=("chunk_size", "kv_num_heads", "q_num_heads", "scale",
                                     "update_rule"))
def linear_attention(cv, node, a):
    """LinearAttention (linear, gated, delta, gated_delta update rules; GQA/MQA; a past
    state) as the function body ONNX defines for it: a Scan over the sequence, unrolled
    (`control.inline_function`)."""
    from .control import inline_function
    inline_function(cv, node, a)
