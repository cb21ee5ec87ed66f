"""Cross-thread reductions on GPUs: a reduction loop bound to ``threadIdx`` becomes
per-thread partial results combined in log-depth steps (shared memory and the barrier
pass's barriers; on CUDA the last warp-sized steps are ``__shfl_down_sync``). The steps are
checked in the loop IR and in the printed CUDA, the numbers on OpenCL (PoCL in CI), and the
schedules that can't reduce across threads are refused at their line."""
import math

import numpy as np
import pytest

import tdsl
from tdsl.errors import BuildError
from tdsl.emit_cuda import emit_cuda
from tdsl.emit_opencl import unavailable_reason
from tdsl.lowering import te
from tdsl.lowering.loop_ir import Allocate, Barrier, Store, walk_stmt

needs_opencl = pytest.mark.skipif(unavailable_reason() is not None,
                                  reason=f"OpenCL: {unavailable_reason()}")

ROWS = """
op rows(X: f32[N, D]) -> Y: f32[N] {
    Y[n] = {kind}[d](X[n, d])
}
schedule rows for gpu {
    knob threads in [1, 2, 3, 7, 32, 48, 64, 100, 128, 256] = 64
    bind(Y.n, blockIdx.x)
    do, dt = split(Y.d, threads)
    bind(dt, threadIdx.x)
}
"""


def _rows(kind="sum"):
    return tdsl.loads(ROWS.replace("{kind}", kind), "rows.tdsl")["rows"]


def _barriers(func) -> int:
    return sum(isinstance(s, Barrier) for s in walk_stmt(func.body))


def _shuffles(func) -> int:
    n = 0
    for s in walk_stmt(func.body):
        if isinstance(s, Store):
            n += sum(isinstance(e, te.Intrinsic) and e.name == "shuffle_down"
                     for e in te.walk(s.value))
    return n


@pytest.mark.parametrize("threads", [2, 3, 7, 64, 100, 256])
def test_opencl_reduction_takes_log_depth_steps(threads):
    """ceil(log2(threads)) halving steps, a barrier before each and one before the result
    is written and one before it is read: no serial loop over the partial results."""
    func = _rows().lower(target="opencl", config={"threads": threads})
    assert _barriers(func) == math.ceil(math.log2(threads)) + 2
    assert _shuffles(func) == 0


@pytest.mark.parametrize("threads,shared_steps", [(32, 0), (48, 1), (64, 1), (256, 3)])
def test_cuda_reduction_ends_in_warp_shuffles(threads, shared_steps):
    """Halving through shared memory down to a warp (a barrier before each step), then five
    shuffles in the first warp, which reads only its own slots (no barrier before it or
    between them; one before the result is read); fewer threads than a warp stay in shared
    memory."""
    func = _rows().lower(target="cuda", config={"threads": threads})
    assert _shuffles(func) == 5
    assert _barriers(func) == shared_steps + 1
    src = emit_cuda(func).source
    assert src.count("__shfl_down_sync(0xffffffffu") == 5
    few = _rows().lower(target="cuda", config={"threads": 7})
    assert _shuffles(few) == 0 and _barriers(few) == 3 + 2


@needs_opencl
@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
def test_cross_thread_reductions_match_numpy_on_opencl(kind):
    op = _rows(kind)
    rng = np.random.default_rng(3)
    for threads in (1, 3, 48, 128):
        kernel = op.build(target="opencl", config={"threads": threads})
        for n, d in [(1, 1), (2, 47), (3, 300)]:
            x = rng.uniform(0.5, 1.5, (n, d)).astype(np.float32)
            want = getattr(np, kind)(x.astype(np.float64), axis=1)
            np.testing.assert_allclose(kernel(x), want, rtol=1e-4)


# ---------------------------------------------------------------------------- refusals

def _lower(block, target="opencl"):
    src = "op rows(X: f32[N, D]) -> Y: f32[N] {\n    Y[n] = sum[d](X[n, d])\n}\n" + block
    return tdsl.loads(src, "r.tdsl")["rows"].lower(target=target)


def test_a_reduction_bound_to_blocks_is_refused():
    with pytest.raises(tdsl.ScheduleError, match="blocks can't share a result"):
        _lower("schedule rows for gpu {\n    bind(Y.n, threadIdx.x)\n"
               "    bind(Y.d, blockIdx.x)\n}")


