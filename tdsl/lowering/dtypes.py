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
    "bool": (np.bool_, "bool"),
}

DTYPES = tuple(_TABLE)
FLOATS = ("f32", "f64")
INTS = ("i8", "i16", "i32", "i64", "u8")
# Index arithmetic (loop variables, shapes, subscripts) is done in 64-bit signed integers.
INDEX = "i64"


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


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
