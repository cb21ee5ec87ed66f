"""The one size binder: the sizes of a call, from its arguments' shapes.

The reference, the loop-IR interpreter, compiled kernels, `tdsl.testing` and the tuner all
bind and evaluate sizes here, so they accept the same calls and refuse the others with the
same words (three binders that disagreed made ``Y: f32[N - K + 1]`` work in one and fail in
the others).

- `bind` reads the sizes off the arguments' shapes: a dimension that is a plain size (``M``)
  binds it (the first argument to mention it wins, the rest must agree); a dimension that is
  an expression is checked once its sizes are bound, or, when exactly one of them is unbound
  and the expression is affine in it (``H + 2``, ``2 * N``), solves for it.
- `value` evaluates a shape expression exactly (``//`` and ``%`` floor, as in the IR): an
  unbound size, a division by zero or a negative size is a `CallError`.
- `check_allocation` refuses, before anything is allocated, an array larger than this process
  could ever hold (numpy would raise a raw MemoryError, or the system would start swapping);
  `empty` and `contiguous` allocate through it, and word a failed allocation the same way.
"""
from __future__ import annotations

import functools
import numbers
import os
from typing import Mapping, Sequence

import numpy as np

from ..errors import CallError
from . import te
from .dtypes import to_numpy
from .arith.evaluate import NotAnIndex, UnboundVar, eval_index
from .arith.linear import exact


def argument(name: str, position: int) -> str:
    """How messages name an argument: ``argument 'B' (2nd)``."""
    n = position + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"argument '{name}' ({n}{suffix})"


def value(e: te.Expr, env: Mapping[str, int], what: str) -> int:
    """A size as the algorithm writes it: its value, or a CallError if a size is unbound, it
    divides by zero, it divides a negative quantity (a window that does not fit) or it is
    negative. ``what`` names the dimension for the message.

    The window check reads the written form: the checker's normal form
    (`arith.linear.normal_form`) keeps a constant inside a floor division, so in
    ``(IH - 3 * KH + 2) // 2 + 1`` the numerator is the room the window has. A form the
    lowering passes rewrote is equal but says nothing of windows (the simplifier takes the
    constant out: ``(IH - 3 * KH) // 2 + 2``, whose numerator is -2 on the valid call
    IH = 7, KH = 3): evaluate those with `extent`, after checking the written shapes
    (`check_shapes` of `stage_shapes`)."""
    v = _evaluate(e, env, what)
    for x in te.walk(e):
        # a window that does not fit: (IH - kernel) // stride + 1 with IH < kernel is 0 or
        # less only by the accident of floor division; a size divides no negative quantity
        # (the checker keeps `// 1` in sizes for this: `arith.linear.normal_form`)
        if isinstance(x, te.Binary) and x.op in ("//", "%") and eval_index(x.a, env) < 0:
            raise CallError(f"{what}: in the size {e}, {x.a} is {eval_index(x.a, env)} "
                            f"(negative) with {_show_env(e, env)}: is an input smaller "
                            "than a window or kernel?")
    return _not_negative(v, e, env, what)


def extent(e: te.Expr, env: Mapping[str, int], what: str) -> int:
    """A size in any form equal to the written one (a lowered buffer's shape): its value, or
    a CallError if a size is unbound, it divides by zero or it is negative. No window check
    (see `value`)."""
    return _not_negative(_evaluate(e, env, what), e, env, what)


def _evaluate(e: te.Expr, env: Mapping[str, int], what: str) -> int:
    try:
        v = eval_index(e, env)
    except UnboundVar as u:
        raise CallError(f"{what}: shape variable '{u.name}' in {e} is not determined by the "
                        "arguments' shapes", hint=f"give it by name: {{'{u.name}': ...}}") from None
    except ZeroDivisionError:
        raise CallError(f"{what}: {e} divides by zero with {_show_env(e, env)}") from None
    except NotAnIndex:
        raise CallError(f"{what}: {e} is not an integer shape expression") from None
    return v


def _not_negative(v: int, e: te.Expr, env: Mapping[str, int], what: str) -> int:
    if v < 0:
        raise CallError(f"{what}: size {e} is {v} (negative) with {_show_env(e, env)}")
    return v


def _show_env(e: te.Expr, env: Mapping[str, int]) -> str:
    names = sorted({v.name for v in te.free_vars(e)} & set(env))
    return ", ".join(f"{n} = {env[n]}" for n in names) or "no variables"


