"""An ONNX graph -> the text of a .tdsl graph block, the ops it needs, and its weights.

Values are either *static* (known now: initializers, Constant, ConstantOfShape, and what is
computed from them and from static shapes -- shape arithmetic is done here, with numpy) or
*tensors* of the tdsl graph. A static value used as an op's tensor argument becomes a
``param`` (a weight in the .npz); one of a single element used in arithmetic becomes a
literal. Nodes map to standard-library ops where one means exactly the ONNX operator
(conv2d with symmetric padding, dense for Gemm with transB, batch_norm, ...), and to ops
written for their shapes otherwise (`templates`). Anything else is a `TdslError` naming
the node.
"""
from __future__ import annotations

import keyword
import re

import numpy as np

from ..errors import TdslError
from . import templates as T

RESERVED = {"op", "import", "schedule", "for", "as", "knob", "in", "require", "if", "else",
            "graph", "param", "and", "or", "not", "true", "false", "f16", "f32", "f64", "i8",
            "i16", "i32", "i64", "u8", "bool", "select", "sum", "max", "min", "prod", "inf",
            "pi", "int", "float"}


class Tensor:
    def __init__(self, name: str, shape):
        self.name, self.shape = name, tuple(int(n) for n in shape)


class Converter:
    def __init__(self, graph, opset: int, name: str):
        self.graph, self.opset, self.name = graph, opset, name
        self.static: dict[str, np.ndarray] = {}
        self.tensors: dict[str, Tensor] = {}
        self.used: set[str] = set()
        self.params: dict[str, np.ndarray] = {}
        self.param_of: dict[str, str] = {}        # ONNX static value -> its param
        self.ops: dict[str, str] = {}             # op text -> op name
        self.op_texts: list[str] = []
        self.lines: list[str] = []
        self.inputs: list[Tensor] = []
        self.node = None
        self.count = 0

    # ------------------------------------------------------------------ names and values

    def fresh(self, onnx_name: str) -> str:
        base = re.sub(r"\W", "_", onnx_name) or "t"
        if base[0].isdigit() or base in RESERVED or keyword.iskeyword(base) or \
                base.startswith("_"):
            base = "t_" + base.lstrip("_")
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name

    def error(self, msg: str) -> TdslError:
        n = self.node
        return TdslError(f"node {n.name or '#' + str(self.count)} ({n.op_type}): {msg}")

    def is_static(self, name: str) -> bool:
        return name in self.static

    def value(self, name: str) -> np.ndarray:
        if name not in self.static:
            raise self.error(f"input '{name}' must be known at import time (a constant)")
        return self.static[name]

    def shape(self, name: str) -> tuple[int, ...]:
        if name in self.static:
            return tuple(self.static[name].shape)
        return self.tensor(name).shape

    def tensor(self, name: str) -> Tensor:
        """A graph tensor for ``name``: a static value becomes a float32 weight."""
        if name in self.tensors:
            return self.tensors[name]
        if name in self.static:
            a = self.static[name]
            if a.dtype.kind not in "fiub":
                raise self.error(f"'{name}' has dtype {a.dtype}")
            t = Tensor(self.fresh(name), a.shape)
            self.params[t.name] = np.ascontiguousarray(a, dtype=np.float32)
            self.tensors[name] = t
            return t
        raise self.error(f"unknown value '{name}'")

    def operand(self, name: str):
        """A static scalar as a float (a literal), else the tensor."""
        if name in self.static and self.static[name].size == 1:
            return float(self.static[name].reshape(()))
        return self.tensor(name)

    # ------------------------------------------------------------------ emitting

    def op(self, kind: str, text: str) -> str:
        """The name of the op with this text (``{name}`` filled in), written once."""
        if text not in self.ops:
            name = self.fresh(f"{kind}_{len(self.ops)}")
            self.ops[text] = name
            self.op_texts.append(text.replace("{name}", name, 1))
        return self.ops[text]

    def call(self, out: str, func: str, args, shape, attrs: str = "") -> None:
        """``out = func(args; attrs)`` in the graph body, ``out`` an ONNX value name."""
        t = Tensor(self.fresh(out), shape)
        names = ", ".join(a.name for a in args)
        self.lines.append(f"    {t.name} = {func}({names}{'; ' + attrs if attrs else ''})")
        self.tensors[out] = t

    def alias(self, out: str, src: str) -> None:
        if src in self.static:
            self.static[out] = self.static[src]
        else:
            self.tensors[out] = self.tensor(src)

    def elementwise(self, out: str, names, expr: str, kind: str) -> None:
        ops = [self.operand(n) for n in names]
        shapes = [() if isinstance(o, float) else o.shape for o in ops]
        out_shape = tuple(np.broadcast_shapes(*shapes))
        text = T.elementwise([o if isinstance(o, float) else list(o.shape) for o in ops],
                             list(out_shape), expr)
        self.call(out, self.op(kind, text), [o for o in ops if not isinstance(o, float)],
                  out_shape)

    def reshape(self, out: str, src: str, shape) -> None:
        shape = tuple(int(n) for n in shape)
        if src in self.static:
            self.static[out] = self.static[src].reshape(shape)
            return
        x = self.tensor(src)
        if x.shape == shape:
            self.tensors[out] = x
            return
        self.call(out, self.op("reshape", T.reshape(list(x.shape), list(shape))), [x], shape)
