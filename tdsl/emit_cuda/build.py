"""Emit a lowered function as a .cu file (kernels + launcher), build it with nvcc, load it."""
from __future__ import annotations

import shutil
from dataclasses import dataclass

from ..emit_c.build import BuildCache
from ..emit_c.c import CModule
from ..emit_c.device import check_limits, device_header
from ..emit_c.device_kernel import DeviceKernel
from ..emit_c.printer import fixed_shapes
from ..errors import BuildError
from ..lowering.device import split_kernels
from ..lowering.dtypes import refuse_storage_floats
from ..lowering.loop_ir import LoweredFunc
from ..target import as_target
from .host import CudaHost, CudaHostC
from .printer import CudaPrinter


@dataclass(frozen=True)
class CudaSource:
    name: str              # the host launcher
    source: str            # the .cu file: kernels and launcher
    prototypes: str        # for ffi.cdef


def emit_cuda(func: LoweredFunc, shapes: dict | None = None, target=None) -> CudaSource:
    target = as_target(target or "cuda")
    refuse_storage_floats(func, "CUDA")
    dev = split_kernels(func)
    check_limits(dev, target)
    host = CudaHostC(func, shapes, target)
    printers = [CudaPrinter(k.as_function(func), shapes, target) for k in dev.kernels]
    kernel_parts = []
    for p in printers:
        kernel_parts += [*p.function(), ""]
        host.helpers.merge(p.helpers)        # one translation unit: each helper once
    launcher = CudaHost(dev, host, [p.name for p in printers])
    source, prototypes = launcher.module(host.name, kernel_parts)
    return CudaSource(host.name, source, prototypes)


def compile_cuda(func: LoweredFunc, shapes: dict | None = None, target=None, flags=(),
                 cache: BuildCache | None = None):
    """Emit and compile with nvcc (through the build cache): ``(module, built, source)``."""
    target = as_target(target or "cuda")
    if shutil.which(target.compiler) is None:
        raise BuildError(f"{target.compiler} is not installed: target '{target}' needs the "
                         f"CUDA toolkit", hint="install the CUDA toolkit (nvcc on PATH)")
    src = emit_cuda(func, shapes, target)
    built = (cache or BuildCache()).build(src.source, (*target.flags, *flags), target.compiler)
    header = device_header(src.name, func.name, src.prototypes, "CUDA")
    return CModule(src.name, src.source, header, src.prototypes), built, src.source


def load_cuda(func: LoweredFunc, module: CModule, built, target, source: str,
              shapes: dict | None = None) -> DeviceKernel:
    return DeviceKernel(func, module, built, fixed_shapes(func, shapes or {}),
                        as_target(target), source, "CUDA")


def build_cuda(func: LoweredFunc, *, shapes: dict | None = None, target=None, flags=(),
               cache: BuildCache | None = None) -> DeviceKernel:
    """Emit, compile with nvcc and load; calling the kernel needs an NVIDIA GPU and driver,
    building does not."""
    module, built, source = compile_cuda(func, shapes, target, flags, cache)
    return load_cuda(func, module, built, target or "cuda", source, shapes)
