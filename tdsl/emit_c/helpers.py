"""Small C functions the generated code calls, emitted only when used.

Each helper pins down a semantic C leaves open or gets wrong for tdsl:
- ``//`` and ``%`` are floor division and floor modulo (C truncates toward zero). Integer
  division by zero gives 0 and ``INT64_MIN // -1`` wraps, as numpy does, instead of the
  SIGFPE the plain C operators raise. With a constant divisor gcc folds the checks away.
- float ``//`` and ``%`` follow numpy's ``divmod`` (the sign of the divisor, floored quotient).
- ``min``/``max`` follow ``numpy.minimum``/``maximum``: a NaN in either argument propagates
  (``fminf`` would drop it); gcc compiles the comparison to vector min/max and a blend.
- vector loads and stores go through ``memcpy``: the address is only element-aligned (a
  ramp may start anywhere), and a dereference of ``tdsl_f32x16*`` would promise 64-byte
  alignment (gcc emits an aligned move that faults) and break strict aliasing. gcc turns
  the ``memcpy`` into one unaligned vector move.
"""
from __future__ import annotations

from ..lowering.dtypes import FLOATS, to_c

_FLOOR_INT = """\
{q} int64_t tdsl_floordiv_i64(int64_t a, int64_t b) {{
    if (b == 0) return 0;
    if (b == -1) return (int64_t)(0u - (uint64_t)a);
    int64_t q = a / b;
    return q - ((a % b != 0) & ((a < 0) != (b < 0)));
}}
{q} int64_t tdsl_floormod_i64(int64_t a, int64_t b) {{
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}}"""

_FLOOR_FLOAT = """\
{q} {t} tdsl_floormod_{d}({t} a, {t} b) {{
    {t} m = fmod{s}(a, b);
    if (m != 0) {{
        if ((b < 0) != (m < 0)) m += b;
    }} else {{
        m = copysign{s}(0, b);
    }}
    return m;
}}
{q} {t} tdsl_floordiv_{d}({t} a, {t} b) {{
    if (b == 0) return a / b;
    {t} m = fmod{s}(a, b);
    {t} d = (a - m) / b;
    if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
    if (d == 0) return copysign{s}(0, a / b);
    {t} f = floor{s}(d);
    return (d - f > ({t})0.5) ? f + 1 : f;
}}"""

_MINMAX_FLOAT = """\
{q} {t} tdsl_min_{d}({t} a, {t} b) {{ return (a <= b || a != a) ? a : b; }}
{q} {t} tdsl_max_{d}({t} a, {t} b) {{ return (a >= b || a != a) ? a : b; }}"""

_MINMAX_INT = """\
{q} {t} tdsl_min_{d}({t} a, {t} b) {{ return a <= b ? a : b; }}
{q} {t} tdsl_max_{d}({t} a, {t} b) {{ return a >= b ? a : b; }}"""

_ABS_INT = "{q} {t} tdsl_abs_{d}({t} a) {{ return a < 0 ? ({t})-a : a; }}"

_SIGMOID = "{q} {t} tdsl_sigmoid_{d}({t} x) {{ return 1 / (1 + exp{s}(-x)); }}"

_VECTOR = """\
typedef {t} {v} __attribute__((vector_size({bytes})));
{q} {v} tdsl_load_{vd}(const {t}* p) {{ {v} x; memcpy(&x, p, sizeof x); return x; }}
{q} void tdsl_store_{vd}({t}* p, {v} x) {{ memcpy(p, &x, sizeof x); }}
{q} {v} tdsl_bcast_{vd}({t} s) {{ return ({v}){{{lanes}}}; }}"""

# Heap workspace: 64-byte aligned (a cache line, an AVX-512 vector). The element count is
# checked before multiplying (a wrapped size_t would allocate a few bytes and let the kernel
# write past them); a failure is recorded in *status instead of crashing, so the caller can
# raise MemoryError. The store is atomic: allocations may run inside an OpenMP parallel loop.
_ALLOC = """\
{q} void* tdsl_alloc(int64_t count, size_t elem_size, int* status) {{
    void* p = NULL;
    if (count >= 0 && (uint64_t)count <= (SIZE_MAX - 64) / elem_size) {{
        size_t bytes = (size_t)count * elem_size;
        p = aligned_alloc(64, bytes < 64 ? 64 : (bytes + 63) / 64 * 64);
    }}
    if (p == NULL) __atomic_store_n(status, 1, __ATOMIC_RELAXED);
    return p;
}}"""


_SIZES = {"f32": 4, "f64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "u8": 1, "bool": 1}


def element_size(dtype: str) -> int:
    return _SIZES[dtype]


def _suffix(dtype: str) -> str:
    return "f" if dtype == "f32" else ""


def vector_type_name(scalar: str, lanes: int) -> str:
    return f"tdsl_{scalar}x{lanes}"


class Helpers:
    """The helpers one translation unit needs, in first-use order, each emitted once."""

    def __init__(self, qualifier: str = "static inline"):
        self.qualifier = qualifier
        self._texts: dict[str, str] = {}

    def _add(self, key: str, template: str, dtype: str = "i64", **extra) -> None:
        if key not in self._texts:
            self._texts[key] = template.format(q=self.qualifier, t=to_c(dtype), d=dtype,
                                               s=_suffix(dtype), **extra)

    def floor_div(self, dtype: str, op: str) -> str:
        """Name of the floor ``//`` (op "div") or ``%`` (op "mod") helper for ``dtype``."""
        if dtype in FLOATS:
            self._add(f"floor_{dtype}", _FLOOR_FLOAT, dtype)
            return f"tdsl_floor{op}_{dtype}"
        self._add("floor_i64", _FLOOR_INT)
        return f"tdsl_floor{op}_i64"

    def min_max(self, dtype: str, name: str) -> str:
        self._add(f"minmax_{dtype}", _MINMAX_FLOAT if dtype in FLOATS else _MINMAX_INT, dtype)
        return f"tdsl_{name}_{dtype}"

    def abs_int(self, dtype: str) -> str:
        self._add(f"abs_{dtype}", _ABS_INT, dtype)
        return f"tdsl_abs_{dtype}"

    def sigmoid(self, dtype: str) -> str:
        self._add(f"sigmoid_{dtype}", _SIGMOID, dtype)
        return f"tdsl_sigmoid_{dtype}"

    def vector(self, scalar: str, lanes: int) -> str:
        """Declare the GNU vector type for ``scalar`` x ``lanes`` and its load/store/broadcast."""
        name = vector_type_name(scalar, lanes)
        self._add(f"vector_{name}", _VECTOR, scalar, v=name, vd=f"{scalar}x{lanes}",
                  lanes=", ".join(["s"] * lanes), bytes=lanes * _SIZES[scalar])
        return name

    def alloc(self) -> str:
        self._add("alloc", _ALLOC)
        return "tdsl_alloc"

    def render(self) -> list[str]:
        return list(self._texts.values())

