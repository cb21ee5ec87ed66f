"""``schedule OP for TARGET { ... }`` blocks -> `Schedule` values.

Each statement is a call of a primitive; axes are written ``C.i`` (stage ``C``, axis ``i``)
or, once a primitive of this block has named them, by their bare name (``io`` after
``io, ii = split(C.i, 8)``). Numbers may be expressions of ``knob``s (``tj // 16``);
``if COND { ... } else { ... }`` applies statements depending on the knobs and
``require COND`` constrains them. The target's facts are constants every expression may
name: ``lanes`` (f32 per vector), ``registers``, ``l1`` and ``l2`` (bytes), and on GPUs
``warp``, ``max_threads`` and ``shared_bytes`` (see tdsl/target.py): ``split(C.j, lanes)``,
``knob tj in [lanes, 2 * lanes] = 2 * lanes``. Everything here only translates:
whether a primitive can apply is decided when the schedule is applied during lowering,
which raises a `ScheduleError` pointing at the statement.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import operator

from ..errors import ScheduleError, TdslError
from ..lowering import te
from ..lowering.schedule import Knob, KnobDecl, KnobExpr, Schedule, knob_value
from ..target import as_target
from . import ast
from .exprs import const_value

# the word after ``for`` in a schedule block -> the target kinds the block serves
# (c-embedded takes the cpu blocks too: its printer runs parallel loops serially and prints
# vector code only where the CPU has vectors; ``for embedded`` blocks serve it alone. ``gpu``
# serves both GPU languages: thread bindings, shared memory and barriers mean the same in
# CUDA and OpenCL)
TARGETS = {"cpu": ("c", "c-embedded"), "c": ("c",), "embedded": ("c-embedded",),
           "cuda": ("cuda",), "opencl": ("opencl",), "gpu": ("cuda", "opencl")}


def block_serves(block_target: str, kind: str) -> bool:
    """Whether a block written ``for block_target`` schedules builds for target ``kind``."""
    return kind in TARGETS.get(block_target, ())

# primitive -> (number of names it binds, positional parameter kinds)
# kinds: "axis" (C.i), "axes" (several axes), "stage", "int", "str", "stages"
_SIGNATURES = {
    "split": (2, ("axis", "int")),
    "tile": (4, ("axis", "axis", "int", "int")),
    "fuse": (1, ("axes",)),
    "reorder": (0, ("axes",)),
    "compute_at": (0, ("stage", "axis")),
    "compute_inline": (0, ("stage",)),
    "compute_root": (0, ("stage",)),
    "cache_read": (1, ("stage", "str", "stages")),
    "cache_write": (1, ("stage", "str")),
    "rfactor": (1, ("axis", "int")),
    "set_scope": (0, ("stage", "str")),
    "vectorize": (0, ("axis",)),
    "unroll": (0, ("axis",)),
    "parallel": (0, ("axis",)),
    "bind": (0, ("axis", "str")),
    "storage_align": (0, ("axis", "int", "int")),
    "tensorize": (0, ("axis", "str")),
    "pack": (2, ("axis", "int")),
    "pad": (0, ("axis", "int")),
    "prefetch": (0, ("stage", "axis", "axis")),
}


def to_schedule(sdef: ast.ScheduleDef, fn: te.Function, intrinsics: dict | None = None,
                shapes: dict | None = None, target=None) -> Schedule:
    """The block as a `Schedule` of ``fn`` for ``target`` (the host by default); ``shapes``
    (sizes known now) serve knobs whose choices depend on them (``factors(N)``)."""
    sched = Schedule(fn)
    consts = as_target(target).constants()
    sizes = _sizes_for_defaults(fn, shapes or {})
    for st in sdef.body:
        if isinstance(st, ast.KnobDecl):
            default = _default(st.default, {**sizes, **consts}) if st.default is not None \
                else None
            if st.generator is not None:
                choices = _generated_choices(st.generator, fn, {**consts, **(shapes or {})})
                if default is not None:          # the nearest choice not above it
                    default = max((c for c in choices if c <= default), default=choices[0])
            else:
                choices = tuple(dict.fromkeys(_constant(c, consts) for c in st.choices))
                if default is not None and default not in choices and \
                        _literal(st.default) and all(map(_literal, st.choices)):
                    raise ScheduleError(
                        f"the default {default!r} of knob {st.name} is not one of its choices "
                        f"{list(choices)}", st.default.span,
                        hint=f"pick one of them, or add {default!r} to the choices")
                if _is_number(default) and default not in choices \
                        and all(_is_number(c) for c in choices):
                    # a default computed from the target (`l2 // (32768 * lanes)`) snaps to
                    # the nearest choice not above it, as a generated knob's does
                    default = max((c for c in choices if c <= default), default=min(choices))
            sched = sched.knob(st.name, choices, default, span=st.span)
    knobs = {k.name: Knob(k.name) for k in sched.knobs}
    # a knob's name shadows a target constant of the same name
    names = {**consts, **knobs}
    owner: dict[str, str] = {}          # axis named in this block -> its stage
    sched = _apply_block(sched, sdef.body, names, owner, intrinsics or {}, top=True)
    return _first_allowed(sched, [st.name for st in sdef.body
                                  if isinstance(st, ast.KnobDecl) and st.default is None])


FIRST_ALLOWED_LIMIT = 100_000     # configurations tried for the defaults, at most


def _first_allowed(sched: Schedule, free: list[str]) -> Schedule:
    """The schedule whose knobs without a written default (``free``) default to the first
    configuration the ``require``s allow (each knob's choices in order, the first knob
    slowest; written defaults kept), not to their first choices when a ``require`` rules
    those out (``knob t in factors(N)`` with ``require t >= 2``). Unchanged when the
    defaults are allowed, or when no setting of the free knobs is."""
    if not free or not sched.constraints:
        return sched
    decls = {k.name: k for k in sched.knobs}
    values = {n: k.default for n, k in decls.items()}

    def allowed(vals) -> bool:
        try:
            return all(knob_value(c, vals) for c in sched.constraints)
        except TdslError:
            return False
    if allowed(values):
        return sched
    for n, config in enumerate(itertools.product(*(decls[k].choices for k in free))):
        if n >= FIRST_ALLOWED_LIMIT:
            break
        vals = {**values, **dict(zip(free, config))}
        if allowed(vals):
            return dataclasses.replace(sched, knobs=tuple(
                KnobDecl(k.name, k.choices, vals[k.name], k.span) for k in sched.knobs))
    return sched


def _literal(node) -> bool:
    """A choice or default written without a name (``16``, ``-1``, ``2 * 8``, ``true``): one
    that means the same on every target and for every size."""
    if isinstance(node, ast.Name):
        return False
    return all(_literal(x) for v in vars(node).values()
               for x in (v if isinstance(v, tuple) else (v,)) if isinstance(x, ast.Node))


def _sizes_for_defaults(fn: te.Function, shapes: dict) -> dict:
    """The op's sizes and integer attributes as knob defaults see them: their values where
    this build fixes them, unbounded (infinity) where it does not."""
    env = {v.name: math.inf for v in fn.shape_vars}
    env.update((k, v) for k, v in dict(fn.attrs).items()
               if isinstance(v, int) and not isinstance(v, bool))
    env.update(shapes)       # a fused kernel's anchor sizes are given, not its own
    return env


def _default(node, env: dict):
    """A knob's default: a constant, or an integer expression of the target's constants and
    the op's sizes (``7 * min(registers // 16, CI)``), with ``+ - * // %`` and
    ``min``/``max``. A size the build leaves free is unbounded, so ``min(a, CI)`` is ``a``
    and ``2 // CI`` is 0 then: write a default so that it reads right for large sizes."""
    match node:
        case ast.Name(n) if n in env:
            return env[n]
        case ast.Binary(op, left, right) if op in _INT_OPS:
            a, b = _numbers(node, _default(left, env), _default(right, env))
            if op in ("//", "%") and b == 0:
                raise ScheduleError("division by zero", node.span)
            if op in ("//", "%") and math.isinf(b):
                return 0 if op == "//" else a       # floor(a / inf), a mod inf (a >= 0)
            if op == "//" and math.isinf(a) and b > 0:
                return a                            # floor(inf / b)
            return _integral(node, _INT_OPS[op](a, b))
        case ast.Call(func, args, ()) if func in ("min", "max") and len(args) == 2:
            a, b = _numbers(node, *(_default(x, env) for x in args))
            return _integral(node, (min if func == "min" else max)(a, b))
    return _constant(node, env)


