"""Whole graphs as one embedded .c/.h pair: the int8 keyword-spotting DS-CNN
(examples/models/kws_dscnn_int8.tdsl) bit for bit and the float MLP within tolerance, run on
the host and on an emulated Cortex-M4F; the weights static const, the arena the largest set
of values live at once, flash within the weights plus 8 KB, warning-free on every toolchain.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import tdsl
from tdsl import cli
from tdsl.emit_c.embedded_build import binutil, can_measure, code_size, compile_object, \
    undefined_symbols
from tdsl.graph_api import CompiledGraph, bind_sizes

from embedded_cases import TARGETS, target_or_skip

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"
KWS = "kws_dscnn_int8"


def kws():
    return tdsl.load(MODELS / f"{KWS}.tdsl")[KWS]


def _quiet(fn, *args, **kw):
    with warnings.catch_warnings():      # schedule fallbacks of fused kernels are not ours
        warnings.simplefilter("ignore")
        return fn(*args, **kw)


@pytest.mark.parametrize("spec", ["c-embedded", "c-embedded -mcpu=cortex-m4"])
def test_int8_dscnn_graph_is_bit_exact_on_target(spec):
    target = target_or_skip(spec)
    g = kws()
    w = g.random_params()
    x = np.random.default_rng(1).integers(-128, 128, (1, 1, 49, 10)).astype(np.int8)
    built = _quiet(g.build, target, params=w)
    np.testing.assert_array_equal(built(x), g.reference(x, params=w))


@pytest.mark.slow
@pytest.mark.parametrize("spec", TARGETS)
def test_int8_dscnn_graph_on_every_target(spec):
    test_int8_dscnn_graph_is_bit_exact_on_target(spec)


TINY_CNN = """
import std
graph tiny(x: f32[1, 3, 8, 8]) -> y: f32[1, 5] {
    param w1: f32[4, 3, 3, 3]
    c = conv2d(x, w1; padding=1)
    r = relu(c)
    p = max_pool2d(r; kernel=2)
    f = flatten(p)
    param w2: f32[5, 64]
    param b2: f32[5]
    y = dense(f, w2, b2)
}
"""


def test_float_graph_on_cortex_m4():
    target = target_or_skip("c-embedded -mcpu=cortex-m4")
    g = tdsl.loads(TINY_CNN)["tiny"]
    w = g.random_params()
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    built = _quiet(g.build, target, params=w)
    np.testing.assert_allclose(built(x), g.reference(x, params=w), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_float_mlp_graph_on_cortex_m4():
    target = target_or_skip("c-embedded -mcpu=cortex-m4")
    g = tdsl.load(MODELS / "mlp.tdsl")["mlp"]
    w = g.random_params(shapes={"B": 2})
    x = np.random.default_rng(2).standard_normal((2, 784)).astype(np.float32)
    built = _quiet(g.build, target, params=w, shapes={"B": 2})
    np.testing.assert_allclose(built(x), g.reference(x, params=w), rtol=1e-4, atol=1e-4)


def _largest_live_set(graph, weights) -> int:
    """Bytes of the intermediate values live at once, at the busiest step, counted from the
    compiled graph's kernels (each value from the step writing it to its last reader)."""
    compiled = CompiledGraph(graph, weights, bind_sizes(graph.ir, weights), True, True)
    steps = compiled.functions
    first, last = {}, {}
    for k, f in enumerate(steps):
        for v in f.outputs:
            first[v] = last[v] = k
        for v in f.inputs:
            if v in first:
                last[v] = k
    size = {v: int(np.prod(compiled.ir.shape_of(v, compiled.sizes))) *
            np.dtype({"i8": np.int8, "i32": np.int32, "f32": np.float32}[
                compiled.ir.value(v).dtype]).itemsize for v in first}
    inner = [v for v in first if v not in compiled.ir.outputs]
    return max(sum(size[v] for v in inner if first[v] <= k <= last[v])
               for k in range(len(steps)))


