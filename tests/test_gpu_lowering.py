"""GPU lowering: thread bindings, shared memory, barriers, and the errors a GPU schedule or
driver can give. Printing needs no device; the runs need an OpenCL platform (PoCL in CI)."""
import numpy as np
import pytest

import tdsl
from tdsl.emit_opencl import emit_opencl, unavailable_reason
from tdsl.emit_cuda import emit_cuda
from tdsl.lowering import te
from tdsl.lowering.dtypes import INDEX
from tdsl.lowering.loop_ir import (Allocate, Barrier, Buffer, BufferLoad, Evaluate, For,
                                   ForKind, If, LoweredFunc, Seq, Store, Call, walk_stmt)
from tdsl.lowering.passes import barriers

needs_opencl = pytest.mark.skipif(unavailable_reason() is not None,
                                  reason=f"OpenCL: {unavailable_reason()}")

MATMUL = """
op mm(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N] {
    C[i, j] = sum[k](A[i, k] * B[k, j])
}
"""


def _i(v):
    return te.Const(v, INDEX)


# ---------------------------------------------------------------------------- the barrier pass

def _shared_pair():
    sh = Buffer("S", "f32", (_i(4),), "shared")
    out = Buffer("O", "f32", (_i(4),))
    t = te.Var("t")
    write = For(t, _i(0), _i(4), ForKind.THREAD_BINDING,
                Store(sh, (t,), te.Const(1.0, "f32")), "threadIdx.x")
    u = te.Var("u")
    read = For(u, _i(0), _i(4), ForKind.THREAD_BINDING,
               Store(out, (u,), BufferLoad(sh, (_i(3) ,), "f32")), "threadIdx.x")
    return sh, out, write, read


def test_barrier_goes_between_a_shared_write_and_its_read():
    """Thread 0 reads what thread 3 wrote: without a barrier it may read before the write."""
    sh, out, write, read = _shared_pair()
    func = LoweredFunc("f", (out,), Allocate(sh, Seq((write, read))), num_inputs=0)
    body = barriers.run(func).body
    assert body == Allocate(sh, Seq((write, Barrier(), read)))


def test_no_barrier_without_a_shared_hazard():
    sh, out, write, _ = _shared_pair()
    func = LoweredFunc("f", (out,), Allocate(sh, write), num_inputs=0)
    assert barriers.run(func).body == func.body


def test_a_loop_that_writes_and_reads_shared_ends_with_a_barrier():
    """The next iteration's writes must wait for this iteration's reads (write after read)."""
    sh, out, write, read = _shared_pair()
    k = te.Var("k")
    loop = For(k, _i(0), _i(3), ForKind.SERIAL, Seq((write, read)))
    func = LoweredFunc("f", (out,), Allocate(sh, loop), num_inputs=0)
    body = barriers.run(func).body
    assert body == Allocate(sh, For(k, _i(0), _i(3), ForKind.SERIAL,
                                    Seq((write, Barrier(), read, Barrier()))))


def test_a_guard_around_a_barrier_is_pushed_below_it():
    """if c {load; sync; use}: threads with c false would skip the barrier (a hang) and the
    load (others' data missing); after: the load runs for all, the use under c."""
    sh, out, write, read = _shared_pair()
    c = te.Compare("<", te.Var("n"), _i(2))
    func = LoweredFunc("f", (out,), Allocate(sh, If(c, Seq((write, read)))), num_inputs=0)
    body = barriers.run(func).body
    assert body == Allocate(sh, Seq((write, Barrier(), If(c, read))))


