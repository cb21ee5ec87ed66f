"""Converters of the normalization: LayerNormalization, RMSNormalization, GroupNormalization,
InstanceNormalization, LpNormalization, MeanVarianceNormalization, and the losses
(SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss).

LayerNormalization over one trailing block with a scale and bias of that block's size is
std's `layer_norm` (f32); everything else is an op written for the node's shapes: the
statistics are stages over the reduced axes, computed in the stash type (f32, or f64 for an
f64 input or ``stash_type`` 11), and the output is one elementwise stage. The losses gather
with the target clamped into [0, C) (a target outside it that is not ``ignore_index`` has
no defined result; it reads the nearest class rather than past the tensor) and sum in f64.
"""
from __future__ import annotations

import numpy as np

from . import templates as T
from .convert import Tensor
from .registry import converter, opt as _opt, text as _text

_FLOATS = ("f32", "f64")


# ---------------------------------------------------------------------------- helpers

def _float(cv, name: str, what: str) -> Tensor:
    t = cv.tensor(name)
    if t.dtype not in _FLOATS:
        raise cv.error(f"{what} '{name}' is {t.dtype}; this operator is supported on f32 "
                       f"and f64")
    return t


def _same_dtype(cv, t: Tensor, x: Tensor, what: str) -> None:
    if t.dtype != x.dtype:
        raise cv.error(f"the {what} is {t.dtype} but the input is {x.dtype}; mixed dtypes "
                       f"are not supported")


