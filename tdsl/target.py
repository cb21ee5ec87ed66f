"""`Target`: what code is generated for, as one value resolved once and passed down.

A target is written as a string in the spirit of TVM's: a kind, then ``-key=value`` options.

    c                          the host, detected (``-march=native``)
    c -march=x86-64-v3         an ISA level (AVX2 + FMA), runnable on any host that has it
    c -march=armv8-a           a cross build (aarch64-linux-gnu-gcc); its kernels build here
                               and are refused when called on an x86 host
    c -march=native -lanes=8   any fact may be overridden by hand

It carries what schedules, the tuner and the emitters need: the float32 vector ``lanes``, the
number of vector ``registers``, the ``l1``/``l2`` data-cache sizes in bytes (and the
last level's, ``l3``, where known), the C
``compiler`` and its ``flags``. Schedule blocks read the first four by name
(``split(C.j, lanes)``, ``require ti * tj // lanes <= registers - 2``).

The ISA facts come from the compiler itself: ``CC -march=X -dM -E`` lists the macros it
predefines for that ISA (``__AVX512F__``, ``__ARM_NEON``, ...), so a named CPU (``znver3``,
``skylake-avx512``, ``cortex-a72``) needs no table of ours. The cache sizes come from the
host's sysfs when the target is the host, else from `DEFAULT_L1`/`DEFAULT_L2`.

Other kinds (``cuda``, ``opencl``, ``c-embedded``) register a resolver in `KINDS`.
"""
from __future__ import annotations

import functools
import os
import platform
import re
import shlex
import subprocess
from dataclasses import dataclass, field

from .errors import BuildError, TdslError

DEFAULT_L1 = 32 * 1024          # bytes: the common L1d of x86 and Arm application cores
DEFAULT_L2 = 512 * 1024         # bytes: a per-core L2 of that class (Zen 3, Cortex-A7x)
DEFAULT_L3 = 0                  # bytes of last-level cache where unknown: no use made of it

# Prefixes of the compiler macros that name an instruction-set extension: a target whose
# macros include one the host's ``-march=native`` lacks would die of SIGILL here.
_ISA_MACROS = ("__SSE", "__AVX", "__FMA", "__BMI", "__F16C", "__POPCNT", "__LZCNT", "__MOVBE",
               "__ADX", "__AES", "__PCLMUL", "__SHA", "__GFNI", "__VAES", "__VPCLMUL", "__AMX",
               "__ARM_NEON", "__ARM_FEATURE_SVE", "__ARM_FEATURE_MVE", "__ARM_FEATURE_MATMUL_INT8",
               "__ARM_FEATURE_DOTPROD", "__riscv_vector")

# Cross compilers by the architecture a -march/-mcpu names (Debian's package names).
_CROSS = (("armv8", "aarch64-linux-gnu-gcc"), ("armv9", "aarch64-linux-gnu-gcc"),
          ("cortex-a5", "aarch64-linux-gnu-gcc"), ("cortex-a7", "aarch64-linux-gnu-gcc"),
          ("neoverse", "aarch64-linux-gnu-gcc"), ("armv7", "arm-linux-gnueabihf-gcc"),
          ("rv64", "riscv64-linux-gnu-gcc"), ("rv32", "riscv64-linux-gnu-gcc"))


class TargetError(TdslError):
    """A target string that does not parse, or names what this machine cannot build for."""
    phase = "target error"


class _ParsedFromString(type):
    """``Target("c -march=x86-64-v3")`` parses, as TVM's ``Target("llvm -mcpu=...")`` does;
    the field-by-field constructor is for resolvers (and ``dataclasses.replace``, which
    names every field)."""
    def __call__(cls, *fields, **named):
        if len(fields) > 1 or named:
            return super().__call__(*fields, **named)
        return as_target(fields[0] if fields else "c")


