"""Graphs: checking, the reference, builds fused and unfused, the passes one by one.

Numbers are compared with independent numpy code (the MLP), with the ops' references, and
fused with unfused builds. Builds need gcc.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import tdsl
from tdsl import cli
from tdsl.api import stdlib
from tdsl.graph_api import CompiledGraph
from tdsl.lowering.graph import memory
from tdsl.lowering.graph.patterns import Pattern, classify

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "models"
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
TOL = dict(rtol=1e-4, atol=1e-4)


def load(name: str) -> tdsl.Graph:
    return tdsl.load(EXAMPLES / f"{name}.tdsl")[name]


def rand(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------- checking

def test_a_graph_block_loads_as_a_graph():
    g = load("mlp")
    assert isinstance(g, tdsl.Graph)
    assert g.inputs == ["x"] and g.outputs == ["y"] and g.params == ["w1", "b1", "w2", "b2"]
    assert [n.op for n in g.ir.nodes] == ["dense", "relu", "dense"]


def test_graph_values_get_shapes_in_the_graphs_sizes():
    g = tdsl.loads("""
        import std
        graph g(x: f32[B, 3, 16, 16]) -> y: f32[B, 8, 8, 8] {
            param w: f32[8, 3, 3, 3]
            c = conv2d(x, w; stride=2, padding=1)
            y = relu(c)
        }""")["g"]
    assert [str(d) for d in g.ir.value("c").shape] == ["B", "8", "8", "8"]


# ---------------------------------------------------------------------------- patterns

@pytest.mark.parametrize("op, attrs, ranks, pattern", [
    ("relu", {}, [4], Pattern.INJECTIVE), ("bias_add", {}, None, Pattern.INJECTIVE),
    ("batch_norm", {}, None, Pattern.INJECTIVE), ("flatten", {}, None, Pattern.INJECTIVE),
    ("conv2d", {}, None, Pattern.COMPLEX), ("depthwise_conv2d", {}, None, Pattern.COMPLEX),
    ("dense", {}, None, Pattern.COMPLEX), ("matmul", {}, None, Pattern.COMPLEX),
    ("max_pool2d", {"kernel": 2}, None, Pattern.REDUCTION),
    ("global_avg_pool2d", {}, None, Pattern.REDUCTION), ("softmax", {}, None, Pattern.REDUCTION),
    ("layer_norm", {}, None, Pattern.REDUCTION),
])
def test_patterns_are_read_off_the_expression(op, attrs, ranks, pattern):
    o = stdlib()[op]
    fn = o.function(ranks * len(o.param_names) if ranks else None, **attrs)
    assert classify(fn) == pattern


def test_a_sum_of_squares_is_a_reduction_and_a_gather_is_opaque():
    mod = tdsl.loads("""
        op sumsq(X: f32[N, K]) -> Y: f32[N] { Y[i] = sum[k](X[i, k] * X[i, k]) }
        op gather(T: f32[V, D], I: i64[N]) -> Y: f32[N, D] { Y[n, d] = T[I[n], d] }""")
    assert classify(mod["sumsq"].function()) == Pattern.REDUCTION
    assert classify(mod["gather"].function()) == Pattern.OPAQUE


# ---------------------------------------------------------------------------- reference

def test_mlp_reference_matches_numpy():
    g = load("mlp")
    p = g.random_params(seed=3)
    x = rand((5, 784))
    want = np.maximum(x @ p["w1"].T + p["b1"], 0) @ p["w2"].T + p["b2"]
    np.testing.assert_allclose(g.reference(x, params=p), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- builds

@needs_gcc
@pytest.mark.parametrize("name, shape", [("mlp", (3, 784)), ("small_cnn", (2, 3, 32, 32)),
                                         ("mobilenet_block", (1, 32, 28, 28))])
def test_example_models_match_the_reference_fused_and_unfused(name, shape):
    g = load(name)
    p = g.random_params(seed=5)
    x = rand(shape)
    want = g.reference(x, params=p)
    fused = g.build(params=p)(x)
    unfused = g.build(params=p, fuse=False, fold=False)(x)
    np.testing.assert_allclose(fused, want, **TOL)
    np.testing.assert_allclose(unfused, want, **TOL)


@needs_gcc
@pytest.mark.parametrize("fold", [True, False])
def test_every_weight_starts_on_a_cache_line(fold):
    """Weights given at any offset from a cache line (numpy's arrays start 16 bytes into
    one, or anywhere) are kept aligned as the arena is, packed ones included, so the
    kernels' vector loads of them never split a line: the offset had changed from build to
    build, and an LSTM's speed with it (0.085 against 0.117 ms). The results stay the same."""
    g = load("small_cnn")
    p = {}
    for k, v in g.random_params(seed=5).items():         # each 4 bytes past a 64-byte line
        raw = np.empty(v.nbytes + 128, np.uint8)
        start = -raw.ctypes.data % 64 + 4
        p[k] = raw[start:start + v.nbytes].view(v.dtype).reshape(v.shape)
        p[k][...] = v
    x = rand((2, 3, 32, 32))
    m = g.build(params=p, fold=fold)
    np.testing.assert_allclose(m(x), g.reference(x, params=p), **TOL)
    weights = m.compiled(x).weights
    assert weights and all(w.ctypes.data % memory.ALIGN == 0 for w in weights.values()
                           if isinstance(w, np.ndarray) and w.size)


