"""Fuzzing the front end with hypothesis.

1. Robustness: random text, token soup, and random mutations (delete, insert, duplicate,
   swap tokens; delete, insert, replace characters) of the standard library, the examples
   and the language doc's examples go through `tdsl.loads`. The only exception allowed out
   is `tdsl.TdslError`, and every input is answered within a time limit.
2. Round trip: parse -> unparse (`tdsl.frontend.unparse.module`) -> parse gives the same AST,
   for the real sources and for generated expressions and modules; and a re-printed std
   file checks to the same tensor expressions.
"""
from __future__ import annotations

import re
import signal
import string
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tdsl
from tdsl.frontend import ast, unparse
from tdsl.frontend.parse import parse

ROOT = Path(__file__).resolve().parent.parent
STD_FILES = sorted((ROOT / "tdsl" / "dsl" / "std").glob("*.tdsl"))
EXAMPLE_FILES = sorted((ROOT / "examples").glob("*.tdsl"))


def _doc_sources() -> list[str]:
    text = (ROOT / "docs" / "language.md").read_text()
    return [m.group(1) for m in re.finditer(r"^```tdsl\n(.*?)^```", text, re.S | re.M)
            if '"layers.tdsl"' not in m.group(1)]


SOURCES = [p.read_text() for p in [*STD_FILES, *EXAMPLE_FILES]] + _doc_sources()

