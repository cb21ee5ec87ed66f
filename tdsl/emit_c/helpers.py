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

import math

from ..lowering.dtypes import (FLOATS, MINIFLOATS, UNSIGNED, int_range, minifloat_format,
                               saturation_top, to_c)
from . import workspace

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

_FLOOR_UNSIGNED = """\
{q} {t} tdsl_floordiv_{d}({t} a, {t} b) {{ return b == 0 ? ({t})0 : ({t})(a / b); }}
{q} {t} tdsl_floormod_{d}({t} a, {t} b) {{ return b == 0 ? ({t})0 : ({t})(a % b); }}"""

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

# Branch-free, so a relu on signed data doesn't mispredict half its elements (a `||` form
# compiled to two data-dependent jumps: 3x slower in a fused conv epilogue). `b > a ? b : a`
# is exactly x86's maxss (it keeps a when unordered, so a NaN in a propagates); a NaN in b
# is then picked through an integer mask, with no branch (setp and bit operations).
_MINMAX_FLOAT = """\
{q} {t} tdsl_pick_nan_{d}({t} t, {t} b) {{
    {u} m = -({u})(b != b), ub, ut;
    memcpy(&ub, &b, sizeof b);
    memcpy(&ut, &t, sizeof t);
    ut = (m & ub) | (~m & ut);
    memcpy(&t, &ut, sizeof t);
    return t;
}}
{q} {t} tdsl_min_{d}({t} a, {t} b) {{ return tdsl_pick_nan_{d}(b < a ? b : a, b); }}
{q} {t} tdsl_max_{d}({t} a, {t} b) {{ return tdsl_pick_nan_{d}(b > a ? b : a, b); }}"""

# Without memcpy (OpenCL C has none) and where a branch costs nothing (GPUs compile the
# select to one instruction): the same NaN-propagating results.
_MINMAX_FLOAT_SELECT = """\
{q} {t} tdsl_min_{d}({t} a, {t} b) {{ return (a <= b || a != a) ? a : b; }}
{q} {t} tdsl_max_{d}({t} a, {t} b) {{ return (a >= b || a != a) ? a : b; }}"""

_MINMAX_INT = """\
{q} {t} tdsl_min_{d}({t} a, {t} b) {{ return a <= b ? a : b; }}
{q} {t} tdsl_max_{d}({t} a, {t} b) {{ return a >= b ? a : b; }}"""

# Float vectors: GNU C compares vectors lane by lane into a mask of signed integers (-1/0),
# but `?:` on vectors is C++ only, so the pick is a blend through the mask; NaN propagates as
# in the scalar helpers. gcc compiles it to vminps/vmaxps and a blend.
#
# With AVX-512 or AVX a min or max is the scalar helpers' form: vminps/vmaxps with b first
# (`b < a ? b : a`: a's NaN and ties kept), then b where b is a NaN. Three instructions
# against the mask form's two compares, an or of masks and a blend: ResNet-50's 3x3/2 max
# pool at 112 x 112 x 64 took 100-105 us against 77-85 now (Zen 4, whose mask compares
# issue one a cycle; one thread, the kernel in a C loop); its x86-64-v3 (AVX2) code on the
# same host 99-100 -> 73-75 us.
#
# Integer vectors take the same blend with no NaN to keep (no NaN tests in {keep_min}; gcc: a
# vpcmpub and a vpblendmb with AVX-512). A quantized ResNet-50's u8 max pool took 351 us with
# the lanes one by one, 32 so (Zen 4, AVX-512, one thread).
_MINMAX_VECTOR = """\
typedef {it} {mv} __attribute__((vector_size({bytes})));
{q} {v} tdsl_min_{vd}({v} a, {v} b) {{
{fast_min}    {mv} m = {keep_min};
    return ({v})((m & ({mv})a) | (~m & ({mv})b));
}}
{q} {v} tdsl_max_{vd}({v} a, {v} b) {{
{fast_max}    {mv} m = {keep_max};
    return ({v})((m & ({mv})a) | (~m & ({mv})b));
}}"""

# per (scalar, lanes): the guard, the min/max intrinsic, its type, and the pick of b where b
# is a NaN
_MINMAX_X86 = {
    ("f32", 16): ("defined(__AVX512F__)", "_mm512_{}_ps", "__m512",
                  "_mm512_mask_mov_ps(r, _mm512_cmp_ps_mask({b}, {b}, _CMP_UNORD_Q), {b})"),
    ("f64", 8): ("defined(__AVX512F__)", "_mm512_{}_pd", "__m512d",
                 "_mm512_mask_mov_pd(r, _mm512_cmp_pd_mask({b}, {b}, _CMP_UNORD_Q), {b})"),
    ("f32", 8): ("defined(__AVX__)", "_mm256_{}_ps", "__m256",
                 "_mm256_blendv_ps(r, {b}, _mm256_cmp_ps({b}, {b}, _CMP_UNORD_Q))"),
    ("f64", 4): ("defined(__AVX__)", "_mm256_{}_pd", "__m256d",
                 "_mm256_blendv_pd(r, {b}, _mm256_cmp_pd({b}, {b}, _CMP_UNORD_Q))"),
}

# min/max of a float and a constant that is not NaN (ReLU6's clamp, a quantize's range): a
# NaN can only come from x, so one compare and a select keep it (the general helpers above
# test both operands: two compares, an or and a blend), and where a tie picks x (``_xk``),
# on x86 hosts, one min/max instruction ({fast}, `Helpers.min_max_const`). {op} is ``<``
# for min and ``>`` for max; ``k`` is picked on a tie when it is the first argument, as the
# general helpers do (the sign of a zero survives; the printer takes ``_xk`` for a nonzero
# constant first, whose ties are one value).
_MINMAX_CONST = """\
{q} {t} tdsl_{name}{first}_{d}({t} x, {t} k) {{ return k {op}{tie} x ? k : x; }}"""
_MINMAX_CONST_VECTOR = """\
typedef {it} {mv} __attribute__((vector_size({bytes})));
{q} {v} tdsl_{name}{first}_{vd}({v} x, {v} k) {{
{fast}    {mv} m = k {op}{tie} x;
    return ({v})((m & ({mv})k) | (~m & ({mv})x));
}}"""

_ABS_INT = "{q} {t} tdsl_abs_{d}({t} a) {{ return a < 0 ? ({t})-a : a; }}"

# A vector's lanes combined as a tree, neighbours first (reduce_lanes.py): each step combines
# lane i with lane i + w for the lanes i that start a block of 2 w, the left block first, so
# a max or min picks the element the serial loop would (the first on a tie, the last NaN);
# lane 0 holds the result. {steps}: one shuffle and combine per halving.
_LANES_MASK = "typedef {it} tdsl_lanes_{vd} __attribute__((vector_size({bytes})));"
_REDUCE_LANES = """\
{q} {t} tdsl_reduce_{op}_{vd}({v} x) {{
{steps}    return x[0];
}}"""

