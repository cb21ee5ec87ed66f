"""`CudaPrinter`: one kernel as CUDA C++, a `DeviceKernelPrinter` with CUDA's spellings:
``extern "C" __global__``, ``blockIdx``/``threadIdx``, ``__syncthreads()``, ``__shared__``
arrays, ``__restrict__``, the C99 math names (``expf``), which CUDA's device library has, and
``__shfl_down_sync`` for the warp steps of cross-thread reductions.
"""
from __future__ import annotations

from ..emit_c.device import DeviceKernelPrinter
from ..emit_c.names import C_KEYWORDS, LIBRARY_NAMES

# C++ keywords and CUDA built-ins a buffer or loop may not be called
CUDA_RESERVED = frozenset("""
    alignas alignof and and_eq bitand bitor catch char16_t char32_t class compl constexpr
    const_cast decltype delete dynamic_cast explicit export friend mutable namespace new
    noexcept not not_eq nullptr operator or or_eq private protected public reinterpret_cast
    static_assert static_cast template this thread_local throw try typeid typename using
    virtual wchar_t xor xor_eq threadIdx blockIdx blockDim gridDim warpSize dim3
    __syncthreads __shared__ __global__ __device__ __host__ __restrict__
""".split())

# helpers run on the device and, for size arithmetic, in the host launcher of the same file
HELPER_QUALIFIER = "__host__ __device__ inline"   # not static: nvcc warns of unused statics


class CudaPrinter(DeviceKernelPrinter):
    language = "CUDA"
    reserved = C_KEYWORDS | LIBRARY_NAMES | CUDA_RESERVED
    helper_qualifier = HELPER_QUALIFIER
    function_qualifier = 'extern "C" __global__'
    restrict = "__restrict__"
    shared_qualifier = "__shared__"
    native_math = True
    thread_index = {"blockIdx.x": "blockIdx.x", "blockIdx.y": "blockIdx.y",
                    "blockIdx.z": "blockIdx.z", "threadIdx.x": "threadIdx.x",
                    "threadIdx.y": "threadIdx.y", "threadIdx.z": "threadIdx.z"}
    barrier = "__syncthreads();"

    def shuffle_down(self, value: str, offset: str) -> str:
        return f"__shfl_down_sync(0xffffffffu, {value}, {offset})"
