"""Built-in tensor intrinsics (micro-kernels) that ``tensorize(axis, NAME)`` in a schedule
block can name. Python code can pass any `TensorIntrin` to `Schedule.tensorize`."""
from __future__ import annotations

from . import te
from .schedule import TensorIntrin

INTRINSICS: dict[str, TensorIntrin] = {}


def register(intrin: TensorIntrin) -> TensorIntrin:
    INTRINSICS[intrin.name] = intrin
    return intrin


def _gemv(k: int, n: int) -> te.Function:
    """``c[j] = sum[kk](a[kk] * b[kk, j])`` over ``k`` x ``n``."""
    a, b = te.placeholder("a", (k,)), te.placeholder("b", (k, n))
    kk = te.reduce_axis(k, "kk")
    c = te.compute("c", (n,), lambda j: te.reduce("sum", a[kk.var] * b[kk.var, j], kk), ["jj"])
    return te.Function(f"gemv_{k}x{n}", (a, b), (c,))


# A register-blocked FMA step of a matmul: 16 output columns held in one vector, updated by
# 4 rows of B, each row a (possibly unaligned) vector load times a broadcast element of A.
# Written with GCC vector extensions; a row stride of B other than 1 falls back to scalars.
register(TensorIntrin("gemv_f32_4x16", _gemv(4, 16), """
static inline void gemv_f32_4x16(const float *a, int64_t sa, const float *b, int64_t sb0,
                                 int64_t sb1, float *c, int64_t sc) {
    typedef float v16 __attribute__((vector_size(64), aligned(4)));
    if (sb1 == 1 && sc == 1) {
        v16 acc = *(const v16 *)c;
        for (int k = 0; k < 4; k++)
            acc += a[k * sa] * *(const v16 *)(b + k * sb0);
        *(v16 *)c = acc;
        return;
    }
    for (int j = 0; j < 16; j++) {
        float acc = c[j * sc];
        for (int k = 0; k < 4; k++) acc += a[k * sa] * b[k * sb0 + j * sb1];
        c[j * sc] = acc;
    }
}"""))


