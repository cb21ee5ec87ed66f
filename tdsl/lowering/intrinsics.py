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
