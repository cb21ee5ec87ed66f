"""The language's files: the grammar and the standard library written in .tdsl."""
from pathlib import Path

DSL_DIR = Path(__file__).resolve().parent
GRAMMAR = DSL_DIR / "grammar.lark"
STD_DIR = DSL_DIR / "std"
