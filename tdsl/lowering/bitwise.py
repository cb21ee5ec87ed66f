"""The bitwise intrinsics' meaning on numpy values (the reference and the interpreter):
``bitand bitor bitxor bitnot`` on two's-complement integers, and the shifts ``shl(x, n)`` and
``shr(x, n)`` defined for every ``n``: a shift by less than 0 or by the width or more gives 0
(``shl``, and ``shr`` of a non-negative value) or -1 (``shr`` of a negative one), and ``shl``
wraps (its bits past the width are dropped, also into the sign bit)."""
from __future__ import annotations

import numpy as np


def _in_range(x: np.ndarray, n):
    n = np.asarray(n)
    ok = (n >= 0) & (n < x.dtype.itemsize * 8)
    return ok, np.where(ok, n, 0)


def shl(x, n) -> np.ndarray:
    x = np.asarray(x)
    ok, s = _in_range(x, n)
    u = np.dtype(f"u{x.dtype.itemsize}")
    r = np.left_shift(x.astype(u), s.astype(u)).astype(x.dtype)
    return np.where(ok, r, 0).astype(x.dtype)


def shr(x, n) -> np.ndarray:
    x = np.asarray(x)
    ok, s = _in_range(x, n)
    r = np.right_shift(x, s.astype(x.dtype))
    past = np.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else \
        np.zeros_like(x)       # not through int64 and -1: u64 would mix into float64
    return np.where(ok, r, past).astype(x.dtype)


FUNCTIONS = {"bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor,
             "bitnot": np.invert, "shl": shl, "shr": shr}
