"""docs/tutorial.md shows what its commands really print.

The tutorial's files are taken from its own code blocks (the algorithm, the mistake it
describes, the schedules of steps 5 and 7); each shell transcript (a block of ``$ tdsl ...``
lines and their output) is run in a fresh folder, in a terminal (a pty, so progress lines are
redrawn as a user sees them), and compared with the text. Its Python blocks run in order in
one namespace; a statement followed by ``# SomeError: ...`` comment lines must raise exactly
that. Figures that depend on the machine (GFLOP/s, seconds, the best configuration) are
compared as shapes, not values.
"""
from __future__ import annotations

import ast
import os
import pty
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = (ROOT / "docs" / "tutorial.md").read_text()
HOME = "/home/you"          # the tutorial's name for the folder it runs in

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def _blocks(lang: str | None = None) -> list[str]:
    found = re.findall(r"^```(\w*)\n(.*?)^```", TUTORIAL, re.M | re.S)
    return [body for info, body in found if lang is None or info == lang]


def _block_starting(prefix: str) -> list[str]:
    return [b for b in _blocks() if b.startswith(prefix)]


ALGORITHM = _block_starting("# rowscale.tdsl")[0]
SCHEDULE_5, SCHEDULE_7 = _block_starting("schedule rowscale")
# step 2's mistake, as its prose describes it
MISTAKE = ALGORITHM.replace("X[i, j] * s[i]", "X[i, j + 1] * s[i]")
assert MISTAKE != ALGORITHM
TRANSCRIPTS = _block_starting("$ ")
# the file each transcript runs on, in the tutorial's order
SOURCES = [ALGORITHM, MISTAKE, ALGORITHM + "\n" + SCHEDULE_5, ALGORITHM + "\n" + SCHEDULE_7]


def _terminal(argv: list[str], cwd: Path) -> str:
    """What ``argv`` shows on a terminal: output and errors as they interleave, each line as
    its last carriage return leaves it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:          # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=600)
    os.close(master)
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    return "\n".join(line.split("\r")[-1] for line in text.split("\n"))


def _machine_free(text: str) -> str:
    """Figures that differ between machines and runs, made placeholders."""
    text = re.sub(r"best configuration: \{.*\}", "best configuration: {...}", text)
    text = re.sub(r"\d+\.\d+", "#.#", text)
    return re.sub(r"\d+%", "#%", text)


def _split_transcript(block: str) -> list[tuple[str, str]]:
    """``[(command, expected output)]`` of a ``$ ...`` block."""
    out: list[tuple[str, list[str]]] = []
    for line in block.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            out[-1][1].append(line)
    return [(cmd, "\n".join(lines)) for cmd, lines in out]


def test_the_tutorial_has_the_transcripts_this_test_knows():
    assert len(TRANSCRIPTS) == len(SOURCES)
    assert [_split_transcript(t)[0][0].split()[:2] for t in TRANSCRIPTS] == [
        ["tdsl", "check"], ["tdsl", "check"], ["tdsl", "test"], ["tdsl", "tune"]]


def _run_transcript(index: int, tmp_path: Path) -> None:
    (tmp_path / "rowscale.tdsl").write_text(SOURCES[index])
    for cmd, expected in _split_transcript(TRANSCRIPTS[index]):
        argv = shlex.split(cmd)
        assert argv[0] == "tdsl"
        got = _terminal([sys.executable, "-m", "tdsl", *argv[1:]], tmp_path)
        got = got.replace(str(tmp_path), HOME).rstrip("\n")
        if index == 3:
            got, expected = _machine_free(got), _machine_free(expected)
        assert got == expected, f"$ {cmd}"


@needs_gcc
@pytest.mark.parametrize("index", [0, 1, 2])
def test_check_and_test_transcripts(index, tmp_path):
    _run_transcript(index, tmp_path)


@needs_gcc
@pytest.mark.slow                     # tunes at 2048 x 2048: about 15 s
def test_tune_transcript(tmp_path):
    _run_transcript(3, tmp_path)


def _expected_error(source: str, stmt: ast.stmt) -> str | None:
    """The ``# Error: ...`` comment lines right after ``stmt``, without their ``# ``."""
    lines = source.split("\n")[stmt.end_lineno:]
    comment = []
    for line in lines:
        if not line.startswith("#"):
            break
        comment.append(line[2:])
    if comment and re.match(r"[\w.]+(Error|Exception): ", comment[0]):
        return "\n".join(comment)
    return None


@needs_gcc
def test_python_blocks_run_and_raise_what_they_show(tmp_path, monkeypatch):
    (tmp_path / "rowscale.tdsl").write_text(ALGORITHM)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for source in _blocks("python"):
        source = textwrap.dedent(source)
        for stmt in ast.parse(source).body:
            code = compile(ast.Module([stmt], []), "tutorial.md", "exec")
            want = _expected_error(source, stmt)
            if want is None:
                exec(code, namespace)
                continue
            with pytest.raises(Exception) as info:
                exec(code, namespace)
            e = info.value
            assert f"{type(e).__module__}.{type(e).__name__}: {e}" == want
        for name, fn in list(namespace.items()):
            if name.startswith("test_") and callable(fn):
                fn()                      # the tutorial's own hypothesis test
                del namespace[name]
