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
from ..lowering.dtypes import MINIFLOATS, from_numpy, to_numpy
from . import templates as T

RESERVED = {"op", "import", "schedule", "for", "as", "knob", "in", "require", "if", "else",
            "graph", "param", "and", "or", "not", "true", "false", "f16", "f32", "f64", "i8",
            "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool", "select", "sum", "max",
            "min", "prod", "inf", "pi", "int", "float"}


class Tensor:
    """A value of the tdsl graph: its name there, shape and tdsl dtype ('f32', 'i64' ...)."""

    def __init__(self, name: str, shape, dtype: str = "f32"):
        self.name, self.shape, self.dtype = name, tuple(int(n) for n in shape), dtype

    @property
    def type(self) -> str:
        return T.ty(self.shape, self.dtype)


class NeedsConstant(TdslError):
    """A graph input is used where a value must be known at import time (a shape, axes,
    pads): give it as a constant (``convert_model(constants=)``, ``tdsl import --const``)."""

    def __init__(self, msg: str, name: str):
        super().__init__(msg)
        self.input_name = name


def tdsl_dtype(dt, what: str) -> str:
    """The tdsl dtype of numpy dtype ``dt``, or a clear error naming ``what``."""
    name = from_numpy(dt)
    if name not in SUPPORTED_DTYPES:
        raise TdslError(f"{what} has dtype {np.dtype(dt)}, which tdsl graphs don't carry "
                        f"(they carry {', '.join(SUPPORTED_DTYPES)})")
    return name


# the dtypes an imported graph carries (docs/onnx.md): f16, bf16 and the 8- and 4-bit floats
# are stored as such and computed in f32 (rounded on each store, as onnxruntime's CPU kernels
# do f16); the 4- and 2-bit integers, float8e8m0 and strings are refused by `tdsl_dtype`
SUPPORTED_DTYPES = ("f32", "f64", "f16", *MINIFLOATS, "i64", "i32", "i16", "i8", "u8", "u16",
                    "u32", "u64", "bool")


class Converter:
    def __init__(self, graph, opset: int, name: str):
        self.graph, self.opset, self.name = graph, opset, name
        self.static: dict[str, np.ndarray] = {}
        self.int8_dot = False     # the target has an int8 dot product (convert_model's)
        self.i16_dot = False      # and an i16 one
        self.tensors: dict[str, Tensor] = {}
        self.used: set[str] = set()
        self.params: dict[str, np.ndarray] = {}
        self.param_of: dict[str, str] = {}        # ONNX static value -> its param
        self.ops: dict[str, str] = {}             # op text -> op name
        self.op_texts: list[str] = []
        self.lines: list[str] = []
        self.inputs: list[Tensor] = []
        self.input_names: set[str] = set()       # the ONNX names of the graph inputs
        # nodes converted from subgraphs (If, Loop, Scan bodies) by the renamed values they
        # compute: with the main graph's, what a value is computed from
        self.subgraph_producers: dict = {}
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
            msg = f"input '{name}' must be known at import time (a constant)"
            if name in self.input_names:
                raise NeedsConstant(self.error(
                    f"{msg}; it is a graph input: give its value with "
                    f"--const {name}=FILE.npy").args[0], name)
            raise self.error(msg)
        return self.static[name]

    def dtype(self, name: str) -> str:
        if name in self.static:
            return tdsl_dtype(self.static[name].dtype, f"'{name}'")
        return self.tensor(name).dtype

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
            dtype = tdsl_dtype(a.dtype, f"'{name}'")
            t = Tensor(self.fresh(name), a.shape, dtype)
            self.params[t.name] = np.require(a, to_numpy(dtype), "C")  # keeps rank 0
            self.tensors[name] = t
            return t
        raise self.error(f"unknown value '{name}'")

    def float_tensor(self, name: str) -> Tensor:
        """``tensor(name)``, which must be f32 (the operators of std's f32 ops)."""
        t = self.tensor(name)
        if t.dtype != "f32":
            raise self.error(f"'{name}' is {t.dtype}; this operator is supported on f32")
        return t

    def operand(self, name: str):
        """A static scalar as a `Literal`, else the tensor."""
        if name in self.static and self.static[name].size == 1:
            a = self.static[name]
            return T.Literal(a.reshape(()).item(), tdsl_dtype(a.dtype, f"'{name}'"),
                             tuple(a.shape))
        return self.tensor(name)

    # ------------------------------------------------------------------ emitting

    def op(self, kind: str, text: str) -> str:
        """The name of the op with this text (``{name}`` filled in), written once."""
        if text not in self.ops:
            name = self.fresh(f"{kind}_{len(self.ops)}")
            self.ops[text] = name
            self.op_texts.append(text.replace("{name}", name, 1))
        return self.ops[text]

    def call(self, out: str, func: str, args, shape, attrs: str = "",
             dtype: str = "f32") -> None:
        """``out = func(args; attrs)`` in the graph body, ``out`` an ONNX value name, the
        result of ``shape`` and ``dtype``."""
        t = Tensor(self.fresh(out), shape, dtype)
        names = ", ".join(a.name for a in args)
        self.lines.append(f"    {t.name} = {func}({names}{'; ' + attrs if attrs else ''})")
        self.tensors[out] = t

    def alias(self, out: str, src: str) -> None:
        if src in self.static:
            self.static[out] = self.static[src]
        else:
            self.tensors[out] = self.tensor(src)

    def elementwise(self, out: str, names, expr: str, kind: str,
                    dtype: str | None = None) -> None:
        """``out = expr`` elementwise with numpy broadcasting: ``{0}``, ``{1}`` ... in
        ``expr`` are the values ``names`` (static scalars become literals); the result
        has ``dtype`` (default: the first operand's)."""
        ops = [self.operand(n) for n in names]
        out_shape = tuple(np.broadcast_shapes(*(o.shape for o in ops)))
        dtype = dtype or ops[0].dtype
        text = T.elementwise(ops, list(out_shape), expr, dtype)
        self.call(out, self.op(kind, text), [o for o in ops if isinstance(o, Tensor)],
                  out_shape, dtype=dtype)

    def reshape(self, out: str, src: str, shape) -> None:
        shape = tuple(int(n) for n in shape)
        if src in self.static:
            self.static[out] = self.static[src].reshape(shape)
            return
        x = self.tensor(src)
        if x.shape == shape:
            self.tensors[out] = x
            return
        self.call(out, self.op("reshape", T.reshape(list(x.shape), list(shape), x.dtype)),
                  [x], shape, dtype=x.dtype)