@needs_gcc
def test_weights_from_an_npz_and_a_module_called_again(tmp_path):
    g = load("mlp")
    p = g.random_params()
    np.savez(tmp_path / "w.npz", **p)
    m = g.build(target="c", params=tmp_path / "w.npz")
    x1, x2 = rand((2, 784), 1), rand((7, 784), 2)
    np.testing.assert_allclose(m(x1), g.reference(x1, params=p), **TOL)
    np.testing.assert_allclose(m(x2), g.reference(x2, params=p), **TOL)   # a new batch size
    np.testing.assert_allclose(m(x1), g.reference(x1, params=p), **TOL)


def test_fusion_groups_of_the_small_cnn():
    g = load("small_cnn")
    c = CompiledGraph(g, g.random_params(), {"B": 1}, True, True)
    kernels = [tuple(c.ir.nodes[i].op for i in grp.nodes)
               for grp in c.groups]
    # the residual add does not join the conv (it would be read lane by lane in the conv's
    # register tile): it starts an injective kernel that the pooling then takes in
    assert kernels == [("conv2d", "bias_add", "relu"), ("max_pool2d",),
                       ("conv2d", "bias_add", "relu"), ("conv2d", "bias_add"),
                       ("add", "relu", "global_avg_pool2d"), ("dense",)]
    # the textbook conv's sum is split off as the stages its schedule's cache_writes make
    # (PL, P): the per-channel epilogue runs on the register tile's vectors (P)
    text = str(c.functions[0].fn)
    assert "PL[n, f, y, x] = sum[c: 3, r: 3, s: 3]" in text
    assert "P[n, f, y, x] = max(PL[n, f, y, x] + in2[f], 0.0)" in text
    assert "Y[n, f, y, x] = P[n, f, y, x]" in text
    assert c.functions[0].inputs == ("x", "n1_w", "n1_b")
    assert c.groups[4].pattern == Pattern.REDUCTION


def test_injective_chains_fuse_and_reductions_take_them_as_inputs():
    g = tdsl.loads("""
        import std
        graph g(x: f32[4, 32], z: f32[4, 32]) -> y: f32[4] {
            a = add(x, z)
            b = sigmoid(a)
            c = relu(b)
            y = reduce_sum(c)
        }""")["g"]
    c = CompiledGraph(g, {}, {}, True, True)
    assert len(c.groups) == 1 and c.groups[0].pattern == Pattern.REDUCTION
    assert c.functions[0].inputs == ("x", "z")
    if shutil.which("gcc"):
        x, z = rand((4, 32), 1), rand((4, 32), 2)
        want = np.maximum(1 / (1 + np.exp(-(x + z))), 0).sum(axis=1)
        np.testing.assert_allclose(g.build()(x, z), want, rtol=1e-5)


def test_a_pooling_window_does_not_take_a_fused_injective_chain():
    """max_pool2d reads an input up to 9 times (3x3 windows at stride 2 overlap): the
    chain before it is one kernel of its own, computed once per element; a sum over an
    axis, which reads each element once, still takes it (the test above)."""
    g = tdsl.loads("""
        import std
        graph g(x: f32[1, 4, 9, 9]) -> y: f32[1, 4, 4, 4] {
            a = sigmoid(x)
            b = relu(a)
            y = max_pool2d(b; kernel=3, stride=2)
        }""")["g"]
    c = CompiledGraph(g, {}, {}, True, True, blocked=False)
    assert [grp.pattern for grp in c.groups] == [Pattern.INJECTIVE, Pattern.REDUCTION]
    assert c.functions[1].inputs == ("b",)
    if shutil.which("gcc"):
        x = rand((1, 4, 9, 9), 3)
        a = np.maximum(1 / (1 + np.exp(-x)), 0)
        want = np.max([a[:, :, r:r + 7:2, s:s + 7:2] for r in range(3) for s in range(3)],
                      axis=0)
        np.testing.assert_allclose(g.build(layout=False)(x), want, rtol=1e-6)