TIME_LIMIT_S = 10
FUZZ = settings(deadline=None, max_examples=150,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@contextmanager
def time_limit(seconds: int = TIME_LIMIT_S):
    """Fail (rather than hang) when the front end takes too long on one input."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"the front end took more than {seconds} s")
    if not hasattr(signal, "SIGALRM"):          # pragma: no cover - not on Windows
        yield
        return
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def check_only_tdsl_errors(text: str):
    """Load ``text``; a `TdslError` is fine (and must render), anything else is a bug."""
    with time_limit():
        try:
            mod = tdsl.loads(text, "fuzz.tdsl")
        except tdsl.TdslError as e:
            rendered = str(e)
            assert rendered and e.message in rendered
            return
        for name in mod.own_ops():             # instantiating with defaults is also safe
            try:
                mod[name].function()
            except tdsl.TdslError:
                pass


# ---------------------------------------------------------------------------- tokens

_TOKEN = re.compile(r"\s+|#[^\n]*|\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+|\d+|[A-Za-z_]\w*|\"[^\"\n]*\""
                    r"|//|<=|>=|==|!=|->|.", re.S)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


VOCAB = sorted({t for s in SOURCES for t in tokens(s) if t.strip() and not t.startswith("#")}
               | {"op", "import", "std", '"x.tdsl"', "schedule", "for", "as", "knob", "in",
                  "graph", "param", "not", "and", "or", "true", "false", "prod", "min", "max",
                  "select", "*", "*S", "*i", ";", ".", "99999999999999999999", "1e400", "-1",
                  "0", "f64", "i8", "i16", "i32", "i64", "u8", "bool", "pi", "inf", "\n"})


# ---------------------------------------------------------------------------- robustness

@FUZZ
@given(st.text(alphabet=st.sampled_from(string.printable + "→λ\x00"), max_size=200))
def test_random_text(text):
    check_only_tdsl_errors(text)


@FUZZ
@given(st.lists(st.sampled_from(VOCAB), max_size=60))
def test_token_soup(toks):
    check_only_tdsl_errors(" ".join(toks))


@FUZZ
@given(st.lists(st.sampled_from(VOCAB), max_size=40))
def test_token_soup_inside_an_op(toks):
    check_only_tdsl_errors("import std\nop f(X: f32[N, M], Y: f32[M]; k: int = 2) -> "
                           "Z: f32[N] {\n    Z[i] = " + " ".join(toks) + "\n}\n")


MUTATION = st.tuples(
    st.sampled_from(["delete", "insert", "duplicate", "swap", "del_char", "ins_char",
                     "replace_char", "replace"]),
    st.floats(0, 1, exclude_max=True), st.floats(0, 1, exclude_max=True),
    st.sampled_from(VOCAB), st.sampled_from(string.printable))


def mutate(text: str, mutations) -> str:
    toks = tokens(text)
    for kind, a, b, tok, ch in mutations:
        if not toks:
            toks = [tok]
        i, j = int(a * len(toks)), int(b * len(toks))
        if kind == "delete":
            del toks[i]
        elif kind == "insert":
            toks.insert(i, f" {tok} ")
        elif kind == "replace":
            toks[i] = tok if toks[i].strip() else toks[i]
        elif kind == "duplicate":
            toks.insert(i, toks[i])
        elif kind == "swap":
            toks[i], toks[j] = toks[j], toks[i]
        else:
            t = toks[i]
            k = int(b * (len(t) + 1))
            if kind == "del_char":
                t = t[:k] + t[k + 1:]
            elif kind == "ins_char":
                t = t[:k] + ch + t[k:]
            else:
                t = t[:k] + ch + t[k + 1:]
            toks[i] = t
    return "".join(toks)


@settings(FUZZ, max_examples=300)
@given(st.sampled_from(range(len(SOURCES))), st.lists(MUTATION, min_size=1, max_size=4))
def test_mutated_sources(k, mutations):
    check_only_tdsl_errors(mutate(SOURCES[k], mutations))


@pytest.mark.slow
@settings(FUZZ, max_examples=5000)
@given(st.sampled_from(range(len(SOURCES))), st.lists(MUTATION, min_size=1, max_size=6))
def test_mutated_sources_exhaustive(k, mutations):
    """The same as `test_mutated_sources`, longer (``pytest -m slow``)."""
    check_only_tdsl_errors(mutate(SOURCES[k], mutations))


@pytest.mark.parametrize("depth", [50, 150, 400, 2000])
@pytest.mark.parametrize("shape", ["(-{}A[i]{})", "{}A[i]{}"])
def test_deep_nesting_is_an_error_not_a_crash(depth, shape):
    pieces = {"(-{}A[i]{})": ("(-" * depth, ")" * depth),
              "{}A[i]{}": ("exp(" * depth, ")" * depth)}[shape]
    src = f"op f(A: f32[N]) -> B: f32[N] {{ B[i] = {pieces[0]}A[i]{pieces[1]} }}"
    check_only_tdsl_errors(src)
    chain = " + ".join(["A[i]"] * depth)
    check_only_tdsl_errors(f"op f(A: f32[N]) -> B: f32[N] {{ B[i] = {chain} }}")


# ---------------------------------------------------------------------------- round trips

def roundtrip(text: str) -> ast.Module:
    m1 = parse(text, "a.tdsl")
    printed = unparse.module(m1)
    m2 = parse(printed, "b.tdsl")
    assert m2 == m1, printed
    assert unparse.module(m2) == printed
    return m1


@pytest.mark.parametrize("path", [*STD_FILES, *EXAMPLE_FILES], ids=lambda p: p.name)
def test_roundtrip_files(path):
    roundtrip(path.read_text())


@pytest.mark.parametrize("k", range(len(SOURCES)))
def test_roundtrip_doc_and_sources(k):
    roundtrip(SOURCES[k])


@pytest.mark.parametrize("path", STD_FILES, ids=lambda p: p.name)
def test_reprinted_std_file_checks_to_the_same_functions(path):
    original = tdsl.load(path)
    again = tdsl.loads(unparse.module(parse(path.read_text())), str(path))
    assert original.own_ops() == again.own_ops()
    for name in original.own_ops():
        attrs = {a.name: 2 for a in original[name].ast.attrs if a.default is None}
        assert str(original[name].function(**attrs)) == str(again[name].function(**attrs))


# -- generated ASTs

NAMES = st.sampled_from(["a", "b", "X", "Y", "k", "i", "N", "alpha", "T_1", "sum", "f32",
                         "exp", "select", "std"])
NUMBERS = st.sampled_from(["0", "1", "42", "1.5", "2.", ".5", "1e3", "1.5E-2", "7e+1"])


def exprs(max_leaves: int = 12):
    leaves = st.one_of(
        st.builds(ast.Number, NUMBERS),
        st.builds(ast.Bool, st.booleans()),
        st.builds(ast.Name, NAMES),
        st.builds(ast.String, st.sampled_from(["", "x.tdsl", "local"])),
        st.builds(ast.Member, NAMES, NAMES),
    )

    def extend(inner):
        sub = st.one_of(inner, st.builds(ast.PackIndex, NAMES),
                        st.builds(ast.Axis, NAMES, inner))
        axis = st.builds(ast.Axis, NAMES, st.none() | inner)
        kwargs = st.lists(st.tuples(NAMES, inner), max_size=2).map(tuple)
        return st.one_of(
            st.builds(ast.Binary, st.sampled_from(["or", "and", "<", "<=", ">", ">=", "==",
                                                   "!=", "+", "-", "*", "/", "//", "%"]),
                      inner, inner),
            st.builds(ast.Unary, st.sampled_from(["-", "not"]), inner),
            st.builds(ast.Index, NAMES, st.lists(sub, max_size=3).map(tuple)),
            st.builds(ast.Reduce, st.sampled_from(["sum", "max", "min", "prod", "mean"]),
                      st.lists(axis, min_size=1, max_size=3).map(tuple), inner),
            st.builds(ast.Call, NAMES, st.lists(inner, max_size=3).map(tuple), kwargs),
        )
    return st.recursive(leaves, extend, max_leaves=max_leaves)


@settings(FUZZ, max_examples=300)
@given(exprs())
def test_roundtrip_generated_expressions(e):
    printed = unparse.expr(e)
    m = parse(f"op f() -> Y: f32 {{ Y[i] = {printed} }}")
    assert m.items[0].body[0].expr == e, printed


def types():
    dim = st.one_of(exprs(4), st.builds(ast.PackDim, NAMES))
    return st.builds(ast.TensorType, st.sampled_from(["f32", "i8", "bool", "q"]),
                     st.none() | st.lists(dim, min_size=1, max_size=3).map(tuple))


def params():
    return st.builds(ast.Param, NAMES, types())


def statements(graph: bool = False):
    index = st.one_of(st.builds(ast.Name, NAMES), st.builds(ast.PackIndex, NAMES))
    non_call = exprs(6).filter(lambda e: not isinstance(e, ast.Call))
    call = st.builds(ast.Call, NAMES, st.lists(exprs(3), max_size=3).map(tuple),
                     st.lists(st.tuples(NAMES, exprs(3)), max_size=2).map(tuple))
    decl = st.nothing() if graph else st.builds(ast.Decl, NAMES, types())
    return st.one_of(
        decl,
        st.builds(ast.Stage, NAMES, st.lists(index, min_size=1, max_size=3).map(tuple),
                  exprs(6)),
        st.builds(ast.Stage, NAMES, st.just(()), non_call),
        st.builds(ast.CallStage, st.lists(NAMES, min_size=1, max_size=3).map(tuple), call),
    )


def items():
    attr = st.builds(ast.Attr, NAMES, st.sampled_from(["int", "float", "bool", "str"]),
                     st.none() | exprs(3))
    op = st.builds(ast.OpDef, NAMES, st.lists(params(), max_size=3).map(tuple),
                   st.lists(attr, max_size=2).map(tuple),
                   st.lists(params(), min_size=1, max_size=2).map(tuple),
                   st.lists(statements(), max_size=4).map(tuple))
    knob = st.builds(ast.KnobDecl, NAMES, st.lists(exprs(2), max_size=3).map(tuple),
                     st.none() | exprs(2))
    sched_call = st.builds(ast.SchedCall, st.lists(NAMES, max_size=3).map(tuple), NAMES,
                           st.lists(exprs(3), max_size=3).map(tuple),
                           st.lists(st.tuples(NAMES, exprs(2)), max_size=1).map(tuple))
    schedule = st.builds(ast.ScheduleDef, NAMES, NAMES, NAMES,
                         st.lists(st.one_of(knob, sched_call), max_size=4).map(tuple))
    graph_stmt = st.one_of(st.builds(ast.GraphParam, NAMES, types()), statements(True))
    graph = st.builds(ast.GraphDef, NAMES, st.lists(params(), max_size=2).map(tuple),
                      st.lists(params(), min_size=1, max_size=2).map(tuple),
                      st.lists(graph_stmt, max_size=3).map(tuple))
    imp = st.builds(ast.Import, st.sampled_from(["std", "a.tdsl", "../lib/b.tdsl"]))
    return st.one_of(op, schedule, graph, imp)


@settings(FUZZ, max_examples=150)
@given(st.lists(items(), max_size=4).map(tuple))
def test_roundtrip_generated_modules(its):
    m = ast.Module(its)
    printed = unparse.module(m)
    assert parse(printed) == m, printed
    check_only_tdsl_errors(printed)          # and whatever it means, checking it is safe