# A float to an integer type: truncate toward zero, saturate to the type's range, NaN -> 0
# (docs/semantics.md; C leaves the conversion undefined outside the range, and x86, Arm and
# RISC-V give three different answers). The value is clamped in floats first, so the C
# conversion only ever sees a value in range; {top} is the largest float not above the
# maximum, and where that is below it (2**31 - 128 for f32 -> i32) the values at or past
# 2**(bits-1) take the maximum by a select. Selects only: gcc vectorizes a lane loop of it
# (max, min, convert, compare, blend).
_TO_INT_SAT = """\
{q} {it} tdsl_{d}_to_{id}({t} x) {{
    {t} c = x > {lo_f} ? x : {lo_f};
    c = c < {top} ? c : {top};
    {it} r = ({it})c;{past}
    return x != x ? 0 : r;
}}"""

_SIGMOID = "{q} {t} tdsl_sigmoid_{d}({t} x) {{ return 1 / (1 + {exp}(-x)); }}"

# A GNU vector of floats to one of integers with the scalar conversion's meaning (`_TO_INT_SAT`):
# NaN -> 0 (the lanes of a NaN are zeroed through a compare mask), clamped in floats to the
# type's range, then converted whole (in range, C's conversion is exact). Where the largest
# float below the maximum is not the maximum (f32 -> i32), the lanes past it go through the
# scalar conversion in a lane loop instead. The conversion goes through the signed integers
# of the float's width (vcvttps2dq, then vpmovdb): gcc has no f32 -> u8 vector conversion
# and would truncate lane by lane.
_TO_INT_SAT_VECTOR = """\
typedef {mt} {mv} __attribute__((vector_size({bytes})));
{q} {vi} tdsl_{vd}_to_{vid}({v} x) {{
{body}
}}"""
_TO_INT_SAT_VECTOR_WHOLE = """\
    const {v} vlo = ({v}){{0}} + {lo}, vtop = ({v}){{0}} + {top};
{clamp}{narrow}    return __builtin_convertvector(__builtin_convertvector(c, {mv}), {vi});"""
# The clamp: x86's maxps returns its second operand where either is NaN, so max(x, lo)
# gives lo for a NaN (0 for the unsigned types, with no mask); the GNU form compares and
# blends (gcc does not know that maxps is that select).
_SAT_CLAMP_GNU = """\
    {mv} m = x > vlo;                  /* false for NaN: lo */
    {v} c = ({v})((m & ({mv})x) | (~m & ({mv})vlo));
    m = c < vtop;
    c = ({v})((m & ({mv})c) | (~m & ({mv})vtop));
"""
_SAT_CLAMP_X86 = """\
#if {guard}
    {v} c = ({v}){pre}_min_ps({pre}_max_ps(({m})x, ({m})vlo), ({m})vtop);
#else
{gnu}#endif
"""
_SAT_NAN_TO_ZERO = "    c = ({v})(({mv})c & ~(x != x));    /* NaN -> 0, not lo */\n"
# per lanes of f32: the guard, the intrinsics' prefix and type
_X86_FLOAT = {16: ("defined(__AVX512F__)", "_mm512", "__m512"),
              8: ("defined(__AVX__)", "_mm256", "__m256"),
              4: ("defined(__SSE__)", "_mm", "__m128")}
# A float vector through a small integer type and back (``f32(u8(x))``: a requantize and
# the dequantize after it): the same clamp, then a truncation in the float's own width. The
# conversion to u8 and back was four instructions (vcvttps2dq, vpmovdb, vpmovzxbd,
# vcvtdq2ps); this is two, and exact, since every value of the type is a float. Where x is
# a whole number already (a requantize's round) the clamp alone is the result ({whole}:
# "_whole"); the int8 ResNet block's fused add ran 2.4% faster without the truncation.
_THROUGH_INT_VECTOR = """\
typedef {mt} {mv} __attribute__((vector_size({bytes})));
{q} {v} tdsl_{vd}_through_{id}{whole}({v} x) {{
    const {v} vlo = ({v}){{0}} + {lo}, vtop = ({v}){{0}} + {top};
{clamp}    return {result};
}}"""
_TO_INT_SAT_VECTOR_LANES = """\
    {vi} r;
    for (int j = 0; j < {lanes}; j++) r[j] = {scalar}(x[j]);
    return r;"""

# Integer vectors narrowed (in range: truncation is exact) and widened with the x86
# instructions for it (vpmovdb, vpmovzxbd ...): gcc 12 builds a u8 vector's round trip
# through i32 (a requantize and the dequantize after it) lane by lane with GNU conversions,
# 200 instructions a vector instead of 60. {lanes: (guard, float's int type, intrinsic
# width)}, the intrinsics named by the narrow element's bits.
_X86_CONVERT = {16: ("defined(__AVX512F__)", "__m512i", "_mm512"),
                8: ("defined(__AVX512VL__)", "__m256i", "_mm256")}
# Without AVX-512's vpmovdb / vpmovdw (AVX2, SSE2) the clamped i32 lanes are packed with
# saturation, exact since the clamp left them in the type's range: packssdw to i16, then
# packuswb / packsswb to u8 / i8 ({lanes: (guard, the i32 vector, its low and high 128-bit
# halves)}, {type: the second pack}). gcc extracted each lane (vpextrd) and stored it byte
# by byte: a QuantizeLinear of 200 k values to u8 took 101 us in x86-64-v3 code on Zen 4.
_X86_PACK = {8: ("defined(__AVX__)", "__m256i", "_mm256_castsi256_si128(i)",
                 "_mm256_extractf128_si256(i, 1)"),
             4: ("defined(__SSE2__)", "__m128i", "i", "i")}
_X86_PACK_LAST = {"u8": "_mm_packus_epi16", "i8": "_mm_packs_epi16", "i16": ""}
_X86_WIDEN = {16: ("defined(__AVX512F__)", "_mm512"), 8: ("defined(__AVX2__)", "_mm256")}
_WIDEN_VECTOR = """\
{q} {vo} tdsl_widen_{vd}_{vod}({v} x) {{
{fast}    return {steps};
}}"""

# rint of a GNU vector of f32 (round half to even, numpy's rint): one vrndscaleps /
# vroundps where the target has it, else a lane loop of rintf.
_ROUND_VECTOR = """\
{q} {v} tdsl_round_{vd}({v} x) {{
{fast}    for (int j = 0; j < {lanes}; j++) x[j] = rintf(x[j]);
    return x;
}}"""

# A vector store past the caches (non-temporal: movnt*, no read for ownership, no cache line
# filled) where the address is aligned to the vector (the instructions fault otherwise),
# else the plain store; elsewhere than x86 the plain store. Such stores are weakly ordered:
# each thread that made them runs tdsl_sfence before its work is read.
_STREAM = """\
{q} void tdsl_stream_{vd}({t}* p, {v} x) {{
{fast}    memcpy(p, &x, sizeof x);
}}"""
# per vector size in bytes: the ISA's guard, the non-temporal store and its vector type
_STREAM_X86 = {64: ("defined(__AVX512F__)", "_mm512_stream_si512", "__m512i"),
               32: ("defined(__AVX__)", "_mm256_stream_si256", "__m256i"),
               16: ("defined(__SSE2__)", "_mm_stream_si128", "__m128i")}
_SFENCE = """\
{q} void tdsl_sfence(void) {{
#if defined(__SSE__)
    _mm_sfence();
#endif
}}"""