def _numbers(node, a, b) -> tuple:
    if not (_is_number(a) and _is_number(b)):
        raise ScheduleError("a default computed with + - * // % min max is a number of the "
                            "target's constants and the op's sizes", node.span)
    return a, b


def _integral(node, v):
    if isinstance(v, float) and math.isnan(v):
        raise ScheduleError("this default has no value while a size in it is not fixed",
                            node.span, hint="fix the size (shapes=) or write the default so "
                                            "that it reads right for large sizes")
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _constant(node, consts: dict):
    """A knob choice or default: a constant, possibly an integer expression of the target's
    constants (``2 * lanes``)."""
    v = _knob_expr(node, consts)
    if isinstance(v, (Knob, KnobExpr)):
        raise ScheduleError("a knob's choices and default are constants", node.span)
    return v


def _apply_block(sched: Schedule, body, knobs, owner, intrinsics, top=False) -> Schedule:
    for st in body:
        if isinstance(st, ast.KnobDecl):
            if not top:
                raise ScheduleError(f"knob {st.name} is declared inside an `if`", st.span,
                                    hint="declare knobs at the top of the schedule block")
        elif isinstance(st, ast.SchedRequire):
            sched = sched.require(_knob_expr(st.cond, knobs), span=st.span)
        elif isinstance(st, ast.SchedIf):
            def branch(stmts):
                return lambda s: _apply_block(s, stmts, knobs, owner, intrinsics)
            sched = sched.when(_knob_expr(st.cond, knobs), branch(st.then),
                               branch(st.orelse), span=st.span)
        else:
            sched = _apply_call(sched, st, knobs, owner, intrinsics)
    return sched


