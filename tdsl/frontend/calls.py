"""``T = op(X, Y; attr=v)`` inside an op: instantiate the callee and splice its stages in.

The callee's sizes are bound by unifying its parameter shapes with the arguments' shapes
(a plain size binds; an expression must then be equal); its stages are copied with their
loads pointing at the caller's tensors, renamed ``T`` (the output) and ``T_<stage>``
(the callee's intermediates), so every name stays a valid C identifier.
"""
from __future__ import annotations

from ..errors import CheckError, TdslError
from ..lowering import affine, te
from . import ast
from .exprs import ExprConverter, const_value


def splice_call(inst, st: ast.CallStage) -> None:
    call = st.call
    callee = inst.resolve_op(call.func)
    if callee is None:
        raise CheckError(f"unknown op '{call.func}'", call.span,
                         hint="define it in this file or import the file that does")
    args = []
    for a in call.args:
        if not isinstance(a, ast.Name):
            raise CheckError("op arguments are whole tensors, written by name", a.span,
                             hint="compute the argument as a stage first")
        t = inst._tensor_for(a.id, a.span)
        if t is None:
            raise ExprConverter(inst._scope(), inst)._unknown(a.id, a.span)
        args.append(t)
    kwargs = {}
    for k, v in call.kwargs:
        try:
            kwargs[k] = const_value(v, inst.attrs)
        except CheckError:
            # a caller attribute that is still symbolic (only while checking)
            if isinstance(v, ast.Name) and isinstance(inst.attrs.get(v.id), te.Expr):
                kwargs[k] = inst.attrs[v.id]
            else:
                raise
    try:
        fn = callee.instantiate_for_call(kwargs, [t.ndim for t in args], call.span)
    except CheckError:
        raise
    except TdslError as e:
        raise CheckError(e.message, call.span, e.hint) from None
    if len(args) != len(fn.inputs):
        raise CheckError(f"op {call.func} takes {len(fn.inputs)} arguments, got {len(args)}",
                         call.span)
    if len(st.targets) != len(fn.outputs):
        raise CheckError(f"op {call.func} has {len(fn.outputs)} outputs but "
                         f"{len(st.targets)} names are assigned", st.span)
    binding = _bind_sizes(fn, args, call)
    renamed = _copy_stages(fn, args, binding, st.targets)
    for target, out in zip(st.targets, fn.outputs):
        t = renamed[id(out)]
        info = inst.stages[target]
        if info.shape is not None:
            _check_declared(info, t, call)
        info.tensor, info.dtype, info.shape = t, t.dtype, t.shape


def _bind_sizes(fn: te.Function, args, call) -> dict[te.Var, te.Expr]:
    binding: dict[te.Var, te.Expr] = {}
    for pos, (p, a) in enumerate(zip(fn.inputs, args), 1):
        if p.dtype != a.dtype:
            raise CheckError(f"argument {pos} of {call.func} ('{a.name}') is {a.dtype} but "
                             f"{p.dtype} is expected", call.args[pos - 1].span,
                             hint=f"cast it first: T[...] = {p.dtype}({a.name}[...])")
        if p.ndim != a.ndim:
            raise CheckError(f"argument {pos} of {call.func} ('{a.name}') has rank {a.ndim} "
                             f"but rank {p.ndim} is expected", call.args[pos - 1].span)
        for d, (want, got) in enumerate(zip(p.shape, a.shape)):
            if isinstance(want, te.Var) and want not in binding:
                binding[want] = got
    for pos, (p, a) in enumerate(zip(fn.inputs, args), 1):
        for d, (want, got) in enumerate(zip(p.shape, a.shape)):
            expect = te.substitute(want, binding)
            if not affine.equal(expect, got) and _both_known(expect, got):
                raise CheckError(f"argument {pos} of {call.func} ('{a.name}'): dimension {d} "
                                 f"is {got} but {expect} is expected", call.args[pos - 1].span)
    return binding


def _both_known(a, b) -> bool:
    """Only report a mismatch the checker can be sure of: two different constants, or
    expressions in the same sizes that differ by a constant."""
    pa, pb = affine.from_expr(a), affine.from_expr(b)
    return pa is not None and pb is not None and (pa - pb).is_const


def _copy_stages(fn: te.Function, args, binding, targets) -> dict[int, te.Tensor]:
    mapping: dict[int, te.Tensor] = {id(p): a for p, a in zip(fn.inputs, args)}
    out_names = {id(o): t for o, t in zip(fn.outputs, targets)}
    prefix = targets[0]

    def post(e):
        if isinstance(e, te.Var) and e in binding:
            return binding[e]
        if isinstance(e, te.Load) and id(e.tensor) in mapping:
            return te.Load(mapping[id(e.tensor)], e.indices, e.dtype)
        return None

    for t in fn.stages():
        name = out_names.get(id(t), f"{prefix}_{t.name}")
        axes = tuple(te.IterVar(ax.var, te.rewrite(ax.extent, post), ax.kind)
                     for ax in t.op.axes)
        body = te.rewrite(t.op.body, post)
        shape = tuple(te.rewrite(s, post) for s in t.shape)
        mapping[id(t)] = te.Tensor(name, shape, t.dtype, te.Compute(axes, body))
    return mapping


def _check_declared(info, t: te.Tensor, call):
    if info.dtype != t.dtype:
        raise CheckError(f"'{info.name}' is declared {info.dtype} but {call.func} returns "
                         f"{t.dtype}", call.span)
    if len(info.shape) != t.ndim or not all(
            affine.equal(a, b) or not _both_known(a, b) for a, b in zip(info.shape, t.shape)):
        shape = ", ".join(map(str, t.shape))
        raise CheckError(f"'{info.name}' is declared with shape "
                         f"[{', '.join(map(str, info.shape))}] but {call.func} returns "
                         f"[{shape}]", call.span)
