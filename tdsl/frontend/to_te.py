"""An op definition, with its attributes bound, becomes a `te.Function`; checking happens on
the way, while the AST spans are at hand.

Attributes are compile-time: each instantiation gets concrete values (or, when only checking,
a symbolic stand-in for attributes without a default). A rank-generic shape ``*S`` expands to
``S0, S1, ...`` and an index pack ``*i`` to ``i0, i1, ...`` for the rank asked for.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from dataclasses import dataclass, field

from ..errors import CheckError, ErrorList, Span
from ..lowering import te
from ..lowering.dtypes import DTYPES, INDEX, STORAGE_FLOATS, cast_array
from . import ast
from .calls import splice_call
from .exprs import ExprConverter, Scope, const_value

ATTR_KINDS = {"int": INDEX, "float": "f32", "bool": "bool"}
_BUILTIN_FUNCS = {*te.INTRINSICS, *DTYPES, "select"}


@dataclass
class StageInfo:
    name: str
    dtype: str
    shape: tuple[te.Expr, ...] | None      # None: inferred from an op call
    span: Span | None
    kind: str                              # "param", "output" or "intermediate"
    definition: ast.Node | None = None
    tensor: te.Tensor | None = None
    building: bool = False


@dataclass
class Instantiation:
    opdef: ast.OpDef
    resolve_op: object                     # name -> callee with .instantiate(...), or None
    attrs: dict
    pack_rank: int
    op_names: tuple = ()                   # the ops in scope, for did-you-mean hints
    errors: list = field(default_factory=list)
    shape_vars: dict = field(default_factory=dict)
    positive: set = field(default_factory=set)
    stages: dict = field(default_factory=dict)
    spliced: set = field(default_factory=set)      # names given to callees' intermediates
    _chain: list = field(default_factory=list)     # stages being built, for cycle messages
    _cycles: set = field(default_factory=set)      # cycles already reported

    # ------------------------------------------------------------------ entry

    def run(self) -> te.Function:
        op = self.opdef
        seen = {}
        for a in op.attrs:
            if a.name in seen:
                self.errors.append(CheckError(f"attribute '{a.name}' is defined twice", a.span,
                                              hint=f"the first definition is at "
                                                   f"{seen[a.name].span}"))
            seen.setdefault(a.name, a)
        for p in op.params:
            self._declare(p.name, p.type, p.span, "param", introduce=True)
        self._check_inferable()
        for p in op.outputs:
            self._declare(p.name, p.type, p.span, "output")
        for item in op.body:
            if isinstance(item, ast.Decl):
                self._declare(item.name, item.type, item.span, "intermediate")
        self._collect_definitions()
        for name, info in self.stages.items():
            if info.kind != "param":
                self._safe(lambda n=name: self._build(n, ()))
        if self.errors:
            raise self.errors[0] if len(self.errors) == 1 else _error_list(self.errors)
        inputs = tuple(self.stages[p.name].tensor for p in op.params)
        outputs = tuple(self.stages[p.name].tensor for p in op.outputs)
        return te.Function(op.name, inputs, outputs, tuple(self.shape_vars.values()),
                           tuple(sorted((k, v) for k, v in self.attrs.items()
                                        if not isinstance(v, te.Expr))))

    def _safe(self, fn):
        try:
            fn()
        except CheckError as e:
            if not any(e is x for x in self.errors):
                self.errors.append(e)

    # ------------------------------------------------------------------ declarations

    def _scope(self, index_vars=None) -> Scope:
        return Scope(self.attrs, self.shape_vars, index_vars or {}, self._tensor_for,
                     self.positive, self.pack_rank)

    def _declare(self, name, ttype: ast.TensorType, span, kind, introduce=False):
        clash = None
        if name in self.stages:
            clash = CheckError(f"'{name}' is defined twice", span,
                               hint=f"the first definition is at {self.stages[name].span}")
        elif name in self.attrs:
            clash = CheckError(f"'{name}' is already an attribute of {self.opdef.name}", span)
        if clash is not None:
            self.errors.append(clash)
            self._safe(lambda: self._dims(ttype, introduce))    # still introduce its sizes
            return
        broken = False
        try:
            dtype = _dtype(ttype)
        except CheckError as e:
            self.errors.append(e)
            dtype, broken = "f32", True
        try:
            # even with a bad dtype, so the sizes it names are known to later shapes
            shape = self._dims(ttype, introduce)
        except CheckError as e:
            self.errors.append(e)
            shape, broken = None, True
        if broken:
            kind = "broken"
        self.stages[name] = StageInfo(name, dtype, shape, span, kind)
        if kind == "param":
            self.stages[name].tensor = te.Tensor(name, shape, dtype, te.Placeholder())

    def _dims(self, ttype: ast.TensorType, introduce: bool) -> tuple[te.Expr, ...]:
        dims: list[te.Expr] = []
        for d in ttype.dims or ():
            if isinstance(d, ast.PackDim):
                for k in range(self.pack_rank):
                    dims.append(self._shape_var(f"{d.name}{k}", d.span, introduce))
            elif isinstance(d, ast.Name) and d.id not in self.attrs and introduce:
                dims.append(self._shape_var(d.id, d.span, True))
            else:
                if introduce:
                    for n in _names(d):
                        if n not in self.attrs and n not in self.shape_vars:
                            self._shape_var(n, d.span, True)
                dims.append(ExprConverter(self._scope(), self).shape_expr(d))
        return tuple(dims)

    def _shape_var(self, name, span, introduce) -> te.Var:
        if name not in self.shape_vars:
            if not introduce:
                raise CheckError(f"unknown size '{name}'", span,
                                 hint="sizes are named in the input parameters' shapes")
            self.shape_vars[name] = te.Var(name, INDEX)
            self.positive.add(name)
            if name in DTYPES or name in te.INTRINSICS:
                # (known from now on, so later uses are not reported as unknown sizes)
                raise CheckError(f"'{name}' is a reserved name and can't name a size", span)
        return self.shape_vars[name]

    def _check_inferable(self):
        """A size that appears only inside expressions (``f32[2 * K]``) can't be read off
        the arguments' shapes."""
        plain = set()
        for p in self.opdef.params:
            for d in p.type.dims or ():
                if isinstance(d, ast.Name):
                    plain.add(d.id)
                elif isinstance(d, ast.PackDim):
                    plain.update(f"{d.name}{k}" for k in range(self.pack_rank))
        for name in self.shape_vars:
            if name not in plain:
                span = next((p.span for p in self.opdef.params
                             if name in _names_of_type(p.type)), self.opdef.span)
                self.errors.append(CheckError(
                    f"size '{name}' can't be inferred from the arguments: it appears only "
                    f"inside a dimension expression", span,
                    hint=f"name it as a whole dimension of some input, e.g. X: f32[{name}]"))

    def _collect_definitions(self):
        for item in self.opdef.body:
            if isinstance(item, ast.Decl):
                continue
            if isinstance(item, ast.CallStage) and len(item.targets) == 1 and \
                    self.resolve_op(item.call.func) is None and \
                    item.call.func in _BUILTIN_FUNCS:
                # `s = exp(x)`: a rank-0 stage (an unknown callee stays an op call, so it is
                # reported as an unknown op, not as a rank mismatch)
                item = ast.Stage(item.targets[0], (), item.call, item.span)
            targets = item.targets if isinstance(item, ast.CallStage) else (item.tensor,)
            for t in targets:
                info = self.stages.get(t)
                if info is None:
                    if isinstance(item, ast.CallStage):
                        info = self.stages[t] = StageInfo(t, "f32", None, item.span,
                                                          "intermediate")
                    else:
                        self.errors.append(CheckError(
                            f"'{t}' is not declared", item.span,
                            hint=f"declare it first, e.g. `{t}: f32[...]`, or make it an "
                                 f"output"))
                        # its uses are not reported again as unknown names
                        self.stages[t] = StageInfo(t, "f32", None, item.span, "broken")
                        continue
                if info.kind == "param":
                    self.errors.append(CheckError(f"'{t}' is an input and can't be assigned",
                                                  item.span))
                elif info.definition is not None:
                    self.errors.append(CheckError(
                        f"'{t}' is defined twice", item.span,
                        hint=f"the first definition is at {info.definition.span}"))
                else:
                    info.definition = item
        for name, info in self.stages.items():
            if info.kind in ("output", "intermediate") and info.definition is None:
                what = "output" if info.kind == "output" else "intermediate tensor"
                self.errors.append(CheckError(f"{what} '{name}' is never defined", info.span,
                                              hint=f"add a stage `{name}[...] = ...`"))

    # ------------------------------------------------------------------ stages

    def _tensor_for(self, name: str, span, chain=()) -> te.Tensor | None:
        """The tensor called ``name`` (building its stage first), or None if unknown."""
        info = self.stages.get(name)
        if info is None:
            return None
        if info.tensor is None:
            self._build(name, chain, span)
        if info.tensor is None:
            raise _Skip()
        return info.tensor

    def _build(self, name: str, chain, use_span=None):
        info = self.stages[name]
        if info.tensor is not None or info.definition is None or info.kind == "broken":
            return
        if info.building:
            members = frozenset(self._chain[self._chain.index(name):])
            if members in self._cycles:
                raise _Skip()
            self._cycles.add(members)
            cycle = " -> ".join([*self._chain[self._chain.index(name):], name])
            raise CheckError(f"circular definition: {cycle}", use_span or info.span,
                             hint="a tensor can't be computed from itself")
        info.building = True
        self._chain.append(name)
        try:
            d = info.definition
            if isinstance(d, ast.CallStage):
                splice_call(self, d)
            else:
                info.tensor = self._build_stage(info, d)
        except _Skip:
            pass
        finally:
            info.building = False
            self._chain.pop()

    def _build_stage(self, info: StageInfo, st: ast.Stage) -> te.Tensor:
        names = []
        for ix in st.indices:
            if isinstance(ix, ast.PackIndex):
                names += [f"{ix.id}{k}" for k in range(self.pack_rank)]
            else:
                names.append(ix.id)
        if len(names) != len(info.shape):
            hint = None
            if not names and isinstance(st.expr, ast.Call):
                hint = (f"`{info.name} = {st.expr.func}(...)` is one value here; to call an op "
                        f"on whole tensors, define it or import it (import std)")
            n = len(names)
            raise CheckError(f"'{info.name}' has rank {len(info.shape)} but is defined with "
                             f"{n} ind{'ex' if n == 1 else 'ices'}", st.span, hint)
        seen = set()
        for n, ix in zip(names, st.indices):
            if n in seen:
                raise CheckError(f"index '{n}' appears twice on the left of '='", ix.span,
                                 hint="each output dimension needs its own index name")
            if n in self.shape_vars or n in self.attrs or n in self.stages:
                raise CheckError(f"index '{n}' hides the {self._what(n)} '{n}'", ix.span,
                                 hint="pick another index name")
            seen.add(n)
        axes = tuple(te.IterVar(te.Var(n), ext, "data") for n, ext in zip(names, info.shape))
        conv = ExprConverter(self._scope({ax.var.name: ax for ax in axes}), self)
        body = widen_f16(conv.value(st.expr, info.dtype, f"the value of {info.name}"))
        return te.Tensor(info.name, info.shape, info.dtype, te.Compute(axes, body))

    def _what(self, n):
        if n in self.shape_vars:
            return "size"
        return "attribute" if n in self.attrs else "tensor"


