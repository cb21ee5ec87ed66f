"""Whether CUDA kernels can run here: the driver library and at least one GPU."""
from __future__ import annotations

import functools

from cffi import FFI


@functools.cache
def unavailable_reason() -> str | None:
    """None when an NVIDIA driver with a GPU is present, else why not."""
    ffi = FFI()
    ffi.cdef("int cuInit(unsigned int); int cuDeviceGetCount(int*);")
    try:
        lib = ffi.dlopen("libcuda.so.1")
    except OSError:
        return "no CUDA device: no NVIDIA driver (libcuda.so.1) on this machine"
    count = ffi.new("int*")
    rc = lib.cuInit(0)
    if rc != 0 or lib.cuDeviceGetCount(count) != 0 or count[0] == 0:
        return f"no CUDA device: the NVIDIA driver finds no GPU (cuInit returned {rc})"
    return None
