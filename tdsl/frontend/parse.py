"""Text -> AST with source positions. Lark parses; a Transformer run after ``parse()``
builds the frozen AST nodes (``meta`` is only available there, not in an inline transformer).
"""
from __future__ import annotations

import functools
import re

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, \
    UnexpectedToken, VisitError

from ..dsl import GRAMMAR
from ..errors import ParseError, Source, Span
from . import ast



@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark.open(str(GRAMMAR), parser="lalr", propagate_positions=True,
                     maybe_placeholders=True)


def parse(text: str, filename: str = "<string>") -> ast.Module:
    """Parse .tdsl text; raise `ParseError` with file:line:col, a caret and what was expected."""
    source = Source(filename, text)
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, source) from None
    try:
        module = _ToAst(source).transform(tree)
    except VisitError as e:
        # Lark wraps what a Transformer method raises; ours are ParseErrors
        if isinstance(e.orig_exc, ParseError):
            raise e.orig_exc from None
        if isinstance(e.orig_exc, RecursionError):
            raise _too_deep(tree, source) from None
        raise
    except RecursionError:
        raise _too_deep(tree, source) from None
    _check_depth(module)
    return module


# Nesting deeper than this is reported, not built (the checker's recursion would overflow).
MAX_DEPTH = 200


def _too_deep(tree, source: Source) -> ParseError:
    """The error for an expression nested too deeply, at its deepest point found."""
    stack, where = [(tree, 0)], None
    while stack:
        node, depth = stack.pop()
        if not hasattr(node, "children"):
            continue
        if depth > MAX_DEPTH and not getattr(node.meta, "empty", True):
            where = Span(source, node.meta.line, node.meta.column, node.meta.line,
                         node.meta.column + 1)
            break
        stack.extend((c, depth + 1) for c in node.children)
    return ParseError(f"expression nested too deeply (more than {MAX_DEPTH} levels)", where,
                      "split it into several stages")


