"""The OpenCL host side: a C file with the kernels' source in it, built by gcc against the
ICD loader (``-lOpenCL``) and loaded with cffi, like the C backend's libraries.

Why a generated C host and not pyopencl (docs/gpu.md says more): the same file serves
deployment (it is plain C99 an application links against, with no Python), it needs no
package beyond the OpenCL headers and loader, and it reuses the C backend's build cache,
loader and call checks. The driver compiles the kernels once per process, in
``NAME_prepare`` (PoCL also caches the binaries on disk, so later processes skip most of it).

The device is the first of the target's ``-device`` type (default: the platform's default
device) on the first platform that has one.
"""
from __future__ import annotations

from ..emit_c.c import HostC
from ..emit_c.device import (BUILD_FAILED, DRIVER_FAILED, NO_DEVICE, HostLauncher, c_string,
                             indent)

DEVICE_TYPES = {"default": "CL_DEVICE_TYPE_DEFAULT", "cpu": "CL_DEVICE_TYPE_CPU",
                "gpu": "CL_DEVICE_TYPE_GPU", "all": "CL_DEVICE_TYPE_ALL"}

INCLUDES = ("stdbool.h", "stddef.h", "stdint.h", "stdio.h", "stdlib.h", "string.h", "math.h")

# the driver's state, set up once per process by NAME_prepare
_STATE = """\
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

static cl_context tdsl_ctx;
static cl_command_queue tdsl_queue;
static cl_program tdsl_program;
static cl_kernel tdsl_kernels[{count}];
static int tdsl_ready = 0;

static int tdsl_cl_fail(char* err, int errsz, const char* what, cl_int code) {{
    snprintf(err, (size_t)errsz, "%s failed with OpenCL error %d", what, (int)code);
    return {driver_failed};
}}"""

_PREPARE = """\
int {name}_prepare(char* tdsl_err, int tdsl_errsz) {{
    cl_int e;
    cl_uint nplat = 0;
    cl_platform_id plats[16];
    cl_device_id dev = NULL;
    if (tdsl_ready) return 0;
    tdsl_err[0] = 0;
    e = clGetPlatformIDs(16, plats, &nplat);
    if (e != CL_SUCCESS || nplat == 0) {{
        snprintf(tdsl_err, (size_t)tdsl_errsz, "no OpenCL platform found (error %d): install "
                 "a driver, e.g. apt-get install pocl-opencl-icd", (int)e);
        return {no_device};
    }}
    for (cl_uint p = 0; p < nplat && dev == NULL; ++p)
        if (clGetDeviceIDs(plats[p], {device_type}, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
    if (dev == NULL) {{
        snprintf(tdsl_err, (size_t)tdsl_errsz, "no OpenCL device of type {device} on %u "
                 "platform(s)", (unsigned)nplat);
        return {no_device};
    }}
    tdsl_ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    if (e != CL_SUCCESS) return tdsl_cl_fail(tdsl_err, tdsl_errsz, "clCreateContext", e);
    tdsl_queue = clCreateCommandQueue(tdsl_ctx, dev, 0, &e);
    if (e != CL_SUCCESS) return tdsl_cl_fail(tdsl_err, tdsl_errsz, "clCreateCommandQueue", e);
    const char* src = tdsl_source;
    tdsl_program = clCreateProgramWithSource(tdsl_ctx, 1, &src, NULL, &e);
    if (e != CL_SUCCESS) return tdsl_cl_fail(tdsl_err, tdsl_errsz, "clCreateProgramWithSource", e);
    e = clBuildProgram(tdsl_program, 1, &dev, "-cl-std=CL1.2", NULL, NULL);
    if (e != CL_SUCCESS) {{
        size_t len = 0;
        int n = snprintf(tdsl_err, (size_t)tdsl_errsz, "clBuildProgram failed (%d):\\n", (int)e);
        clGetProgramBuildInfo(tdsl_program, dev, CL_PROGRAM_BUILD_LOG,
                              (size_t)(tdsl_errsz - n - 1), tdsl_err + n, &len);
        return {build_failed};
    }}
{kernels}
    tdsl_ready = 1;
    return 0;
}}"""


