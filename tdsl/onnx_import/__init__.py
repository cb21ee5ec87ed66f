"""``tdsl import model.onnx -o DIR/name.tdsl``: an ONNX model as a .tdsl graph and an .npz of
its weights (under the optional extra ``tdsl[onnx]``: ``pip install 'tdsl[onnx]'``).

Opsets 7 to current PyTorch exports (17+) are read: weights listed among the graph inputs
(older exporters) are weights; shape arithmetic (Shape, Gather, Concat, ConstantOfShape,
Reshape with a shape input ...) is evaluated here; Dropout and Identity vanish. Tensors are
f32, f64, i64, i32, i16, i8, u8 or bool. The graph is written for static shapes: symbolic
dimensions of the inputs (a batch ``N``, a sequence length ``S``) take the values ``dims``
gives (``tdsl import --dim N=8``), else 1 with a warning; `OnnxModule` binds them from the
arguments of each call instead, building once per binding. A graph input used where a value must be
known at import time (a Reshape's shape, a Slice's starts) can be given as a constant. An
operator or attribute that is not supported is a `TdslError` naming the node.

Converters are grouped by family, one module each, all registered in `registry`.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TdslError, TdslWarning
# the family modules register their converters when imported
# (qdq last: it wraps converters the others registered)
from . import (activations, attention, control, conv, elementwise, linalg,  # noqa: F401
               nn, normalization, quantized, recurrent, reductions, signal, tensor)
from . import qdq  # noqa: F401,E402
from . import templates as T
from .convert import Converter, NeedsConstant, Tensor, tdsl_dtype
from .registry import ATTRIBUTES, CONVERTERS, FAMILY

__all__ = ["ATTRIBUTES", "CONVERTERS", "FAMILY", "Imported", "NeedsConstant", "OnnxModule",
           "convert_model", "import_onnx", "symbolic_dims"]


@dataclass(frozen=True)
class Imported:
    tdsl: Path
    npz: Path
    graph: str
    nodes: int
    params: int


def _onnx():
    try:
        import onnx
    except ImportError:
        raise TdslError("tdsl import needs the onnx package: pip install 'tdsl[onnx]'") \
            from None
    return onnx


def symbolic_dims(model) -> list[str]:
    """The names of the symbolic dimensions of ``model``'s inputs, in order of appearance."""
    out = []
    for inp in model.graph.input:
        for d in inp.type.tensor_type.shape.dim:
            if not d.HasField("dim_value") and d.dim_param and d.dim_param not in out:
                out.append(d.dim_param)
    return out


def _dot_products(target) -> tuple[bool, bool]:
    """Whether ``target`` has an int8 and an i16 dot product (`Target.has_int8_dot`,
    `Target.has_i16_dot`); neither for a target this machine can't build for."""
    from ..target import as_target
    try:
        t = as_target(target)
    except TdslError:
        return False, False
    return t.has_int8_dot, t.has_i16_dot