# The int8 dot product (vectorize.py's dot4_u8i8): lane j of the result is acc[j] plus the
# four products a[k] * b[4 j + k] of unsigned a and signed b, exact in i32. Where the target
# has VNNI that is one vpdpbusd, with Arm's I8MM one usdot, with Armv8.2's dot product
# (signed by signed) two sdots (the preprocessor reads the -march flags: the target's
# features choose, no runtime dispatch); elsewhere a lane loop gcc vectorizes. AVX2 without
# VNNI has vpmaddubsw, but it saturates the sum of two products to i16 (255 * 127 * 2 >
# 32767), so it is not used: the results stay bit-exact on every target.
_DOT4_U8I8 = """\
{q} {v} tdsl_dot4_u8i8_{vd}({v} acc, {va} a, {vb} b) {{
{fast}    for (int j = 0; j < {lanes}; j++)
        acc[j] += (int32_t)a[0] * b[4 * j] + (int32_t)a[1] * b[4 * j + 1]
                  + (int32_t)a[2] * b[4 * j + 2] + (int32_t)a[3] * b[4 * j + 3];
    return acc;
}}"""

# The i16 dot product (vectorize.py's dot2_i16): lane j of the result is acc[j] plus
# a[0] * b[2 j] + a[1] * b[2 j + 1], exact in i32 (two products of i16 sum within i32
# except -32768 * -32768 twice, which vpmaddwd wraps as this loop's int32 sum does). On x86
# one vpmaddwd and an add (SSE2, AVX2, AVX-512BW), with VNNI one vpdpwssd; elsewhere a lane
# loop gcc vectorizes.
_DOT2_I16 = """\
{q} {v} tdsl_dot2_i16_{vd}({v} acc, {va} a, {vb} b) {{
{fast}    for (int j = 0; j < {lanes}; j++)
        acc[j] += (int32_t)a[0] * b[2 * j] + (int32_t)a[1] * b[2 * j + 1];
    return acc;
}}"""

# per vector width: (guard, VNNI's vpdpwssd), (guard, vpmaddwd), the vector type, broadcast
_DOT2_X86 = {16: (("defined(__AVX512VNNI__)", "_mm512_dpwssd_epi32"),
                  ("defined(__AVX512BW__)", "_mm512_madd_epi16"), "__m512i", "_mm512_set1_epi32"),
             8: (("defined(__AVX512VNNI__) && defined(__AVX512VL__)", "_mm256_dpwssd_epi32"),
                 ("defined(__AVX2__)", "_mm256_madd_epi16"), "__m256i", "_mm256_set1_epi32"),
             4: (("defined(__AVX512VNNI__) && defined(__AVX512VL__)", "_mm_dpwssd_epi32"),
                 ("defined(__SSE2__)", "_mm_madd_epi16"), "__m128i", "_mm_set1_epi32")}

# per vector width: the VNNI instruction's guard and its spelling
_VNNI = {16: ("defined(__AVX512VNNI__)", "_mm512_dpbusd_epi32", "__m512i", "_mm512_set1_epi32"),
         8: ("defined(__AVX512VNNI__) && defined(__AVX512VL__)", "_mm256_dpbusd_epi32",
             "__m256i", "_mm256_set1_epi32"),
         4: ("defined(__AVX512VNNI__) && defined(__AVX512VL__)", "_mm_dpbusd_epi32",
             "__m128i", "_mm_set1_epi32")}
_AVX_VNNI = {8: "_mm256_dpbusd_avx_epi32", 4: "_mm_dpbusd_avx_epi32"}

# e^r for the reduced argument r = c - n ln2 (ln2 in two parts, so that n * 0.693359375 is
# exact), shared by the scalar and the vector exp: ``{v}`` is the value type; a scalar
# constant in a vector expression is broadcast, so the text is the same for both. The
# polynomial is 1 + r + r^2 P(r) with P of degree 4, fitted to e^r on |r| <= ln2 / 2
# (relative error 3e-9, a twentieth of float32's rounding), by Horner's rule to its end: six
# multiply-adds where Cephes' degree-5 P with P r^2 + r + 1 took eight operations, and exp
# is most of softmax's work (1.39-1.42 -> 1.29-1.30 ms for 4096 x 1024 on one Zen 4 core, in
# cache). Over 22 M points from -87 to 88 it is within 0.88 ulp where the multiply-adds fuse
# (AVX2, AVX-512; Cephes' 1.01) and 1.18 where they do not (x86-64-v2; 0.99);
# tests/test_emit_c.py holds both within 2.
_EXP_POLYNOMIAL = """\
    {v} r = c - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    {v} p = r * 1.381461392e-3f + 8.368710056e-3f;
    p = p * r + 4.166838899e-2f;
    p = p * r + 1.666652113e-1f;
    p = p * r + 4.999999404e-1f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
"""

# f32 exp and erf without libm: libm's expf/erff are opaque calls that keep gcc from
# vectorizing the loop around them (a gelu chain ran at 1.2 GB/s). These are branch-free
# (selects, not jumps; the bit casts are memcpy) and static inline, so a `omp simd` loop
# calling them vectorizes. Accuracy, over dense grids against float64 (tests/test_emit_c.py):
# exp within ~1 ulp on normal results (Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-7
# polynomial for e^r, 2^n applied in two halves so denormal results and overflow to inf come
# out right; -inf gives 0, NaN stays NaN: the clamp's comparisons are written so that a NaN
# clamps to -104, which keeps n finite for the int conversion with no select of its own; a
# `n == n` select there made gcc vectorize the whole polynomial twice, once per side, and
# softmax's exponentials took 1.5x the time); erf within 4e-7 absolute (the rational
# approximation in x^2 of Eigen/TensorFlow's float erf, x clamped to [-4, 4] where
# erf is 1 - 1.5e-8; +-inf give +-1, NaN stays NaN).
_EXP_F32 = """\
{q} float tdsl_exp_f32(float x) {{
    float c = x > -104.0f ? x : -104.0f;
    c = c < 89.0f ? c : 89.0f;
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
""" + _EXP_POLYNOMIAL.replace("{v}", "float") + """\
    int32_t k = (int32_t)n;
    int32_t k1 = k >> 1, k2 = k - k1;
    int32_t b1 = (k1 + 127) * 8388608, b2 = (k2 + 127) * 8388608;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    float y = p * s1 * s2;
    return x != x ? x : y;
}}"""

# The same exp a whole GNU vector at a time, for loops the vectorizer turns into vector
# statements (a softmax row): `_EXP_F32`'s algorithm and constants, the selects as blends
# through integer masks. With AVX-512 a 16-lane vector takes two instructions that do in one
# what the portable code does in several: the clamps are vmaxps/vminps with the constant
# first (an unordered compare returns the second operand, so a NaN passes through them and
# through the polynomial, and needs no select of its own), and vscalefps computes p * 2^n
# with one rounding (denormal results and overflow to inf included), in place of the
# conversion, shifts and two multiplies: 13 operations instead of 31, softmax 4096x1024 in
# 0.75x the time.
_EXP_VECTOR_PORTABLE = """\
    {iv} above = x > -104.0f;
    {v} c = ({v})((above & ({iv})x) | (~above & ({iv})tdsl_bcast_{vd}(-104.0f)));
    {iv} below = c < 89.0f;
    c = ({v})((below & ({iv})c) | (~below & ({iv})tdsl_bcast_{vd}(89.0f)));
    {v} n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
""" + _EXP_POLYNOMIAL + """\
    {iv} k = __builtin_convertvector(n, {iv});
    {iv} k1 = k >> 1, k2 = k - k1;
    {v} y = p * ({v})((k1 + 127) * 8388608) * ({v})((k2 + 127) * 8388608);
    {iv} nan = x != x;
    return ({v})((nan & ({iv})x) | (~nan & ({iv})y));
"""

