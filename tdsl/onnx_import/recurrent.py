"""Converters of the recurrent networks: LSTM, GRU, RNN.

The sequence length is known at import, so the recurrence is unrolled into one kernel per
timestep and direction. What does not depend on the previous state comes first and is
batched: the input projection of every timestep, ``X W^T + biases``, is one GEMM over
``seq_length * batch`` rows: std ``dense`` where W (and B) are constants, which the graph
packs once and runs register-tiled; else a generated op ``<kind>_proj``. Each step (op
``<kind>_step``, written once per direction and called with the direction, and the timestep
where sequence lengths need it, as attributes) adds ``H_{t-1} R^T``, a GEMV on R stored
transposed that the automatic schedule vectorizes, and applies the gates; the outputs Y,
Y_h (and Y_c) are gathered from the steps' states.

Supported: forward, reverse and bidirectional; layout 0 and 1; initial states; biases;
LSTM peepholes and input_forget; GRU's linear_before_reset; clip; every activation ONNX
names. ``sequence_lens`` shorter than the sequence is supported in the forward direction
(a finished sequence holds its state and writes zeros to Y, as onnxruntime does).
"""
from __future__ import annotations

import numpy as np

from . import templates as T
from .registry import converter, opt, text

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"],
                       "RNN": ["Tanh"]}
# tanh(x) in what the C target vectorizes (its exp is an inline polynomial; tanh is libm's
# tanhf, a scalar call: 128 of them were half of an LSTM 64 step): Cephes' tanhf, an odd
# polynomial below |x| = 0.625, else 1 - 2 / (e^{2|x|} + 1) with x's sign; within 2e-7 of
# numpy's tanh in f32, NaN kept, +-1 at +-infinity.
TANH = ("select(abs({x}) < 0.625, {x} + {x} * ({x} * {x}) * ((((-5.70498872745e-3 * "
        "({x} * {x}) + 2.06390887954e-2) * ({x} * {x}) - 5.37397155531e-2) * ({x} * {x}) + "
        "1.33314422036e-1) * ({x} * {x}) - 3.33332819422e-1), select({x} < 0.0, -1.0, 1.0) * "
        "(1.0 - 2.0 / (exp(2.0 * abs({x})) + 1.0)))")
# activation -> (expression of {x}, alpha, beta defaults) for those that take parameters
ACTIVATIONS = {
    "relu": ("max({x}, 0.0)", None, None),
    "tanh": (TANH, None, None),
    "sigmoid": ("sigmoid({x})", None, None),
    "affine": ("{a} * {x} + {b}", 1.0, 0.0),
    "leakyrelu": ("select({x} >= 0.0, {x}, {a} * {x})", 0.01, None),
    "thresholdedrelu": ("select({x} > {a}, {x}, 0.0)", 1.0, None),
    "scaledtanh": ("{a} * " + TANH.replace("{x}", "({b} * {x})"), 1.0, 1.0),
    "hardsigmoid": ("max(0.0, min(1.0, {a} * {x} + {b}))", 0.2, 0.5),
    "elu": ("select({x} >= 0.0, {x}, {a} * (exp({x}) - 1.0))", 1.0, None),
    "softsign": ("{x} / (1.0 + abs({x}))", None, None),
    "softplus": ("log(1.0 + exp({x}))", None, None),
}

ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction",
         "hidden_size", "layout")


def _activations(cv, kind, a, directions):
    """Per direction, the activation functions as ``fn(x_text) -> text``."""
    names = [text(n) for n in a.get("activations", [])] or \
        DEFAULT_ACTIVATIONS[kind] * directions
    per = len(DEFAULT_ACTIVATIONS[kind])
    if len(names) != per * directions:
        raise cv.error(f"{len(names)} activations for {directions} direction(s); "
                       f"{per} per direction expected")
    alphas, betas = list(a.get("activation_alpha", [])), list(a.get("activation_beta", []))
    fns = []
    for name in names:
        key = name.lower()
        if key not in ACTIVATIONS:
            raise cv.error(f"activation '{name}' (supported: "
                           f"{', '.join(sorted(ACTIVATIONS))})")
        expr, da, db = ACTIVATIONS[key]
        al = alphas.pop(0) if da is not None and alphas else da
        be = betas.pop(0) if db is not None and betas else db
        # x in parentheses: a gate's argument is a sum ("A[b, j] + Pe[d, j] * Cp[b, j]"),
        # and Affine's "{a} * {x} + {b}" would otherwise scale its first term alone
        fns.append(lambda x, e=expr, al=al, be=be: "(" + e.format(
            x=f"({x})", a=T.lit(al) if al is not None else "",
            b=T.lit(be) if be is not None else "") + ")")
    return [fns[d * per:(d + 1) * per] for d in range(directions)]


