"""Cost-model features: a lowered loop program becomes one fixed-length vector of floats.

In the spirit of AutoTVM's "itervar" features (`touch_extractor`), computed in Python from the
loop IR. For every innermost statement (a `Store`, or a micro-kernel `Evaluate`) and every
buffer it touches we compute, at each loop level going outward, the access's stride (in
elements) w.r.t. that loop, the bytes it touches inside the loop and how often each element
is reused there; plus the loops' extents and kinds. To make the length fixed, the loop-level
features are those of the *main* statement (the one doing the most work), over its
`DEPTH` innermost loops, for three buffer slots (`SLOTS`); whole-program totals (flops, bytes,
arithmetic intensity, loops, allocations) come last. `FEATURE_NAMES` names every entry;
docs/tuner.md ("Features") says what each means and how it is transformed.

Counts, sizes and ratios are ``log2(1 + x)``; one-hots and shares are raw. A loop extent that
is not a compile-time constant is evaluated with every unbound shape variable at `SYMBOLIC`,
and counts as `SYMBOLIC` itself when that gives no positive number.

The lowered program is read, never changed.
"""
from __future__ import annotations

import math

import numpy as np

from ..lowering import te
from ..lowering.dtypes import INDEX, to_numpy
from ..lowering.loop_ir import (AddressOf, Allocate, Barrier, Broadcast, BufferLoad, Call,
                                Evaluate, For, ForKind, If, LetStmt, LoweredFunc, Ramp, Seq,
                                Stmt, Store, split_dtype)
from ..lowering.lower import lower
from ..lowering.schedule import Schedule

DEPTH = 6                       # loop levels of the main statement, innermost first
SLOTS = ("out", "in0", "in1")   # the stored buffer, then the first two other buffers read
SYMBOLIC = 64                   # stands for a non-constant extent or an unbound size
KINDS = ("parallel", "vectorized", "unrolled", "serial")
# GPU thread axes run concurrently like parallel loops; virtual threads become interleaved
# copies of the body, like unrolling.
KIND_OF = {ForKind.PARALLEL: "parallel", ForKind.THREAD_BINDING: "parallel",
           ForKind.VECTORIZED: "vectorized", ForKind.UNROLLED: "unrolled",
           ForKind.VTHREAD: "unrolled", ForKind.SERIAL: "serial"}
# The prefix of the lowering pipeline `schedule_features` runs: none of the passes. The loop
# nests straight out of `build_nests` already carry every loop, kind and access the features
# read; `simplify` would only drop the extent-1 loops (skipped here too) and the guards, at
# about 1.5x (matmul) to 2x (conv2d) the cost (measured at M=N=K=1024; 64x56x56, 3x3).
PIPELINE: tuple = ()


PROG_NAMES = ("prog.flops", "prog.bytes", "prog.intensity", "prog.loops", "prog.stmts",
              "prog.parallel_loops", "prog.vectorized_loops", "prog.unrolled_loops",
              "prog.allocs", "prog.local_bytes", "prog.global_bytes", "prog.calls",
              "prog.barriers")


def _names() -> tuple[str, ...]:
    names = []
    for level in range(DEPTH):
        p = f"L{level}."
        names += [p + "extent", *(p + k for k in KINDS), p + "intensity"]
        for s in SLOTS:
            names += [f"{p}{s}.stride", f"{p}{s}.bytes", f"{p}{s}.reuse"]
    for s in SLOTS:
        names += [f"{s}.present", f"{s}.local", f"{s}.bytes", f"{s}.reuse"]
    names += ["stmt.loops", "stmt.iterations", "stmt.ops", "stmt.flops", "stmt.lanes",
              "stmt.unroll", "stmt.parallel", "stmt.work_share"]
    return tuple(names) + PROG_NAMES


FEATURE_NAMES: tuple[str, ...] = _names()


def schedule_features(schedule: Schedule, config: dict | None = None,
                      shapes: dict[str, int] | None = None, target=None) -> np.ndarray:
    """The features of ``schedule.fn`` lowered under ``schedule`` with knob ``config`` and
    sizes ``shapes`` for ``target`` (the host by default; a GPU schedule's bindings are
    refused on a CPU), through the cheap pipeline prefix `PIPELINE`."""
    return feature_vector(lower(schedule.fn, schedule, config, shapes, target=target,
                                pipeline=PIPELINE))


