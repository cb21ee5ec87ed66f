"""A graph module runs its kernels from one C entry point (`emit_c.graph_runner`): the
same results as calling each kernel from Python, a kernel's fault raised as that kernel
raises it, rank-0 inputs read afresh at every call, and the caller's arrays read where
they lie, the outputs fresh arrays of each call's own."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tdsl
from tdsl.emit_c.graph_runner import GraphRunner, runner_source

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

SOURCE = """
import std

op gather(X: f32[N], I: i32[K]) -> Y: f32[K] {
    Y[i] = X[I[i]]
}
op scaled(X: f32[N], s: f32) -> Y: f32[N] {
    Y[i] = X[i] * s
}

graph g(x: f32[8], idx: i32[3], s: f32) -> y: f32[3] {
    t = scaled(x, s)
    r = relu(t)
    y = gather(r, idx)
}
"""


@pytest.fixture(scope="module")
def graph():
    return tdsl.loads(SOURCE)["g"]


def _loop(module):
    """The kernels called one by one from Python, as before the runner."""
    for run in module._last.runs:
        run()


def test_one_c_call_runs_every_kernel_in_order(graph):
    module = graph.build(fuse=False)
    x = np.arange(-4, 4, dtype=np.float32)
    idx = np.array([7, 0, 5], np.int32)
    y = module(x, idx, np.array(2.0, np.float32))
    np.testing.assert_array_equal(y, np.maximum(x * 2, 0)[idx])
    compiled, runs, run = module._last.compiled, module._last.runs, module._last.run
    assert isinstance(run, GraphRunner) and len(runs) == len(compiled.kernels) == 3
    source, slots = runner_source(run._calls)
    assert source.count("if ((status = ") == 3
    # each kernel's address and its arrays', the scalar's too: nothing else is a pointer
    assert slots == 3 + sum(len(f.inputs) + len(f.outputs) for f in compiled.functions)
    # the runner and the per-kernel loop agree on fresh inputs
    module._last.inputs["x"][:] = np.linspace(-1, 1, 8, dtype=np.float32)
    run()
    from_c = module._last.outputs[0].copy()
    _loop(module)
    np.testing.assert_array_equal(from_c, module._last.outputs[0])


def test_a_rank_0_input_is_read_at_every_call(graph):
    module = graph.build()
    x = np.ones(8, np.float32)
    idx = np.array([1, 2, 3], np.int32)
    for s in (1.0, 3.0, -1.0):
        np.testing.assert_array_equal(module(x, idx, np.array(s, np.float32)),
                                      np.full(3, max(s, 0.0), np.float32))


@pytest.mark.parametrize("first", ["faulting", "good"])
def test_a_kernels_read_fault_is_its_call_error(graph, first):
    # a first call takes the checked path; one like the last takes the lean one
    module = graph.build()
    x = np.ones(8, np.float32)
    if first == "good":
        module(x, np.array([0, 7, 1], np.int32), np.array(1.0, np.float32))
        assert module._last.lean is not None
    with pytest.raises(tdsl.CallError, match="out of bounds"):
        module(x, np.array([0, 8, 1], np.int32), np.array(1.0, np.float32))
    # the table points at the staging buffers again, not at the failed call's arrays
    bound = module._last
    for staged, slots in zip(bound.inputs.values(), bound.input_slots):
        if slots:
            assert bound.run.slots_of(staged) == slots
    # the module is still usable after the fault
    np.testing.assert_array_equal(module(x, np.array([0, 7, 1], np.int32),
                                         np.array(1.0, np.float32)), np.ones(3, np.float32))


TWO_OUTPUTS = """
import std

op scaled(X: f32[N], s: f32) -> Y: f32[N] {
    Y[i] = X[i] * s
}