def test_an_elementwise_producer_of_an_epilogue_is_computed_in_it():
    """A value made by one elementwise op and read only by a convolution's epilogue (a
    residual computed before the convolution, as an int8 model's DequantizeLinear is) is
    computed inside that kernel: no kernel writes it, and the results are the same."""
    g = tdsl.loads("""
        import std
        graph g(x: f32[1, 16, 8, 8]) -> y: f32[1, 16, 8, 8] {
            param w1: f32[16, 16, 3, 3]
            param w2: f32[16, 16, 3, 3]
            a = conv2d(x, w1; padding=1)
            s = sigmoid(a)
            c = conv2d(a, w2; padding=1)
            y = add(c, s)
        }""")["g"]
    p = g.random_params()
    c = CompiledGraph(g, p, {}, True, True, blocked=True)
    ops = [f.ops for f in c.functions]
    fused = next(o for o in ops if "add" in o)
    assert fused[0] == "sigmoid" and fused.index("add") > 1, ops
    assert not any(f.outputs == ("s",) for f in c.functions)
    if shutil.which("gcc"):
        x = rand((1, 16, 8, 8), 4)
        np.testing.assert_allclose(g.build(params=p)(x), g.reference(x, params=p),
                                   rtol=1e-4, atol=1e-4)


def test_a_value_read_twice_is_not_fused_away():
    g = tdsl.loads("""
        import std
        graph g(x: f32[2, 4, 8, 8]) -> y: f32[2, 4, 8, 8] {
            param w: f32[4, 4, 3, 3]
            c = conv2d(x, w; padding=1)
            r = relu(c)
            s = sigmoid(r)
            y = add(r, s)
        }""")["g"]
    c = CompiledGraph(g, g.random_params(), {}, True, True)
    produced = [f.outputs for f in c.functions]
    assert ("r",) in produced        # r has two readers: it is a kernel's result


# ---------------------------------------------------------------------------- folding

def test_batch_norm_folds_into_the_conv_and_weight_only_ops_are_computed_once():
    g = tdsl.loads("""
        import std
        graph g(x: f32[1, 4, 6, 6]) -> y: f32[1, 4, 6, 6] {
            param w: f32[4, 4, 3, 3]
            param b: f32[4]
            param gamma: f32[4]
            param beta: f32[4]
            param mean: f32[4]
            param var: f32[4]
            param s: f32[4, 4, 3, 3]
            w2 = mul(w, s)
            c = conv2d(x, w2; padding=1)
            cb = bias_add(c, b)
            y = batch_norm(cb, gamma, beta, mean, var; eps=0.001)
        }""")["g"]
    p = g.random_params(seed=2)
    c = CompiledGraph(g, p, {}, True, True)
    assert [n.op for n in c.ir.nodes] == ["conv2d", "bias_add"]
    assert set(c.weights) == {"y_w", "y_b"}       # w2 computed, then folded into y_w
    assert any("w2 = mul" in n for n in c.notes) and any("batch_norm y" in n for n in c.notes)
    x = rand((1, 4, 6, 6))
    # the folded graph computes the same numbers (by the reference)
    folded = tdsl.Graph(c.ir, g.module)
    np.testing.assert_allclose(folded.reference(x, params=c.weights),
                               g.reference(x, params=p), **TOL)


