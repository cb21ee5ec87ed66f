"""Run generated C on the machine it was built for, or on an emulated one.

A small test bench around a C function that takes arrays: `harness_source` writes a
``main()`` that reads each input from a file (``in0.bin``, ...), calls the function, and
writes each output (``out0.bin``, ...); `Bench` cross-compiles it statically with the
target's compiler and runs it:

    host (the target's arch is this machine's)   ./prog
    aarch64 / arm / riscv64 Linux                 qemu-aarch64 / qemu-arm / qemu-riscv64 ./prog
    Cortex-M (arm-none-eabi-gcc)                  qemu-system-arm -M mps2-an385 ... -kernel prog.elf
                                                  (newlib-nano, semihosting: the guest's fopen
                                                  reads host files, main's return is QEMU's
                                                  exit status; startup.c and mps2.ld here)

The guest's exit status says what failed: 10+i input i unreadable, 40+i output i
unwritable, 60+rc the function returned rc, 99 a fault (Cortex-M), anything else a crash.
Recipes and their pitfalls: /work/shared/toolchains.md, sections 2 and 3.

`EmulatedKernel` (what ``Op.build(target="c-embedded ...")`` returns) calls an embedded
function on numpy arrays this way; `run_host_c` does the same for the ``c`` kind's C (OpenMP
and GNU vectors, e.g. ``c -march=armv8-a`` under qemu-aarch64).
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import BuildError, CallError
from ..lowering import te
from ..lowering.dtypes import to_c, to_numpy
from ..lowering.loop_ir import Buffer, LoweredFunc
from ..target import Target, as_target, host_arch

HERE = Path(__file__).resolve().parent
RUN_TIMEOUT_S = 120

# Linux user-mode emulators by target arch
QEMU_USER = {"aarch64": "qemu-aarch64", "arm": "qemu-arm", "riscv64": "qemu-riscv64"}
# apt packages that provide each tool
PACKAGES = {"aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu libc6-dev-arm64-cross",
            "arm-linux-gnueabihf-gcc": "gcc-arm-linux-gnueabihf libc6-dev-armhf-cross",
            "riscv64-linux-gnu-gcc": "gcc-riscv64-linux-gnu libc6-dev-riscv64-cross",
            "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
            "qemu-aarch64": "qemu-user", "qemu-arm": "qemu-user", "qemu-riscv64": "qemu-user",
            "qemu-system-arm": "qemu-system-arm", "arm-none-eabi-size": "binutils-arm-none-eabi"}


@dataclass(frozen=True)
class Board:
    """A QEMU machine for a Cortex-M CPU and the memory map its linker script needs."""
    machine: str
    cpu: str | None          # QEMU's -cpu (None: the machine's own)
    flash: int
    flash_len: str
    ram: int
    ram_len: str
    stack: str = "64K"


BOARDS = {
    "cortex-m0": Board("microbit", None, 0x0, "256K", 0x20000000, "16K", "4K"),
    "cortex-m3": Board("mps2-an385", "cortex-m3", 0x0, "4M", 0x20000000, "4M"),
    "cortex-m4": Board("mps2-an386", "cortex-m4", 0x0, "4M", 0x20000000, "4M"),
    "cortex-m7": Board("mps2-an500", "cortex-m7", 0x0, "4M", 0x20000000, "4M"),
    "cortex-m33": Board("mps2-an505", "cortex-m33", 0x10000000, "4M", 0x38000000, "4M"),
    "cortex-m55": Board("mps3-an547", "cortex-m55", 0x10000000, "512K", 0x30000000, "512K",
                        "16K"),
}


def is_bare_metal(target: Target) -> bool:
    return Path(target.compiler).name.startswith("arm-none-eabi")


def board_for(target: Target) -> Board:
    cpu = (dict(target.options).get("mcpu") or "cortex-m3").lower()
    board = BOARDS.get(cpu.split("+")[0])
    if board is None:
        raise BuildError(f"no emulated board for {cpu}",
                         hint=f"boards: {', '.join(BOARDS)} (mcpu of the target)")
    return board


def tools_for(target: Target) -> list[str]:
    """The programs building and running ``target``'s code needs."""
    if is_bare_metal(target):
        return [target.compiler, "qemu-system-arm"]
    if target.arch == host_arch():
        return [target.compiler]
    if target.arch not in QEMU_USER:
        raise BuildError(f"no emulator for {target.arch} code",
                         hint=f"emulated: {', '.join(QEMU_USER)} Linux and Cortex-M")
    return [target.compiler, QEMU_USER[target.arch]]


