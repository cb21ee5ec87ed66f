"""The ``tdsl`` command. Every FILE argument may be ``std`` (the standard library).

User mistakes print as `TdslError`s (file:line:col, the line, a caret) and exit 1; a Python
traceback from here is a bug in tdsl.
"""
from __future__ import annotations

import argparse
import sys

from . import __version__
from .api import load
from .errors import ErrorList, TdslError


def cmd_check(args) -> int:
    status = 0
    for path in args.files:
        try:
            mod = load(path)
        except ErrorList as e:
            print(e.render(), file=sys.stderr)
            print(f"{path}: {len(e.errors)} errors", file=sys.stderr)
            status = 1
        except TdslError as e:
            print(e.render(), file=sys.stderr)
            print(f"{path}: 1 error", file=sys.stderr)
            status = 1
        else:
            print(f"{path}: ok ({len(mod.own_ops() or list(mod))} ops)")
    return status


def cmd_ops(args) -> int:
    mod = load(args.file)
    names = mod.own_ops() or sorted(mod)
    for name in names:
        print(mod[name].signature())
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdsl", description="The tdsl tensor compiler.")
    p.add_argument("--version", action="version", version=f"tdsl {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser("check", help="check .tdsl files; print every error found")
    c.add_argument("files", nargs="+", metavar="FILE")
    c.set_defaults(run=cmd_check)

    o = sub.add_parser("ops", help="list each op's signature")
    o.add_argument("file", metavar="FILE")
    o.set_defaults(run=cmd_ops)

    for register in _EXTRA_COMMANDS:
        register(sub)
    return p


# Later parts (lowering, building, testing, tuning) add their sub-commands here.
_EXTRA_COMMANDS: list = []


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except TdslError as e:
        print(e.render(), file=sys.stderr)
        return 1
    except BrokenPipeError:          # `tdsl ops std | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