def _proj(seq, batch, inp, gates, hidden, directions, layout, bias, lbr):
    """P[t, b, g] = X[t, b, :] . W[d, g, :] + the biases folded in, for one direction: Wb
    and Rb of every gate, but Rb of GRU's hidden gate when linear_before_reset puts it
    inside the reset product."""
    x_t = "X[b, t, k]" if layout else "X[t, b, k]"
    x_shape = [batch, seq, inp] if layout else [seq, batch, inp]
    g = gates * hidden
    params = f"X: {T.ty(x_shape)}, W: {T.ty([directions, g, inp])}"
    terms = ""
    if bias:
        params += f", Bias: {T.ty([directions, 2 * g])}"
        rb = f"Bias[d, {g} + g]"
        terms = f" + Bias[d, g] + {f'select(g < {2 * hidden}, {rb}, 0.0)' if lbr else rb}"
    bias = terms
    return (f"op {{name}}({params}; d: int) -> P: {T.ty([seq, batch, g])} {{\n"
            f"    P[t, b, g] = sum[k: {inp}]({x_t} * W[d, g, k]){bias}\n}}\n")


def _step(kind, seq, batch, hidden, directions, acts, clip, extras):
    """One timestep of one direction: the new states from the projection and the old ones.
    ``extras``: 'peep', 'input_forget', 'lbr' (GRU linear_before_reset), 'lens'."""
    h, g = hidden, GATES[kind] * hidden
    f = acts
    params = [f"P: {T.ty([batch, g])}", f"R: {T.ty([directions, h, g])}",
              f"Hp: {T.ty([batch, h])}"]
    outs = [f"H: {T.ty([batch, h])}"]
    if kind == "LSTM":
        params.append(f"Cp: {T.ty([batch, h])}")
        outs.append(f"C: {T.ty([batch, h])}")
        if "peep" in extras:
            params.append(f"Pe: {T.ty([directions, 3 * h])}")
    if kind == "GRU" and "lbr" in extras:
        params.append(f"Bias: {T.ty([directions, 2 * g])}")
    if "lens" in extras:
        params.append(f"L: {extras['lens']}[{batch}]")

    def clipped(e):
        return f"min(max({e}, {T.lit(-clip)}), {T.lit(clip)})" if clip is not None else e

    # M = H_{t-1} R^T as a stage of its own, R stored transposed ([D, H, gates * H]): the
    # automatic schedule runs it k-outer with the gates innermost, contiguous and
    # vectorized, a GEMV at vector speed (with R read [D, gates * H, H] the reduction was
    # innermost and scalar, 8 us a step for LSTM 64). The update and reset gates of GRU
    # see H_{t-1} R^T; its hidden gate sees it only with linear_before_reset (else the
    # reset state, M2 below).
    width = 2 * h if kind == "GRU" and "lbr" not in extras else g
    lines = [f"    M: {T.ty([batch, width])}",
             f"    M[b, g] = sum[k: {h}](Hp[b, k] * R[d, k, g])",
             f"    A: {T.ty([batch, min(width, 2 * h) if kind == 'GRU' else g])}",
             "    A[b, g] = P[b, g] + M[b, g]"]
    new = {}
    if kind == "LSTM":
        def peep(k, state):
            return f" + Pe[d, {k * h} + j] * {state}" if "peep" in extras else ""
        gate_i = "A[b, j]" + peep(0, "Cp[b, j]")
        lines += [f"    I: {T.ty([batch, h])}", f"    I[b, j] = {f[0](clipped(gate_i))}"]
        gate_f = f"A[b, {2 * h} + j]" + peep(2, "Cp[b, j]")
        gate_o = f"A[b, {h} + j]" + peep(1, "Cn[b, j]")
        forget = "1.0 - I[b, j]" if "input_forget" in extras else f[0](clipped(gate_f))
        lines += [f"    F: {T.ty([batch, h])}", f"    F[b, j] = {forget}",
                  f"    Cn: {T.ty([batch, h])}",
                  f"    Cn[b, j] = F[b, j] * Cp[b, j] + I[b, j] * "
                  f"{f[1](clipped(f'A[b, {3 * h} + j]'))}",
                  f"    O: {T.ty([batch, h])}",
                  f"    O[b, j] = {f[0](clipped(gate_o))}"]
        new["H"] = f"O[b, j] * {f[2]('Cn[b, j]')}"
        new["C"] = "Cn[b, j]"
    elif kind == "GRU":
        lines += [f"    Z: {T.ty([batch, h])}", f"    Z[b, j] = {f[0](clipped('A[b, j]'))}",
                  f"    Rg: {T.ty([batch, h])}",
                  f"    Rg[b, j] = {f[0](clipped(f'A[b, {h} + j]'))}"]
        if "lbr" in extras:
            hidden_in = (f"P[b, {2 * h} + j] + Rg[b, j] * (M[b, {2 * h} + j] + "
                         f"Bias[d, {g + 2 * h} + j])")
        else:
            lines += [f"    S: {T.ty([batch, h])}", "    S[b, j] = Rg[b, j] * Hp[b, j]",
                      f"    M2: {T.ty([batch, h])}",
                      f"    M2[b, j] = sum[k: {h}](S[b, k] * R[d, k, {2 * h} + j])"]
            hidden_in = f"P[b, {2 * h} + j] + M2[b, j]"
        lines += [f"    Hh: {T.ty([batch, h])}", f"    Hh[b, j] = {f[1](clipped(hidden_in))}"]
        new["H"] = "(1.0 - Z[b, j]) * Hh[b, j] + Z[b, j] * Hp[b, j]"
    else:
        new["H"] = f[0](clipped("A[b, j]"))
    for name, expr in new.items():
        old = f"{name}p[b, j]"
        if "lens" in extras:         # a finished sequence holds its state
            expr = f"select(t < i64(L[b]), {expr}, {old})"
        lines.append(f"    {name}[b, j] = {expr}")
    # the timestep is an attribute only where the lengths need it: otherwise every step of
    # a direction is the same kernel, compiled once
    attrs = "t: int, d: int" if "lens" in extras else "d: int"
    return (f"op {{name}}({', '.join(params)}; {attrs}) -> "
            f"({', '.join(outs)}) {{\n" + "\n".join(lines) + "\n}\n")


