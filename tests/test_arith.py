"""The one index algebra (tdsl/lowering/arith): normal form, prover, and their users agreeing."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl
from tdsl.errors import CheckError
from tdsl.lowering import te
from tdsl.lowering.arith.evaluate import eval_index
from tdsl.lowering.arith.linear import equal, exact, linear, normal_form
from tdsl.lowering.arith.prover import Ctx, bounds, relax
from tdsl.lowering.arith.simplify import simplify
from tdsl.lowering.reference.views import Axis, affine

I = "i64"
N, K, i, j = te.Var("N"), te.Var("K"), te.Var("i"), te.Var("j")


def c(v):
    return te.Const(v, I)


def test_products_of_sizes_are_monomials():
    assert linear(N * K) == linear(K * N)
    assert linear(N * K - K * N).to_expr() == c(0)
    assert str(linear((N + c(1)) * (K - c(1))).to_expr()) == "K - N + K * N - 1"
    assert equal(N * c(2) * K, K * (N + N))


@pytest.mark.parametrize("e, text", [
    (N * c(2) - c(1), "2 * N - 1"),          # the coefficient in front
    (c(3) - N, "3 - N"),                     # a positive part leads: no negation node
    (c(0) - N * c(2) - c(3), "-2 * N - 3"),  # unless every part is negative
    (i * c(4) + N, "N + 4 * i"),             # variables by name
])
def test_the_canonical_rendering(e, text):
    assert str(linear(e).to_expr()) == text


_ATOMS = [N, K, i, j]


@st.composite
def _index_exprs(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(_ATOMS + [c(draw(st.integers(-4, 4)))]))
    op = draw(st.sampled_from(["+", "-", "*", "//", "%", "min"]))
    a, b = draw(_index_exprs(depth - 1)), draw(_index_exprs(depth - 1))
    if op in ("//", "%"):
        return te.Binary(op, a, c(draw(st.integers(1, 5))), I)
    if op == "min":
        return te.Intrinsic("min", (a, b), I)
    return te.Binary(op, a, b, I)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(e=_index_exprs(), env=st.fixed_dictionaries(
    {"N": st.integers(0, 9), "K": st.integers(0, 9), "i": st.integers(-9, 9),
     "j": st.integers(-9, 9)}))
def test_both_constructors_keep_the_value(e, env):
    want = eval_index(e, env)
    assert eval_index(linear(e).to_expr(), env) == want
    assert eval_index(exact(e).to_expr(), env) == want
    assert eval_index(normal_form(e), env) == want
    assert exact(e, env).is_const and exact(e, env).const == want


def _fused_index(f: te.Expr, extents: list[int]) -> te.Expr:
    """The row-major flat index of axes of ``extents`` fused into ``f``, each axis read
    back as a schedule's fuse does: ``(f // inner) % extent``."""
    out, inner = c(0), 1
    for k, n in reversed(list(enumerate(extents))):
        axis = te.Binary("//", f, c(inner), I) if inner > 1 else f
        if k > 0:
            axis = te.Binary("%", axis, c(n), I)
        out = te.Binary("+", out, te.Binary("*", axis, c(inner), I), I)
        inner *= n
    return out


@settings(max_examples=80, deadline=None, derandomize=True)
@given(extents=st.lists(st.sampled_from([1, 2, 3, 4, 7, 8, 12, 14, 56]), min_size=2,
                        max_size=4),
       lanes=st.sampled_from([4, 8, 16]))