def test_matmul_gpu_schedule_syncs_once_per_slice_and_not_in_the_loads():
    func = tdsl.stdlib["matmul"].lower(target="opencl", shapes={"M": 64, "K": 32, "N": 64})
    slices = [s for s in walk_stmt(func.body) if isinstance(s, For) and s.var.name == "ko"]
    assert len(slices) == 1
    inner = list(walk_stmt(slices[0].body))
    assert sum(isinstance(s, Barrier) for s in inner) == 2     # after the loads, at the end
    loads = [s for s in inner if isinstance(s, For) and s.var.name in ("fa2", "fb2")]
    assert loads and not any(isinstance(x, Barrier) for s in loads for x in walk_stmt(s))
    shared = {s.buffer.name for s in walk_stmt(func.body)
              if isinstance(s, Allocate) and s.buffer.scope == "shared"}
    assert shared == {"AS", "BS"}


def test_shared_tile_covers_the_block_not_one_thread():
    """The shared tile is tb x tk (every thread's rows), not one thread's reg x tk."""
    func = tdsl.stdlib["matmul"].lower(target="opencl", shapes={"M": 64, "K": 32, "N": 64},
                                       config={"tb": 32, "reg": 2, "tk": 8})
    sizes = {s.buffer.name: int(s.buffer.shape[0].value) for s in walk_stmt(func.body)
             if isinstance(s, Allocate) and s.buffer.scope == "shared"}
    assert sizes == {"AS": 32 * 8, "BS": 8 * 32}


# ---------------------------------------------------------------------------- printing

def test_opencl_and_cuda_differ_only_in_spelling():
    func = tdsl.stdlib["matmul"].lower(target="opencl")
    cl = emit_opencl(func).kernels
    cu = emit_cuda(tdsl.stdlib["matmul"].lower(target="cuda")).source
    assert "__kernel void matmul_k0(__global const float* restrict A" in cl
    assert "get_group_id(1)" in cl and "barrier(CLK_LOCAL_MEM_FENCE);" in cl
    assert "__local float AS[512];" in cl
    assert 'extern "C" __global__ void matmul_k0(const float* __restrict__ A' in cu
    assert "blockIdx.y" in cu and "__syncthreads();" in cu and "__shared__ float AS[512];" in cu
    assert "matmul_k0<<<grid, block>>>" in cu


def test_gpu_math_is_the_language_own():
    func = tdsl.stdlib["sigmoid"].lower(target="opencl", ranks=1)
    assert "exp(" in emit_opencl(func).kernels and "tdsl_exp_f32" not in emit_opencl(func).kernels
    cu = emit_cuda(tdsl.stdlib["exp"].lower(target="cuda", ranks=1)).source
    assert "expf(" in cu and "tdsl_exp_f32" not in cu


# ---------------------------------------------------------------------------- schedule errors

def _lower_block(block, target="opencl"):
    mod = tdsl.loads(MATMUL + block, "sched.tdsl")
    return mod["mm"].lower(target=target)


def test_a_thread_axis_bound_twice_is_refused_at_its_line():
    with pytest.raises(tdsl.ScheduleError) as e:
        _lower_block("""schedule mm for gpu {
    io, ii = split(C.i, 16)
    bind(io, blockIdx.x)
    bind(ii, threadIdx.x)
    bind(C.j, threadIdx.x)
}""")
    assert "already bound" in str(e.value) and "sched.tdsl:9" in str(e.value)


def test_binding_a_reduction_is_refused():
    with pytest.raises(tdsl.ScheduleError, match="cross-thread reduction"):
        _lower_block("""schedule mm for gpu {
    bind(C.i, blockIdx.x)
    bind(C.k, threadIdx.x)
}""")


def test_a_block_larger_than_the_target_allows_is_refused():
    with pytest.raises(tdsl.ScheduleError, match="more than the 256") as e:
        _lower_block("""schedule mm for gpu {
    io, ii = split(C.i, 512)
    bind(io, blockIdx.x)
    bind(ii, threadIdx.x)
}""")
    assert "sched.tdsl:8" in str(e.value)


def test_an_unbound_stage_over_a_whole_tensor_is_refused():
    with pytest.raises(tdsl.ScheduleError, match="one thread would compute all of it"):
        _lower_block("""schedule mm for gpu {
    io, ii = split(C.i, 16)
}""")


