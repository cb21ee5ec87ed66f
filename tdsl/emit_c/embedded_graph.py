"""A whole graph as one embedded ``.c``/``.h`` pair: ``int net_run(const float *x, float *y,
void *arena)``.

The graph level (tdsl/lowering/graph, driven by tdsl/graph_api.py) hands over its steps: one
lowered function per fused kernel, with the graph values it reads and writes. Here:

- each kernel is a ``static`` function (`EmbeddedC` in kernel mode), the helpers they need
  printed once;
- the weights (after constant folding) are ``static const`` arrays: they stay in flash;
- the graph's intermediate values and every kernel's own workspace share one arena, placed by
  the graph's memory planner (`memory.run`, greedy by size over lifetimes): a kernel's
  workspace is one more value, live during its step only, so it reuses bytes of values that
  are dead by then;
- the entry checks the arena once, then calls the kernels in order; its parameters are the
  graph's inputs, then its outputs (named after them), then the arena.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import BuildError
from ..lowering.dtypes import FLOATS, to_c
from ..lowering.graph import memory
from ..lowering.loop_ir import Buffer, LoweredFunc
from ..target import as_target
from .arena import buffer_bytes
from .embedded import EmbeddedC, EmbeddedModule, header_text, translation_unit
from .expressions import c_literal
from .helpers import Helpers
from .names import Namer, identifier_chars, C_KEYWORDS, LIBRARY_NAMES
from .printer import indent


@dataclass(frozen=True)
class Step:
    """One kernel of the graph: ``func`` reads graph values ``inputs`` and writes
    ``outputs`` (in its parameters' order)."""
    func: LoweredFunc
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def emit_embedded_graph(name: str, steps: list[Step], inputs: list[str], outputs: list[str],
                        weights: dict[str, np.ndarray], target) -> EmbeddedModule:
    target = as_target(target)
    base = identifier_chars(name)
    macro = base.upper()
    namer = Namer(C_KEYWORDS | LIBRARY_NAMES)
    entry = namer.fresh(f"{base}_run")
    arena = namer.fresh("arena")
    arena_bytes = namer.fresh("tdsl_arena")
    # the buffers of each value, from the kernels' own parameters (dtype, shape)
    buffers: dict[str, Buffer] = {}
    for step in steps:
        for v, b in zip((*step.inputs, *step.outputs), step.func.params):
            buffers.setdefault(v, b)
    for v in (*inputs, *outputs):
        if v not in buffers:
            raise BuildError(f"graph {name}: {v} is neither read nor written by a kernel")

    # kernels whose code is the same but for its name (the four ReLUs of a model) are
    # printed once: flash holds each distinct kernel one time
    printers, helpers, externs, seen = [], Helpers(), {}, {}
    for k, step in enumerate(steps):
        kernel = f"{base}_k{k}"
        p = EmbeddedC(step.func, target=target, kernel_name=kernel)
        lines, ext = p.pieces()
        key = "\n".join(lines).replace(p.entry, "<kernel>")
        for i, b in enumerate(step.func.params):     # parameters named after graph values
            key = re.sub(rf"\b{re.escape(p.namer.lookup(b))}\b", f"<param {i}>", key)
        if key in seen:
            p.entry = seen[key]
            lines = []
        else:
            namer.fresh(kernel)
            seen[key] = p.entry
        helpers.merge(p.helpers)
        externs.update({e: None for e in ext})
        printers.append((p, lines))

    # the arena: intermediate values and each kernel's workspace, by lifetime
    external = set(inputs) | set(outputs) | set(weights)
    ws = [f"<workspace k{k}>" for k in range(len(steps))]
    plan_steps = [(step.inputs, (*step.outputs, w)) for step, w in zip(steps, ws)]
    nbytes = {v: buffer_bytes(buffers[v], name) for s in steps for v in s.outputs}
    nbytes.update({w: p.plan.size for w, (p, _) in zip(ws, printers)})
    plan = memory.run(plan_steps, nbytes, external=external)
    offsets = {s.name: s.offset for s in plan.slots}

    # weights as static const arrays (flash)
    weight_names = {v: namer.fresh(f"tdsl_w_{identifier_chars(v)}") for v in weights}
    consts = [_const_array(weight_names[v], weights[v], buffers[v].dtype)
              for v in weights if v in buffers]

    # the entry
    param_names = {v: namer.fresh(identifier_chars(v)) for v in (*inputs, *outputs)}
    params = []
    for v in inputs:
        b = buffers[v]
        params.append(f"const {to_c(b.dtype)} *restrict {param_names[v]}" if b.shape else
                      f"{to_c(b.dtype)} {param_names[v]}")
    params += [f"{to_c(buffers[v].dtype)} *restrict {param_names[v]}" for v in outputs]
    prototype = f"int {entry}({', '.join([*params, f'void *{arena}'])})"

    def pointer(v: str) -> str:
        if v in param_names:
            return param_names[v]
        if v in weight_names:
            return weight_names[v]
        ctype = to_c(buffers[v].dtype)
        return f"({ctype} *)(void *)({arena_bytes} + {offsets[v]})"

    body = []
    if plan.peak_bytes:
        body += [f"unsigned char *const {arena_bytes} = (unsigned char *){arena};",
                 f"if ({arena} == NULL) return {macro}_ERR_ARENA_NULL;",
                 f"if ((uintptr_t){arena} % {macro}_ARENA_ALIGN != 0) "
                 f"return {macro}_ERR_ARENA_ALIGN;"]
    else:
        body.append(f"(void){arena};")
    body.append("int rc = 0;")
    for k, (step, w, (p, _)) in enumerate(zip(steps, ws, printers)):
        # a kernel takes a scalar input by value (a graph input already is one)
        args = [pointer(v) if buffers[v].shape or v in param_names else f"*{pointer(v)}"
                for v in step.inputs]
        args += [pointer(v) for v in step.outputs]
        args.append(f"{arena_bytes} + {offsets[w]}" if p.plan.size else arena)
        body += [f"rc = {p.entry}({', '.join(args)});", "if (rc != 0) return rc;"]
    functions = [line for _, lines in printers for line in [*lines, ""]]
    functions += [f"{prototype} {{", *indent(body + ["return 0;"]), "}"]

    pieces = [*helpers.render(), *externs, *consts]
    source, math, uses_bool = translation_unit(base, f"graph {name}", target, pieces,
                                               functions)
    header = header_text(macro, f"graph {name}", target,
                         f"{entry}: the graph's inputs ({', '.join(inputs)}), then its "
                         f"outputs ({', '.join(outputs)}), then", plan.peak_bytes, math,
                         uses_bool, prototype)
    io = tuple(Buffer(v, buffers[v].dtype, buffers[v].shape) for v in (*inputs, *outputs))
    const_bytes = sum(weights[v].nbytes for v in weights if v in buffers)
    return EmbeddedModule(base, entry, macro, source, header, plan.peak_bytes,
                          plan.naive_bytes, math, io, len(inputs), const_bytes)


def _const_array(cname: str, array: np.ndarray, dtype: str) -> str:
    """``static const float w[n] = {...};``, 8 values a line; floats exactly (each literal
    is the float32 value's shortest exact decimal)."""
    flat = np.ascontiguousarray(array).ravel()
    if dtype in FLOATS:
        values = [c_literal(float(x), dtype)[0] for x in flat]
    else:
        values = [str(int(x)) for x in flat]
    rows = [", ".join(values[i:i + 8]) for i in range(0, len(values), 8)] or ["0"]
    body = ",\n".join(f"    {r}" for r in rows)
    return f"static const {to_c(dtype)} {cname}[{max(len(flat), 1)}] = {{\n{body}\n}};"


__all__ = ["Step", "emit_embedded_graph"]
