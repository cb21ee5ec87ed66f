"""Checks of an instantiated function before it is lowered: sizes that no call could have.

An attribute can make a size undefined for every call (``max_pool2d(kernel=2, stride=0)``
divides its output size by zero). The reference refuses such a call when it evaluates the
size; a kernel would compute something (C's division by zero is undefined, the helpers
return 0). So the build refuses it first, with the reference's words.
"""
from __future__ import annotations

from ..errors import CallError
from . import te


def check_sizes(fn: te.Function) -> None:
    """Raise `CallError` if a tensor's size or a reduction's extent divides by zero."""
    attrs = ", ".join(f"{k} = {v}" for k, v in fn.attrs) or "no attributes"
    for t in (*fn.inputs, *fn.stages()):
        kind = "argument" if t.is_placeholder else "stage"
        for d, size in enumerate(t.shape):
            _check(size, f"{kind} '{t.name}' of '{fn.name}': dimension {d}", attrs)
        if not t.is_placeholder:
            for e in te.walk(t.op.body):
                if isinstance(e, te.Reduce):
                    for ax in e.axes:
                        _check(ax.extent, f"stage '{t.name}' of '{fn.name}': the extent of "
                                          f"{ax.var.name}", attrs)


def _check(e: te.Expr, what: str, attrs: str) -> None:
    for x in te.walk(e):
        if isinstance(x, te.Binary) and x.op in ("//", "%") and \
                isinstance(x.b, te.Const) and x.b.value == 0:
            raise CallError(f"{what}: {e} divides by zero with {attrs}")