def _axis(cv, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise cv.error(f"axis {axis} is out of range for an input of rank {rank}")
    return axis % rank


def _stash(cv, a, dtype: str) -> str:
    """The dtype the statistics are computed in."""
    s = a.get("stash_type", 1)
    if s not in (1, 11):
        raise cv.error(f"stash_type {s} (only 1, float32, and 11, float64, are supported)")
    return "f64" if dtype == "f64" or s == 11 else "f32"


def _broadcasts(cv, t: Tensor, shape, what: str) -> None:
    try:
        ok = len(t.shape) <= len(shape) and \
            tuple(np.broadcast_shapes(tuple(t.shape), tuple(shape))) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise cv.error(f"the {what} of shape {list(t.shape)} does not broadcast to "
                       f"{list(shape)}")


def _cast(expr: str, src: str, dst: str) -> str:
    return expr if src == dst else f"{dst}({expr})"


def _red(kind: str, ranges, body: str) -> str:
    """``kind[ranges](body)``, or ``body`` when nothing is reduced."""
    return f"{kind}[{', '.join(ranges)}]({body})" if ranges else body


def _emit(cv, outs, func: str, args, shapes, dtypes) -> None:
    """``o1, o2 = func(args)`` in the graph body: ``cv.call``, for one output or several."""
    if len(outs) == 1:
        cv.call(outs[0], func, args, shapes[0], dtype=dtypes[0])
        return
    ts = [Tensor(cv.fresh(o), s, d) for o, s, d in zip(outs, shapes, dtypes)]
    cv.lines.append(f"    {', '.join(t.name for t in ts)} = "
                    f"{func}({', '.join(a.name for a in args)})")
    for o, t in zip(outs, ts):
        cv.tensors[o] = t


def _outputs(node, k: int) -> list[str | None]:
    """The names of ``node``'s first ``k`` outputs, None for one not asked for."""
    return [node.output[j] if len(node.output) > j and node.output[j] else None
            for j in range(k)]


class _Axes:
    """Indices of an input of ``shape`` reduced over ``axes``: ``i`` its data indices,
    ``keep`` those of the axes kept (the statistics' indices), ``red`` the subscripts with
    the reduced axes replaced by reduction variables, ``ranges`` those variables."""

    def __init__(self, shape, axes):
        rank = len(shape)
        self.shape, self.axes = list(shape), sorted(set(axes))
        self.i = T.idx(rank)
        self.keep = [self.i[a] for a in range(rank) if a not in self.axes]
        self.kept_shape = [shape[a] for a in range(rank) if a not in self.axes]
        self.red = [f"k{a}" if a in self.axes else self.i[a] for a in range(rank)]
        self.ranges = [f"k{a}" for a in self.axes]
        self.count = int(np.prod([shape[a] for a in self.axes])) if self.axes else 1

    def stat(self, name: str) -> str:
        return T.at(name, self.keep)

    def decl(self, name: str, dtype: str) -> str:
        return f"    {name}: {T.ty(self.kept_shape, dtype)}\n"


def _moments(ax: _Axes, dt: str, ct: str, eps, *, rms: bool = False,
             std_eps: bool = False) -> str:
    """Stages ``Mu`` (the mean; not for ``rms``) and ``Inv`` (1 / sqrt(var + eps), or
    1 / (sqrt(var) + eps) for ``std_eps``; the root mean square for ``rms``)."""
    cx = _cast(T.at("X", ax.red), dt, ct)
    n = T.lit(float(ax.count), ct)
    out = ""
    if rms:
        out += ax.decl("V", ct)
        out += f"    {ax.stat('V')} = {_red('sum', ax.ranges, f'{cx} * {cx}')} / {n}\n"
    else:
        out += ax.decl("Mu", ct)
        out += f"    {ax.stat('Mu')} = {_red('sum', ax.ranges, cx)} / {n}\n"
        d = f"({cx} - {ax.stat('Mu')})"
        out += ax.decl("V", ct)
        out += f"    {ax.stat('V')} = {_red('sum', ax.ranges, f'{d} * {d}')} / {n}\n"
    out += ax.decl("Inv", ct)
    e = T.lit(eps, ct)
    den = f"(sqrt({ax.stat('V')}) + {e})" if std_eps else f"sqrt({ax.stat('V')} + {e})"
    out += f"    {ax.stat('Inv')} = 1.0 / {den}\n"
    return out


def _param(name: str, t: Tensor, rank: int, i) -> tuple[str, str]:
    """The parameter declaration of ``t`` and its read broadcast to rank ``rank``."""
    sub = T.broadcast_index(t.shape, rank, i) if len(t.shape) else ""
    return f"{name}: {t.type}", f"{name}{sub}"


# ---------------------------------------------------------------------------- LayerNorm

def _layer_norm_text(x: Tensor, axis: int, ct: str, eps, w: Tensor | None,
                     b: Tensor | None, want) -> str:
    """Y (if ``want[0]``), Mean and InvStdDev (``want[1]``, ``want[2]``) of a layer
    normalization over the axes from ``axis`` on."""
    dt, rank = x.dtype, len(x.shape)
    ax = _Axes(x.shape, range(axis, rank))
    params = [f"X: {x.type}"]
    outs = []
    body = _moments(ax, dt, ct, eps)
    red_shape = list(x.shape[:axis]) + [1] * (rank - axis)
    if want[0]:
        pw, rw = _param("Wt", w, rank, ax.i)
        params.append(pw)
        y = _cast(f"({_cast(T.at('X', ax.i), dt, ct)} - {ax.stat('Mu')}) * "
                  f"{ax.stat('Inv')}", ct, dt) + f" * {rw}"
        if b is not None:
            pb, rb = _param("Bs", b, rank, ax.i)
            params.append(pb)
            y += f" + {rb}"
        outs.append(f"Y: {x.type}")
        body += f"    {T.at('Y', ax.i)} = {y}\n"
    for k, (nm, st) in enumerate((("Mean", "Mu"), ("InvStd", "Inv")), 1):
        if want[k]:
            outs.append(f"{nm}: {T.ty(red_shape, dt)}")
            body += f"    {T.at(nm, ax.i)} = {_cast(ax.stat(st), ct, dt)}\n"
    sig = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
    return f"op {{name}}({', '.join(params)}) -> {sig} {{\n{body}}}\n"


def _flat_vector(t: Tensor, d: int) -> bool:
    """``t`` (which broadcasts to the normalized block) is the whole block: it can be read
    as a vector of its ``d`` elements."""
    return int(np.prod(t.shape or (1,))) == d


def _last_axes_norm(cv, node, a):
    """What LayerNormalization and RMSNormalization read alike: the input, its rank, the
    first normalized axis, the stash dtype, epsilon and the scale."""
    x = _float(cv, node.input[0], "the input")
    rank = len(x.shape)
    if rank == 0:
        raise cv.error(f"a scalar input ({node.op_type} needs rank >= 1)")
    axis = _axis(cv, a.get("axis", -1), rank)
    return (x, rank, axis, _stash(cv, a, x.dtype), a.get("epsilon", 1e-5),
            _float(cv, node.input[1], "the scale"))


@converter("LayerNormalization", attrs=("axis", "epsilon", "stash_type"))
def layer_normalization(cv, node, a):
    x, rank, axis, ct, eps, w = _last_axes_norm(cv, node, a)
    b = _float(cv, node.input[2], "the bias") if _opt(node, 2) else None
    block = list(x.shape[axis:])
    for t, what in ((w, "scale"), (b, "bias")):
        if t is not None:
            _same_dtype(cv, t, x, what)
            _broadcasts(cv, t, block, what)
    y, mean, inv = _outputs(node, 3)
    n, d = int(np.prod(x.shape[:axis] or [1])), int(np.prod(block))
    std = y is not None and x.dtype == ct == "f32" and _flat_vector(w, d) and \
        (b is None or _flat_vector(b, d))
    if std:
        # std's layer_norm on the [rows, block] view
        base = node.output[0]
        if axis == rank - 1 and rank >= 3:
            from .linalg import _rows
            _rows(cv, base + "#x2", x, list(x.shape))
        else:
            cv.reshape(base + "#x2", node.input[0], (n, d))
        cv.reshape(base + "#w1", node.input[1], (d,))
        if b is None:
            cv.static[base + "#b1"] = np.zeros(d, np.float32)
        else:
            cv.reshape(base + "#b1", node.input[2], (d,))
        args = [cv.tensor(base + s) for s in ("#x2", "#w1", "#b1")]
        cv.call(base + "#ln", "layer_norm", args, (n, d), f"eps={T.lit(eps)}")
        if axis == rank - 1 and rank >= 3:
            # direct subscripts back, and a dense layer that follows reads the 2-D result
            from .linalg import rows_of, unrows
            ln = cv.tensors[base + "#ln"]
            unrows(cv, y, ln, list(x.shape))
            rows_of(cv)[cv.tensors[y].name] = ln
        else:
            cv.reshape(y, base + "#ln", x.shape)
    want = (y is not None and not std, mean is not None, inv is not None)
    if not any(want):
        return
    red_shape = tuple(x.shape[:axis]) + (1,) * (rank - axis)
    text = _layer_norm_text(x, axis, ct, eps, w, b, want)
    args = [x] + ([w] + ([b] if b is not None else []) if want[0] else [])
    outs = [o for o, k in zip((y, mean, inv), want) if k]
    shapes = [s for s, k in zip((x.shape, red_shape, red_shape), want) if k]
    _emit(cv, outs, cv.op("layernorm", text), args, shapes, [x.dtype] * len(outs))


# ---------------------------------------------------------------------------- RMSNorm

@converter("RMSNormalization", attrs=("axis", "epsilon", "stash_type"))
def rms_normalization(cv, node, a):
    x, rank, axis, ct, eps, w = _last_axes_norm(cv, node, a)
    _same_dtype(cv, w, x, "scale")
    _broadcasts(cv, w, x.shape[axis:], "scale")
    dt = x.dtype
    ax = _Axes(x.shape, range(axis, rank))
    pw, rw = _param("Wt", w, rank, ax.i)
    body = _moments(ax, dt, ct, eps, rms=True)
    y = _cast(f"{_cast(T.at('X', ax.i), dt, ct)} * {ax.stat('Inv')}", ct, dt)
    text = (f"op {{name}}(X: {x.type}, {pw}) -> Y: {x.type} {{\n{body}"
            f"    {T.at('Y', ax.i)} = {y} * {rw}\n}}\n")
    cv.call(node.output[0], cv.op("rmsnorm", text), [x, w], x.shape, dtype=dt)


# ---------------------------------------------------------------------------- per channel

@converter("InstanceNormalization", attrs=("epsilon",))
def instance_normalization(cv, node, a):
    x = _float(cv, node.input[0], "the input")
    rank = len(x.shape)
    if rank < 2:
        raise cv.error(f"an input of rank {rank} (InstanceNormalization needs N, C, ...)")
    dt, c = x.dtype, x.shape[1]
    s, b = _float(cv, node.input[1], "the scale"), _float(cv, node.input[2], "the bias")
    for t, what in ((s, "scale"), (b, "bias")):
        _same_dtype(cv, t, x, what)
        if tuple(t.shape) != (c,):
            raise cv.error(f"the {what} has shape {list(t.shape)}, expected [{c}]")
    ax = _Axes(x.shape, range(2, rank))
    body = _moments(ax, dt, dt, a.get("epsilon", 1e-5))
    y = (f"({T.at('X', ax.i)} - {ax.stat('Mu')}) * {ax.stat('Inv')} * S[i1] + Bs[i1]")
    text = (f"op {{name}}(X: {x.type}, S: {s.type}, Bs: {b.type}) -> Y: {x.type} {{\n"
            f"{body}    {T.at('Y', ax.i)} = {y}\n}}\n")
    cv.call(node.output[0], cv.op("instnorm", text), [x, s, b], x.shape, dtype=dt)


@converter("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"))
def group_normalization(cv, node, a):
    x = _float(cv, node.input[0], "the input")
    rank = len(x.shape)
    if rank < 2:
        raise cv.error(f"an input of rank {rank} (GroupNormalization needs N, C, ...)")
    if "num_groups" not in a:
        raise cv.error("the num_groups attribute is required")
    g = int(a["num_groups"])
    dt, (n, c) = x.dtype, x.shape[:2]
    if g < 1 or c % g:
        raise cv.error(f"{c} channels can't be split into {g} groups")
    ct = _stash(cv, a, dt)
    cg = c // g
    # opset 18 gave a scale and a bias per group; opset 21 per channel
    per = c if cv.opset >= 21 else g
    s, b = _float(cv, node.input[1], "the scale"), _float(cv, node.input[2], "the bias")
    for t, what in ((s, "scale"), (b, "bias")):
        _same_dtype(cv, t, x, what)
        if tuple(t.shape) != (per,):
            raise cv.error(f"the {what} has shape {list(t.shape)}; at opset {cv.opset} it "
                           f"is one per {'channel' if per == c else 'group'}, [{per}]")
    i = T.idx(rank)
    ranges = ([f"q: {cg}"] if cg > 1 else []) + [f"k{k}" for k in range(2, rank)]
    ch = "g" if cg == 1 else f"g * {cg} + q"
    cx = _cast(T.at("X", ["n", ch] + [f"k{k}" for k in range(2, rank)]), dt, ct)
    cnt = T.lit(float(cg * int(np.prod(x.shape[2:] or [1]))), ct)
    grp = f"{i[1]} // {cg}" if cg > 1 else i[1]
    d = f"({cx} - Mu[n, g])"
    eps = T.lit(a.get("epsilon", 1e-5), ct)
    pc = i[1] if per == c else grp
    y = _cast(f"({_cast(T.at('X', i), dt, ct)} - Mu[{i[0]}, {grp}]) * Inv[{i[0]}, {grp}]",
              ct, dt) + f" * S[{pc}] + Bs[{pc}]"
    text = (f"op {{name}}(X: {x.type}, S: {s.type}, Bs: {b.type}) -> Y: {x.type} {{\n"
            f"    Mu: {T.ty([n, g], ct)}\n"
            f"    Mu[n, g] = {_red('sum', ranges, cx)} / {cnt}\n"
            f"    V: {T.ty([n, g], ct)}\n"
            f"    V[n, g] = {_red('sum', ranges, f'{d} * {d}')} / {cnt}\n"
            f"    Inv: {T.ty([n, g], ct)}\n"
            f"    Inv[n, g] = 1.0 / sqrt(V[n, g] + {eps})\n"
            f"    {T.at('Y', i)} = {y}\n}}\n")
    cv.call(node.output[0], cv.op("groupnorm", text), [x, s, b], x.shape, dtype=dt)