class _Skip(Exception):
    """A stage depends on one that failed; its own error was already reported."""


def widen_f16(e: te.Expr) -> te.Expr:
    """A stage value with every computation of a storage float (f16, bf16, the 8- and 4-bit
    floats) done in f32 (docs/semantics.md, "f16"): a load of one is widened exactly,
    literals are rounded to the type and kept as f32, ``f16(x)`` rounds and widens again,
    and arithmetic, selects, intrinsics and reductions become f32 (a reduction accumulates
    in f32). A value is rounded once, where it is stored: the result is cast back here."""
    if not any(x.dtype in STORAGE_FLOATS for x in te.walk(e)):
        return e

    def post(x):
        if x.dtype not in STORAGE_FLOATS:
            return None
        match x:
            case te.Load():
                return te.Cast(x, "f32")
            case te.Const(v):
                return te.Const(float(cast_array(v, x.dtype).astype(np.float32)), "f32")
            case te.Cast(a) if a.dtype == x.dtype:
                return a
            case te.Cast():
                return te.Cast(x, "f32")
        return dataclasses.replace(x, dtype="f32")

    out = te.rewrite(e, post)
    if e.dtype not in STORAGE_FLOATS:
        return out
    if isinstance(out, te.Cast) and out.a.dtype == e.dtype:
        return out.a                # the rounded value itself: no second rounding
    return te.Cast(out, e.dtype)