@needs_gcc
def test_a_batch_norm_with_nothing_to_fold_into_is_a_scale_shift():
    """After a pool (or a concat, a relu) batch_norm folds into no convolution; its scale
    gamma / sqrt(var + eps) and shift beta - mean * scale are computed at build time, and
    the kernel does one multiply-add per element (TVM's SimplifyInference)."""
    g = tdsl.loads("""
        import std
        graph g(x: f32[2, 5, 6, 6]) -> y: f32[2, 5, 3, 3] {
            param gamma: f32[5]
            param beta: f32[5]
            param mean: f32[5]
            param var: f32[5]
            p = max_pool2d(x; kernel=2)
            y = batch_norm(p, gamma, beta, mean, var; eps=0.01)
        }""")["g"]
    p = g.random_params(seed=3)
    c = CompiledGraph(g, p, {}, True, True)
    assert [n.op for n in c.ir.nodes] == ["max_pool2d", "scale_shift"]
    assert set(c.weights) == {"y_scale", "y_shift"}
    np.testing.assert_allclose(c.weights["y_scale"], p["gamma"] / np.sqrt(p["var"] + 0.01),
                               rtol=1e-6)
    x = rand((2, 5, 6, 6))
    for fold in (True, False):
        m = g.build(params=p, fold=fold, layout=False)
        np.testing.assert_allclose(m(x), g.reference(x, params=p), **TOL)
        assert any("sqrt" in k.source for k in m.compiled(x).kernels) == (not fold)


# ---------------------------------------------------------------------------- weights

def test_missing_extra_and_misshaped_weights_are_named(tmp_path):
    g = load("mlp")
    p = g.random_params()
    with pytest.raises(tdsl.TdslError, match="weight 'b2' is missing"):
        g.load_params({k: v for k, v in p.items() if k != "b2"})
    with pytest.raises(tdsl.TdslError, match="no param 'w3'"):
        g.load_params({**p, "w3": p["w1"]})
    with pytest.raises(tdsl.TdslError, match="weight 'w1' has shape"):
        g.load_params({**p, "w1": p["w1"][:, :10]})
    with pytest.raises(tdsl.TdslError, match="weight 'b1' is float64"):
        g.load_params({**p, "b1": p["b1"].astype(np.float64)})


def test_a_pickled_npz_is_refused(tmp_path):
    g = load("mlp")
    p = g.random_params()
    path = tmp_path / "evil.npz"
    np.savez(path, **p, w3=np.array([object()], dtype=object))
    with pytest.raises(tdsl.TdslError, match="can't read weights"):
        g.load_params(path)


def test_bad_inputs_are_call_errors():
    g = load("mlp")
    p = g.random_params()
    with pytest.raises(tdsl.CallError, match="takes 1 input"):
        g.reference(params=p)
    with pytest.raises(tdsl.TdslError, match="input 'x' has shape"):
        g.reference(rand((2, 783)), params=p)


