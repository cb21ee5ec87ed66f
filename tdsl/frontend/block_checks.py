"""Checks of a file's schedule blocks, beyond their syntax.

`declaration_errors` runs whenever a file is checked (it is cheap): a block for a target tdsl
does not know, a block named like a built-in schedule (``naive``, ``auto``), two blocks of
one name for one op and overlapping targets. Each used to be silently ignored or shadowed.

`application_errors` is what ``tdsl check`` adds: every block is applied to its op (GPU and
embedded blocks too, for their targets), with
every knob at its default and at a few other values, so that a ``split`` of an axis that does
not exist is reported at its statement without building anything. A ``factors(N)`` knob takes
its choices from N = `SAMPLE_SIZE`.
"""
from __future__ import annotations

from ..errors import CheckError, ErrorList, TdslError
from ..lowering.intrinsics import INTRINSICS
from ..lowering.passes import apply_schedule
from ..lowering.thread_bindings import check as check_thread_bindings
from ..target import as_target
from . import ast
from .schedules import TARGETS, to_schedule
from .to_te import ranks_for_pack, uses_pack

BUILT_IN_SCHEDULES = ("naive", "auto")
OTHER_VALUES = 3        # knob settings tried besides the defaults: first, last, middle


def declaration_errors(blocks: list[ast.ScheduleDef]) -> list[TdslError]:
    errors: list[TdslError] = []
    seen: list[ast.ScheduleDef] = []
    for b in blocks:
        if b.target not in TARGETS:
            near = [t for t in TARGETS if t == b.target.lower()]
            errors.append(CheckError(
                f"schedule for {b.op}: unknown target '{b.target}'", b.span,
                hint=f"did you mean '{near[0]}'?" if near else
                f"targets: {', '.join(TARGETS)}"))
            continue
        if b.name in BUILT_IN_SCHEDULES:
            errors.append(CheckError(
                f"schedule for {b.op}: '{b.name}' is the name of a built-in schedule, which "
                f"this block could never replace", b.span, hint="give it another name"))
            continue
        for first in seen:
            if first.op == b.op and first.name == b.name and \
                    set(TARGETS[first.target]) & set(TARGETS[b.target]):
                errors.append(CheckError(
                    f"schedule '{b.name}' for {b.op} is defined twice for "
                    f"{', '.join(sorted(set(TARGETS[first.target]) & set(TARGETS[b.target])))}",
                    b.span, hint=f"the first is at {first.span}; only one could be used"))
                break
        else:
            seen.append(b)
    return errors


def application_errors(program) -> list[TdslError]:
    """The errors of applying each block of ``program`` to its op (the first per block), with
    the knobs at their defaults and at a few other values, for each target kind the block
    serves (a ``for gpu`` block for CUDA and OpenCL, whose constants differ): the directives,
    then the thread bindings, as a build checks them before making any loop."""
    errors: list[TdslError] = []
    for b in program.schedules:
        opdef = program.ops.get(b.op) or program.imported.get(b.op)
        if opdef is None or b.target not in TARGETS:
            continue
        if any(a.default is None for a in opdef.ast.attrs):
            continue            # no attribute values to apply it at
        for kind in TARGETS[b.target]:
            error = _first_error(b, opdef, as_target(kind))
            if error is not None:       # the first per block
                errors.extend(error.errors if isinstance(error, ErrorList) else [error])
                break
    return errors


def _first_error(b: ast.ScheduleDef, opdef, target) -> TdslError | None:
    try:
        ranks = ranks_for_pack(opdef.ast, 2) if uses_pack(opdef.ast) else None
        fn = opdef.instantiate({}, ranks)
        sched = to_schedule(b, fn, INTRINSICS, _factor_sizes(b, fn), target)
        for config in _configs(sched):
            directives = sched.resolve(config)
            check_thread_bindings(apply_schedule.run(fn, directives), directives, target)
    except TdslError as e:
        return e
    return None


SAMPLE_SIZE = 96         # a size `factors(N)` is checked at: 12 divisors, 3 among them


def _factor_sizes(block: ast.ScheduleDef, fn) -> dict | None:
    """The sizes a ``knob t in factors(N)`` of ``block`` needs, at a sample value: the choices
    come from the size, which only a build with shapes knows; applying the block to the
    op's symbolic sizes is legal for any factor, so `tdsl check` takes N = 96."""
    sizes = {v.name for v in fn.shape_vars}
    named = {n.id for st in block.body if isinstance(st, ast.KnobDecl) and st.generator
             for a in st.generator.args for n in _names(a) if n.id in sizes}
    return {n: SAMPLE_SIZE for n in sorted(named)} or None


def _names(node):
    if isinstance(node, ast.Name):
        yield node
    for v in vars(node).values() if hasattr(node, "__dict__") else ():
        for x in (v if isinstance(v, tuple) else (v,)):
            if isinstance(x, ast.Node):
                yield from _names(x)


def _configs(sched) -> list[dict]:
    """The defaults, then every knob at its first, last and middle choice (those that a
    ``require`` allows)."""
    out = [{}]
    for pick in (0, -1, None)[:OTHER_VALUES]:
        config = {k.name: k.choices[pick if pick is not None else len(k.choices) // 2]
                  for k in sched.knobs}
        try:
            sched.knob_values(config)
        except TdslError:
            continue            # outside the space: not a configuration to apply
        if config not in out:
            out.append(config)
    return out
