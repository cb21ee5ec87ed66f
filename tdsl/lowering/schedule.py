"""Schedules as data: an immutable tuple of directives applied to a `te.Function` when lowering.

Stages are named by their tensor's name; axes by strings. A stage starts with its data axes
(the Compute axes' var names) followed by the axes of a top-level reduction, in that order,
and each directive changes that list of loops. New axes get the names the user gives, or
``i.o``/``i.i`` for a split of ``i``, ``i.j.f`` for a fuse of ``i`` and ``j`` (the C emitter
turns them into identifiers). Cache stages are named ``A.local`` (tensor, scope).

Numbers in directives may be ``Knob("ti")`` references to a ``KnobDecl`` of the schedule;
`Schedule.resolve` fills them in from a tuner configuration, or from the defaults. A
``When(cond, then, otherwise)`` directive applies one of two directive lists depending on
the knobs (``if pack { ... }`` in a block), and ``Schedule.constraints`` (``require ...``)
rule configurations out: together they make a schedule a template of a configuration space.

The directives, and the loop nest each makes (``i`` of extent ``E``):

- ``Split(C, i, f)``: ``for i.o in [0, ceil(E/f)): for i.i in [0, f)`` with
  ``i == i.o * f + i.i``; when ``f`` does not divide ``E`` the body runs under
  ``if i.o * f + i.i < E`` (and the tail pass partitions the loop when the guard would stop
  vectorization).
- ``Tile(C, x, y, fx, fy)``: split both, then order ``x.o, y.o, x.i, y.i``.
- ``Fuse(C, (i, j))``: ``for i.j.f in [0, Ei * Ej)`` with ``i == f // Ej``, ``j == f % Ej``;
  the axes must be adjacent loops of one kind.
- ``Reorder(C, axes)``: the named loops take, in the order given, the positions they hold.
  A reduction loop may move outside a data loop: the output is initialised before the first
  reduction loop, so the accumulation order is all that changes.
- ``ComputeAt(P, C, a)``: P is computed inside loop ``a`` of its consumer C, for the
  region one iteration of ``a`` needs (bound inference), in a local buffer. P's other
  readers, if any, must be computed at that same loop (the region is the union of what
  they all read).
- ``ComputeInline(P)``: P's expression is substituted into its readers.
- ``ComputeRoot(P)``: P gets its own loop nest and a global workspace (the default).
- ``CacheRead(T, scope, readers)``: a new stage ``T.scope[...] = T[...]`` read by ``readers``.
- ``CacheWrite(C, scope)``: C's computation moves to a new stage ``C.scope``; C copies it.
  Must come before C's loops are transformed.
- ``SetScope(P, scope)``: P's buffer in ``global``, ``shared`` or ``local`` memory.
- ``Vectorize``/``Unroll``/``Parallel``/``Bind``: the loop's kind. Vectorizing or
  parallelizing a reduction loop is refused (lanes/threads would race on the accumulator).
  A vectorized loop whose extent is not a compile-time constant, or whose body is not
  straight-line stores, stays a loop of kind VECTORIZED for the emitter to pragma.
- ``StorageAlign(P, i, factor, offset)``: the stride of P's dimension ``i`` becomes the
  smallest ``k * factor + offset`` at least the dense stride (pads rows; not the last axis).
- ``Tensorize(C, a, intrin)``: the loops from ``a`` inward are replaced by a call of the
  intrinsic's micro-kernel; see `TensorIntrin`.
- ``Pack(P, i, f)``: P's layout, not its loops: dimension ``i`` (extent ``E``) is stored
  blocked, ``P[a, i, b]`` at ``P'[i // f, a, b, i % f]``: ``i.o`` (extent ``ceil(E/f)``)
  outermost, the new dimension ``i.i`` (extent ``f``) innermost, so each block is one
  contiguous panel; P's data axes become those dimensions and its readers read through
  the map. Positions past ``E`` are
  computed too (zeros for a stage without a reduction; input reads past the end are
  guarded) and never read. With `CacheRead` this packs an input (``W`` as ``[F/16, C, KH,
  KW, 16]``); with `CacheWrite` it gives a register tile the layout ``NCHW[16]c``.
- ``Pad(P, i, m)``: P's dimension ``i`` is computed and stored past its extent: over the
  region its readers read, not clipped to P's shape, rounded up to a multiple of ``m``
  (``m == 1``: just not clipped). The extra positions hold P's own formula there (input
  reads past an end are guarded) and no result depends on them; they let a consumer's vector
  loop over ``i`` run without a tail, and a producer cover every position such a consumer
  reads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..errors import ScheduleError, Span
from . import te


@dataclass(frozen=True)
class Knob:
    """A reference to a tunable number, resolved against a configuration."""
    name: str
    span: Span | None = field(default=None, compare=False)


@dataclass(frozen=True)
class KnobExpr:
    """An expression over knob values, kept as data: ``KnobExpr("<=", (KnobExpr("*", (Knob("ti"),
    Knob("tj"))), 512))``. Operands are knobs, constants (int, float, bool, str) or KnobExprs."""
    op: str
    args: tuple
    span: Span | None = field(default=None, compare=False)

    def __str__(self) -> str:
        if self.op == "not":
            return f"not {_text(self.args[0])}"
        if self.op in ("min", "max"):
            return f"{self.op}({', '.join(_text(a) for a in self.args)})"
        return f" {self.op} ".join(_text(a) for a in self.args)


_KNOB_OPS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b, "/": lambda a, b: a / b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "and": lambda a, b: bool(a) and bool(b), "or": lambda a, b: bool(a) or bool(b),
    "min": min, "max": max,
}


def knob_value(e, values: dict):
    """The value of a knob expression (a `Knob`, a `KnobExpr` or a constant) for the knob
    ``values``; a `ScheduleError` for an undeclared knob or an operation that fails."""
    if isinstance(e, Knob):
        if e.name not in values:
            raise ScheduleError(f"knob {e.name} is not declared; knobs are: {_names(values)}",
                                e.span, hint=f"declare it with `knob {e.name} in [...]`")
        return values[e.name]
    if not isinstance(e, KnobExpr):
        return e
    args = [knob_value(a, values) for a in e.args]
    try:
        if e.op == "not":
            return not args[0]
        if e.op == "neg":
            return -args[0]
        return _KNOB_OPS[e.op](*args)
    except (TypeError, ZeroDivisionError) as err:
        raise ScheduleError(f"can't evaluate `{e}` for {values}: {err}", e.span) from None


def _text(a) -> str:
    if isinstance(a, Knob):
        return a.name
    if isinstance(a, KnobExpr):
        return str(a) if a.op in ("not", "neg") else f"({a})"
    return repr(a) if isinstance(a, str) else str(a).lower() if isinstance(a, bool) else str(a)


@dataclass(frozen=True)
class KnobDecl:
    """``knob ti in [8, 16, 32]``: a tunable with its choices; ``default`` is used without a
    configuration (the first choice when not given)."""
    name: str
    choices: tuple
    default: object = None
    span: Span | None = field(default=None, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "choices", tuple(self.choices))
        if not self.choices:
            raise ScheduleError(f"knob {self.name} has no choices", self.span)
        if self.default is None:
            object.__setattr__(self, "default", self.choices[0])
        elif self.default not in self.choices:
            raise ScheduleError(f"default {self.default!r} of knob {self.name} is not one of "
                                f"its choices {list(self.choices)}", self.span)


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """A micro-kernel that replaces a loop nest.

    ``compute`` describes what the nest computes: one output, e.g. ``c[i] = sum[k](a[k] *
    b[k, i])`` over fixed extents. ``c_impl`` is C source defining ``void name(...)`` taking,
    for each input of ``compute`` in order and then the output, a pointer to its first
    element followed by one ``int64_t`` stride (in elements) per dimension. For a reduction
    the kernel *accumulates* into the output (``c[i] += ...``): the stage's own init loop
    has already set it to the identity.

    A reduction kernel may keep its output in registers of its own across calls (AMX's
    tiles), as TVM's reduce_init/reduce_update split does: then ``init`` and ``finish``
    name two more functions of ``c_impl``, each taking the output's pointer and strides.
    ``init`` replaces the init loop (the output's sums start at the identity), the calls
    over the reduction loops around the nest accumulate, and ``finish``, after them, writes
    the sums to the output. The loops between the stage's first reduction loop and the
    tensorized axis must then all be reduction loops: one output tile stays put while they
    run.
    """
    name: str
    compute: te.Function
    c_impl: str
    init: str = ""
    finish: str = ""


# ---------------------------------------------------------------------------- directives

def _span():
    return field(default=None, compare=False)


@dataclass(frozen=True)
class Split:
    """``axis == outer * factor + inner``; a tail (factor not dividing) is guarded."""
    stage: str
    axis: str
    factor: int | Knob
    outer: str | None = None
    inner: str | None = None
    span: Span | None = _span()

    def __post_init__(self):
        _default(self, "outer", f"{self.axis}.o")
        _default(self, "inner", f"{self.axis}.i")


@dataclass(frozen=True)
class Tile:
    """Split ``x`` by ``fx`` and ``y`` by ``fy``, then order ``xo, yo, xi, yi``."""
    stage: str
    x: str
    y: str
    fx: int | Knob
    fy: int | Knob
    xo: str | None = None
    yo: str | None = None
    xi: str | None = None
    yi: str | None = None
    span: Span | None = _span()

    def __post_init__(self):
        for name, axis, part in (("xo", self.x, "o"), ("yo", self.y, "o"),
                                 ("xi", self.x, "i"), ("yi", self.y, "i")):
            _default(self, name, f"{axis}.{part}")


@dataclass(frozen=True)
class Fuse:
    """Adjacent axes ``(a, b)`` become one: ``a == fused // Eb``, ``b == fused % Eb``."""
    stage: str
    axes: tuple[str, ...]
    fused: str | None = None
    span: Span | None = _span()

    def __post_init__(self):
        object.__setattr__(self, "axes", tuple(self.axes))
        _default(self, "fused", ".".join(self.axes) + ".f")


@dataclass(frozen=True)
class Reorder:
    """The named loops take, in this order, the positions they occupy."""
    stage: str
    axes: tuple[str, ...]
    span: Span | None = _span()

    def __post_init__(self):
        object.__setattr__(self, "axes", tuple(self.axes))


@dataclass(frozen=True)
class ComputeAt:
    """Compute ``stage`` inside loop ``axis`` of ``consumer``, for the region it reads."""
    stage: str
    consumer: str
    axis: str
    span: Span | None = _span()


@dataclass(frozen=True)
class ComputeInline:
    """Substitute ``stage``'s expression into its readers (no reduction, not an output)."""
    stage: str
    span: Span | None = _span()


@dataclass(frozen=True)
class ComputeRoot:
    """Give ``stage`` its own loop nest over its whole extent (the default)."""
    stage: str
    span: Span | None = _span()


@dataclass(frozen=True)
class CacheRead:
    """A new stage ``name[x] == tensor[x]`` in ``scope``, read by ``readers`` instead."""
    tensor: str
    scope: str
    readers: tuple[str, ...] = ()          # () = every stage that reads the tensor
    name: str | None = None
    span: Span | None = _span()

    def __post_init__(self):
        object.__setattr__(self, "readers", tuple(self.readers))
        _default(self, "name", f"{self.tensor}.{self.scope}")


@dataclass(frozen=True)
class RFactor:
    """The reduction over ``axis`` of ``stage``, in two steps (TVM's rfactor): a new stage
    ``name`` holds ``factor`` partial results, ``name[..., a_i] = combine over a_o of
    body(axis = a_o * factor + a_i)`` for the whole multiples of ``factor`` (``a_o``, ``a_i``
    are ``axis`` + ``_o``/``_i``), and ``stage`` combines those and the last ``extent %
    factor`` elements. The partial results' axis ``a_i`` is a data axis, so it can be
    vectorized: ``rfactor(S.d, lanes)`` makes a row reduction one vector of lanes wide."""
    stage: str
    axis: str
    factor: int | Knob
    name: str | None = None
    span: Span | None = _span()

    def __post_init__(self):
        _default(self, "name", f"{self.stage}.rf")


@dataclass(frozen=True)
class CacheWrite:
    """``stage``'s computation moves to ``name`` in ``scope``; ``stage`` copies it out."""
    stage: str
    scope: str
    name: str | None = None
    span: Span | None = _span()

    def __post_init__(self):
        _default(self, "name", f"{self.stage}.{self.scope}")


@dataclass(frozen=True)
class LoopKind:
    """A directive that only sets the kind of one loop (the subclasses say which)."""
    stage: str
    axis: str
    span: Span | None = _span()


@dataclass(frozen=True)
class Vectorize(LoopKind):
    """Lanes over a data loop; straight-line bodies become vector code."""


@dataclass(frozen=True)
class Unroll(LoopKind):
    """Copies of the body per iteration (small constant extents), else a pragma."""


@dataclass(frozen=True)
class Parallel(LoopKind):
    """Iterations on threads (data loops only)."""


@dataclass(frozen=True)
class Bind:
    """A GPU thread axis (``blockIdx.x``, ``threadIdx.x``, ...) for a data loop."""
    stage: str
    axis: str
    thread_tag: str
    span: Span | None = _span()


@dataclass(frozen=True)
class StorageAlign:
    """``stride[axis] == k * factor + offset``, the least such at least the dense one."""
    stage: str
    axis: str
    factor: int | Knob
    offset: int | Knob = 0
    span: Span | None = _span()


@dataclass(frozen=True)
class Tensorize:
    """The loops from ``axis`` inward become one call of ``intrinsic``."""
    stage: str
    axis: str
    intrinsic: TensorIntrin
    span: Span | None = _span()


@dataclass(frozen=True)
class Pack:
    """Store dimension ``axis`` of ``stage`` blocked by ``factor``: ``axis.o`` outermost,
    ``axis.i`` (extent ``factor``) innermost."""
    stage: str
    axis: str
    factor: int | Knob
    outer: str | None = None
    inner: str | None = None
    span: Span | None = _span()

    def __post_init__(self):
        _default(self, "outer", f"{self.axis}.o")
        _default(self, "inner", f"{self.axis}.i")


@dataclass(frozen=True)
class Pad:
    """Compute and store dimension ``axis`` of ``stage`` past its extent, rounded up to a
    multiple of ``multiple`` (1: only as far as its readers read)."""
    stage: str
    axis: str
    multiple: int | Knob = 1
    span: Span | None = _span()


@dataclass(frozen=True)
class Prefetch:
    """While one iteration of ``stage.axis`` runs, fetch into the cache what its next
    iteration reads of ``tensor``, in equal slices at the iterations of ``at_stage.at_axis``
    (a loop inside it): a block of weights streams in while the block before it is used from
    cache, instead of all at once when the next block starts. ``axis`` is a loop of the
    stage or an axis of a fuse. See `passes.prefetch`."""
    tensor: str
    stage: str
    axis: str
    at_stage: str
    at_axis: str
    span: Span | None = _span()


@dataclass(frozen=True)
class When:
    """``then`` when ``cond`` (a knob expression) holds for the configuration, else
    ``otherwise``: how a template chooses whether to cache, which loop is parallel, ..."""
    cond: object
    then: tuple
    otherwise: tuple = ()
    span: Span | None = _span()

    def __post_init__(self):
        object.__setattr__(self, "then", tuple(self.then))
        object.__setattr__(self, "otherwise", tuple(self.otherwise))


@dataclass(frozen=True)
class SetScope:
    """The memory ``stage``'s buffer lives in (TVM's ``set_scope``): ``shared`` makes a stage
    computed at a block's loop one buffer for the block's threads (the partial results of a
    reduction split over threads, say), ``local`` one per thread."""
    stage: str
    scope: str
    span: Span | None = _span()


DIRECTIVES = (Split, Tile, Fuse, Reorder, ComputeAt, ComputeInline, ComputeRoot, CacheRead,
              CacheWrite, Vectorize, Unroll, Parallel, Bind, StorageAlign, Tensorize, Pack, Pad,
              SetScope, Prefetch)
SCOPES = ("global", "shared", "local")
THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z", "vthread")


def _default(d, name: str, value: str) -> None:
    if getattr(d, name) is None:
        object.__setattr__(d, name, value)


# ---------------------------------------------------------------------------- the schedule

@dataclass(frozen=True)
class Schedule:
    """A function's schedule: directives in order, and the knobs they may refer to.

    Every method returns a new Schedule (``s2 = s.split("C", "i", 8)``); nothing is checked
    until the schedule is applied by `tdsl.lowering.lower.lower`, which raises
    `ScheduleError` at the first illegal directive.
    """
    fn: te.Function
    directives: tuple = ()
    knobs: tuple[KnobDecl, ...] = ()
    constraints: tuple = ()              # knob expressions every configuration satisfies

    @staticmethod
    def from_directives(fn: te.Function, directives, knobs=()) -> "Schedule":
        return Schedule(fn, tuple(directives), tuple(knobs))

    def _with(self, d) -> "Schedule":
        return dataclasses.replace(self, directives=self.directives + (d,))

    def knob(self, name: str, choices, default=None, span: Span | None = None) -> "Schedule":
        if any(k.name == name for k in self.knobs):
            raise ScheduleError(f"knob {name} is declared twice", span)
        decl = KnobDecl(name, tuple(choices), default, span)
        return dataclasses.replace(self, knobs=self.knobs + (decl,))

    def require(self, cond, span: Span | None = None) -> "Schedule":
        """Rule out the configurations for which ``cond`` (a `KnobExpr`) is false."""
        return dataclasses.replace(self, constraints=self.constraints + (_condition(cond, span),))

    def when(self, cond, then, otherwise=None, span: Span | None = None) -> "Schedule":
        """Apply ``then(s)`` (a function adding directives to a schedule) when ``cond`` holds,
        else ``otherwise(s)``. ``cond`` is a `KnobExpr`, a `Knob`, or a dict ``{knob: value}``
        meaning every named knob has that value."""
        def branch(f) -> tuple:
            return f(Schedule(self.fn, (), self.knobs)).directives if f else ()
        return self._with(When(_condition(cond, span), branch(then), branch(otherwise), span))

    def split(self, stage, axis, factor, outer=None, inner=None, span=None) -> "Schedule":
        return self._with(Split(stage, axis, factor, outer, inner, span))

    def tile(self, stage, x, y, fx, fy, xo=None, yo=None, xi=None, yi=None,
             span=None) -> "Schedule":
        return self._with(Tile(stage, x, y, fx, fy, xo, yo, xi, yi, span))

    def fuse(self, stage, *axes, fused=None, span=None) -> "Schedule":
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return self._with(Fuse(stage, tuple(axes), fused, span))

    def reorder(self, stage, *axes, span=None) -> "Schedule":
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return self._with(Reorder(stage, tuple(axes), span))

    def compute_at(self, stage, consumer, axis, span=None) -> "Schedule":
        return self._with(ComputeAt(stage, consumer, axis, span))

    def compute_inline(self, stage, span=None) -> "Schedule":
        return self._with(ComputeInline(stage, span))

    def compute_root(self, stage, span=None) -> "Schedule":
        return self._with(ComputeRoot(stage, span))

    def cache_read(self, tensor, scope, readers=(), name=None, span=None) -> "Schedule":
        if isinstance(readers, str):
            readers = (readers,)
        return self._with(CacheRead(tensor, scope, tuple(readers), name, span))

    def cache_write(self, stage, scope, name=None, span=None) -> "Schedule":
        return self._with(CacheWrite(stage, scope, name, span))

    def rfactor(self, stage, axis, factor, name=None, span=None) -> "Schedule":
        return self._with(RFactor(stage, axis, factor, name, span))

    def set_scope(self, stage, scope, span=None) -> "Schedule":
        return self._with(SetScope(stage, scope, span))

    def vectorize(self, stage, axis, span=None) -> "Schedule":
        return self._with(Vectorize(stage, axis, span))

    def unroll(self, stage, axis, span=None) -> "Schedule":
        return self._with(Unroll(stage, axis, span))

    def parallel(self, stage, axis, span=None) -> "Schedule":
        return self._with(Parallel(stage, axis, span))

    def bind(self, stage, axis, thread_tag, span=None) -> "Schedule":
        return self._with(Bind(stage, axis, thread_tag, span))

    def storage_align(self, stage, axis, factor, offset=0, span=None) -> "Schedule":
        return self._with(StorageAlign(stage, axis, factor, offset, span))

    def tensorize(self, stage, axis, intrinsic: TensorIntrin, span=None) -> "Schedule":
        return self._with(Tensorize(stage, axis, intrinsic, span))

    def pack(self, stage, axis, factor, outer=None, inner=None, span=None) -> "Schedule":
        """Store ``stage``'s dimension ``axis`` blocked by ``factor`` (see `Pack`)."""
        return self._with(Pack(stage, axis, factor, outer, inner, span))

    def pad(self, stage, axis, multiple=1, span=None) -> "Schedule":
        """Compute ``stage``'s dimension ``axis`` past its extent (see `Pad`)."""
        return self._with(Pad(stage, axis, multiple, span))

    def prefetch(self, tensor, stage, axis, at_stage, at_axis, span=None) -> "Schedule":
        """Fetch ``tensor``'s data for the next iteration of ``stage.axis`` ahead, spread
        over the iterations of ``at_stage.at_axis`` (see `Prefetch`)."""
        return self._with(Prefetch(tensor, stage, axis, at_stage, at_axis, span))

    # -------------------------------------------------------------------- knobs

    def default_config(self) -> dict:
        return {k.name: k.default for k in self.knobs}

    def knob_values(self, config: dict | None = None) -> dict:
        """Every knob's value: from ``config``, else its default. Raises `ScheduleError` for
        a knob the schedule does not declare, a value not among its choices, or a
        configuration that breaks a ``require``."""
        decls = {k.name: k for k in self.knobs}
        config = dict(config or {})
        for name, value in config.items():
            if name not in decls:
                raise ScheduleError(f"the configuration sets knob {name}, which the schedule "
                                    f"does not declare; knobs are: {_names(decls)}")
            if value not in decls[name].choices:
                raise ScheduleError(f"the configuration sets knob {name} to {value!r}, which "
                                    f"is not one of its choices {list(decls[name].choices)}",
                                    decls[name].span)
        values = {n: config.get(n, k.default) for n, k in decls.items()}
        for cond in self.constraints:
            if not knob_value(cond, values):
                raise ScheduleError(f"the configuration {values} breaks `require {cond}`",
                                    getattr(cond, "span", None))
        return values

    def resolve(self, config: dict | None = None) -> tuple:
        """The directives for ``config`` (defaults for knobs it leaves out): every `Knob`
        replaced by its value, every `When` by the branch that applies."""
        return _resolve_all(self.directives, self.knob_values(config))


def _names(d) -> str:
    return ", ".join(d) if d else "(none)"


def _resolve_all(directives, values: dict) -> tuple:
    out = []
    for d in directives:
        if isinstance(d, When):
            branch = d.then if knob_value(d.cond, values) else d.otherwise
            out.extend(_resolve_all(branch, values))
        else:
            out.append(_fill_knobs(d, values))
    return tuple(out)


def _fill_knobs(d, values: dict):
    changes = {f.name: knob_value(getattr(d, f.name), values) for f in dataclasses.fields(d)
               if isinstance(getattr(d, f.name), (Knob, KnobExpr))}
    return dataclasses.replace(d, **changes) if changes else d


def _condition(cond, span):
    """A knob expression from what `Schedule.when`/`require` accept."""
    if isinstance(cond, dict):
        terms = [KnobExpr("==", (Knob(k), v), span) for k, v in cond.items()]
        if not terms:
            raise ScheduleError("an empty condition", span)
        out = terms[0]
        for t in terms[1:]:
            out = KnobExpr("and", (out, t), span)
        return out
    if isinstance(cond, (Knob, KnobExpr, bool)):
        return cond
    raise ScheduleError(f"a condition is a knob expression or a dict of knob values, "
                        f"got {cond!r}", span)
