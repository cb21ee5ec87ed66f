"""The tuning loop with a fake measurer: logging, resume, errors, Ctrl-C, the summary."""
import json
import math
import shutil

import pytest

from tdsl.lowering.schedule import Knob, KnobExpr
from tdsl.tuner.log import Workload, read_log
from tdsl.tuner.measure import MeasureResult
from tdsl.tuner.search import RandomTuner
from tdsl.tuner.task import Task
from tdsl.tuner.tune import Progress, tune

WORKLOAD = Workload.make("std", "matmul", {"M": 64, "N": 64, "K": 64})


class FakeMeasurer:
    """Deterministic synthetic timings: fastest at ti=8, tj=48, nb=2; the configurations
    with ku=4 and ti=4 'crash'. Counts what it was asked to measure."""

    def __init__(self, interrupt_after=None):
        self.asked = []
        self.interrupt_after = interrupt_after

    def measure(self, task, indices):
        if self.interrupt_after is not None and len(self.asked) >= self.interrupt_after:
            raise KeyboardInterrupt
        out = []
        for i in indices:
            self.asked.append(i)
            c = task.space.config(i)
            if c["ku"] == 4 and c["ti"] == 4:
                out.append(MeasureResult(i, c, "crash", None, "SIGSEGV"))
                continue
            cost = (1 + abs(c["ti"] - 8) / 4 + abs(c["tj"] - 48) / 16
                    + (c["nb"] != 2) * 0.5 + (c["ku"] - 1) * 0.1)
            out.append(MeasureResult(i, c, "ok", 1e-4 * cost))
        return out

    def close(self):
        pass


@pytest.fixture(scope="module")
def task():
    return Task(WORKLOAD)


def test_every_measurement_is_logged_and_the_best_reported(task, tmp_path):
    log = tmp_path / "t.jsonl"
    m = FakeMeasurer()
    result = tune(task, 40, log, "random", m, batch_size=8, compare_numpy=False)
    records = read_log(log)
    assert len(records) == len(m.asked) == result.trials == 40
    assert len(set(m.asked)) == 40
    ok = [r for r in records if r["status"] == "ok"]
    best = max(ok, key=lambda r: r["gflops"])
    assert result.best_config == best["config"]
    assert result.best_gflops == pytest.approx(task.flops / best["seconds"] / 1e9)
    assert result.curve == sorted(result.curve)          # best so far never decreases
    crashes = [r for r in records if r["status"] == "crash"]
    assert result.statuses["crash"] == len(crashes)
    assert all(r["message"] == "SIGSEGV" and r["gflops"] is None for r in crashes)
    # the default configuration is measured first, so the summary can compare with it
    assert m.asked[0] == task.space.default_index()
    assert result.default_gflops is not None
    assert "best configuration" in result.summary()


def test_resume_measures_nothing_twice(task, tmp_path):
    log = tmp_path / "t.jsonl"
    first = FakeMeasurer()
    tune(task, 24, log, "gbt", first, batch_size=8, compare_numpy=False)
    second = FakeMeasurer()
    result = tune(task, 40, log, "gbt", second, batch_size=8, compare_numpy=False)
    assert result.resumed == 24
    assert len(second.asked) == 16
    assert not set(first.asked) & set(second.asked)
    assert len(read_log(log)) == 40
    # asking for no more than the log holds measures nothing
    third = FakeMeasurer()
    tune(task, 40, log, "gbt", third, compare_numpy=False)
    assert third.asked == []


def test_resume_tolerates_a_truncated_last_line(task, tmp_path):
    log = tmp_path / "t.jsonl"
    tune(task, 8, log, "random", FakeMeasurer(), batch_size=8, compare_numpy=False)
    with open(log, "a") as f:
        f.write('{"workload": {"op": "mat')
    m = FakeMeasurer()
    result = tune(task, 16, log, "random", m, batch_size=8, compare_numpy=False)
    assert result.resumed == 8 and len(m.asked) == 8
    assert all(json.loads(line) for line in log.read_text().splitlines())