def _split_steps(seq, batch, g):
    """The projection of every timestep as its own tensor: one kernel with S outputs."""
    outs = ", ".join(f"P{t}: {T.ty([batch, g])}" for t in range(seq))
    body = "\n".join(f"    P{t}[b, g] = P[{t}, b, g]" for t in range(seq))
    return f"op {{name}}(P: {T.ty([seq, batch, g])}) -> ({outs}) {{\n{body}\n}}\n"


def _split_rows(seq, batch, g, layout, directions):
    """The projection of every timestep and direction as its own tensor, from dense's rows
    of X: row ``t * batch + b`` (layout 1: ``b * seq + t``), columns ``d * g`` on (both
    directions are one GEMM). Outputs in the order (d, t)."""
    def row(t):
        return str(t) if batch == 1 else f"b * {seq} + {t}" if layout else f"{t * batch} + b"
    names = [(d, t) for d in range(directions) for t in range(seq)]
    outs = ", ".join(f"P{d}_{t}: {T.ty([batch, g])}" for d, t in names)
    body = "\n".join(f"    P{d}_{t}[b, g] = P[{row(t)}, {f'{d * g} + ' if d else ''}g]"
                     for d, t in names)
    return (f"op {{name}}(P: {T.ty([seq * batch, directions * g])}) -> ({outs}) "
            f"{{\n{body}\n}}\n")


