"""tdsl inside PyTorch programs (issue 25): tensors in and out of kernels and graph modules
without copies, tdsl ops as torch.library custom ops (torch.compile with no graph break,
torch.export, a user's backward), and one OpenMP runtime per process.

Skipped as a whole when torch is not installed (``pip install tdsl[torch]``)."""
from __future__ import annotations

import array
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install tdsl[torch])")

import tdsl  # noqa: E402
import tdsl.torch as tt  # noqa: E402
from tdsl.emit_c import omp  # noqa: E402
from tdsl.torch_bridge import interop  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

ROOT = Path(__file__).resolve().parents[1]

SRC = """
op scale_sq(X: f32[N, D]; a: float = 2.0) -> Y: f32[N, D] {
    Y[i, j] = a * X[i, j] * X[i, j]
}
op scale_sq_grad(X: f32[N, D], dY: f32[N, D]; a: float = 2.0) -> dX: f32[N, D] {
    dX[i, j] = 2.0 * a * X[i, j] * dY[i, j]
}
op split2(X: f32[N]) -> (P: f32[N], Q: f32[N]) {
    P[i] = X[i] + 1.0
    Q[i] = X[i] * 3.0
}
op pad1(X: f32[N]) -> Y: f32[N + 2] {
    Y[i] = select(i >= 1 and i <= N, X[i - 1], 0.0)
}
"""


@pytest.fixture(scope="module")
def mod():
    return tdsl.loads(SRC)


@pytest.fixture(scope="module")
def add1():
    return tdsl.loads("op add1(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] + 1.0 }")["add1"].build()


def _run(code: str, env=None) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


# ------------------------------------------------------------------ tensors in and out

def test_import_tdsl_does_not_import_torch():
    out = _run("""
        import sys, numpy as np, tdsl
        k = tdsl.loads("op f(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * 2.0 }")["f"].build()
        k(np.ones(4, np.float32))
        print('torch' in sys.modules)
    """)
    assert out.strip() == "False"


def test_a_tensor_in_gives_a_tensor_out_over_the_same_memory(add1):
    t = torch.arange(10, dtype=torch.float32)
    y = add1(t)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    assert torch.equal(y, t + 1)
    # no copy in: the kernel reads the tensor's own memory
    view = interop.as_numpy(t, "argument X")
    assert view.ctypes.data == t.data_ptr()
    # out= tensors are written in place and returned as given
    o = torch.empty(10)
    assert add1(t, out=o) is o and torch.equal(o, t + 1)
    # the numpy call is unchanged
    assert isinstance(add1(np.zeros(3, np.float32)), np.ndarray)


def test_several_outputs_and_shapes_from_sizes(mod):
    p, q = mod["split2"].build()(torch.ones(5))
    assert isinstance(p, torch.Tensor) and isinstance(q, torch.Tensor)
    assert torch.equal(p, torch.full((5,), 2.0)) and torch.equal(q, torch.full((5,), 3.0))
    y = mod["pad1"].build()(torch.ones(3))
    assert y.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]


def test_tensors_are_refused_with_the_numpy_wording(add1):
    with pytest.raises(tdsl.CallError) as np_err:
        add1(np.ones(4, np.float64))
    with pytest.raises(tdsl.CallError) as t_err:
        add1(torch.ones(4, dtype=torch.float64))
    assert t_err.value.message == np_err.value.message
    assert "to(torch.float32)" in t_err.value.hint
    with pytest.raises(tdsl.CallError, match="non-contiguous") as e:
        add1(torch.ones(8)[::2])
    assert ".contiguous()" in e.value.hint
    with pytest.raises(tdsl.CallError, match="requires grad") as e:
        add1(torch.ones(4, requires_grad=True))
    assert "backward" in e.value.hint and "detach" in e.value.hint
    with pytest.raises(tdsl.CallError, match="bfloat16"):
        add1(torch.ones(4, dtype=torch.bfloat16))
    with pytest.raises(tdsl.CallError, match="rank"):
        add1(torch.ones(2, 2))
    with pytest.raises(tdsl.CallError, match="must be a numpy.ndarray"):
        add1([1.0, 2.0])


def test_buffer_protocol_arrays(add1):
    y = add1(array.array("f", [1.0, 2.0]))
    assert isinstance(y, np.ndarray) and y.tolist() == [2.0, 3.0]
    y = add1(memoryview(np.ones(3, np.float32)))
    assert y.tolist() == [2.0, 2.0, 2.0]