def _check_depth(module: ast.Module):
    """Every later phase recurses over expressions; refuse ones nested past MAX_DEPTH."""
    stack = [(module, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ParseError(f"expression nested too deeply (more than {MAX_DEPTH} levels)",
                             getattr(node, "span", None), "split it into several stages")
        for value in vars(node).values():
            for x in (value if isinstance(value, tuple) else (value,)):
                if isinstance(x, tuple):             # keyword arguments: (name, node)
                    stack.extend((y, depth + 1) for y in x if isinstance(y, ast.Node))
                elif isinstance(x, ast.Node):
                    stack.append((x, depth + 1))


# ---------------------------------------------------------------------------- syntax errors

def _describe(terminal: str) -> str:
    names = {t.name: t for t in _parser().terminals}
    t = names.get(terminal)
    if terminal == "$END":
        return "end of file"
    if t is not None and t.pattern.type == "str":
        return f"'{t.pattern.value}'"
    return {"NAME": "a name", "NUMBER": "a number", "STRING": "a string",
            "COMP_OP": "a comparison", "ADD_OP": "'+' or '-'",
            "MUL_OP": "'*', '/', '//' or '%'"}.get(terminal, terminal.lower())


def _expected(terminals) -> str:
    # closing brackets first: when many tokens could follow, they are the likely fix
    words = sorted({_describe(t) for t in terminals},
                   key=lambda w: (w not in ("'}'", "')'", "']'"), w))
    if not words:
        return ""
    if len(words) > 8:
        return f" (expected one of {len(words)} kinds of token, e.g. {', '.join(words[:6])})"
    return " (expected " + (words[0] if len(words) == 1 else
                            ", ".join(words[:-1]) + " or " + words[-1]) + ")"


def _syntax_error(e: UnexpectedInput, source: Source) -> ParseError:
    line, col = getattr(e, "line", 1) or 1, getattr(e, "column", 1) or 1
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        lines = source.text.splitlines() or [""]
        line, col = len(lines), len(lines[-1]) + 1
        msg = "unexpected end of file" + _expected(e.expected)
        if line > 0 and not lines[-1].strip():
            # point at the last non-empty line so the caret shows something useful
            for k in range(len(lines) - 1, -1, -1):
                if lines[k].strip():
                    line, col = k + 1, len(lines[k]) + 1
                    break
    elif isinstance(e, UnexpectedToken):
        tok = e.token
        width = len(str(tok)) or 1
        msg = f"unexpected {_token_text(tok)}" + _expected(e.accepts or e.expected)
        return ParseError(msg, Span(source, line, col, line, col + width),
                          _hint(tok, source.line(line)[:col - 1]))
    elif isinstance(e, UnexpectedCharacters):
        ch = source.text[e.pos_in_stream] if e.pos_in_stream < len(source.text) else "?"
        msg = f"unexpected character {ch!r}" + _expected(e.allowed or ())
    else:
        msg = "invalid syntax"
    return ParseError(msg, Span(source, line, col, line, col + 1))


def _token_text(tok: Token) -> str:
    if tok.type == "NAME":
        return f"name '{tok}'"
    if tok.type == "NUMBER":
        return f"number {tok}"
    return f"'{tok}'"


def _hint(tok: Token, before: str) -> str | None:
    """A likely fix for ``tok``, read with the text before it on its line."""
    if str(tok) == "=":
        head = re.search(r"\bop\s+\w+\s*\(([^)]*)$", before)
        if head and ";" not in head.group(1):
            # a default value among the tensor parameters: it is an attribute
            return "attributes (with their defaults) go after `;`: " \
                   "op f(X: f32[N]; bias: float = 0.5)"
        return "a stage is written `T[i, j] = expr`; compare with `==`"
    return None


# ---------------------------------------------------------------------------- tree -> AST

def _items(xs):
    return tuple(x for x in xs if x is not None) if xs else ()


@v_args(meta=True)
class _ToAst(Transformer):
    def __init__(self, source: Source):
        super().__init__()
        self.source = source

    def _span(self, meta) -> Span | None:
        if getattr(meta, "empty", True):
            return None
        return Span(self.source, meta.line, meta.column, meta.end_line, meta.end_column)

    def _tok_span(self, tok: Token) -> Span:
        return Span(self.source, tok.line, tok.column, tok.end_line, tok.end_column)

    # -- module level
    def start(self, meta, items):
        return ast.Module(tuple(items), self._span(meta))

    def import_stmt(self, meta, c):
        target = str(c[0])
        if c[0].type == "STRING":
            target = target[1:-1]
        return ast.Import(target, self._span(meta))

    def op_def(self, meta, c):
        name, params, attrs, outputs, *body = c
        return ast.OpDef(str(name), _items(params), _items(attrs), tuple(outputs), tuple(body),
                         self._span(meta))

    def params(self, meta, c):
        return tuple(c)

    def attrs(self, meta, c):
        return tuple(c)

    def outputs(self, meta, c):
        return tuple(c)

    def param(self, meta, c):
        return ast.Param(str(c[0]), c[1], self._span(meta))

    def attr(self, meta, c):
        return ast.Attr(str(c[0]), str(c[1]), c[2], self._span(meta))

    def type(self, meta, c):
        dtype, dims = c
        return ast.TensorType(str(dtype), None if dims is None else tuple(dims), self._span(meta))

    def dims(self, meta, c):
        return tuple(c)

    def pack_dim(self, meta, c):
        return ast.PackDim(str(c[0]), self._span(meta))

    def decl(self, meta, c):
        return ast.Decl(str(c[0]), c[1], self._span(meta))

    def assign(self, meta, c):
        name, indices, expr = c
        if isinstance(expr, ast.Call) and indices is None:
            # `T = f(X, Y)`: an op call, or (when f is no op) a rank-0 stage; the checker
            # decides, since only it knows which ops are in scope
            return ast.CallStage((str(name),), expr, self._span(meta))
        return ast.Stage(str(name), tuple(indices or ()), expr, self._span(meta))

    def multi_assign(self, meta, c):
        *names, expr = c
        if not isinstance(expr, ast.Call):
            raise ParseError("several tensors can only be assigned from an op call",
                             self._span(meta))
        return ast.CallStage(tuple(map(str, names)), expr, self._span(meta))

    def lhs_indices(self, meta, c):
        return tuple(x if isinstance(x, ast.PackIndex) else ast.Name(str(x), self._tok_span(x))
                     for x in c)

    def pack_index(self, meta, c):
        return ast.PackIndex(str(c[0]), self._span(meta))

    # -- schedules and graphs
    def schedule_def(self, meta, c):
        op, target, name, *body = c
        return ast.ScheduleDef(str(op), str(target), str(name) if name else "default",
                               tuple(body), self._span(meta))

    def knob_decl(self, meta, c):
        name, *rest = c
        default = rest[-1]
        choices = tuple(x for x in rest[:-1] if x is not None)
        return ast.KnobDecl(str(name), choices, default, self._span(meta))

    def knob_gen(self, meta, c):
        name, func, args, default = c
        positional, kwargs = args if args else ((), ())
        call = ast.Call(str(func), positional, kwargs, self._span(meta))
        return ast.KnobDecl(str(name), (), default, self._span(meta), call)

    def sched_call(self, meta, c):
        *names, func, args = c
        targets = tuple(str(n) for n in names if n is not None)
        positional, kwargs = args if args else ((), ())
        return ast.SchedCall(targets, str(func), positional, kwargs, self._span(meta))

    def sched_if(self, meta, c):
        cond, then, orelse = c
        return ast.SchedIf(cond, then, orelse or (), self._span(meta))

    def sched_body(self, meta, c):
        return tuple(c)

    def sched_require(self, meta, c):
        return ast.SchedRequire(c[0], self._span(meta))

    def graph_def(self, meta, c):
        name, params, outputs, *body = c
        return ast.GraphDef(str(name), _items(params), tuple(outputs), tuple(body),
                            self._span(meta))

    def graph_param(self, meta, c):
        return ast.GraphParam(str(c[0]), c[1], self._span(meta))

    # -- expressions
    def _binary_chain(self, meta, c, op=None):
        # c alternates operand, operator, operand ... (or operands only for and/or)
        node = c[0]
        i = 1
        while i < len(c):
            if op is None:
                o, rhs = str(c[i]), c[i + 1]
                i += 2
            else:
                o, rhs = op, c[i]
                i += 1
            node = ast.Binary(o, node, rhs, _join(node, rhs) or self._span(meta))
        return node

    def or_expr(self, meta, c):
        return self._binary_chain(meta, c, "or")

    def and_expr(self, meta, c):
        return self._binary_chain(meta, c, "and")

    def comparison(self, meta, c):
        return self._binary_chain(meta, c)

    def sum_expr(self, meta, c):
        return self._binary_chain(meta, c)

    def product(self, meta, c):
        return self._binary_chain(meta, c)

    def not_op(self, meta, c):
        return ast.Unary("not", c[0], self._span(meta))

    def neg(self, meta, c):
        return ast.Unary("-", c[0], self._span(meta))

    def indexed(self, meta, c):
        name, subs, body = c
        subs = tuple(subs or ())
        if body is None:
            return ast.Index(str(name), subs, self._span(meta))
        axes = []
        for s in subs:
            if isinstance(s, ast.Axis):
                axes.append(s)
            elif isinstance(s, ast.Name):
                axes.append(ast.Axis(s.id, None, s.span))
            else:
                raise ParseError("a reduction axis is a name, optionally with a range "
                                 "(`k` or `k: K`)", getattr(s, "span", None) or self._span(meta))
        return ast.Reduce(str(name), tuple(axes), body, self._span(meta))

    def subscripts(self, meta, c):
        return tuple(c)

    def ranged_axis(self, meta, c):
        return ast.Axis(str(c[0]), c[1], self._span(meta))

    def call(self, meta, c):
        name, args = c
        positional, kwargs = args if args else ((), ())
        return ast.Call(str(name), positional, kwargs, self._span(meta))

    def args(self, meta, c):
        kwargs = c[-1] if c and isinstance(c[-1], tuple) else ()
        positional = tuple(x for x in c if x is not None and not isinstance(x, tuple))
        return positional, kwargs

    def kwargs(self, meta, c):
        return tuple(c)

    def kwarg(self, meta, c):
        return (str(c[0]), c[1])

    def member(self, meta, c):
        return ast.Member(str(c[0]), str(c[1]), self._span(meta))

    def number(self, meta, c):
        return ast.Number(str(c[0]), self._span(meta))

    def true(self, meta, c):
        return ast.Bool(True, self._span(meta))

    def false(self, meta, c):
        return ast.Bool(False, self._span(meta))

    def name(self, meta, c):
        return ast.Name(str(c[0]), self._span(meta))

    def string(self, meta, c):
        return ast.String(str(c[0])[1:-1], self._span(meta))


def _join(a, b) -> Span | None:
    sa, sb = getattr(a, "span", None), getattr(b, "span", None)
    if sa is None or sb is None:
        return sa or sb
    return Span(sa.source, sa.line, sa.col, sb.end_line, sb.end_col)