def missing_tool(target: Target | str) -> str | None:
    """Why ``target``'s code cannot be run here (the missing program and its package), or
    None when it can."""
    for tool in tools_for(as_target(target)):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {PACKAGES.get(tool, tool)})"
    return None


# ------------------------------------------------------------------------ the harness

@dataclass(frozen=True)
class Arg:
    """One parameter of the function under test."""
    ctype: str
    count: int               # elements (a rank-0 input is passed by value)
    output: bool
    by_value: bool = False


def harness_source(header: str, entry: str, args: list[Arg], arena_bytes: int | None) -> str:
    """``main()``: read the inputs from ``in<i>.bin``, call ``entry``, write ``out<i>.bin``.
    ``arena_bytes`` not None: an aligned static arena is passed last."""
    lines = ["#include <stdio.h>", "#include <stdint.h>", f'#include "{header}"', "",
             "static int load(const char *path, void *dst, size_t bytes) {",
             "    FILE *f = fopen(path, \"rb\");",
             "    if (f == NULL) return 1;",
             "    size_t got = fread(dst, 1, bytes, f);",
             "    fclose(f);",
             "    return got != bytes;",
             "}",
             "static int save(const char *path, const void *src, size_t bytes) {",
             "    FILE *f = fopen(path, \"wb\");",
             "    if (f == NULL) return 1;",
             "    size_t put = fwrite(src, 1, bytes, f);",
             "    return (fclose(f) != 0) | (put != bytes);",
             "}", ""]
    names = []
    n_in = n_out = 0
    for a in args:
        name = f"out{n_out}" if a.output else f"in{n_in}"
        n_out, n_in = (n_out + 1, n_in) if a.output else (n_out, n_in + 1)
        lines.append(f"static {a.ctype} {name}[{max(a.count, 1)}];")
        names.append(name)
    if arena_bytes is not None:
        lines.append(f"static unsigned char arena[{max(arena_bytes, 1)}] "
                     "__attribute__((aligned(16)));")
    lines += ["", "int main(void) {"]
    for i, (a, name) in enumerate(zip(args, names)):
        if not a.output:
            # exactly count elements: a size-0 input is an empty file (the buffer has 1)
            lines.append(f"    if (load(\"{name}.bin\", {name}, {a.count} * sizeof {name}[0])) "
                         f"return {10 + i};")
    call = [f"{name}[0]" if a.by_value else name for a, name in zip(args, names)]
    if arena_bytes is not None:
        call.append("arena")
    lines += [f"    int rc = {entry}({', '.join(call)});",
              "    if (rc != 0) return 60 + rc;"]
    for i, (a, name) in enumerate(zip(args, names)):
        if a.output:
            lines.append(f"    if (save(\"{name}.bin\", {name}, {a.count} * sizeof {name}[0])) "
                         f"return {40 + i};")
    return "\n".join(lines + ["    return 0;", "}", ""])


def args_of(params, num_inputs: int | None = None) -> list[Arg]:
    """The harness's arguments for a function's buffers (a `LoweredFunc`, or its
    parameters and how many are inputs)."""
    if isinstance(params, LoweredFunc):
        params, num_inputs = params.params, params.num_inputs
    out = []
    for i, b in enumerate(params):
        out.append(Arg(to_c(b.dtype), _count(b), i >= num_inputs,
                       by_value=i < num_inputs and not b.shape))
    return out


def _count(b: Buffer) -> int:
    n = 1
    for d in b.shape:
        if not isinstance(d, te.Const):
            raise BuildError(f"{b.name}'s size {d} is not fixed: the emulated program has "
                             "static buffers", hint="build with every size in shapes={...}")
        n *= int(d.value)
    return n


def shape_of(b: Buffer) -> tuple[int, ...]:
    _count(b)
    return tuple(int(d.value) for d in b.shape)


# ------------------------------------------------------------------------ building, running

