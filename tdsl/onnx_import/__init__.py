"""``tdsl import model.onnx -o DIR/name.tdsl``: an ONNX model as a .tdsl graph and an .npz of
its weights (under the optional extra ``tdsl[onnx]``: ``pip install 'tdsl[onnx]'``).

Opsets 7 to current PyTorch exports (17+) are read: weights listed among the graph inputs
(older exporters) are weights; shape arithmetic (Shape, Gather, Concat, ConstantOfShape,
Reshape with a shape input ...) is evaluated here; Dropout and Identity vanish. Symbolic
dimensions of the inputs (a batch ``N``) are set to 1: the graph is written for static
shapes. An operator or attribute that is not supported is a `TdslError` naming the node.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TdslError
from . import nn, ops  # noqa: F401  (nn registers its converters)
from .convert import Converter, Tensor
from .ops import ATTRIBUTES, CONVERTERS


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


def convert_model(model, name: str, source: str = "an ONNX model"
                  ) -> tuple[str, dict[str, np.ndarray]]:
    """The .tdsl text of ``model`` (an ``onnx.ModelProto``) as graph ``name``, and its
    weights by param name."""
    onnx = _onnx()
    from onnx import numpy_helper
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    g = model.graph
    cv = Converter(g, opset, name)
    for init in g.initializer:
        cv.static[init.name] = numpy_helper.to_array(init)
    for inp in g.input:
        if inp.name in cv.static:
            continue                     # a weight listed among the inputs (opsets < 9)
        tt = inp.type.tensor_type
        if tt.elem_type != onnx.TensorProto.FLOAT:
            raise TdslError(f"input {inp.name}: only float32 inputs are supported")
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        t = Tensor(cv.fresh(inp.name), shape)
        cv.tensors[inp.name] = t
        cv.inputs.append(t)
    for k, node in enumerate(g.node):
        cv.node, cv.count = node, k
        if node.domain not in ("", "ai.onnx"):
            raise cv.error(f"operators of domain '{node.domain}' are not supported")
        if node.op_type not in CONVERTERS:
            raise cv.error("this operator is not supported (supported: "
                           f"{', '.join(sorted(CONVERTERS))})")
        attrs = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
        unknown = sorted(set(attrs) - ATTRIBUTES[node.op_type])
        if unknown:
            raise cv.error(f"attribute '{unknown[0]}' is not supported")
        CONVERTERS[node.op_type](cv, node, attrs)
    outs = []
    for o in g.output:
        if o.name not in cv.tensors:
            raise TdslError(f"output {o.name} is a constant or an input; tdsl graphs compute "
                            f"their outputs")
        outs.append(cv.tensors[o.name])
    return _text(cv, name, source, opset, outs), dict(cv.params)


def _text(cv: Converter, name, source, opset, outs) -> str:
    def decl(t):
        return f"{t.name}: f32[{', '.join(map(str, t.shape))}]"
    head = [f"# Imported from {source} (opset {opset}) by `tdsl import`.", "import std", ""]
    sig = f"graph {name}({', '.join(decl(t) for t in cv.inputs)}) -> " \
          f"({', '.join(decl(t) for t in outs)}) {{"
    params = [f"    param {n}: f32[{', '.join(map(str, a.shape))}]"
              for n, a in cv.params.items()]
    return "\n".join(head + cv.op_texts + [sig] + params + cv.lines + ["}", ""])


def import_onnx(model_path, output, name: str | None = None) -> Imported:
    """Read ``model_path``, write ``output`` (a .tdsl) and its weights beside it (.npz)."""
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
    text, params = convert_model(model, name, Path(model_path).name)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    npz = output.with_suffix(".npz")
    np.savez(npz, **params)
    return Imported(output, npz, name, text.count("\n    ") - len(params), len(params))
