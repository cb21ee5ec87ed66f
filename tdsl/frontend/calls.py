"""``T = op(X, Y; attr=v)`` inside an op: instantiate the callee and splice its stages in.

The callee's sizes are bound by unifying its parameter shapes with the arguments' shapes
(a plain size binds; an expression must then be equal); its stages are copied with their
loads pointing at the caller's tensors, renamed ``T`` (the output) and ``T_<stage>``
(the callee's intermediates), so every name stays a valid C identifier.
"""
from __future__ import annotations

import difflib
import functools
import random
import re

from ..dsl import STD_DIR
from ..errors import CheckError, TdslError
from ..lowering import te
from ..lowering.arith.evaluate import NotAnIndex, UnboundVar, eval_index
from ..lowering.arith.linear import exact, normal_form
from . import ast
from .exprs import ExprConverter, const_value


def splice_call(inst, st: ast.CallStage) -> None:
    call = st.call
    callee = inst.resolve_op(call.func)
    if callee is None:
        raise CheckError(f"unknown op '{call.func}'", call.span,
                         hint=unknown_op_hint(call.func, inst.op_names))
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
    check_arity(fn, args, st, call)
    binding = bind_sizes(fn, args, call)
    taken = {v.name for x in kwargs.values() if isinstance(x, te.Expr) for v in te.free_vars(x)}
    renamed = _copy_stages(fn, args, binding, st.targets, taken, inst.spliced | set(inst.stages))
    inst.spliced.update(t.name for t in renamed.values())
    for target, out in zip(st.targets, fn.outputs):
        t = renamed[id(out)]
        info = inst.stages[target]
        if info.shape is not None:
            _check_declared(info, t, call, args)
        info.tensor, info.dtype, info.shape = t, t.dtype, t.shape


@functools.lru_cache(maxsize=1)
def _std_op_names() -> frozenset[str]:
    """The standard library's op names, read off its files (it may not be loaded)."""
    return frozenset(m.group(1) for f in STD_DIR.glob("*.tdsl")
                     for m in re.finditer(r"^op\s+(\w+)", f.read_text(), re.M))


def unknown_op_hint(name: str, in_scope) -> str:
    std = _std_op_names()
    if name in std:
        return f"{name} is in the standard library: add `import std`"
    close = difflib.get_close_matches(name, [*in_scope, *std], n=1)
    if close:
        return f"did you mean '{close[0]}'?" + ("" if close[0] in in_scope else " (import std)")
    return "define it in this file or import the file that does"


def check_arity(fn: te.Function, args, st, call: ast.Call, hint: str | None = None) -> None:
    """A call of ``fn`` (in an op or a graph) has its arguments and assigns its outputs."""
    if len(args) != len(fn.inputs):
        n = len(fn.inputs)
        raise CheckError(f"op {call.func} takes {n} argument{'s' * (n != 1)}, got {len(args)}",
                         call.span, hint=hint)
    if len(st.targets) != len(fn.outputs):
        n = len(st.targets)
        raise CheckError(f"op {call.func} has {len(fn.outputs)} output"
                         f"{'s' * (len(fn.outputs) != 1)} but {n} name"
                         f"{' is' if n == 1 else 's are'} assigned", st.span)


def bind_sizes(fn: te.Function, args, call) -> dict[te.Var, te.Expr]:
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
    valid = [s for a in args for s in a.shape]
    for pos, (p, a) in enumerate(zip(fn.inputs, args), 1):
        for d, (want, got) in enumerate(zip(p.shape, a.shape)):
            expect = te.substitute(want, binding)
            example = differ(got, expect, valid)
            if example is not None:
                raise CheckError(f"argument {pos} of {call.func} ('{a.name}'): dimension {d} "
                                 f"is {got} but {expect} is expected", call.args[pos - 1].span,
                                 hint=differ_hint(example, got, expect))
    return binding


# Size values tried when two size expressions can't be shown equal or different by algebra.
_RNG = random.Random(0)
_SAMPLES = [(1,) * 8, (2,) * 8, (3, 5, 7, 11, 13, 17, 19, 23), (8, 6, 4, 2, 9, 7, 5, 3)] + [
    tuple(_RNG.randint(1, 40) for _ in range(8)) for _ in range(40)]


def differ(a: te.Expr, b: te.Expr, valid=()) -> dict | None:
    """Values of the sizes for which ``a`` and ``b`` are two different positive extents (and
    every expression in ``valid`` is a positive extent too), or None if none was found.

    Algebra (`arith.linear`) settles sums and products; for the rest (``//``, ``%``, min, max) a
    fixed set of sample values is tried, so two expressions equal for all sizes are never
    reported, and ones that differ are found unless they agree on every sample.
    """
    pa, pb = exact(a), exact(b)
    if pa is not None and pb is not None and (pa - pb).is_const:
        return None if (pa - pb).const == 0 else {}
    names = sorted({v.name for e in (a, b) for v in te.free_vars(e)})
    if len(names) > 8:
        return None
    for values in _SAMPLES:
        env = dict(zip(names, values))
        x, y = _eval(a, env), _eval(b, env)
        if x is None or y is None or x < 1 or y < 1 or x == y:
            continue
        if all((v := _eval(e, env)) is None or v >= 1 for e in valid):
            return env
    return None


