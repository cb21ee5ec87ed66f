"""`OpenCLPrinter`: one kernel as OpenCL C 1.2, a `DeviceKernelPrinter` with OpenCL's
spellings: ``__kernel``, ``__global`` pointers, work-group and local ids, ``barrier``,
``__local`` arrays, and the overloaded math functions (``exp``, not ``expf``).

OpenCL C has no <stdint.h>; `PRELUDE` defines the fixed-width names the shared printer and
its helpers use, and maps the C99 ``f``-suffixed math functions the helpers call onto
OpenCL's overloads.
"""
from __future__ import annotations

from ..emit_c.device import DeviceKernelPrinter
from ..emit_c.names import C_KEYWORDS, LIBRARY_NAMES

PRELUDE = """\
typedef char int8_t;
typedef uchar uint8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef ulong uint64_t;
#define INT64_MIN LONG_MIN
#define INT64_C(x) x##L
#define fmodf fmod
#define copysignf copysign
#define floorf floor
#define expf exp"""

FP64 = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"

# OpenCL C words a buffer or loop may not be called (address spaces, built-in functions the
# kernels call, vector type names are not needed: names carry no digits-only suffix clash)
OPENCL_RESERVED = frozenset("""
    kernel __kernel global __global local __local constant __constant private __private
    read_only write_only read_write half uchar ushort uint ulong get_global_id get_local_id
    get_group_id get_local_size barrier CLK_LOCAL_MEM_FENCE CLK_GLOBAL_MEM_FENCE image2d_t
    sampler_t event_t mad clamp mix sign select as_float as_int
""".split())


class OpenCLPrinter(DeviceKernelPrinter):
    language = "OpenCL C"
    reserved = C_KEYWORDS | LIBRARY_NAMES | OPENCL_RESERVED
    function_qualifier = "__kernel"
    pointer_space = "__global "
    shared_qualifier = "__local"
    native_math = True
    thread_index = {"blockIdx.x": "get_group_id(0)", "blockIdx.y": "get_group_id(1)",
                    "blockIdx.z": "get_group_id(2)", "threadIdx.x": "get_local_id(0)",
                    "threadIdx.y": "get_local_id(1)", "threadIdx.z": "get_local_id(2)"}
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"

    def math_function(self, name: str, dtype: str) -> str:
        """OpenCL's math functions are overloaded on float and double: no suffix."""
        return {"abs": "fabs", "round": "rint"}.get(name, name)
