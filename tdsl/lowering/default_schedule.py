"""The schedule an op gets when none is given: not the naive nest.

TVM's unscheduled CPU code is 100-1000x slower than a tuned one (anchors.md); this closes
part of the gap with rules any stage can take:

- an intermediate stage without reduction and without costly math (exp, log, ...) is
  inlined into its readers; others are computed at root;
- a reduction whose innermost data axis ``j`` is contiguous in every load that uses it, and
  absent from at least one (matmul's ``A[i, k]``), runs ``i, k, j``: the accumulation goes
  into the output row, ``j`` innermost (legal: the output is initialised before ``k``);
- the innermost data loop, when it is innermost and contiguous, is split by one vector of
  the target (its f32 lanes x 4 bytes: 16 f32 on AVX-512, 8 on AVX2; of the widest element
  the stage reads or writes) and the inner part vectorized, if it is at least that long;
- the outermost data loop runs in parallel when the stage does enough work; when its extent
  is small (a batch of 1) and a second data loop follows, the two are fused first.

On a GPU target (`gpu_default_schedule`) every stage that is not inlined is one kernel with
one thread per output element: its data loops fused into one, split by the threads of a
block, the parts bound to ``blockIdx.x`` and ``threadIdx.x``; reductions stay serial in
each thread. Slower than a hand schedule, but every op builds and runs.
"""
from __future__ import annotations

from . import te
from .arith.linear import linear
from .arith.simplify import simplify
from .dtypes import to_numpy
from .schedule import Schedule
from ..target import as_target

COSTLY = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "pow", "sin", "cos",
          "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "fmod")
MIN_PARALLEL_WORK = 4096        # elements; below this, threads cost more than they give
SMALL_EXTENT = 16


def default_schedule(fn: te.Function, shapes: dict[str, int] | None = None,
                     target=None) -> Schedule:
    """``shapes``, when the sizes are known, lets the rules see extents (a short row is
    not split into vectors); ``target`` (the host by default) gives the vector width."""
    target = as_target(target)
    if target.is_gpu:
        return gpu_default_schedule(fn, target)
    vector_bytes = target.lanes * 4
    env = {v: te.Const(int(shapes[v.name]), v.dtype) for v in fn.shape_vars
           if v.name in (shapes or {})}
    s = Schedule(fn)
    outputs = {t.name for t in fn.outputs}
    for t in fn.stages():
        if t.name not in outputs and _cheap_injective(t):
            s = s.compute_inline(t.name)
        else:
            s = _schedule_stage(s, t, env, vector_bytes)
    return s


def _cheap_injective(t: te.Tensor) -> bool:
    return not any(isinstance(e, te.Reduce) or (isinstance(e, te.Intrinsic) and e.name in COSTLY)
                   for e in te.walk(t.op.body))


def _const(e: te.Expr, env: dict) -> int | None:
    e = simplify(te.substitute(e, env))
    return int(e.value) if isinstance(e, te.Const) else None


def _uses(e: te.Expr, v: te.Var) -> bool:
    return v in te.free_vars(e)


def _contiguous(t: te.Tensor, v: te.Var) -> tuple[bool, bool]:
    """(every load using ``v`` has it only in the last index, with coefficient 1;
    some load does not use ``v`` at all)."""
    contiguous, broadcast = True, False
    for ld in te.loads(t.op.body):
        using = [k for k, i in enumerate(ld.indices) if _uses(i, v)]
        if not using:
            broadcast = True
        elif using != [len(ld.indices) - 1] or linear(ld.indices[-1]).coeff(v) != 1:
            contiguous = False
    return contiguous, broadcast


def _schedule_stage(s: Schedule, t: te.Tensor, env: dict, vector_bytes: int) -> Schedule:
    data = [iv for iv in t.op.axes]
    if not data:
        return s
    body = t.op.body
    red = [iv.var.name for iv in body.axes] if isinstance(body, te.Reduce) else []
    inner = data[-1]
    contiguous, broadcast = _contiguous(t, inner.var)
    extents = [_const(iv.extent, env) for iv in data]
    work = None if None in extents else _product(extents)
    name, outer = t.name, [iv.var.name for iv in data[:-1]]
    if len(outer) >= 2 and extents[0] is not None and extents[0] < SMALL_EXTENT:
        fused = f"{outer[0]}.{outer[1]}.f"
        s = s.fuse(name, outer[0], outer[1], fused=fused)
        outer = [fused] + outer[2:]
    innermost = not red
    if red and contiguous and broadcast:
        s = s.reorder(name, *outer, *red, inner.var.name)
        innermost = True
    # the vector's lanes of the widest element the stage reads or writes: a quantize (f32
    # in, u8 out) computes f32 vectors, 16 on AVX-512, not 64 (a row of 56 would not split)
    widest = max(to_numpy(d).itemsize for d in (t.dtype, *(ld.dtype for ld in te.loads(body))))
    lanes = max(1, vector_bytes // widest)
    parallel_axis = outer[0] if outer else inner.var.name
    n = extents[-1]
    if innermost and contiguous and lanes > 1 and (n is None or n >= lanes):
        io, ii = f"{inner.var.name}.o", f"{inner.var.name}.i"
        s = s.split(name, inner.var.name, lanes, outer=io, inner=ii).vectorize(name, ii)
        parallel_axis = outer[0] if outer else io
    if parallel_axis and (work is None or work >= MIN_PARALLEL_WORK):
        s = s.parallel(name, parallel_axis)
    return s


def _product(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


GPU_BLOCK_THREADS = 256     # threads per block of the automatic GPU schedule (at most)


def gpu_default_schedule(fn: te.Function, target) -> Schedule:
    """One thread per element of each stage computed at root; cheap injective stages are
    inlined (fused into their readers)."""
    threads = min(GPU_BLOCK_THREADS, target.max_threads)
    s = Schedule(fn)
    outputs = {t.name for t in fn.outputs}
    for t in fn.stages():
        if t.name not in outputs and _cheap_injective(t):
            s = s.compute_inline(t.name)
            continue
        data = [iv.var.name for iv in t.op.axes]
        if not data:
            continue        # a scalar: one thread of one block
        axis = data[0]
        if len(data) > 1:
            axis = ".".join(data) + ".f"
            s = s.fuse(t.name, *data, fused=axis)
        bo, ti = f"{axis}.b", f"{axis}.t"
        s = s.split(t.name, axis, threads, outer=bo, inner=ti)
        s = s.bind(t.name, bo, "blockIdx.x").bind(t.name, ti, "threadIdx.x")
    return s
