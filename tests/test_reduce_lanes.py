"""Horizontal reductions (tdsl/lowering/passes/reduce_lanes.py): a short max, min or an
rfactor's sum over contiguous values combined as a tree of vector operations."""
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tdsl
from tdsl.lowering import interp, te
from tdsl.lowering.loop_ir import stmt_exprs, walk_stmt
from tdsl.target import Target

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def _trees(func):
    """(name, lanes) of each horizontal reduction in ``func``."""
    return [(e.name, int(e.args[0].dtype.split("x")[1]))
            for s in walk_stmt(func.body) for x in stmt_exprs(s) for e in te.walk(x)
            if isinstance(e, te.Intrinsic) and e.name.startswith("reduce_")]


@needs_gcc
@pytest.mark.parametrize("target", ["c", "c -march=x86-64-v3"])
def test_std_softmax_combines_its_lanes_as_trees(target):
    """The row's maximum and sum end in one vector of partial results each (rfactor by the
    target's lanes): both are combined by a tree, not a serial loop of dependent steps."""
    op = tdsl.stdlib["softmax"]
    lanes = Target(target).lanes
    func = op.lower(target=target, shapes={"N": 64, "D": 1024})
    trees = _trees(func)
    assert sorted(trees) == [("reduce_add", lanes), ("reduce_max", lanes)], trees
    x = np.random.default_rng(0).standard_normal((64, 1000)).astype(np.float32)
    want = np.exp(x - x.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(op.build(target, shapes={"N": 64, "D": 1000})(x), want,
                               rtol=1e-5, atol=1e-7)


def _fold(op: str, row: np.ndarray) -> np.float32:
    """The serial loop's value: ``acc = op(acc, x)`` from the identity, as the emitters'
    helpers compute it (``x > acc ? x : acc``, then x if x is a NaN; min with ``<``)."""
    acc = np.float32(-np.inf if op == "max" else np.inf)
    for x in row:
        better = x > acc if op == "max" else x < acc
        acc = x if (np.isnan(x) or better) else acc
    return acc


VALUES = [np.float32(v) for v in (0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf)] + \
    [np.uint32(bits).view(np.float32) for bits in (0x7FC00000, 0xFFC00001, 0x7FC00123)]


@needs_gcc
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_a_max_or_min_over_lanes_picks_what_the_loop_picks(data):
    """A tree of max (min) steps, neighbours first, each keeping its first operand on a tie
    and taking a NaN from either, gives the serial loop's element bit for bit: the first of
    the equal largest (+0 or -0), the last NaN (its payload). Drawn from zeros of both
    signs, infinities and NaNs of three payloads; against the loop written out, in C and in
    the loop-IR interpreter."""
    op = data.draw(st.sampled_from(["max", "min"]))
    lanes = data.draw(st.sampled_from([2, 4, 8, 16]))
    rows = data.draw(st.integers(1, 6))
    x = np.array([[data.draw(st.sampled_from(VALUES)) for _ in range(lanes)]
                  for _ in range(rows)], np.float32)
    fn = tdsl.loads(f"op r(X: f32[N, {lanes}]) -> Y: f32[N] {{\n"
                    f"    Y[n] = {op}[k](X[n, k])\n}}\n")["r"]
    func = fn.lower(target="c", shapes={"N": rows})
    assert _trees(func) == [(f"reduce_{op}", lanes)]
    want = np.array([_fold(op, row) for row in x], np.float32).view(np.uint32)
    got = fn.build("c", shapes={"N": rows})(x)
    np.testing.assert_array_equal(got.view(np.uint32), want)
    (ran,) = interp.run(func, [x])
    np.testing.assert_array_equal(np.isnan(ran), np.isnan(want.view(np.float32)))
    np.testing.assert_array_equal(ran[~np.isnan(ran)], want.view(np.float32)[~np.isnan(ran)])


SUM = """
op s(X: f32[N, 16]) -> Y: f32[N] {
    Y[n] = sum[k](X[n, k])
}
"""


@needs_gcc
@pytest.mark.parametrize("partials", [False, True])
def test_a_sum_is_a_tree_only_over_an_rfactor_s_partials(partials):
    """A sum's order is its rounding: a plain sum over 16 values stays the serial loop
    (((x0 + x1) + x2) + ...); the combination of an rfactor's partials, which the schedule
    has reordered already, is the tree ((x0 + x1) + (x2 + x3)) + ... bit for bit."""
    text = SUM + ("schedule s for cpu {\n    P = rfactor(Y.k, 16)\n}\n" if partials else "")
    fn = tdsl.loads(text)["s"]
    func = fn.lower(target="c", shapes={"N": 5})
    assert _trees(func) == ([("reduce_add", 16)] if partials else [])
    x = (np.random.default_rng(1).standard_normal((5, 16)) * 1e4).astype(np.float32)
    if partials:
        want = x
        while want.shape[1] > 1:
            want = want[:, 0::2] + want[:, 1::2]
        want = want[:, 0]
    else:
        want = np.zeros(5, np.float32)
        for k in range(16):
            want = want + x[:, k]
    got = fn.build("c", shapes={"N": 5})(x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["opencl", "cuda"])
def test_gpu_targets_keep_their_threads_scalar(target):
    """On a GPU a thread's values are scalars (cross-thread reductions are thread_reduce's):
    no lane trees there."""
    fn = tdsl.loads("op r(X: f32[N, 8]) -> Y: f32[N] {\n    Y[n] = max[k](X[n, k])\n}\n")["r"]
    assert _trees(fn.lower(target=target, shapes={"N": 4})) == []
