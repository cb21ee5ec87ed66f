"""Compile an embedded ``.c``/``.h`` pair to an object file and measure it with binutils:
code size (``size``: text, data, bss) and the symbols it needs from outside (``nm -u``).

The tools are the compiler's siblings: ``arm-none-eabi-gcc`` -> ``arm-none-eabi-size``,
``gcc`` -> ``size``.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError
from ..target import Target, as_target
from .embedded import EmbeddedModule

STRICT = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic")


@dataclass(frozen=True)
class CodeSize:
    text: int
    data: int
    bss: int

    @property
    def flash(self) -> int:
        """What a microcontroller keeps in flash: code and constants, and .data's initial
        values."""
        return self.text + self.data


def binutil(target: Target, tool: str) -> str:
    compiler = Path(target.compiler).name
    prefix = compiler[:-len("gcc")] if compiler.endswith("gcc") else ""
    return prefix + tool


def compile_object(module: EmbeddedModule, target: Target | str, directory: str | Path,
                   flags=(), strict: bool = True) -> Path:
    """Write the pair into ``directory`` and compile the .c to ``<name>.o`` with the
    target's flags (``strict``: as C99 with every warning an error), then ``flags``."""
    target = as_target(target)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    src, hdr, obj = (directory / f"{module.name}{ext}" for ext in (".c", ".h", ".o"))
    src.write_text(module.source)
    hdr.write_text(module.header)
    cmd = [target.compiler, *target.flags, *(STRICT if strict else ()), *flags, "-c",
           str(src), "-o", str(obj)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except OSError as exc:
        raise BuildError(f"cannot run {target.compiler}: {exc}") from None
    if proc.returncode != 0:
        raise BuildError(f"{target.compiler} failed on {src}:\n{proc.stderr.strip()}",
                         hint=f"rerun: {' '.join(cmd)}")
    return obj


def compile_objects(modules, target: Target | str, directory: str | Path, flags=(),
                    strict: bool = True) -> list[Path]:
    """`compile_object` for several pairs in one compiler run (one process start)."""
    target = as_target(target)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for module in modules:
        (directory / f"{module.name}.c").write_text(module.source)
        (directory / f"{module.name}.h").write_text(module.header)
    cmd = [target.compiler, *target.flags, *(STRICT if strict else ()), *flags, "-c",
           *(f"{m.name}.c" for m in modules)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=directory)
    if proc.returncode != 0:
        raise BuildError(f"{target.compiler} failed in {directory}:\n{proc.stderr.strip()}",
                         hint=f"rerun there: {' '.join(cmd)}")
    return [directory / f"{m.name}.o" for m in modules]


def code_size(obj: Path, target: Target | str) -> CodeSize:
    tool = binutil(as_target(target), "size")
    out = subprocess.run([tool, str(obj)], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(x) for x in out.splitlines()[1].split()[:3])
    return CodeSize(text, data, bss)


def undefined_symbols(obj: Path, target: Target | str) -> set[str]:
    tool = binutil(as_target(target), "nm")
    out = subprocess.run([tool, "-u", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def can_measure(target: Target | str) -> bool:
    target = as_target(target)
    return all(shutil.which(t) for t in (target.compiler, binutil(target, "size"),
                                         binutil(target, "nm")))