# ---------------------------------------------------------------------------- Lp, MVN

@converter("LpNormalization", attrs=("axis", "p"))
def lp_normalization(cv, node, a):
    x = _float(cv, node.input[0], "the input")
    rank = len(x.shape)
    if rank == 0:
        raise cv.error("a scalar input (LpNormalization needs rank >= 1)")
    axis = _axis(cv, a.get("axis", -1), rank)
    p = a.get("p", 2)
    if p not in (1, 2):
        raise cv.error(f"p = {p} (LpNormalization defines p = 1 and p = 2)")
    ax = _Axes(x.shape, [axis])
    xr = T.at("X", ax.red)
    norm = _red("sum", ax.ranges, f"abs({xr})") if p == 1 else \
        f"sqrt({_red('sum', ax.ranges, f'{xr} * {xr}')})"
    xi = T.at("X", ax.i)
    zero = T.lit(0.0, x.dtype)
    text = (f"op {{name}}(X: {x.type}) -> Y: {x.type} {{\n{ax.decl('Nrm', x.dtype)}"
            f"    {ax.stat('Nrm')} = {norm}\n"
            f"    {T.at('Y', ax.i)} = select({ax.stat('Nrm')} == {zero}, {zero}, "
            f"{xi} / {ax.stat('Nrm')})\n}}\n")
    cv.call(node.output[0], cv.op("lpnorm", text), [x], x.shape, dtype=x.dtype)


