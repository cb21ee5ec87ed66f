"""``custom_op``: a tdsl op registered as a PyTorch operator (`torch.library`).

The registration is what ``torch.compile`` and ``torch.export`` need to treat the op as one
opaque node, with no graph break:

- a schema from the op's signature: its tensor parameters become ``Tensor`` arguments, its
  rank-0 parameters ``float``/``int``/``bool`` ones, its outputs ``Tensor`` results; the
  attributes are fixed at registration (``custom_op(op, name, **attrs)``);
- a CPU implementation calling the op's host kernel (built on first call, specialised per
  shape as `Op.build` does) on the tensors' memory, outputs allocated as tensors' memory;
- a fake (meta) implementation computing the outputs' shapes with tdsl's own size rules
  (`lowering.sizes`: the sizes bound from the inputs' shapes, the output dimensions
  evaluated), so fake tensors and symbolic sizes flow through;
- autograd: the user's ``backward`` (a tdsl op or a callable) when given; otherwise a call
  on tensors that require grad is refused with a hint, rather than giving results whose
  gradient would silently be missing.

A backward tdsl op is matched by parameter names: a parameter named as a forward input or
output receives it, one named ``d<Out>`` (or ``grad_<Out>``) the gradient of output
``Out``; its outputs named ``d<In>`` (or ``grad_<In>``) are the gradients of the inputs
(inputs with none get None). It is registered as a custom op too (``<name>_backward``),
so a compiled training step keeps it one node. A callable ``backward(ctx, *grads)`` gets
``ctx.inputs`` and ``ctx.outputs`` and returns one gradient (or None) per tensor input.
"""
from __future__ import annotations

import torch

from ..errors import CallError, TdslError
from ..lowering import sizes as size_rules
from ..lowering.dtypes import to_numpy

_SCALARS = {"f32": "float", "f64": "float", "bool": "bool"}
_TORCH_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i8": torch.int8,
                 "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
                 "u8": torch.uint8, "bool": torch.bool}
if hasattr(torch, "float16"):
    _TORCH_DTYPES["f16"] = torch.float16

# qualified name -> (the op's identity, the packet): registering twice is an error unless
# it is the same op with the same attributes (a re-run cell)
_REGISTERED: dict[str, tuple] = {}


def custom_op(op, name: str, *, backward=None, target="c", **attrs):
    """Register the tdsl ``op`` (``tdsl.load(path)["name"]``, ``tdsl.stdlib["softmax"]``)
    with ``torch.library`` as ``name`` (``"mylib::op"``), its attributes fixed to
    ``attrs``, and return the PyTorch op (``torch.ops.mylib.op``)."""
    ns, sep, opname = name.partition("::")
    if not sep or not ns.isidentifier() or not opname.isidentifier():
        raise TdslError(f"custom op name '{name}' must be 'namespace::name'",
                        hint="e.g. name='mylib::softmax'")
    identity = (op.module.name, op.name, op.signature(), tuple(sorted(attrs.items())),
                id(backward), str(target))
    if name in _REGISTERED:
        if _REGISTERED[name][0] == identity:
            return _REGISTERED[name][1]
        raise TdslError(f"custom op '{name}' is already registered (for "
                        f"{_REGISTERED[name][0][1]}); torch.library keeps an op for the life "
                        f"of the process", hint="register under another name")
    spec = _Spec(op, attrs, target)
    torch.library.define(name, spec.schema())
    torch.library.impl(name, "CPU", spec.run)
    torch.library.register_fake(name, spec.fake)
    if backward is None:
        torch.library.register_autograd(name, _no_backward(name, spec),
                                        setup_context=_refuse_grad(name, spec))
    else:
        bwd, setup = _backward(backward, name, spec, target)
        torch.library.register_autograd(name, bwd, setup_context=setup)
    packet = getattr(getattr(torch.ops, ns), opname)
    _REGISTERED[name] = (identity, packet)
    return packet


