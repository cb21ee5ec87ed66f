"""An ONNX model as a callable whose symbolic input dimensions are bound by each call's
arguments, as a graph's sizes are: the model is converted and built once per binding."""
from __future__ import annotations

import operator
import warnings
from collections import OrderedDict

import numpy as np

from ..errors import CallError, TdslError, TdslWarning

_shape = operator.attrgetter("shape")


class OnnxModule:
    """``OnnxModule(model, target="c", constants=None, **build_options)``: ``model`` an
    ``onnx.ModelProto`` or a path; called with the model's inputs (numpy arrays, in the
    graph's order, those given as ``constants`` left out), it returns its outputs. A batch
    ``N`` or sequence length ``S`` is read off the arguments; each new binding converts and
    builds the model for it (the last ``keep`` bindings are kept)."""

    def __init__(self, model, target="c", constants=None, keep: int = 8, **build_options):
        from . import _onnx, symbolic_dims
        onnx = _onnx()
        if not isinstance(model, onnx.ModelProto):
            try:
                model = onnx.load(str(model))
            except Exception as e:          # protobuf's DecodeError, OSError ...
                raise TdslError(f"can't read {model} as an ONNX model: {e}") from None
        self.model, self.target, self.constants = model, target, dict(constants or {})
        self.build_options, self.keep = build_options, keep
        inits = {i.name for i in model.graph.initializer}
        self.inputs = [i for i in model.graph.input
                       if i.name not in inits and i.name not in self.constants]
        self.dims = symbolic_dims(model)
        self._built: OrderedDict[tuple, object] = OrderedDict()
        # per input: its name, rank and symbolic dimensions (position, name), read out of
        # the protobuf once: reading them at every call cost a small model's call 3.5 us
        self._symbolic = []
        for inp in self.inputs:
            dims = inp.type.tensor_type.shape.dim
            self._symbolic.append((inp.name, len(dims), tuple(
                (k, d.dim_param) for k, d in enumerate(dims)
                if not d.HasField("dim_value") and d.dim_param)))
        self._last: tuple | None = None     # (the input shapes, module) of the last call

    def bind(self, *inputs) -> dict[str, int]:
        """The symbolic dimensions' values in these arguments."""
        if len(inputs) != len(self.inputs):
            raise CallError(f"the model takes {len(self.inputs)} input(s) "
                            f"({', '.join(i.name for i in self.inputs)}), got {len(inputs)}")
        dims: dict[str, int] = {}
        for (name, rank, symbolic), a in zip(self._symbolic, inputs):
            shape = np.shape(a)
            if len(shape) != rank:
                raise CallError(f"input '{name}' has rank {len(shape)}, expected {rank}")
            for k, param in symbolic:
                n = shape[k]
                if dims.setdefault(param, n) != n:
                    raise CallError(f"input '{name}' has {param} = {n} in "
                                    f"dimension {k}, but {dims[param]} elsewhere")
        return dims

    def module(self, dims: dict[str, int]):
        """The graph module built for this binding of the symbolic dimensions."""
        key = tuple(sorted(dims.items()))
        if key in self._built:
            self._built.move_to_end(key)
            return self._built[key]
        import tdsl
        from . import convert_model
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TdslWarning)   # the dims left at 1 are unused
            text, params = convert_model(self.model, "model", "an ONNX model",
                                         self.constants, dims, self.target)
        built = tdsl.loads(text)["model"].build(self.target, params=params,
                                                **self.build_options)
        self._built[key] = built
        if len(self._built) > self.keep:
            self._built.popitem(last=False)
        return built

    def __call__(self, *inputs):
        try:
            shapes = tuple(map(_shape, inputs))
        except AttributeError:              # not an array: bound (and refused) below
            shapes = None
        last = self._last
        if last is not None and shapes == last[0]:
            return last[1](*inputs)         # the module checks the arrays themselves
        module = self.module(self.bind(*inputs))
        if shapes is not None:
            self._last = (shapes, module)
        return module(*inputs)

