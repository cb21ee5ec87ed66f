"""The c-embedded target and its printer: strict C99 that every toolchain compiles without a
warning, no allocation, only the documented outside symbols, one arena sized in the header
and planned by allocation scope, error codes instead of traps, and the CLI that writes the
pair. Running the code on (emulated) targets is test_emulated.py."""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest
from cffi import FFI

import tdsl
from tdsl import cli
from tdsl.emit_c.arena import ALIGN, plan_arena
from tdsl.emit_c.embedded import emit_embedded
from tdsl.emit_c.embedded_build import (binutil, can_measure, code_size, compile_object,
                                        compile_objects, undefined_symbols)
from tdsl.errors import BuildError
from tdsl.lowering import te
from tdsl.lowering.loop_ir import Allocate, Buffer, Evaluate, LoweredFunc, Seq

from embedded_cases import FLOAT_CASES, QUANT_CASES, TARGETS, float_inputs, quant_inputs

ALLOWED_HEADERS = {"stddef.h", "stdint.h", "string.h", "math.h", "stdbool.h"}


def _skip_without(tool: str):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


# --------------------------------------------------------------------------- the target

def test_cortex_m_targets_come_from_the_compiler():
    _skip_without("arm-none-eabi-gcc")
    m4 = tdsl.Target("c-embedded -mcpu=cortex-m4")
    assert (m4.kind, m4.arch, m4.compiler) == ("c-embedded", "arm", "arm-none-eabi-gcc")
    assert m4.lanes == 1 and "-mthumb" in m4.flags and "-mfloat-abi=hard" in m4.flags
    m3 = tdsl.Target("c-embedded -mcpu=cortex-m3")       # no FPU: the compiler says so
    assert "-mfloat-abi=soft" in m3.flags
    m55 = tdsl.Target("c-embedded -mcpu=cortex-m55")     # Helium: 128-bit vectors
    assert m55.lanes == 4 and "__ARM_FEATURE_MVE" in m55.isa
    assert str(m4) == "c-embedded -mcpu=cortex-m4"


def test_embedded_flags_have_no_openmp_or_shared_library():
    t = tdsl.Target("c-embedded")
    assert t.compiler == "gcc" and "-std=c99" in t.flags
    assert not {"-fopenmp", "-shared", "-fPIC", "-march=native"} & set(t.flags)


def test_unknown_option_is_an_error():
    with pytest.raises(tdsl.TargetError, match="unknown option -mfoo"):
        tdsl.Target("c-embedded -mfoo=1")


def test_cpu_schedule_blocks_serve_c_embedded():
    assert "default" in tdsl.stdlib["matmul"].schedule_names("c-embedded") or \
        tdsl.stdlib["matmul"].schedule_names("c-embedded")


# --------------------------------------------------------------------------- the C

def _modules(target):
    for name in FLOAT_CASES:
        op, _, sizes, attrs = float_inputs(name)
        yield name, emit_embedded(op.lower(None, sizes, target=target, **attrs), target=target)
    for name in QUANT_CASES:
        op, _, sizes, attrs, _ = quant_inputs(name)
        yield name, emit_embedded(op.lower(None, sizes, target=target, **attrs), target=target)


@pytest.mark.parametrize("spec", TARGETS)
def test_strict_c99_without_warnings_and_only_documented_symbols(spec, tmp_path):
    """Every case compiles with -std=c99 -Wall -Wextra -Werror -pedantic for the target (at
    its -O2 and at -Os), and
    the object leaves undefined only the <math.h> functions its header lists, memcpy/memset
    and the compiler's own __-prefixed support routines: never malloc or free."""
    try:
        target = tdsl.Target(spec)
    except tdsl.TdslError as exc:
        pytest.skip(f"{spec}: {exc}")
    if not can_measure(target):
        pytest.skip(f"{target.compiler} or {binutil(target, 'nm')} is not installed")
    names, modules = zip(*_modules(target))
    # what gcc warns about depends on its optimizations: -Os too (what the sizes are taken at)
    compile_objects(modules, target, tmp_path / "Os", flags=("-Os",))
    for name, module, obj in zip(names, modules, compile_objects(modules, target, tmp_path)):
        undefined = undefined_symbols(obj, target)
        outside = {s for s in undefined if not s.startswith("__")} - module.allowed_symbols
        assert not outside, f"{name} for {spec} calls {sorted(outside)}"
        assert not {"malloc", "free", "calloc", "realloc", "aligned_alloc"} & undefined
        if name.startswith("q"):
            assert module.math_functions == (), f"{name} is integer code"
        listed = re.search(r"Functions of <math.h> it calls: (.*)\. \*/", module.header)
        assert listed.group(1) == (", ".join(module.math_functions) or "none")


def test_source_has_no_allocation_threads_or_other_headers():
    for name, module in _modules(tdsl.Target("c-embedded")):
        code = module.source
        assert not re.search(r"\b(malloc|free|calloc|aligned_alloc|omp)\b", code), name
        headers = set(re.findall(r"#include <([^>]+)>", code + module.header))
        assert headers <= ALLOWED_HEADERS, (name, headers)
        assert f'#include "{module.name}.h"' in code
        assert f"int {module.entry}(" in module.header and module.entry.endswith("_run")
        assert module.source.count("void *arena") == 1 and "void *arena);" in module.header


