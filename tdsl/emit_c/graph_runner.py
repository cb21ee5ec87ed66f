"""One C entry point for a graph module's kernels, as TVM's graph executor runs a model's
operators from C: ``run()`` is one call into a small generated library that calls each
kernel in order through its address, with its buffers' addresses in a table and its sizes
as literals. A Python loop over the kernels paid 1-5 us of interpreter and libffi time per
kernel, more than the kernels of a small model take (an LSTM of 49 steps had 56 kernels).

The source depends only on the kernels' C types and the sizes, never on an address, so the
build cache serves it across processes; the table is filled in at bind time.
"""
from __future__ import annotations

import threading

import numpy as np
from cffi import FFI

from ..target import Target
from . import lean
from .build import BuildCache
from .kernel import CCall, load_library

_ENTRY = "tdsl_graph_run"
_PROTOTYPE = f"int {_ENTRY}(void *const *table, int64_t *failed)"


def runner_source(calls: list[CCall]) -> tuple[str, int]:
    """``(C source, table length)``: the table holds each kernel's address, then the
    addresses of its arrays and of its rank-0 inputs, in call order."""
    types, body, slot = [], [], 0
    for k, call in enumerate(calls):
        params = ", ".join(c for _, _, c in call.args) or "void"
        types.append(f"typedef {call.result} (*tdsl_kernel_{k})({params});")
        fn, slot = slot, slot + 1
        args = []
        for kind, value, ctype in call.args:
            if kind == "value":              # a size: graphs pass every scalar as an array
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"a graph runner passes sizes by value, not {value!r}")
                args.append(f"({ctype}){value}")
                continue
            args.append(f"*(const {ctype} *)table[{slot}]" if kind == "deref" else
                        f"({ctype})table[{slot}]")
            slot += 1
        body.append(f"    if ((status = ((tdsl_kernel_{k})table[{fn}])({', '.join(args)})) "
                    f"!= 0) {{ *failed = {k}; return status; }}")
    source = "\n".join(["#include <stdint.h>", "#include <stdbool.h>", *types, "",
                        f"{_PROTOTYPE} {{", "    int status;", *body, "    return 0;", "}",
                        ""])
    return source, slot


class GraphRunner:
    """``run()``: the bound kernel calls in order, from C; a kernel's nonzero status raises
    what that kernel's own call raises."""

    def __init__(self, calls: list[CCall], target: Target, cache: BuildCache | None = None):
        source, slots = runner_source(calls)
        built = (cache or BuildCache()).build(source, target.flags, target.compiler)
        self._ffi, lib = load_library(str(built.lib_path), _PROTOTYPE)
        self._entry = getattr(lib, _ENTRY)
        ffi: FFI = self._ffi
        self._table = ffi.new("void *[]", max(slots, 1))
        slot = 0
        for call in calls:
            self._table[slot] = ffi.cast("void *", call.address)
            slot += 1
            for kind, value, _ in call.args:
                if kind != "value":
                    self._table[slot] = ffi.cast("void *", value)
                    slot += 1
        self._home = [self._table[i] for i in range(len(self._table))]   # what run_on restores
        self._failed = ffi.new("int64_t *")
        self._calls = calls          # the kernels' libraries and the arrays stay alive
        # held by a call from binding its arrays to reading its outputs: the table, the
        # staging buffers and the arena are the binding's, one set for all threads (two
        # threads calling a small CNN's module at once got 70% of their results wrong)
        self.lock = threading.Lock()

    def __call__(self) -> None:
        self._check(self._entry(self._table, self._failed))

    def slots_of(self, array) -> tuple[int, ...] | None:
        """The table slots that hold ``array``'s address, for `run_on` to point elsewhere;
        None where a slot points into it past its start (a view of part of it, which
        pointing its slots elsewhere would leave behind)."""
        start = array.ctypes.data
        end = start + array.nbytes
        slots = []
        for i in range(len(self._table)):
            address = int(self._ffi.cast("uintptr_t", self._table[i]))
            if address == start:
                slots.append(i)
            elif start < address < end:
                return None
        return tuple(slots)

    def run_on(self, bindings: list[tuple[tuple[int, ...], np.ndarray]]) -> None:
        """A run with the slots of each ``(slots, array)`` pointing at ``array``, a
        contiguous one: a graph's inputs and outputs bound per call, with no copy. The table
        is restored after, so that it never holds an address the caller may free. The
        address is cffi's `from_buffer` (0.2 us; ``ctypes.data`` and a cast took 1.4)."""
        from_buffer, table, home = self._ffi.from_buffer, self._table, self._home
        try:
            for slots, array in bindings:
                pointer = from_buffer(array)
                for i in slots:
                    table[i] = pointer
            status = self._entry(table, self._failed)       # self(), one Python call less
        finally:
            for slots, _ in bindings:
                for i in slots:
                    table[i] = home[i]
        self._check(status)

    def lean_call(self, inputs, outputs):
        """``call(arrays)``: `run_on` for one binding, written out for it (`emit_c.lean`):
        ``inputs`` are ``(shape, dtype, slots)`` of the arrays a call takes, ``outputs``
        ``(shape, dtype, slots, allocate)`` of the fresh arrays it returns
        (``allocate(shape, dtype)``). It returns None, running nothing, unless the arrays
        are contiguous, aligned numpy arrays of those shapes and dtypes."""
        env = {"from_buffer": self._ffi.from_buffer, "table": self._table,
               "entry": self._entry, "failed": self._failed, "check": self._check,
               "acquire": self.lock.acquire, "release": self.lock.release}
        lines = lean.unpack_and_check(len(inputs), env, [(s, d) for s, d, _ in inputs])
        bound = [(f"a{k}", slots) for k, (_, _, slots) in enumerate(inputs)]
        for k, (shape, dtype, slots, allocate) in enumerate(outputs):
            env[f"out_shape{k}"], env[f"out_dtype{k}"], env[f"allocate{k}"] = \
                shape, dtype, allocate
            lines.append(f"    o{k} = allocate{k}(out_shape{k}, out_dtype{k})")
            bound.append((f"o{k}", slots))
        lines += [f"    p{k} = from_buffer({name})" for k, (name, _) in enumerate(bound)]
        lines += ["    acquire()", "    try:"]
        lines += [f"        table[{i}] = p{k}" for k, (_, slots) in enumerate(bound)
                  for i in slots]
        lines += ["        status = entry(table, failed)", "    finally:"]
        for _, slots in bound:
            for i in slots:
                env[f"home{i}"] = self._home[i]
                lines.append(f"        table[{i}] = home{i}")
        lines.append("        release()")
        outs = ", ".join(f"o{k}" for k in range(len(outputs)))
        lines += ["    if status != 0:", "        check(status)",
                  f"    return {outs if len(outputs) == 1 else f'({outs},)'}"]
        return lean.define("call(arrays)", lines, env)

    def _check(self, status: int) -> None:
        if status != 0:
            self._calls[self._failed[0]].kernel.raise_status(status)