def _generated_choices(call: ast.Call, fn: te.Function, shapes: dict) -> tuple:
    """``factors(E)``: the divisors of the size E (``factors(E, m)``: those up to m), the
    split factors that leave no tail, as TVM's ``define_split`` enumerates them."""
    if call.func != "factors" or not 1 <= len(call.args) <= 2 or call.kwargs:
        raise ScheduleError(f"knob choices are a list `[...]` or `factors(SIZE[, MAX])`, "
                            f"not {call.func}(...)", call.span)
    env = {**dict(fn.attrs), **shapes}
    n, *cap = (_size_value(a, env) for a in call.args)
    limit = cap[0] if cap else n
    return tuple(d for d in range(1, min(n, limit) + 1) if n % d == 0)


_INT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul,
            "//": operator.floordiv, "%": operator.mod}


def _size_value(node, env) -> int:
    """An integer expression of sizes and attributes, e.g. ``IW + 2 * padding``."""
    match node:
        case ast.Number() if not node.is_float:
            return int(node.text)
        case ast.Name(n) if isinstance(env.get(n), int) and not isinstance(env[n], bool):
            return env[n]
        case ast.Name(n):
            raise ScheduleError(f"factors({n}) needs the size {n} when the schedule is made",
                                node.span, hint=f"give it, e.g. shapes={{'{n}': 64}} or "
                                                f"--shape {n}=64")
        case ast.Binary(op, left, right) if op in _INT_OPS:
            return _INT_OPS[op](_size_value(left, env), _size_value(right, env))
    raise ScheduleError("expected an integer expression of sizes and attributes",
                        getattr(node, "span", None))


