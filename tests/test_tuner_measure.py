"""The tuner's measurement: every way a candidate can fail is recorded, and measuring goes on.

The template is a vector add with a knob ``variant``; variants 1.. tensorize the loop with
micro-kernels written to fail one way each (segfault, hang, wrong value, C that does not
compile, a configuration the template's ``require`` rules out).
"""
import contextlib
import os
import signal
import threading

import numpy as np
import pytest

from tdsl.lowering import te
from tdsl.lowering.schedule import Knob, KnobExpr, Schedule, TensorIntrin
from tdsl.tuner.log import Workload, machine_fingerprint
from tdsl.tuner.measure import LocalMeasurer, MeasureResult, compare, time_calls
from tdsl.tuner.task import Task

SOURCE = "op vadd(A: f32[N], B: f32[N]) -> C: f32[N] {\n    C[i] = A[i] + B[i]\n}\n"
N = 4096

SIGNATURE = ("static void {name}(const float* x, int64_t sx, const float* y, int64_t sy, "
             "float* z, int64_t sz)")
BODIES = {
    "add4_ok": "for (int i = 0; i < 4; i++) z[i * sz] = x[i * sx] + y[i * sy];",
    "add4_segv": "(void)x; (void)y; (void)sx; (void)sy; (void)sz; "
                 "*(volatile float*)0 = z[0];",
    "add4_hang": "(void)x; (void)y; (void)sx; (void)sy; (void)sz; (void)z; "
                 "for (volatile int i = 0; ; i++) {}",
    "add4_wrong": "for (int i = 0; i < 4; i++) z[i * sz] = x[i * sx] - y[i * sy];",
    "add4_bad_c": "this is not C;",
}
# variant -> expected status: 0 plain loops, 1-5 the intrinsics above, 6 breaks a require
VARIANTS = ["ok", "ok", "crash", "timeout", "wrong", "build_error", "invalid"]