def _dot_u8i8(m: int, n: int, k: int) -> te.Function:
    """``c[i, j] = sum[q, kk](i32(a[i, 4 q + kk]) * i32(b[q, j, kk]))``: ``m`` x ``n`` sums of
    ``k`` u8 x i8 products, ``b`` in groups of four consecutive ``k`` per column (the
    weights' layout of `qlinear_conv2d_nchwc`, [.., CI / 4, FI, 4])."""
    a = te.placeholder("a", (m, k), "u8")
    b = te.placeholder("b", (k // 4, n, 4), "i8")
    q, kk = te.reduce_axis(k // 4, "q"), te.reduce_axis(4, "kk")
    c = te.compute("c", (m, n), lambda i, j: te.reduce(
        "sum", te.Cast(a[i, q.var * 4 + kk.var], "i32") * te.Cast(b[q.var, j, kk.var], "i32"),
        [q, kk]), ["ii", "jj"], dtype="i32")
    return te.Function(f"dot_u8i8_{m}x{n}x{k}", (a, b), (c,))


# AMX-INT8 (Sapphire Rapids on): 16 output rows x 64 columns of i32 sums kept in four tiles
# across the calls of a reduction (init, update, finish), each update one tile of 16 rows x
# 64 u8 of `a` against four of 16 groups x 16 columns x 4 i8 of `b`: four tdpbusd, 64K
# products. Measured alone (/tmp microbenchmark, one SPR core): 813 G products/s against
# 291 when the sums are loaded and stored around each call, and about 330 for AVX-512
# VNNI's vpdpbusd at its peak. The tile configuration is read back (sttilecfg, ~12 ns) and
# loaded (~110 ns) only when another library changed or released it. Linux hands the tiles'
# 8 KiB of state to a process that asks once (arch_prctl); where it refuses, or the ISA has
# no AMX (a `c -amx=1` target elsewhere), the same calls sum in memory in plain C.
register(TensorIntrin("amx_u8i8_16x64x64", _dot_u8i8(16, 64, 64), """
#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__linux__)
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TDSL_AMX 1
static int tdsl_amx_granted;        /* 0 not asked, 1 granted, -1 refused */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) tdsl_tilecfg;
/* palette 1: tiles 0-3 the sums (16 rows of 16 i32), 4 a (16 rows of 64 u8), 5 and 6 b
   (16 groups of 16 columns x 4 i8) */
static const tdsl_tilecfg tdsl_amx_cfg = {1, 0, {0}, {64, 64, 64, 64, 64, 64, 64},
                                          {16, 16, 16, 16, 16, 16, 16}};
#endif

static inline void amx_u8i8_16x64x64_init(int32_t *c, int64_t sc0, int64_t sc1) {
#ifdef TDSL_AMX
    if (!tdsl_amx_granted)      /* ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA */
        tdsl_amx_granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;
    if (tdsl_amx_granted > 0) {
        tdsl_tilecfg have;
        _tile_storeconfig(&have);
        if (memcmp(&have, &tdsl_amx_cfg, sizeof have))
            _tile_loadconfig(&tdsl_amx_cfg);
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        return;
    }
#endif
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 64; j++) c[i * sc0 + j * sc1] = 0;
}

static inline void amx_u8i8_16x64x64(const uint8_t *a, int64_t sa0, int64_t sa1,
                                     const int8_t *b, int64_t sb0, int64_t sb1, int64_t sb2,
                                     int32_t *c, int64_t sc0, int64_t sc1) {
#ifdef TDSL_AMX
    if (tdsl_amx_granted > 0) {
        uint8_t ta[16 * 64];        /* a tile's rows are 64 contiguous bytes */
        int8_t tb[16 * 256];        /* b's, 16 columns x 4 contiguous bytes */
        if (sa1 != 1) {
            for (int i = 0; i < 16; i++)
                for (int k = 0; k < 64; k++) ta[i * 64 + k] = a[i * sa0 + k * sa1];
            a = ta, sa0 = 64;
        }
        if (sb1 != 4 || sb2 != 1) {
            for (int q = 0; q < 16; q++)
                for (int j = 0; j < 64; j++)
                    for (int k = 0; k < 4; k++)
                        tb[q * 256 + j * 4 + k] = b[q * sb0 + j * sb1 + k * sb2];
            b = tb, sb0 = 256, sb1 = 4;
        }
        _tile_loadd(4, a, sa0);
        _tile_loadd(5, b, sb0);
        _tile_dpbusd(0, 4, 5);
        _tile_loadd(6, b + 16 * sb1, sb0);
        _tile_dpbusd(1, 4, 6);
        _tile_loadd(5, b + 32 * sb1, sb0);
        _tile_dpbusd(2, 4, 5);
        _tile_loadd(6, b + 48 * sb1, sb0);
        _tile_dpbusd(3, 4, 6);
        return;
    }
#endif
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 64; j++) {
            int32_t s = 0;
            for (int k = 0; k < 64; k++)
                s += (int32_t)a[i * sa0 + k * sa1]
                     * (int32_t)b[(k / 4) * sb0 + j * sb1 + (k % 4) * sb2];
            c[i * sc0 + j * sc1] += s;
        }
}

static inline void amx_u8i8_16x64x64_finish(int32_t *c, int64_t sc0, int64_t sc1) {
#ifdef TDSL_AMX
    if (tdsl_amx_granted > 0) {
        int32_t t[16 * 64];
        int32_t *to = sc1 == 1 ? c : t;
        int64_t stride = sc1 == 1 ? sc0 * 4 : 256;
        _tile_stored(0, to, stride);
        _tile_stored(1, to + 16, stride);
        _tile_stored(2, to + 32, stride);
        _tile_stored(3, to + 48, stride);
        if (to == t)
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 64; j++) c[i * sc0 + j * sc1] = t[i * 64 + j];
    }
#endif
    (void)c, (void)sc0, (void)sc1;
}""", init="amx_u8i8_16x64x64_init", finish="amx_u8i8_16x64x64_finish"))