def _dense_proj(cv, node, x, directions, hidden, gates, lbr, key):
    """The input projection of every direction as one std ``dense`` over the rows of X
    ([seq * batch, input], or [batch * seq, input] in layout 1), its columns direction by
    direction: W[d] stacked and the biases summed into one (Rb of GRU's hidden gate left
    out where linear_before_reset puts it inside the reset product), taken from the
    constants now. The graph packs the weights once at build and runs the register-tiled
    dense_packed, where the generated op's automatic schedule ran a scalar reduction (39 us
    for LSTM 64 over 49 steps)."""
    from .linalg import _rows
    g = gates * hidden
    w = np.asarray(cv.value(node.input[1]), np.float32)
    cv.static[key + "#w"] = np.ascontiguousarray(w.reshape(directions * g, w.shape[-1]))
    b = np.zeros((directions, g), np.float32)
    if opt(node, 3):
        wb_rb = np.asarray(cv.value(opt(node, 3)), np.float32)
        b = wb_rb[:, :g] + wb_rb[:, g:]
        if lbr:
            b[:, 2 * hidden:] = wb_rb[:, 2 * hidden:g]
    cv.static[key + "#b"] = np.ascontiguousarray(b.reshape(-1), np.float32)
    rows = int(np.prod(x.shape[:-1]))
    _rows(cv, key + "#rows", x, list(x.shape))
    cv.call(key, "dense", [cv.tensors[key + "#rows"], cv.tensor(key + "#w"),
                           cv.tensor(key + "#b")], (rows, directions * g))
    return cv.tensors[key]


def _transposed_r(cv, name, r, base):
    """R as [D, hidden, gates * hidden], the layout the step's GEMV vectorizes in: from the
    constant now, else transposed once per call."""
    key = base + "#rT"
    if cv.is_static(name):
        cv.static[key] = np.ascontiguousarray(cv.value(name).transpose(0, 2, 1), np.float32)
        return cv.tensor(key)
    shape = list(r.shape)
    cv.call(key, cv.op("transpose", T.transpose(shape, [0, 2, 1])), [r],
            (shape[0], shape[2], shape[1]))
    return cv.tensors[key]