def test_arena_is_the_largest_live_set_and_weights_are_static_const():
    g = kws()
    w = g.random_params()
    module = _quiet(g.emit_embedded, "c-embedded", w)
    assert module.entry == f"{KWS}_run"
    assert f"int {KWS}_run(const int8_t *restrict x, int8_t *restrict y, void *arena);" \
        in module.header
    assert f"#define KWS_DSCNN_INT8_ARENA_BYTES {module.arena_bytes}u" in module.header
    assert module.arena_bytes <= _largest_live_set(g, w) < module.naive_bytes
    assert "static const int8_t tdsl_w_w0" in module.source
    assert module.math_functions == ()           # an int8 graph needs no <math.h>
    assert "math.h" not in module.source


def test_flash_is_the_weights_plus_less_than_8_kb_on_cortex_m4(tmp_path):
    target = target_or_skip("c-embedded -mcpu=cortex-m4")
    if not can_measure(target):
        pytest.skip(f"{binutil(target, 'size')} is not installed")
    g = kws()
    w = g.random_params()
    module = _quiet(g.emit_embedded, target, w)
    obj = compile_object(module, target, tmp_path, flags=("-Os",))
    size = code_size(obj, target)
    weight_bytes = sum(a.nbytes for a in w.values())
    assert weight_bytes <= size.flash <= weight_bytes + 8192
    outside = {s for s in undefined_symbols(obj, target) if not s.startswith("__")}
    assert outside <= {"memcpy", "memset", "memmove"}


@pytest.mark.parametrize("spec", TARGETS)
def test_graph_c_is_warning_free_everywhere(spec, tmp_path):
    try:
        target = tdsl.Target(spec)
    except tdsl.TdslError as exc:
        pytest.skip(f"{spec}: {exc}")
    if not can_measure(target):
        pytest.skip(f"{target.compiler} or its binutils are not installed")
    g = kws()
    compile_object(_quiet(g.emit_embedded, target, g.random_params()), target, tmp_path)


def test_cli_builds_a_graph(tmp_path, capsys):
    g = kws()
    np.savez(tmp_path / "w.npz", **g.random_params())
    args = ["build", str(MODELS / f"{KWS}.tdsl"), "--graph", KWS, "--target", "c-embedded",
            "-o", str(tmp_path / "out")]
    assert cli.main(args) == 1 and "--params" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main([*args, "--params", str(tmp_path / "w.npz")]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "out" / f"{KWS}.c").exists() and (tmp_path / "out" / f"{KWS}.h").exists()
    assert "arena 10240 bytes" in out


def test_random_int8_weights_span_the_int8_range():
    """Integer weights are drawn as integers: scaled normals would all round to zero."""
    w = kws().random_params()
    int8 = [a for a in w.values() if a.dtype == np.int8]
    assert int8 and all(a.min() < -64 and a.max() > 64 for a in int8 if a.size > 100)


def test_rank0_weights_and_intermediates_go_by_value():
    """A kernel takes a scalar input by value: a rank-0 weight (an imported model's scale or
    zero point) and a rank-0 intermediate are passed as their values, not as pointers (gcc
    rejected the graph)."""
    g = tdsl.loads("""
op scale(X: f32[3], S: f32) -> Y: f32[3] {
    Y[i] = X[i] * S
}
op total(X: f32[3]) -> (Y: f32[3], T: f32) {
    Y[i] = X[i] + 1.0
    T = sum[k: 3](X[k])
}
graph net(x: f32[3]) -> (y: f32[3]) {
    param s: f32
    a = scale(x, s)
    b, t = total(a)
    y = scale(b, t)
}
""")["net"]
    w = {"s": np.array(2.0, np.float32)}
    x = np.arange(3, dtype=np.float32)
    built = _quiet(g.build, target_or_skip("c-embedded"), params=w)
    np.testing.assert_array_equal(built(x), g.reference(x, params=w))
