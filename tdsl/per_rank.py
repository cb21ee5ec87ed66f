"""`PerRankKernel`: a rank-generic op (``relu(X: f32[*S])``) built without naming the rank.

As jit compilers do, the kernel is specialised on first call to the ranks of its arguments
and kept: a call at ranks seen before costs a dictionary lookup more than a plain `Kernel`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .emit_c import kernel as _kernel
from .errors import CallError


class PerRankKernel:
    """Callable like a `Kernel`; ``kernels`` holds the specialisations built so far, by the
    arguments' ranks."""

    def __init__(self, name: str, params: list[str], build: Callable[[list[int]], object]):
        self.name = name
        self._params = params
        self._build = build
        self.kernels: dict[tuple[int, ...], object] = {}

    def __call__(self, *arrays, out=None):
        if type(arrays[0] if arrays else None) is _kernel._TENSOR:   # viewed once, here
            return _kernel._foreign_call(self, arrays, out, self._params)
        return self.specialised(arrays)(*arrays, out=out)

    def bind(self, *arrays, out=None):
        return self.specialised(arrays).bind(*arrays, out=out)

    def specialised(self, arrays):
        """The kernel for the ranks of ``arrays``, built on first use."""
        if len(arrays) != len(self._params):
            raise CallError(f"{self.name} takes {len(self._params)} argument(s) "
                            f"({', '.join(self._params)}), got {len(arrays)}")
        # ``a.ndim`` where there is one (np.ndim costs 1.3 us on a PyTorch tensor)
        ranks = tuple([a.ndim if type(getattr(a, "ndim", None)) is int else int(np.ndim(a))
                       for a in arrays])
        if ranks not in self.kernels:
            self.kernels[ranks] = self._build(list(ranks))
        return self.kernels[ranks]

    def __repr__(self) -> str:
        built = ", ".join(map(str, self.kernels)) or "none yet"
        return f"PerRankKernel({self.name}, ranks built: {built})"