def check_given(given: Mapping[str, object], what: str = "shapes") -> dict[str, int]:
    """Sizes given by name (``shapes={"M": 4}``, ``--shape M=4``): non-negative ints only
    (not "4", 4.7, True or -1)."""
    out = {}
    for k, v in given.items():
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 0:
            raise CallError(f"{what}['{k}'] must be a non-negative integer, got {v!r}")
        out[k] = int(v)
    return out


def bind(params: Sequence[tuple[str, tuple[te.Expr, ...], str]], shapes: Sequence[tuple[int, ...]],
         given: Mapping[str, int] | None = None, given_origin: str = "given",
         sizes: Sequence[te.Var] = (), fn_name: str = "") -> dict[str, int]:
    """Bind the sizes of a call: ``shapes``
    the arguments' actual shapes (same ranks), ``given`` sizes already known (fixed at build
    time, or passed by name). ``params`` are ``(argument, shape, its type as text)``.
    Every size in ``sizes`` must end up bound."""
    env: dict[str, int] = dict(given or {})
    origin = {k: given_origin for k in env}
    pending = []        # (expr, size, arg, dim) for dimensions that are expressions
    types = {arg: text for arg, _, text in params}
    for (arg, dims, _), shape in zip(params, shapes):
        for d, (s, n) in enumerate(zip(dims, shape)):
            if isinstance(s, te.Var):
                if s.name not in env:
                    env[s.name], origin[s.name] = n, f"{arg}, dimension {d}"
                elif env[s.name] != n:
                    raise CallError(f"{arg}: dimension {d} is {n} but {s.name} = "
                                    f"{env[s.name]} from {origin[s.name]}")
            else:
                pending.append((s, n, arg, d))
    while pending:
        progress, later = False, []
        for s, n, arg, d in pending:
            unbound = {v.name for v in te.free_vars(s)} - env.keys()
            if not unbound:
                want = value(s, env, f"{arg}: dimension {d}")
                if want != n:
                    known = ", ".join(f"{k} = {env[k]} from {origin[k]}" for k in
                                      sorted({v.name for v in te.free_vars(s)}))
                    if not known:       # a literal size
                        raise CallError(f"{arg}: dimension {d} is {n} but must be {want} "
                                        f"({types[arg]})")
                    raise CallError(f"{arg}: dimension {d} is {n} but {s} = {want} ({known})")
                progress = True
            elif len(unbound) == 1 and _solve(s, (name := unbound.pop()), n, env, arg, d):
                origin[name] = f"{arg}, dimension {d} ({s} = {n})"
                later.append((s, n, arg, d))     # re-checked on the next round
                progress = True
            else:
                later.append((s, n, arg, d))
        pending = later
        if not progress:
            s, n, arg, d = pending[0]
            missing = sorted({v.name for v in te.free_vars(s)} - env.keys())
            raise CallError(f"{arg}: cannot determine shape variable(s) {', '.join(missing)} "
                            f"from dimension {d} (size {n} = {s})",
                            hint=f"give it by name: {{'{missing[0]}': ...}}")
    for v in sizes:
        if v.name not in env:
            raise CallError(f"shape variable '{v.name}' of '{fn_name}' is not determined by "
                            "the arguments' shapes", hint=f"give it by name: {{'{v.name}': ...}}")
    return env


def _solve(s: te.Expr, name: str, n: int, env: dict[str, int], arg: str, d: int) -> bool:
    """Bind ``name`` so that ``s == n`` when ``s`` is affine in it with the other sizes
    known; False if it is not. A CallError when no non-negative integer solves it."""
    lin = exact(s, env)
    var = te.Var(name)
    if lin is None or set(lin.terms) != {(var,)}:
        return False
    a, c = lin.coeff(var), lin.const
    if (n - c) % a or (n - c) // a < 0:
        raise CallError(f"{arg}: dimension {d} is {n}, which {s} equals for no "
                        f"integer {name} >= 0")
    env[name] = (n - c) // a
    return True


def stage_shapes(fn: te.Function) -> tuple[tuple[str, tuple[te.Expr, ...], str], ...]:
    """Every computed tensor's shape as the algorithm writes it, and its dtype, for
    `check_shapes` (lowering may rewrite a shape into an equal one, such as
    ``(IH - 2) // 2 + 1`` into ``IH // 2``, that no longer shows the window that does not
    fit)."""
    return tuple((f"stage '{t.name}' of '{fn.name}'", t.shape, t.dtype) for t in fn.stages())


def check_shapes(shapes, env: Mapping[str, int]) -> None:
    """The reference's errors for the stage shapes of `stage_shapes` at these sizes: a size
    it refuses, and a stage it could not allocate (a kernel may never hold that stage whole,
    but it accepts no call the reference refuses)."""
    for what, shape, dtype in shapes:
        dims = tuple(value(dim, env, f"{what}: dimension {d}") for d, dim in enumerate(shape))
        check_allocation(dims, to_numpy(dtype), what)


