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

# Floats narrower than f16, storage types as f16 is: computed in f32, rounded to nearest
# even where they are stored. C holds their bits (`emit_c.helpers` decodes and encodes
# them); numpy holds them as ml_dtypes' types, which ONNX uses too.
# name -> (ml_dtypes name, C type of the bits, exponent bits, mantissa bits, kind), where
# kind says what the codes at the top of the range mean:
#   ieee    infinities and NaNs as IEEE 754 (bf16, f8e5m2); overflow gives infinity
#   fn      no infinities, the all-ones code is NaN (f8e4m3fn); overflow gives NaN
#   fnuz    no infinities and no -0, the -0 code is the one NaN; overflow gives NaN
#   finite  no infinities or NaNs (f4e2m1); overflow saturates and a NaN gives a zero of
#           the other sign, as ml_dtypes converts
MINIFLOATS = {
    "bf16": ("bfloat16", "uint16_t", 8, 7, "ieee"),
    "f8e4m3fn": ("float8_e4m3fn", "uint8_t", 4, 3, "fn"),
    "f8e4m3fnuz": ("float8_e4m3fnuz", "uint8_t", 4, 3, "fnuz"),
    "f8e5m2": ("float8_e5m2", "uint8_t", 5, 2, "ieee"),
    "f8e5m2fnuz": ("float8_e5m2fnuz", "uint8_t", 5, 2, "fnuz"),
    "f4e2m1": ("float4_e2m1fn", "uint8_t", 2, 1, "finite"),
}
_TABLE.update({name: (None, ctype) for name, (_, ctype, *_f) in MINIFLOATS.items()})

DTYPES = tuple(_TABLE)
STORAGE_FLOATS = ("f16", *MINIFLOATS)
FLOATS = ("f32", "f64", *STORAGE_FLOATS)
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
    """The dtype a value of ``dtype`` is computed in: f32 for the storage floats."""
    return "f32" if dtype in STORAGE_FLOATS else dtype


def minifloat_format(dtype: str) -> dict:
    """The numbers of a `MINIFLOATS` type: its bit fields, exponent bias, smallest normal
    exponent, largest finite value and the codes of its sign, NaN and overflow."""
    _, ctype, ebits, mbits, kind = MINIFLOATS[dtype]
    bits = 1 + ebits + mbits
    sign = 1 << (bits - 1)
    bias = (1 << (ebits - 1)) - (0 if kind == "fnuz" else 1)
    top_exponent = (1 << ebits) - (2 if kind == "ieee" else 1) - bias
    top_mantissa = 2 - 2.0 ** (1 - mbits if kind == "fn" else -mbits)
    ones = sign - 1                                      # every bit but the sign
    infinity = ((1 << ebits) - 1) << mbits
    nan = {"ieee": infinity | (1 << (mbits - 1)), "fn": ones, "fnuz": sign,
           "finite": sign}[kind]
    largest = (infinity - 1 if kind == "ieee" else ones - (kind == "fn"))
    overflow = {"ieee": infinity, "fn": nan, "fnuz": nan, "finite": largest}[kind]
    return dict(ctype=ctype, ebits=ebits, mbits=mbits, kind=kind, bias=bias,
                emin=1 - bias, max=top_mantissa * 2.0 ** top_exponent, sign=sign,
                nan=nan, overflow=overflow, signed_zero=kind != "fnuz")


def refuse_storage_floats(func, backend: str) -> None:
    """A `BuildError` when a loop-IR function holds buffers of a storage float:
    ``backend`` (OpenCL, CUDA, c-embedded) has no support for them in tdsl yet (the host C
    target has, through gcc's ``_Float16`` and `emit_c.helpers`' minifloat codecs)."""
    from ..errors import BuildError
    from .loop_ir import Allocate, walk_stmt
    bufs = [*func.params, *(s.buffer for s in walk_stmt(func.body) if isinstance(s, Allocate))]
    names = [f"{b.name}: {b.dtype}" for b in bufs if b.dtype in STORAGE_FLOATS]
    if names:
        raise BuildError(f"{func.name}: tensors of {', '.join(names)} are not supported on "
                         f"{backend}; only the C target stores f16, bf16 and the 8- and 4-bit "
                         f"floats", hint="build for the C target, or cast to f32 before the "
                         "kernel")


def to_numpy(dtype: str) -> np.dtype:
    if dtype in MINIFLOATS:
        return _ml_dtype(dtype)
    return np.dtype(_TABLE[dtype][0])


def _ml_dtype(dtype: str) -> np.dtype:
    try:
        import ml_dtypes
    except ImportError:
        from ..errors import TdslError
        raise TdslError(f"numpy arrays of {dtype} need the ml_dtypes package",
                        hint="pip install ml_dtypes (onnx brings it)") from None
    return np.dtype(getattr(ml_dtypes, MINIFLOATS[dtype][0]))


def to_c(dtype: str) -> str:
    return _TABLE[dtype][1]


def from_numpy(dt) -> str | None:
    dt = np.dtype(dt)
    for name, (np_t, _) in _TABLE.items():
        if np_t is not None and np.dtype(np_t) == dt:
            return name
    if dt.isbuiltin == 2:          # a user-defined dtype: ml_dtypes' are named as MINIFLOATS
        for name, (ml_name, *_rest) in MINIFLOATS.items():
            if dt.type.__name__ == ml_name:
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
    if from_numpy(x.dtype) in STORAGE_FLOATS:   # exactly, as they are computed (f32's rules)
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
    if is_float(from_numpy(x.dtype) or "") and is_int(dtype):
        return saturating_cast(x, dtype)
    return x.astype(to_numpy(dtype))
