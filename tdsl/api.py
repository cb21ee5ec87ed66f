"""The public objects: `Module` (a checked .tdsl file) and `Op` (one operator in it).

This module sits on top of the pipeline: it drives the front end, the reference evaluator,
lowering and the emitters, and nothing below imports it.
"""
from __future__ import annotations

import numpy as np

from .errors import CallError
from .frontend import ast, unparse
from .frontend.program import OpDefinition, Program, load_program, program_from_text, \
    std_program
from .lowering import te


class Op:
    """One operator. ``op.reference(*arrays, **attrs)`` is its meaning, computed with numpy."""

    def __init__(self, definition: OpDefinition, module: "Module"):
        self._def = definition
        self.module = module

    @property
    def name(self) -> str:
        return self._def.name

    @property
    def ast(self) -> ast.OpDef:
        return self._def.ast

    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.ast.params]

    @property
    def attr_names(self) -> list[str]:
        return [a.name for a in self.ast.attrs]

    def signature(self) -> str:
        """``name(A: f32[M, K], B: f32[K, N]; alpha: float = 1.0) -> C: f32[M, N]``"""
        return unparse.signature(self.ast)

    def function(self, ranks: list[int] | None = None, **attrs) -> te.Function:
        """The tensor-expression function for these attributes (and argument ranks, for
        rank-generic ops)."""
        return self._def.instantiate(attrs, ranks, error_type=CallError)

    def reference(self, *arrays, **attrs):
        """Evaluate with numpy: an ndarray, or a tuple of them for several outputs."""
        from .lowering.reference import evaluate
        ranks = [np.ndim(a) for a in arrays]
        fn = self.function(ranks, **attrs)
        outs = evaluate(fn, arrays)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self) -> str:
        return f"<tdsl.Op {self.signature()}>"


class Module:
    """A checked .tdsl file: ``module["matmul"]`` is an `Op`."""

    def __init__(self, program: Program, name: str):
        self._program = program
        self.name = name
        self._ops = {n: Op(d, self) for n, d in program.all_ops().items()}

    @property
    def program(self) -> Program:
        return self._program

    def __getitem__(self, name: str) -> Op:
        try:
            return self._ops[name]
        except KeyError:
            raise KeyError(f"no op '{name}' in {self.name} (ops: "
                           f"{', '.join(sorted(self._ops))})") from None

    def __contains__(self, name: str) -> bool:
        return name in self._ops

    def __iter__(self):
        return iter(self._ops)

    def own_ops(self) -> list[str]:
        """The ops defined in this file itself (not imported), in source order."""
        return list(self._program.ops)

    def __repr__(self) -> str:
        return f"<tdsl.Module {self.name}: {len(self._ops)} ops>"


def load(path) -> Module:
    """Load and check a .tdsl file; ``"std"`` is the standard library."""
    if str(path) == "std":
        return stdlib()
    return Module(load_program(path), str(path))


def loads(text: str, filename: str = "<string>") -> Module:
    """Check .tdsl source text."""
    return Module(program_from_text(text, filename), filename)


_STD: list = []


def stdlib() -> Module:
    if not _STD:
        prog = std_program()
        _STD.append(Module(prog, "std"))
    return _STD[0]


__all__ = ["Op", "Module", "load", "loads", "stdlib"]