def _dtype(ttype: ast.TensorType) -> str:
    if ttype.dtype not in DTYPES:
        raise CheckError(f"unknown dtype '{ttype.dtype}'", ttype.span,
                         hint=f"dtypes are {', '.join(DTYPES)}")
    return ttype.dtype


def _names(node) -> list[str]:
    out = []
    if isinstance(node, ast.Name):
        out.append(node.id)
    elif isinstance(node, ast.Binary):
        out += _names(node.left) + _names(node.right)
    elif isinstance(node, ast.Unary):
        out += _names(node.operand)
    elif isinstance(node, ast.Call):
        for a in node.args:
            out += _names(a)
    return out


def _names_of_type(t: ast.TensorType) -> set[str]:
    return {n for d in t.dims or () for n in _names(d)}


def _error_list(errors):
    return ErrorList(errors)


# ---------------------------------------------------------------------------- attributes

def bind_attrs(opdef: ast.OpDef, given: dict, check_only: bool, error_type,
               at: Span | None = None) -> dict:
    """Attribute values for an instantiation: given > default > (checking only) symbolic.

    Mistakes in ``given`` are reported at ``at`` (the call in a caller's source) when given,
    else at the op's definition.
    """
    known = {a.name: a for a in opdef.attrs}
    where = None if at is None else f"{opdef.name} is defined at {opdef.span}"
    for k in given:
        if k not in known:
            names = ", ".join(known) or "none"
            raise error_type(f"op {opdef.name} has no attribute '{k}' (its attributes: "
                             f"{names})", at or opdef.span, where)
    out = {}
    for a in opdef.attrs:
        if a.kind not in ATTR_KINDS:
            raise CheckError(f"attribute kind '{a.kind}' is unknown", a.span,
                             hint="attributes are int, float or bool")
        if a.name in given:
            v = given[a.name]
            if isinstance(v, te.Expr):           # symbolic, from a caller being checked
                if v.dtype != ATTR_KINDS[a.kind] and not (
                        a.kind == "float" and v.dtype == ATTR_KINDS["int"]):
                    kind = {k: n for n, k in ATTR_KINDS.items()}.get(v.dtype, v.dtype)
                    raise error_type(f"attribute '{a.name}' of op {opdef.name} is {a.kind}, "
                                     f"got the {kind} attribute '{v}'", at or a.span, where)
                out[a.name] = v
                continue
            out[a.name] = _attr_value(opdef, a, v, error_type, at, where)
        elif isinstance(a.default, ast.Name) and isinstance(out.get(a.default.id), te.Expr):
            out[a.name] = out[a.default.id]      # `stride: int = kernel` while checking
        elif a.default is not None:
            v = const_value(a.default, out)
            out[a.name] = _attr_value(opdef, a, v, CheckError, a.default.span)
        elif check_only:
            out[a.name] = te.Var(a.name, ATTR_KINDS[a.kind])
        else:
            raise error_type(f"op {opdef.name} needs attribute '{a.name}' ({a.kind})",
                             at or opdef.span, where)
    return out