@dataclass(frozen=True)
class Target(metaclass=_ParsedFromString):
    """A resolved target: ``Target("c -march=x86-64-v3")``, ``Target()`` for the host;
    ``str(target)`` gives back the canonical string."""
    kind: str
    options: tuple[tuple[str, str], ...]    # as written, sorted: the identity of the target
    arch: str                               # "x86_64", "aarch64", "arm", "riscv64", ...
    lanes: int                              # float32 lanes of one vector register
    registers: int                          # vector (or, without SIMD, float) registers
    l1: int                                 # bytes of L1 data cache (per core)
    l2: int                                 # bytes of L2 cache (per core)
    compiler: str
    flags: tuple[str, ...]                  # compile flags, libraries excluded
    isa: frozenset[str] = field(default=frozenset(), repr=False)   # ISA macros it uses
    # GPU facts (0 on CPUs): threads per warp/wavefront, per block, shared memory per block
    warp: int = 0
    max_threads: int = 0
    shared_bytes: int = 0
    # 1 where schedules use the int8 tile unit (AMX-INT8's tdpbusd: 16 x 16 i32 sums of 64
    # u8 x i8 products per instruction), the `amx` constant of schedule blocks
    amx: int = 0
    # bytes of the last-level cache (shared), 0 where unknown: outputs of half that size or
    # more are stored past the caches (emit_c/c.py's streaming stores)
    l3: int = DEFAULT_L3

    @staticmethod
    def parse(spec: str) -> "Target":
        return _parse(" ".join(str(spec).split()))

    def __str__(self) -> str:
        return " ".join([self.kind, *(f"-{k}={v}" for k, v in self.options)])

    def option(self, name: str, default: str | None = None) -> str | None:
        return dict(self.options).get(name, default)

    @property
    def has_int8_dot(self) -> bool:
        """Whether the CPU has an integer dot-product instruction that the int8 dot
        product (`emit_c.helpers`' dot4_u8i8) uses: vpdpbusd (AVX-512 VNNI, AVX-VNNI),
        usdot (Arm's I8MM), sdot (Armv8.2's dot product, with a correction for the
        unsigned activations)."""
        return self.kind in ("c", "c-embedded") and \
            bool({"__AVX512VNNI__", "__AVXVNNI__", "__ARM_FEATURE_MATMUL_INT8",
                  "__ARM_FEATURE_DOTPROD"} & self.isa)

    @property
    def has_i16_dot(self) -> bool:
        """Whether the CPU multiplies pairs of i16 and adds each pair's products in an i32
        lane in one instruction, which `emit_c.helpers`' dot2_i16 uses: x86's pmaddwd
        (SSE2 on; vpdpwssd with AVX-512 VNNI), 2 x lanes products an instruction. The host C
        kind only: its graphs run the i16 convolutions blocked (the layout pass), as the
        pairs need."""
        return self.kind == "c" and "__SSE2__" in self.isa

    @property
    def is_gpu(self) -> bool:
        """Whether code for this target runs as kernels of threads in blocks (CUDA, OpenCL)."""
        return self.warp > 0

    def constants(self) -> dict[str, int]:
        """What schedule blocks may name: ``lanes``, ``registers``, ``l1``, ``l2``, ``amx``
        (1 with AMX-INT8 tiles, else 0) (and on GPUs ``warp``, ``max_threads``, ``shared_bytes``)."""
        out = {"lanes": self.lanes, "registers": self.registers, "l1": self.l1, "l2": self.l2,
               "amx": self.amx}
        if self.warp:
            out.update(warp=self.warp, max_threads=self.max_threads,
                       shared_bytes=self.shared_bytes)
        return out

    def facts(self) -> dict:
        """What a tuning record says of the target it was measured for (JSON-ready): what a
        schedule's knobs and ``require``s may read (`constants`), the architecture, the ISA
        flags given to the compiler and the instruction-set extensions they enable, e.g.
        ``{"kind": "c", "arch": "x86_64", "lanes": 8, "registers": 16, "l1": 32768, ...,
        "march": ["-march=x86-64-v3"], "isa": ["avx", "avx2", "fma", ...]}``."""
        return {"kind": self.kind, "arch": self.arch, **self.constants(),
                "march": [f for f in self.flags if f.startswith(("-march=", "-mcpu=",
                                                                  "-mtune="))],
                "isa": sorted(m.strip("_").lower() for m in self.isa)}

    def unrunnable_reason(self) -> str | None:
        """Why kernels of this target cannot run on this machine, or None when they can."""
        if self.kind != "c":
            return None if self.kind in _RUNNABLE_KINDS else \
                f"target '{self}' builds code for another machine"
        if self.arch != host_arch():
            return f"target '{self}' builds {self.arch} code and this machine is {host_arch()}"
        missing = self.isa - _native_isa(self.compiler)
        if missing:
            names = ", ".join(sorted(m.strip("_").lower() for m in missing))
            return f"target '{self}' uses instructions this CPU lacks ({names})"
        return None

    def peak_gflops(self, ghz: float | None = None, cores: int | None = None) -> float:
        """The fp32 FMA peak: cores x 2 FMA units x lanes x 2 flops x GHz. The clock is the
        host's reported maximum unless given (``tdsl target`` prints it)."""
        ghz = ghz or host_ghz()
        cores = cores or os.cpu_count() or 1
        return cores * 2 * self.lanes * 2 * ghz

    def describe(self) -> str:
        lines = [f"target     {self}", f"arch       {self.arch}",
                 f"lanes      {self.lanes} (float32 per vector)",
                 f"registers  {self.registers} vector registers",
                 f"l1         {self.l1 // 1024} KiB", f"l2         {self.l2 // 1024} KiB",
                 f"l3         {f'{self.l3 // 1024} KiB' if self.l3 else 'unknown'}",
                 f"amx        {self.amx} (int8 sums in AMX tiles: {'yes' if self.amx else 'no'})",
                 f"compiler   {self.compiler} {' '.join(self.flags)}"]
        if self.warp:
            lines += [f"warp       {self.warp}", f"threads    {self.max_threads} per block",
                      f"shared     {self.shared_bytes // 1024} KiB per block"]
        if self.kind == "c":
            why = self.unrunnable_reason()
            lines.append(f"runs here  {'yes' if why is None else 'no: ' + why}")
            if why is None:
                lines.append(f"fp32 peak  {self.peak_gflops():.0f} GFLOP/s "
                             f"({os.cpu_count()} cores x 2 FMA x {self.lanes} lanes x 2 x "
                             f"{host_ghz():.2f} GHz)")
        return "\n".join(lines)


