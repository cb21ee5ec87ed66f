"""Kernels built without shapes: the generic code is loop-partitioned (no guard or division
by a size in its hot loops), and the kernel specialises itself to the shapes it is called at
again."""
from __future__ import annotations

import re
import shutil
import warnings


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl
from tdsl import specialize
from tdsl.errors import CallError
from tdsl.lowering import te
from tdsl.lowering.loop_ir import For, If, Ramp, Seq, Store, walk_stmt

TARGETS = ["c -march=x86-64-v3", "c -march=x86-64-v4"]     # 8 and 16 lanes, on any host


def _vector_loops(func):
    """Serial loops whose bodies are straight-line vector statements: the hot loops."""
    out = []
    for s in walk_stmt(func.body):
        if isinstance(s, For):
            body = _flat(s.body)
            if all(isinstance(b, Store) and isinstance(b.indices[0], Ramp) for b in body):
                out.append((s, body))
    return out


def _flat(s) -> list:
    return [x for y in s.stmts for x in _flat(y)] if isinstance(s, Seq) else [s]


def _divides_by_a_size(e) -> bool:
    return any(isinstance(x, te.Binary) and x.op in ("//", "%") and
               not isinstance(x.b, te.Const) for x in te.walk(e))


def _exprs(s):
    for n in walk_stmt(s):
        if isinstance(n, Store):
            yield from n.indices
            yield n.value
        elif isinstance(n, If):
            yield n.cond


@pytest.mark.parametrize("target", TARGETS)
def test_generic_matmul_reduction_is_the_register_tile_of_the_fixed_build(target):
    lanes = tdsl.Target(target).lanes
    op = tdsl.stdlib["matmul"]
    generic = op.lower(target=target)
    fixed = op.lower(target=target, shapes={"M": 1024, "N": 1024, "K": 1024})
    assert generic.shape_vars                                  # the sizes stay symbolic
    hot = [(lp, body) for lp, body in _vector_loops(generic) if lp.var.name == "k"]
    assert hot, f"no straight-line vector reduction loop in\n{generic}"
    ((_, fixed_k),) = [x for x in _vector_loops(fixed) if x[0].var.name == "k"]
    # the full tiles' reduction: the same number of vector multiply-adds, nothing else
    assert max(len(body) for _, body in hot) == len(fixed_k)
    for lp, body in hot:
        assert not any(_divides_by_a_size(e) for e in _exprs(lp.body)), lp
        assert all(b.value.dtype == f"f32x{lanes}" for b in body)


@pytest.mark.parametrize("name, attrs", [("matmul", {}), ("softmax", {}),
                                         ("layer_norm", {})])
@pytest.mark.parametrize("target", TARGETS)
def test_no_guard_or_division_by_a_size_in_a_generic_vector_loop(name, attrs, target):
    func = tdsl.stdlib[name].lower(target=target, **attrs)
    loops = _vector_loops(func)
    assert loops, f"{name}: nothing vectorized without shapes\n{func}"
    for lp, _ in loops:
        assert not any(_divides_by_a_size(e) for e in _exprs(lp.body)), (name, lp)


def test_generic_matmul_c_reduction_loop_has_no_branch_or_division():
    warnings.simplefilter("ignore")
    kernel = tdsl.stdlib["matmul"].build(specialize=False)
    loops = re.findall(r"for \(int64_t k = 0; k < K; \+\+k\) \{\n(.*?)\n\s*\}\n", kernel.source,
                       re.S)
    assert loops
    full = [body for body in loops if "if (" not in body]
    assert full, "every reduction loop is guarded"
    for body in full:
        assert "floordiv" not in body and "floormod" not in body, body


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 70), k=st.integers(1, 40))
def test_generic_matmul_matches_numpy_at_any_size(m, n, k):
    kernel = _generic_matmul()
    rng = np.random.default_rng(m * 10000 + n * 100 + k)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


_CACHE = {}


def _generic_matmul():
    if "mm" not in _CACHE:
        _CACHE["mm"] = tdsl.stdlib["matmul"].build(specialize=False)
    return _CACHE["mm"]


def test_a_shape_called_twice_gets_its_own_build():
    op = tdsl.stdlib["softmax"]
    kernel = op.build()
    assert isinstance(kernel, specialize.ShapeSpecializingKernel)
    assert "int64_t N" in kernel.source            # the generic kernel's attributes
    x = np.random.default_rng(0).standard_normal((5, 37), dtype=np.float32)
    want = op.reference(x)
    np.testing.assert_allclose(kernel(x), want, rtol=1e-5, atol=1e-6)
    assert kernel.kernels == {}                    # once: the generic kernel ran
    np.testing.assert_allclose(kernel(x), want, rtol=1e-5, atol=1e-6)
    (built,) = kernel.kernels.values()             # twice: built for (5, 37)
    assert built.func.shape_vars == ()
    assert built.source == op.build(shapes={"N": 5, "D": 37}).source
    np.testing.assert_allclose(kernel(x), want, rtol=1e-5, atol=1e-6)
    y = x[:3, :20].copy()
    np.testing.assert_allclose(kernel(y), op.reference(y), rtol=1e-5, atol=1e-6)
    assert len(kernel.kernels) == 1


def test_a_bad_call_is_refused_and_builds_nothing():
    kernel = tdsl.stdlib["softmax"].build()
    x64 = np.ones((4, 8))
    for _ in range(3):
        with pytest.raises(CallError, match="float32"):
            kernel(x64)
    assert kernel.kernels == {}


def test_bind_specialises_at_once_and_ever_new_shapes_stop_at_the_cap(monkeypatch):
    monkeypatch.setattr(specialize, "MAX_SHAPES", 2)
    op = tdsl.stdlib["softmax"]
    kernel = op.build()
    x = np.ones((2, 9), np.float32)
    run, (out,) = kernel.bind(x)
    run()
    np.testing.assert_allclose(out, op.reference(x), rtol=1e-6)
    assert list(kernel.kernels) == [((2, 9),)]
    for d in (10, 11, 12):
        x = np.ones((2, d), np.float32)
        kernel(x)
        np.testing.assert_allclose(kernel(x), op.reference(x), rtol=1e-6)
    assert len(kernel.kernels) == 2                # the cap: the generic kernel serves d=12


def test_specialize_false_and_fixed_shapes_build_plain_kernels():
    op = tdsl.stdlib["softmax"]
    assert not isinstance(op.build(specialize=False), specialize.ShapeSpecializingKernel)
    assert not isinstance(op.build(shapes={"N": 2, "D": 3}), specialize.ShapeSpecializingKernel)
    # a library this host cannot run is the plain generic kernel
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("needs aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu)")
    assert not isinstance(op.build(target="c -march=armv8-a"),
                          specialize.ShapeSpecializingKernel)


def test_a_shape_whose_build_fails_is_served_by_the_generic_kernel():
    op = tdsl.stdlib["softmax"]
    kernel = op.build()

    def refuse(sizes):
        raise tdsl.errors.ScheduleError(f"no schedule at {sizes}")
    kernel._build = refuse
    x = np.ones((3, 5), np.float32)
    kernel(x)
    with pytest.warns(UserWarning, match="not specialised"):
        np.testing.assert_allclose(kernel(x), op.reference(x), rtol=1e-6)
    assert kernel.kernels[((3, 5),)] is kernel.generic
    np.testing.assert_allclose(kernel(x), op.reference(x), rtol=1e-6)
