"""The OpenCL backend: kernels in OpenCL C 1.2 and a C host side, built by gcc, loaded
with cffi, run on any OpenCL driver (PoCL on a CPU, a GPU vendor's ICD).

    kernel = build_opencl(lowered_func, target="opencl")   # or op.build(target="opencl")
    C = kernel(A, B)
"""
from .build import OpenCLSource, build_opencl, emit_opencl
from .printer import OpenCLPrinter
from .probe import unavailable_reason

__all__ = ["OpenCLPrinter", "OpenCLSource", "build_opencl", "emit_opencl", "unavailable_reason"]
