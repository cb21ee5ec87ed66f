"""`HostC`: C for the machine tdsl runs on, built by gcc (or clang) and loaded with cffi.

C99 plus what gcc and clang both accept: GNU vector types (``vector_size``), so that a
register tile of vector accumulators stays in vector registers as named variables (plain
loops over an accumulator array do not, see /work/shared/anchors.md), ``__attribute__``
alignment, and OpenMP pragmas for threads and SIMD loops. How wide the vectors are and how
many a register tile may hold is the target's (tdsl/target.py), never fixed here.

The generated function returns 0, 1 when a heap workspace could not be allocated (the
caller raises `MemoryError`: a failed allocation must never turn into a segfault), or a
code naming a gather that read outside its buffer (the caller raises the `CallError` the
reference raises; see `expressions.FIRST_READ_FAULT`).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from ..errors import BuildError
from ..lowering import te
from ..lowering.loop_ir import (AddressOf, Allocate, Buffer, BufferLoad, For, ForKind, If,
                                LetStmt, LoweredFunc, Prefetch, Seq, Store, split_dtype,
                                stmt_exprs, walk_stmt)
from .helpers import element_size
from .names import identifier_chars
from .printer import CFamilyPrinter, indent

INCLUDES = ("stdbool.h", "stddef.h", "stdint.h", "stdlib.h", "string.h", "math.h")
MAX_UNROLL = 1024   # a larger constant loop is left to gcc's own judgement


@dataclass(frozen=True)
class CModule:
    """One function as C: the translation unit, its header, and the bare prototype (what
    ``ffi.cdef`` is given)."""
    name: str
    source: str
    header: str
    prototype: str


class GnuVectors:
    """Vector spellings as GNU vector types (``vector_size``), which gcc and clang accept in
    any C mode; shared by `HostC` and the embedded printer (where the CPU has vectors)."""

    def vector_type(self, dtype: str) -> str | None:
        """GNU vector types exist for power-of-two sizes of numeric elements; a bool vector
        (a mask) or an odd lane count is printed lane by lane instead."""
        scalar, lanes = split_dtype(dtype)
        size = lanes * element_size(scalar)
        if lanes == 1 or scalar == "bool" or size & (size - 1):
            return None
        return self.helpers.vector(scalar, lanes)

    # each declares its vector type and helpers first: a vector read only by a conversion
    # (an i32 sum's __builtin_convertvector to f32 in a fused epilogue) is declared nowhere else
    def vector_load(self, dtype: str, address: str) -> str:
        self.vector_type(dtype)
        return f"tdsl_load_{dtype}({address})"

    def vector_store(self, dtype: str, address: str, value: str, buffer=None) -> str:
        self.vector_type(dtype)
        return f"tdsl_store_{dtype}({address}, {value})"

    def broadcast(self, dtype: str, value: str) -> str:
        self.vector_type(dtype)
        return f"tdsl_bcast_{dtype}({value})"

    def stack_elements(self, buf: Buffer, count: te.Const) -> int:
        """Stack arrays are whole multiples of 64 bytes (the widest vector). A vectorized
        tail loop reads a buffer through a masked vector load, and gcc 12 takes a masked load
        that reaches past a smaller array for no read of it: it dropped every store into
        batch_matmul's 3-float register tile at M = 1, N = 3, and the kernel returned stack
        garbage."""
        scalar, lanes = split_dtype(buf.dtype)
        per_line = max(1, 64 // (lanes * element_size(scalar)))
        return -(-max(1, count.value) // per_line) * per_line


# stores (a vector store counts its lanes) below which a parallel loop runs in the calling
# thread. A fork and a join cost a microsecond or two on an idle machine, and much more
# where the other core is busy: the team waits until the scheduler runs its second thread
# (an LSTM's 49 x 10 x 256 input projection, 125,440 stores, took 7.7 ms with two threads
# beside one busy process, 3.6 us with one). 2^17 stores of a memory-bound kernel take
# 6-12 us on one core: at 2^18 the int8 ResNet block's layout changes, quantize and
# dequantize of 200,704 values ran on one thread of two (12-25 us each); halved, the block
# took 0.605 ms against 0.689 (Zen 4, two threads, both builds interleaved in one process;
# MobileNetV2, BERT and one thread unchanged)
MIN_PARALLEL_WORK = 1 << 17

_PARALLEL_FOR = "#pragma omp parallel for schedule(static)"


def static_work(s, fixed: dict | None = None) -> int | None:
    """The stores ``s`` executes, each counted by its lanes, where every loop extent in
    it is a constant or a size ``fixed`` at build time; None where one is not (a size
    known only at the call)."""
    fixed = fixed or {}
    match s:
        case For(extent=extent, body=body):
            n = extent.value if isinstance(extent, te.Const) else fixed.get(extent)
            inner = static_work(body, fixed) if n is not None else None
            return None if inner is None else n * inner
        case Seq(stmts=stmts):
            total = 0
            for child in stmts:
                w = static_work(child, fixed)
                if w is None:
                    return None
                total += w
            return total
        case If(then=then, orelse=orelse):
            a = static_work(then, fixed)
            b = static_work(orelse, fixed) if orelse is not None else 0
            return None if a is None or b is None else max(a, b)
        case LetStmt(body=body) | Allocate(body=body):
            return static_work(body, fixed)
        case Store(value=value):
            return split_dtype(value.dtype)[1]
    return None                  # a micro-kernel call (Evaluate) and the like: unknown work


def streamed_outputs(func: LoweredFunc, target, fixed: dict) -> set[int]:
    """The outputs (ids) of ``func`` that its vector stores write past the caches: those of
    a size fixed at build time and at least half the target's last-level cache
    (`Target.l3`) that the kernel never reads back (no load, no address taken, no
    prefetch).

    A plain store first reads the line it writes (a read for ownership) and fills the caches
    with lines the kernel will not read again, pushing out its input: softmax of 4096 x 1024
    floats (16 MiB in and 16 MiB out, a 32 MiB L3) took 0.96-1.05 ms on two Zen 4 cores,
    0.73-0.74 streamed (onnxruntime 0.65-0.70). At 8 MiB out the caches still held both and
    streaming was 3% slower."""
    if not target.l3:
        return set()
    touched = set()             # buffers read, or handed on by address, anywhere
    for stmt in walk_stmt(func.body):
        if isinstance(stmt, Prefetch):
            touched.add(id(stmt.buffer))
        for e in stmt_exprs(stmt):
            touched.update(id(x.buffer) for x in te.walk(e)
                           if isinstance(x, (BufferLoad, AddressOf)))
    out = set()
    for b in func.params[func.num_inputs:]:
        dims = [d.value if isinstance(d, te.Const) else fixed.get(d) for d in b.shape]
        if b.shape and id(b) not in touched and all(isinstance(d, int) for d in dims) and \
                element_size(b.dtype) * math.prod(dims) >= target.l3 // 2:
            out.add(id(b))
    return out


class HostC(GnuVectors, CFamilyPrinter):
    language = "host C"
    # to L2 and outward (prefetcht1 on x86): a schedule prefetches the data of its next
    # block of work, which the current block's tile must not push out of L1
    prefetch = "__builtin_prefetch({address}, 0, 2);"

    def entry_name(self) -> str:
        """``tdsl_<op>_<digest>``: the library's only exported symbol (helpers are static)
        must never meet another. An op named after a libc or OpenMP function
        (``omp_get_thread_num``) took the place of that function inside the kernel (it
        recursed until the stack ran out), and ``_init``/``_fini`` clash with the C runtime.
        The digest is of the function and its fixed sizes. The function is static: the
        library exports it as `exported_name`."""
        fixed = ",".join(f"{v.name}={n}" for v, n in sorted(self.fixed.items(),
                                                             key=lambda kv: kv[0].name))
        digest = hashlib.sha256(f"{self.func}\n{fixed}".encode()).hexdigest()[:12]
        return f"tdsl_{identifier_chars(self.func.name)}_{digest}"

    lane_loop_pragmas = ["#pragma omp simd"]
    _parallel_work: int | None = None       # the stores of the parallel loop being printed
    _streams: set[int] = set()              # the outputs stored past the caches (ids)

    def function(self) -> list[str]:
        self._streams = streamed_outputs(self.func, self.target, self.fixed)
        return super().function()

    def vector_store(self, dtype: str, address: str, value: str, buffer=None) -> str:
        if id(buffer) not in self._streams:
            return super().vector_store(dtype, address, value)
        return f"{self.helpers.stream_store(dtype)}({address}, {value})"

    def closing(self) -> list[str]:
        return [f"{self.helpers.sfence()}();"] if self._streams else []

    def visit_For(self, s) -> list[str]:
        if s.kind is ForKind.PARALLEL:
            self._parallel_work = static_work(s, self.fixed)
        lines = super().visit_For(s)
        if self._streams and lines[0].startswith(_PARALLEL_FOR):
            # each thread orders its stores past the caches before the team's barrier
            clause = lines[0][len(_PARALLEL_FOR):]
            lines = ["#pragma omp parallel" + clause, "{",
                     *indent(["#pragma omp for schedule(static) nowait", *lines[1:],
                              f"{self.helpers.sfence()}();"]), "}"]
        return lines

    def loop_pragmas(self, kind: ForKind, extent: te.Expr) -> list[str]:
        if kind is ForKind.PARALLEL:
            if ForKind.VECTORIZED in self.loop_kinds:
                return []     # OpenMP forbids threads inside a simd loop; serial is the same
            # a team for one iteration (a vector tail, a single image), or for less work
            # than a fork and a join cost (about a microsecond each), gains nothing: such a
            # loop runs in the calling thread (an LSTM step's 64 x 256 product took longer
            # with two threads). It stays an outlined parallel region all the same (if(0),
            # not a plain loop): gcc 12.2 -O3 miscompiled conv2d_nchwc's padded copy at
            # CB = 1 inlined into the kernel before a parallel region (a masked load with
            # the wrong mask)
            work = self._parallel_work
            if work is not None and work < MIN_PARALLEL_WORK:
                clause = " if(0)"
            elif isinstance(extent, te.Const):
                clause = " if(0)" if extent.value <= 1 else ""
            else:
                clause = f" if({self.expr(extent)} > 1)"
            return [f"{_PARALLEL_FOR}{clause}"]
        if kind is ForKind.VECTORIZED:
            return ["#pragma omp simd"]
        if kind is ForKind.UNROLLED and isinstance(extent, te.Const) and \
                0 < extent.value <= MAX_UNROLL:
            return [f"#pragma GCC unroll {extent.value}"]
        return []

    def align_attribute(self, align: int) -> str:
        return f" __attribute__((aligned({align})))"

    def declare_allocation(self, buf: Buffer, name: str, count: te.Expr,
                           body: list[str]) -> list[str]:
        """Small constant-size buffers live on the stack; the rest is 64-byte-aligned heap
        workspace, freed when the allocation's scope ends."""
        if buf.scope == "shared":
            raise BuildError(f"the {self.language} backend has no shared memory for "
                             f"{buf.name}", hint="shared scope belongs to GPU schedules")
        if self._stack_bytes(buf, count) is not None:
            return super().declare_allocation(buf, name, count, body)
        ctype = self.element_type(buf.dtype)
        self.uses_status = True
        alloc = self.helpers.alloc()
        size = f"{self.expr(count)}, sizeof({ctype})"
        return [f"{ctype}* {self.restrict} {name} = ({ctype}*){alloc}({size}, &tdsl_status);",
                f"if ({name} != NULL) {{", *indent(body), f"    tdsl_free({name});", "}"]

    def module(self) -> CModule:
        function = self.function()     # printed first: it decides which helpers are needed
        # C that links the library calls ``<op>_run`` as it does an embedded build's: a
        # name that stays when the op changes (the digest changes with every edit)
        exported = self.namer.fresh(f"{identifier_chars(self.func.name)}_run")
        args = [self.namer.lookup(b) for b in self.func.params]
        args += [self.namer.lookup(v) for v in self.func.shape_vars if v not in self.fixed]
        function = [f"static {function[0]}", *function[1:], "",
                    f"{self.prototype(exported)} {{",
                    f"    return {self.name}({', '.join(args)});", "}"]
        includes = [f"#include <{h}>" for h in INCLUDES]
        parts = [f"/* Generated by tdsl from {self.func.name}. */", *includes, ""]
        for helper in self.helpers.render():
            parts += [helper, ""]
        # the micro-kernels that tensorize calls, as their intrinsics define them
        for name, source in sorted(self.func.attrs.get("extern_sources", {}).items()):
            parts += [f"/* tensor intrinsic {name} */", source.strip(), ""]
        parts += function
        return CModule(exported, "\n".join(parts) + "\n", self.header(exported),
                       self.prototype(exported))

    def header(self, name: str) -> str:
        guard = f"{name.upper()}_H"
        return "\n".join([
            f"/* Generated by tdsl from {self.func.name}: returns 0, 1 when workspace "
            "memory ran out, 2 or more when a gathered index was out of range. */",
            f"#ifndef {guard}", f"#define {guard}", "#include <stdbool.h>",
            "#include <stdint.h>", "", f"{self.prototype(name)};", "", f"#endif  /* {guard} */",
            ""])


def emit_c(func: LoweredFunc, shapes: dict | None = None, target=None) -> CModule:
    """Print ``func`` as host C for ``target`` (the host by default). ``shapes`` fixes sizes
    at build time ({"M": 64}): they become constants gcc can fold and drop out of the
    parameter list."""
    return HostC(func, shapes, target).module()

