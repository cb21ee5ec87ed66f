"""The ``tdsl`` command: version, ``check`` (exit status 0 or 1, every error printed) and
``ops``. A few runs go through a real process (the installed entry point and
``python -m tdsl``); the rest call `tdsl.cli.main` in-process, which is the same code.
A Python traceback on stderr is always a bug: user mistakes print as errors.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tdsl
from tdsl import cli

ROOT = Path(__file__).resolve().parent.parent
MATMUL = ROOT / "examples" / "matmul.tdsl"
ATTENTION = ROOT / "examples" / "attention.tdsl"
ERRORS = Path(__file__).resolve().parent / "errors"


def run(*args, module: bool = True) -> subprocess.CompletedProcess:
    """Run the command in a new process: ``python -m tdsl`` or the installed ``tdsl``."""
    cmd = [sys.executable, "-m", "tdsl"] if module else [shutil.which("tdsl")]
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def main(capsys, *args) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------- processes

def test_python_m_tdsl_version():
    r = run("--version")
    assert r.returncode == 0
    assert r.stdout.strip() == f"tdsl {tdsl.__version__}"


@pytest.mark.skipif(shutil.which("tdsl") is None, reason="the tdsl entry point isn't installed")
def test_installed_command_checks_a_file():
    r = run("--version", module=False)
    assert r.returncode == 0 and tdsl.__version__ in r.stdout
    r = run("check", MATMUL, module=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{MATMUL}: ok (3 ops)"


def test_process_bad_file_prints_errors_without_traceback(tmp_path):
    bad = tmp_path / "bad.tdsl"
    bad.write_text("op f(A: f32[N]) -> B: f32[N] {\n    B[i] = A[i] + foo\n}\n")
    r = run("check", bad)
    assert r.returncode == 1
    assert r.stdout == ""
    assert f"{bad}:2:19: error: unknown name 'foo'" in r.stderr
    assert "    B[i] = A[i] + foo\n" in r.stderr and "^^^" in r.stderr
    assert "Traceback" not in r.stderr


def test_process_ops_std():
    r = run("ops", "std")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert len(lines) == 75
    assert "matmul(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]" in lines


# ---------------------------------------------------------------------------- check

def test_check_good_files(capsys):
    code, out, err = main(capsys, "check", MATMUL, ATTENTION, "std")
    assert code == 0 and err == ""
    assert out.splitlines() == [f"{MATMUL}: ok (3 ops)", f"{ATTENTION}: ok (2 ops)",
                                "std: ok (75 ops)"]


def test_check_good_and_bad_files(capsys, tmp_path):
    bad = tmp_path / "bad.tdsl"
    bad.write_text("op f(A: f32[N]) -> B: f32[N] { B[i] = A[i + 1] }\n")
    code, out, err = main(capsys, "check", MATMUL, bad)
    assert code == 1
    assert out == f"{MATMUL}: ok (3 ops)\n"
    assert "index out of bounds" in err and err.rstrip().endswith(f"{bad}: 1 error")


def test_check_reports_every_error_in_a_file(capsys, tmp_path):
    bad = tmp_path / "bad.tdsl"
    bad.write_text("op f(A: f32[N]) -> B: f32[N] { B[i] = Ax[i] }\n"
                   "op g(A: i32[N]) -> B: i32[N] { B[i] = A[i] / 2 }\n"
                   "op h(A: f32[N]) -> B: f32[M] { B[i] = A[i] }\n")
    code, out, err = main(capsys, "check", bad)
    assert code == 1
    for msg in ["1:39: error: unknown name 'Ax'", "2:39: error: / needs a float operand",
                "3:27: error: unknown size 'M'", f"{bad}: 3 errors"]:
        assert msg in err


@pytest.mark.parametrize("content, message", [
    (None, "can't read"),                                   # no such file
    (b"\xff\xfe\x00op", "not UTF-8"),
    (b"op f(", "unexpected end of file"),
    (b"op f(A: f32[N]) -> B: f32[N] { B[i] = A[i] }\nop f(A: f32[N]) -> B: f32[N] { B = A }",
     "op 'f' is defined twice"),
    (b'import "nowhere.tdsl"\n', "can't import 'nowhere.tdsl'"),
    (b"import std\nop f(X: f32[N]) -> Y: f32[N] { Y = relu(X; alpha=1.0) }",
     "op relu has no attribute 'alpha'"),
    (b"op f(A: f32[N]) -> B: f32[N] { B[i] = " + b"-" * 3000 + b"A[i] }",
     "nested too deeply"),
])
def test_check_bad_input_is_an_error_not_a_traceback(capsys, tmp_path, content, message):
    path = tmp_path / "in.tdsl"
    if content is not None:
        path.write_bytes(content)
    code, out, err = main(capsys, "check", path)
    assert code == 1
    assert message in err
    assert "Traceback" not in err


def test_check_a_directory(capsys, tmp_path):
    code, out, err = main(capsys, "check", tmp_path)
    assert code == 1 and "can't read" in err


def test_check_each_error_file_exits_1(capsys):
    files = sorted(ERRORS.glob("*.tdsl"))
    code, out, err = main(capsys, "check", *files)
    assert code == 1 and out == ""
    assert err.count(": error") + err.count(": syntax error") >= len(files)
    for f in files:
        assert f"{f}: " in err


# ---------------------------------------------------------------------------- ops

def test_ops_lists_own_ops_of_a_file(capsys):
    code, out, err = main(capsys, "ops", ATTENTION)
    assert code == 0
    lines = out.splitlines()
    assert [line.split("(")[0] for line in lines] == ["attention", "attention_head"]
    assert lines[0] == ("attention(Q: f32[S, D], K: f32[T, D], V: f32[T, E]; "
                        "causal: bool = false) -> O: f32[S, E]")


def test_ops_std_has_every_signature(capsys):
    code, out, err = main(capsys, "ops", "std")
    assert code == 0
    names = [line.split("(")[0] for line in out.splitlines()]
    assert sorted(names) == sorted(tdsl.stdlib)
    assert "conv2d(X: f32[N, C, IH, IW], W: f32[F, C, KH, KW]; stride: int = 1, padding: " \
           "int = 0, dilation: int = 1) -> Y: f32[N, F, " in out


def test_ops_of_a_bad_file(capsys, tmp_path):
    bad = tmp_path / "bad.tdsl"
    bad.write_text("op f(A: f32[N]) -> B: f32[N] { B[i] = A[j] }\n")
    code, out, err = main(capsys, "ops", bad)
    assert code == 1
    assert "unknown name 'j'" in err and "Traceback" not in err


# ---------------------------------------------------------------------------- usage

def test_no_command_prints_help(capsys):
    code, out, err = main(capsys)
    assert code == 2 and "usage: tdsl" in out and "check" in out


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["frobnicate"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_version_in_process(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"tdsl {tdsl.__version__}"


# ---------------------------------------------------------------------------- mistakes (issue 9)

HALVES = """op halves(X: f32[N]) -> (Lo: f32[N // 2], Hi: f32[N - N // 2]) {
    Lo[i] = X[i]
    Hi[i] = X[N // 2 + i]
}
"""


@pytest.fixture
def halves(tmp_path):
    path = tmp_path / "halves.tdsl"
    path.write_text(HALVES)
    return path


@pytest.mark.parametrize("args, message", [
    (["test", "{f}", "--op", "nope"], "no op 'nope'"),
    (["build", "{f}", "-o", "/proc/x"], "can't create the output directory"),
    (["build", "std", "-o", "{d}"], "defines no op of its own"),
    (["run", "{f}", "--shape", "Q=3"], "has no size Q"),
    (["run", "{f}", "--shape", "N=0"], "at least 1"),
    (["run", "{f}", "--shape", "N=-3"], "NAME=INT"),
    (["run", "{f}", "--shape", "N=4,N=8"], "gives N twice"),
    (["tune", "std", "--op", "matmul", "--shape", "M=8,N=8,K=8", "--plot", "/nodir/x.png"],
     "does not exist or is not writable"),
    (["tune", "std", "--op", "matmul", "--shape", "M=8,N=8,K=8", "--transfer-log",
      "/nonexistent.jsonl"], "no such file"),
])
def test_mistakes_are_errors_not_tracebacks_or_no_ops(capsys, tmp_path, halves, args, message):
    args = [a.format(f=halves, d=tmp_path / "out") for a in args]
    code, out, err = main(capsys, *args)
    assert code == 1 and message in err and "Traceback" not in err


@pytest.mark.parametrize("args", [["test", "{f}", "--examples", "0"],
                                  ["tune", "{f}", "--batch", "0"]])
def test_counts_must_be_positive(capsys, halves, args):
    with pytest.raises(SystemExit) as info:
        cli.main([a.format(f=halves) for a in args])
    assert info.value.code == 2 and "at least 1" in capsys.readouterr().err


def test_run_and_test_take_subtracted_and_halved_sizes(capsys, halves):
    code, out, err = main(capsys, "run", halves, "--shape", "N=9")
    assert code == 0 and "max |tdsl - reference| = 0" in out, err
    code, out, err = main(capsys, "test", halves, "--examples", "3")
    assert code == 0 and "halves: ok" in out, err


@pytest.mark.parametrize("block, message", [
    ("schedule scale for CPU { vectorize(Y.i) }", "unknown target 'CPU'"),
    ("schedule scale for cpu { vectorize(Y.i) }\nschedule scale for c { vectorize(Y.i) }",
     "schedule 'default' for scale is defined twice"),
    ("schedule scale for cpu as naive { vectorize(Y.i) }", "name of a built-in schedule"),
    ("schedule scale for cpu as bad { io, ii = split(Y.q, 8) }", "Y has no axis q"),
    ("schedule scale for cpu { knob t in [1, 3] = 1\n io, ii = split(Y.i, t)\n"
     " if t > 1 { a, b = split(Y.zz, 2) } }", "Y has no axis zz"),
    ("schedule scale for cpu { knob t in [4, 8] = 16\n io, ii = split(Y.i, t) }",
     "the default 16 of knob t is not one of its choices [4, 8]"),
    ("schedule scale for gpu { io, ii = split(Y.i, 64)\n bind(io, \"blockIdx.x\")\n"
     " bind(Y.zz, \"threadIdx.x\") }", "Y has no axis zz"),
    ("schedule scale for gpu { io, ii = split(Y.i, 2048)\n bind(io, \"blockIdx.x\")\n"
     " bind(ii, \"threadIdx.x\") }", "more than the 1024 target 'cuda' allows"),
    ("schedule scale for embedded { io, ii = split(Y.q, 4) }", "Y has no axis q"),
    ("schedule scale for cpu { io, ii = split(Y.i, 4)\n bind(io, \"blockIdx.x\") }",
     "has no GPU threads"),
    ("op total(X: f32[N, D]) -> Y: f32[N] { Y[n] = 1.0 + sum[d](X[n, d]) }\n"
     "schedule total for cpu { do, di = split(Y.d, 4) }",
     "d is the axis of a sum nested in an expression"),
])
def test_check_reports_schedule_blocks_at_their_statement(capsys, tmp_path, block, message):
    """Blocks were ignored (unknown target), shadowed (a second default, a user's naive) or
    never applied by `tdsl check`; now each is an error, a knob's other values included."""
    path = tmp_path / "blocks.tdsl"
    path.write_text("op scale(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * 2.0 }\n" + block + "\n")
    code, out, err = main(capsys, "check", path)
    assert code == 1 and message in err and "blocks.tdsl:" in err, err


def test_check_accepts_a_factors_knob_and_applies_its_choices(capsys, tmp_path):
    """`knob t in factors(N)` was refused by `tdsl check` (it needs N) though load, build, test
    and tune accept it; check now applies the block at a sample N, every knob value counted."""
    path = tmp_path / "f.tdsl"
    body = ("op scale(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * 2.0 }\n"
            "schedule scale for cpu {\n    knob t in factors(N)\n    require t >= 2\n"
            "    io, ii = split(Y.i, t)\n")
    path.write_text(body + "}\n")
    code, out, err = main(capsys, "check", path)
    assert code == 0 and "ok (1 op)" in out, err
    path.write_text(body + "    if t > 4 { a, b = split(Y.zz, 2) }\n}\n")
    code, out, err = main(capsys, "check", path)
    assert code == 1 and "Y has no axis zz" in err and "f.tdsl:6:" in err, err


def test_test_prints_the_shrunk_counterexample(capsys, tmp_path, monkeypatch):
    """A failure shows the sizes, the schedule's steps and the worst element (here from a
    kernel made wrong on purpose in its last element)."""
    import tdsl.testing as tt
    real = tt.build_kernel

    def wrong(func, **kw):
        kernel = real(func, **kw)

        def call(*arrays):
            out = kernel(*arrays).copy()
            out.reshape(-1)[-1] += 1
            return out
        return call
    monkeypatch.setattr(tt, "build_kernel", wrong)
    path = tmp_path / "s.tdsl"
    path.write_text("op scale(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * 2.0 }\n"
                    "schedule scale for cpu { knob t in [2, 4] = 4\n"
                    "    io, ii = split(Y.i, t) }\n")
    code, out, err = main(capsys, "test", path, "--examples", "5")
    assert code == 1 and "scale: FAILED" in err
    assert "sizes: N=1" in err and "schedule:" in err and "the worst, Y[0]" in err, err


def test_wording_graph_files_attribute_hint_and_warnings(capsys, tmp_path):
    graphs = tmp_path / "g.tdsl"
    graphs.write_text("import std\ngraph g(x: f32[B, 4]) -> y: f32[B, 4] {\n"
                      "    y = relu(x)\n}\n")
    code, out, err = main(capsys, "check", graphs)
    assert code == 0 and "ok (0 ops, 1 graph)" in out     # not the 65 ops it imports
    attrs = tmp_path / "a.tdsl"
    attrs.write_text("op f(X: f32[N], bias: float = 0.5) -> Y: f32[N] { Y[i] = X[i] }\n")
    code, out, err = main(capsys, "check", attrs)
    assert code == 1 and "attributes (with their defaults) go after `;`" in err
    log = tmp_path / "empty.jsonl"
    log.write_text("")
    r = run("build", "std", "--op", "matmul", "--shape", "M=8,N=8,K=8", "-o",
            tmp_path / "out", "--tuning-log", log)       # a process: pytest keeps warnings
    assert r.returncode == 0 and "warning: " in r.stderr, r.stderr
    assert "warnings.warn" not in r.stderr and ".py:" not in r.stderr, r.stderr


@pytest.mark.parametrize("command", [["emit"], ["build", "-o", "{d}"], ["tune"]])
@pytest.mark.parametrize("attr", ["causal=x", "causal=", "alpha=1.5.2"])
def test_a_bad_attr_value_is_an_error_not_a_traceback(capsys, tmp_path, command, attr):
    """Issue 28: a value not an int, a float or a bool raised a ValueError from parse_attrs."""
    args = [a.format(d=tmp_path / "out") for a in command]
    code, out, err = main(capsys, args[0], ATTENTION, "--op", "attention", *args[1:],
                          "--attr", attr)
    assert code == 1 and f"error: --attr {attr}" in err and "Traceback" not in err, err


@pytest.mark.parametrize("text, value", [("True", True), ("False", False), ("true", True),
                                         ("false", False), ("-3", -3), ("0.5", 0.5)])
def test_attr_values_take_python_bool_spellings(text, value):
    parsed = cli.parse_attrs([f"a={text}"])["a"]
    assert parsed == value and type(parsed) is type(value)


def test_ops_of_a_graph_file_lists_its_graphs_not_the_imports(capsys, tmp_path):
    """Issue 28: a file with only a graph listed every signature it imports."""
    path = tmp_path / "g.tdsl"
    path.write_text("import std\n"
                    "op twice(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * 2.0 }\n"
                    "graph g(x: f32[B, 4]) -> (y: f32[B, 4], z: f32[B, 4]) {\n"
                    "    param w: f32[4, 4]\n    param b: f32[4]\n    y = dense(x, w, b)\n"
                    "    z = relu(y)\n}\n"
                    "graph h(x: f32[4]) -> y: f32[4] {\n    y = twice(x)\n}\n")
    code, out, err = main(capsys, "ops", path)
    assert code == 0, err
    assert out.splitlines() == [
        "twice(X: f32[N]) -> Y: f32[N]",
        "graph g(x: f32[B, 4]) -> (y: f32[B, 4], z: f32[B, 4]); params w: f32[4, 4], "
        "b: f32[4]",
        "graph h(x: f32[4]) -> y: f32[4]"]
    only = tmp_path / "only.tdsl"
    only.write_text("import std\ngraph g(x: f32[B, 4]) -> y: f32[B, 4] {\n"
                    "    y = relu(x)\n}\n")
    code, out, err = main(capsys, "ops", only)
    assert code == 0 and out == "graph g(x: f32[B, 4]) -> y: f32[B, 4]\n", out


def test_check_prints_a_line_for_an_unused_graph_param(capsys, tmp_path):
    path = tmp_path / "unused.tdsl"
    path.write_text("import std\ngraph g(x: f32[B, 4]) -> y: f32[B, 4] {\n"
                    "    param w: f32[4, 4]\n    y = relu(x)\n}\n")
    for _ in range(2):          # every run says it, not only the first in a process
        code, out, err = main(capsys, "check", path)
        assert code == 0 and f"{path}: ok (0 ops, 1 graph, 1 warning)" in out, out
        assert err == f"warning: {path}:3:5: param 'w' of graph g is never used\n", err


def test_test_takes_attributes_and_a_skip_names_the_one_to_give(capsys):
    """Issue 28: an op whose attribute has no default was "skipped" with exit 0, and its
    attributes could not be given."""
    code, out, err = main(capsys, "test", "std", "--op", "max_pool2d", "--examples", "2")
    assert code == 1 and "ok" not in out
    assert "max_pool2d: skipped: attribute kernel (int) without a default" in err
    assert "--attr kernel=VALUE" in err
    code, out, err = main(capsys, "test", "std", "--op", "max_pool2d", "--attr", "kernel=2",
                          "--examples", "2")
    assert code == 0 and "max_pool2d: ok (2 examples)" in out, err
    code, out, err = main(capsys, "test", "std", "--op", "max_pool2d", "--attr", "kernel=2",
                          "--attr", "nope=1")
    assert code != 0 and "nope" in err