def test_a_built_module_checks_every_call_after_a_good_one():
    # the module's lean path for inputs like the last call's must not let others through
    g = load("mlp")
    p = g.random_params()
    m = g.build(params=p)
    x = rand((2, 784))
    np.testing.assert_allclose(m(x), g.reference(x, params=p), rtol=1e-4, atol=1e-4)
    with pytest.raises(tdsl.CallError, match="takes 1 input"):
        m(x, x)
    with pytest.raises(tdsl.CallError, match="is float64"):
        m(x.astype(np.float64))
    with pytest.raises(tdsl.CallError, match="must be a numpy.ndarray"):
        m(x.tolist())
    with pytest.raises(tdsl.TdslError, match="input 'x' has shape"):
        m(rand((2, 783)))
    x3 = rand((3, 784))                    # a new batch size: its own kernels, then both
    np.testing.assert_allclose(m(x3), g.reference(x3, params=p), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(m(x[::-1]), g.reference(x[::-1], params=p), rtol=1e-4,
                               atol=1e-4)


# ---------------------------------------------------------------------------- memory plan

def _overlap(a, b) -> bool:
    return a.offset < b.offset + b.size and b.offset < a.offset + a.size


def test_memory_plan_shares_by_liveness():
    steps = [((), ("a",)), (("a",), ("b",)), (("b",), ("c",)), (("c", "a"), ("d",))]
    plan = memory.run(steps, {"a": 100, "b": 1000, "c": 1000, "d": 10}, external=("d",))
    assert plan.naive_bytes == 128 + 1024 + 1024
    assert plan.peak_bytes == 128 + 1024 + 1024 or plan.peak_bytes < plan.naive_bytes
    a, b, c = (plan.slot(v) for v in "abc")
    assert not _overlap(a, b) and not _overlap(b, c) and not _overlap(a, c)
    assert plan.as_dict()["buffers"]["a"]["size"] == 100


def test_memory_plan_reuses_a_dead_buffer():
    steps = [((), ("a",)), (("a",), ("b",)), (("b",), ("c",))]
    plan = memory.run(steps, {"a": 1000, "b": 1000, "c": 1000})
    assert plan.slot("c").offset == plan.slot("a").offset
    assert plan.peak_bytes == 2048 and plan.naive_bytes == 3072


# ---------------------------------------------------------------------------- the command

def test_tdsl_graph_prints_kernels_and_the_plan(capsys, tmp_path):
    path = tmp_path / "plan.json"
    assert cli.main(["graph", str(EXAMPLES / "small_cnn.tdsl"), "--shape", "B=1",
                     "--plan-json", str(path), "--layout", "off"]) == 0
    out = capsys.readouterr().out
    assert "conv2d->c3 + bias_add->n3" in out and "add->s3 + relu->r3 + global_avg" in out
    assert "memory plan: peak" in out and "naive sum" in out
    assert '"peak_bytes"' in path.read_text()
    assert cli.main(["graph", str(EXAMPLES / "small_cnn.tdsl")]) == 1
    assert "give the size B with --shape" in capsys.readouterr().err


# ---------------------------------------------------------------------------- epilogues in C

@needs_gcc
def test_vectorized_min_max_propagate_nan_like_numpy():
    """Fused relu/clip epilogues are vector min/max (a compare-and-blend helper) and scalar
    ones branch-free: both keep numpy's NaN semantics."""
    op = tdsl.loads("op clip6(X: f32[N], Y: f32[N]) -> Z: f32[N] "
                    "{ Z[i] = min(max(X[i], Y[i]), 6.0) }")["clip6"]
    sched = op.schedule("naive").split("Z", "i", 16, outer="o", inner="l") \
        .vectorize("Z", "l")
    k = op.build(schedule=sched, shapes={"N": 40})
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(40).astype(np.float32) * 8, rng.standard_normal(40).astype(np.float32)
    x[[3, 20, 37]] = np.nan
    y[[5, 20, 38]] = np.nan
    assert "tdsl_max_f32x16" in k.source
    np.testing.assert_array_equal(k(x, y), np.minimum(np.maximum(x, y), np.float32(6.0)))


# ---------------------------------------------------------------------------- tuning

class _FavourLast:
    """A fake measurer: the later a configuration's index, the faster (no timing here)."""

    def measure(self, task, indices):
        from tdsl.tuner.measure import MeasureResult
        return [MeasureResult(i, task.space.config(i), "ok", 1.0 / (1 + i)) for i in indices]

    def close(self):
        pass


@needs_gcc
def test_a_fused_kernel_is_tuned_as_one_task_and_the_log_applies(tmp_path):
    from tdsl.tuner.fused_task import fused_tasks
    from tdsl.tuner.tune import tune
    g = load("small_cnn")
    p = g.random_params()
    x = rand((1, 3, 32, 32))
    c = g.build(params=p, layout=False).compiled(x)       # the NCHW conv2d's kernels
    tasks = fused_tasks(c)
    conv = next(t for t in tasks if t.workload.op.endswith("conv2d+bias_add@n3"))
    assert len(conv.space) > 1 and conv.fn is c.functions[3].fn
    log = tmp_path / "net.jsonl"
    result = tune(conv, 3, log, "random", _FavourLast(), batch_size=3, compare_numpy=False)
    tuned = g.build(params=p, tuning_log=log, layout=False)
    kernel = tuned.compiled(x)
    assert kernel.schedules[3] == "conv2d's (tuned)" and kernel.schedules[0] == "conv2d's"
    assert result.best_config is not None
    np.testing.assert_allclose(tuned(x), g.reference(x, params=p), **TOL)


@needs_gcc
def test_several_outputs_and_an_output_read_again():
    g = tdsl.loads("""
        import std
        op two(X: f32[B, K]) -> (P: f32[B, K], Q: f32[B, K]) {
            P[b, k] = X[b, k]
            Q[b, k] = -X[b, k]
        }
        graph g(x: f32[B, 8]) -> (y: f32[B, 8], z: f32[B, 8], w: f32[B, 8]) {
            param w0: f32[8, 8]
            param b0: f32[8]
            h = dense(x, w0, b0)
            y, z = two(h)
            r = relu(y)
            w = add(r, z)
        }""")["g"]
    p = g.random_params()
    x = rand((3, 8))
    h = x @ p["w0"].T + p["b0"]
    want = (h, -h, np.maximum(h, 0) - h)
    for fuse in (True, False):
        got = g.build(params=p, fuse=fuse)(x)
        assert isinstance(got, tuple) and len(got) == 3
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, **TOL)


