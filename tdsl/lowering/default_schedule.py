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
- an injective stage whose innermost loop ``k`` is read through ``k // c`` and ``k % c``
  (a transpose composed with a reshape: merging attention's heads reads ``X[0, k // 64, r,
  k % 64]``) is first split by ``c`` when that makes the inner part contiguous: runs of
  ``c`` values, vectorized as above;
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
from .arith.prover import Ctx, bounds
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
    runs = None if red or contiguous or lanes == 1 or None in extents else \
        _contiguous_runs(t, extents, lanes)
    inner_name = inner.var.name
    if runs is not None:
        # k as k.r * runs + k.c: the loads' k // runs and k % runs become k.r and k.c, and
        # k.c is the innermost, contiguous loop the rule below splits into vectors
        s = s.split(name, inner_name, runs, outer=f"{inner_name}.r", inner=f"{inner_name}.c")
        outer, inner_name = outer + [f"{inner_name}.r"], f"{inner_name}.c"
        contiguous, n, parallel_axis = True, runs, outer[0]
    if innermost and contiguous and lanes > 1 and (n is None or n >= lanes):
        io, ii = f"{inner_name}.o", f"{inner_name}.i"
        s = s.split(name, inner_name, lanes, outer=io, inner=ii).vectorize(name, ii)
        parallel_axis = outer[0] if outer else io
    if parallel_axis and (work is None or work >= MIN_PARALLEL_WORK):
        s = s.parallel(name, parallel_axis)
    return s


def _contiguous_runs(t: te.Tensor, extents: list[int], lanes: int) -> int | None:
    """The largest ``c`` (a multiple of ``lanes`` dividing the innermost extent) that the
    innermost loop ``k`` of ``t`` is divided by or taken modulo (``k // c``, ``k % c``) in
    its loads such that, with ``k = k.r * c + k.c``, every load reads ``k.c`` contiguously
    (last index, coefficient 1) or not at all; None if there is none."""
    axes = t.op.axes
    k, n = axes[-1].var, extents[-1]
    divisors = {e.b.value for ld in te.loads(t.op.body) for i in ld.indices
                for e in te.walk(i) if isinstance(e, te.Binary) and e.op in ("//", "%")
                and isinstance(e.b, te.Const) and k in te.free_vars(e.a)}
    for c in sorted((c for c in divisors if 0 < c < n and n % c == 0 and c % lanes == 0),
                    reverse=True):
        kr, ki = te.Var(k.name + ".r"), te.Var(k.name + ".c")
        ctx = Ctx()
        for iv, extent in zip(axes[:-1], extents):
            ctx = ctx.with_loop(iv.var, te.Const(0, te.INDEX), te.Const(extent, te.INDEX))
        ctx = ctx.with_loop(kr, te.Const(0, te.INDEX), te.Const(n // c, te.INDEX)) \
            .with_loop(ki, te.Const(0, te.INDEX), te.Const(c, te.INDEX))
        split = {k: te.Binary("+", te.Binary("*", kr, te.Const(c, te.INDEX), te.INDEX), ki,
                              te.INDEX)}

        def reads_runs(ld: te.Load) -> bool:
            idx = [simplify(te.substitute(i, split), lambda e: bounds(e, ctx))
                   for i in ld.indices]
            using = [j for j, i in enumerate(idx) if ki in te.free_vars(i)]
            return not using or (using == [len(idx) - 1] and linear(idx[-1]).coeff(ki) == 1)
        if all(reads_runs(ld) for ld in te.loads(t.op.body)):
            return c
    return None


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