def test_fused_axes_read_back_flat(extents, lanes):
    """Axes fused into one loop, and that loop split by a vector, index a row-major tensor
    at the loop's own position: ``x % 56 + 56 * (x // 56 % 56) + 3136 * (x // 3136)`` is
    ``x``, and split by 16 ``16 * o + i``, with no division left for a vector of 16 to
    gather by (a default schedule flattens an elementwise op's rows of 56 so)."""
    f, o, ii = te.Var("f"), te.Var("o"), te.Var("ii")
    assert simplify(_fused_index(f, extents)) == f
    total = int(np.prod(extents))
    if total % lanes:
        return
    ctx = Ctx().with_loop(o, c(0), c(total // lanes)).with_loop(ii, c(0), c(lanes))
    split = te.substitute(_fused_index(f, extents), {f: o * c(lanes) + ii})
    out = simplify(split, lambda e: bounds(e, ctx))
    assert out == linear(o * c(lanes) + ii).to_expr(), out
    for ov, iv in ((0, 0), (total // lanes - 1, lanes - 1), (total // lanes // 2, 1)):
        assert eval_index(split, {"o": ov, "ii": iv}) == ov * lanes + iv


def test_exact_is_integer_arithmetic_only():
    x = te.Tensor("X", (N,), "f32")
    assert exact(te.Const(1.5, "f32")) is None
    assert exact(te.Load(x, (i,), "f32")) is None
    assert exact(te.Cast(te.Load(te.Tensor("I", (N,), "i32"), (i,), "i32"), I)) is None
    assert exact(te.Binary("//", c(7), c(2), I)).const == 3
    assert exact(te.Binary("//", N, c(0), I)) is not None       # left to run time, an atom


def test_a_size_keeps_its_unit_division():
    size = te.Binary("+", te.Binary("//", N - c(3), c(1), I), c(1), I)
    assert str(normal_form(size)) == "(N - 3) // 1 + 1"         # the window condition stays
    assert equal(size, N - c(2))                               # equal as numbers


def test_bounds_of_products_and_positive_sizes():
    ctx = Ctx().with_loop(i, c(0), c(4))
    assert bounds(i * N, ctx) == (0, None)                     # a size is >= 0
    assert bounds(i * N + c(1), Ctx(positive=frozenset({N})))[0] == 1
    assert bounds(N * K, Ctx(positive=frozenset({N, K}))) == (1, None)
    assert bounds(c(0) - N, Ctx(positive=frozenset({N})))[1] == -1


def test_a_guard_on_the_channel_bounds_the_simplified_block_index():
    """A channel concatenation read in blocks of 8: under ``8 * cb + ci < 64`` the block
    index ``(8 * cb + ci) // 8``, which simplifies to ``cb + ci // 8``, is at most 7, and
    past the guard ``(8 * cb + ci - 64) // 8 = cb + ci // 8 - 8`` is at least 0. The fact's
    coefficient (8) is no multiple of the index's (1): the prover once took 15 and -8, and
    the region check refused SqueezeNet's and DenseNet-121's concatenations at 8 lanes."""
    cb, ci = te.Var("cb"), te.Var("ci")
    for block, blocks in ((8, 16), (16, 8), (16, 3)):
        chan = cb * c(block) + ci
        ctx = Ctx().with_loop(cb, c(0), c(blocks)).with_loop(ci, c(0), c(block))
        first = block * blocks // 2
        guard = te.Compare("<", chan, c(first))
        for idx, truth, want in ((te.Binary("//", chan, c(block), I), True,
                                  (0, (first - 1) // block)),
                                 (te.Binary("//", chan - c(first), c(block), I), False,
                                  ((0, (block * blocks - 1 - first) // block)))):
            assert bounds(simplify(idx), ctx.with_cond(guard, truth)) == want, (block, idx)
        # without the guard, the whole range (the guard is what bounds it)
        assert bounds(simplify(te.Binary("//", chan, c(block), I)), ctx) == (0, blocks - 1)


def test_relax_attained_refuses_what_it_cannot_reach():
    inner = {i: (c(0), N - c(1))}
    assert relax(i + c(1), inner, attained=True) == (c(1), N)
    assert relax(i - te.Binary("//", i, c(2), I), inner, attained=True) is None
    assert relax(te.Binary("%", i, c(4), I), inner, attained=True) is None
    assert relax(te.Binary("%", i, c(4), I), inner) == (c(0), c(3))   # a bound, not reached


def test_the_reference_reads_affine_subscripts_through_the_same_form():
    axes = {"i": Axis(0, 0, 3), "j": Axis(1, 2, 4)}
    assert affine(i * N + j, axes, {"N": 5}) == ({0: 5, 1: 1}, 2)
    assert affine(i * j, axes, {}) is None                     # a product of axes
    assert affine(te.Binary("//", i, c(2), I), axes, {}) is None


GUARDED = """
op skip2(X: f32[N]) -> Y: f32[N] {
    Y[i] = select(i // 2 >= 1, X[i - 2], 0.0)
}
"""


def test_a_guard_on_a_floor_leaves_the_access_to_the_call():
    """The checker once took ``i // 2 >= 1`` as no guard at all and refused ``X[i - 2]``
    (it reads from i = 2 on, always in bounds)."""
    op = tdsl.loads(GUARDED)["skip2"]
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(op.reference(x), [0, 0, 0, 1, 2, 3])


def test_product_shapes_check_as_equal_and_out_of_bounds():
    ok = """op flat(X: f32[N, K], Z: f32[N * K]) -> Y: f32[K * N] { Y[i] = Z[i] + X[0, 0] }"""
    assert tdsl.loads(ok)["flat"].reference(np.ones((2, 3), np.float32),
                                            np.arange(6, dtype=np.float32)).shape == (6,)
    bad = """op flat(X: f32[N, K], Z: f32[N * K]) -> Y: f32[K * N + 1] { Y[i] = Z[i] + X[0, 0] }"""
    with pytest.raises(CheckError, match=r"index i ranges over \[0, K \* N\]"):
        tdsl.loads(bad)
