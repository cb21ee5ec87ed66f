"""Tensorize end to end: a loop nest replaced by a C micro-kernel, compiled and run."""
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.lowering import te
from tdsl.lowering.schedule import TensorIntrin

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

GEMV_4x16 = """
static void gemv_4x16(const float *a, int64_t sa, const float *b, int64_t sb0, int64_t sb1,
                      float *c, int64_t sc) {
    for (int j = 0; j < 16; j++) {          /* accumulates: the stage initialised c */
        float acc = c[j * sc];
        for (int k = 0; k < 4; k++) acc += a[k * sa] * b[k * sb0 + j * sb1];
        c[j * sc] = acc;
    }
}"""


def gemv_intrinsic() -> TensorIntrin:
    a, b = te.placeholder("a", (4,)), te.placeholder("b", (4, 16))
    k = te.reduce_axis(4, "kk")
    c = te.compute("c", (16,), lambda j: te.reduce("sum", a[k.var] * b[k.var, j], k), ["jj"])
    return TensorIntrin("gemv_4x16", te.Function("gemv", (a, b), (c,)), GEMV_4x16)


@pytest.mark.parametrize("sizes", [dict(M=5, N=32, K=12), dict(M=1, N=16, K=4)])
def test_tensorized_matmul_compiles_and_matches_numpy(sizes):
    op = tdsl.load("std")["matmul"]
    s = (op.schedule("naive").split("C", "j", 16).split("C", "k", 4)
         .reorder("C", "i", "j.o", "k.o", "k.i", "j.i").tensorize("C", "k.i", gemv_intrinsic()))
    kernel = op.build(schedule=s, shapes=sizes)
    assert "gemv_4x16(&A[" in kernel.source
    assert kernel.source.count("static void gemv_4x16(") == 1
    rng = np.random.default_rng(0)
    a = rng.standard_normal((sizes["M"], sizes["K"])).astype(np.float32)
    b = rng.standard_normal((sizes["K"], sizes["N"])).astype(np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_the_built_in_micro_kernel_is_named_from_a_schedule_block():
    mod = tdsl.loads("""
op mm(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N] {
    C[i, j] = sum[k](A[i, k] * B[k, j])
}
schedule mm for cpu {
    jo, ji = split(C.j, 16)
    ko, ki = split(C.k, 4)
    reorder(C.i, jo, ko, ki, ji)
    tensorize(ki, gemv_f32_4x16)
    parallel(C.i)
}
""")
    op = mod["mm"]
    sizes = dict(M=9, N=48, K=20)
    kernel = op.build(shapes=sizes)
    assert "gemv_f32_4x16(&A[" in kernel.source
    rng = np.random.default_rng(1)
    a = rng.standard_normal((9, 20)).astype(np.float32)
    b = rng.standard_normal((20, 48)).astype(np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5, atol=1e-5)
