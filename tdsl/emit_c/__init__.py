"""The C backend: print loop IR as C, compile it through a cache, call it on numpy arrays.

    kernel = build_kernel(lowered_func)       # HostC -> gcc (cached) -> cffi
    C = kernel(A, B)

`CFamilyPrinter` is the base the CUDA and OpenCL printers subclass.
"""
from .build import BuildCache, BuildResult, build_library, default_cache_dir
from .c import CModule, HostC, emit_c
from .kernel import Kernel, build_kernel
from .printer import CFamilyPrinter

__all__ = ["BuildCache", "BuildResult", "build_library", "default_cache_dir", "CModule",
           "HostC", "emit_c", "Kernel", "build_kernel", "CFamilyPrinter"]