def memory_bytes() -> int:
    """The most memory this process could ever hold: the machine's physical memory, or less
    where a limit says so (its address-space rlimit, its cgroup's ``memory.max``). Anything
    larger cannot be allocated, or only by overcommit, to be killed when it is written."""
    return min(limit for limit, _ in _memory_limits())


def _memory_limits() -> list[tuple[int, str]]:
    """``(bytes, what it is)`` for each limit that can be read; 2**63 when none can."""
    out = [(1 << 63, "the largest size an int64 can count")]
    try:
        out.append((os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
                    "this machine's memory"))
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY and soft > 0:
            out.append((soft, "this process's address-space limit (ulimit -v)"))
    except (ImportError, ValueError, OSError):
        pass
    cgroup = _cgroup_limit()
    if cgroup is not None:
        out.append((cgroup, "this process's cgroup memory limit"))
    return out


@functools.lru_cache(maxsize=None)
def _cgroup_limit() -> int | None:
    """The cgroup v2 ``memory.max`` of this process (None without one, or "max")."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next(line.split(":", 2)[2].strip() for line in f if line.startswith("0::"))
        with open(f"/sys/fs/cgroup{path}/memory.max") as f:
            text = f.read().strip()
        return None if text == "max" else int(text)
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def nbytes(shape: Sequence[int], dtype) -> int:
    """The bytes of an array of this shape, exactly (Python ints: no int64 overflow)."""
    count = 1
    for n in shape:
        count *= int(n)
    return count * np.dtype(dtype).itemsize


def check_allocation(shape: Sequence[int], dtype, what: str) -> int:
    """A CallError, before allocating, for an array larger than this process could ever hold
    (`memory_bytes`); else its bytes. ``what`` names the tensor."""
    need = nbytes(shape, dtype)
    limit = memory_bytes()
    if need > limit:
        why = next((w for n, w in _memory_limits() if n == limit), "this machine's memory")
        raise CallError(f"{what} would have shape {tuple(int(n) for n in shape)} "
                        f"({np.dtype(dtype)}): {need} bytes ({_gib(need)}), more than "
                        f"{why} ({limit} bytes, {_gib(limit)})")
    return need


# numpy's arrays start where malloc puts them: 16 bytes past a page for a large first one,
# anywhere on 16 bytes once malloc serves them from its heap. Off a cache line, each 64-byte
# vector store spans two lines and a kernel's streaming stores (emit_c/c.py), which need
# an aligned vector, fall back to plain ones: softmax of 4096 x 1024 on two Zen 4 cores
# (AVX-512) took 1.42-1.50 ms (median) into an output 16 bytes off a line against 0.85-1.07
# into an aligned one, the same process, calls alternating. So arrays from this many bytes
# start on a cache line; below, the 2 us the alignment costs in Python would outweigh the
# kernel's gain.
CACHE_LINE = 64                 # bytes: a cache line, and the widest vector (AVX-512)
ALIGNED_MIN_BYTES = 1 << 20


def empty(shape: Sequence[int], dtype, what: str, aligned: bool | None = None
          ) -> np.ndarray:
    """``np.empty(shape, dtype)``, refused with a CallError naming ``what``, its shape and
    bytes when it is too large (`check_allocation`) or the allocation fails. ``aligned``:
    it starts on a `CACHE_LINE` boundary (by default from `ALIGNED_MIN_BYTES` on)."""
    need = check_allocation(shape, dtype, what)
    try:
        if not (need >= ALIGNED_MIN_BYTES if aligned is None else aligned):
            return np.empty(tuple(shape), dtype)
        raw = np.empty(need + CACHE_LINE, np.uint8)
        start = -raw.ctypes.data % CACHE_LINE
        return raw[start:start + need].view(dtype).reshape(tuple(shape))
    except (MemoryError, ValueError) as e:
        raise CallError(f"{what} would have shape {tuple(int(n) for n in shape)} "
                        f"({np.dtype(dtype)}): {need} bytes ({_gib(need)}), which could not "
                        f"be allocated ({e})") from None


def contiguous(a: np.ndarray, what: str) -> np.ndarray:
    """``a`` as a C-contiguous aligned array: itself, or a copy allocated as `empty` does (a
    broadcast view of 2**31 elements is a small object, its copy is not)."""
    if a.flags.c_contiguous and a.flags.aligned:
        return a
    out = empty(a.shape, a.dtype, what)
    np.copyto(out, a)
    return out


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