def _eval(e: te.Expr, env: dict) -> int | None:
    """The value of an integer size expression, or None (unknown variable, division by 0,
    or an expression that is not integer arithmetic)."""
    try:
        return eval_index(e, env)
    except (UnboundVar, NotAnIndex, ZeroDivisionError):
        return None


def differ_hint(example: dict, a, b) -> str | None:
    if not example:
        return None
    where = ", ".join(f"{k} = {v}" for k, v in example.items())
    return f"they differ, e.g. with {where}: {_eval(a, example)} and {_eval(b, example)}"


def _copy_stages(fn: te.Function, args, binding, targets, taken=(), tensor_names=()
                 ) -> dict[int, te.Tensor]:
    """Copies of the callee's stages reading the caller's tensors and sizes.

    The callee's index variables are renamed where they meet a name of the caller's
    (``taken``: its sizes and symbolic attributes), since variables are equal by name; its
    intermediates become ``T_<name>``, numbered if that is in ``tensor_names`` already.
    """
    used_names = set(tensor_names)
    mapping: dict[int, te.Tensor] = {id(p): a for p, a in zip(fn.inputs, args)}
    out_names = {id(o): t for o, t in zip(fn.outputs, targets)}
    prefix = targets[0]
    rename = _index_renames(fn, set(taken) | {v.name for e in binding.values()
                                              for v in te.free_vars(e)})

    def post(e):
        if isinstance(e, te.Var) and e in binding:
            return binding[e]
        if isinstance(e, te.Var) and e.name in rename:
            return te.Var(rename[e.name], e.dtype)
        if isinstance(e, te.Reduce) and any(ax.var.name in rename for ax in e.axes):
            return te.Reduce(e.combiner, e.body, tuple(_renamed(ax, rename) for ax in e.axes),
                             e.dtype)
        if isinstance(e, te.Load) and id(e.tensor) in mapping:
            return te.Load(mapping[id(e.tensor)], e.indices, e.dtype)
        return None

    for t in fn.stages():
        name = out_names.get(id(t))
        if name is None:
            name, k = f"{prefix}_{t.name}", 1
            while name in used_names:
                name, k = f"{prefix}_{t.name}{k}", k + 1
            used_names.add(name)
        # sizes in normal form: `(H + 2 * 1 - 3) // 2 + 1` reads `(H - 1) // 2 + 1`
        axes = tuple(_renamed(te.IterVar(ax.var, normal_form(te.rewrite(ax.extent, post)),
                                         ax.kind), rename) for ax in t.op.axes)
        body = te.rewrite(t.op.body, post)
        shape = tuple(normal_form(te.rewrite(s, post)) for s in t.shape)
        mapping[id(t)] = te.Tensor(name, shape, t.dtype, te.Compute(axes, body))
    return mapping


def _index_renames(fn: te.Function, taken: set[str]) -> dict[str, str]:
    """New names for the callee's index variables that are in ``taken``."""
    index, used = set(), set(taken)
    for t in fn.stages():
        index.update(ax.var.name for ax in t.op.axes)
        for e in te.walk(t.op.body):
            if isinstance(e, te.Reduce):
                index.update(ax.var.name for ax in e.axes)
            elif isinstance(e, te.Var):
                used.add(e.name)
    used |= index
    rename = {}
    for n in sorted(index & set(taken)):
        k = 1
        while f"{n}{k}" in used:
            k += 1
        rename[n] = f"{n}{k}"
        used.add(rename[n])
    return rename


def _renamed(ax: te.IterVar, rename: dict) -> te.IterVar:
    if ax.var.name not in rename:
        return ax
    return te.IterVar(te.Var(rename[ax.var.name], ax.var.dtype), ax.extent, ax.kind)


def _check_declared(info, t: te.Tensor, call, args):
    if info.dtype != t.dtype:
        raise CheckError(f"'{info.name}' is declared {info.dtype} but {call.func} returns "
                         f"{t.dtype}", call.span)
    shape = ", ".join(map(str, t.shape))
    declared = ", ".join(map(str, info.shape))
    if len(info.shape) != t.ndim:
        raise CheckError(f"'{info.name}' is declared with shape [{declared}] but "
                         f"{call.func} returns [{shape}]", call.span)
    for d, (a, b) in enumerate(zip(info.shape, t.shape)):
        example = differ(a, b, [s for arg in args for s in arg.shape])
        if example is not None:
            raise CheckError(f"'{info.name}' is declared with shape [{declared}] but "
                             f"{call.func} returns [{shape}]", call.span,
                             hint=f"dimension {d}: " + (differ_hint(example, a, b) or
                                                        f"{a} is not {b}"))
