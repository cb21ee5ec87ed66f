"""`ShapeSpecializingKernel`: a kernel built without shapes that compiles itself for the
shapes a program keeps calling it at.

The generic kernel (sizes read from the arguments) is loop-partitioned and within a small
factor of one built for fixed sizes; a kernel built for the sizes still wins where they let
gcc fold the tails away and the index arithmetic into constants. As a tiered jit does, the
first call at a shape runs the generic kernel (no compile on the way), and the second call
at the same shape builds the kernel specialised to it and keeps it: a shape seen twice is a
shape the program runs in a loop. Past `MAX_SHAPES` specialisations (a kernel fed ever new
sizes) the generic kernel serves the rest. ``bind`` (for timing loops) specialises at once.
"""
from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

from .emit_c import kernel as _kernel
from .errors import TdslError

MAX_SHAPES = 8
CALLS_BEFORE_SPECIALISING = 1


class ShapeSpecializingKernel:
    """Callable like a `Kernel`, whose attributes (``source``, ``func``, ``lib_path``, ...)
    are the generic kernel's. ``kernels`` holds the specialisations built so far, by the
    inputs' shapes."""

    def __init__(self, generic, build: Callable[[dict[str, int]], object],
                 sizes_of: Callable[..., dict[str, int]]):
        self.generic = generic
        self._build = build
        self._sizes_of = sizes_of
        self._calls: dict[tuple, int] = {}
        self.kernels: dict[tuple, object] = {}

    def __call__(self, *arrays, out=None):
        if type(arrays[0] if arrays else None) is _kernel._TENSOR:   # viewed once, here
            return _kernel._foreign_call(self, arrays, out, self.generic._input_names)
        key = _key(arrays)
        kernel = self.kernels.get(key)
        if kernel is not None:
            return kernel(*arrays, out=out)
        result = self.generic(*arrays, out=out)      # checks the call: a bad one raises here
        seen = self._calls.get(key, 0) + 1
        if seen > CALLS_BEFORE_SPECIALISING and len(self.kernels) < MAX_SHAPES:
            self._specialise(key, arrays)
        elif len(self._calls) < 4 * MAX_SHAPES:
            self._calls[key] = seen
        return result

    def bind(self, *arrays, out=None):
        key = _key(arrays)
        if key not in self.kernels and len(self.kernels) < MAX_SHAPES:
            self.generic.bind(*arrays, out=out)      # the call's checks, before a build
            self._specialise(key, arrays)
        return self.kernels.get(key, self.generic).bind(*arrays, out=out)

    def _specialise(self, key: tuple, arrays) -> None:
        try:
            self.kernels[key] = self._build(self._sizes_of(*arrays))
        except TdslError as e:
            # a schedule that the fixed sizes make illegal (a knob default, a require):
            # the generic kernel, which this call already ran, serves the shape
            warnings.warn(f"{self.generic.func.name} at shapes {key}: not specialised, "
                          f"the generic kernel serves them ({e.message})", stacklevel=3)
            self.kernels[key] = self.generic
        self._calls.pop(key, None)

    def __getattr__(self, name):
        # only reached for what this class does not define: the generic kernel's attributes
        if name in ("generic", "_build", "_sizes_of", "_calls", "kernels"):
            raise AttributeError(name)
        return getattr(self.generic, name)

    def __repr__(self) -> str:
        built = ", ".join(map(str, self.kernels)) or "none yet"
        return f"ShapeSpecializingKernel({self.generic.func.name}, specialised: {built})"


def _key(arrays) -> tuple:
    # ``a.shape`` where there is one, as np.shape reads it, but without np.shape's cost
    # (0.4 us on an ndarray, 1.3 us on a PyTorch tensor)
    return tuple([a.shape if hasattr(a, "shape") else np.shape(a) for a in arrays])