def _knob_expr(node, knobs):
    """A condition or number over knobs as a `KnobExpr` (constants fold to values).
    ``knobs`` maps names to `Knob`s, or to the target's constants."""
    match node:
        case ast.Name(n) if isinstance(knobs.get(n), Knob):
            return Knob(n, node.span)
        case ast.Name(n) if n in knobs:
            return knobs[n]
        case ast.Binary(op, left, right):
            a, b = _knob_expr(left, knobs), _knob_expr(right, knobs)
            if op in _INT_OPS and all(isinstance(x, int) and not isinstance(x, bool)
                                      for x in (a, b)):
                if op in ("//", "%") and b == 0:
                    raise ScheduleError("division by zero", node.span)
                return _INT_OPS[op](a, b)
            return KnobExpr(op, (a, b), node.span)
        case ast.Call(func, args, ()) if func in ("min", "max") and len(args) == 2:
            a, b = (_knob_expr(x, knobs) for x in args)
            if all(_is_number(x) for x in (a, b)):
                return (min if func == "min" else max)(a, b)
            return KnobExpr(func, (a, b), node.span)
        case ast.Unary(op, operand):
            v = _knob_expr(operand, knobs)
            if op == "-" and isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v
            return KnobExpr("not" if op == "not" else "neg", (v,), node.span)
        case ast.Name(n):
            try:
                return const_value(node, {})
            except TdslError:
                known = sorted(k for k, v in knobs.items() if isinstance(v, Knob))
                raise ScheduleError(f"'{n}' is not a knob of this schedule", node.span,
                                    hint=f"knobs: {', '.join(known) or 'none'}; target "
                                         f"constants: lanes, registers, l1, l2") \
                    from None
    return const_value(node, {})


def _apply_call(sched: Schedule, st: ast.SchedCall, knobs, owner, intrinsics) -> Schedule:
    if st.func not in _SIGNATURES:
        raise ScheduleError(f"unknown schedule primitive '{st.func}'", st.span,
                            hint=f"primitives are {', '.join(_SIGNATURES)}")
    n_names, kinds = _SIGNATURES[st.func]
    args = list(st.args)
    if kinds[-1] in ("axes", "stages"):
        fixed = len(kinds) - 1
        if len(args) < fixed:
            raise _arity(st, f"at least {fixed}")
        rest = args[fixed:]
        args = args[:fixed] + [rest]
    elif st.func == "storage_align" and len(args) == 2:
        args.append(ast.Number("0", st.span))
    elif st.func == "pad" and len(args) == 1:
        args.append(ast.Number("1", st.span))
    if len(args) != len(kinds):
        raise _arity(st, str(len(kinds)))
    if st.targets and len(st.targets) != n_names:
        raise ScheduleError(f"{st.func} gives {n_names} name{'s' * (n_names != 1)}, but "
                            f"{len(st.targets)} are assigned", st.span)
    vals = [_arg(a, k, st, knobs, owner) for a, k in zip(args, kinds)]
    names = list(st.targets) + [None] * (n_names - len(st.targets))
    span = st.span
    f = st.func
    if f == "split":
        (stage, axis), factor = vals
        _own(owner, stage, names)
        return sched.split(stage, axis, factor, names[0], names[1], span=span)
    if f == "pack":
        (stage, axis), factor = vals
        _own(owner, stage, names)
        return sched.pack(stage, axis, factor, names[0], names[1], span=span)
    if f == "pad":
        (stage, axis), multiple = vals
        return sched.pad(stage, axis, multiple, span=span)
    if f == "tile":
        (stage, x), (stage2, y), fx, fy = vals
        _same_stage(stage, stage2, st)
        _own(owner, stage, names)
        return sched.tile(stage, x, y, fx, fy, *names, span=span)
    if f == "fuse":
        (axes,) = vals
        stage = _one_stage(axes, st)
        _own(owner, stage, names)
        return sched.fuse(stage, *[a for _, a in axes], fused=names[0], span=span)
    if f == "reorder":
        (axes,) = vals
        return sched.reorder(_one_stage(axes, st), *[a for _, a in axes], span=span)
    if f == "compute_at":
        stage, (consumer, axis) = vals
        return sched.compute_at(stage, consumer, axis, span=span)
    if f in ("compute_inline", "compute_root"):
        return getattr(sched, f)(vals[0], span=span)
    if f == "cache_read":
        tensor, scope, readers = vals
        return sched.cache_read(tensor, scope, tuple(readers), names[0], span=span)
    if f == "set_scope":
        stage, scope = vals
        return sched.set_scope(stage, scope, span=span)
    if f == "rfactor":
        (stage, axis), factor = vals
        return sched.rfactor(stage, axis, factor, names[0], span=span)
    if f == "cache_write":
        stage, scope = vals
        return sched.cache_write(stage, scope, names[0], span=span)
    if f in ("vectorize", "unroll", "parallel"):
        (stage, axis), = vals
        return getattr(sched, f)(stage, axis, span=span)
    if f == "bind":
        (stage, axis), tag = vals
        return sched.bind(stage, axis, tag, span=span)
    if f == "storage_align":
        (stage, axis), factor, offset = vals
        return sched.storage_align(stage, axis, factor, offset, span=span)
    if f == "prefetch":
        tensor, (stage, axis), (at_stage, at_axis) = vals
        return sched.prefetch(tensor, stage, axis, at_stage, at_axis, span=span)
    if f == "tensorize":
        (stage, axis), name = vals
        if name not in intrinsics:
            raise ScheduleError(f"unknown tensor intrinsic '{name}'", st.span,
                                hint=f"known: {', '.join(intrinsics) or 'none'}")
        return sched.tensorize(stage, axis, intrinsics[name], span=span)
    raise AssertionError(f)