_RUNNABLE_KINDS: set[str] = set()     # non-C kinds whose kernels run in-process (GPU drivers)


def as_target(target: "Target | str | None") -> Target:
    """A `Target` from a string, a Target, or None (the host)."""
    if isinstance(target, Target):
        return target
    return Target.parse("c" if target is None else target)


# ----------------------------------------------------------------------------- parsing

KINDS: dict = {}       # kind -> resolver(options: dict[str, str]) -> Target


def register_kind(kind: str, runs_in_process: bool = False):
    def deco(resolver):
        KINDS[kind] = resolver
        if runs_in_process:
            _RUNNABLE_KINDS.add(kind)
        return resolver
    return deco


@functools.lru_cache(maxsize=64)
def _parse(spec: str) -> Target:
    words = spec.split()
    if not words:
        raise TargetError("empty target string", hint=_KNOWN_HINT())
    kind, options = words[0], {}
    if kind not in KINDS:
        raise TargetError(f"unknown target kind '{kind}'", hint=_KNOWN_HINT())
    for word in words[1:]:
        key, eq, value = word.lstrip("-").partition("=")
        if not word.startswith("-") or not eq or not key or not value:
            raise TargetError(f"target option '{word}' is not of the form -key=value",
                              hint=f"e.g. '{kind} -march=x86-64-v3'")
        if key in options:
            raise TargetError(f"target option -{key} is given twice in '{spec}'")
        options[key] = value
    return KINDS[kind](options)


def _KNOWN_HINT() -> str:
    return ("targets: " + ", ".join(sorted(KINDS)) +
            "; e.g. 'c', 'c -march=x86-64-v3', 'c -march=armv8-a', 'cuda -arch=sm_90', "
            "'opencl'")


