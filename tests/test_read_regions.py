"""Reads the checker cannot prove in bounds: the reference, the interpreter and compiled kernels
all refuse a call that reads outside a tensor, with the same `CallError`, and accept one that
does not (the per-call region check of `tdsl.lowering.read_regions`)."""
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.errors import CallError
from tdsl.lowering import interp

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

SOURCE = """
op add(X: f32[N], Z: f32[M]) -> Y: f32[N] {
    Y[i] = X[i] + Z[i]
}
op shifted(X: f32[N], Z: f32[M]) -> Y: f32[N] {
    Y[i] = X[i] + select(i < M - 1, Z[i + 1], 0.0)
}
op rowsum(A: f32[R, C], B: f32[S, T]) -> Y: f32[R] {
    Y[r] = sum[c: C](A[r, c] * B[r, c])
}
op gather(X: f32[N], I: i32[K]) -> Y: f32[K] {
    Y[i] = X[I[i]]
}
op safe_gather(X: f32[N], I: i32[K]) -> Y: f32[K] {
    Y[i] = select(i64(I[i]) >= 0 and i64(I[i]) < N, X[I[i]], 0.0)
}
"""


@pytest.fixture(scope="module")
def module():
    return tdsl.loads(SOURCE)


def f32(*shape):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)


BAD = [("add", lambda: (f32(8), f32(4))),
       ("rowsum", lambda: (f32(3, 5), f32(2, 5))),
       ("rowsum", lambda: (f32(3, 5), f32(3, 4))),
       ("gather", lambda: (f32(8), np.array([0, 9], np.int32))),
       ("gather", lambda: (f32(8), np.array([-1, 2], np.int32)))]
GOOD = [("add", lambda: (f32(8), f32(9))),
        ("shifted", lambda: (f32(8), f32(3))),
        ("shifted", lambda: (f32(8), f32(0))),
        ("rowsum", lambda: (f32(3, 5), f32(4, 6))),
        ("gather", lambda: (f32(8), np.array([0, 7, 3], np.int32))),
        ("safe_gather", lambda: (f32(8), np.array([-1, 7, 9], np.int32)))]


@needs_gcc
@pytest.mark.parametrize("name, args", BAD)
def test_kernel_refuses_what_the_reference_refuses(module, name, args):
    op = module[name]
    with pytest.raises(CallError, match="index out of bounds") as ref:
        op.reference(*args())
    with pytest.raises(CallError, match="index out of bounds") as got:
        op.build()(*args())
    # the same access is named
    access = str(ref.value).split("bounds: ")[1].split(" in stage")[0]
    assert f"bounds: {access} " in str(got.value)


@needs_gcc
@pytest.mark.parametrize("name, args", GOOD)
def test_kernel_accepts_what_the_reference_accepts(module, name, args):
    op = module[name]
    np.testing.assert_array_equal(op.build()(*args()), op.reference(*args()))


@pytest.mark.parametrize("name, args", BAD)
def test_interpreter_refuses_what_the_reference_refuses(module, name, args):
    with pytest.raises(CallError, match="index out of bounds"):
        interp.run(module[name].lower(), args())


@needs_gcc
def test_check_is_per_shape_not_per_call(module):
    """The region check runs when a shape is first seen: a second call at it is free."""
    kernel = module["add"].build()
    kernel(f32(8), f32(8))
    with pytest.raises(CallError):
        kernel(f32(8), f32(7))
    kernel(f32(8), f32(8))


@needs_gcc
def test_sizes_fixed_at_build_time_are_checked_too(module):
    kernel = module["add"].build(shapes={"N": 8})
    with pytest.raises(CallError, match="index out of bounds"):
        kernel(f32(8), f32(4))
    np.testing.assert_array_equal(kernel(f32(8), f32(8)), 2 * f32(8))


LANE_SUMS = """
op lane_sums(X: f32[N, D]) -> Ps: f32[N, 16] {
    Ps[n, l] = sum[j: D // 16](X[n, j * 16 + l])
}
"""


@needs_gcc
@pytest.mark.parametrize("shapes", [None, {"N": 3, "D": 5}])
def test_a_cache_region_read_by_empty_loops_is_empty_not_negative(shapes):
    """Ps reads X[n, j * 16 + l] for j < D // 16 (softmax's partial sums once): with the
    cache at Ps.l, its region is D // 16 * 16 - 15 elements, negative for D < 16 (the call
    failed for want of workspace, and gcc refused the fixed-size kernel)."""
    op = tdsl.loads(LANE_SUMS)["lane_sums"]
    s = op.schedule("naive").cache_read("X", "local", ["Ps"]).compute_at("X.local", "Ps", "l")
    assert op.lower(schedule=s).attrs["unproven_accesses"] == 0
    for d in (5, 40) if shapes is None else (5,):
        x = np.random.default_rng(0).random((3, d), dtype=np.float32)
        np.testing.assert_allclose(op.build(schedule=s, shapes=shapes)(x), op.reference(x),
                                   rtol=1e-5)


@needs_gcc
def test_compute_at_of_a_gathers_producer():
    """T computed at Y.i, read as T[I[i]]: legal (the region is T's whole row), and it was
    refused by the printer ("cannot print Load nodes")."""
    op = tdsl.loads("""
op g(X: f32[N], I: i32[K]) -> Y: f32[K] {
    T: f32[N]
    T[n] = X[n] * 2.0
    Y[i] = T[I[i]]
}""")["g"]
    s = op.schedule("naive").compute_at("T", "Y", "i")
    x, idx = f32(6), np.array([5, 0, 3], np.int32)
    np.testing.assert_array_equal(op.build(schedule=s)(x, idx), op.reference(x, idx))
    np.testing.assert_array_equal(interp.run(op.lower(schedule=s), [x, idx])[0], x[idx] * 2)
    with pytest.raises(CallError, match="index out of bounds"):
        op.build(schedule=s)(x, np.array([6], np.int32))
