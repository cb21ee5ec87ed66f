"""What the GPU languages share: a kernel printer base and the host launcher's skeleton.

`DeviceKernelPrinter` is the `CFamilyPrinter` of one kernel (`tdsl.lowering.device.Kernel`):
it returns nothing, binds thread loops to the language's indices without a guard where
the launch is exactly the loop's size, declares shared buffers once at the top of the
kernel (OpenCL requires ``__local`` arrays at kernel scope), and has no heap. CUDA and
OpenCL set the spellings (`tdsl.emit_cuda`, `tdsl.emit_opencl`).

`HostLauncher` prints the host function a kernel library exports, the same for both:

    int NAME(inputs..., outputs..., sizes..., char* err, int errsz)

allocates a device buffer per parameter and workspace, copies the inputs in, launches the
kernels in order (grid and block sizes computed from the sizes), copies the outputs out and
frees everything; it returns 0, or a `LAUNCH_ERRORS` code with a message in ``err``. A
subclass spells each step in its API.
"""
from __future__ import annotations

import dataclasses
import functools

from ..errors import BuildError
from ..lowering import te
from ..lowering.device import DeviceFunc, Kernel
from ..lowering.dtypes import to_c
from ..lowering.te_printer import format_expr
from ..lowering.loop_ir import Barrier, Buffer, ForKind, walk_stmt
from .c import HostC
from .lanes import mul
from .expressions import POSTFIX
from .printer import CFamilyPrinter, indent

# host function return codes (the Python side turns them into errors)
OK, BUILD_FAILED, DRIVER_FAILED, NO_DEVICE = 0, 1, 2, 3


class DeviceKernelPrinter(CFamilyPrinter):
    """One GPU kernel: ``func.attrs["launch"]`` is its launch (thread tag -> extent)."""
    return_type = "void"
    shared_qualifier = ""
    stack_limit_bytes = 4 * 1024      # per thread: a larger local array belongs in shared

    def __init__(self, func, shapes=None, target=None):
        super().__init__(func, shapes, target)
        self.launch = func.attrs.get("launch", {})

    def vector_type(self, dtype: str) -> str | None:
        return None          # vector statements print lane by lane: a thread is scalar

    def loop_pragmas(self, kind: ForKind, extent: te.Expr) -> list[str]:
        if kind is ForKind.UNROLLED and isinstance(extent, te.Const) and \
                0 < extent.value <= 64:
            return [f"#pragma unroll {extent.value}"]
        return []

    def bind_thread(self, s) -> list[str]:
        """A virtual thread is a loop in each thread (latency hiding by interleaving is the
        compiler's, from the unrolled copies): printed as a serial loop."""
        if s.thread_tag == "vthread":
            return self.visit_For(dataclasses.replace(s, kind=ForKind.SERIAL, thread_tag=None))
        return super().bind_thread(s)

    def visit_Intrinsic(self, e: te.Intrinsic):
        if e.name == "shuffle_down":       # from passes.thread_reduce, on targets that have it
            value, offset = (self.expr(a) for a in e.args)
            return self.shuffle_down(value, offset), POSTFIX
        return super().visit_Intrinsic(e)

    def shuffle_down(self, value: str, offset: str) -> str:
        """The value of ``value`` in the lane ``offset`` above this one, within a warp."""
        raise BuildError(f"the {self.language} backend has no warp shuffles",
                         hint="lower for this target: its cross-thread reductions then use "
                              "shared memory only")

    def thread_guard_needed(self, loop) -> bool:
        end = te.Binary("+", loop.min, loop.extent, loop.min.dtype)
        launched = self.launch.get(loop.thread_tag)
        if launched is None:
            return True
        if any(isinstance(s, Barrier) for s in walk_stmt(loop.body)) and \
                not _same(end, launched):
            raise BuildError(f"loop {loop.var.name} bound to {loop.thread_tag} covers fewer "
                             f"threads than the kernel launches, and a barrier inside it "
                             f"would not be reached by the others",
                             hint="bind the loops around a shared-memory stage with the "
                                  "same thread counts")
        return not _same(end, launched)

    def declare_allocation(self, buf: Buffer, name: str, count: te.Expr,
                           body: list[str]) -> list[str]:
        if buf.scope != "shared":
            return super().declare_allocation(buf, name, count, body)
        if not isinstance(count, te.Const):
            raise BuildError(f"shared buffer {buf.name} has {format_expr(count)} elements, "
                             f"not a compile-time constant",
                             hint="fix the tile sizes (split factors) of the stage computed "
                                  "in shared memory, or the op's sizes (shapes=...)")
        self.hoisted.append(f"{self.shared_qualifier} {self.element_type(buf.dtype)} "
                            f"{name}[{max(1, count.value)}];")
        return body