@needs_gcc
def test_reductions_keep_their_schedules_with_fused_inputs():
    """softmax and layer_norm take their injective producers inline and still lower with
    their own (rfactor) schedules: no fallback warning, the reference's numbers."""
    import warnings
    g = tdsl.loads("""
        import std
        graph g(x: f32[4, 40], z: f32[4, 40]) -> (y: f32[4, 40], u: f32[4, 40]) {
            param gm: f32[40]
            param bt: f32[40]
            a = add(x, z)
            r = relu(a)
            y = softmax(r)
            s = sigmoid(x)
            u = layer_norm(s, gm, bt)
        }""")["g"]
    p = g.random_params()
    x, z = rand((4, 40), 1), rand((4, 40), 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = g.build(params=p)
        got = m(x, z)
    assert m.compiled(x, z).schedules == ["softmax's", "layer_norm's"]
    for a, b in zip(got, g.reference(x, z, params=p)):
        np.testing.assert_allclose(a, b, **TOL)


def test_a_misshaped_input_says_what_the_dimension_must_be_and_why():
    """Issue 28: "dimension 0 must be 1 = 1" (a literal) and "must be B = 1" (a size)."""
    mod = tdsl.loads("import std\n"
                     "graph one(x: f32[1, 4]) -> y: f32[1, 4] {\n    y = relu(x)\n}\n"
                     "graph batch(x: f32[B, 4], z: f32[2 * B]) -> y: f32[B, 4] {\n"
                     "    y = relu(x)\n}\n")
    with pytest.raises(tdsl.TdslError) as info:
        mod["one"].reference(rand((3, 4)), params={})
    assert "input 'x' has shape (3, 4), but dimension 0 must be 1, got 3" in str(info.value)
    with pytest.raises(tdsl.TdslError) as info:
        mod["batch"].reference(rand((3, 4)), rand(5), params={})
    assert "input 'z' has shape (5,), but dimension 0 must be 6 (2 * B with B = 3), " \
           "got 5" in str(info.value), info.value
    with pytest.raises(tdsl.TdslError) as info:
        mod["batch"].build(params={}, shapes={"B": 1})(rand((3, 4)), rand(2))
    assert "dimension 0 must be 1 (B = 1), got 3" in str(info.value), info.value


def test_an_unused_param_is_a_warning_at_its_place():
    """Issue 28: a `param` no op reads (a weight loaded for nothing) passed in silence."""
    text = ("import std\ngraph g(x: f32[B, 4]) -> y: f32[B, 4] {\n"
            "    param w: f32[4, 4]\n    param b: f32[4]\n    y = relu(x)\n}\n")
    with pytest.warns(tdsl.TdslWarning) as record:
        g = tdsl.loads(text, "unused.tdsl")["g"]
    assert [str(w.message) for w in record] == [
        "unused.tdsl:3:5: param 'w' of graph g is never used",
        "unused.tdsl:4:5: param 'b' of graph g is never used"]
    assert g.params == ["w", "b"]               # still params: a warning, not an error
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the example models use every param
        for name in ("mlp", "small_cnn", "mobilenet_block", "kws_dscnn_int8"):
            load(name)


def test_a_graph_for_opencl_is_refused_naming_the_targets_graphs_build_for():
    """Issue 28: the message names both kinds that build (c and c-embedded), not "host C
    only" while c-embedded graphs build and run."""
    g = load("mlp")
    try:
        target = tdsl.Target("opencl")
    except tdsl.TdslError as exc:
        pytest.skip(str(exc))
    with pytest.raises(tdsl.TdslError, match=r"'c' \(host C\) and 'c-embedded' targets only"):
        g.build(target=target)


def test_a_scalar_graph_input_is_read_at_every_call():
    """A rank-0 input goes to C by value; a graph module binds its kernels once, so the
    value must be read at each call, not when the kernel was bound (it once gave the
    staging buffer's garbage, then the previous call's value)."""
    m = tdsl.loads("""
op shift(A: f32[2, 3], C: f32) -> Y: f32[2, 3] {
    Y[i, j] = A[i, j] + C
}
graph net(a: f32[2, 3], c: f32) -> (y: f32[2, 3]) {
    y = shift(a, c)
}
""")
    a = np.ones((2, 3), np.float32)
    for fuse in (True, False):
        module = m["net"].build(fuse=fuse)
        for c in (3.0, 7.0, -1.5):
            np.testing.assert_array_equal(module(a, np.array(c, np.float32)), a + c)
