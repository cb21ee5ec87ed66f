"""An op's pattern, read off its tensor expression (never tagged by hand).

The TVM paper's four kinds, ordered as fusion sees them:

- ``INJECTIVE``: no reduction anywhere (elementwise, broadcasts, reshapes, padding);
- ``REDUCTION``: reductions, none of which multiplies two independent inputs (sums, max,
  pooling, softmax, normalisation statistics);
- ``COMPLEX``: "complex-out-fusable", a reduction of a product of two loads whose source
  inputs are disjoint (a contraction: conv2d, dense, matmul, depthwise conv);
- ``OPAQUE``: several outputs, or a data-dependent index (a load inside a subscript).
"""
from __future__ import annotations

import enum

from .. import te


class Pattern(enum.IntEnum):
    INJECTIVE = 0
    REDUCTION = 1
    COMPLEX = 2
    OPAQUE = 3


def classify(fn: te.Function) -> Pattern:
    if len(fn.outputs) != 1:
        return Pattern.OPAQUE
    stages = fn.stages()
    reduces = []
    for t in stages:
        for e in te.walk(t.op.body):
            if isinstance(e, te.Load) and any(isinstance(x, te.Load) for i in e.indices
                                              for x in te.walk(i)):
                return Pattern.OPAQUE
            if isinstance(e, te.Reduce):
                reduces.append(e)
    if not reduces:
        return Pattern.INJECTIVE
    if any(_is_contraction(r) for r in reduces):
        return Pattern.COMPLEX
    return Pattern.REDUCTION


def _is_contraction(r: te.Reduce) -> bool:
    """``sum[k](a * b)`` with ``a`` and ``b`` read from disjoint sets of inputs, each along
    a reduction axis (``sum(X * X)`` or a scaled sum is no contraction)."""
    if r.combiner != "sum" or not isinstance(r.body, te.Binary) or r.body.op != "*":
        return False
    axes = {ax.var for ax in r.axes}
    sides = []
    for side in (r.body.a, r.body.b):
        loads = list(te.loads(side))
        if not loads or not any(te.free_vars(i) & axes for ld in loads for i in ld.indices):
            return False
        sides.append(set().union(*(_sources(ld.tensor) for ld in loads)))
    return not (sides[0] & sides[1])


def _sources(t: te.Tensor) -> set[int]:
    """The placeholders ``t`` is computed from (by identity)."""
    return {id(x) for x in te.topo_tensors([t]) if x.is_placeholder}


def reads_elementwise(fn: te.Function, k: int) -> bool:
    """Whether every read of input ``k`` is at the output's own indices, in order, with the
    output's shape: ``Y[i, j] = f(X[i, j], ...)`` (what an epilogue fused after a complex
    op must do, so it can run on each output element as it is computed)."""
    if len(fn.outputs) != 1:
        return False
    out, x = fn.outputs[0], fn.inputs[k]
    if out.is_placeholder or len(fn.stages()) != 1 or x.ndim != out.ndim:
        return False
    axes = tuple(ax.var for ax in out.op.axes)
    reads = [ld for ld in te.loads(out.op.body) if ld.tensor is x]
    return bool(reads) and all(ld.indices == axes for ld in reads)


def reads_through_window(fn: te.Function, k: int) -> bool:
    """Whether some read of input ``k`` has an index that combines two loop variables
    (``X[n, c, 2 * y + r, 2 * x + s]``, a pooling window): the same element is read for
    several outputs, so a computation fused into that read is done several times over."""
    return any(len(te.free_vars(i)) > 1
               for t in fn.stages() if not t.is_placeholder
               for ld in te.loads(t.op.body) if ld.tensor is fn.inputs[k]
               for i in ld.indices)


def output_is_fusable(fn: te.Function) -> bool:
    """Whether an epilogue can be composed into the output stage: it has no reduction
    (dense's ``Y = P + b``), or it is one reduction at the top (the textbook conv2d's
    ``Y = sum[c, r, s](...)``, split off as its own stage when fused)."""
    out = fn.outputs[0]
    if out.is_placeholder:
        return False
    body = out.op.body
    if isinstance(body, te.Reduce):
        body = body.body
    return not any(isinstance(e, te.Reduce) for e in te.walk(body))


def reads_per_channel(fn: te.Function, k: int) -> bool:
    """Whether every input but ``k`` is read at the channel index alone (``b[c]``): an
    epilogue that a register tile of output channels can apply with vector loads."""
    out = fn.outputs[0]
    if out.is_placeholder or out.ndim < 2:
        return False
    channel = out.op.axes[1].var
    for ld in te.loads(out.op.body):
        if ld.tensor is fn.inputs[k]:
            continue
        if any(v != channel for i in ld.indices for v in te.free_vars(i)):
            return False
    return True


def output_is_reduction(fn: te.Function) -> bool:
    out = fn.outputs[0]
    return not out.is_placeholder and isinstance(out.op.body, te.Reduce)


def vectors_along_output(fn: te.Function) -> bool:
    """Whether the output is one contraction ``sum(a * b)`` in which the innermost output
    axis, wherever a load uses it, is that load's last index, alone: a vector of
    consecutive outputs then reads contiguous vectors (or broadcasts) of its operands (the
    blocked ``conv2d_nchwc``'s ``W[.., fi]``, ``depthwise_conv2d_nchwc``'s ``Xp[.., ci]``
    and ``W[.., ci]``, matmul's ``B[k, j]``; not the NCHW ``conv2d``, whose ``x`` reads
    ``Xp[.., x + s]``). A register tile then holds vectors along the output's contiguous
    axis, and an epilogue reads any tensor of the output's shape (a residual) as whole
    vectors too."""
    out = fn.outputs[0] if len(fn.outputs) == 1 else None
    if out is None or out.is_placeholder or not out.op.axes:
        return False
    r = out.op.body
    if not isinstance(r, te.Reduce) or not isinstance(r.body, te.Binary) or r.body.op != "*":
        return False
    inner = out.op.axes[-1].var
    using = [ld for ld in te.loads(r.body)
             if any(inner in te.free_vars(i) for i in ld.indices)]
    return bool(using) and all(
        ld.indices[-1] == inner and not any(inner in te.free_vars(i) for i in ld.indices[:-1])
        for ld in using)


def moves_values_only(fn: te.Function) -> bool:
    """Whether ``fn`` only moves values (loads, selects on index conditions, casts):
    concatenations, pads, transposes. Arithmetic on the values, as a requantize does,
    makes it false; index arithmetic in subscripts and conditions does not count."""
    def arithmetic(e) -> bool:
        if isinstance(e, te.Load) or not isinstance(e, te.Expr):
            return False
        if e.dtype not in (te.INDEX, "bool") and (
                isinstance(e, (te.Binary, te.Intrinsic)) or
                (isinstance(e, te.Unary) and e.op == "-")):
            return True
        return any(arithmetic(c) for c in te.children(e))
    return not any(arithmetic(t.op.body) for t in fn.stages())