def _same(a: te.Expr, b: te.Expr) -> bool:
    from ..lowering.arith.simplify import simplify
    return simplify(a) == simplify(b)


def shared_bytes(kernel: Kernel) -> int:
    """Bytes of shared memory ``kernel`` declares (constant sizes)."""
    from ..lowering.loop_ir import Allocate
    from .helpers import element_size
    total = 0
    for s in walk_stmt(kernel.body):
        if isinstance(s, Allocate) and s.buffer.scope == "shared":
            count = functools.reduce(mul, s.buffer.shape, te.Const(1, "i64"))
            if isinstance(count, te.Const):
                total += count.value * element_size(s.buffer.dtype.split("x")[0])
    return total


def check_limits(dev: DeviceFunc, target) -> None:
    """Refuse kernels the target cannot launch: too many threads in a block, too much
    shared memory."""
    for k in dev.kernels:
        threads = 1
        for e in k.block():
            threads = threads * e.value if isinstance(e, te.Const) and threads else 0
        if threads > target.max_threads:
            raise BuildError(f"kernel {k.name} launches blocks of {threads} threads; target "
                             f"'{target}' allows {target.max_threads}",
                             hint="split the threadIdx loops by smaller factors")
        used = shared_bytes(k)
        if used > target.shared_bytes:
            raise BuildError(f"kernel {k.name} uses {used} bytes of shared memory; target "
                             f"'{target}' has {target.shared_bytes} per block",
                             hint="make the tiles computed in shared memory smaller")


