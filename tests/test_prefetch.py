"""The `prefetch` schedule primitive (`tdsl.lowering.passes.prefetch`).

What it promises, checked by running the lowered loops in the interpreter with a trace: in
every iteration of the outer axis but the last, the cache lines prefetched cover every line
that the next iteration reads of the tensor, and no prefetch leaves the tensor. The results
stay the reference's (a prefetch is a hint), in the interpreter and in compiled C.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl
from tdsl.errors import ScheduleError
from tdsl.lowering import interp
from tdsl.lowering.loop_ir import Prefetch, walk_stmt
from tdsl.lowering.lower import PIPELINE, lower
from tdsl.lowering.passes.prefetch import LINE

# a dense layer on packed weights (as std's dense_packed), the row and panel-block loops
# either separate (Y.jb a loop) or fused (Y.jb the outermost axis of blk)
SRC = '''
op dense_pf(X: f32[N, K], Wp: f32[MB, K, MI], b: f32[M]) -> Y: f32[N, M] {
    P: f32[N, M]
    P[n, m] = sum[k](X[n, k] * Wp[m // MI, k, m % MI])
    Y[n, m] = P[n, m] + b[m]
}
schedule dense_pf for c {
    knob ti in [1, 2, 3, 4] = 2
    knob tj in [4, 8] = 4
    knob nb in [1, 2, 3] = 2
    knob fused in [0, 1] = 1
    io, jo, ii, ji = tile(Y.n, Y.m, ti, tj)
    jb, jp = split(jo, nb)
    reorder(jb, io, jp)
    prefetch(Wp, Y.jb, P.k)
    if fused == 1 {
        blk = fuse(jb, io)
        parallel(blk)
    }
    compute_at(P, Y.jp)
    reorder(P.k, P.n, P.m)
    unroll(P.n)
    vectorize(P.m)
    unroll(ii)
    vectorize(ji)
}
'''


def _op():
    return tdsl.loads(SRC)["dense_pf"]


def _data(n, k, m, tj, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k), dtype=np.float32)
    w = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal(m, dtype=np.float32)
    wp = tdsl.stdlib["pack_dense_weights"].reference(w, block=tj)
    return x, w, b, wp


class _Traced(interp._Interp):
    """The interpreter, recording per iteration of the prefetch's outer axis the lines of
    ``tensor`` read and prefetched."""

    def __init__(self, func, tensor):
        super().__init__(func, None)
        (_, self.outer, step, _, _), = func.attrs["prefetch"]
        self.step = step.value
        self.tensor = tensor
        self.read: dict[int, set] = {}
        self.fetched: dict[int, set] = {}
        self.outside: list[int] = []

    def _iteration(self) -> int:
        # a loop of one iteration is no loop after simplification: iteration 0
        return (self.env.get(self.outer.name) or 0) // self.step

    def stmt(self, s):
        if isinstance(s, Prefetch):
            offset = self.index(s.index)
            size = self.describe(s.buffer)[2]
            if not 0 <= offset < size:
                self.outside.append(offset)
            self.fetched.setdefault(self._iteration(), set()).add(offset * 4 // LINE)
            return
        super().stmt(s)

    def offset(self, buf, indices, mask=None):
        off = super().offset(buf, indices, mask)
        if buf.name == self.tensor:
            lines = {int(o) * 4 // LINE for o in np.atleast_1d(off)}
            self.read.setdefault(self._iteration(), set()).update(lines)
        return off


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 7), k=st.integers(2, 24), m=st.integers(1, 40),
       ti=st.sampled_from([1, 2, 3, 4]), tj=st.sampled_from([4, 8]),
       nb=st.sampled_from([1, 2, 3]), fused=st.sampled_from([0, 1]))
def test_each_iteration_prefetches_what_the_next_one_reads(n, k, m, ti, tj, nb, fused):
    x, w, b, wp = _data(n, k, m, tj)
    config = {"ti": ti, "tj": tj, "nb": nb, "fused": fused}
    shapes = {"N": n, "K": k, "MB": wp.shape[0], "MI": tj, "M": m}
    # the passes that cut loops into pieces left out, so that the trace sees the outer loop's
    # iterations (they move statements, prefetches alike, without changing what runs when)
    op = _op()
    sched = op.schedule(shapes=shapes)
    func = lower(sched.fn, sched, config, shapes, pipeline=[
        step for step in PIPELINE if step[0] not in ("partition", "unswitch", "unroll")])
    run = _Traced(func, "Wp")
    with np.errstate(all="ignore"):
        (y,) = run.call([x, wp, b])
    np.testing.assert_allclose(y, x @ w.T + b, rtol=1e-4, atol=1e-4)
    assert run.outside == []
    iterations = sorted(run.read)
    assert iterations == list(range(-(-m // (tj * nb))))
    for j in iterations[:-1]:
        missing = run.read[j + 1] - run.fetched.get(j, set())
        assert not missing, f"iteration {j} left lines {sorted(missing)} of {j + 1} unfetched"
    # the last iteration has no next one
    assert iterations[-1] not in run.fetched


def test_compiled_kernel_prefetches_and_computes_the_same():
    n, k, m, tj = 30, 64, 200, 8
    x, w, b, wp = _data(n, k, m, tj, seed=1)
    shapes = {"N": n, "K": k, "MB": wp.shape[0], "MI": tj, "M": m}
    kernel = _op().build(shapes=shapes, config={"ti": 3, "tj": tj, "nb": 2, "fused": 1})
    assert "__builtin_prefetch(&Wp[" in kernel.source
    np.testing.assert_allclose(kernel(x, wp, b), x @ w.T + b, rtol=1e-4, atol=1e-4)


def test_std_dense_prefetches_only_where_row_tiles_reuse_a_block():
    """A GEMM's block of panels is read by every row tile; a matrix-vector product reads
    each panel once, and there the prefetches would only cost."""
    std = tdsl.stdlib["dense_packed"]
    lanes = tdsl.Target("c").lanes
    for n, expect in ((128, True), (1, False)):
        k, m = 768, 8 * lanes       # 4 panels, blocks of 2 (an eighth of L2 or less)
        shapes = {"N": n, "K": k, "MB": 4, "MI": 2 * lanes, "M": m}
        func = std.lower(shapes=shapes)
        found = any(isinstance(s, Prefetch) for s in walk_stmt(func.body))
        assert found == expect, n
        if found:
            assert "prefetch Wp[" in str(func)


def test_prefetch_is_a_no_op_where_the_reads_are_not_affine():
    """A read through a division by a size left symbolic is no affine offset: no
    prefetch, the same results."""
    src = '''
    op gather_rows(X: f32[N, K], S: i32[R]) -> Y: f32[R, K] {
        Y[r, k] = X[S[r], k]
    }
    schedule gather_rows for c {
        ro, ri = split(Y.r, 2)
        prefetch(X, Y.ro, Y.k)
    }
    '''
    op = tdsl.loads(src)["gather_rows"]
    func = op.lower()
    assert not any(isinstance(s, Prefetch) for s in walk_stmt(func.body))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    s = np.array([3, 0, 2], np.int32)
    np.testing.assert_array_equal(interp.run(func, [x, s])[0], x[s])


@pytest.mark.parametrize("line, message", [
    ("prefetch(Q, Y.jb, P.k)", "Q is not a tensor of dense_pf"),
    ("prefetch(Wp, Y.zz, P.k)", "Y has no axis zz"),
    ("prefetch(Wp, Y.jo, P.k)", "Y.jo is neither a loop nor an axis of a fuse"),
])
def test_prefetch_errors_name_what_is_wrong(line, message):
    src = SRC.replace("prefetch(Wp, Y.jb, P.k)", line)
    n, k, m, tj = 4, 8, 8, 4
    with pytest.raises(ScheduleError, match=message):
        tdsl.loads(src)["dense_pf"].lower(
            shapes={"N": n, "K": k, "MB": 2, "MI": tj, "M": m}, config={"fused": 1})


def test_an_outer_axis_of_one_iteration_prefetches_nothing():
    """std's chunked convolution names Y.fo, an axis of a fuse; with one filter block it is
    the constant 0 after simplification: no next iteration, no prefetch, no error."""
    op = tdsl.stdlib["conv2d_nchwc_valid"]
    lanes = tdsl.Target("c").lanes
    shapes = dict(N=1, CB=1, IH=3, IW=3, CI=lanes, FB=1, KH=1, KW=1, FI=lanes)
    config = {"nb": 1, "tx": 3, "ty": 1, "order": "crs", "rows": 1, "kc": 2, "ry": 1, "pf": 1}
    func = op.lower(shapes=shapes, config=config)
    assert not any(isinstance(s, Prefetch) for s in walk_stmt(func.body))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 3, 3, lanes), dtype=np.float32)
    w = rng.standard_normal((1, 1, 1, 1, lanes, lanes), dtype=np.float32)
    np.testing.assert_allclose(interp.run(func, [x, w])[0], op.reference(x, w),
                               rtol=1e-5, atol=1e-5)