def _int_option(options: dict, name: str, default: int) -> int:
    value = options.get(name)
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise TargetError(f"target option -{name} must be a positive integer, got '{value}'")
    return n


# Options of the C kinds, besides the ISA ones handed to the compiler.
_C_OPTIONS = {"march", "mcpu", "mtune", "cc", "lanes", "registers", "l1", "l2", "l3", "amx"}


@register_kind("c")
def _resolve_c(options: dict) -> Target:
    unknown = set(options) - _C_OPTIONS
    if unknown:
        raise TargetError(f"unknown option -{sorted(unknown)[0]} for target kind c",
                          hint="options: " + ", ".join(f"-{o}" for o in sorted(_C_OPTIONS)))
    if options.get("march") == "native":       # the default, named: the same target as "c"
        del options["march"]
    isa_flags = tuple(f"-{k}={options[k]}" for k in ("march", "mcpu", "mtune") if k in options)
    if not any(f.startswith(("-march", "-mcpu")) for f in isa_flags):
        isa_flags = ("-march=native",) + isa_flags
    compiler = options.get("cc") or _compiler_for(options)
    macros = compiler_macros(compiler, isa_flags)
    arch = _arch_of(macros)
    lanes, registers = _vector_facts(macros)
    host = arch == host_arch() and compiler == "gcc"
    l1, l2, l3 = host_caches() if host else (DEFAULT_L1, DEFAULT_L2, DEFAULT_L3)
    lanes = _int_option(options, "lanes", lanes)
    registers = _int_option(options, "registers", registers)
    flags = ["-O3", *isa_flags]
    if arch == "x86_64" and lanes >= 8:
        # prefer the target's own vector width: Intel's tunings prefer 256-bit vectors even
        # with AVX-512, and a register tile sized for 32 zmm then spills (anchors.md)
        flags.append(f"-mprefer-vector-width={lanes * 32}")
    # -fno-math-errno -fno-trapping-math let gcc vectorize sqrt/floor/ceil/rint; they change
    # no value, only errno and FP exception flags. -fwrapv: signed overflow wraps as numpy's
    # integers do. -Werror=implicit-function-declaration: an undeclared call fails here, not
    # at dlopen.
    flags += ["-fno-math-errno", "-fno-trapping-math", "-fwrapv", "-fopenmp", "-shared",
              "-fPIC", "-Werror=implicit-function-declaration"]
    if "__AVX512FP16__" in macros:
        # f16 is a storage type, computed in f32 and rounded where stored; with AVX512-FP16
        # (Sapphire Rapids) gcc computed f16(f32(x) * f32(w) + 1) in half precision and kept
        # casts to _Float16 unrounded (tests/test_dtypes_wide.py: 70001 for inf)
        flags.append("-mno-avx512fp16")
    # the host's own CPU (no -march named): its tiles only where Linux grants them
    native = host and not any(k in options for k in ("march", "mcpu"))
    tiles = {"__AMX_INT8__", "__AMX_TILE__"} <= macros and (not native or host_grants_amx())
    amx = options.get("amx", "1" if tiles else "0")
    if amx not in ("0", "1"):
        raise TargetError(f"target option -amx must be 0 or 1, got '{amx}'")
    return Target("c", tuple(sorted(options.items())), arch, lanes, registers,
                  _int_option(options, "l1", l1), _int_option(options, "l2", l2),
                  compiler, tuple(flags), frozenset(m for m in macros if m.startswith(_ISA_MACROS)),
                  amx=int(amx), l3=_int_option(options, "l3", l3))


def _compiler_for(options: dict) -> str:
    isa = (options.get("march") or options.get("mcpu") or "native").lower()
    for prefix, compiler in _CROSS:
        if isa.startswith(prefix):
            return compiler if host_arch() != _arch_from_compiler(compiler) else "gcc"
    return "gcc"


def _arch_from_compiler(compiler: str) -> str:
    return {"aarch64": "aarch64", "arm": "arm", "riscv64": "riscv64"}.get(
        compiler.split("-")[0], host_arch())