def test_a_reduction_over_a_symbolic_number_of_threads_is_refused_at_its_line():
    with pytest.raises(tdsl.ScheduleError, match="constant number of threads") as e:
        _lower("schedule rows for gpu {\n    bind(Y.n, blockIdx.x)\n"
               "    bind(Y.d, threadIdx.x)\n}")
    assert "r.tdsl:6" in str(e.value)


def test_another_thread_loop_in_a_reducing_stage_is_refused():
    with pytest.raises(tdsl.ScheduleError, match="every thread of the block"):
        _lower("schedule rows for gpu {\n    no, ni = split(Y.n, 4)\n"
               "    bind(no, blockIdx.x)\n    bind(ni, threadIdx.y)\n"
               "    do, dt = split(Y.d, 32)\n    bind(dt, threadIdx.x)\n}")


def test_a_data_loop_inside_a_cross_thread_reduction_is_refused():
    with pytest.raises(tdsl.ScheduleError, match="inside the reduction loops"):
        _lower("schedule rows for gpu {\n    no, ni = split(Y.n, 4)\n"
               "    bind(no, blockIdx.x)\n    do, dt = split(Y.d, 32)\n"
               "    reorder(no, do, dt, ni)\n    bind(dt, threadIdx.x)\n}")


def test_a_reduction_inside_a_consumers_thread_loop_is_refused():
    src = """
op two(X: f32[N, D]) -> Y: f32[N, D] {
    S: f32[N]
    S[n] = sum[d](X[n, d])
    Y[n, d] = X[n, d] / S[n]
}
schedule two for gpu {
    bind(Y.n, blockIdx.x)
    dv, dt = split(Y.d, 32)
    bind(dt, threadIdx.x)
    compute_at(S, Y.dt)
    so, st = split(S.d, 32)
    bind(st, threadIdx.x)
}
"""
    with pytest.raises(BuildError, match="each thread\\s+would run the whole"):
        tdsl.loads(src, "two.tdsl")["two"].lower(target="opencl")


# ---------------------------------------------------------------------------- the templates

def _shared(func) -> dict:
    """Shared buffers and their element counts (lowered buffers are flat)."""
    return {s.buffer.name: math.prod(int(d.value) for d in s.buffer.shape)
            for s in walk_stmt(func.body)
            if isinstance(s, Allocate) and s.buffer.scope == "shared"}


@pytest.mark.parametrize("target", ["cuda", "opencl"])
def test_convolution_templates_tile_through_shared_memory(target):
    """The knobs size the tiles: conv2d's input tile is tc channels x (th + kt - 1) x
    (tw + kt - 1) at stride 1, its weights tf x tc x kt x kt; depthwise's tile is one plane's
    (th + kt - 1) x (tw + kt - 1)."""
    cfg = {"tf": 16, "rf": 2, "th": 4, "tw": 8, "rx": 2, "tc": 4, "kt": 3, "taps": "loop"}
    func = tdsl.stdlib["conv2d"].lower(target=target, config=cfg, padding=1)
    assert _shared(func) == {"XS": 4 * 6 * 10, "WS": 16 * 4 * 3 * 3}
    func = tdsl.stdlib["depthwise_conv2d"].lower(
        target=target, config={"th": 4, "tw": 32, "rx": 4, "kt": 2, "taps": "unrolled"},
        padding=1)
    assert _shared(func) == {"XS": 5 * 33, "WS": 2 * 2}


def test_pool_templates_load_their_windows_into_shared_memory():
    func = tdsl.stdlib["max_pool2d"].lower(target="opencl", config={"th": 4, "tw": 16},
                                           kernel=3, stride=2, padding=1)
    assert _shared(func) == {"XS": 9 * 33}        # (4 - 1) * 2 + 3 by (16 - 1) * 2 + 3
    func = tdsl.stdlib["global_avg_pool2d"].lower(target="cuda", config={"threads": 64})
    assert _shuffles(func) == 5


def test_layer_norm_and_softmax_templates_reduce_across_threads():
    for name in ("softmax", "layer_norm"):
        func = tdsl.stdlib[name].lower(target="opencl", config={"threads": 128})
        assert _barriers(func) == 2 * (7 + 2)                # two log-depth reductions
        assert _shuffles(tdsl.stdlib[name].lower(target="cuda")) == 2 * 5
