"""A checked .tdsl file: its ops (with imported ones in scope), schedules and graphs.

`load_program(path)` / `program_from_text(text)` parse, resolve imports and check every op,
raising one `ErrorList` with all the mistakes found. ``import std`` brings in the standard
library; ``import "file.tdsl"`` a file relative to the importing one.
"""
from __future__ import annotations

import functools
import os
import stat

from pathlib import Path

from ..dsl import STD_DIR
from ..errors import CheckError, ErrorList, ParseError, TdslError
from ..lowering import te
from ..lowering.dtypes import DTYPES
from ..lowering.graph.ir import Graph
from . import ast
from .graphs import check_graph
from .block_checks import declaration_errors
from .parse import parse
from .to_te import bind_attrs, instantiate, pack_rank_for, uses_pack

# Rank used to check rank-generic ops (any rank from 1 up would do).
CHECK_PACK_RANK = 2


class OpDefinition:
    """One op of a program; instantiates to a `te.Function` per set of attributes."""

    def __init__(self, opdef: ast.OpDef, program: "Program"):
        self.ast = opdef
        self.program = program
        self._cache: dict = {}

    @property
    def name(self) -> str:
        return self.ast.name

    def instantiate(self, attrs: dict | None = None, ranks: list[int] | None = None,
                    check_only: bool = False, error_type=CheckError, at=None) -> te.Function:
        """``at``: the span of the call being checked, when a caller's source calls this op
        (mistakes in the call are reported there)."""
        pack = pack_rank_for(self.ast, ranks) if ranks and uses_pack(self.ast) else (
            CHECK_PACK_RANK if uses_pack(self.ast) else 0)
        values = bind_attrs(self.ast, dict(attrs or {}), check_only, error_type, at)
        key = (tuple(sorted(values.items(), key=lambda kv: kv[0])), pack)
        if key not in self._cache:
            active = self.program.instantiating
            if self.name in active:
                chain = " -> ".join([*active, self.name])
                raise CheckError(f"op {self.name} calls itself: {chain}", at or self.ast.span,
                                 hint="ops can't be recursive")
            active.append(self.name)
            try:
                self._cache[key] = instantiate(self.ast, self.program.resolve_op, values, pack,
                                               tuple(self.program.all_ops()))
            finally:
                active.pop()
        return self._cache[key]

    def instantiate_for_call(self, kwargs: dict, ranks: list[int], span) -> te.Function:
        return self.instantiate(kwargs, ranks, at=span)


class Program:
    def __init__(self, module: ast.Module, path: Path | None, loading: tuple = ()):
        self.path = path
        self.ops: dict[str, OpDefinition] = {}
        self.imported: dict[str, OpDefinition] = {}
        self.schedules: list[ast.ScheduleDef] = []
        self.graphs: dict[str, ast.GraphDef] = {}
        self.checked_graphs: dict[str, Graph] = {}
        self.instantiating: list[str] = []
        errors: list[TdslError] = []
        import_failed = False
        for item in module.items:
            try:
                self._add(item, errors, loading)
            except TdslError as e:
                errors.extend(e.errors if isinstance(e, ErrorList) else [e])
                import_failed = import_failed or isinstance(item, ast.Import)
        if import_failed:
            # an import failed: this file's ops may use what it would have defined, so
            # checking them now would only report the same mistake again as unknown ops
            raise errors[0] if len(errors) == 1 else ErrorList(_dedupe(errors))
        for op in self.ops.values():
            try:
                op.instantiate(check_only=True)
            except ErrorList as e:
                errors.extend(e.errors)
            except TdslError as e:
                errors.append(e)
        for s in self.schedules:
            if s.op not in self.ops and s.op not in self.imported:
                errors.append(CheckError(f"schedule for unknown op '{s.op}'", s.span))
        errors.extend(declaration_errors(self.schedules))
        for name, gdef in self.graphs.items():
            try:
                self.checked_graphs[name] = check_graph(gdef, self)
            except ErrorList as e:
                errors.extend(e.errors)
            except TdslError as e:
                errors.append(e)
        if errors:
            raise errors[0] if len(errors) == 1 else ErrorList(_dedupe(errors))

    def _add(self, item, errors, loading):
        if isinstance(item, ast.Import):
            other = _load_import(item, self.path, loading)
            for name, op in {**other.imported, **other.ops}.items():
                self.imported.setdefault(name, op)
        elif isinstance(item, ast.OpDef):
            if item.name in self.ops:
                errors.append(CheckError(
                    f"op '{item.name}' is defined twice", item.span,
                    hint=f"the first definition is at {self.ops[item.name].ast.span}"))
            elif item.name in DTYPES or item.name == "select":
                errors.append(CheckError(f"'{item.name}' is a built-in name and can't "
                                         f"name an op", item.span))
            else:
                self.ops[item.name] = OpDefinition(item, self)
        elif isinstance(item, ast.ScheduleDef):
            self.schedules.append(item)
        elif isinstance(item, ast.GraphDef):
            if item.name in self.graphs:
                errors.append(CheckError(f"graph '{item.name}' is defined twice", item.span))
            self.graphs[item.name] = item

    def resolve_op(self, name: str) -> OpDefinition | None:
        return self.ops.get(name) or self.imported.get(name)

    def all_ops(self) -> dict[str, OpDefinition]:
        return {**self.imported, **self.ops}