def _arg(node, kind, st, knobs, owner):
    if kind == "axis":
        return _axis(node, owner)
    if kind == "axes":
        return [_axis(a, owner) for a in node]
    if kind == "stage":
        return _stage(node)
    if kind == "stages":
        return [_stage(a) for a in node]
    if kind == "str":
        if isinstance(node, ast.String):
            return node.value
        if isinstance(node, ast.Name):        # a bare word: "local" or local alike
            return node.id
        if isinstance(node, ast.Member):      # a thread axis: threadIdx.x or "threadIdx.x"
            return f"{node.base}.{node.attr}"
        raise ScheduleError("expected a name or a string here", node.span)
    v = _knob_expr(node, knobs)
    if isinstance(v, (Knob, KnobExpr)):
        return v
    if not isinstance(v, int) or isinstance(v, bool):
        raise ScheduleError(f"expected an integer or a knob, got {v!r}", node.span)
    return v


def _axis(node, owner) -> tuple[str, str]:
    if isinstance(node, ast.Member):
        return node.base, node.attr
    if isinstance(node, ast.Name):
        if node.id in owner:
            return owner[node.id], node.id
        raise ScheduleError(f"axis '{node.id}' needs its stage, e.g. C.{node.id}", node.span,
                            hint="only axes named in this schedule may be written bare")
    raise ScheduleError("expected an axis, written STAGE.AXIS (e.g. C.i)",
                        getattr(node, "span", None))


def _stage(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    raise ScheduleError("expected a stage (a tensor name)", getattr(node, "span", None))


def _own(owner, stage, names):
    for n in names:
        if n is not None:
            owner[n] = stage


def _one_stage(axes, st) -> str:
    stages = {s for s, _ in axes}
    if len(stages) != 1:
        raise ScheduleError(f"{st.func} takes axes of one stage, got {', '.join(sorted(stages))}",
                            st.span)
    return stages.pop()


def _same_stage(a, b, st):
    if a != b:
        raise ScheduleError(f"tile takes two axes of one stage, got {a} and {b}", st.span)


def _arity(st, n) -> ScheduleError:
    return ScheduleError(f"{st.func} takes {n} arguments, got {len(st.args)}", st.span)