class _Spec:
    """What the registration needs of the op: its parameters, its outputs, its kernel."""

    def __init__(self, op, attrs: dict, target):
        self.op, self.attrs, self.target = op, dict(attrs), target
        self.params = list(op.ast.params)
        self.outputs = list(op.ast.outputs)
        self.tensor_params = [i for i, p in enumerate(self.params) if _rank_of(p) != 0]
        self._kernel = None
        self._functions: dict = {}
        try:     # a wrong attribute is an error now, not at the first call
            if not any(_rank_of(p) is None for p in self.params):
                self.function(None)
        except TdslError as e:
            raise CallError(f"custom op for {op.name}: {e.message}", hint=e.hint) from None

    def schema(self) -> str:
        args = ", ".join(f"{'Tensor' if _rank_of(p) != 0 else _scalar_type(p)} {p.name}"
                         for p in self.params)
        outs = ["Tensor"] * len(self.outputs)
        return f"({args}) -> {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')'}"

    def function(self, ranks):
        key = None if ranks is None else tuple(ranks)
        if key not in self._functions:
            self._functions[key] = self.op.function(None if ranks is None else list(ranks),
                                                    **self.attrs)
        return self._functions[key]

    def kernel(self):
        if self._kernel is None:
            self._kernel = self.op.build(self.target, **self.attrs)
        return self._kernel

    def run(self, *args):
        args = [a.detach().contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        return self.kernel()(*args)

    def fake(self, *args):
        """Empty outputs of the shapes and dtypes tdsl's size rules give."""
        ranks = None if not any(_rank_of(p) is None for p in self.params) else \
            [a.dim() if isinstance(a, torch.Tensor) else 0 for a in args]
        fn = self.function(ranks)
        params = [(size_rules.argument(t.name, i), t.shape, t.name)
                  for i, t in enumerate(fn.inputs)]
        shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else () for a in args]
        for t, a in zip(fn.inputs, args):
            if isinstance(a, torch.Tensor) and a.dtype != _TORCH_DTYPES.get(t.dtype):
                raise CallError(f"argument {t.name} has dtype {str(a.dtype)[6:]}, expected "
                                f"{to_numpy(t.dtype)} ({t.dtype})",
                                hint=f"pass {t.name}.to(torch.{to_numpy(t.dtype)})")
        env = size_rules.bind(params, shapes, {}, "given", fn.shape_vars, fn.name)
        like = next(a for a in args if isinstance(a, torch.Tensor))
        outs = [like.new_empty(tuple(size_rules.value(d, env, f"output '{t.name}'")
                                     for d in t.shape), dtype=_TORCH_DTYPES[t.dtype])
                for t in fn.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)


def _rank_of(p) -> int | None:
    """The rank of a parameter (None for a rank-generic ``[*S]`` one)."""
    dims = p.type.dims or ()
    if any(type(d).__name__ == "PackDim" for d in dims):
        return None
    return len(dims)


def _scalar_type(p) -> str:
    return _SCALARS.get(p.type.dtype, "int")


def _refuse_grad(name: str, spec: _Spec):
    def setup_context(ctx, inputs, output):
        needs = [spec.params[i].name for i, a in enumerate(inputs)
                 if isinstance(a, torch.Tensor) and a.requires_grad]
        raise CallError(f"{name}: argument {needs[0] if needs else '?'} requires grad, and "
                        f"this op was registered without a backward",
                        hint="pass .detach()ed tensors (or run under torch.no_grad()), or "
                             "register it with one: tdsl.torch.custom_op(op, name=..., "
                             "backward=a tdsl op or a callable)")
    return setup_context


def _no_backward(name: str, spec: _Spec):
    def backward(ctx, *grads):      # never reached: setup_context refuses first
        raise CallError(f"{name} has no backward")
    return backward


class _Ctx:
    pass


def _backward(backward, name: str, spec: _Spec, target):
    """``(backward, setup_context)`` for ``register_autograd``, from a tdsl op or a callable."""
    in_names = [p.name for p in spec.params]
    out_names = [p.name for p in spec.outputs]

    def setup_context(ctx, inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        ctx.save_for_backward(*[a for a in inputs if isinstance(a, torch.Tensor)], *outs)
        ctx.scalars = [None if isinstance(a, torch.Tensor) else a for a in inputs]

    def saved(ctx):
        it = iter(ctx.saved_tensors)
        inputs = [next(it) if s is None else s for s in ctx.scalars]
        return inputs, list(it)

    if callable(backward) and not hasattr(backward, "ast"):
        def bwd(ctx, *grads):
            inputs, outputs = saved(ctx)
            c = _Ctx()
            c.inputs, c.outputs = tuple(inputs), tuple(outputs)
            got = backward(c, *grads)
            got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
            if len(got) != len(in_names):
                raise CallError(f"the backward of {name} returned {len(got)} gradient(s); "
                                f"it must return one per input ({', '.join(in_names)})")
            return got
        return bwd, setup_context

    # a tdsl op: parameters and outputs matched by name
    def role(pname):
        if pname in in_names:
            return ("input", in_names.index(pname))
        if pname in out_names:
            return ("output", out_names.index(pname))
        for prefix in ("grad_", "d"):
            if pname.startswith(prefix) and pname[len(prefix):] in out_names:
                return ("grad", out_names.index(pname[len(prefix):]))
        raise TdslError(f"backward op {backward.name}: parameter {pname} is none of the "
                        f"inputs ({', '.join(in_names)}), outputs ({', '.join(out_names)}) "
                        f"or their gradients (d<output>) of {spec.op.name}")
    roles = [role(p.name) for p in backward.ast.params]

    def gives(oname):
        for prefix in ("grad_", "d"):
            if oname.startswith(prefix) and oname[len(prefix):] in in_names:
                return in_names.index(oname[len(prefix):])
        raise TdslError(f"backward op {backward.name}: output {oname} names the gradient of "
                        f"none of {spec.op.name}'s inputs (d{in_names[0]}, ...)")
    slots = [gives(p.name) for p in backward.ast.outputs]
    bwd_op = custom_op(backward, name + "_backward", target=target)

    def bwd(ctx, *grads):
        inputs, outputs = saved(ctx)
        pools = {"input": inputs, "output": outputs, "grad": grads}
        got = bwd_op(*[pools[kind][i] for kind, i in roles])
        got = got if isinstance(got, tuple) else (got,)
        result = [None] * len(in_names)
        for slot, g in zip(slots, got):
            result[slot] = g
        return tuple(result)
    return bwd, setup_context
