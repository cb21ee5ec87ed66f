"""`CFamilyPrinter`: loop IR to C-family source, shared by the C, CUDA and OpenCL backends.

Dispatch is by node class (``visit_For``, ``visit_Store``, ...; the expression visitors are
in `expressions`). Statements print to lists of lines, joined once by the caller.

What a language changes is a class attribute or a small hook, never a visit method:
`function_qualifier`, `return_type`, `restrict`, `pointer_space` (an address-space
qualifier of pointer parameters), `thread_index` (``For.thread_tag`` -> an index
expression) and `thread_guard_needed`, `barrier`, `vector_type` and the vector
load/store/broadcast spellings,
`math_function`, `loop_pragmas`, `lane_loop_pragmas`, `align_attribute` and
`declare_allocation` (how a buffer of each scope comes to exist). A construct the language
cannot express is a `BuildError` that names it.

Vector statements whose value the language can compute as whole vectors (contiguous loads,
broadcasts, arithmetic: a register tile) print as vector operations; any other vector
statement prints as a loop over its lanes of scalar code (see `lanes`).
"""
from __future__ import annotations

import functools

from ..errors import BuildError
from ..lowering import te
from ..lowering.dtypes import to_c
from ..lowering.te_printer import format_expr
from ..target import Target, as_target
from ..lowering.loop_ir import (Barrier, Buffer, ForKind, If, LoweredFunc, Prefetch, Store,
                                split_dtype, vector_dtype)
from .expressions import MULTIPLICATIVE, PRECEDENCE, CExpressionPrinter
from .helpers import element_size
from .lanes import contiguous_base, lane, lanes_of, mul, simd_expressible
from .names import sanitize
from .registers import register_index, register_lanes

INDENT = "    "
_LANE = te.Var("<lane>")     # not a legal IR name, so it cannot capture a user variable