def _attr_value(opdef, a: ast.Attr, v, error_type, span=None, hint=None):
    ok = {"int": isinstance(v, int) and not isinstance(v, bool),
          "float": isinstance(v, (int, float)) and not isinstance(v, bool),
          "bool": isinstance(v, bool)}[a.kind]
    if hasattr(v, "item") and getattr(v, "size", 1) == 1 and not ok:     # numpy scalars
        return _attr_value(opdef, a, v.item(), error_type, span, hint)
    if not ok:
        raise error_type(f"attribute '{a.name}' of op {opdef.name} is {a.kind}, got "
                         f"{v!r}", span or a.span, hint)
    return float(v) if a.kind == "float" else v


def instantiate(opdef: ast.OpDef, resolve_op, attrs: dict, pack_rank: int,
                op_names: tuple = ()) -> te.Function:
    return Instantiation(opdef, resolve_op, attrs, pack_rank, op_names).run()


def uses_pack(opdef: ast.OpDef) -> bool:
    return any(isinstance(d, ast.PackDim) for p in opdef.params for d in p.type.dims or ())


def ranks_for_pack(opdef: ast.OpDef, pack_rank: int) -> list[int] | None:
    """The argument ranks of a rank-generic op at ``pack_rank`` (None: the op has no pack);
    the inverse of `pack_rank_for`."""
    if not uses_pack(opdef):
        return None
    return [pack_rank + sum(not isinstance(d, ast.PackDim) for d in p.type.dims or ())
            for p in opdef.params]


def pack_rank_for(opdef: ast.OpDef, ranks: list[int]) -> int:
    """The pack rank implied by the arguments' ranks (0 when the op has no pack)."""
    for p, r in zip(opdef.params, ranks):
        dims = p.type.dims or ()
        if any(isinstance(d, ast.PackDim) for d in dims):
            return max(r - (len(dims) - 1), 0)
    return 0