def test_resume_skips_records_of_a_renamed_knob_with_a_warning(task, tmp_path):
    log = tmp_path / "t.jsonl"
    tune(task, 8, log, "random", FakeMeasurer(), batch_size=8, compare_numpy=False)
    text = log.read_text()
    knob = task.space.names[0]
    log.write_text(text + text.replace(f'"{knob}":', '"renamed":'))
    with pytest.warns(UserWarning, match="skipped 8 record"):
        result = tune(task, 8, log, "random", FakeMeasurer(), batch_size=8,
                      compare_numpy=False)
    assert result.resumed == 8


def test_interrupt_stops_cleanly_with_the_log_whole(task, tmp_path):
    log = tmp_path / "t.jsonl"
    m = FakeMeasurer(interrupt_after=16)
    result = tune(task, 64, log, "random", m, batch_size=8, compare_numpy=False)
    assert result.interrupted
    assert result.trials == 16 == len(read_log(log))
    assert "interrupted" in result.summary()


def test_exhausting_a_small_space_stops_early(tmp_path):
    task = Task(WORKLOAD)
    m = FakeMeasurer()
    result = tune(task, 10_000, None, RandomTuner(task.space, 0), m, batch_size=32,
                  compare_numpy=False)
    assert result.trials == len(task.space) == len(set(m.asked))


def test_gbt_needs_fewer_trials_than_random_on_the_fake_cost():
    # the knob the fake cost ignores is fixed and nb has two values, so the whole space
    # stays small enough to walk six times
    base = Task(WORKLOAD)
    task = Task(WORKLOAD, base.template.require({"pack": True}).require(
        KnobExpr("<=", (Knob("nb"), 2))))

    def trials_to_best(tuner, seed):
        m = FakeMeasurer()
        result = tune(task, len(task.space), None, tuner, m, batch_size=8, seed=seed,
                      compare_numpy=False)
        return result.curve.index(max(result.curve)) + 1

    gbt = [trials_to_best("gbt", s) for s in range(3)]
    rnd = [trials_to_best("random", s) for s in range(3)]
    assert sum(gbt) < sum(rnd), (gbt, rnd)


def test_progress_line_shows_trials_best_and_errors(task, tmp_path):
    import io
    stream = io.StringIO()
    tune(task, 16, None, "random", FakeMeasurer(), batch_size=8, compare_numpy=False,
         progress=Progress(16, stream=stream, every=8))
    text = stream.getvalue()
    assert "16/16 trials" in text and "GFLOP/s" in text and "errors" in text
    assert not math.isnan(float(text.split("best ")[-1].split()[0]))