class CFamilyPrinter(CExpressionPrinter):
    """Prints one `LoweredFunc`; make one per function (it holds the function's names)."""
    function_qualifier = ""
    return_type = "int"
    restrict = "restrict"
    pointer_space = ""
    thread_index: dict[str, str] = {}
    barrier: str | None = None
    # a cache-prefetch statement of ``{address}``; None: the language has none, and a
    # `Prefetch` (a hint) prints nothing
    prefetch: str | None = None
    lane_loop_pragmas: list[str] = []
    stack_limit_bytes = 16 * 1024

    def __init__(self, func: LoweredFunc, shapes: dict | None = None,
                 target: Target | str | None = None):
        super().__init__(func.name)
        self.func = func
        self.target = as_target(target)
        self.fixed = fixed_shapes(func, shapes or {})
        self.name = self.namer.fresh(self.entry_name())
        inputs = func.params[:func.num_inputs]
        self.inputs = {id(b) for b in inputs}
        self.by_value = {id(b) for b in inputs if not b.shape}
        self.half_params = {id(b) for b in func.params if b.dtype == "f16"}
        self.nonneg = set(func.shape_vars)
        self.uses_status = False              # set when a heap allocation can fail
        self.loop_kinds: list[ForKind] = []   # kinds of the loops around the statement
        self.registers: dict[int, tuple] = {}  # register tiles: id(buffer) -> (lanes, names, used)
        self._loop_names: dict[te.Var, str] = {}
        self.hoisted: list[str] = []          # declarations a hook moved to the top
        for b in func.params:
            self.namer.bind(b, b.name)
        for v in func.shape_vars:
            self.namer.bind(v, v.name)

    # ------------------------------------------------------------ hooks
    def entry_name(self) -> str:
        """The name of the function printed (the op's, made a C identifier)."""
        return sanitize(self.func.name, self.reserved)

    def loop_pragmas(self, kind: ForKind, extent: te.Expr) -> list[str]:
        return []

    def align_attribute(self, align: int) -> str:
        return ""

    def closing(self) -> list[str]:
        """Statements the function runs last, before it returns."""
        return []

    def thread_guard_needed(self, loop) -> bool:
        """Whether a thread-bound loop's index can pass its end (the launch is larger)."""
        return True

    def declare_allocation(self, buf: Buffer, name: str, count: te.Expr,
                           body: list[str]) -> list[str]:
        """Lines that make ``buf`` exist around ``body``. Here: a stack array when the size
        is a small constant; heap workspace is for subclasses that have an allocator."""
        if buf.scope in ("local", "global") and self._stack_bytes(buf, count) is not None:
            return [f"{self.element_type(buf.dtype)} {name}[{self.stack_elements(buf, count)}]"
                    f"{self.align_attribute(buf.align)};", *body]
        raise BuildError(f"the {self.language} backend cannot allocate {buf.name} "
                         f"({buf.scope}, {format_expr(count)} elements) without an allocator")

    # ------------------------------------------------------------ the function
    def prototype(self, function_name: str | None = None) -> str:
        """The signature, written once: for the definition, the header and ``ffi.cdef``.
        Inputs are const pointers (rank 0: values), outputs writable, then free sizes.
        ``function_name`` (the function's own by default) names another of that signature."""
        params = []
        for i, b in enumerate(self.func.params):
            name, ctype = self.namer.lookup(b), to_c(b.dtype)
            if b.dtype == "f16":    # its bits: cffi knows no _Float16 (ExprPrinter.element)
                ctype = "uint16_t"
            if i >= self.func.num_inputs:
                params.append(f"{self.pointer_space}{ctype}* {self.restrict} {name}")
            elif b.shape:
                params.append(f"{self.pointer_space}const {ctype}* {self.restrict} {name}")
            else:
                params.append(f"{ctype} {name}")
        params += [f"int64_t {self.namer.lookup(v)}" for v in self.func.shape_vars
                   if v not in self.fixed]
        qualifier = f"{self.function_qualifier} " if self.function_qualifier else ""
        name = function_name or self.name
        return f"{qualifier}{self.return_type} {name}({', '.join(params) or 'void'})"

    def function(self) -> list[str]:
        body = self.stmt(self.func.body)
        head = [f"const int64_t {self.namer.lookup(v)} = {n};" for v, n in self.fixed.items()]
        head += self.hoisted
        if self.uses_status:
            head.insert(0, "int tdsl_status = 0;")
        tail = [] if self.return_type == "void" else \
            [f"return {'tdsl_status' if self.uses_status else '0'};"]
        return [f"{self.prototype()} {{", *indent(head + body + self.closing() + tail), "}"]

    # ------------------------------------------------------------ statements
    def stmt(self, s) -> list[str]:
        return self._dispatch(s)(s)

    def visit_Seq(self, s) -> list[str]:
        return [line for child in s.stmts for line in self.stmt(child)]

    def visit_For(self, s) -> list[str]:
        if s.kind is ForKind.THREAD_BINDING:
            return self.bind_thread(s)
        pragmas = self.loop_pragmas(s.kind, s.extent)
        name = self._bind_loop_var(s.var)
        body = self._scoped_body(s.var, self.is_nonneg(s.min), s.body, s.kind)
        end = s.extent if _is_zero(s.min) else te.Binary("+", s.min, s.extent, s.min.dtype)
        end_text = self.expr(end, PRECEDENCE["<"] + 1)
        head = f"for (int64_t {name} = {self.expr(s.min)}; {name} < {end_text}; ++{name})"
        return [*pragmas, f"{head} {{", *indent(body), "}"]

    def bind_thread(self, s) -> list[str]:
        tag = s.thread_tag
        if tag not in self.thread_index:
            raise BuildError(f"the {self.language} backend cannot bind loop {s.var.name} to "
                             f"{tag or 'a thread axis'}",
                             hint="bind thread axes only in schedules for GPU targets")
        name = self.namer.bind(s.var, s.var.name)
        body = self._scoped_body(s.var, self.is_nonneg(s.min), s.body, s.kind)
        end = s.extent if _is_zero(s.min) else te.Binary("+", s.min, s.extent, s.min.dtype)
        end = self.expr(end, PRECEDENCE["<"] + 1)
        index = f"const int64_t {name} = (int64_t)({self.thread_index[tag]})"
        index += ";" if _is_zero(s.min) else f" + {self.expr(s.min, MULTIPLICATIVE)};"
        if not self.thread_guard_needed(s):     # a block of its own: siblings may reuse the name
            return ["{", *indent([index, *body]), "}"]
        return [index, f"if ({name} < {end}) {{", *indent(body), "}"]

    def visit_If(self, s: If) -> list[str]:
        if lanes_of(s.cond) > 1:
            raise BuildError(f"an if needs a scalar condition, got {s.cond.dtype}")
        out = [f"if ({self.expr(s.cond)}) {{", *indent(self.stmt(s.then))]
        if s.orelse is not None:
            out += ["} else {", *indent(self.stmt(s.orelse))]
        return out + ["}"]

    def visit_Store(self, s: Store) -> list[str]:
        if id(s.buffer) in self.inputs:
            raise BuildError(f"{self.func.name} stores into its input {s.buffer.name}")
        lanes = max(lanes_of(s.value), *(lanes_of(i) for i in s.indices), 1)
        if lanes > 1:
            return self.vector_store_stmt(s, lanes)
        line = f"{self.element(s.buffer, s.indices)} = {self.expr(s.value)};"
        if s.predicate is None:
            return [line]
        return [f"if ({self.expr(s.predicate)}) {{", INDENT + line, "}"]

    def vector_store_stmt(self, s: Store, lanes: int) -> list[str]:
        if id(s.buffer) in self.registers:
            return [f"{self.register(s.buffer, s.indices[0])} = {self.expr(s.value)};"]
        base = contiguous_base(s.buffer, s.indices)
        if base is not None and s.predicate is None and lanes_of(s.value) > 1 and \
                simd_expressible(s.value, self.vector_type):
            address = f"&{self.buffer_name(s.buffer)}[{self.expr(base)}]"
            return [self.vector_store(s.value.dtype, address, self.expr(s.value),
                                      s.buffer) + ";"]
        at = self._lane_var()
        scalar = Store(s.buffer, tuple(lane(i, at) for i in s.indices), lane(s.value, at),
                       None if s.predicate is None else lane(s.predicate, at))
        return self._lane_loop(lanes, self.visit_Store(scalar))

    def visit_LetStmt(self, s) -> list[str]:
        lanes = lanes_of(s.value)
        vtype = self.vector_type(s.value.dtype) if lanes > 1 else None
        name = self.namer.fresh(s.var.name)     # the value still sees the outer bindings
        if lanes == 1 or (vtype and simd_expressible(s.value, self.vector_type)):
            decl = [f"const {vtype or to_c(s.value.dtype)} {name} = {self.expr(s.value)};"]
        else:   # computed lane by lane into a vector variable, or an array without one
            at = self._lane_var()
            assign = f"{name}[{self.expr(at)}] = {self.expr(lane(s.value, at))};"
            scalar = split_dtype(s.value.dtype)[0]
            decl = [f"{vtype} {name};" if vtype else f"{to_c(scalar)} {name}[{lanes}];",
                    *self._lane_loop(lanes, [assign])]
        self.namer.bind_as(s.var, name)
        return decl + self._scoped_body(s.var, self.is_nonneg(s.value), s.body)

    def visit_Allocate(self, s) -> list[str]:
        lanes = register_lanes(s, self.target.registers) if self.vector_type(vector_dtype(s.buffer.dtype, 2)) else None
        if lanes and self.vector_type(vector_dtype(s.buffer.dtype, lanes)):
            return self._register_tile(s, lanes)
        name = self.namer.bind(s.buffer, s.buffer.name)
        count = functools.reduce(mul, s.buffer.shape, te.Const(1, "i64"))
        body = self.stmt(s.body)
        self.namer.unbind(s.buffer)
        return self.declare_allocation(s.buffer, name, count, body)

    def _register_tile(self, s, lanes: int) -> list[str]:
        count = int(s.buffer.shape[0].value) // lanes
        # each vector gets a fresh identifier, so no other name can collide with it
        names = [self.namer.fresh(f"{s.buffer.name}_{k}") for k in range(count)]
        used: set[str] = set()
        self.registers[id(s.buffer)] = (lanes, names, used)
        body = self.stmt(s.body)
        del self.registers[id(s.buffer)]
        # only the vectors the body uses: a tail tile split off from a loop (partition) uses
        # some of its rows only, and strict C99 builds treat unused variables as errors
        names = [n for n in names if n in used]
        vtype = self.vector_type(vector_dtype(s.buffer.dtype, lanes))
        return [f"{vtype} {', '.join(names)};", *body] if names else body

    def register(self, buf, index) -> str:
        """The variable holding the vector of a promoted register tile at ``index``."""
        lanes, names, used = self.registers[id(buf)]
        name = names[register_index(index, lanes)]
        used.add(name)
        return name

    def visit_Barrier(self, s: Barrier) -> list[str]:
        if self.barrier is None:
            raise BuildError(f"the {self.language} backend has no {s.scope}-memory barrier",
                             hint="barriers belong to GPU schedules")
        return [self.barrier]

    def visit_Evaluate(self, s) -> list[str]:
        return [self.expr(s.value) + ";"]

    def visit_Prefetch(self, s: Prefetch) -> list[str]:
        if self.prefetch is None:
            return []
        address = f"&{self.buffer_name(s.buffer)}[{self.expr(s.index)}]"
        return [self.prefetch.format(address=address)]

    # ------------------------------------------------------------ pieces
    def element_type(self, dtype: str) -> str:
        return self.vector_type(dtype) or to_c(dtype)

    def _scoped_body(self, var: te.Var, nonneg: bool, body, kind: ForKind | None = None):
        """Print ``body`` with ``var`` (already bound by the caller) in scope, then unbind it."""
        was_nonneg = var in self.nonneg
        (self.nonneg.add if nonneg else self.nonneg.discard)(var)
        if kind is not None:
            self.loop_kinds.append(kind)
        lines = self.stmt(body)
        if kind is not None:
            self.loop_kinds.pop()
        (self.nonneg.add if was_nonneg else self.nonneg.discard)(var)
        self.namer.unbind(var)
        return lines

    def stack_elements(self, buf: Buffer, count: te.Const) -> int:
        """The length a stack array of ``count`` elements is declared with."""
        return count.value

    def _stack_bytes(self, buf: Buffer, count: te.Expr) -> int | None:
        if not isinstance(count, te.Const):
            return None
        scalar, lanes = split_dtype(buf.dtype)
        size = count.value * lanes * element_size(scalar)
        return size if size <= self.stack_limit_bytes else None

    def _bind_loop_var(self, var: te.Var) -> str:
        """Sibling loops over the same variable reuse its name; a nested one gets a new one."""
        known = self._loop_names.get(var)
        if known is not None and self.namer.lookup(var) is None:
            self.namer.bind_as(var, known)
            return known
        self._loop_names[var] = name = self.namer.bind(var, var.name)
        return name

    def _lane_var(self) -> te.Var:
        if self.namer.lookup(_LANE) is None:
            self.namer.bind(_LANE, "lane")
        return _LANE

    def _lane_loop(self, lanes: int, body: list[str]) -> list[str]:
        name = self.namer.lookup(_LANE)
        return [*self.lane_loop_pragmas,
                f"for (int64_t {name} = 0; {name} < {lanes}; ++{name}) {{", *indent(body), "}"]


def indent(lines: list[str]) -> list[str]:
    return [INDENT + line for line in lines]


def _is_zero(e: te.Expr) -> bool:
    return isinstance(e, te.Const) and e.value == 0


def fixed_shapes(func: LoweredFunc, shapes: dict) -> dict[te.Var, int]:
    """``{"M": 64}`` or ``{Var("M"): 64}`` -> ``{Var("M"): 64}``, checked against the sizes."""
    by_name = {v.name: v for v in func.shape_vars}
    fixed = {}
    for key, value in shapes.items():
        var = by_name.get(key.name if isinstance(key, te.Var) else key)
        if var is None:
            raise BuildError(f"{func.name} has no size called {key}; its sizes are "
                             f"{', '.join(by_name) or 'none'}")
        fixed[var] = int(value)
    return fixed