def test_bind_on_tensors(add1):
    t = torch.ones(6)
    run, (y,) = add1.bind(t)     # the outputs, as Kernel.bind gives them: a list
    t += 1                       # the bound call reads the tensor's memory, not a copy
    run()
    assert isinstance(y, torch.Tensor) and torch.equal(y, torch.full((6,), 3.0))


def test_graph_modules_take_tensors():
    g = tdsl.loads("""
        import std
        graph g(x: f32[4, 32], z: f32[4, 32]) -> y: f32[4, 32] {
            a = add(x, z)
            y = relu(a)
        }""")["g"].build()
    x, z = torch.randn(4, 32), torch.randn(4, 32)
    y = g(x, z)
    assert isinstance(y, torch.Tensor)
    assert torch.allclose(y, torch.relu(x + z))
    np.testing.assert_allclose(g(x.numpy(), z.numpy()), y.numpy())
    with pytest.raises(tdsl.CallError):
        g(x.double(), z)


# ------------------------------------------------------------------------ custom ops

def test_custom_op_softmax_compiles_with_no_graph_break_and_exports():
    sm = tt.custom_op(tdsl.stdlib["softmax"], name="tdsltest::softmax")
    x = torch.randn(8, 16)
    assert torch.allclose(sm(x), torch.softmax(x, 1), atol=1e-6)

    def f(t):
        return sm(t) * 2 + 1

    explained = torch._dynamo.explain(f)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(f, fullgraph=True, backend="eager")
    assert torch.allclose(compiled(x), f(x), atol=1e-6)

    class M(torch.nn.Module):
        def forward(self, t):
            return sm(t) + 1

    ep = torch.export.export(M(), (x,))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert "tdsltest.softmax.default" in targets
    assert torch.allclose(ep.module()(x), torch.softmax(x, 1) + 1, atol=1e-6)
    # registering the same op again under the same name is the same op
    assert tt.custom_op(tdsl.stdlib["softmax"], name="tdsltest::softmax") is sm


def test_fake_shapes_follow_tdsl_rules_with_dynamic_sizes(mod):
    pad = tt.custom_op(mod["pad1"], name="tdsltest::pad1")
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        y = pad(torch.empty(7))
    assert tuple(y.shape) == (9,)
    relu = tt.custom_op(tdsl.stdlib["relu"], name="tdsltest::relu")   # rank-generic
    f = torch.compile(lambda t: relu(t) - 1, dynamic=True, fullgraph=True, backend="eager")
    for shape in [(3, 4), (5, 4), (2, 3, 4)]:
        t = torch.randn(shape)
        assert torch.equal(f(t), torch.relu(t) - 1)


def test_custom_op_attributes_and_scalars(mod):
    sq3 = tt.custom_op(mod["scale_sq"], name="tdsltest::sq3", a=3.0)
    x = torch.randn(2, 3)
    assert torch.allclose(sq3(x), 3 * x * x, atol=1e-6)
    with pytest.raises(tdsl.TdslError, match="already registered"):
        tt.custom_op(mod["scale_sq"], name="tdsltest::sq3", a=4.0)
    with pytest.raises(tdsl.TdslError, match="namespace::name"):
        tt.custom_op(mod["scale_sq"], name="noseparator")


def test_requires_grad_is_refused_without_a_backward():
    op = tt.custom_op(tdsl.stdlib["softmax"], name="tdsltest::softmax_nograd")
    with pytest.raises(tdsl.CallError, match="without a backward") as e:
        op(torch.randn(2, 3, requires_grad=True))
    assert "backward=" in e.value.hint
    with torch.no_grad():
        assert op(torch.randn(2, 3, requires_grad=True)).shape == (2, 3)


def test_backward_from_a_tdsl_op(mod):
    sq = tt.custom_op(mod["scale_sq"], name="tdsltest::sq", backward=mod["scale_sq_grad"])
    x = torch.randn(4, 5, requires_grad=True)
    g = torch.randn(4, 5)
    sq(x).backward(g)
    assert torch.allclose(x.grad, 4 * x.detach() * g, atol=1e-5)
    # the same inside a compiled training step
    x.grad = None
    step = torch.compile(lambda t: (sq(t) * g).sum(), fullgraph=True, backend="aot_eager")
    step(x).backward()
    assert torch.allclose(x.grad, 4 * x.detach() * g, atol=1e-5)


def test_backward_from_a_callable():
    relu = tt.custom_op(tdsl.stdlib["relu"], name="tdsltest::relu_bwd",
                        backward=lambda ctx, g: g * (ctx.inputs[0] > 0))
    x = torch.randn(3, 4, requires_grad=True)
    relu(x).sum().backward()
    assert torch.equal(x.grad, (x.detach() > 0).float())


