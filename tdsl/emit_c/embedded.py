"""`EmbeddedC`: strict C99 for microcontrollers and small boards (target ``c-embedded``).

One ``.c`` and one ``.h`` per function, for the user's own build (any C99 compiler):

- no malloc/free and no OpenMP: every intermediate lives at a fixed offset of one arena the
  caller supplies (`arena.plan_arena`), whose size is ``<NAME>_ARENA_BYTES`` in the header;
  small local tiles (at most `STACK_LIMIT` bytes) are stack arrays;
- the entry is ``int <name>_run(const float *x, ..., float *y, void *arena)``: inputs, then
  outputs, then the arena; it returns 0, or an error code (``<NAME>_ERR_*``) for an arena
  that is NULL or not ``<NAME>_ARENA_ALIGN``-byte aligned, never trapping;
- includes ``<stdint.h>``, ``<stddef.h>`` and ``<string.h>`` (``memcpy`` in the bit casts of
  the exp helper), ``<math.h>`` only when the code calls one of its functions (the header
  lists them; an integer kernel calls none), and ``<stdbool.h>`` (macros only) for bool
  tensors. The object's undefined symbols are those functions, ``memcpy``/``memset`` (which
  gcc may also emit for copies) and the compiler's own support routines (``__aeabi_*``,
  ``__mulsf3``...: libgcc, not the C library);
- parallel loops run serially; vectors use GNU vector types only where the target's CPU
  has vector registers (lanes > 1: NEON, Helium, SSE), else scalar code;
- every size is fixed at build time (the arena is sized then).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BuildError
from ..lowering import te
from ..lowering.loop_ir import Buffer, ForKind, LoweredFunc, split_dtype
from ..lowering.dtypes import to_c
from .arena import ALIGN, ArenaPlan, buffer_bytes, plan_arena
from .c import MAX_UNROLL, GnuVectors
from .helpers import element_size
from .names import MATH_FUNCTIONS, identifier_chars
from .printer import CFamilyPrinter, indent

STACK_LIMIT = 256        # bytes: a local tile up to this size is a stack array
RUNTIME_FUNCTIONS = ("memcpy", "memset", "memmove")
ERRORS = (("ERR_ARENA_NULL", 1, "arena is NULL"),
          ("ERR_ARENA_ALIGN", 2, "arena is not ARENA_ALIGN-byte aligned"))


@dataclass(frozen=True)
class EmbeddedModule:
    """The ``.c``/``.h`` pair of one function (or graph), and what its arena and calls are."""
    name: str                  # the function's C name; the entry is ``{name}_run``
    entry: str
    macro: str                 # prefix of the header's macros: ``{macro}_ARENA_BYTES``
    source: str
    header: str
    arena_bytes: int
    naive_bytes: int           # one buffer per intermediate, no reuse
    math_functions: tuple[str, ...]
    params: tuple[Buffer, ...]
    num_inputs: int
    const_bytes: int = 0       # static const data (a graph's weights, in flash)

    @property
    def allowed_symbols(self) -> frozenset[str]:
        """What the object file may leave undefined, besides ``__``-prefixed compiler
        support routines."""
        return frozenset(self.math_functions) | frozenset(RUNTIME_FUNCTIONS)


class EmbeddedC(GnuVectors, CFamilyPrinter):
    language = "embedded C"
    stack_limit_bytes = STACK_LIMIT

    def __init__(self, func: LoweredFunc, shapes: dict | None = None, target=None,
                 kernel_name: str | None = None):
        """``kernel_name``: print a ``static`` function of that name, one step of a graph
        whose entry checks the arena once (tdsl/emit_c/embedded_graph.py)."""
        self.kernel_name = kernel_name
        super().__init__(func, shapes, target)
        free = [v.name for v in func.shape_vars if v not in self.fixed]
        if free:
            raise BuildError(f"{func.name}: the embedded target needs every size fixed at "
                             f"build time; {', '.join(free)} {'is' if len(free) == 1 else 'are'}"
                             " free", hint="give them: shapes={" +
                             ", ".join(f"'{n}': ..." for n in free) + "}")
        self.entry = self.namer.fresh(kernel_name or f"{self.name}_run")
        self.arena = self.namer.fresh("arena")
        self.arena_bytes = self.namer.fresh("tdsl_arena")
        self.macro = re.sub(r"\W", "_", self.name).upper()
        self.plan: ArenaPlan = plan_arena(func, self._in_arena, self.fixed)

    def _in_arena(self, buf: Buffer) -> bool:
        return not (buf.scope == "local" and
                    buffer_bytes(buf, self.func.name, self.fixed) <= self.stack_limit_bytes)

    # ------------------------------------------------------------ hooks
    def entry_name(self) -> str:
        """The op's own name (the files, the macros, and the entry ``<name>_run``): the
        user's build links it, so it reads as theirs; the suffix keeps it off any library's
        symbol."""
        return identifier_chars(self.func.name)

    def vector_type(self, dtype: str) -> str | None:
        """GNU vectors no wider than the CPU's own (a schedule's 16-lane block is lane
        loops on a 4-lane NEON, for gcc to vectorize); none on a CPU without vectors."""
        scalar, lanes = split_dtype(dtype)
        if self.target.lanes == 1 or lanes * element_size(scalar) > self.target.lanes * 4:
            return None
        return super().vector_type(dtype)

    def loop_pragmas(self, kind: ForKind, extent: te.Expr) -> list[str]:
        if kind is ForKind.UNROLLED and isinstance(extent, te.Const) and \
                0 < extent.value <= MAX_UNROLL:
            return [f"#pragma GCC unroll {extent.value}"]
        return []

    def declare_allocation(self, buf: Buffer, name: str, count: te.Expr,
                           body: list[str]) -> list[str]:
        if buf.scope == "shared":
            raise BuildError(f"the {self.language} backend has no shared memory for "
                             f"{buf.name}", hint="shared scope belongs to GPU schedules")
        if not self._in_arena(buf):
            if not isinstance(count, te.Const):
                return super().declare_allocation(buf, name, count, body)   # raises
            # zeroed: a tile written under the same guards as it is read (a register tile's
            # tail) is correct, but gcc -Os cannot prove it and warns maybe-uninitialized
            return [f"{self.element_type(buf.dtype)} {name}[{count.value}] = {{0}};", *body]
        ctype = self.element_type(buf.dtype)
        offset = self.plan.offsets[id(buf)]
        return [f"{ctype} *{self.restrict} {name} = ({ctype} *)(void *)"
                f"({self.arena_bytes} + {offset});", *body]

    # ------------------------------------------------------------ the function
    def prototype(self) -> str:
        params = []
        for i, b in enumerate(self.func.params):
            name, ctype = self.namer.lookup(b), to_c(b.dtype)
            if i >= self.func.num_inputs:
                params.append(f"{ctype} *{self.restrict} {name}")
            elif b.shape:
                params.append(f"const {ctype} *{self.restrict} {name}")
            else:
                params.append(f"{ctype} {name}")
        params.append(f"void *{self.arena}")
        static = "static " if self.kernel_name else ""
        return f"{static}int {self.entry}({', '.join(params)})"

    def function(self) -> list[str]:
        body = self.stmt(self.func.body)
        text = "\n".join(body)

        def used(name: str) -> bool:
            return re.search(rf"\b{re.escape(name)}\b", text) is not None
        head = []
        if self.plan.size:
            head.append(f"unsigned char *const {self.arena_bytes} = (unsigned char *)"
                        f"{self.arena};")
            if not self.kernel_name:
                head += [f"if ({self.arena} == NULL) return {self.macro}_ERR_ARENA_NULL;",
                         f"if ((uintptr_t){self.arena} % {self.macro}_ARENA_ALIGN != 0) "
                         f"return {self.macro}_ERR_ARENA_ALIGN;"]
        else:
            head.append(f"(void){self.arena};")
        for b in self.func.params:      # -Wextra: a parameter the body never reads
            if not used(self.namer.lookup(b)):
                head.append(f"(void){self.namer.lookup(b)};")
        head += [f"const int64_t {self.namer.lookup(v)} = {n};" for v, n in self.fixed.items()
                 if used(self.namer.lookup(v))]
        return [f"{self.prototype()} {{", *indent(head + body + ["return 0;"]), "}"]

    def pieces(self) -> tuple[list[str], list[str]]:
        """(the function's lines, the helpers and micro-kernels it needs, keyed texts)."""
        function = self.function()     # printed first: it decides which helpers are needed
        externs = [f"/* tensor intrinsic {name} */\n{source.strip()}" for name, source in
                   sorted(self.func.attrs.get("extern_sources", {}).items())]
        return function, externs

    def module(self) -> EmbeddedModule:
        function, externs = self.pieces()
        source, math, uses_bool = translation_unit(
            self.name, f"{self.func.name}", self.target, [*self.helpers.render(), *externs],
            function)
        doc = f"{self.entry}: inputs, then outputs, then"
        header = header_text(self.macro, self.func.name, self.target, doc, self.plan.size,
                             math, uses_bool, self.prototype())
        return EmbeddedModule(self.name, self.entry, self.macro, source, header,
                              self.plan.size, self.plan.naive_bytes, math,
                              self.func.params, self.func.num_inputs)


def translation_unit(name: str, what: str, target, pieces: list[str], code: list[str]
                     ) -> tuple[str, tuple[str, ...], bool]:
    """The .c text around ``pieces`` (helpers, constants) and ``code`` (functions), with the
    headers they need; the <math.h> functions called, and whether bool is used."""
    text = "\n".join([*pieces, *code])
    math = tuple(sorted(n for n in MATH_FUNCTIONS if re.search(rf"\b{n}\s*\(", text)))
    includes = ["stddef.h", "stdint.h", "string.h"]
    if math or re.search(r"\b(INFINITY|NAN)\b", text):
        includes.append("math.h")
    uses_bool = re.search(r"\b(bool|true|false)\b", text) is not None
    if uses_bool:
        includes.append("stdbool.h")
    parts = [f"/* Generated by tdsl from {what} for {target}: strict C99, no allocation. */",
             *(f"#include <{h}>" for h in sorted(includes)), f'#include "{name}.h"', ""]
    for piece in pieces:
        parts += [piece, ""]
    parts += code
    return "\n".join(parts) + "\n", math, uses_bool


def header_text(macro: str, what: str, target, entry_doc: str, arena_bytes: int,
                math: tuple[str, ...], uses_bool: bool, prototype: str) -> str:
    guard = f"TDSL_{macro}_H"
    m = macro
    doc = [f"/* Generated by tdsl from {what} for {target}.",
           f" * {entry_doc} an arena of {m}_ARENA_BYTES bytes aligned to {m}_ARENA_ALIGN",
           " * (the caller's memory; every intermediate lives there). Returns 0, or an "
           "error code below.",
           f" * Functions of <math.h> it calls: {', '.join(math) if math else 'none'}. */"]
    lines = [*doc, f"#ifndef {guard}", f"#define {guard}", "#include <stdint.h>"]
    if uses_bool:
        lines.append("#include <stdbool.h>")
    lines += ["", f"#define {m}_ARENA_BYTES {arena_bytes}u", f"#define {m}_ARENA_ALIGN {ALIGN}u",
              f"#define {m}_OK 0"]
    lines += [f"#define {m}_{code} {value}  /* {what} */" for code, value, what in ERRORS]
    lines += ["", f"{prototype};", "", f"#endif  /* {guard} */", ""]
    return "\n".join(lines)


def emit_embedded(func: LoweredFunc, shapes: dict | None = None, target=None
                  ) -> EmbeddedModule:
    """Print ``func`` as a strict-C99 ``.c``/``.h`` pair for a ``c-embedded`` target."""
    from ..lowering.dtypes import refuse_storage_floats
    # _Float16 is no C99, and 32-bit Arm's gcc needs -mfp16-format=ieee for it
    refuse_storage_floats(func, "c-embedded (strict C99)")
    return EmbeddedC(func, shapes, target or "c-embedded").module()
