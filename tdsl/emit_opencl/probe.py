"""Whether OpenCL kernels can run here: an ICD loader with at least one platform."""
from __future__ import annotations

import functools

from cffi import FFI


@functools.cache
def unavailable_reason() -> str | None:
    """None when an OpenCL platform is installed, else why not (for skips and messages)."""
    ffi = FFI()
    ffi.cdef("int clGetPlatformIDs(unsigned int, void**, unsigned int*);")
    try:
        lib = ffi.dlopen("libOpenCL.so.1")
    except OSError:
        return "no OpenCL ICD loader (apt-get install ocl-icd-libopencl1 pocl-opencl-icd)"
    count = ffi.new("unsigned int*")
    rc = lib.clGetPlatformIDs(0, ffi.NULL, count)
    if rc != 0 or count[0] == 0:
        return "no OpenCL platform (apt-get install pocl-opencl-icd, or a GPU driver)"
    return None
