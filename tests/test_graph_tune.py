"""Graph-level tuning (`tdsl tune --graph`, `tdsl.tuner.graph_tune`): one budget shared by
the distinct fused kernels' weights, resumed from the log, applied by Graph.build and
`tdsl build --graph`. Measurements are faked (a measurer that favours later
configurations) except in the CLI test, which measures a trial per kernel."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import tdsl
from tdsl import cli
from tdsl.tuner.graph_tune import plan_trials, share_trials, tune_graph
from tdsl.tuner.log import best_record, read_log

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
SMALL_CNN = Path(__file__).resolve().parents[1] / "examples" / "models" / "small_cnn.tdsl"
TWIN = """
import std
graph twin(x: f32[B, 16, 8, 8]) -> y: f32[B, 16, 8, 8] {
    param w1: f32[16, 16, 3, 3]
    param w2: f32[16, 16, 3, 3]
    c1 = conv2d(x, w1; padding=1)
    r1 = relu(c1)
    c2 = conv2d(r1, w2; padding=1)
    y = relu(c2)
}
"""


# ------------------------------------------------------------------ the budget

def test_shares_follow_the_weights_above_a_floor_and_sum_to_the_total():
    shares = share_trials([6.0, 3.0, 1.0, 0.0], 100, floor=8)
    assert sum(shares) == 100 and min(shares) >= 8
    # 68 beyond the floors, shared 6:3:1:0
    assert shares == [8 + 41, 8 + 20, 8 + 7, 8]
    assert share_trials([1.0, 1.0, 1.0], 10, floor=1) == [4, 3, 3]   # the rest to the first


def test_a_space_smaller_than_its_share_gives_the_rest_to_the_others():
    shares = share_trials([10.0, 1.0, 1.0], 60, floor=8, caps=[12, 1000, 1000])
    assert shares[0] == 12 and sum(shares) == 60 and shares[1] == shares[2] == 24
    assert share_trials([1.0, 1.0], 100, floor=8, caps=[5, 7]) == [5, 7]    # spaces exhausted
    assert share_trials([1.0, 5.0], 20, floor=8, caps=[3, 100]) == [3, 17]  # floor within cap


def test_a_budget_below_the_floors_is_split_evenly_heaviest_first():
    assert share_trials([1.0, 9.0, 5.0], 10, floor=8) == [3, 4, 3]
    assert share_trials([1.0, 9.0], 1, floor=8) == [0, 1]
    assert share_trials([], 10) == []


def test_the_budget_counts_the_log_so_a_finished_run_measures_nothing():
    first = plan_trials([6.0, 3.0, 1.0], 48, [0, 0, 0], floor=8)
    assert first == share_trials([6.0, 3.0, 1.0], 48, floor=8) and sum(first) == 48
    # timed again, the weights moved: still nothing new with the same total
    assert plan_trials([5.0, 4.0, 1.0], 48, first, floor=8) == first
    # a run cut short goes on where it stopped; a larger total tops every task up
    assert plan_trials([6.0, 3.0, 1.0], 48, [first[0], 3, 0], floor=8) == first
    more = plan_trials([6.0, 3.0, 1.0], 96, first, floor=8)
    assert sum(more) == 96 and all(m >= f for m, f in zip(more, first))


# ------------------------------------------------------------------ tuning a graph

class _FavourLast:
    """A fake measurer: the later a configuration's index, the faster (nothing is timed);
    with ``stop_after``, Ctrl-C arrives at that measurement."""

    def __init__(self, stop_after=None):
        self.calls, self.stop_after = 0, stop_after

    def measure(self, task, indices):
        from tdsl.tuner.measure import MeasureResult
        out = []
        for i in indices:
            self.calls += 1
            if self.calls == self.stop_after:
                raise KeyboardInterrupt
            out.append(MeasureResult(i, task.space.config(i), "ok", 1e-3 / (1 + i)))
        return out

    def close(self):
        pass


def _small_cnn():
    g = tdsl.load(SMALL_CNN)["small_cnn"]
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return g, g.random_params(), x


@needs_gcc
def test_each_distinct_kernel_is_tuned_resumed_and_applied(tmp_path):
    g, p, x = _small_cnn()
    log = tmp_path / "net.jsonl"
    r = tune_graph(g, p, [x], trials=3, log=log, floor=2, tuner="random",
                   measurer=_FavourLast(), rounds=3, passes=2, stream=False)
    # conv, two Winograd convs, the max pool (its column tile) and the dense
    assert len(r.tasks) == 5 and r.budget == 15 and r.measured == 15
    assert sorted(t.trials for t in r.tasks) == sorted(
        share_trials([t.seconds for t in r.tasks], 15, 2, [len(t.task.space) for t in r.tasks]))
    records = read_log(log)
    for t in r.tasks:
        mine = [rec for rec in records if rec["workload"]["op"] == t.name]
        # its trials, then its best and its default measured again
        assert len({tuple(sorted(rec["config"].items())) for rec in mine}) == t.trials >= 2
        assert 1 <= sum(rec["message"] == "confirming" for rec in mine) <= 2
    n = len(records)
    assert r.before > 0 and r.after > 0 and "model time before" in r.summary()
    assert r.max_difference < 1e-3
    # the same budget again: nothing new is measured
    again = tune_graph(g, p, [x], trials=3, log=log, floor=2, tuner="random",
                       measurer=_FavourLast(), rounds=3, passes=2, stream=False)
    assert again.measured == 0 and len(read_log(log)) == n
    assert all(t.result.resumed == t.trials for t in again.tasks)
    # the build applies each kernel's best record, and computes what the default does
    tuned = g.build(params=p, tuning_log=log)
    c = tuned.compiled(x)
    names = {t.name for t in r.tasks}
    for k, f in enumerate(c.functions):
        from tdsl.graph_api import fused_workload
        w = fused_workload(g.module, "small_cnn", f, c.target)
        assert ("(tuned)" in c.schedules[k]) == (w.op in names), c.schedules[k]
        if w.op in names:
            best = best_record(records, w)
            task = next(t for t in r.tasks if t.name == w.op)
            assert best["config"] == task.result.best_config
    np.testing.assert_allclose(tuned(x), g.build(params=p)(x), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tuned(x), g.reference(x, params=p), rtol=1e-3, atol=1e-3)


@needs_gcc
def test_equal_kernels_are_one_task_and_later_tasks_start_warm(tmp_path):
    g = tdsl.loads(TWIN)["twin"]
    p = g.random_params()
    x = np.random.default_rng(2).standard_normal((1, 16, 8, 8)).astype(np.float32)
    log = tmp_path / "twin.jsonl"
    r = tune_graph(g, p, [x], trials=4, log=log, floor=2, tuner="gbt",
                   measurer=_FavourLast(), batch_size=4, rounds=3, passes=2, stream=False)
    twins = [t for t in r.tasks if len(t.kernels) == 2]
    assert len(twins) == 1, [(t.name, t.kernels) for t in r.tasks]
    # the duplicate kernel gets the task's best under its own workload
    copied = [rec for rec in read_log(log) if rec["message"].startswith("same kernel as")]
    assert len(copied) == 1 and copied[0]["config"] == twins[0].result.best_config
    c = g.build(params=p, tuning_log=log).compiled(x)
    assert all("(tuned)" in c.schedules[k] for k in twins[0].kernels)
    # a second run copies nothing again
    tune_graph(g, p, [x], trials=4, log=log, floor=2, measurer=_FavourLast(),
               rounds=2, passes=2, stream=False)
    assert len([rec for rec in read_log(log) if rec["message"].startswith("same")]) == 1
    # tasks after the first of a template start from its measurements
    by_anchor = {}
    for t in r.tasks:
        by_anchor.setdefault(t.anchor, []).append(t)
    assert all(not ts[0].warm and all(t.warm for t in ts[1:]) for ts in by_anchor.values())


@needs_gcc
def test_an_interrupt_stops_the_run_and_leaves_the_log_whole(tmp_path):
    g, p, x = _small_cnn()
    log = tmp_path / "net.jsonl"
    r = tune_graph(g, p, [x], trials=2, log=log, floor=2, tuner="random",
                   measurer=_FavourLast(stop_after=4), batch_size=2, rounds=2, passes=2,
                   confirm=False, stream=False)
    assert r.interrupted and r.after is None
    lines = log.read_text().splitlines()
    # the first batch (2) written, the second cut off whole at its second measurement
    assert len(lines) == 2 and all(json.loads(line)["status"] == "ok" for line in lines)
    again = tune_graph(g, p, [x], trials=2, log=log, floor=2, tuner="random",
                       measurer=_FavourLast(), batch_size=2, rounds=2, passes=2, stream=False)
    assert not again.interrupted and again.measured == 10 - 2


# ------------------------------------------------------------------ the command line

@needs_gcc
def test_tdsl_tune_graph_and_build_with_its_log(tmp_path, capsys):
    src = tmp_path / "twin.tdsl"
    src.write_text(TWIN)
    log = tmp_path / "twin.jsonl"
    code = cli.main(["tune", str(src), "--graph", "twin", "--shape", "B=1", "--trials", "1",
                     "--floor", "1", "--log", str(log), "--timeout", "20"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "model time before:" in out and "model time after:" in out and "x;" in out
    assert out.count("trials, best") >= 1
    assert len(read_log(log)) >= 1
    g = tdsl.load(src)["twin"]
    np.savez(tmp_path / "w.npz", **g.random_params())
    code = cli.main(["build", str(src), "--graph", "twin", "--params", str(tmp_path / "w.npz"),
                     "--shape", "B=1", "--tuning-log", str(log), "-o", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0 and "tuned from" in out and "(tuned)" in out, out
    assert (tmp_path / "out" / "twin_k0.c").is_file()


def test_tdsl_tune_graph_refuses_op_flags(tmp_path, capsys):
    src = tmp_path / "twin.tdsl"
    src.write_text(TWIN)
    assert cli.main(["tune", str(src), "--graph", "twin", "--op", "conv2d"]) == 1
    assert "takes no --op" in capsys.readouterr().err
    assert cli.main(["tune", str(src), "--graph", "nope"]) == 1
    assert "no graph 'nope'" in capsys.readouterr().err


def test_cold_timing_flushes_before_every_call():
    from tdsl.tuner.graph_tune import flush_bytes
    from tdsl.tuner.measure import time_cold
    calls = []
    seconds = time_cold(lambda: calls.append(1), 0.0, 3, 1 << 16)
    assert len(calls) == 3 and seconds >= 0
    assert flush_bytes("c") >= 8 << 20
