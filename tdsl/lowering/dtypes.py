"""Scalar types of the language and their numpy and C counterparts."""
from __future__ import annotations

import numpy as np

# name -> (numpy dtype, C type)
_TABLE = {
    "f32": (np.float32, "float"),
    "f64": (np.float64, "double"),
    "i8": (np.int8, "int8_t"),
    "i16": (np.int16, "int16_t"),
    "i32": (np.int32, "int32_t"),
    "i64": (np.int64, "int64_t"),
    "u8": (np.uint8, "uint8_t"),
    "u16": (np.uint16, "uint16_t"),
    "u32": (np.uint32, "uint32_t"),
    "u64": (np.uint64, "uint64_t"),
    # IEEE half: a storage type. Values are computed in f32 and rounded to f16 where they
    # are stored (the frontend widens every f16 expression, `frontend.to_te.widen_f16`), so
    # only loads, stores and casts see f16. C: gcc's `_Float16` (x86-64 and aarch64).
    "f16": (np.float16, "_Float16"),
    "bool": (np.bool_, "bool"),
}

DTYPES = tuple(_TABLE)
FLOATS = ("f32", "f64", "f16")
INTS = ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")
UNSIGNED = ("u8", "u16", "u32", "u64")
# Index arithmetic (loop variables, shapes, subscripts) is done in 64-bit signed integers.
INDEX = "i64"


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def is_unsigned(dtype: str) -> bool:
    return dtype in UNSIGNED


def compute_dtype(dtype: str) -> str:
    """The dtype a value of ``dtype`` is computed in: f32 for the storage type f16."""
    return "f32" if dtype == "f16" else dtype


def refuse_f16(func, backend: str) -> None:
    """A `BuildError` when a loop-IR function holds f16 buffers: ``backend`` (OpenCL, CUDA,
    c-embedded) has no half-precision support in tdsl yet (the host C target has, through
    gcc's ``_Float16``)."""
    from ..errors import BuildError
    from .loop_ir import Allocate, walk_stmt
    bufs = [*func.params, *(s.buffer for s in walk_stmt(func.body) if isinstance(s, Allocate))]
    names = [b.name for b in bufs if b.dtype == "f16"]
    if names:
        raise BuildError(f"{func.name}: f16 tensors ({', '.join(names)}) are not supported on "
                         f"{backend}; only the C target stores f16",
                         hint="build for the C target, or cast to f32 before the kernel")


def to_numpy(dtype: str) -> np.dtype:
    return np.dtype(_TABLE[dtype][0])


def to_c(dtype: str) -> str:
    return _TABLE[dtype][1]


def from_numpy(dt) -> str | None:
    dt = np.dtype(dt)
    for name, (np_t, _) in _TABLE.items():
        if np.dtype(np_t) == dt:
            return name
    return None


def canonical_bools(arr: np.ndarray) -> np.ndarray:
    """A bool array whose bytes are all 0 or 1: ``arr`` itself, or a normalised copy.

    numpy lets a bool array hold other bytes (``u8_array.view(bool)``); C's ``bool`` may not
    (a ``select`` on a byte 2 can take either branch), and numpy's own ufuncs disagree about
    them. Every non-zero byte means true, as in numpy's truth test.
    """
    if arr.dtype != np.bool_ or arr.size == 0:
        return arr
    raw = arr.view(np.uint8)
    return arr if raw.max() <= 1 else raw != 0


# ------------------------------------------------------------------ float -> integer casts
# One rule on every target (docs/semantics.md, "Casts"): a float cast to an integer type
# truncates toward zero and saturates to the type's range; NaN gives 0. C leaves the
# conversion undefined outside the range, and the hardware disagrees (x86 gives INT_MIN,
# Arm saturates, RISC-V saturates NaN to INT_MAX), so every backend spells the rule out.

def int_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of an integer type."""
    info = np.iinfo(to_numpy(dtype))
    return int(info.min), int(info.max)


def saturation_top(float_dtype: str, int_dtype: str) -> float:
    """The largest value of ``float_dtype`` not above the integer type's maximum: the upper
    clamp before converting (2**31 - 1 is no f32; 2**31 - 128 is the f32 below 2**31)."""
    hi = int_range(int_dtype)[1]
    f = to_numpy(float_dtype).type
    top = f(hi)
    while int(top) > hi:
        top = np.nextafter(top, f(0))
    return float(top)


def saturating_cast(x, int_dtype: str) -> np.ndarray:
    """numpy floats ``x`` as ``int_dtype`` under the rule above (numpy's own ``astype`` is
    undefined there and gives INT_MIN on x86)."""
    x = np.asarray(x)
    if x.dtype == np.float16:       # exactly, as f16 is computed (f32's rules, its range)
        x = x.astype(np.float32)
    lo, hi = int_range(int_dtype)
    top = saturation_top(from_numpy(x.dtype) or "f64", int_dtype)
    with np.errstate(invalid="ignore"):
        c = np.clip(np.where(np.isnan(x), 0, x), lo, top).astype(to_numpy(int_dtype))
        if top < hi:        # past the last float below the maximum: the maximum itself
            c = np.where(x >= x.dtype.type(hi + 1), to_numpy(int_dtype).type(hi), c)
    return c


def cast_array(x, dtype: str) -> np.ndarray:
    """``x`` (a numpy value) as ``dtype`` with tdsl's cast rules: float to integer saturates
    (`saturating_cast`), everything else is numpy's conversion (integers wrap)."""
    x = np.asarray(x)
    if x.dtype.kind == "f" and is_int(dtype):
        return saturating_cast(x, dtype)
    return x.astype(to_numpy(dtype))