class Bench:
    """A directory holding one program for one target: `build` it, `run` it on arrays."""

    def __init__(self, target: Target | str, workdir: str | Path | None = None):
        self.target = as_target(target)
        why = missing_tool(self.target)
        if why:
            raise BuildError(f"cannot run {self.target} code here: {why}")
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tdsl-emulate-")
            workdir = self._tmp.name
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.program: Path | None = None

    def compile_flags(self) -> list[str]:
        """The target's flags for a static program (a kernel library's -shared/-fPIC out)."""
        return [f for f in self.target.flags if f not in ("-shared", "-fPIC")]

    def build(self, files: dict[str, str], extra_flags=()) -> Path:
        """Write ``files`` (name -> text) and link the .c ones into one program."""
        for name, text in files.items():
            (self.dir / name).write_text(text)
        sources = [str(self.dir / n) for n in files if n.endswith(".c")]
        flags = self.compile_flags() + list(extra_flags)
        if is_bare_metal(self.target):
            board = board_for(self.target)
            (self.dir / "board.ld").write_text(_linker_script(board))
            exe = self.dir / "prog.elf"
            cmd = [self.target.compiler, *flags, "-nostartfiles", "--specs=rdimon.specs",
                   "--specs=nano.specs", "-T", str(self.dir / "board.ld"),
                   "-Wl,--gc-sections", str(HERE / "startup.c"), *sources, "-o", str(exe),
                   "-lm"]
        else:
            exe = self.dir / "prog"
            static = [] if self.target.arch == host_arch() else ["-static"]
            cmd = [self.target.compiler, *flags, *static, *sources, "-o", str(exe), "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise BuildError(f"{self.target.compiler} failed:\n{proc.stderr.strip()}",
                             hint=f"the files are in {self.dir}; rerun: {' '.join(cmd)}")
        self.program = exe
        return exe

    def command(self) -> list[str]:
        exe = str(self.program)
        if is_bare_metal(self.target):
            board = board_for(self.target)
            cpu = ["-cpu", board.cpu] if board.cpu else []
            return ["qemu-system-arm", "-M", board.machine, *cpu, "-nographic", "-monitor",
                    "none", "-serial", "none", "-semihosting-config",
                    "enable=on,target=native", "-kernel", exe]
        if self.target.arch == host_arch():
            return [exe]
        return [QEMU_USER[self.target.arch], exe]

    def run(self, inputs, outputs: list[tuple[tuple[int, ...], np.dtype]],
            timeout: float = RUN_TIMEOUT_S) -> list[np.ndarray]:
        """Run the built program on ``inputs``; the arrays it wrote, of these shapes."""
        assert self.program is not None, "build first"
        for i, a in enumerate(inputs):
            (self.dir / f"in{i}.bin").write_bytes(np.ascontiguousarray(a).tobytes())
        for i in range(len(outputs)):
            (self.dir / f"out{i}.bin").unlink(missing_ok=True)
        try:
            proc = subprocess.run(self.command(), cwd=self.dir, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CallError(f"the program for {self.target} ran over {timeout} s "
                            f"({' '.join(self.command())})") from None
        if proc.returncode != 0:
            raise CallError(f"the program for {self.target} exited with "
                            f"{proc.returncode}{_meaning(proc.returncode)}: "
                            f"{(proc.stderr or proc.stdout).strip()[-2000:]}",
                            hint=f"rerun in {self.dir}: {' '.join(self.command())}")
        out = []
        for i, (shape, dtype) in enumerate(outputs):
            data = (self.dir / f"out{i}.bin").read_bytes()
            out.append(np.frombuffer(data, dtype=dtype).reshape(shape).copy())
        return out


def _meaning(code: int) -> str:
    if 10 <= code < 40:
        return f" (input {code - 10} could not be read)"
    if 40 <= code < 60:
        return f" (output {code - 40} could not be written)"
    if 60 <= code < 99:
        return f" (the function returned error {code - 60})"
    if code == 99:
        return " (a fault: HardFault or another exception)"
    return ""


def _linker_script(board: Board) -> str:
    text = (HERE / "mps2.ld").read_text()
    memory = (f"MEMORY\n{{\n  FLASH (rx)  : ORIGIN = {board.flash:#010x}, LENGTH = "
              f"{board.flash_len}\n  RAM   (rwx) : ORIGIN = {board.ram:#010x}, LENGTH = "
              f"{board.ram_len}\n}}")
    start, end = text.index("MEMORY"), text.index("}", text.index("MEMORY")) + 1
    return (text[:start] + memory + text[end:]).replace("__stack_size = 64K;",
                                                       f"__stack_size = {board.stack};")


# ------------------------------------------------------------------------ kernels

def _need_lowered(func, who: str) -> None:
    """A clear error for anything but a `LoweredFunc` (an op's te.Function, the Op)."""
    if isinstance(func, LoweredFunc):
        return
    what = type(func).__name__
    raise CallError(f"{who} takes a LoweredFunc (what op.lower returns, every size fixed), "
                    f"not a {what}",
                    hint="lower the op first: func = op.lower(None, shapes={...}, "
                         "target=target); op.function() is the unscheduled tensor expression")


class EmulatedKernel:
    """An embedded function built into a test program for its target, called on numpy
    arrays: ``y = kernel(x, w)`` runs the program (natively or under QEMU) and returns the
    outputs (one array, or a tuple). Every size is fixed at build time."""

    def __init__(self, func: LoweredFunc, target: Target | str, flags=()):
        from ..emit_c.embedded import emit_embedded
        _need_lowered(func, "EmulatedKernel")
        self.func = func
        self.target = as_target(target)
        self.module = emit_embedded(func, target=self.target)
        self.source, self.header = self.module.source, self.module.header
        self.arena_bytes = self.module.arena_bytes
        self._inputs = func.params[:func.num_inputs]
        self._outputs = func.params[func.num_inputs:]
        self._bench = Bench(self.target)
        name = self.module.name
        self._bench.build({f"{name}.c": self.source, f"{name}.h": self.header,
                           "main.c": harness_source(f"{name}.h", self.module.entry,
                                                    args_of(func), self.arena_bytes)}, flags)

    def __call__(self, *arrays):
        if len(arrays) != len(self._inputs):
            raise CallError(f"{self.func.name} takes {len(self._inputs)} inputs, got "
                            f"{len(arrays)}")
        checked = []
        for b, a in zip(self._inputs, arrays):
            want = to_numpy(b.dtype)
            a = np.asarray(a) if not b.shape else a
            if not isinstance(a, np.ndarray) or a.dtype != want:
                raise CallError(f"input {b.name} of {self.func.name} must be a numpy array "
                                f"of {want}, got {getattr(a, 'dtype', type(a).__name__)}",
                                hint=f"convert it: np.asarray(x, dtype=np.{want})")
            if a.shape != shape_of(b):
                raise CallError(f"input {b.name} of {self.func.name} has shape {a.shape}; "
                                f"this build fixed it to {shape_of(b)}")
            checked.append(a)
        outs = self._bench.run(checked, [(shape_of(b), to_numpy(b.dtype))
                                         for b in self._outputs])
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self) -> str:
        return f"EmulatedKernel({self.func.name}, {self.target})"


def build_emulated(func: LoweredFunc, target: Target | str = "c-embedded",
                   flags=()) -> EmulatedKernel:
    """The ``c-embedded`` backend of ``Op.build``."""
    return EmulatedKernel(func, target, flags)


def run_host_c(func: LoweredFunc, target: Target | str, arrays) -> list[np.ndarray]:
    """Run the ``c`` kind's C for ``func`` (every size fixed) on ``target``'s machine,
    emulated where it is another: OpenMP and GNU vectors included."""
    from ..emit_c.c import emit_c
    _need_lowered(func, "run_host_c")
    target = as_target(target)
    module = emit_c(func, target=target)
    bench = Bench(target)
    bench.build({"kernel.c": module.source, "kernel.h": module.header,
                 "main.c": harness_source("kernel.h", module.name, args_of(func), None)})
    outs = func.params[func.num_inputs:]
    return bench.run(arrays, [(shape_of(b), to_numpy(b.dtype)) for b in outs])


__all__ = ["Bench", "BOARDS", "EmulatedKernel", "build_emulated", "harness_source",
           "missing_tool", "run_host_c"]
