"""Sizes too large to allocate are a CallError naming the tensor, its shape and its bytes,
before anything is allocated, from the reference, compiled kernels and graph modules alike;
never numpy's raw MemoryError (issue 24). The inputs are broadcast views: a few bytes each,
whatever their shape."""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tdsl
from tdsl.errors import CallError
from tdsl.lowering import sizes

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
GIB = 1 << 30


def huge(*shape) -> np.ndarray:
    """A float32 array of this shape that takes no memory (every element is one)."""
    return np.broadcast_to(np.float32(1.0), shape)


@pytest.fixture
def one_gib(monkeypatch):
    """A machine of 1 GiB, so that the refusals do not depend on this one's memory."""
    monkeypatch.setattr(sizes, "memory_bytes", lambda: GIB)


@pytest.fixture(scope="module")
def relu():
    return tdsl.stdlib["relu"].build(target="c", ranks=[1])


@pytest.fixture(scope="module")
def matmul():
    return tdsl.stdlib["matmul"].build(target="c")


def _refusal(run) -> str:
    with pytest.raises(CallError) as e:
        run()
    return str(e.value)


@needs_gcc
def test_a_2_31_element_broadcast_input(one_gib, relu):
    x = huge(1 << 31)
    for message in (_refusal(lambda: tdsl.stdlib["relu"].reference(x)), _refusal(lambda: relu(x))):
        assert "stage 'Y' of 'relu'" in message and "(2147483648,)" in message
        assert "8589934592 bytes (8.0 GiB)" in message and "1073741824 bytes" in message


@needs_gcc
def test_a_broadcast_input_whose_dense_copy_does_not_fit(one_gib):
    """A small output, but the kernel needs the input dense: its copy is refused by name."""
    kernel = tdsl.stdlib["reduce_sum"].build(target="c")
    message = _refusal(lambda: kernel(huge(1 << 16, 1 << 15)))
    assert "the dense copy of argument 'X' of 'reduce_sum'" in message
    assert "(65536, 32768)" in message and "8589934592 bytes" in message


@needs_gcc
def test_a_65536_by_65536_matmul_output(one_gib, matmul):
    a, b = huge(65536, 1), huge(1, 65536)
    for message in (_refusal(lambda: tdsl.stdlib["matmul"].reference(a, b)),
                    _refusal(lambda: matmul(a, b))):
        assert "stage 'C' of 'matmul'" in message and "(65536, 65536)" in message
        assert "17179869184 bytes (16.0 GiB)" in message


@needs_gcc
def test_sizes_whose_product_overflows_int64_on_any_machine(matmul):
    """2**33 x 2**33 elements of 4 bytes: 2**68 bytes, past any machine and past int64 (a
    product in int64 would wrap, here to 0); exact Python ints refuse it, unpatched."""
    a, b = huge(1 << 33, 1), huge(1, 1 << 33)
    for message in (_refusal(lambda: tdsl.stdlib["matmul"].reference(a, b)),
                    _refusal(lambda: matmul(a, b))):
        assert "(8589934592, 8589934592)" in message and f"{1 << 68} bytes" in message
    assert int(np.prod((1 << 33, 1 << 33, 4), dtype=np.int64)) == 0     # what int64 says


@needs_gcc
def test_a_graph_module_refuses_before_allocating(one_gib):
    g = tdsl.loads("""
        import std
        graph g(x: f32[B, 8]) -> y: f32[B, 8] {
            y = relu(x)
        }""")["g"]
    module = g.build()
    x = huge(1 << 26, 8)                                       # 2 GiB of float32
    message = _refusal(lambda: module(x))
    assert "graph g" in message and "(67108864, 8)" in message and "2147483648 bytes" in message
    assert "stage 'Y' of 'relu'" in _refusal(lambda: g.reference(x))


def test_large_but_allocatable_sizes_are_not_refused(one_gib):
    assert sizes.check_allocation((GIB // 4,), np.float32, "x") == GIB    # exactly the limit
    with pytest.raises(CallError, match=r"'x' would have shape \(268435457,\)"):
        sizes.check_allocation((GIB // 4 + 1,), np.float32, "'x'")
    assert sizes.check_allocation((1 << 40, 0), np.float64, "empty") == 0


def test_the_limit_is_what_this_process_could_ever_hold():
    """Physical memory as os.sysconf reports it, never more than 2**63, less under ulimit."""
    limit = sizes.memory_bytes()
    assert 0 < limit <= 1 << 63
    code = textwrap.dedent("""
        import resource
        import numpy as np
        from tdsl.errors import CallError
        from tdsl.lowering import sizes
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY))
        assert sizes.memory_bytes() == 4 << 30
        try:
            sizes.empty((3 << 30,), np.float32, "output 'Y'")
        except CallError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "output 'Y' would have shape (3221225472,)" in out.stdout
    assert "address-space limit" in out.stdout


def test_a_failed_allocation_is_a_call_error_too(monkeypatch):
    """Under the limit, but the allocation fails (memory taken by others): the same words."""
    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate")
    monkeypatch.setattr(sizes.np, "empty", no_memory)
    with pytest.raises(CallError, match=r"'Y' would have shape \(4, 4\).*64 bytes.*could not "
                                        r"be allocated"):
        sizes.empty((4, 4), np.float32, "'Y'")