# -------------------------------------------------------------------- one thread pool

def test_thread_count_follows_omp_num_threads_then_torch_then_cores(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert omp.thread_count() == 3
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(omp, "_threads_from", lambda: 5)
    assert omp.thread_count() == 5
    monkeypatch.setattr(omp, "_threads_from", None)
    assert 1 <= omp.thread_count() == omp.available_cores() <= len(os.sched_getaffinity(0))


def test_the_cgroup_quota_caps_the_cores(monkeypatch, tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    monkeypatch.setattr(omp, "_cgroup_dirs", lambda: [str(tmp_path)])
    assert omp._cgroup_quota() == 1.5
    assert omp.available_cores() == min(2, len(os.sched_getaffinity(0)))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert omp._cgroup_quota() is None


def _second_runtime(tmp: Path) -> Path:
    """libgomp under another soname: the runtime a torch wheel bundling
    libgomp-<hash>.so.1 brings, which the loader does not take for libgomp.so.1."""
    from ctypes.util import find_library
    candidates = [Path("/usr/lib/x86_64-linux-gnu/libgomp.so.1"),
                  Path("/usr/lib64/libgomp.so.1"), Path("/usr/lib/libgomp.so.1")]
    src = next((p for p in candidates if p.exists()), None)
    if src is None:
        name = find_library("gomp")
        src = Path(name) if name and Path(name).exists() else None
    if src is None:
        pytest.skip("no libgomp.so.1 file found to copy")
    data = src.read_bytes()
    if b"libgomp.so.1\x00" not in data:
        pytest.skip("libgomp's soname is not libgomp.so.1 here")
    dst = tmp / "libgomp.so.7"
    dst.write_bytes(data.replace(b"libgomp.so.1\x00", b"libgomp.so.7\x00"))
    return dst


@pytest.mark.parametrize("share", [True, False])
def test_kernels_bind_to_the_openmp_runtime_already_loaded(tmp_path, share):
    """A runtime loaded under another name (as PyTorch's hashed copy) is the one kernels
    loaded afterwards call: its ICVs (omp_set_dynamic) are the ones the kernel sees. Without
    the sharing the kernel sees the system runtime's: two runtimes, two pools."""
    copy = _second_runtime(tmp_path)
    src = tmp_path / "probe.c"
    src.write_text("#include <omp.h>\nint probe(void) { int d = 0;\n"
                   "#pragma omp parallel\n{\n#pragma omp single\nd = omp_get_dynamic();\n}\n"
                   "return d; }\n")
    lib = tmp_path / "probe.so"
    subprocess.run(["gcc", "-O1", "-fopenmp", "-shared", "-fPIC", str(src), "-o", str(lib)],
                   check=True)
    out = _run(f"""
        import ctypes, os
        from tdsl.emit_c import kernel, omp
        private = ctypes.CDLL({str(copy)!r}, mode=os.RTLD_LOCAL)   # as torch loads its own
        private.omp_set_dynamic(1)
        if not {share}:
            omp.share_loaded_runtime = lambda: None
        ffi, lib = kernel.load_library({str(lib)!r}, "int probe(void)")
        print(lib.probe(), len(omp.loaded_runtimes()))
    """, env={"OMP_DYNAMIC": "false"})
    dynamic, mapped = map(int, out.split())
    assert mapped == 2
    assert dynamic == (1 if share else 0)


def test_one_runtime_with_torch_in_either_order_and_torchs_thread_count():
    bundled = [p.name for p in (Path(torch.__file__).parent / "lib").glob("libgomp*")]
    if bundled and "libgomp.so.1" not in bundled:
        pytest.skip(f"this torch bundles {bundled[0]}: the loader maps the system's beside it "
                    "(kernels bind to torch's: test_kernels_bind_to_the_openmp_runtime...)")
    # torch first, with its thread count changed: the bridge follows it (no OMP_NUM_THREADS)
    for first in ("import torch; torch.set_num_threads(1); import tdsl.torch",
                  "import tdsl; import torch; import tdsl.torch"):
        out = _run(f"""
            {first}
            import numpy as np, tdsl, torch
            from tdsl.emit_c import omp
            k = tdsl.loads("op f(X: f32[N]) -> Y: f32[N] {{ Y[i] = X[i] * 2.0 }}")["f"]
            k.build()(np.ones(4096, np.float32)); torch.ones(4096).sum()
            print(len(omp.loaded_runtimes()), omp.thread_count() == torch.get_num_threads())
        """, env={"OMP_NUM_THREADS": ""})
        assert out.split() == ["1", "True"], first