def test_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (tdsl[plot])")
    from tdsl.tuner.tune import plot_curves
    out = tmp_path / "curve.png"
    plot_curves({"gbt": [1.0, 2.0, 2.0], "random": [0.5, 1.0, 1.5]}, out, "t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


TINY = """
op axpy(X: f32[N], Y: f32[N]; a: float = 2.0) -> Z: f32[N] {
    Z[i] = a * X[i] + Y[i]
}
schedule axpy for cpu {
    knob v in [4, 8, 16] = 8
    knob par in [false, true] = false
    io, ii = split(Z.i, v)
    vectorize(ii)
    if par {
        parallel(io)
    }
}
"""


def test_tdsl_tune_command_end_to_end(tmp_path, capsys):
    """The real thing on a tiny space: measured in worker processes, logged, resumed,
    plotted, and the log applied by tdsl build."""
    from tdsl.cli import main
    src = tmp_path / "axpy.tdsl"
    src.write_text(TINY)
    log = tmp_path / "tune.jsonl"
    args = ["tune", str(src), "--shape", "N=4096", "--trials", "4", "--log", str(log),
            "--timeout", "20"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "best configuration" in out.out and "numpy (reference)" in out.out
    assert "6 configurations" in out.err
    assert len(read_log(log)) == 4
    assert main(args[:5] + ["8"] + args[6:] + ["--tuner", "grid"]) == 0
    records = read_log(log)
    assert len(records) == 6                      # the space holds 6: the rest is skipped
    assert len({json.dumps(r["config"], sort_keys=True) for r in records}) == 6
    assert all(r["status"] == "ok" for r in records), [r for r in records
                                                       if r["status"] != "ok"]
    assert main(["build", str(src), "--shape", "N=4096", "--tuning-log", str(log),
                 "-o", str(tmp_path / "out")]) == 0


def test_flop_counts_are_the_textbook_ones():
    """Value arithmetic only: the conv's padding select and index arithmetic count nothing."""
    conv = Task(Workload.make("std", "conv2d", {"N": 1, "C": 8, "IH": 10, "IW": 12, "F": 32,
                                                "KH": 3, "KW": 3}, {"padding": 1}))
    assert conv.flops == 2 * 32 * 10 * 12 * 8 * 9
    assert Task(WORKLOAD).flops == 2 * 64 ** 3


class FailingMeasurer(FakeMeasurer):
    """Every candidate fails: half with one internal error, half with another."""

    def measure(self, task, indices):
        self.asked += indices
        return [MeasureResult(i, task.space.config(i), "build_error", None,
                              f"internal error: KeyError: '{'ab'[i % 2]}'") for i in indices]


def test_a_candidate_error_reaches_the_summary(task):
    """Issue 28: an internal error in every candidate showed only in the log; the console
    said "results: 2 build_error"."""
    result = tune(task, 8, None, "random", FailingMeasurer(), batch_size=8,
                  compare_numpy=False)
    text = result.summary()
    assert "no configuration ran successfully" in text and "8 build_error" in text
    assert "build_error: internal error: KeyError: " in text, text
    assert "(and 1 other message: see the log)" in text, text


def test_an_unmeasurable_target_is_refused_before_measuring(tmp_path, capsys):
    """Issue 28: c-embedded candidates all failed with KeyError: 'c-embedded', exit 0."""
    from tdsl.cli import main
    from tdsl.errors import TdslError
    # a cross build where arm-none-eabi-gcc is installed (CI), else the host's c-embedded
    target = "c-embedded -mcpu=cortex-m4" if shutil.which("arm-none-eabi-gcc") else \
        "c-embedded"
    embedded = Task(Workload.make("std", "matmul", {"M": 8, "N": 8, "K": 8}, target=target))
    m = FakeMeasurer()
    with pytest.raises(TdslError, match="can't measure target 'c-embedded"):
        tune(embedded, 4, None, "random", m, compare_numpy=False)
    assert m.asked == []
    log = tmp_path / "t.jsonl"
    code = main(["tune", "std", "--op", "matmul", "--shape", "M=8,N=8,K=8", "--target",
                 target, "--log", str(log)])
    err = capsys.readouterr().err
    assert code == 1 and "can't measure target 'c-embedded" in err and "Traceback" not in err
    assert not log.exists()


def test_progress_counts_to_what_a_small_space_holds(tmp_path):
    """Issue 28: with fewer configurations than --trials the line stayed at 0/64."""
    import io
    task = Task(WORKLOAD)
    trials = len(task.space) + 100
    stream = io.StringIO()
    result = tune(task, trials, None, RandomTuner(task.space, 0), FakeMeasurer(),
                  batch_size=len(task.space) + 1, compare_numpy=False,
                  progress=Progress(trials, stream=stream))
    lines = stream.getvalue().splitlines()
    assert result.trials == len(task.space)
    assert lines[0].split("] ")[1].startswith(f"0/{len(task.space)} trials"), lines
    assert lines[-1].split("] ")[1].startswith(f"{len(task.space)}/{len(task.space)} "
                                               f"trials"), lines
    assert lines[-1].startswith("[" + "#" * 24 + "]")


def test_summary_shows_a_slow_reference_as_a_figure_not_zero(task):
    """Issue 28: the reference at a few MFLOP/s printed as "numpy (reference): 0.0"."""
    from tdsl.tuner.tune import TuneResult
    result = TuneResult(task, "random", {"ti": 8}, 12.5, 10.0, 0.00412, [12.5])
    text = result.summary()
    assert "numpy (reference): 0.00412 GFLOP/s  (best is 3034x)" in text, text
    assert "default schedule: 10.0 GFLOP/s  (best is 1.25x)" in text
    assert ": 0.0 GFLOP/s" not in text
