"""How each target kind turns a lowered function into a kernel, in two halves the tuner
keeps apart (a build worker compiles, the runner process loads): ``compile(func, target)``
gives picklable ``(module, library, device_source)``, ``load(...)`` the callable kernel.
"""
from __future__ import annotations

from .emit_c.build import BuildCache
from .emit_c.c import emit_c
from .emit_c.kernel import Kernel
from .emit_cuda import compile_cuda, load_cuda
from .emit_opencl import compile_opencl, load_opencl
from .target import kernel_flags


def _compile_c(func, shapes=None, target=None, flags=(), cache=None):
    module = emit_c(func, shapes, target)
    library = (cache or BuildCache()).build(module.source,
                                            (*kernel_flags(target, module.source), *flags),
                                            target.compiler)
    return module, library, ""


def _load_c(func, module, library, target, device_source="", shapes=None):
    from .emit_c.printer import fixed_shapes
    return Kernel(func, module, library, fixed_shapes(func, shapes or {}), target)


COMPILERS = {"c": _compile_c, "cuda": compile_cuda, "opencl": compile_opencl}
LOADERS = {"c": _load_c, "cuda": load_cuda, "opencl": load_opencl}


def compile_func(func, target, shapes=None, flags=(), cache=None):
    return COMPILERS[target.kind](func, shapes, target, flags, cache)


def load_func(func, module, library, target, device_source="", shapes=None):
    return LOADERS[target.kind](func, module, library, target, device_source, shapes)