@converter("MeanVarianceNormalization", attrs=("axes",))
def mean_variance_normalization(cv, node, a):
    x = _float(cv, node.input[0], "the input")
    rank = len(x.shape)
    axes = [int(v) for v in a.get("axes", [0, 2, 3])]
    axes = [_axis(cv, v, rank) for v in axes]
    if len(set(axes)) != len(axes):
        raise cv.error(f"repeated axes {a.get('axes')}")
    ax = _Axes(x.shape, axes)
    body = _moments(ax, x.dtype, x.dtype, 1e-9, std_eps=True)
    text = (f"op {{name}}(X: {x.type}) -> Y: {x.type} {{\n{body}"
            f"    {T.at('Y', ax.i)} = ({T.at('X', ax.i)} - {ax.stat('Mu')}) * "
            f"{ax.stat('Inv')}\n}}\n")
    cv.call(node.output[0], cv.op("mvn", text), [x], x.shape, dtype=x.dtype)


# ---------------------------------------------------------------------------- losses

def _log_softmax1(shape, dtype: str) -> str:
    """Log-softmax along axis 1 of [N, C, d1, ...], the maximum subtracted first."""
    i = T.idx(len(shape))
    rest = [v for k, v in enumerate(i) if k != 1]
    red = [s for k, s in enumerate(shape) if k != 1]
    xc = T.at("X", [i[0], "c"] + i[2:])
    m, s = T.at("M", rest), T.at("S", rest)
    return (f"op {{name}}(X: {T.ty(shape, dtype)}) -> Y: {T.ty(shape, dtype)} {{\n"
            f"    M: {T.ty(red, dtype)}\n    {m} = max[c]({xc})\n"
            f"    S: {T.ty(red, dtype)}\n    {s} = sum[c](exp({xc} - {m}))\n"
            f"    {T.at('Y', i)} = {T.at('X', i)} - {m} - log({s})\n}}\n")


