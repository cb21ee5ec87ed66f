"""C identifiers for IR names.

IR names need not be C identifiers (a split makes ``i.o``), may be C keywords (``int``) or
clash with what the generated code calls (``exp``, ``free``). Two IR names may also spell
the same identifier once cleaned (``i.o`` and ``i_o``). `Namer` hands out one identifier per
IR object and keeps them apart; the ``tdsl_`` prefix is kept for the generated helpers.
"""
from __future__ import annotations

import re

C_KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic
    _Imaginary _Noreturn _Static_assert _Thread_local bool true false asm typeof
""".split())

# What the included headers declare (C99 <stdlib.h>, <string.h>, <math.h> and common glibc
# additions) and what the generated code uses: a function called ``abs`` would conflict
# with the library's, a buffer called ``expf`` would hide the function it calls.
_MATH_ROOTS = """
    acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 exp10 expm1
    frexp ilogb ldexp log log10 log1p log2 logb modf scalbn scalbln cbrt fabs hypot pow sqrt
    erf erfc lgamma tgamma ceil floor nearbyint rint lrint llrint round lround llround trunc
    fmod remainder remquo copysign nan nextafter nexttoward fdim fmax fmin fma sincos gamma
    j0 j1 jn y0 y1 yn drem significand finite isinf isnan
""".split()
MATH_FUNCTIONS = frozenset(_MATH_ROOTS + [r + "f" for r in _MATH_ROOTS] +
                           [r + "l" for r in _MATH_ROOTS])
LIBRARY_NAMES = frozenset(_MATH_ROOTS + [r + "f" for r in _MATH_ROOTS] +
                          [r + "l" for r in _MATH_ROOTS] + """
    abs labs llabs div ldiv lldiv atof atoi atol atoll strtod strtof strtold strtol strtoll
    strtoul strtoull rand srand random srandom calloc malloc realloc free aligned_alloc
    posix_memalign abort atexit exit _Exit getenv system bsearch qsort mblen mbtowc wctomb
    mbstowcs wcstombs memcpy memmove memset memcmp memchr strcpy strncpy strcat strncat strcmp
    strncmp strlen strchr strrchr strstr strtok strerror strdup index rindex bcopy bzero main
    errno INFINITY NAN HUGE_VAL NULL INT64_MIN INT64_C int8_t int16_t int32_t int64_t uint8_t
    uint16_t uint32_t uint64_t size_t ptrdiff_t
""".split())

_INVALID = re.compile(r"[^A-Za-z0-9_]")


def identifier_chars(name: str) -> str:
    """``name`` with every character a C identifier may not hold replaced by ``_``."""
    return _INVALID.sub("_", name)


def sanitize(name: str, reserved: frozenset[str]) -> str:
    """A C identifier that reads like ``name``: ``i.o`` -> ``i_o``, ``abs`` -> ``abs_``.
    Reserved words and helper-like names (``tdsl_*``) get a trailing underscore, names C
    reserves for the implementation (``__x``, ``_X``) a leading ``v``."""
    ident = _INVALID.sub("_", name) or "v"
    if ident[0].isdigit() or ident.startswith("__") or \
            (ident[0] == "_" and ident[1:2].isupper()):
        ident = "v" + ident
    if ident in reserved or ident.startswith("tdsl_"):
        ident += "_"
    return ident


class Namer:
    """Gives each IR object (a `Var` or a `Buffer`) one C identifier, unique in a function.

    ``declare`` always returns an identifier no other object holds, so a declaration can
    never be a C redeclaration and a name bound in an inner scope cannot leak into a
    sibling's meaning. ``bind``/``unbind`` keep IR scoping: an inner binding of a variable
    hides the outer one while its body prints.
    """

    def __init__(self, reserved: frozenset[str]):
        self.reserved = reserved
        self._taken: set[str] = set()
        self._env: dict[object, list[str]] = {}

    def fresh(self, hint: str) -> str:
        base = sanitize(hint, self.reserved)
        ident, n = base, 0
        while ident in self._taken:
            n += 1
            ident = f"{base}_{n}"
        self._taken.add(ident)
        return ident

    def bind(self, key, hint: str) -> str:
        ident = self.fresh(hint)
        self._env.setdefault(key, []).append(ident)
        return ident

    def bind_as(self, key, ident: str) -> None:
        """Bind ``key`` to an identifier from `fresh` (or one it held before, for a sibling
        loop over the same variable)."""
        self._env.setdefault(key, []).append(ident)

    def unbind(self, key) -> None:
        self._env[key].pop()

    def lookup(self, key) -> str | None:
        stack = self._env.get(key)
        return stack[-1] if stack else None
