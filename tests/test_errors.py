"""Programs that must fail: one file per user mistake in tests/errors/ (Halide's test/error).

Each file starts with comment lines giving what it must report:

    # error: unknown name 'Bx'        a substring of the message (one line per error, in order)
    # at: 9:12                        line:col of that error (or FILE:line:col when the error
                                      is in another file, e.g. an import cycle)
    # hint: did you mean 'Bx2'?       a substring of the first error's hint (optional)

A file with several `# error:` lines must report exactly those errors, all of them.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import tdsl
from tdsl import cli
from tdsl.errors import ErrorList

ERRORS = Path(__file__).resolve().parent / "errors"
FILES = sorted(ERRORS.glob("*.tdsl"))


def expectations(path: Path) -> dict:
    out = {"error": [], "at": [], "hint": []}
    for line in path.read_text().splitlines():
        m = re.match(r"#\s*(error|at|hint):\s*(.*?)\s*$", line)
        if m:
            out[m.group(1)].append(m.group(2))
        elif not line.startswith("#"):
            break
    return out


def reported(path: Path) -> list[tdsl.TdslError]:
    with pytest.raises(tdsl.TdslError) as info:
        tdsl.load(path)
    e = info.value
    return list(e.errors) if isinstance(e, ErrorList) else [e]


def test_there_is_an_error_file_per_mistake():
    assert len(FILES) >= 40
    for path in FILES:
        exp = expectations(path)
        assert exp["error"], f"{path.name} has no `# error:` line"
        assert not exp["at"] or len(exp["at"]) == len(exp["error"]), path.name


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_error_file(path):
    exp = expectations(path)
    errors = reported(path)
    messages = [e.message for e in errors]
    assert len(errors) == len(exp["error"]), messages
    for want, e in zip(exp["error"], errors):
        assert want in e.message
    for want, e in zip(exp["at"], errors):
        *where, line, col = want.split(":")
        assert e.span is not None, e.message
        assert (e.span.line, e.span.col) == (int(line), int(col)), str(e.span)
        assert Path(e.span.source.name).name == (where[0] if where else path.name)
    for want in exp["hint"]:
        assert want in (errors[0].hint or "")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_error_text_has_position_line_and_caret(path):
    for e in reported(path):
        text = str(e)
        assert text.startswith(f"{e.span}: ")
        assert e.message in text
        source_line = e.span.source.line(e.span.line).rstrip("\n")
        lines = text.splitlines()
        # the source line, then a line of spaces and carets under the error's column
        k = lines.index(f"    {source_line.expandtabs(1)}")
        caret = lines[k + 1]
        assert set(caret.strip()) == {"^"}
        assert caret.index("^") == 4 + e.span.col - 1
        if e.hint:
            assert f"  hint: {e.hint}" in lines


def test_error_list_renders_every_error():
    path = ERRORS / "several_mistakes.tdsl"
    with pytest.raises(ErrorList) as info:
        tdsl.load(path)
    text = str(info.value)
    assert text.count("^") >= 3
    for e in info.value.errors:
        assert e.render() in text
    assert info.value.message == info.value.errors[0].message     # the first one leads


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_cli_check_reports_all_errors(path, capsys):
    assert cli.main(["check", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    exp = expectations(path)
    for want in exp["error"]:
        assert want in err
    n = len(exp["error"])
    assert err.rstrip().endswith(f"{path}: {n} error{'s' * (n != 1)}")
    assert "Traceback" not in err


def test_cli_check_subprocess_several_files():
    """The installed command, on a good file and two bad ones: every error, exit status 1."""
    good = Path(__file__).resolve().parent.parent / "examples" / "matmul.tdsl"
    bad = [ERRORS / "several_mistakes.tdsl", ERRORS / "unknown_name.tdsl"]
    r = subprocess.run([sys.executable, "-m", "tdsl", "check", str(good), *map(str, bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert f"{good}: ok" in r.stdout
    for want in ["unknown name 'foo'", "index out of bounds", "unknown dtype 'f31'",
                 "unknown name 'Bx'", "several_mistakes.tdsl: 3 errors",
                 "unknown_name.tdsl: 1 error"]:
        assert want in r.stderr
    assert "Traceback" not in r.stderr