def _arch_of(macros: frozenset[str]) -> str:
    for macro, arch in (("__x86_64__", "x86_64"), ("__aarch64__", "aarch64"),
                        ("__arm__", "arm"), ("__riscv", "riscv64"), ("__i386__", "i386")):
        if macro in macros:
            return arch
    return host_arch()


def _vector_facts(macros: frozenset[str]) -> tuple[int, int]:
    """(float32 lanes, vector registers) of the widest vector unit the macros announce."""
    if "__AVX512F__" in macros:
        return 16, 32
    if "__AVX__" in macros:
        return 8, 16
    if "__x86_64__" in macros or "__SSE2__" in macros:
        return 4, 16
    if "__aarch64__" in macros:
        return 4, 32                     # NEON: 32 x 128-bit registers
    if "__ARM_FEATURE_MVE" in macros:
        return 4, 8                      # Helium (Cortex-M55/M85): 8 x 128-bit Q registers
    if "__ARM_NEON" in macros:
        return 4, 16                     # armv7 NEON: 16 Q registers
    return 1, 16                         # no SIMD: scalar float registers


@functools.lru_cache(maxsize=None)
def kernel_flags(target: Target, source: str) -> tuple[str, ...]:
    """The flags to compile a kernel's C ``source`` with: the target's, and for gcc 12 on
    AVX2 or AVX-512 -fno-tree-loop-if-convert where a select reads a load in a loop that may
    run fewer times than a vector has lanes. gcc 12.2 turns such a select in a short inner
    loop (`c ? B[i] : 0`, `c ? A[i] : A[i] * B[i]`) into masked loads with the wrong masks
    (ONNX's PRelu cases gave wrong numbers): on a Zen 4, for 3 to 15 iterations of 16-lane
    code (not 4 or 8) and 3 to 7 of 8-lane code, never for 17 to 48 or 8 to 48. Other
    kernels keep if-conversion: their exp/erf/min/max helpers are ternaries that vectorize
    only with it, and a padded copy's guarded reads (`inside ? X[i] : 0` along a row of 34)
    ran 3x slower without it (a 256-channel 28 x 28 depthwise convolution: 190 us against
    62)."""
    if target.kind in ("c", "c-embedded") and "__AVX2__" in target.isa and \
            _gcc_major(target.compiler) in range(1, 13) and \
            _reads_under_select(source, target.lanes):
        return (*target.flags, "-fno-tree-loop-if-convert")
    return target.flags


# a whole-vector load (`tdsl_load_f32x16(&X[i])`) of an unnested index
_VECTOR_LOAD = re.compile(r"tdsl_load_\w+\(&\w+\[[^\[\]]*\]\)")
# an array access of an unnested index (`P[256 * b + j]`)
_ACCESS = re.compile(r"\b\w+\[[^\[\]]*\]")


# a loop as the printers write it: `for (int64_t x = MIN; x < END; ++x) {`
_FOR = re.compile(r"^\s*for \(int64_t (\w+) = (\d+); \1 < (\d+); \+\+\1\) \{$")


def _reads_under_select(source: str, lanes: int = 1) -> bool:
    """Whether a statement of printed C, in a loop not known to run at least ``lanes``
    times (a size known only at the call, or fewer), indexes an array after a `?` (a
    select's branch reads a load: the printer writes a select as `c ? t : f` and a load as
    `A[...]`) that the statement does not access before its first `?` as well. A load the
    condition (or the expression around the select) reads is read unconditionally, and a
    place the statement stores to is written unconditionally, so gcc makes no masked load of
    either (it knows neither can fault): tanh's `fabsf(x) < 0.625f ? poly(x) : ...` of a
    loaded x (an LSTM step: 4.0 us with the flag, 1.4 without). A load before the first `?`
    that follows a `&&` or `||` is conditional, so such a statement keeps the old test. A
    branch that loads a whole vector does not count: that select is between two vectors on
    one condition (a padded copy's `inside ? load(&X[i]) : broadcast(0)`), nothing for
    if-conversion to vectorize, while the flag costs the kernel's other loops (an int8
    convolution's register tile spilled: 1.35 ms against 0.71). A statement outside every
    loop is not if-converted."""
    blocks: list[int | None] = []     # per open brace: a loop's iterations (None: unknown)
    for line in source.splitlines():
        code = line.strip()
        if code.startswith("}") and blocks:
            blocks.pop()
        loop = _FOR.match(line)
        if loop:
            blocks.append(int(loop[3]) - int(loop[2]))
            continue
        if code.startswith("for ") and code.endswith("{"):
            blocks.append(None)
            continue
        if code.endswith("{"):
            blocks.append(blocks[-1] if blocks else 0)     # a block inside the same loop
            continue
        if "?" not in code or not blocks or blocks[-1] == 0:
            continue
        if blocks[-1] is not None and blocks[-1] >= lanes:
            continue
        for stmt in code.split(";"):
            if "?" in stmt and _select_reads_a_load(stmt):
                return True
    return False