class OpenCLHost(HostLauncher):
    device_pointer = "cl_mem"

    def __init__(self, dev, host: HostC, kernel_names, target):
        super().__init__(dev, host, kernel_names)
        self.target = target

    def setup(self) -> list[str]:
        return ["cl_int e = CL_SUCCESS;",
                "tdsl_rc = " + self.name + "_prepare(tdsl_err, tdsl_errsz);",
                "if (tdsl_rc != 0) return tdsl_rc;"]

    def allocate(self, buf, handle, nbytes, host_ptr) -> list[str]:
        # a zero-byte buffer is invalid in OpenCL: allocate one byte, copy nothing
        flags = "CL_MEM_READ_WRITE"
        src = "NULL"
        if host_ptr is not None:
            flags = f"CL_MEM_READ_ONLY | ({nbytes} ? CL_MEM_COPY_HOST_PTR : 0)"
            src = f"{nbytes} ? (void*){host_ptr} : NULL"
        return [f"{handle} = clCreateBuffer(tdsl_ctx, {flags}, {nbytes} ? {nbytes} : 1, "
                f"{src}, &e);",
                *self._check(f"clCreateBuffer({buf.name})")]

    def _check(self, what: str) -> list[str]:
        return [f"if (e != CL_SUCCESS) {{ tdsl_rc = tdsl_cl_fail(tdsl_err, tdsl_errsz, "
                f"\"{what}\", e); goto tdsl_done; }}"]

    def launch(self, k, kernel, args, grid, block) -> list[str]:
        lines = []
        for i, (ctype, value) in enumerate(args):
            size = "sizeof(cl_mem)" if ctype == "mem" else f"sizeof({ctype})"
            lines.append(f"e = clSetKernelArg(tdsl_kernels[{k}], {i}, {size}, &{value});")
            lines += self._check(f"clSetKernelArg({kernel.name}, {i})")
        lines += [f"const size_t local[3] = {{{', '.join(f'(size_t)({b})' for b in block)}}};",
                  "const size_t global[3] = {" + ", ".join(
                      f"(size_t)({g}) * local[{d}]" for d, (g, b) in
                      enumerate(zip(grid, block))) + "};",
                  "if (global[0] && global[1] && global[2]) {",
                  f"    e = clEnqueueNDRangeKernel(tdsl_queue, tdsl_kernels[{k}], 3, NULL, "
                  "global, local, 0, NULL, NULL);",
                  *indent(self._check(f"launching {kernel.name}")), "}"]
        return ["{", *indent(lines), "}"]

    def copy_out(self, buf, handle, nbytes, host_ptr) -> list[str]:
        return [f"if ({nbytes}) {{",
                f"    e = clEnqueueReadBuffer(tdsl_queue, {handle}, CL_TRUE, 0, {nbytes}, "
                f"{host_ptr}, 0, NULL, NULL);",
                *indent(self._check(f"reading {buf.name} back")), "}"]

    def finish(self) -> list[str]:
        return ["e = clFinish(tdsl_queue);", *self._check("clFinish")]

    def release(self, handle) -> list[str]:
        return [f"if ({handle} != NULL) clReleaseMemObject({handle});"]

    def module(self, name: str, device_source: str) -> tuple[str, str]:
        """(C source, the prototypes for ``ffi.cdef``)."""
        self.name = name
        function = self.function(name)
        kernels = [f"    tdsl_kernels[{k}] = clCreateKernel(tdsl_program, \"{n}\", &e);\n"
                   f"    if (e != CL_SUCCESS) return tdsl_cl_fail(tdsl_err, tdsl_errsz, "
                   f"\"clCreateKernel({n})\", e);" for k, n in enumerate(self.kernel_names)]
        device = self.target.option("device", "default")
        parts = [f"/* Generated by tdsl from {self.dev.func.name}: OpenCL host side. */",
                 *[f"#include <{h}>" for h in INCLUDES], "",
                 _STATE.format(count=max(1, len(self.kernel_names)),
                               driver_failed=DRIVER_FAILED), "",
                 f"static const char tdsl_source[] =\n{c_string(device_source)};", "",
                 *[h + "\n" for h in self.host.helpers.render()],
                 _PREPARE.format(name=name, no_device=NO_DEVICE, build_failed=BUILD_FAILED,
                                 device_type=DEVICE_TYPES[device], device=device,
                                 kernels="\n".join(kernels)), "",
                 *function]
        prototypes = f"{self.prototype(name)};\nint {name}_prepare(char* tdsl_err, int tdsl_errsz)"
        return "\n".join(parts) + "\n", prototypes
