"""Outputs of a size fixed at build time, at least half the last-level cache, that a kernel
never reads back are stored past the caches (non-temporal vector stores, emit_c/c.py
`streamed_outputs`), each thread fencing its stores before the team's barrier: the values
are the plain stores' whatever the output's alignment, and an output the kernel reads back
is never streamed."""
from __future__ import annotations

import dataclasses
import re
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.emit_c.c import emit_c

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

SCALE = tdsl.loads("op scale(X: f32[N]) -> Y: f32[N] {\n    Y[i] = X[i] * 2.0 + 1.0\n}\n")
# a sum kept in the output, a vector of columns at a time: the kernel reads its output back
COLUMN_SUM = tdsl.loads("""op colsum(X: f32[K, N]) -> Y: f32[N] {
    Y[n] = sum[k](X[k, n])
}

schedule colsum for cpu {
    no, ni = split(Y.n, lanes)
    reorder(no, Y.k, ni)
    vectorize(ni)
}
""")
SMALL_L3 = "c -l3=65536"         # a 64 KiB last-level cache: 32 KiB of output streams


def test_a_large_output_streams_and_keeps_its_values_at_any_alignment():
    k = SCALE["scale"].build(SMALL_L3, shapes={"N": 1 << 14})     # 64 KiB of output
    assert "tdsl_stream_" in k.source and "tdsl_sfence();" in k.source
    x = np.random.default_rng(0).standard_normal(1 << 14).astype(np.float32)
    np.testing.assert_array_equal(k(x), x * 2 + 1)
    # an output that starts 4 bytes past a cache line: the plain store, no fault
    block = np.zeros((1 << 14) + 1, np.float32)
    out = block[1:]
    assert out.ctypes.data % 64 != 0
    k(x, out=out)
    np.testing.assert_array_equal(out, x * 2 + 1)


def test_a_small_output_or_an_unknown_cache_keeps_the_plain_stores():
    small = SCALE["scale"].build(SMALL_L3, shapes={"N": 1024})     # 4 KiB of output
    assert "tdsl_stream_" not in small.source and "tdsl_sfence" not in small.source
    large = SCALE["scale"].build(SMALL_L3, shapes={"N": 1 << 14})
    unknown = dataclasses.replace(tdsl.Target(SMALL_L3), l3=0)    # a cross target's
    assert "tdsl_stream_" not in emit_c(large.func, None, unknown).source


def test_sizes_known_only_at_the_call_keep_the_plain_stores():
    k = SCALE["scale"].build(SMALL_L3)
    assert "tdsl_stream_" not in k.source
    x = np.arange(1 << 14, dtype=np.float32)
    np.testing.assert_array_equal(k(x), x * 2 + 1)


def test_an_output_the_kernel_reads_back_is_not_streamed():
    k = COLUMN_SUM["colsum"].build(SMALL_L3, shapes={"N": 1 << 14, "K": 4})
    assert re.search(r"tdsl_load_f32x\d+\(&Y\[", k.source)       # vector loads of Y
    assert "tdsl_stream_" not in k.source
    x = np.random.default_rng(1).standard_normal((4, 1 << 14)).astype(np.float32)
    np.testing.assert_allclose(k(x), x.sum(0), rtol=1e-5, atol=1e-5)


def test_the_parallel_loop_fences_in_every_thread():
    """Each thread's stores past the caches are ordered before the team's barrier: the
    parallel loop runs without its own barrier (nowait) and fences after it."""
    k = SCALE["scale"].build(SMALL_L3, shapes={"N": 1 << 20})
    text = k.source
    assert "#pragma omp for schedule(static) nowait" in text
    body = text[text.index("#pragma omp for schedule(static) nowait"):]
    assert body.index("tdsl_sfence();") < body.index("return")
    x = np.random.default_rng(2).standard_normal(1 << 20).astype(np.float32)
    np.testing.assert_array_equal(k(x), x * 2 + 1)


@pytest.mark.parametrize("dtype", ["f32", "u8", "f64"])
def test_large_outputs_start_on_a_cache_line(dtype):
    """numpy starts a large array 16 bytes past a page, where no vector store of it would be
    aligned and none could stream: outputs from ALIGNED_MIN_BYTES on start on a cache line,
    a kernel's (sizes fixed at the build or bound at the call) and a graph's, and keep their
    values."""
    from tdsl.lowering.sizes import ALIGNED_MIN_BYTES, CACHE_LINE
    n = ALIGNED_MIN_BYTES // {"f32": 4, "u8": 1, "f64": 8}[dtype] + 3
    module = tdsl.loads(f"op widen(X: f32[N]) -> Y: {dtype}[N] {{\n"
                        f"    Y[i] = {dtype}(X[i] * 2.0)\n}}\n\n"
                        f"graph g(X: f32[N]) -> Y: {dtype}[N] {{\n    Y = widen(X)\n}}\n")
    x = np.random.default_rng(3).uniform(0, 100, n).astype(np.float32)
    want = module["widen"].reference(x)
    fixed = module["widen"].build(shapes={"N": n})
    bound_at_call = module["widen"].build()
    for y in (fixed(x), bound_at_call(x), bound_at_call(x[3:]), module["g"].build()(x)):
        assert y.ctypes.data % CACHE_LINE == 0 and y.flags.c_contiguous and y.flags.writeable
        np.testing.assert_array_equal(y, want[n - len(y):])