def _select_reads_a_load(stmt: str) -> bool:
    head, tail = stmt[:stmt.index("?")], _VECTOR_LOAD.sub("", stmt[stmt.index("?"):])
    unconditional = set() if "&&" in head or "||" in head else set(_ACCESS.findall(head))
    if any(a not in unconditional for a in _ACCESS.findall(tail)):
        return True
    return "[" in _ACCESS.sub("", tail)         # an access of a nested index


@functools.lru_cache(maxsize=None)
def _gcc_major(compiler: str) -> int:
    """gcc's major version (0 for another compiler or when it can't be read)."""
    try:
        proc = subprocess.run([compiler, "-dumpversion"], capture_output=True, text=True,
                              timeout=60)
        macros = subprocess.run([compiler, "-dM", "-E", "-x", "c", "-"], input="",
                                capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if "__clang__" in macros or not proc.stdout.strip().split(".")[0].isdigit():
        return 0
    return int(proc.stdout.strip().split(".")[0])


def compiler_macros(compiler: str, isa_flags: tuple[str, ...]) -> frozenset[str]:
    """The macros ``compiler`` predefines for these ISA flags (defined ones only)."""
    cmd = [compiler, *isa_flags, "-dM", "-E", "-x", "c", "-"]
    try:
        proc = subprocess.run(cmd, input="", capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise BuildError(f"the C compiler {compiler!r} is not installed",
                         hint=_install_hint(compiler)) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"cannot run the C compiler {compiler!r}: {exc}") from None
    if proc.returncode != 0:
        said = [line for line in proc.stderr.splitlines() if "error" in line] or \
            proc.stderr.strip().splitlines() or [""]
        raise TargetError(f"{compiler} rejects {' '.join(isa_flags)}: {said[0]}",
                          hint=f"check the option: {shlex.join(cmd[:-5])}")
    return frozenset(m.group(1) for m in re.finditer(r"#define (\w+)", proc.stdout))


def _install_hint(compiler: str) -> str:
    if compiler.endswith("-gcc") and compiler != "gcc":
        return f"install it: apt-get install gcc-{compiler.removesuffix('-gcc')}"
    return "install gcc (apt-get install gcc), or name another with -cc=..."


@functools.lru_cache(maxsize=None)
def _native_isa(compiler: str) -> frozenset[str]:
    native = "gcc" if compiler != "gcc" and _arch_from_compiler(compiler) != host_arch() \
        else compiler
    return frozenset(m for m in compiler_macros(native, ("-march=native",))
                     if m.startswith(_ISA_MACROS))


# ----------------------------------------------------------------------------- GPUs

# CUDA: what every architecture from sm_75 up guarantees per block (static shared memory is
# capped at 48 KiB without the opt-in of cudaFuncSetAttribute). ``-arch`` defaults to the
# H200/H100 generation this project's GPU machines have.
_CUDA_OPTIONS = {"arch", "max_threads", "shared_bytes", "warp"}
_CUDA_DEFAULT_ARCH = "sm_90"

# OpenCL: the minimums the OpenCL 1.2 specification guarantees of any full-profile device
# (CL_DEVICE_LOCAL_MEM_SIZE >= 32 KiB); 256 work-items per group is what every GPU and PoCL
# give. The warp is a scheduling hint only (32 suits NVIDIA, AMD's RDNA and PoCL's
# vectorized work-group loops alike); every value may be overridden.
_OPENCL_OPTIONS = {"max_threads", "shared_bytes", "warp", "device"}


def _gpu_options(kind: str, options: dict, known: set) -> None:
    unknown = set(options) - known
    if unknown:
        raise TargetError(f"unknown option -{sorted(unknown)[0]} for target kind {kind}",
                          hint="options: " + ", ".join(f"-{o}" for o in sorted(known)))


@register_kind("cuda", runs_in_process=True)
def _resolve_cuda(options: dict) -> Target:
    _gpu_options("cuda", options, _CUDA_OPTIONS)
    arch = options.get("arch", _CUDA_DEFAULT_ARCH)
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise TargetError(f"-arch={arch} is not a CUDA architecture",
                          hint="e.g. cuda -arch=sm_90 (H100/H200), -arch=sm_80 (A100)")
    number = re.sub(r"\D", "", arch)
    # SASS for the architecture and its PTX, so newer GPUs can JIT the kernels
    flags = ("-O3", "-x", "cu", f"-gencode=arch=compute_{number},code={arch}",
             f"-gencode=arch=compute_{number},code=compute_{number}",
             "-shared", "-Xcompiler", "-fPIC")
    return Target("cuda", tuple(sorted(options.items())), arch, 1, 64, DEFAULT_L1, DEFAULT_L2,
                  "nvcc", flags, warp=_int_option(options, "warp", 32),
                  max_threads=_int_option(options, "max_threads", 1024),
                  shared_bytes=_int_option(options, "shared_bytes", 48 * 1024))


@register_kind("opencl", runs_in_process=True)
def _resolve_opencl(options: dict) -> Target:
    _gpu_options("opencl", options, _OPENCL_OPTIONS)
    device = options.get("device", "default")
    if device not in ("default", "cpu", "gpu", "all"):
        raise TargetError(f"-device={device} is not an OpenCL device type",
                          hint="-device=default|cpu|gpu|all (the first such device is used)")
    # the generated host stub is C, built by gcc against the ICD loader (libOpenCL)
    return Target("opencl", tuple(sorted(options.items())), "opencl", 1, 64, DEFAULT_L1,
                  DEFAULT_L2, "gcc", ("-O2", "-shared", "-fPIC"),
                  warp=_int_option(options, "warp", 32),
                  max_threads=_int_option(options, "max_threads", 256),
                  shared_bytes=_int_option(options, "shared_bytes", 32 * 1024))


# ----------------------------------------------------------------------------- the host

@functools.lru_cache(maxsize=None)
def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


@functools.lru_cache(maxsize=None)
def host_grants_amx() -> bool:
    """Whether Linux lets this process use the AMX tiles (arch_prctl ARCH_REQ_XCOMP_PERM for
    XFEATURE_XTILEDATA, what the tile kernels ask before their first use): a kernel or a
    sandbox that refuses would leave them on their plain-C fallback, so the host target
    then says amx = 0 and the int8 convolutions stay on VNNI."""
    if platform.system() != "Linux" or host_arch() != "x86_64":
        return False
    import ctypes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(158, 0x1023, 18) == 0        # SYS_arch_prctl on x86_64
    except (OSError, AttributeError):
        return False


@functools.lru_cache(maxsize=None)
def host_caches() -> tuple[int, int, int]:
    """(L1d, L2, L3) bytes from sysfs (L1d and L2 per core), the defaults where it says
    nothing."""
    found = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = os.listdir(base)
    except OSError:
        entries = []
    for entry in entries:
        try:
            with open(f"{base}/{entry}/level") as f:
                level = int(f.read())
            with open(f"{base}/{entry}/type") as f:
                kind = f.read().strip()
            with open(f"{base}/{entry}/size") as f:
                size = _parse_size(f.read().strip())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and level in (1, 2, 3):
            found[level] = size
    return found.get(1, DEFAULT_L1), found.get(2, DEFAULT_L2), found.get(3, DEFAULT_L3)


def _parse_size(text: str) -> int:
    units = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


@functools.lru_cache(maxsize=None)
def host_ghz() -> float:
    """The cores' maximum clock as the OS reports it (cpufreq, else /proc/cpuinfo)."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            return int(f.read()) / 1e6
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
        if mhz:
            return max(mhz) / 1000
    except (OSError, ValueError):
        pass
    return 2.0


# ----------------------------------------------------------------------------- c-embedded

# Options of c-embedded besides the ISA ones: -mtriple names the toolchain (its compiler is
# TRIPLE-gcc), -mfloat-abi the float ABI of an Arm CPU.
_EMBEDDED_OPTIONS = {"march", "mcpu", "mtune", "mtriple", "mfloat-abi", "cc", "lanes",
                     "registers", "l1", "l2"}


@register_kind("c-embedded")
def _resolve_c_embedded(options: dict) -> Target:
    """Strict C99 for microcontrollers and small boards (tdsl/emit_c/embedded.py).

    ``c-embedded`` alone is portable C built by the host's gcc at its default ISA;
    ``-mcpu=cortex-m4`` (any Cortex-M) builds with arm-none-eabi-gcc in Thumb mode, with the
    hardware float ABI where the compiler says the CPU has an FPU; ``-march=armv8-a``,
    ``-march=armv7-a``, ``-march=rv64gc`` pick the Linux cross compilers as the ``c`` kind
    does; ``-mtriple=riscv64-linux-gnu`` names a toolchain outright. Lanes and registers come
    from the compiler's macros for those flags (no MVE/NEON: scalar code, one lane).
    """
    unknown = set(options) - _EMBEDDED_OPTIONS
    if unknown:
        raise TargetError(f"unknown option -{sorted(unknown)[0]} for target kind c-embedded",
                          hint="options: " + ", ".join(f"-{o}" for o in
                                                      sorted(_EMBEDDED_OPTIONS)))
    isa_flags = tuple(f"-{k}={options[k]}" for k in ("march", "mcpu", "mtune") if k in options)
    cpu = (options.get("mcpu") or options.get("march") or "").lower()
    triple = options.get("mtriple")
    cortex_m = cpu.startswith(("cortex-m", "armv6-m", "armv7-m", "armv7e-m", "armv8-m",
                               "armv8.1-m")) or (triple or "").endswith("-eabi")
    if options.get("cc"):
        compiler = options["cc"]
    elif triple:
        compiler = f"{triple}-gcc"
    elif cortex_m:
        compiler = "arm-none-eabi-gcc"
    elif isa_flags:
        compiler = _compiler_for(options)
    else:
        compiler = "gcc"
    if cortex_m:
        isa_flags += ("-mthumb",)
        abi = options.get("mfloat-abi")
        if abi is None:             # hard float where the CPU has an FPU, as the compiler says
            try:
                compiler_macros(compiler, isa_flags + ("-mfloat-abi=hard",))
                abi = "hard"
            except TargetError:
                abi = "soft"
        isa_flags += (f"-mfloat-abi={abi}",)
    elif "mfloat-abi" in options:
        isa_flags += (f"-mfloat-abi={options['mfloat-abi']}",)
    macros = compiler_macros(compiler, isa_flags)
    arch = _arch_of(macros)
    lanes, registers = _vector_facts(macros)
    lanes = _int_option(options, "lanes", lanes)
    registers = _int_option(options, "registers", registers)
    # value-preserving options only (see _resolve_c); no OpenMP, no shared library: the
    # output is a .c/.h pair the user's own build compiles
    flags = ("-std=c99", "-O2", *isa_flags, "-fno-math-errno", "-fno-trapping-math",
             "-fwrapv", "-ffunction-sections", "-fdata-sections",
             "-Werror=implicit-function-declaration")
    return Target("c-embedded", tuple(sorted(options.items())), arch, lanes, registers,
                  _int_option(options, "l1", DEFAULT_L1), _int_option(options, "l2", DEFAULT_L2),
                  compiler, flags, frozenset(m for m in macros if m.startswith(_ISA_MACROS)))


__all__ = ["Target", "TargetError", "as_target", "register_kind", "KINDS", "host_arch"]
