"""The schedule an op gets when none is given: not the naive nest.

TVM's unscheduled CPU code is 100-1000x slower than a tuned one (anchors.md); this closes
part of the gap with rules any stage can take:

- an intermediate stage without reduction and without costly math (exp, log, ...) is
  inlined into its readers; others are computed at root;
- a reduction whose innermost data axis ``j`` is contiguous in every load that uses it, and
  absent from at least one (matmul's ``A[i, k]``), runs ``i, k, j``: the accumulation goes
  into the output row, ``j`` innermost (legal: the output is initialised before ``k``);
  into a few rows (``FEW_ROWS``, an LSTM step's batch) of whole vectors it runs chunks of
  ``j`` outermost, then ``k``, then every row and vector of the chunk unrolled: a register
  tile of accumulators (`_register_tile`);
- a reduction of a few gathered terms per output (``FEW_TAPS``: a resize's 2 x 2 taps, a
  col2im) has its reduction loops unrolled;
- a stage that reads a blocked layout back into planes (``X[c // 16, x, c % 16]``: a
  ``from_nchwc`` fused with what follows) runs the block's channels innermost, unrolled
  (`_planes_from_blocks`);
- the innermost data loop, when it is innermost and contiguous, is split by one vector of
  the target (its f32 lanes x 4 bytes: 16 f32 on AVX-512, 8 on AVX2; of the widest element
  the stage reads or writes) and the inner part vectorized, if it is at least that long;
- an injective stage whose innermost loop ``k`` is read through ``k // c`` and ``k % c``
  (a transpose composed with a reshape: merging attention's heads reads ``X[0, k // 64, r,
  k % 64]``) is first split by ``c`` when that makes the inner part contiguous: runs of
  ``c`` values, vectorized as above;
- an injective stage whose innermost row is not whole vectors (56 values, 16 lanes) runs its
  trailing axes as one loop, the fewest whose run is whole vectors (else all it can: one
  tail a run, not one a row), when every load reads them at the stage's own place (or not
  at all: a per-channel scale keeps the channel out), as TVM's injective schedule fuses
  them; the simplifier folds the fused index back to the loop's own, so the loop is split
  into vectors as above with no division left;
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
FEW_ROWS = 4                    # a reduction's rows that share one register tile
FEW_TAPS = 16                   # a reduction's terms per output that are unrolled


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
    inlined = {t.name for t in fn.stages() if t.name not in outputs and _cheap_injective(t)
               and not _copy_worth_keeping(t, fn.stages())}
    for t in fn.stages():
        if t.name in inlined:
            s = s.compute_inline(t.name)
        else:
            s = _schedule_stage(s, t, env, vector_bytes, inlined, target.registers)
    return s


def _cheap_injective(t: te.Tensor) -> bool:
    return not any(isinstance(e, te.Reduce) or (isinstance(e, te.Intrinsic) and e.name in COSTLY)
                   for e in te.walk(t.op.body))


def _copy_worth_keeping(t: te.Tensor, stages) -> bool:
    """Whether a cheap injective stage is computed once rather than in its readers: one that
    reads through a clamped or gathered index (a resize's rows with their ends repeated:
    inlined, the clamp would make its readers' affine reads irregular, and they would not
    vectorize), or one that a reader gathers from (read at a data-dependent index: it
    would be computed again at every tap)."""
    if any(_irregular(i) for ld in te.loads(t.op.body) for i in ld.indices):
        return True
    return any(ld.tensor.name == t.name and
               any(isinstance(e, te.Load) for i in ld.indices for e in te.walk(i))
               for r in stages for ld in te.loads(r.op.body))


def _irregular(i: te.Expr, v: te.Var | None = None) -> bool:
    """Whether index ``i`` reads through a gather or a clamp; given ``v``, whether it reads
    ``v`` so or through a division or a remainder (not affinely)."""
    for e in te.walk(i):
        if v is not None and v not in te.free_vars(e):
            continue
        if isinstance(e, te.Load) or (isinstance(e, te.Intrinsic) and e.name in ("min", "max")):
            return True
        if v is not None and isinstance(e, te.Binary) and e.op in ("//", "%"):
            return True
    return False


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


def _schedule_stage(s: Schedule, t: te.Tensor, env: dict, vector_bytes: int,
                    inlined: set[str], registers: int) -> Schedule:
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
    # the vector's lanes of the widest element the stage reads or writes: a quantize (f32
    # in, u8 out) computes f32 vectors, 16 on AVX-512, not 64 (a row of 56 would not split)
    widest = max(to_numpy(d).itemsize for d in (t.dtype, *(ld.dtype for ld in te.loads(body))))
    lanes = max(1, vector_bytes // widest)
    inner_name, n = inner.var.name, extents[-1]
    flat = 1 if red or not contiguous or lanes == 1 else \
        _flat_suffix(t, extents, env, lanes, inlined)
    if flat > 1:
        # rows of 56 are not whole vectors, a plane of them is (rows of 7: one tail a plane)
        inner_name = ".".join(iv.var.name for iv in data[-flat:]) + ".f"
        s = s.fuse(name, *(iv.var.name for iv in data[-flat:]), fused=inner_name)
        outer, extents = outer[:len(outer) + 1 - flat], extents[:-flat] + [
            _product(extents[-flat:])]
        n = extents[-1]
    if red and contiguous and broadcast and lanes > 1 and outer and None not in extents \
            and _product(extents[:-1]) <= FEW_ROWS and n % lanes == 0:
        return _register_tile(s, t, outer, red, inner_name, extents, lanes, registers)
    block = None if red or contiguous or not outer or None in extents else \
        _channel_block(t, data[-2].var, inner.var)
    if block is not None and extents[-2] % block == 0:
        return _planes_from_blocks(s, t, outer, inner_name, block, work)
    if len(outer) >= 2 and extents[0] is not None and extents[0] < SMALL_EXTENT:
        fused = f"{outer[0]}.{outer[1]}.f"
        s = s.fuse(name, outer[0], outer[1], fused=fused)
        outer = [fused] + outer[2:]
    innermost = not red
    if red and contiguous and broadcast:
        s = s.reorder(name, *outer, *red, inner.var.name)
        innermost = True
    if red and _few(_const(iv.extent, env) for iv in body.axes) and \
            not _contiguous(t, body.axes[-1].var)[0]:
        # a few gathered taps per output (a bilinear resize's 2 x 2, or its rows' 2 when
        # the resize is separable, a transposed convolution's col2im) unrolled: each
        # output's sum is straight-line code gcc keeps in a register (U-Net's 2x upsampling
        # 12.2 -> 5.4 us with its gathers' checks gone). A sum along contiguous values stays
        # a loop gcc vectorizes (attention's scores over 16 values ran 6.2 -> 8.5 us
        # unrolled)
        for axis in red:
            s = s.unroll(name, axis)
    parallel_axis = outer[0] if outer else inner_name
    runs = None if red or contiguous or lanes == 1 or None in extents else \
        _contiguous_runs(t, extents, lanes)
    if runs is not None:
        # k as k.r * runs + k.c: the loads' k // runs and k % runs become k.r and k.c, and
        # k.c is the innermost, contiguous loop the rule below splits into vectors
        s = s.split(name, inner_name, runs, outer=f"{inner_name}.r", inner=f"{inner_name}.c")
        outer, inner_name = outer + [f"{inner_name}.r"], f"{inner_name}.c"
        contiguous, n, parallel_axis = True, runs, outer[0]
    phases = None if red or contiguous or runs is not None or None in extents else \
        _phases(t, extents, lanes)
    if phases is not None:
        # k as k.r * phases + k.c, every load reading k.r affinely and k.c unrolled: each
        # copy's selects on k % phases fold, and the loop over k.r reads rows contiguously
        # and stores the phases interleaved, which the C compiler vectorizes
        s = s.split(name, inner_name, phases, outer=f"{inner_name}.r",
                    inner=f"{inner_name}.c").unroll(name, f"{inner_name}.c")
        parallel_axis = outer[0] if outer else f"{inner_name}.r"
    if innermost and contiguous and lanes > 1 and (n is None or n >= lanes):
        io, ii = f"{inner_name}.o", f"{inner_name}.i"
        s = s.split(name, inner_name, lanes, outer=io, inner=ii).vectorize(name, ii)
        parallel_axis = outer[0] if outer else io
    if parallel_axis and (work is None or work >= MIN_PARALLEL_WORK):
        s = s.parallel(name, parallel_axis)
    return s


def _channel_block(t: te.Tensor, c: te.Var, x: te.Var) -> int | None:
    """``b`` where a load reads the innermost axis ``x`` outside its last index and the axis
    ``c`` before it as ``c % b`` inside: a blocked layout read back into planes
    (``X[n, c // 16, y, x, c % 16]``, a ``from_nchwc`` the graph fused with what follows)."""
    for ld in te.loads(t.op.body):
        if not any(_uses(i, x) for i in ld.indices[:-1]):
            continue
        for e in te.walk(ld.indices[-1]):
            if isinstance(e, te.Binary) and e.op == "%" and isinstance(e.b, te.Const) and \
                    e.b.value > 1 and _uses(e.a, c):
                return int(e.b.value)
    return None


def _planes_from_blocks(s: Schedule, t: te.Tensor, outer: list[str], inner: str, block: int,
                        work: int | None) -> Schedule:
    """A blocked layout read back into planes: ``c`` split by the block, its block of
    channels innermost and unrolled, so each pixel's block is read once, contiguous, and
    written to its planes (`from_nchwc`'s own schedule). Plane by plane, each pixel's
    read took a cache line for one value: a 1-D convolution's output (64 x 4000 from blocks
    of 16, with its ReLU) took 160 us."""
    name, c = t.name, outer[-1]
    s = s.split(name, c, block, outer=f"{c}.o", inner=f"{c}.i")
    rows = [*outer[:-1], f"{c}.o"]
    s = s.reorder(name, *rows, inner, f"{c}.i").unroll(name, f"{c}.i")
    if len(rows) > 1:
        s = s.fuse(name, *rows, fused="rows")
        rows = ["rows"]
    if work is None or work >= MIN_PARALLEL_WORK:
        s = s.parallel(name, rows[0])
    return s


def _register_tile(s: Schedule, t: te.Tensor, outer: list[str], red: list[str], inner: str,
                   extents: list[int], lanes: int, registers: int) -> Schedule:
    """A reduction into a few rows (an LSTM step's batch of 2: ``M[b, g] = sum[k](H[b, k] *
    R[k, g])``) as a register tile: the rows x ``v`` vectors of the row in accumulators over
    the whole sum, the reduction inside the row's chunks, so each vector of ``R`` is loaded
    once for all the rows instead of once a row, and the sums never go through memory. Half
    the registers hold accumulators. ``i, k, j`` for each row took an LSTM keyword spotter's
    step (2 x 64 by 64 x 256) 1.48 us, this 0.99 (AVX-512, one thread)."""
    name, rows, vectors = t.name, _product(extents[:-1]), extents[-1] // lanes
    v = max(d for d in range(1, vectors + 1)
            if vectors % d == 0 and d * rows <= max(1, registers // 2))
    chunk, vec, lane = f"{inner}.c", f"{inner}.v", f"{inner}.l"
    s = s.split(name, inner, v * lanes, outer=chunk, inner=f"{inner}.r")
    s = s.split(name, f"{inner}.r", lanes, outer=vec, inner=lane)
    s = s.reorder(name, chunk, *red, *outer, vec, lane)
    for axis in (*outer, vec):
        s = s.unroll(name, axis)
    s = s.vectorize(name, lane)
    if vectors // v > 1 and _product(extents) >= MIN_PARALLEL_WORK:
        s = s.parallel(name, chunk)
    return s


def _flat_suffix(t: te.Tensor, extents: list, env: dict, lanes: int,
                 inlined: set[str]) -> int:
    """How many trailing data axes of ``t`` to fuse into one contiguous loop (TVM's
    injective schedule fuses them all), when the innermost row is not whole vectors: the
    fewest, from two, whose run is, else all that can be (one tail for the run, not one per
    row: a 7 x 7 plane is 3 vectors and a tail at 16 lanes, where its rows of 7 were
    scalar); 1 for none. Every load must read those axes as its own trailing indices over
    dimensions of the same extents (the flat index is then the fused loop's, with no
    division left once simplified), or not read them."""
    if extents[-1] is None or extents[-1] % lanes == 0:
        return 1
    flat = 1
    for k in range(2, len(extents) + 1):
        if extents[-k] is None or not _reads_flat(t, k, extents[-k:], env, inlined):
            break
        flat = k
        if _product(extents[-k:]) % lanes == 0:
            break
    return flat


def _reads_flat(t: te.Tensor, k: int, extents: list, env: dict, inlined: set[str]) -> bool:
    """Every load in ``t`` reads ``t``'s last ``k`` axes as its last ``k`` indices, over
    dimensions of ``extents``, or none of them; through stages inlined into ``t`` too."""
    axes = tuple(iv.var for iv in t.op.axes[-k:])
    for ld in te.loads(t.op.body):
        using = [j for j, i in enumerate(ld.indices) if te.free_vars(i) & set(axes)]
        if not using:
            continue
        n = len(ld.indices)
        if using != list(range(n - k, n)) or tuple(ld.indices[n - k:]) != axes or \
                [_const(d, env) for d in ld.tensor.shape[n - k:]] != extents:
            return False
        if ld.tensor.name in inlined and not _reads_flat(ld.tensor, k, extents, env, inlined):
            return False
    return True


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


def _phases(t: te.Tensor, extents: list[int], lanes: int) -> int | None:
    """The ``c`` (fewer than ``lanes``, dividing the innermost extent) that the innermost
    loop ``k`` of ``t`` is divided by in its loads such that, with ``k = k.r * c + k.c``,
    every load reads ``k.r`` affinely (``k.c``, unrolled, is a constant in each copy): an
    axis enlarged by a whole factor, each output reading its input at ``k // c`` (a resize's
    phases ``k % c`` choose its weights, a DepthToSpace's its planes); None if none."""
    k, n = t.op.axes[-1].var, extents[-1]
    divisors = {e.b.value for ld in te.loads(t.op.body) for i in ld.indices
                for e in te.walk(i) if isinstance(e, te.Binary) and e.op == "//"
                and isinstance(e.b, te.Const) and k in te.free_vars(e.a)}
    for c in sorted(c for c in divisors if 1 < c < lanes and n % c == 0):
        kr, kc = te.Var(k.name + ".r"), te.Var(k.name + ".c")
        ctx = Ctx().with_loop(kr, te.Const(0, te.INDEX), te.Const(n // c, te.INDEX)) \
            .with_loop(kc, te.Const(0, te.INDEX), te.Const(c, te.INDEX))
        split = {k: te.Binary("+", te.Binary("*", kr, te.Const(c, te.INDEX), te.INDEX), kc,
                              te.INDEX)}
        if not any(_irregular(simplify(te.substitute(i, split), lambda e: bounds(e, ctx)), kr)
                   for ld in te.loads(t.op.body) for i in ld.indices):
            return c
    return None


def _few(taps) -> bool:
    """Whether a reduction's extents are all known and their product at most FEW_TAPS."""
    taps = list(taps)
    return None not in taps and _product(taps) <= FEW_TAPS


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