def test_bind_on_a_cpu_target_is_refused():
    mod = tdsl.loads(MATMUL, "m.tdsl")
    sched = mod["mm"].schedule("naive").bind("C", "i", "threadIdx.x")
    with pytest.raises(tdsl.ScheduleError, match="no GPU threads"):
        mod["mm"].lower(sched, target="c")


def test_shared_memory_at_the_root_is_refused():
    mod = tdsl.loads(MATMUL, "m.tdsl")
    sched = mod["mm"].schedule("auto", target="opencl").cache_read("A", "shared", ["C"])
    with pytest.raises(tdsl.TdslError, match="shared memory lives in one block"):
        mod["mm"].build("opencl", sched)


# ---------------------------------------------------------------------------- driver errors

@needs_opencl
def test_a_kernel_the_driver_rejects_is_a_build_error_with_its_log():
    out = Buffer("O", "f32", (_i(1),))
    t = te.Var("t")
    body = For(t, _i(0), _i(1), ForKind.THREAD_BINDING,
               Evaluate(Call("no_such_function", ())), "threadIdx.x")
    func = LoweredFunc("broken", (out,), body, num_inputs=0)
    from tdsl.emit_opencl import build_opencl
    with pytest.raises(tdsl.TdslError, match="no_such_function") as e:
        build_opencl(func)
    assert "rejected" in str(e.value)


@needs_opencl
def test_a_launch_the_device_refuses_is_a_call_error():
    """PoCL allows 4096 work-items per group; a target that claims more launches too many."""
    mod = tdsl.loads(MATMUL, "m.tdsl")
    target = "opencl -max_threads=16384"
    sched = mod["mm"].schedule("naive", target=target).split("C", "i", 8192) \
        .bind("C", "i.o", "blockIdx.x").bind("C", "i.i", "threadIdx.x")
    kernel = mod["mm"].build(target, sched)
    with pytest.raises(tdsl.CallError, match="launching mm_k0"):
        kernel(np.ones((3, 2), np.float32), np.ones((2, 2), np.float32))


@needs_opencl
def test_user_gpu_schedule_runs_right_on_opencl():
    mod = tdsl.loads(MATMUL + """schedule mm for opencl {
    io, ii = split(C.i, 8)
    jo, ji = split(C.j, 8)
    reorder(io, jo, ii, ji)
    bind(io, blockIdx.y)
    bind(jo, blockIdx.x)
    bind(ii, threadIdx.y)
    bind(ji, threadIdx.x)
}""")
    kernel = mod["mm"].build("opencl")
    a = np.random.default_rng(1).standard_normal((13, 7), dtype=np.float32)
    b = np.random.default_rng(2).standard_normal((7, 10), dtype=np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_set_scope_is_refused_for_an_output():
    mod = tdsl.loads(MATMUL, "m.tdsl")
    sched = mod["mm"].schedule("naive").set_scope("C", "shared")
    with pytest.raises(tdsl.ScheduleError, match="output"):
        mod["mm"].lower(sched, target="opencl")


def test_a_shared_buffer_of_unfixed_size_is_reported_in_tdsl_notation():
    """Issue 28: the message said "tdsl_max_i64(2 * K + 30, 0) elements", a C helper's name."""
    from tdsl.emit_opencl.printer import OpenCLPrinter
    from tdsl.lowering.device import split_kernels
    func = tdsl.stdlib["matmul"].lower(target="opencl")
    kernel = split_kernels(func).kernels[0].as_function(func)
    printer = OpenCLPrinter(kernel, None, tdsl.Target("opencl"))
    k = te.Var("K")
    count = te.intrinsic("max", te.binary("+", te.binary("*", _i(2), k), _i(30)), _i(0))
    with pytest.raises(tdsl.TdslError) as e:
        printer.declare_allocation(Buffer("Xs", "f32", (count,), "shared"), "Xs", count, [])
    assert "Xs has max(2 * K + 30, 0) elements" in str(e.value)
    assert "tdsl_" not in str(e.value)
