"""Lean calls: a kernel's or a graph module's call on arrays like the last call's, written
out as one Python function for that binding, as `dataclasses` writes its methods.

A call's Python time is what a small kernel pays on top of its own work. The general path
checks each argument in loops, builds lists and calls helpers; written out for one set of
shapes and dtypes, the same checks are a few comparisons each and the arrays go to C with
no loop and no call between them: a tiny kernel's call 2.7 -> 1.5 us, the MLP example's
graph call 3.0-3.5 -> 1.6-1.8 us over its kernels (one thread, AVX-512 host).

The generated function returns None, running nothing, for any argument it does not take
(another type, shape or dtype, a strided or misaligned array): the caller's general path
then checks, copies or refuses it as before.
"""
from __future__ import annotations

import numpy as np


def unpack_and_check(count: int, env: dict, specs) -> list[str]:
    """The lines that take ``count`` arrays from ``arrays`` as ``a0, a1, ...`` and return
    None unless each is a C-contiguous, aligned numpy array of its ``(shape, dtype)`` in
    ``specs``; puts what they name into ``env``."""
    env["ndarray"] = np.ndarray
    lines = [f"    if len(arrays) != {count}:", "        return None"]
    if count:
        lines.append(f"    {', '.join(f'a{k}' for k in range(count))}, = arrays")
    for k, (shape, dtype) in enumerate(specs):
        env[f"shape{k}"], env[f"dtype{k}"] = shape, dtype
        lines += [f"    if type(a{k}) is not ndarray or a{k}.shape != shape{k} or "
                  f"a{k}.dtype != dtype{k}:", "        return None",
                  f"    flags = a{k}.flags",
                  "    if not (flags.c_contiguous and flags.aligned):",
                  "        return None"]
    return lines


def define(header: str, lines: list[str], env: dict):
    """The function ``def <header>:`` with this body, its globals ``env``."""
    exec("\n".join([f"def {header}:", *lines]), env)
    return env[header.split("(")[0]]