graph two(x: f32[8], s: f32) -> (y: f32[8], z: f32[8]) {
    y = relu(x)
    t = scaled(x, s)
    z = relu(t)
}
"""


def test_calls_bind_the_callers_arrays_and_return_their_own_outputs():
    module = tdsl.loads(TWO_OUTPUTS)["two"].build()
    rng = np.random.default_rng(0)
    x1, x2 = (rng.standard_normal(8).astype(np.float32) for _ in range(2))
    y1, z1 = module(x1, np.array(1.0, np.float32))
    bound = module._last
    assert all(slots for slots in bound.input_slots[:1]) and bound.output_slots is not None
    y2, z2 = module(x2, np.array(-1.0, np.float32))
    # the first call's outputs are not the second's buffers: they keep their values
    np.testing.assert_array_equal(y1, np.maximum(x1, 0))
    np.testing.assert_array_equal(z1, np.maximum(x1, 0))
    np.testing.assert_array_equal(y2, np.maximum(x2, 0))
    np.testing.assert_array_equal(z2, np.maximum(-x2, 0))
    assert len({id(a) for a in (y1, z1, y2, z2)}) == 4
    # a strided input is copied in, not bound; the staging buffers held nothing of x2
    wide = rng.standard_normal(16).astype(np.float32)
    y3, _ = module(wide[::2], np.array(1.0, np.float32))
    np.testing.assert_array_equal(y3, np.maximum(wide[::2], 0))
    np.testing.assert_array_equal(module(x2, np.array(1.0, np.float32))[0], y2)
    # the table points at the staging buffers again between calls
    run = bound.run
    assert run.slots_of(bound.inputs["x"]) == bound.input_slots[0]


# how a call's x is made: what the lean call binds where it lies (contiguous, aligned
# float32 of the last call's shape), what it leaves to the checked path (a strided or
# misaligned view, copied in), and what that path refuses (another dtype or shape)
_FORMS = {
    "plain": lambda v: v.copy(),
    "strided": lambda v: np.repeat(v, 2)[::2],
    "misaligned": lambda v: np.frombuffer(b"\0" + v.tobytes(), np.float32, offset=1),
    "float64": lambda v: v.astype(np.float64),
    "short": lambda v: v[:7].copy(),
}


@settings(max_examples=25, deadline=None)
@given(calls=st.lists(st.tuples(st.sampled_from(sorted(_FORMS)),
                                st.floats(-4, 4, width=32)), min_size=1, max_size=6),
       seed=st.integers(0, 2 ** 16))
def test_the_lean_call_answers_as_the_checked_one(calls, seed):
    """Each call of a run of calls (any forms, in any order) gives what the reference gives
    or the checked path's refusal; the lean call answers exactly the calls like the last
    good one, with fresh outputs of its own, and leaves the table as it found it."""
    module = tdsl.loads(TWO_OUTPUTS)["two"].build()
    rng = np.random.default_rng(seed)
    lean_calls, last, kept = [], None, []
    for form, s in calls:
        v = rng.standard_normal(8).astype(np.float32)
        x, scale = _FORMS[form](v), np.array(s, np.float32)
        bound = module._last
        if bound is not None and bound.lean is not None and "counted" not in bound.__dict__:
            lean = bound.lean

            def counted(inputs, lean=lean):
                out = lean(inputs)
                lean_calls.append(out is not None)
                return out
            bound.__dict__["lean"] = counted
            bound.__dict__["counted"] = True
        before = len(lean_calls)
        if form in ("float64", "short"):
            with pytest.raises(tdsl.TdslError):
                module(x, scale)
            assert not any(lean_calls[before:])
            continue
        y, z = module(x, scale)
        np.testing.assert_array_equal(y, np.maximum(v, 0))
        np.testing.assert_array_equal(z, np.maximum(v * np.float32(s), 0))
        took_lean = any(lean_calls[before:])
        assert took_lean == (form == "plain" and last is not None)
        last = form
        bound = module._last
        assert not any(np.shares_memory(o, b) for o in (y, z) for b in bound.outputs)
        assert not np.shares_memory(y, z) and not np.shares_memory(y, x)
        kept.append((y, z, v, np.float32(s)))
        run = bound.run
        assert run.slots_of(bound.inputs["x"]) == bound.input_slots[0]
    for y, z, v, s in kept:             # no later call wrote into an earlier call's outputs
        np.testing.assert_array_equal(y, np.maximum(v, 0))
        np.testing.assert_array_equal(z, np.maximum(v * s, 0))


def test_calls_from_two_threads_each_get_their_own_results():
    """A binding's table, staging buffers and arena are one set for all threads: a call
    holds its runner's lock from binding its arrays to reading its outputs (unlocked, two
    threads calling a small CNN's module at once got 70% of their results wrong)."""
    import threading
    from pathlib import Path
    g = tdsl.load(Path(__file__).parent.parent / "examples" / "models" /
                  "small_cnn.tdsl")["small_cnn"]
    module = g.build(params=g.random_params(shapes={"B": 1}))
    xs = [np.random.default_rng(i).standard_normal((1, 3, 32, 32)).astype(np.float32)
          for i in range(2)]
    wide = np.repeat(xs[1], 2, axis=3)[..., ::2]       # strided: the general path's copy
    want = [module(x) for x in xs]
    wrong = [0, 0]

    def calls(i):
        for k in range(150):
            x = wide if i == 1 and k % 3 == 0 else xs[i]
            wrong[i] += not np.array_equal(module(x), want[i])
    threads = [threading.Thread(target=calls, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == [0, 0]