def convert_model(model, name: str, source: str = "an ONNX model",
                  constants: dict[str, np.ndarray] | None = None,
                  dims: dict[str, int] | None = None,
                  target=None) -> tuple[str, dict[str, np.ndarray]]:
    """The .tdsl text of ``model`` (an ``onnx.ModelProto``) as graph ``name``, and its
    weights by param name. ``constants`` gives values for graph inputs, which are then
    constants of the graph rather than its inputs; ``dims`` the values of symbolic input
    dimensions (by their names; 1 for those not given, with a warning). ``target`` (the
    host's C by default) is what the text is for where the fastest form of a layer depends
    on the CPU: an int8 convolution sums int8 products where it has an int8 dot product
    (VNNI), else i16 ones where it has an i16 dot product (x86), else in f32
    (`quantized.qlinear_conv`)."""
    onnx = _onnx()
    from onnx import numpy_helper
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    g = model.graph
    cv = Converter(g, opset, name)
    cv.int8_dot, cv.i16_dot = _dot_products(target)
    for init in g.initializer:
        cv.static[init.name] = numpy_helper.to_array(init)
    names = {inp.name for inp in g.input}
    dims = dict(dims or {})
    known = symbolic_dims(model)
    for k, v in dims.items():
        if k not in known:
            raise TdslError(f"--dim {k}: the model's inputs have no symbolic dimension '{k}'"
                            f" ({', '.join(known) or 'they have none'})")
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise TdslError(f"--dim {k}={v}: a dimension is a positive integer")
    unbound = [k for k in known if k not in dims and
               any(i.name not in cv.static and i.name not in (constants or {}) and
                   any(d.dim_param == k for d in i.type.tensor_type.shape.dim)
                   for i in g.input)]
    if unbound:
        warnings.warn(TdslWarning(
            f"{source}: the symbolic dimension{'s' * (len(unbound) > 1)} "
            f"{', '.join(unbound)} of its inputs {'are' if len(unbound) > 1 else 'is'} set "
            f"to 1; give {'them' if len(unbound) > 1 else 'it'} with --dim "
            f"{unbound[0]}=VALUE (tdsl.onnx_import.OnnxModule binds them per call)"),
            stacklevel=2)
    for k in constants or {}:
        if k not in names:
            raise TdslError(f"--const {k}: the model has no input '{k}' (inputs: "
                            f"{', '.join(i.name for i in g.input)})")
        cv.static[k] = np.asarray(constants[k])
    for inp in g.input:
        if inp.name in cv.static:
            continue                     # a weight listed among the inputs (opsets < 9)
        tt = inp.type.tensor_type
        if not inp.type.HasField("tensor_type"):
            raise TdslError(f"input {inp.name}: only tensor inputs are supported (not "
                            f"sequences, maps or optionals)")
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        dtype = tdsl_dtype(np_dtype, f"input {inp.name}")
        shape = [d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 1)
                 for d in tt.shape.dim]
        t = Tensor(cv.fresh(inp.name), shape, dtype)
        cv.tensors[inp.name] = t
        cv.inputs.append(t)
        cv.input_names.add(inp.name)
    for k, node in enumerate(g.node):
        cv.node, cv.count = node, k
        if node.domain not in ("", "ai.onnx"):
            raise cv.error(f"operators of domain '{node.domain}' are not supported")
        if node.op_type not in CONVERTERS:
            raise cv.error("this operator is not supported (docs/onnx.md lists those that "
                           "are)")
        attrs = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
        unknown = sorted(set(attrs) - ATTRIBUTES[node.op_type])
        if unknown:
            raise cv.error(f"attribute '{unknown[0]}' is not supported")
        CONVERTERS[node.op_type](cv, node, attrs)
    outs = []
    for o in g.output:
        t = cv.tensor(o.name) if o.name in cv.static or o.name in cv.tensors else None
        if t is None:
            raise TdslError(f"output {o.name} is computed by no node")
        if t in cv.inputs or t.name in cv.params or t in outs:
            # a graph computes its outputs: an input, a constant or a repeated output is
            # copied
            cv.call(o.name + "#copy", cv.op("copy", T.reshape(list(t.shape), list(t.shape),
                                                             t.dtype)),
                    [t], t.shape, dtype=t.dtype)
            t = cv.tensors[o.name + "#copy"]
        outs.append(t)
    _drop_unread_lines(cv, outs)
    # weights made on the way and then left unread (a rewrite that took another route)
    # are not the graph's
    read = set(re.findall(r"\w+", "\n".join(line.split("=", 1)[1] for line in cv.lines)))
    cv.params = {k: v for k, v in cv.params.items() if k in read}
    return _text(cv, name, source, opset, outs), dict(cv.params)


def _drop_unread_lines(cv: Converter, outs) -> None:
    """The graph's lines whose results nothing reads: an elementwise op written into its
    consumer's (`elementwise._inline`), a copy a rewrite made and did not use."""
    needed = {t.name for t in outs}
    kept = []
    for line in reversed(cv.lines):
        results, _, call = line.strip().partition(" = ")
        if needed & {r.strip() for r in results.split(",")}:
            kept.append(line)
            needed |= set(re.findall(r"\w+", call.partition("(")[2]))
    cv.lines = kept[::-1]


def _text(cv: Converter, name, source, opset, outs) -> str:
    def decl(t):
        return f"{t.name}: {t.type}"
    head = [f"# Imported from {source} (opset {opset}) by `tdsl import`.", "import std", ""]
    sig = f"graph {name}({', '.join(decl(t) for t in cv.inputs)}) -> " \
          f"({', '.join(decl(t) for t in outs)}) {{"
    params = [f"    param {n}: {T.ty(a.shape, tdsl_dtype(a.dtype, n))}"
              for n, a in cv.params.items()]
    return "\n".join(head + cv.op_texts + [sig] + params + cv.lines + ["}", ""])


def import_onnx(model_path, output, name: str | None = None,
                constants: dict[str, np.ndarray] | None = None,
                dims: dict[str, int] | None = None, target=None) -> Imported:
    """Read ``model_path``, write ``output`` (a .tdsl) and its weights beside it (.npz);
    ``constants``, ``dims`` and ``target`` as `convert_model`'s."""
    onnx = _onnx()
    output = Path(output)
    if output.suffix != ".tdsl":
        raise TdslError(f"the output {output} should end in .tdsl (the weights go beside it "
                        f"in {output.stem}.npz)")
    try:
        model = onnx.load(str(model_path))
    except Exception as e:              # onnx raises protobuf's DecodeError, OSError ...
        raise TdslError(f"can't read {model_path} as an ONNX model: {e}") from None
    name = name or output.stem
    if not name.isidentifier():
        raise TdslError(f"'{name}' can't name a graph: say --name NAME")
    text, params = convert_model(model, name, Path(model_path).name, constants, dims,
                                 target)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    npz = output.with_suffix(".npz")
    np.savez(npz, **params)
    return Imported(output, npz, name, text.count("\n    ") - len(params), len(params))


from .module import OnnxModule  # noqa: E402  (it uses convert_model)