def _gather_y(seq, batch, hidden, directions, layout, lens_dtype):
    """Y from the S * D step states: [S, D, B, H] (layout 1: [B, S, D, H]); with lengths,
    zero past each sequence's end."""
    n = seq * directions
    params = [f"H{k}: {T.ty([batch, hidden])}" for k in range(n)]
    if lens_dtype:
        params.append(f"L: {lens_dtype}[{batch}]")
    expr = "H0[b, j]"
    for k in range(1, n):
        t, d = divmod(k, directions)
        expr = f"select(t == {t} and d == {d}, H{k}[b, j], {expr})"
    if lens_dtype:
        expr = f"select(t < i64(L[b]), {expr}, 0.0)"
    shape = [batch, seq, directions, hidden] if layout else [seq, directions, batch, hidden]
    lhs = "Y[b, t, d, j]" if layout else "Y[t, d, b, j]"
    return (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(shape)} {{\n"
            f"    {lhs} = {expr}\n}}\n")


def _gather_last(batch, hidden, directions, layout):
    params = [f"H{k}: {T.ty([batch, hidden])}" for k in range(directions)]
    expr = "H0[b, j]"
    for k in range(1, directions):
        expr = f"select(d == {k}, H{k}[b, j], {expr})"
    shape = [batch, directions, hidden] if layout else [directions, batch, hidden]
    lhs = "Y[b, d, j]" if layout else "Y[d, b, j]"
    return (f"op {{name}}({', '.join(params)}) -> Y: {T.ty(shape)} {{\n"
            f"    {lhs} = {expr}\n}}\n")


def _state(cv, name, directions, batch, hidden, layout, key):
    """An initial state as [D, B, H] tensors: the input (transposed from layout 1), or
    zeros."""
    if name is None:
        cv.static[key] = np.zeros((directions, batch, hidden), np.float32)
        return cv.tensor(key)
    t = cv.float_tensor(name)
    if not layout:
        return t
    text_ = T.transpose(list(t.shape), [1, 0, 2])
    cv.call(key, cv.op("transpose", text_), [t], (directions, batch, hidden))
    return cv.tensors[key]


def _slice_direction(cv, src, d, directions, batch, hidden, key):
    """State ``d`` of a [D, B, H] tensor as [B, H]."""
    text_ = (f"op {{name}}(S: {T.ty([directions, batch, hidden])}; d: int) -> "
             f"Y: {T.ty([batch, hidden])} {{\n    Y[b, j] = S[d, b, j]\n}}\n")
    cv.call(key, cv.op("state", text_), [src], (batch, hidden), f"d={d}")
    return cv.tensors[key]


@converter("LSTM", "GRU", "RNN", attrs=ATTRS + ("input_forget", "linear_before_reset"))
def recurrent(cv, node, a):
    kind = node.op_type
    if kind != "LSTM" and "input_forget" in a:
        raise cv.error("attribute 'input_forget' is LSTM's")
    if kind != "GRU" and "linear_before_reset" in a:
        raise cv.error("attribute 'linear_before_reset' is GRU's")
    x = cv.float_tensor(node.input[0])
    w, r = cv.float_tensor(node.input[1]), cv.float_tensor(node.input[2])
    layout = int(a.get("layout", 0))
    seq, batch, inp = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
    direction = text(a.get("direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        raise cv.error(f"direction '{direction}'")
    directions = 2 if direction == "bidirectional" else 1
    hidden = int(a.get("hidden_size", r.shape[-1]))
    gates = GATES[kind]
    if w.shape != (directions, gates * hidden, inp) or \
            r.shape != (directions, gates * hidden, hidden):
        raise cv.error(f"W {w.shape} and R {r.shape} do not fit {directions} direction(s), "
                       f"hidden size {hidden} and input size {inp}")
    acts = _activations(cv, kind, a, directions)
    clip = float(a["clip"]) if "clip" in a else None
    lbr = kind == "GRU" and int(a.get("linear_before_reset", 0))
    out = node.output[0] or node.name + "#Y"
    base = f"{out}#{kind.lower()}"

    bias = cv.float_tensor(opt(node, 3)) if opt(node, 3) else None
    g = gates * hidden
    lens_dtype = None
    lens = opt(node, 4)
    if lens is not None:
        if cv.is_static(lens) and (cv.static[lens] == seq).all():
            lens = None                               # every sequence is whole
        else:
            lt = cv.tensor(lens)
            if lt.dtype not in ("i32", "i64"):
                raise cv.error(f"sequence_lens is {lt.dtype}; i32 or i64 expected")
            if direction != "forward":
                raise cv.error("sequence_lens shorter than the sequence in the "
                               f"'{direction}' direction")
            lens_dtype = lt.dtype
    h0 = _state(cv, opt(node, 5), directions, batch, hidden, layout, base + "#h0")
    c0 = _state(cv, opt(node, 6), directions, batch, hidden, layout, base + "#c0") \
        if kind == "LSTM" else None
    peep = cv.float_tensor(opt(node, 7)) if kind == "LSTM" and opt(node, 7) else None

    proj_text = _proj(seq, batch, inp, gates, hidden, directions, layout, bias is not None,
                      lbr)
    extras = {}
    if peep is not None:
        extras["peep"] = True
    if kind == "LSTM" and int(a.get("input_forget", 0)):
        extras["input_forget"] = True
    if lbr:
        extras["lbr"] = True
        if bias is None:             # the step reads Rb of the hidden gate: zeros
            cv.static[base + "#b"] = np.zeros((directions, 2 * g), np.float32)
            bias = cv.tensor(base + "#b")
            proj_text = _proj(seq, batch, inp, gates, hidden, directions, layout, True, lbr)
    if lens_dtype:
        extras["lens"] = lens_dtype
    rt = _transposed_r(cv, node.input[2], r, base)
    # with constant weights (and biases) the projection is std dense on the rows of X
    dense = cv.is_static(node.input[1]) and (opt(node, 3) is None or cv.is_static(opt(node, 3)))
    if dense:
        p = _dense_proj(cv, node, x, directions, hidden, gates, lbr, f"{base}#p")
        steps = [f"{base}#p{d}_{t}" for d in range(directions) for t in range(seq)]
        if len(steps) == 1:
            cv.reshape(steps[0], f"{base}#p", (batch, g))
        else:
            _call_many(cv, steps, cv.op("split_rows", _split_rows(seq, batch, g, layout,
                                                                  directions)),
                       [p], (batch, g), "")
    states = {}                        # (t, d) -> H (and C) tensors after step t
    for d in range(directions):
        # activations may differ by direction: one step op per distinct set
        step_text = _step(kind, seq, batch, hidden, directions, acts[d], clip, extras)
        steps = [f"{base}#p{d}_{t}" for t in range(seq)]
        if not dense:
            args = [x, w] + ([bias] if bias is not None else [])
            cv.call(f"{base}#p{d}", cv.op(f"{kind.lower()}_proj", proj_text), args,
                    (seq, batch, g), f"d={d}")
            p = cv.tensors[f"{base}#p{d}"]
            if seq == 1:
                cv.reshape(steps[0], f"{base}#p{d}", (batch, g))
            else:
                _call_many(cv, steps, cv.op("split_steps", _split_steps(seq, batch, g)),
                           [p], (batch, g), "")
        hp = _slice_direction(cv, h0, d, directions, batch, hidden, f"{base}#h0_{d}")
        cp = _slice_direction(cv, c0, d, directions, batch, hidden, f"{base}#c0_{d}") \
            if c0 is not None else None
        backwards = direction == "reverse" or d == 1
        order = reversed(range(seq)) if backwards else range(seq)
        for t in order:
            args = [cv.tensors[steps[t]], rt, hp] + ([cp] if cp is not None else []) + \
                ([peep] if peep is not None else []) + ([bias] if lbr else []) + \
                ([cv.tensor(lens)] if lens_dtype else [])
            outs = [f"{base}#h{t}_{d}"] + ([f"{base}#c{t}_{d}"] if cp is not None else [])
            _call_many(cv, outs, cv.op(f"{kind.lower()}_step", step_text), args,
                       (batch, hidden), f"t={t}, d={d}" if lens_dtype else f"d={d}")
            hp = cv.tensors[outs[0]]
            cp = cv.tensors[outs[1]] if cp is not None else None
            states[t, d] = (hp, cp)
        states["last", d] = (hp, cp)
    if node.output[0]:
        hs = [states[t, d][0] for t in range(seq) for d in range(directions)]
        y_shape = (batch, seq, directions, hidden) if layout else \
            (seq, directions, batch, hidden)
        cv.call(node.output[0], cv.op("rnn_y", _gather_y(seq, batch, hidden, directions,
                                                         layout, lens_dtype)),
                hs + ([cv.tensor(lens)] if lens_dtype else []), y_shape)
    last_shape = (batch, directions, hidden) if layout else (directions, batch, hidden)
    last_text = _gather_last(batch, hidden, directions, layout)
    for k, out_name in enumerate(node.output[1:3]):
        if out_name:
            cv.call(out_name, cv.op("rnn_last", last_text),
                    [states["last", d][k] for d in range(directions)], last_shape)


def _call_many(cv, outs, func, args, shape, attrs):
    """``o1, o2 = func(args; attrs)``: a call of an op with several outputs of ``shape``."""
    from .convert import Tensor
    ts = [Tensor(cv.fresh(o), shape) for o in outs]
    names = ", ".join(t.name for t in args)
    cv.lines.append(f"    {', '.join(t.name for t in ts)} = {func}({names}"
                    f"{'; ' + attrs if attrs else ''})")
    for o, t in zip(outs, ts):
        cv.tensors[o] = t