_EXP_VECTOR_AVX512 = """\
    {v} c = ({v})_mm512_min_ps(_mm512_set1_ps(89.0f),
                                 _mm512_max_ps(_mm512_set1_ps(-104.0f), (__m512)x));
    {v} n = ({v})_mm512_roundscale_ps((__m512)(c * 1.44269504088896341f),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
""" + _EXP_POLYNOMIAL + """\
    return ({v})_mm512_scalef_ps((__m512)p, (__m512)n);
"""

# With AVX's 8 lanes: the clamps are vmaxps/vminps with x first (a NaN clamps to -104, so
# n stays finite for the conversion) and the NaN select one vblendvps: 23 operations where
# the portable code's selects through integer masks took 31 (softmax 4096 x 1024 as
# x86-64-v3 code, one thread of a Zen 4: 1.38-1.53 -> 1.28-1.30 ms).
_EXP_VECTOR_AVX = """\
    {v} c = ({v})_mm256_min_ps(_mm256_max_ps((__m256)x, _mm256_set1_ps(-104.0f)),
                                 _mm256_set1_ps(89.0f));
    {v} n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
""" + _EXP_POLYNOMIAL + """\
    {iv} k = __builtin_convertvector(n, {iv});
    {iv} k1 = k >> 1, k2 = k - k1;
    {v} y = p * ({v})((k1 + 127) * 8388608) * ({v})((k2 + 127) * 8388608);
    return ({v})_mm256_blendv_ps((__m256)y, (__m256)x,
                                 _mm256_cmp_ps((__m256)x, (__m256)x, _CMP_UNORD_Q));
"""

_EXP_VECTOR_F32 = "{q} {v} tdsl_exp_{vd}({v} x) {{\n{body}}}"
# per lanes: the x86 path and its guard, the portable code elsewhere
_EXP_VECTOR_X86 = {16: ("defined(__AVX512F__)", _EXP_VECTOR_AVX512),
                   8: ("defined(__AVX__)", _EXP_VECTOR_AVX)}

# sqrt of a whole GNU vector: libm's sqrt lane by lane, which gcc turns into one vsqrtps
# (sqrtps, fsqrt) of the vector (-fno-math-errno: no errno to set), so the square root
# stays correctly rounded, as the scalar code's is. rsqrt is 1 / this, not an estimate
# instruction (vrsqrt14ps is 14 bits), so vector and scalar code give the same numbers.
_SQRT_VECTOR = """\
{q} {v} tdsl_sqrt_{vd}({v} x) {{
    {v} r;
    for (int i = 0; i < {lanes}; ++i) r[i] = sqrt{s}(x[i]);
    return r;
}}"""

_ERF_F32 = """\
{q} float tdsl_erf_f32(float x) {{
    float c = x < -4.0f ? -4.0f : x;
    c = c > 4.0f ? 4.0f : c;
    float z = c * c;
    float p = -2.72614225801306e-10f;
    p = p * z + 2.77068142495902e-08f;
    p = p * z + -2.10102402082508e-06f;
    p = p * z + -5.69250639462346e-05f;
    p = p * z + -7.34990630326855e-04f;
    p = p * z + -2.95459980854025e-03f;
    p = p * z + -1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * z + -2.13374055278905e-04f;
    q = q * z + -1.68282697438203e-03f;
    q = q * z + -7.37332916720468e-03f;
    q = q * z + -1.42647390514189e-02f;
    return c * p / q;
}}"""

# TFLite's MultiplyByQuantizedMultiplier (tdsl/lowering/quantize.py says each step): integers
# only. The shifts of negative values are arithmetic and the int32 conversions modular, as
# gcc, clang and every compiler for these targets define them (TFLite relies on the same);
# the left shift is done unsigned so it cannot overflow. The division by 2^31 is by a
# constant power of two: shifts, no library call, on 32-bit CPUs too.
_REQUANTIZE = """\
{q} int32_t tdsl_requantize(int32_t x, int32_t multiplier, int32_t shift) {{
    const int32_t left = shift > 0 ? shift : 0, right = shift > 0 ? 0 : -shift;
    const int32_t a = (int32_t)((uint32_t)x << left);
    int32_t high = INT32_MAX;
    if (!(a == INT32_MIN && multiplier == INT32_MIN)) {{
        const int64_t ab = (int64_t)a * (int64_t)multiplier;
        const int64_t nudge = ab >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30);
        high = (int32_t)((ab + nudge) / ((int64_t)1 << 31));
    }}
    const int32_t mask = (int32_t)(((uint32_t)1 << right) - 1u);
    const int32_t threshold = (mask >> 1) + (high < 0 ? 1 : 0);
    return (high >> right) + ((high & mask) > threshold ? 1 : 0);
}}"""

_VECTOR = """\
typedef {t} {v} __attribute__((vector_size({bytes})));
{q} {v} tdsl_load_{vd}(const {t}* p) {{ {v} x; memcpy(&x, p, sizeof x); return x; }}
{q} void tdsl_store_{vd}({t}* p, {v} x) {{ memcpy(p, &x, sizeof x); }}
{q} {v} tdsl_bcast_{vd}({t} s) {{ return ({v}){{{lanes}}}; }}"""

# Heap workspace: 64-byte aligned (a cache line, an AVX-512 vector). The element count is
# checked before multiplying (a wrapped size_t would allocate a few bytes and let the kernel
# write past them); a failure is recorded in *status instead of crashing, so the caller can
# raise MemoryError. The store is atomic: allocations may run inside an OpenMP parallel loop.
# Loaded by tdsl, the kernel takes its blocks from the process's workspace pool (emit_c/
# workspace.py), named by weak symbols: in a C program without the pool they are null and
# aligned_alloc and free serve.
_ALLOC = """\
extern void* {pool_alloc}(size_t bytes) __attribute__((weak));
extern void {pool_free}(void* block) __attribute__((weak));
{q} void* tdsl_alloc(int64_t count, size_t elem_size, int* status) {{
    void* p = NULL;
    if (count >= 0 && (uint64_t)count <= (SIZE_MAX - 64) / elem_size) {{
        size_t bytes = (size_t)count * elem_size;
        bytes = bytes < 64 ? 64 : (bytes + 63) / 64 * 64;
        p = {pool_alloc} ? {pool_alloc}(bytes) : aligned_alloc(64, bytes);
    }}
    if (p == NULL) __atomic_store_n(status, 1, __ATOMIC_RELAXED);
    return p;
}}
{q} void tdsl_free(void* block) {{
    if ({pool_free}) {pool_free}(block); else free(block);
}}"""

