"""The one error type a user can cause, with a place in the source.

Every mistake a user can make (malformed source, a wrong shape, an illegal schedule, a bad
call) is a `TdslError`, one subclass per phase. Broken internal invariants stay `assert`s.
A message says what is wrong, shows where (file:line:col, the line and a caret), and, where
there is an obvious fix, what to do.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Source:
    """A named piece of text; spans point into it so errors can quote the line."""
    name: str
    text: str

    def line(self, lineno: int) -> str:
        lines = self.text.splitlines()
        return lines[lineno - 1] if 1 <= lineno <= len(lines) else ""


@dataclass(frozen=True)
class Span:
    """A region of a source: 1-based line and column, end exclusive."""
    source: Source = field(compare=False, repr=False)
    line: int
    col: int
    end_line: int | None = None
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.source.name}:{self.line}:{self.col}"

    def caret(self) -> str:
        """The source line with a caret (or a run of them) under the region."""
        text = self.source.line(self.line).rstrip("\n").expandtabs(1)
        if not text.strip():
            return ""
        width = 1
        if self.end_line == self.line and self.end_col and self.end_col > self.col:
            width = self.end_col - self.col
        width = max(1, min(width, len(text) - self.col + 1))
        return f"    {text}\n    {' ' * (self.col - 1)}{'^' * width}"


class TdslWarning(UserWarning):
    """Something legal that is probably a mistake (an unused graph ``param``); its message
    starts with file:line:col. `tdsl check` prints each as a line."""


class TdslError(Exception):
    """Base of every error a user can cause."""
    phase = "error"

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        self.message = message
        self.span = span
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        head = f"{self.span}: {self.phase}: {self.message}" if self.span else \
            f"{self.phase}: {self.message}"
        parts = [head]
        if self.span is not None:
            caret = self.span.caret()
            if caret:
                parts.append(caret)
        if self.hint:
            parts.append(f"  hint: {self.hint}")
        return "\n".join(parts)


class ParseError(TdslError):
    phase = "syntax error"


class CheckError(TdslError):
    phase = "error"


class ScheduleError(TdslError):
    phase = "schedule error"


class BuildError(TdslError):
    phase = "build error"


class CallError(TdslError, TypeError):
    """A kernel or reference called with arguments of the wrong number, dtype or shape."""
    phase = "call error"


def wrong_dtype(who: str, name: str, got, want, declared: str) -> CallError:
    """The one wording of an argument of the wrong dtype, for the reference and every
    kernel: ``who`` ("argument X"), ``want`` the numpy dtype, ``declared`` the parameter's
    tdsl type."""
    return CallError(f"{who} has dtype {got}, expected {want} ({declared}); arrays are not "
                     f"cast silently", hint=f"pass {name}.astype(np.{want})")


def not_an_array(who: str, value, want, declared: str) -> CallError:
    """The one wording of a list (or another non-array) where an array is needed."""
    return CallError(f"{who} must be a numpy.ndarray of {want} ({declared}), got "
                     f"{type(value).__name__}", hint=f"convert it: np.asarray(x, dtype=np.{want})")


class ErrorList(TdslError):
    """Several independent errors found in one pass over a file (the checker reports all)."""

    def __init__(self, errors: list[TdslError]):
        assert errors
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.message, first.span, first.hint)

    def render(self) -> str:
        return "\n\n".join(e.render() for e in self.errors)