def _nll_text(x: Tensor, t: Tensor, w: Tensor | None, reduction: str, ii) -> str:
    """The negative log-likelihood loss of log-probabilities ``x`` [N, C, d...] at the
    classes ``t`` [N, d...], weighted by ``w`` [C], reduced."""
    dt, c = x.dtype, x.shape[1]
    i = T.idx(len(t.shape))
    tv = T.at("Tg", i)
    cls = f"min(max({tv}, 0), {c - 1})"
    val = f"-{T.at('X', [i[0], cls] + i[1:])}"
    zero = T.lit(0.0, dt)
    params = [f"X: {x.type}", f"Tg: {t.type}"]
    wt = None
    if w is not None:
        params.append(f"Wc: {w.type}")
        val = f"{val} * Wc[{cls}]"
        wt = f"Wc[{cls}]"
    if ii is not None:
        val = f"select({tv} == {T.lit(ii, t.dtype)}, {zero}, {val})"
        wt = f"select({tv} == {T.lit(ii, t.dtype)}, {zero}, {wt or T.lit(1.0, dt)})"
    if reduction == "none":
        return (f"op {{name}}({', '.join(params)}) -> L: {T.ty(t.shape, dt)} {{\n"
                f"    {T.at('L', i)} = {val}\n}}\n")
    r = [f"r{k}" for k in range(len(t.shape))]
    total = f"sum[{', '.join(r)}](f64({T.at('E', r)}))"
    body = f"    E: {T.ty(t.shape, dt)}\n    {T.at('E', i)} = {val}\n"
    if reduction == "sum":
        res = total
    elif wt is None:
        res = f"{total} / {T.lit(float(np.prod(t.shape)), 'f64')}"
    else:
        body += f"    Wg: {T.ty(t.shape, dt)}\n    {T.at('Wg', i)} = {wt}\n"
        res = f"{total} / sum[{', '.join(r)}](f64({T.at('Wg', r)}))"
    return (f"op {{name}}({', '.join(params)}) -> L: {dt} {{\n{body}"
            f"    L = {_cast(res, 'f64', dt)}\n}}\n")


