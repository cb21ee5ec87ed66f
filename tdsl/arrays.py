"""Random input arrays of the right shapes for a function: for property tests, `tdsl run`
and the tuner's measurements (which compare every candidate's output on the same inputs)."""
from __future__ import annotations

import numpy as np

from .errors import TdslError
from .frontend.to_te import ranks_for_pack
from .lowering import sizes as size_binder, te
from .lowering.dtypes import is_float, to_numpy


def input_shapes(fn: te.Function, sizes: dict[str, int]) -> list[tuple[int, ...]] | None:
    try:
        shapes = [tuple(size_binder.value(d, sizes, t.name) for d in t.shape) for t in fn.inputs]
        outs = [tuple(size_binder.value(d, sizes, t.name) for d in t.shape) for t in fn.outputs]
    except TdslError:
        return None
    if any(d < 1 for s in shapes + outs for d in s):
        return None
    return shapes


def random_array(shape, dtype: str, rng: np.random.Generator):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if is_float(dtype):
        return rng.standard_normal(shape).astype(to_numpy(dtype))
    info = np.iinfo(to_numpy(dtype))
    lo, hi = max(info.min, -100), min(info.max, 100)
    return rng.integers(lo, hi + 1, size=shape, dtype=to_numpy(dtype))


def random_inputs(fn: te.Function, sizes: dict[str, int], seed: int = 0) -> list:
    """Random arguments for ``fn`` at ``sizes`` (every shape variable given): arrays, and
    numpy scalars for rank-0 parameters."""
    shapes = input_shapes(fn, sizes)
    if shapes is None:
        raise TdslError(f"sizes {sizes} give an empty or inconsistent shape for {fn.name}")
    rng = np.random.default_rng(seed)
    return [random_array(s, t.dtype, rng) if s else random_array((), t.dtype, rng)[()]
            for s, t in zip(shapes, fn.inputs)]


def random_arguments(op, sizes: dict, attrs: dict, seed: int = 0, rank: int = 2):
    """Inputs for ``op`` with the given sizes (16 for sizes not given)."""
    fn = op.function(ranks_for_pack(op.ast, rank), **attrs)
    return random_inputs(fn, {v.name: sizes.get(v.name, 16) for v in fn.shape_vars}, seed)
