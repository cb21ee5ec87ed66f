"""``graph NAME(inputs) -> outputs { param ...; T = op(...) }`` -> a checked `ir.Graph`.

A graph is checked as an op is: every call names an op in scope (the standard library's or
the file's own), its arguments are tensors already defined, with the dtypes and shapes the
op wants (sizes are unified as for a call inside an op, `calls.bind_sizes`), its attributes
are constants the op declares, and the outputs are defined with the shapes they declare.
Each mistake is reported at its line; checking goes on past it, skipping only what depends
on a broken statement.
"""
from __future__ import annotations

import difflib
import warnings

from ..errors import CheckError, ErrorList, TdslError, TdslWarning
from ..lowering import te
from ..lowering.arith.linear import normal_form
from ..lowering.dtypes import DTYPES, INDEX
from ..lowering.graph.ir import Graph, Node, Value
from . import ast
from .calls import bind_sizes, check_arity, differ, differ_hint, unknown_op_hint
from .exprs import const_value


def check_graph(gdef: ast.GraphDef, program) -> Graph:
    """``program`` resolves op names (``resolve_op``) and lists them (``all_ops``)."""
    return _Checker(gdef, program).run()


class _Checker:
    def __init__(self, gdef: ast.GraphDef, program):
        self.gdef = gdef
        self.program = program
        self.errors: list[TdslError] = []
        self.values: dict[str, Value] = {}
        self.spans: dict = {}
        self.sizes: dict[str, te.Var] = {}
        self.broken: set[str] = set()
        self.nodes: list[Node] = []

    def run(self) -> Graph:
        g = self.gdef
        for p in g.params:
            self._declare(p.name, p.type, p.span, "input")
        params = []
        for item in g.body:
            if isinstance(item, ast.GraphParam):
                if self._declare(item.name, item.type, item.span, "param"):
                    params.append(item.name)
            elif isinstance(item, ast.CallStage):
                self._safe(lambda st=item: self._call(st))
            else:
                self.broken.add(getattr(item, "tensor", ""))
                self.errors.append(CheckError(
                    "a graph's statements are `param` declarations and op calls",
                    item.span, hint="write the expression as an op and call it here"))
        for out in g.outputs:
            self._safe(lambda o=out: self._output(o))
        if self.errors:
            raise self.errors[0] if len(self.errors) == 1 else ErrorList(self.errors)
        self._warn_unused(params)
        return Graph(g.name, tuple(p.name for p in g.params), tuple(params),
                     tuple(self.nodes), tuple(o.name for o in g.outputs),
                     tuple(self.values.items()), tuple(self.sizes), g.span)

    def _warn_unused(self, params: list[str]) -> None:
        """A ``param`` no op reads and no output names: a weight loaded for nothing, most
        likely a call that was meant to take it."""
        used = {i for n in self.nodes for i in n.inputs} | {o.name for o in self.gdef.outputs}
        for name in params:
            if name not in used:
                warnings.warn(TdslWarning(f"{self.spans[name]}: param '{name}' of graph "
                                          f"{self.gdef.name} is never used"), stacklevel=2)

    def _safe(self, fn):
        try:
            fn()
        except _Skip:
            pass
        except ErrorList as e:
            self.errors.extend(e.errors)
        except TdslError as e:
            self.errors.append(e)

    # ------------------------------------------------------------------ declarations

    def _declare(self, name, ttype: ast.TensorType, span, kind) -> bool:
        if name in self.values or name in self.broken:
            self.errors.append(CheckError(f"'{name}' is defined twice", span,
                                          hint=f"the first definition is at "
                                               f"{self.spans.get(name)}"))
            return False
        try:
            dtype = _dtype(ttype)
            shape = tuple(self._dim(d, introduce=True) for d in ttype.dims or ())
        except TdslError as e:
            self.errors.append(e)
            self.broken.add(name)
            return False
        self.values[name] = Value(name, dtype, shape, kind)
        self.spans[name] = span
        return True

    def _dim(self, d, introduce: bool) -> te.Expr:
        """A dimension: an integer, a size name, or their arithmetic."""
        match d:
            case ast.Number(text) if not d.is_float:
                return te.Const(int(text), INDEX)
            case ast.Name(n):
                if n not in self.sizes:
                    if not introduce:
                        raise CheckError(f"unknown size '{n}'", d.span, hint="sizes are named "
                                         "in the shapes of the graph's inputs and params")
                    self.sizes[n] = te.Var(n, INDEX)
                return self.sizes[n]
            case ast.Binary(op, a, b) if op in ("+", "-", "*", "//", "%"):
                return normal_form(te.binary(op, self._dim(a, introduce),
                                             self._dim(b, introduce)))
        raise CheckError("a graph's dimensions are integers, size names or their arithmetic",
                         getattr(d, "span", None))

    # ------------------------------------------------------------------ calls

    def _call(self, st: ast.CallStage):
        for t in st.targets:
            if t in self.values or t in self.broken:
                self.broken.update(st.targets)
                raise CheckError(f"'{t}' is defined twice", st.span,
                                 hint=f"the first definition is at {self.spans.get(t)}")
        try:
            self._call_checked(st)
        except TdslError:
            self.broken.update(st.targets)
            for t in st.targets:
                self.spans.setdefault(t, st.span)
            raise

    def _call_checked(self, st: ast.CallStage):
        call = st.call
        callee = self.program.resolve_op(call.func)
        if callee is None:
            raise CheckError(f"unknown op '{call.func}'", call.span,
                             hint=unknown_op_hint(call.func, tuple(self.program.all_ops())))
        args, names = [], []
        for a in call.args:
            if not isinstance(a, ast.Name):
                raise CheckError("op arguments are whole tensors, written by name", a.span)
            if a.id in self.broken:
                raise _Skip()
            if a.id not in self.values:
                close = difflib.get_close_matches(a.id, list(self.values), n=1)
                raise CheckError(f"unknown tensor '{a.id}'", a.span,
                                 hint=f"did you mean '{close[0]}'?" if close else
                                 "inputs, params and earlier results can be used")
            v = self.values[a.id]
            args.append(te.Tensor(a.id, v.shape, v.dtype))
            names.append(a.id)
        attrs = {k: const_value(v, {}) for k, v in call.kwargs}
        fn = callee.instantiate(attrs, [t.ndim for t in args], at=call.span)
        check_arity(fn, args, st, call, hint=f"{call.func} is defined at {callee.ast.span}")
        binding = bind_sizes(fn, args, call)
        for var in fn.shape_vars:
            if var not in binding:       # a size no argument's shape determines
                raise CheckError(f"op {call.func}'s size {var.name} is not set by its "
                                 f"arguments' shapes", call.span)
        for target, out in zip(st.targets, fn.outputs):
            shape = tuple(normal_form(te.substitute(d, binding)) for d in out.shape)
            self.values[target] = Value(target, out.dtype, shape, "node")
            self.spans[target] = st.span
        self.nodes.append(Node(call.func, tuple(names), st.targets,
                               tuple(sorted(attrs.items())), fn,
                               tuple((v, binding[v]) for v in fn.shape_vars), callee,
                               call.span))

    def _output(self, out: ast.Param):
        if out.name in self.broken:
            return
        if out.name not in self.values:
            raise CheckError(f"output '{out.name}' is never defined", out.span)
        v = self.values[out.name]
        dtype = _dtype(out.type)
        declared = tuple(self._dim(d, introduce=False) for d in out.type.dims or ())
        shown = ", ".join(map(str, v.shape))
        if dtype != v.dtype:
            raise CheckError(f"output '{out.name}' is declared {dtype} but is {v.dtype}",
                             out.span)
        if len(declared) != len(v.shape):
            raise CheckError(f"output '{out.name}' is declared with rank {len(declared)} but "
                             f"is [{shown}]", out.span)
        for d, (a, b) in enumerate(zip(declared, v.shape)):
            example = differ(a, b)
            if example is not None:
                raise CheckError(f"output '{out.name}' is declared "
                                 f"[{', '.join(map(str, declared))}] but is [{shown}]", out.span,
                                 hint=f"dimension {d}: " + (differ_hint(example, a, b) or
                                                            f"{a} is not {b}"))


class _Skip(CheckError):
    """A statement that uses a broken value: its own error was reported already."""

    def __init__(self):
        super().__init__("(skipped)")


def _dtype(ttype: ast.TensorType) -> str:
    if ttype.dtype not in DTYPES:
        raise CheckError(f"unknown dtype '{ttype.dtype}'", ttype.span,
                         hint=f"dtypes: {', '.join(DTYPES)}")
    return ttype.dtype