def test_header_states_the_arena_and_the_errors():
    op, _, sizes, attrs = float_inputs("depthwise_conv2d")     # pads each channel in the arena
    module = emit_embedded(op.lower(None, sizes, target="c-embedded", **attrs))
    assert f"#define DEPTHWISE_CONV2D_ARENA_BYTES {module.arena_bytes}u" in module.header
    assert f"#define DEPTHWISE_CONV2D_ARENA_ALIGN {ALIGN}u" in module.header
    assert "#define DEPTHWISE_CONV2D_ERR_ARENA_NULL 1" in module.header
    assert module.arena_bytes > 0 and module.arena_bytes % ALIGN == 0


@pytest.mark.parametrize("name", ["matmul", "dense", "conv2d"])
def test_weights_are_read_in_place_on_a_microcontroller(name):
    """The `for embedded` blocks keep no packed copy of the weights (nor a padded copy of
    conv2d's input) in the arena: on a Cortex-M it would double the model in RAM."""
    op, _, sizes, attrs = float_inputs(name)
    module = emit_embedded(op.lower(None, sizes, target="c-embedded", **attrs))
    assert module.arena_bytes == 0
    host = op.lower(None, sizes, target="c", **attrs)
    assert "Wp" in str(host) or "Bp" in str(host)           # what the host blocks do instead


def test_free_sizes_are_an_error():
    func = tdsl.stdlib["matmul"].lower(None, {"M": 4}, target="c-embedded")
    with pytest.raises(BuildError, match="K, N are free"):
        emit_embedded(func)


# --------------------------------------------------------------------------- the arena plan

def _buf(name, n):
    return Buffer(name, "f32", (te.Const(n, "i64"),))


def test_arena_plan_reuses_bytes_of_allocations_not_live_together():
    a, b, c = _buf("a", 10), _buf("b", 30), _buf("c", 5)
    nop = Evaluate(te.Const(0, "i32"))
    # a, and inside it b; after both, c: c may take a's place
    body = Seq((Allocate(a, Allocate(b, nop)), Allocate(c, nop)))
    func = LoweredFunc("f", (), body)
    plan = plan_arena(func, lambda buf: True)
    assert plan.offsets[id(a)] == 0 and plan.offsets[id(c)] == 0
    assert plan.offsets[id(b)] == 48                  # 40 bytes, aligned to 16
    assert plan.size == 48 + 128 and plan.naive_bytes == 48 + 128 + 32
    assert plan_arena(func, lambda buf: buf is not b).size == 48


# --------------------------------------------------------------------------- run on the host

def _load_shared(module, tmp_path):
    """The pair built as a host shared library (portable C runs anywhere)."""
    (tmp_path / f"{module.name}.c").write_text(module.source)
    (tmp_path / f"{module.name}.h").write_text(module.header)
    lib = tmp_path / f"lib{module.name}.so"
    subprocess.run(["gcc", "-std=c99", "-O1", "-shared", "-fPIC", str(tmp_path /
                    f"{module.name}.c"), "-o", str(lib), "-lm"], check=True)
    ffi = FFI()
    proto = re.search(r"^int \w+\(.*\);$", module.header, re.M).group(0)
    ffi.cdef(proto.replace("restrict ", ""))
    return ffi, ffi.dlopen(str(lib))


def test_runs_and_returns_error_codes_instead_of_trapping(tmp_path):
    op, arrays, sizes, attrs = float_inputs("depthwise_conv2d")    # an op with an arena
    module = emit_embedded(op.lower(None, sizes, target="c-embedded", **attrs))
    ffi, lib = _load_shared(module, tmp_path)
    entry = getattr(lib, module.entry)
    x, w = (ffi.from_buffer("float[]", a) for a in arrays)
    y = np.zeros(op.reference(*arrays, **attrs).shape, np.float32)
    arena = np.zeros(module.arena_bytes + 64, np.uint8)
    base = (-arena.ctypes.data) % 16
    aligned = ffi.from_buffer("char[]", arena[base:])
    assert entry(x, w, ffi.from_buffer("float[]", y), ffi.NULL) == 1
    assert entry(x, w, ffi.from_buffer("float[]", y), aligned + 4) == 2
    assert not y.any()
    assert entry(x, w, ffi.from_buffer("float[]", y), aligned) == 0
    np.testing.assert_allclose(y, op.reference(*arrays, **attrs), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- the command

def test_cli_build_writes_the_pair_and_prints_arena_and_code_size(tmp_path, capsys):
    spec = "c-embedded -mcpu=cortex-m4"
    try:
        target = tdsl.Target(spec)
    except tdsl.TdslError:
        pytest.skip("arm-none-eabi-gcc is not installed")
    code = cli.main(["build", "std", "--op", "qconv2d", "--target", spec,
                     "--shape", "N=1,C=3,IH=8,IW=8,F=4,KH=3,KW=3",
                     "--attr", "padding=1", "--attr", "scale=0.01", "-o", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert (tmp_path / "qconv2d.c").exists() and (tmp_path / "qconv2d.h").exists()
    assert "arena 0 bytes (QCONV2D_ARENA_BYTES" in out
    if can_measure(target):
        size = code_size(compile_object(emit_embedded(
            tdsl.stdlib["qconv2d"].lower(None, dict(N=1, C=3, IH=8, IW=8, F=4, KH=3, KW=3),
                                         target=target, padding=1, scale=0.01),
            target=target), target, tmp_path / "o"), target)
        assert f"text {size.text}, data {size.data}, bss {size.bss} bytes" in out


def test_cli_build_needs_the_sizes(tmp_path, capsys):
    code = cli.main(["build", "std", "--op", "matmul", "--target", "c-embedded",
                     "-o", str(tmp_path)])
    assert code == 1 and "M, K, N are free" in capsys.readouterr().err