class HostLauncher:
    """The host function of a kernel library (see the module docstring). ``host`` is a
    `HostC`-family printer of the whole function: it names the parameters and sizes and
    prints size expressions."""
    device_pointer = "void*"          # the type of a device buffer handle (`declare`)

    def __init__(self, dev: DeviceFunc, host: HostC, kernel_names: list[str]):
        self.dev, self.host = dev, host
        self.kernel_names = kernel_names
        func = dev.func
        # every array, and rank-0 outputs and workspaces (scalar inputs go by value)
        self.buffers = [b for k, b in enumerate(func.params) if b.shape or k >= func.num_inputs]
        self.buffers += dev.workspaces
        self.handles = {id(b): self.host.namer.fresh(f"d_{b.name}") for b in self.buffers}
        self.counts = {id(b): self.host.namer.fresh(f"n_{b.name}") for b in self.buffers}

    # ------------------------------------------------------------ hooks (per API)
    def declare(self, buf: Buffer, handle: str) -> str:
        return f"{self.device_pointer} {handle} = NULL;"

    def setup(self) -> list[str]:
        return []

    def allocate(self, buf: Buffer, handle: str, nbytes: str, host_ptr: str | None) -> list[str]:
        raise NotImplementedError

    def copy_out(self, buf: Buffer, handle: str, nbytes: str, host_ptr: str) -> list[str]:
        raise NotImplementedError

    def launch(self, k: int, kernel: Kernel, args: list[tuple[str, str]], grid: list[str],
               block: list[str]) -> list[str]:
        """``args``: (C type, value) of each kernel argument in order."""
        raise NotImplementedError

    def finish(self) -> list[str]:
        return []

    def release(self, handle: str) -> list[str]:
        raise NotImplementedError

    # ------------------------------------------------------------ the function
    def prototype(self, name: str, timed: bool = False) -> str:
        """``timed``: the ``NAME_time`` variant, which runs the kernels ``tdsl_reps`` more
        times after a warm-up, the data staying on the device, and stores the seconds of
        one run (kernels only, no copies) in ``*tdsl_seconds``."""
        proto = self.host.prototype()
        head, _, params = proto.partition("(")
        params = params.rstrip(")")
        params = "" if params == "void" else params + ", "
        if timed:
            return (f"int {name}_time({params}int tdsl_reps, double* tdsl_seconds, "
                    f"char* tdsl_err, int tdsl_errsz)")
        return f"int {name}({params}char* tdsl_err, int tdsl_errsz)"

    def sync(self) -> list[str]:
        """Wait for the launched kernels (before reading a clock)."""
        return []

    def function(self, name: str, timed: bool = False) -> list[str]:
        h = self.host
        func = self.dev.func
        body = [f"const int64_t {h.namer.lookup(v)} = {n};" for v, n in h.fixed.items()]
        body += ["int tdsl_rc = 0;"]
        if timed:
            body += ["double tdsl_t0 = 0;"]
        for b in self.buffers:
            count = functools.reduce(mul, b.shape, te.Const(1, "i64"))
            body.append(f"const size_t {self.counts[id(b)]} = (size_t)({h.expr(count)}) * "
                        f"sizeof({to_c(b.dtype)});")
        body += [self.declare(b, self.handles[id(b)]) for b in self.buffers]
        body += self.setup()
        inputs = {id(b) for b in func.params[:func.num_inputs]}
        for b in self.buffers:
            host_ptr = h.namer.lookup(b) if id(b) in inputs else None
            body += self.allocate(b, self.handles[id(b)], self.counts[id(b)], host_ptr)
        launches = []
        for k, kernel in enumerate(self.dev.kernels):
            args = []
            kfunc = kernel.as_function(func)
            for buf in kfunc.params:
                if id(buf) in self.handles:
                    args.append(("mem", self.handles[id(buf)]))
                else:
                    args.append((to_c(buf.dtype), h.namer.lookup(buf)))
            args += [("int64_t", h.namer.lookup(v)) for v in func.shape_vars
                     if v not in h.fixed]
            grid = [h.expr(e) for e in kernel.grid()]
            block = [h.expr(e) for e in kernel.block()]
            launches += self.launch(k, kernel, args, grid, block)
        body += launches
        if timed:
            body += [*self.sync(), "tdsl_t0 = tdsl_now();",
                     "for (int tdsl_r = 0; tdsl_r < tdsl_reps; ++tdsl_r) {",
                     *indent(launches), "}", *self.sync(),
                     "*tdsl_seconds = (tdsl_now() - tdsl_t0) / (tdsl_reps > 0 ? tdsl_reps : 1);"]
        for b in func.params[func.num_inputs:]:
            body += self.copy_out(b, self.handles[id(b)], self.counts[id(b)],
                                  h.namer.lookup(b))
        body += self.finish()
        body += ["tdsl_done:"]
        for b in self.buffers:
            body += self.release(self.handles[id(b)])
        body += ["return tdsl_rc;"]
        return [f"{self.prototype(name, timed)} {{", *indent(body), "}"]


# a monotonic clock for the timed entry (host code of both languages)
NOW = """\
#include <time.h>
static double tdsl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}"""


def device_header(name: str, func_name: str, prototypes: str, runtime: str) -> str:
    """The C header of a kernel library: its host functions (see `HostLauncher`)."""
    guard = f"TDSL_{name.upper()}_H"
    return "\n".join([
        f"/* Generated by tdsl from {func_name}: {runtime} kernels behind C host functions.",
        f"   {name}(...) returns 0, or an error code with its message in err;",
        f"   {name}_time(...) reruns the kernels with the data on the device. */",
        f"#ifndef {guard}", f"#define {guard}", "#include <stdint.h>", "",
        *[p.strip() + ";" for p in prototypes.split(";") if p.strip()], "",
        f"#endif  /* {guard} */", ""])


def c_string(text: str) -> str:
    """``text`` as a C string literal, one source line per line."""
    out = []
    for line in text.splitlines():
        line = line.replace("\\", "\\\\").replace('"', '\\"')
        out.append(f'"{line}\\n"')
    return "\n".join(out) or '""'