def _dedupe(errors):
    seen, out = set(), []
    for e in errors:
        key = (e.message, str(e.span))
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _load_import(item: ast.Import, importer: Path | None, loading) -> Program:
    if item.target == "std":
        return std_program()
    base = importer.parent if importer else Path.cwd()
    path = (base / item.target).resolve()
    if not path.is_file():
        raise CheckError(f"can't import '{item.target}': no file {path}", item.span,
                         hint="a path is relative to the importing file; the standard "
                              "library is `import std`")
    if path in loading:
        raise CheckError(f"import cycle: {' -> '.join(p.name for p in (*loading, path))}",
                         item.span)
    return load_program(path, loading, item.span)


# A .tdsl file is source text written by a person; a larger "file" is a mistake (or a device
# that never ends, like /dev/zero), refused before it fills the memory.
MAX_SOURCE_BYTES = 8 << 20


def load_program(path, loading: tuple = (), span=None) -> Program:
    """``span``: where the file is imported, for an error reading it."""
    path = Path(path).resolve()
    text = _read_source(path, span)
    if path.suffix == ".tdsl":
        return Program(parse(text, str(path)), path, (*loading, path))
    try:
        return Program(parse(text, str(path)), path, (*loading, path))
    except ParseError as e:
        # not a .tdsl file: say where it stops parsing, but never quote it (it may be
        # /proc/self/environ or a key file: an error message is often pasted somewhere)
        where = f" (line {e.span.line}, column {e.span.col})" if e.span else ""
        raise CheckError(f"{path} is not a .tdsl file and is not tdsl source{where}",
                         span) from None


def _read_source(path: Path, span) -> str:
    """The text of a regular file of at most `MAX_SOURCE_BYTES`, or a CheckError."""
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise CheckError(f"can't read {path}: not a regular file", span)
            data = f.read(MAX_SOURCE_BYTES + 1)
    except OSError as e:
        raise CheckError(f"can't read {path}: {e.strerror}", span) from None
    if len(data) > MAX_SOURCE_BYTES:
        raise CheckError(f"can't read {path}: larger than {MAX_SOURCE_BYTES >> 20} MiB, "
                         "which no .tdsl source is", span)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckError(f"can't read {path}: not UTF-8 text (byte {e.object[e.start]:#04x} "
                         f"at offset {e.start})", span) from None


def program_from_text(text: str, filename: str = "<string>") -> Program:
    return Program(parse(text, filename), None)


@functools.cache
def std_program() -> Program:
    """The standard library: every .tdsl file under tdsl/dsl/std, as one program."""
    files = sorted(STD_DIR.glob("*.tdsl"))
    text = "\n".join(f'import "{f.name}"' for f in files)
    return Program(parse(text, str(STD_DIR / "<std>")), STD_DIR / "<std>")
