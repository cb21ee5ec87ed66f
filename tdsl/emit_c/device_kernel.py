"""`DeviceKernel`: a GPU kernel library (CUDA or OpenCL) called on numpy arrays.

The library exports the host function of `HostLauncher` and ``NAME_prepare(err, errsz)``,
which readies the device (OpenCL: compiles the kernels with the driver). The call checks and
marshalling are `Kernel`'s, shared with C; what differs is the error channel: the host
function returns a code and writes its message into a buffer, which becomes a `TdslError`
here, so a driver failure is never a crash nor a silent wrong answer.

- a driver that rejects the kernel source: `BuildError` with the build log, at build time;
- no device (no OpenCL platform, no CUDA driver or GPU): `CallError` at call time (the
  library is built and kept: building never needs a device);
- a failed allocation, copy or launch: `CallError` naming the step and the driver's error.
"""
from __future__ import annotations

from ..errors import BuildError, CallError
from .c import CModule
from .device import BUILD_FAILED, NO_DEVICE, OK
from .kernel import Kernel

ERROR_BYTES = 1 << 16        # room for a driver's build log


class DeviceKernel(Kernel):
    """A `Kernel` whose library launches GPU kernels. ``device_source`` is the kernel
    language source (CUDA C++ or OpenCL C); ``source`` what the host compiler built."""

    def __init__(self, func, module: CModule, built, fixed, target, device_source: str,
                 runtime: str):
        super().__init__(func, module, built, fixed, target)
        self.device_source = device_source
        self.runtime = runtime                  # "CUDA" / "OpenCL", for messages
        self._device_error: str | None = None
        self._err = self._ffi.new("char[]", ERROR_BYTES)
        self._name = module.name
        prepare = getattr(self._lib, module.name + "_prepare")
        rc = prepare(self._err, ERROR_BYTES)
        if rc == BUILD_FAILED:
            raise BuildError(f"the {runtime} driver rejected the kernels of {func.name}:\n"
                             f"{self._message()}",
                             hint=f"the generated source is kept: {built.source_path}")
        if rc != OK:
            self._device_error = self._message()

    def _message(self) -> str:
        return self._ffi.string(self._err).decode(errors="replace").strip()

    def device_seconds(self, *arrays, reps: int = 10) -> float:
        """Seconds of one run of the kernels on these arrays, the data already on the
        device (what a GPU library's own timing reports; a call also copies)."""
        run, _ = self.bind(*arrays)
        return run.seconds(reps)

    def _run(self, args: list) -> None:
        name = self.func.name
        if self._device_error is not None:
            raise CallError(f"{name} cannot run: {self._device_error}",
                            hint=f"the {self.runtime} library is built: {self.lib_path}")
        rc = self._fn(*args, self._err, ERROR_BYTES)
        if rc == NO_DEVICE:
            raise CallError(f"{name} cannot run: no {self.runtime} device here "
                            f"({self._message()})",
                            hint=f"the {self.runtime} library is built: {self.lib_path}")
        if rc != OK:
            raise CallError(f"{name} failed on the {self.runtime} device: {self._message()}")

    def _runner(self, args: list):
        run = super()._runner(args)
        name, err = self.func.name, self._err
        timed = getattr(self._lib, self._name + "_time")

        def seconds(reps: int) -> float:
            if self._device_error is not None:
                raise CallError(f"{name} cannot run: {self._device_error}")
            out = self._ffi.new("double*")
            rc = timed(*args, int(reps), out, err, ERROR_BYTES)
            if rc != OK:
                raise CallError(f"{name} failed on the {self.runtime} device: "
                                f"{self._message()}")
            return float(out[0])
        run.seconds = seconds
        return run