def feature_vector(func: LoweredFunc) -> np.ndarray:
    """The float64 vector of ``func``, one entry per name of `FEATURE_NAMES`."""
    walk = _Walk()
    walk.visit(func.body, ())
    intrinsics = func.attrs.get("tensor_intrinsics", {})
    stmts = [_analyse(scope, node, intrinsics) for scope, node in walk.stmts]
    total_flops = sum(s.flops for s in stmts)
    total_bytes = sum(a.bytes[-1] for s in stmts for a in s.accesses)
    main = max(stmts, key=lambda s: (s.flops, s.iterations), default=None)
    if main is None:            # nothing is stored: only the program entries can be non-zero
        out = [0.0] * (len(FEATURE_NAMES) - len(PROG_NAMES))
    else:
        out = _main_features(main, total_flops)
    c = walk.counts
    out += [_log(total_flops), _log(total_bytes),
            _log(total_flops / total_bytes) if total_bytes else 0.0,
            _log(c["loops"]), _log(len(stmts)), _log(c["parallel"]), _log(c["vectorized"]),
            _log(c["unrolled"]), _log(c["allocs"]), _log(walk.local_bytes),
            _log(walk.global_bytes), _log(c["calls"]), _log(c["barriers"])]
    assert len(out) == len(FEATURE_NAMES)
    return np.nan_to_num(np.asarray(out, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)


def _log(x) -> float:
    return math.log2(1.0 + min(max(float(x), 0.0), 1e300))


# ---------------------------------------------------------------------------- the walk

class _Walk:
    """Collects the innermost statements, each with its scope: the enclosing loops
    ``("loop", var, min, extent, kind)`` and bindings ``("let", var, value)``, outermost
    first; and counts the rest of the program."""

    def __init__(self):
        self.stmts: list[tuple[tuple, Stmt]] = []
        self.counts = dict.fromkeys(("loops", "parallel", "vectorized", "unrolled", "allocs",
                                     "calls", "barriers"), 0)
        self.local_bytes = self.global_bytes = 0

    def visit(self, s: Stmt, scope: tuple) -> None:
        match s:
            case For(var, mn, ext, kind, body):
                if ext == te.Const(1, ext.dtype):
                    # runs once: a binding, as the simplifier would make it
                    return self.visit(body, scope + (("let", var, mn),))
                kind = KIND_OF.get(kind, "serial")
                self.counts["loops"] += 1
                if kind != "serial":
                    self.counts[kind] += 1
                self.visit(body, scope + (("loop", var, mn, _size(ext, scope), kind),))
            case Seq(stmts):
                for x in stmts:
                    self.visit(x, scope)
            case If(_, then, orelse):
                # guards are ignored: the statement is counted as if it always ran
                self.visit(then, scope)
                if orelse is not None:
                    self.visit(orelse, scope)
            case LetStmt(var, value, body):
                self.visit(body, scope + (("let", var, value),))
            case Allocate(buf, body):
                self.counts["allocs"] += 1
                nbytes = _elements(buf) * _itemsize(buf.dtype)
                if buf.scope == "global":
                    self.global_bytes += nbytes
                else:
                    self.local_bytes += nbytes
                self.visit(body, scope)
            case Store():
                self.stmts.append((scope, s))
            case Evaluate(value):
                if isinstance(value, Call):
                    self.counts["calls"] += 1
                    self.stmts.append((scope, s))
            case Barrier():
                self.counts["barriers"] += 1
            case _:
                # a statement kind added later: look inside, count nothing
                for child in _children(s):
                    self.visit(child, scope)


def _children(s: Stmt) -> list[Stmt]:
    out = []
    for name in getattr(s, "__dataclass_fields__", ()):
        v = getattr(s, name)
        if isinstance(v, Stmt):
            out.append(v)
        elif isinstance(v, tuple):
            out += [x for x in v if isinstance(x, Stmt)]
    return out


def _size(e: te.Expr, enclosing: tuple = ()) -> int:
    """A loop extent or buffer size as a number. Unbound shape variables count as `SYMBOLIC`
    (so a split of ``N`` still has ``N``'s iterations in all); a size that depends on the
    enclosing loops or lets, or is not positive then, counts as `SYMBOLIC` itself."""
    if isinstance(e, te.Const):
        return max(int(e.value), 0)
    used = te.free_vars(e)
    if any(entry[1] in used for entry in enclosing):
        return SYMBOLIC
    value = float(np.asarray(_eval(e, {}), dtype=np.float64).flat[0])
    return int(value) if 1 <= value < 1e18 else SYMBOLIC


def _elements(buf) -> int:
    return math.prod(_size(d) for d in buf.shape)


def _itemsize(dtype: str) -> int:
    base, _ = split_dtype(dtype)
    return 1 if base == "bool" else to_numpy(base).itemsize


def _lanes(dtype: str) -> int:
    return split_dtype(dtype)[1] if dtype not in ("void", "handle") else 1


# ---------------------------------------------------------------------------- one statement

class _Access:
    """One buffer access of a statement, per loop level innermost first: ``strides`` (in
    elements), ``bytes`` touched and ``reuse`` (accesses per distinct element) in the loops
    from that level inward. ``bytes[-1]``/``reuse[-1]`` cover the whole nest."""
    __slots__ = ("buffer", "bytes", "reuse", "strides")

    def __init__(self, buffer, strides, extents, lanes: int):
        self.buffer, self.strides = buffer, strides
        limit, size = max(_elements(buffer), 1), _itemsize(buffer.dtype)
        count = span = iters = lanes
        self.bytes, self.reuse = [], []
        for s, e in zip(strides, extents):
            iters *= e
            if s != 0:
                # distinct elements: at most one per iteration, and at most the offset range
                count *= e
                span += abs(s) * (e - 1)
            elems = min(count, span, limit)
            self.bytes.append(elems * size)
            self.reuse.append(iters / elems if elems else 0.0)
        if not strides:         # no enclosing loop: the one access
            self.bytes, self.reuse = [min(lanes, limit) * size], [1.0]


class _Stmt:
    __slots__ = ("accesses", "flops", "iterations", "loops", "ops", "slots")


def _analyse(scope: tuple, node: Stmt, intrinsics: dict) -> _Stmt:
    st = _Stmt()
    st.loops = [e for e in scope if e[0] == "loop"][::-1]          # innermost first
    extents = [e[3] for e in st.loops]
    st.iterations = math.prod(extents)
    env = _env(scope, len(st.loops))
    raw = []        # (buffer, indices, flat, lanes); flat=True: one index, already flat
    if isinstance(node, Store):
        loads: list[BufferLoad] = []
        st.ops = _scan(node.value, loads)
        raw.append((node.buffer, node.indices, False, _lanes(node.value.dtype)))
        raw += [(ld.buffer, ld.indices, False, _lanes(ld.dtype)) for ld in loads]
    else:
        call = node.value
        st.ops = _intrinsic_ops(intrinsics.get(call.name))
        raw += [(a.buffer, (a.index,), True, 1) for a in call.args if isinstance(a, AddressOf)]
    st.flops = st.ops * st.iterations
    st.accesses, seen = [], set()
    for buf, indices, flat, lanes in raw:
        if (buf, indices) in seen:          # the accumulator read back: one access
            continue
        seen.add((buf, indices))
        strides = _strides(buf, indices, flat, env, len(st.loops))
        st.accesses.append(_Access(buf, strides, extents, lanes))
    # slots: the first access of each buffer, the stored one first, then in order of reading
    st.slots, named = [], set()
    for a in st.accesses:
        if a.buffer not in named:
            named.add(a.buffer)
            st.slots.append(a)
    return st


def _env(scope: tuple, n: int) -> dict:
    """Values of the scope's variables at ``n + 1`` points, as vectors: point 0 has every loop
    at its first iteration; point ``j + 1`` moves the ``j``-th loop (outermost first) one
    iteration on. An index's differences to point 0 are then its strides (exact when affine;
    the first step when not, e.g. for ``f // 4``)."""
    env, j = {}, 0
    for entry in scope:
        if entry[0] == "loop":
            step = np.zeros(n + 1, dtype=np.int64)
            step[j + 1] = 1
            env[entry[1]] = _eval(entry[2], env) + step
            j += 1
        else:
            env[entry[1]] = _eval(entry[2], env)
    return env


def _strides(buf, indices, flat: bool, env: dict, n: int) -> list[float]:
    if flat:
        offset = _eval(indices[0], env) if indices else 0
    else:
        offset = 0
        for index, stride in zip(indices, _buffer_strides(buf)):
            offset = offset + _eval(index, env) * stride
    offset = np.broadcast_to(np.asarray(offset, dtype=np.float64), (n + 1,))
    diffs = np.nan_to_num(offset[1:] - offset[0], nan=0.0, posinf=0.0, neginf=0.0)
    return diffs[::-1].tolist()


def _buffer_strides(buf) -> list[int]:
    """Row-major element strides, or the buffer's own (padded) ones."""
    if buf.strides is not None:
        return [_size(s) for s in buf.strides]
    out, s = [], 1
    for d in reversed(buf.shape):
        out.append(s)
        s *= _size(d)
    return out[::-1]


def _eval(e: te.Expr, env: dict):
    """An index expression's value (a number, or a vector over the points of `_env`)."""
    match e:
        case te.Const(value):
            return value
        case te.Var():
            return env.get(e, SYMBOLIC)
        case te.Binary(op, a, b):
            x, y = _eval(a, env), _eval(b, env)
            if op == "+":
                return x + y
            if op == "-":
                return x - y
            if op == "*":
                return x * y
            y = np.where(np.asarray(y) == 0, 1, y)      # no division by zero in a guess
            return x // y if op == "//" else x % y if op == "%" else x / y
        case te.Unary("-", a):
            return -_eval(a, env)
        case te.Intrinsic("min" | "max" as name, (a, b)):
            return (np.minimum if name == "min" else np.maximum)(_eval(a, env), _eval(b, env))
        case te.Select(_, t, _):
            return _eval(t, env)        # either branch may run: take the first
        case te.Cast(a):
            return _eval(a, env)
        case Ramp(base) | Broadcast(base):
            return _eval(base, env)
    return 0    # a load used as an index, or math on indices: not a function of the loops


def _scan(e: te.Expr, loads: list) -> int:
    """Arithmetic operations on values in ``e`` (index arithmetic is addressing, not work),
    times their lanes; appends the loads, left to right, to ``loads``."""
    if isinstance(e, BufferLoad):
        loads.append(e)
        return 0
    ops = 0
    if isinstance(e, (te.Binary, te.Unary, te.Intrinsic, te.Select)) and e.dtype != INDEX:
        ops = _lanes(e.dtype)
    elif isinstance(e, te.Compare) and e.a.dtype != INDEX:
        ops = _lanes(e.a.dtype)
    for child in te.children(e):
        ops += _scan(child, loads)
    return ops


def _intrinsic_ops(intrin) -> int:
    """Operations of one micro-kernel call: its compute's iterations times its body's
    operations (plus the combine of a reduction); 1 when the intrinsic is not recorded."""
    if intrin is None:
        return 1
    out = intrin.compute.outputs[0]
    body, iters, extra = out.op.body, _elements(out), 0
    if isinstance(body, te.Reduce):
        iters *= math.prod(_size(ax.extent) for ax in body.axes)
        body, extra = body.body, 1
    return max(iters * (_scan(body, []) + extra), 1)


# ---------------------------------------------------------------------------- the vector

def _main_features(st: _Stmt, total_flops: float) -> list[float]:
    n = len(st.loops)
    slots = (st.slots + [None] * len(SLOTS))[:len(SLOTS)]
    out = []
    inner_iters = 1
    for level in range(DEPTH):
        if level < n:
            _, _, _, extent, kind = st.loops[level]
            inner_iters *= extent
            out += [_log(extent), *(float(kind == k) for k in KINDS)]
        else:
            out += [0.0] * (1 + len(KINDS))
        # traffic if what the loops from here inward touch stays in cache, and nothing
        # survives an iteration of the loop outside: Ansor's arithmetic-intensity curve
        outer_iters = st.iterations / inner_iters if inner_iters else 0.0
        traffic = sum(_at(a.bytes, level) for a in st.accesses) * outer_iters
        out.append(_log(st.flops / traffic) if traffic else 0.0)
        for a in slots:
            if a is None:
                out += [0.0, 0.0, 0.0]
            else:
                stride = a.strides[level] if level < n else 0.0
                out += [_log(abs(stride)), _log(_at(a.bytes, level)),
                        _log(_at(a.reuse, level))]
    for a in slots:
        if a is None:
            out += [0.0] * 4
        else:
            out += [1.0, float(a.buffer.scope != "global"), _log(a.bytes[-1]),
                    _log(a.reuse[-1])]
    per_kind = {k: math.prod(lp[3] for lp in st.loops if lp[4] == k) for k in KINDS}
    out += [_log(n), _log(st.iterations), _log(st.ops), _log(st.flops),
            _log(per_kind["vectorized"]), _log(per_kind["unrolled"]),
            _log(per_kind["parallel"]),
            st.flops / total_flops if total_flops else 0.0]
    return out


def _at(values: list, level: int) -> float:
    """Past the outermost loop, the whole nest's value repeats (the curve saturates)."""
    return values[min(level, len(values) - 1)]