# The floats narrower than f16 (lowering/dtypes.py, MINIFLOATS) are held as their bits and
# converted here, as ml_dtypes converts: to nearest even, overflow to the type's overflow
# code. The value is scaled to whole quanta of its binade (subnormals share the smallest
# normal binade's quantum), rounded by rint (the default rounding mode is to nearest even)
# and scaled back; powers of two scale exactly. A double argument takes any float exactly.
_TO_MINIFLOAT = """\
{q} {ct} tdsl_to_{d}(double x) {{
    const uint32_t sign = signbit(x) ? {sign}u : 0u;
    if (x != x) return ({ct})({nan_code});
    const double a = fabs(x);
    if (a > {max}) {{
        if (a == INFINITY || rint(ldexp(a, {mbits} - {top_exp})) > {top_quanta})
            return ({ct})({overflow}u | sign);
    }}
    int e;
    frexp(a, &e);                               /* a = f * 2^e, f in [0.5, 1) */
    e = e - 1 < {emin} ? {emin} : e - 1;        /* the exponent of a's quantum */
    uint32_t q = (uint32_t)rint(ldexp(a, {mbits} - e));
    if (q == 0) return ({ct})({zero_sign});
    if (q < (1u << {mbits})) return ({ct})(sign | q);   /* a subnormal (e is the smallest) */
    if (q == (2u << {mbits})) {{ q >>= 1; e += 1; }}     /* rounded up into the next binade */
    return ({ct})(sign | ((uint32_t)(e + {bias}) << {mbits}) | (q - (1u << {mbits})));
}}"""

_FROM_MINIFLOAT = """\
{q} float tdsl_from_{d}({ct} b) {{
    const uint32_t u = b, ex = (u >> {mbits}) & {emask}u, man = u & {mmask}u;
    const float s = (u & {sign}u) ? -1.0f : 1.0f;{special}
    return s * (ex ? ldexpf((float)(man | (1u << {mbits})), (int)ex - {bias} - {mbits})
                   : ldexpf((float)man, {emin} - {mbits}));
}}"""

# bf16 is the top half of an f32
_FROM_BF16 = """\
{q} float tdsl_from_bf16(uint16_t b) {{
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}}"""

_MINIFLOAT_SPECIALS = {
    "ieee": "\n    if (ex == {emask}u) return man ? NAN : s * INFINITY;",
    "fn": "\n    if ((u & {ones}u) == {ones}u) return NAN;",
    "fnuz": "\n    if (u == {sign}u) return NAN;",
    "finite": "",
}


_SIZES = {"f32": 4, "f64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "u8": 1, "u16": 2,
          "u32": 4, "u64": 8, "f16": 2, "bool": 1,
          **{name: 2 if ctype == "uint16_t" else 1 for name, (_, ctype, *_f) in MINIFLOATS.items()}}


def element_size(dtype: str) -> int:
    return _SIZES[dtype]


def _float_literal(value, dtype: str) -> str:
    """A finite float constant exactly (repr round-trips; f32 values are exact doubles)."""
    text = repr(float(value)) + _suffix(dtype)
    return f"({text})" if text.startswith("-") else text


def _int_literal(value: int) -> str:
    """An integer constant of any tdsl type; the minima are spelled so that no literal
    overflows (``-2147483648`` is ``-(2147483648)``, a long)."""
    if value == -2**63:
        return "INT64_MIN"
    if value == 2**63 - 1:
        return "INT64_MAX"
    if value == 2**64 - 1:
        return "UINT64_MAX"
    if value >= 2**31:
        return f"{value}u"
    return "(-2147483647 - 1)" if value == -2**31 else str(value)


def _suffix(dtype: str) -> str:
    return "f" if dtype == "f32" else ""


def vector_type_name(scalar: str, lanes: int) -> str:
    return f"tdsl_{scalar}x{lanes}"