def intrinsic(name: str) -> TensorIntrin:
    x, y = te.placeholder("x", (4,)), te.placeholder("y", (4,))
    z = te.compute("z", (4,), lambda j: x[j] + y[j], ["j"])
    c = SIGNATURE.format(name=name) + " { " + BODIES[name] + " }"
    return TensorIntrin(name, te.Function(name, (x, y), (z,)), c)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    path = tmp_path_factory.mktemp("op") / "vadd.tdsl"
    path.write_text(SOURCE)
    workload = Workload.make(path, "vadd", {"N": N})
    fn = Task(workload).fn
    s = Schedule(fn).knob("variant", list(range(len(VARIANTS))))
    s = s.require(KnobExpr("!=", (Knob("variant"), len(VARIANTS) - 1)))
    for v, name in enumerate(BODIES, start=1):
        s = s.when({"variant": v}, lambda s, name=name: s.split("C", "i", 4)
                   .tensorize("C", "i.i", intrinsic(name)))
    return Task(workload, template=s)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """A kernel cache of the tests' own (the worker processes inherit the variable), so
    that these deliberately broken kernels stay out of the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TDSL_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


def check(results, indices, task):
    assert [r.index for r in results] == indices
    for r in results:
        expected = VARIANTS[r.config["variant"]]
        assert r.status == expected, (r.config, r.status, r.message)
        assert r.ok == (expected == "ok")
        assert r.config == task.space.config(r.index)
        assert r.machine == machine_fingerprint()      # the loopback cluster is this machine
        if r.ok:
            assert r.seconds is not None and r.seconds > 0 and r.message == ""
            assert r.build_seconds > 0
        else:
            assert r.seconds is None and r.message


def test_every_failure_is_recorded_and_measuring_goes_on(task, cache_dir):
    with LocalMeasurer(build_workers=2, timeout=3.0, min_seconds=0.05, repeats=3) as m:
        # failures between good candidates: each one must not spoil the next
        indices = [0, 2, 1, 3, 0, 4, 5, 1, 6]
        results = m.measure(task, indices)
        check(results, indices, task)
        by_status = {r.status: r for r in results}
        assert "SIGSEGV" in by_status["crash"].message
        assert "3 s" in by_status["timeout"].message
        assert "max error" in by_status["wrong"].message
        assert "error" in by_status["build_error"].message
        assert "require" in by_status["invalid"].message
        # the runner was restarted after the crash and the time-out: a second batch works
        again = m.measure(task, [1, 3, 0])
        check(again, [1, 3, 0], task)


def test_close_leaves_no_process_and_no_files(task, cache_dir):
    m = LocalMeasurer(build_workers=1, timeout=3.0, min_seconds=0.02, repeats=3)
    assert m.measure(task, [0])[0].ok
    procs = [w.proc for w in m._all]
    tmp = m.tmp
    assert procs and os.path.isdir(tmp)
    m.close()
    assert all(p.poll() is not None for p in procs)
    assert not os.path.exists(tmp)


def test_keyboard_interrupt_kills_the_workers(task, cache_dir):
    """A Ctrl-C while a (hanging) candidate is timed: every worker is killed and reaped."""
    m = LocalMeasurer(build_workers=1, timeout=30.0, min_seconds=0.02, repeats=3)
    m.measure(task, [0])
    procs = [w.proc for w in m._all]
    with pressing_ctrl_c(every=1.5):
        with pytest.raises(KeyboardInterrupt):
            m.measure(task, [3])
    assert all(p.poll() is not None for p in procs)     # killed and reaped: no zombies
    assert not m._all
    assert m.measure(task, [1])[0].ok                    # and it can start again
    m.close()


@contextlib.contextmanager
def pressing_ctrl_c(every: float):
    """SIGINT to this process every ``every`` seconds until the block ends, as a user presses
    Ctrl-C again: a KeyboardInterrupt raised while the interpreter runs a finalizer (a
    ``__del__``, a weakref callback) is swallowed, and under a loaded test run one was."""
    done = threading.Event()

    def on_sigint(signum, frame):
        if not done.is_set():       # a press landing after the block ends does nothing
            raise KeyboardInterrupt

    def press():
        while not done.wait(every):
            os.kill(os.getpid(), signal.SIGINT)

    old = signal.signal(signal.SIGINT, on_sigint)
    presser = threading.Thread(target=press, daemon=True)
    presser.start()
    try:
        yield
    finally:
        done.set()
        presser.join()
        signal.signal(signal.SIGINT, old)


def test_a_build_over_its_time_limit_is_a_build_error(task, cache_dir):
    with LocalMeasurer(build_workers=1, build_timeout=1e-6, min_seconds=0.02,
                       repeats=3) as m:
        results = m.measure(task, [0, 1])
        assert [r.status for r in results] == ["build_error", "build_error"]
        assert "ran over 1e-06 s" in results[0].message
        m.build_timeout = 60.0                 # the replaced worker builds the next batch
        assert m.measure(task, [0])[0].ok


def test_result_is_a_value():
    r = MeasureResult(3, {"a": 1}, "ok", 1e-3)
    assert r.ok and r.message == "" and r.build_seconds == 0.0
    assert not MeasureResult(3, {}, "crash", None, "SIGSEGV").ok


def test_compare():
    ref = np.array([1.0, 2.0, np.nan, np.inf, 0.0], np.float32)
    assert compare(ref.copy(), ref, 1e-3, 1e-3) == ""
    assert compare(ref + np.float32(1e-4), ref, 1e-3, 1e-3) == ""
    bad = ref.copy()
    bad[1] = np.nan
    assert "at (1,)" in compare(bad, ref, 1e-3, 1e-3)
    bad = ref.copy()
    bad[3] = -np.inf
    assert "1 of 5" in compare(bad, ref, 1e-3, 1e-3)
    bad = ref.copy()
    bad[2] = 1.0                 # a number where the reference says NaN
    assert compare(bad, ref, 1e-3, 1e-3)
    assert compare(ref[:4], ref, 1e-3, 1e-3).startswith("output shape")
    ints = np.arange(6, dtype=np.int32)
    assert compare(ints, ints, 1e-3, 1e-3) == ""
    assert "max error 1" in compare(ints + (ints == 4), ints, 1e-3, 1e-3)
    # the tolerance follows the reference's magnitude (a reduction's rounding error does)
    big = np.array([1000.0, -1000.0, 0.5], np.float32)
    assert compare(big + np.float32(0.5), big, 1e-3, 1e-3) == ""


def test_time_calls_reaches_the_minimum_duration():
    calls = []
    seconds = time_calls(lambda: calls.append(1), min_seconds=0.03, repeats=3)
    assert 0 < seconds < 1e-3
    assert len(calls) > 100


def test_dask_measurer_on_a_local_cluster(task, cache_dir):
    pytest.importorskip("distributed", reason="dask.distributed is not installed "
                        "(pip install 'dask[distributed]')")
    from distributed import Client, LocalCluster

    from tdsl.tuner.distributed import DaskMeasurer
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None, host="127.0.0.1") as cluster, \
            Client(cluster) as client:
        before = set(client.nthreads())
        with DaskMeasurer(client, timeout=3.0, min_seconds=0.02, repeats=3) as m:
            indices = [2, 0, 4, 5, 6, 1]
            check(m.measure(task, indices), indices, task)
            check(m.measure(task, [1, 0]), [1, 0], task)
        # the segfault happened in the runner process, not in the dask worker
        assert set(client.nthreads()) == before


def test_dask_missing_names_the_extra(monkeypatch):
    import builtins

    from tdsl.tuner import distributed
    real_import = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name == "distributed" or name.startswith("distributed."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_dask)
    with pytest.raises(ImportError, match=r"pip install 'tdsl\[distributed\]'"):
        distributed.DaskMeasurer("tcp://127.0.0.1:1")


def test_tuning_through_failures_logs_each_with_its_kind(task, cache_dir, tmp_path):
    """The whole loop on real processes: a grid over every variant is tuned to the end,
    and the log holds one record per variant with its status."""
    from tdsl.tuner.log import read_log
    from tdsl.tuner.tune import tune
    log = tmp_path / "t.jsonl"
    with LocalMeasurer(build_workers=2, timeout=3.0, min_seconds=0.05, repeats=3) as m:
        result = tune(task, 10, log, "grid", m, batch_size=8, compare_numpy=False)
    statuses = {r["config"]["variant"]: r["status"] for r in read_log(log)}
    # the invalid variant breaks a `require`: the grid never proposes it
    assert statuses == {v: s for v, s in enumerate(VARIANTS) if s != "invalid"}
    assert result.best_config["variant"] in (0, 1)
    assert result.errors == 4


def test_folders_of_killed_tuners_are_swept(tmp_path):
    """SIGKILL runs no clean-up: the next measurer removes the folders of dead tuners (and
    leaves those of live ones)."""
    import os
    import subprocess
    from tdsl.tuner.measure import FOLDER_PREFIX, sweep_stale_folders
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"{FOLDER_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{FOLDER_PREFIX}{os.getpid()}-def"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "expected.npy").write_bytes(b"x")
    sweep_stale_folders(tmp_path)
    assert not stale.exists() and live.exists()
