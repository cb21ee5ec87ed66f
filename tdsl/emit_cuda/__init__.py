"""The CUDA backend: kernels and an ``extern "C"`` host launcher in one .cu file, built by
nvcc into a shared library and loaded with cffi. Building needs nvcc, not a GPU; calling
without one is a `CallError` that says so.

    kernel = build_cuda(lowered_func, target="cuda -arch=sm_90")   # or op.build(target=...)
"""
from .build import CudaSource, build_cuda, emit_cuda
from .printer import CudaPrinter

__all__ = ["CudaPrinter", "CudaSource", "build_cuda", "emit_cuda"]