class Helpers:
    """The helpers one translation unit needs, in first-use order, each emitted once."""

    def __init__(self, qualifier: str = "static inline", native_math=None):
        self.qualifier = qualifier
        # GPUs have fast exp/erf of their own: ``native_math(name, dtype)`` spells them
        self.native_math = native_math
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
        if dtype in UNSIGNED:     # floor is C's division; u64 doesn't fit the i64 one
            self._add(f"floor_{dtype}", _FLOOR_UNSIGNED, dtype)
            return f"tdsl_floor{op}_{dtype}"
        self._add("floor_i64", _FLOOR_INT)
        return f"tdsl_floor{op}_i64"

    def min_max(self, dtype: str, name: str) -> str:
        if "x" in dtype:                          # a vector ("f32x16", "u8x16")
            scalar, lanes = dtype.split("x")
            v = self.vector(scalar, int(lanes))
            mask = f"int{8 * _SIZES[scalar]}_t"
            fast = {"min": "", "max": ""}
            if (scalar, int(lanes)) in _MINMAX_X86 and self.native_math is None:  # host C
                guard, fn, m, pick = _MINMAX_X86[scalar, int(lanes)]
                for op in fast:
                    fast[op] = (f"#if {guard}\n    {{ {m} r = {fn.format(op)}(({m})b, ({m})a); "
                                f"return ({v}){pick.format(b=f'({m})b')}; }}\n#endif\n")
                self._x86_header()
            # a kept where it wins or ties, or is a NaN, unless b is a NaN (both NaN: b, as
            # the scalar helpers and the x86 path give)
            keep = {op: f"(a {cmp} b)" if scalar not in FLOATS else
                    f"((a {cmp} b) | (a != a)) & (b == b)"
                    for op, cmp in (("min", "<="), ("max", ">="))}
            self._add(f"minmax_{dtype}", _MINMAX_VECTOR, scalar, v=v, vd=dtype, it=mask,
                      mv=f"tdsl_mask_{dtype}", bytes=int(lanes) * _SIZES[scalar],
                      fast_min=fast["min"], fast_max=fast["max"],
                      keep_min=keep["min"], keep_max=keep["max"])
            return f"tdsl_{name}_{dtype}"
        floats = _MINMAX_FLOAT if self.native_math is None else _MINMAX_FLOAT_SELECT
        self._add(f"minmax_{dtype}", floats if dtype in FLOATS else _MINMAX_INT, dtype,
                  u="uint32_t" if dtype == "f32" else "uint64_t")
        return f"tdsl_{name}_{dtype}"

    def reduce_lanes(self, dtype: str, op: str) -> str:
        """The helper combining the lanes of vector ``dtype`` ("f32x16") by ``op`` ("add",
        "max", "min") as a tree (`_REDUCE_LANES`), called as ``helper(x)``."""
        scalar, lanes = dtype.split("x")
        lanes = int(lanes)
        v = self.vector(scalar, lanes)
        pick = "x + y" if op == "add" else f"{self.min_max(dtype, op)}(x, y)"
        steps, w = [], 1
        while w < lanes:
            order = ", ".join(str(i ^ w) for i in range(lanes))
            steps.append(
                "    {\n#if defined(__clang__)\n"
                f"        {v} y = __builtin_shufflevector(x, x, {order});\n"
                "#else\n"
                f"        {v} y = __builtin_shuffle(x, (tdsl_lanes_{dtype}){{{order}}});\n"
                f"#endif\n        x = {pick};\n    }}\n")
            w *= 2
        self._add(f"lanes_{dtype}", _LANES_MASK, scalar, vd=dtype,
                  it=f"int{8 * _SIZES[scalar]}_t", bytes=lanes * _SIZES[scalar])
        self._add(f"reduce_{op}_{dtype}", _REDUCE_LANES, scalar, v=v, vd=dtype, op=op,
                  steps="".join(steps))
        return f"tdsl_reduce_{op}_{dtype}"

    def min_max_const(self, dtype: str, name: str, const_first: bool) -> str:
        """`min_max` of a float (scalar or GNU vector) and a constant that is not NaN,
        called as ``helper(x, k)`` (`_MINMAX_CONST`)."""
        first = "_kx" if const_first else "_xk"
        fields = dict(name=name, first=first, op="<" if name == "min" else ">",
                      tie="=" if const_first else "")
        if "x" in dtype:
            scalar, lanes = dtype.split("x")
            v, fast = self.vector(scalar, int(lanes)), ""
            # x86's max(a, b) is ``a > b ? a : b`` (min: ``<``), b on a NaN or a tie of
            # zeros: with k first it is this helper exactly, in one instruction where the
            # select takes a compare and a blend (MobileNetV2's ReLU6 epilogues)
            if (scalar, int(lanes)) in _MINMAX_X86 and self.native_math is None and \
                    not const_first:
                guard, fn, m, _ = _MINMAX_X86[scalar, int(lanes)]
                call = f"{fn.format(name)}(({m})k, ({m})x)"
                fast = f"#if {guard}\n    return ({v}){call};\n#endif\n"
                self._x86_header()
            self._add(f"{name}{first}_{dtype}", _MINMAX_CONST_VECTOR, scalar, v=v, vd=dtype,
                      it={"f32": "int32_t", "f64": "int64_t"}[scalar], fast=fast,
                      mv=f"tdsl_mask_{dtype}", bytes=int(lanes) * _SIZES[scalar], **fields)
        else:
            self._add(f"{name}{first}_{dtype}", _MINMAX_CONST, dtype, **fields)
        return f"tdsl_{name}{first}_{dtype}"

    def abs_int(self, dtype: str) -> str:
        self._add(f"abs_{dtype}", _ABS_INT, dtype)
        return f"tdsl_abs_{dtype}"

    def to_int_sat(self, float_dtype: str, int_dtype: str) -> str:
        """The saturating float-to-integer conversion (`_TO_INT_SAT`) for one pair."""
        lo, hi = int_range(int_dtype)
        top = saturation_top(float_dtype, int_dtype)
        past = "" if top >= hi else \
            f"\n    r = x >= {_float_literal(hi + 1, float_dtype)} ? {_int_literal(hi)} : r;"
        self._add(f"to_int_{float_dtype}_{int_dtype}", _TO_INT_SAT, float_dtype,
                  it=to_c(int_dtype), id=int_dtype, lo_f=_float_literal(lo, float_dtype),
                  top=_float_literal(top, float_dtype), past=past)
        return f"tdsl_{float_dtype}_to_{int_dtype}"

    def sigmoid(self, dtype: str) -> str:
        exp = self.exp(dtype)
        self._add(f"sigmoid_{dtype}", _SIGMOID, dtype, exp=exp)
        return f"tdsl_sigmoid_{dtype}"

    def exp(self, dtype: str) -> str:
        """The exp to call: the vectorizable `_EXP_F32` for f32, `_EXP_VECTOR_F32` for a
        GNU vector of f32 (``"f32x16"``), libm's ``exp`` otherwise."""
        if self.native_math is not None:
            return self.native_math("exp", dtype)
        if dtype.startswith("f32x"):
            lanes = int(dtype[4:])
            v, iv = self.vector("f32", lanes), self.vector("i32", lanes)
            body = _EXP_VECTOR_PORTABLE
            if lanes in _EXP_VECTOR_X86:
                guard, fast = _EXP_VECTOR_X86[lanes]
                self._x86_header()
                body = f"#if {guard}\n{fast}#else\n{body}#endif\n"
            names = dict(v=v, iv=iv, vd=dtype)
            self._add(f"exp_{dtype}", _EXP_VECTOR_F32, "f32", body=body.format(**names),
                      **names)
            return f"tdsl_exp_{dtype}"
        if dtype != "f32":
            return "exp"
        self._add("exp_f32", _EXP_F32, dtype)
        return "tdsl_exp_f32"

    def sqrt_vector(self, dtype: str) -> str:
        """The square root of a GNU vector of floats (``"f32x16"``, ``"f64x8"``)."""
        scalar, lanes = dtype.split("x")
        v = self.vector(scalar, int(lanes))
        self._add(f"sqrt_{dtype}", _SQRT_VECTOR, scalar, v=v, vd=dtype, lanes=lanes)
        return f"tdsl_sqrt_{dtype}"

    def erf(self, dtype: str) -> str:
        if self.native_math is not None:
            return self.native_math("erf", dtype)
        if dtype != "f32":
            return "erf"
        self._add("erf_f32", _ERF_F32, dtype)
        return "tdsl_erf_f32"

    def vector(self, scalar: str, lanes: int) -> str:
        """Declare the GNU vector type for ``scalar`` x ``lanes`` and its load/store/broadcast."""
        name = vector_type_name(scalar, lanes)
        self._add(f"vector_{name}", _VECTOR, scalar, v=name, vd=f"{scalar}x{lanes}",
                  lanes=", ".join(["s"] * lanes), bytes=lanes * _SIZES[scalar])
        return name

    def to_minifloat(self, dtype: str) -> str:
        """The conversion of a double to the bits of a `MINIFLOATS` type."""
        f = minifloat_format(dtype)
        top_exp = math.frexp(f["max"])[1] - 1         # the largest value's binade
        self._add(f"to_{dtype}", _TO_MINIFLOAT, dtype, ct=f["ctype"], sign=f["sign"],
                  overflow=f["overflow"], mbits=f["mbits"], emin=f["emin"],
                  bias=f["bias"], max=_float_literal(f["max"], "f64"), top_exp=top_exp,
                  top_quanta=int(math.ldexp(f["max"], f["mbits"] - top_exp)),
                  zero_sign="sign" if f["signed_zero"] else "0u",
                  # f4e2m1 has no NaN: ml_dtypes gives a zero of the other sign
                  nan_code=f"{f['nan']}u {'^' if f['kind'] == 'finite' else '|'} sign")
        return f"tdsl_to_{dtype}"

    def from_minifloat(self, dtype: str) -> str:
        """The conversion of the bits of a `MINIFLOATS` type to the f32 it holds exactly."""
        if dtype == "bf16":
            self._add("from_bf16", _FROM_BF16)
            return "tdsl_from_bf16"
        f = minifloat_format(dtype)
        fields = dict(emask=(1 << f["ebits"]) - 1, mmask=(1 << f["mbits"]) - 1,
                      sign=f["sign"], ones=f["sign"] - 1)
        self._add(f"from_{dtype}", _FROM_MINIFLOAT, dtype, ct=f["ctype"],
                  mbits=f["mbits"], bias=f["bias"], emin=f["emin"],
                  special=_MINIFLOAT_SPECIALS[f["kind"]].format(**fields), **fields)
        return f"tdsl_from_{dtype}"

    def to_int_sat_vector(self, float_dtype: str, int_dtype: str) -> str:
        """`to_int_sat` on a GNU vector ("f32x16" -> "u8x16", `_TO_INT_SAT_VECTOR`)."""
        (fs, lanes), (it, _) = (d.split("x") for d in (float_dtype, int_dtype))
        scalar = self.to_int_sat(fs, it)
        v, vi = self.vector(fs, int(lanes)), self.vector(it, int(lanes))
        lo, hi = int_range(it)
        top = saturation_top(fs, it)
        fields = dict(v=v, vi=vi, lanes=lanes, scalar=scalar, mv=f"tdsl_imask_{float_dtype}",
                      lo=_float_literal(lo, fs), top=_float_literal(top, fs))
        fields["narrow"] = ""
        bits = 8 * _SIZES[it]
        branches = []
        if fs == "f32" and bits in (8, 16) and int(lanes) in _X86_CONVERT:
            guard, m, pre = _X86_CONVERT[int(lanes)]
            narrow = max(128, int(lanes) * bits)          # the narrowed vector's bits
            branches.append((guard, f"__m{narrow}i n = {pre}_cvtepi32_epi{bits}(({m})"
                                    f"__builtin_convertvector(c, {fields['mv']}));"))
        if fs == "f32" and it in _X86_PACK_LAST and int(lanes) in _X86_PACK:
            guard, m, low, high = _X86_PACK[int(lanes)]
            last = _X86_PACK_LAST[it]
            branches.append((guard, f"{m} i = ({m})__builtin_convertvector(c, {fields['mv']}); "
                                    f"__m128i n = _mm_packs_epi32({low}, {high});"
                                    + (f" n = {last}(n, n);" if last else "")))
        if branches:
            fields["narrow"] = "".join(
                f"#{'if' if k == 0 else 'elif'} {guard}\n    {{ {code} {vi} r; "
                f"memcpy(&r, &n, sizeof r); return r; }}\n"
                for k, (guard, code) in enumerate(branches)) + "#endif\n"
            self._x86_header()
        fields["clamp"] = self._sat_clamp(fs, int(lanes), lo, fields)
        body = (_TO_INT_SAT_VECTOR_WHOLE if top >= hi else _TO_INT_SAT_VECTOR_LANES)
        self._add(f"to_int_{float_dtype}_{int_dtype}", _TO_INT_SAT_VECTOR, fs,
                  body=body.format(**fields), vd=float_dtype, vid=int_dtype,
                  mt={"f32": "int32_t", "f64": "int64_t"}[fs],
                  bytes=int(lanes) * _SIZES[fs], **fields)
        return f"tdsl_{float_dtype}_to_{int_dtype}"

    def through_int_vector(self, float_dtype: str, int_type: str, whole: bool = False) -> str:
        """``f32(u8(x))`` on a GNU vector of f32 (`_THROUGH_INT_VECTOR`), for integer types
        of at most 16 bits; ``whole``: every x is a whole number (or NaN, or infinite)."""
        fs, lanes = float_dtype.split("x")
        assert fs == "f32" and _SIZES[int_type] <= 2, (float_dtype, int_type)
        v = self.vector(fs, int(lanes))
        lo, hi = int_range(int_type)
        mv, suffix = f"tdsl_imask_{float_dtype}", "_whole" if whole else ""
        fields = dict(v=v, mv=mv, lo=_float_literal(lo, fs), top=_float_literal(hi, fs))
        result = "c" if whole else \
            f"__builtin_convertvector(__builtin_convertvector(c, {mv}), {v})"
        self._add(f"through_{float_dtype}_{int_type}{suffix}", _THROUGH_INT_VECTOR, fs,
                  clamp=self._sat_clamp(fs, int(lanes), lo, fields), vd=float_dtype,
                  id=int_type, mt="int32_t", bytes=int(lanes) * 4, whole=suffix,
                  result=result, **fields)
        return f"tdsl_{float_dtype}_through_{int_type}{suffix}"

    def _sat_clamp(self, fs: str, lanes: int, lo: int, fields: dict) -> str:
        """The saturating conversions' clamp of ``x`` to ``c`` (`_SAT_CLAMP_X86`)."""
        clamp = _SAT_CLAMP_GNU
        if fs == "f32" and lanes in _X86_FLOAT:
            guard, pre, m = _X86_FLOAT[lanes]
            clamp = _SAT_CLAMP_X86.format(guard=guard, pre=pre, m=m, gnu=clamp, v="{v}",
                                          mv="{mv}")
            self._x86_header()
        return clamp.format(**fields) + (_SAT_NAN_TO_ZERO.format(**fields) if lo < 0 else "")

    def widen_vector(self, dtype: str, wide: str) -> str:
        """A GNU vector of 8- or 16-bit integers converted to one of ``wide`` ("i32x16")."""
        src, lanes = dtype.split("x")
        v, vo = self.vector(src, int(lanes)), self.vector(wide.split("x")[0], int(lanes))
        fast = ""
        bits = 8 * _SIZES[src]
        if wide.startswith("i32x") and bits in (8, 16) and int(lanes) in _X86_WIDEN:
            guard, pre = _X86_WIDEN[int(lanes)]
            sign = "u" if src.startswith("u") else "i"
            fast = (f"#if {guard}\n    {{ __m128i m = _mm_setzero_si128(); memcpy(&m, &x, sizeof x);"
                    f" return ({vo}){pre}_cvtep{sign}{bits}_epi32(m); }}\n#endif\n")
            if int(lanes) * bits > 128:        # 16 x 16 bits: a 256-bit source
                fast = fast.replace("__m128i m = _mm_setzero_si128()", "__m256i m")
            self._x86_header()
        # elsewhere one doubling of the element at a time, which gcc does with one
        # instruction each (vpmovsxbw, vpmovsxwd): straight from 8 bits to 32 it shifts and
        # inserts lane by lane
        steps, size, kind = "x", _SIZES[src], src[0]
        while 2 * size < _SIZES[wide.split("x")[0]]:
            size *= 2
            step = self.vector(f"{kind}{8 * size}", int(lanes))
            steps = f"__builtin_convertvector({steps}, {step})"
        steps = f"__builtin_convertvector({steps}, {vo})"
        self._add(f"widen_{dtype}_{wide}", _WIDEN_VECTOR, src, v=v, vo=vo, vd=dtype,
                  vod=wide, fast=fast, steps=steps)
        return f"tdsl_widen_{dtype}_{wide}"

    def _x86_header(self) -> None:
        """x86's intrinsics, for the helpers that use them under their ISA's macro."""
        self._add("x86_intrinsics", "#if defined(__SSE2__)\n#include <immintrin.h>\n#endif")

    def round_vector(self, dtype: str) -> str:
        """rint of a GNU vector of f32 (`_ROUND_VECTOR`)."""
        lanes = int(dtype.split("x")[1])
        v = self.vector("f32", lanes)
        x86 = {16: ("defined(__AVX512F__)", "_mm512_roundscale_ps", "__m512"),
               8: ("defined(__AVX__)", "_mm256_round_ps", "__m256"),
               4: ("defined(__SSE4_1__)", "_mm_round_ps", "__m128")}.get(lanes)
        fast = ""
        if x86:
            guard, fn, m = x86
            fast = self._x86_path(guard, f"return ({v}){fn}(({m})x, _MM_FROUND_TO_NEAREST_INT "
                                         f"| _MM_FROUND_NO_EXC);")
        self._add(f"round_{dtype}", _ROUND_VECTOR, "f32", v=v, vd=dtype, lanes=lanes,
                  fast=fast)
        return f"tdsl_round_{dtype}"

    def stream_store(self, dtype: str) -> str:
        """The store past the caches of a ``dtype`` ("f32x16") vector (`_STREAM`)."""
        scalar, lanes = dtype.split("x")
        v, size = self.vector(scalar, int(lanes)), int(lanes) * _SIZES[scalar]
        fast = ""
        if size in _STREAM_X86:
            guard, fn, m = _STREAM_X86[size]
            fast = self._x86_path(guard, f"if (((uintptr_t)p & {size - 1}) == 0) "
                                         f"{{ {fn}(({m}*)p, ({m})x); return; }}")
        self._add(f"stream_{dtype}", _STREAM, scalar, v=v, vd=dtype, fast=fast)
        return f"tdsl_stream_{dtype}"

    def _x86_path(self, guard: str, statement: str) -> str:
        """``statement`` under the ISA macro ``guard``, x86's intrinsics included."""
        self._x86_header()
        return f"#if {guard}\n    {statement}\n#endif\n"

    def sfence(self) -> str:
        """Orders this thread's stores past the caches before what follows (`_SFENCE`)."""
        self._x86_header()
        self._add("sfence", _SFENCE)
        return "tdsl_sfence"

    def dot4_u8i8(self, dtype: str) -> str:
        """The int8 dot product on ``dtype`` ("i32x16") accumulators (`_DOT4_U8I8`)."""
        lanes = int(dtype.split("x")[1])
        v, va, vb = self.vector("i32", lanes), self.vector("u8", 4), self.vector("i8", 4 * lanes)
        paths = []          # (the preprocessor condition, the statement), first match
        if lanes in _VNNI:
            guard, fn, m, bcast = _VNNI[lanes]

            # b, the signed bytes, is the operand vpdpbusd may read from memory, and gcc
            # folds its load there when a tile uses a weight vector a few times: a 64-byte
            # load per product, which ran a 4 x 4 tile of 64 -> 64 channels at 165-181 G
            # products/s against 215-222 with the weights in registers (Zen 4, one thread,
            # 2026-12-06). The empty asm puts b in a register: one load per weight vector,
            # shared by the tile's products ("x": AVX-VNNI is VEX-encoded, registers 0-15).
            def step(fn, reg):
                return (f"    {{ int32_t a4; memcpy(&a4, &a, 4); {m} w = ({m})b; "
                        f"__asm__(\"\" : \"+{reg}\"(w)); "
                        f"return ({v}){fn}(({m})acc, {bcast}(a4), w); }}\n")
            paths.append((guard, step(fn, "v")))
            if lanes in _AVX_VNNI:
                paths.append(("defined(__AVXVNNI__)", step(_AVX_VNNI[lanes], "x")))
            self._x86_header()
        if lanes == 4:
            # Armv8.6's I8MM: usdot, u8 x i8 in four groups of four (each lane's own bytes
            # of b against a's four, broadcast)
            paths.append(("defined(__ARM_FEATURE_MATMUL_INT8)",
                          "    { uint32_t a4; memcpy(&a4, &a, 4); "
                          f"return ({v})vusdotq_s32((int32x4_t)acc, "
                          "vreinterpretq_u8_u32(vdupq_n_u32(a4)), (int8x16_t)b); }\n"))
            # Armv8.2's sdot multiplies signed by signed. a ^ 0x80 is a - 128 as an i8, and
            # sum(a b) = sum((a - 128) b) + 128 sum(b), exact in i32; the second sdot gives
            # -128 sum(b), which depends on b alone, so gcc shares it between the products
            # of a register tile that use one weight vector.
            paths.append(("defined(__ARM_FEATURE_DOTPROD)",
                          "    { uint32_t a4; memcpy(&a4, &a, 4); int8x16_t w = (int8x16_t)b; "
                          "int32x4_t r = vdotq_s32((int32x4_t)acc, "
                          "vreinterpretq_s8_u32(vdupq_n_u32(a4 ^ 0x80808080u)), w); "
                          f"return ({v})vsubq_s32(r, "
                          "vdotq_s32(vdupq_n_s32(0), vdupq_n_s8(-128), w)); }\n"))
            self._add("arm_intrinsics",
                      "#if defined(__ARM_NEON)\n#include <arm_neon.h>\n#endif")
        fast = "".join(f"#{'if' if k == 0 else 'elif'} {guard}\n{stmt}"
                       for k, (guard, stmt) in enumerate(paths)) + ("#endif\n" if paths else "")
        self._add(f"dot4_u8i8_{dtype}", _DOT4_U8I8, "i32", v=v, vd=dtype, va=va, vb=vb,
                  lanes=lanes, fast=fast)
        return f"tdsl_dot4_u8i8_{dtype}"

    def dot2_i16(self, dtype: str) -> str:
        """The i16 dot product on ``dtype`` ("i32x8") accumulators (`_DOT2_I16`)."""
        lanes = int(dtype.split("x")[1])
        v, va, vb = self.vector("i32", lanes), self.vector("i16", 2), self.vector("i16", 2 * lanes)
        fast = ""
        if lanes in _DOT2_X86:
            (vnni, dp), (madd_guard, madd), m, bcast = _DOT2_X86[lanes]
            reg = "v" if lanes == 16 else "x"
            # b in a register, as for dot4_u8i8: one load per weight vector, shared by the
            # tile's products
            head = (f"    {{ int32_t a2; memcpy(&a2, &a, 4); {m} w = ({m})b; "
                    f"__asm__(\"\" : \"+{reg}\"(w)); ")
            fast = (f"#if {vnni}\n{head}return ({v}){dp}(({m})acc, {bcast}(a2), w); }}\n"
                    f"#elif {madd_guard}\n{head}{v} r = acc + ({v}){madd}(w, {bcast}(a2)); "
                    f"__asm__(\"\" : \"+{reg}\"(r)); return r; }}\n"
                    "#endif\n")
            self._x86_header()
        self._add(f"dot2_i16_{dtype}", _DOT2_I16, "i32", v=v, vd=dtype, va=va, vb=vb,
                  lanes=lanes, fast=fast)
        return f"tdsl_dot2_i16_{dtype}"

    def requantize(self) -> str:
        self._add("requantize", _REQUANTIZE)
        return "tdsl_requantize"

    def alloc(self) -> str:
        self._add("alloc", _ALLOC, pool_alloc=workspace.ALLOC, pool_free=workspace.FREE)
        return "tdsl_alloc"

    def render(self) -> list[str]:
        return list(self._texts.values())

    def merge(self, other: "Helpers") -> None:
        """Take the helpers ``other`` needs too (one translation unit, several printers)."""
        for key, text in other._texts.items():
            self._texts.setdefault(key, text)