def _loss_inputs(cv, node, a):
    x = _float(cv, node.input[0], "the input")
    if len(x.shape) < 2:
        raise cv.error(f"an input of rank {len(x.shape)} (the loss needs N, C, ...)")
    t = cv.tensor(node.input[1])
    if t.dtype not in ("i64", "i32", "i16", "i8", "u8"):
        raise cv.error(f"the target is {t.dtype}; it must be an integer tensor")
    want = (x.shape[0],) + tuple(x.shape[2:])
    if tuple(t.shape) != want:
        raise cv.error(f"the target has shape {list(t.shape)}, expected {list(want)}")
    w = _float(cv, node.input[2], "the weight") if _opt(node, 2) else None
    if w is not None:
        _same_dtype(cv, w, x, "weight")
        if tuple(w.shape) != (x.shape[1],):
            raise cv.error(f"the weight has shape {list(w.shape)}, expected "
                           f"[{x.shape[1]}]")
    reduction = _text(a.get("reduction", "mean"))
    if reduction not in ("none", "sum", "mean"):
        raise cv.error(f"reduction '{reduction}' (none, sum or mean)")
    return x, t, w, reduction, a.get("ignore_index")


def _nll(cv, out: str, x: Tensor, t: Tensor, w, reduction, ii) -> None:
    text = _nll_text(x, t, w, reduction, ii)
    shape = tuple(t.shape) if reduction == "none" else ()
    cv.call(out, cv.op("nll", text), [x, t] + ([w] if w is not None else []), shape,
            dtype=x.dtype)


@converter("NegativeLogLikelihoodLoss", attrs=("ignore_index", "reduction"))
def nll_loss(cv, node, a):
    x, t, w, reduction, ii = _loss_inputs(cv, node, a)
    _nll(cv, node.output[0], x, t, w, reduction, ii)


@converter("SoftmaxCrossEntropyLoss", attrs=("ignore_index", "reduction"))
def softmax_cross_entropy_loss(cv, node, a):
    x, t, w, reduction, ii = _loss_inputs(cv, node, a)
    loss, log_prob = _outputs(node, 2)
    lp = log_prob or node.output[0] + "#logprob"
    if len(x.shape) == 2 and x.dtype == "f32":
        cv.call(lp, "log_softmax", [x], x.shape)
    else:
        cv.call(lp, cv.op("logsoftmax1", _log_softmax1(list(x.shape), x.dtype)), [x],
                x.shape, dtype=x.dtype)
    if loss is not None:
        _nll(cv, loss, cv.tensors[lp], t, w, reduction, ii)
