"""Tuning logs: append, tolerate a killed writer, pick the best record, apply it to a build."""
import json
import warnings

import numpy as np
import pytest

import tdsl
from tdsl.cli import main
from tdsl.tuner.log import (LogWriter, TuningLogError, Workload, best_record,
                            machine_fingerprint, make_record, read_log, records_for)

SIZES = {"M": 24, "N": 40, "K": 16}
MATMUL = Workload.make("std", "matmul", SIZES)
# Configurations of std matmul from the host's own facts: its template requires
# ti * tj <= lanes * (registers - 2), and tj's choices are multiples of lanes.
HOST = tdsl.Target()
LANES, REGISTERS = HOST.lanes, HOST.registers
SLOW = {"ti": 4, "tj": LANES}               # legal on any host
FAST = {"ti": 6, "tj": 2 * LANES}           # legal on any host with 14+ free registers
# legal where vectors and registers are twice the host's (AVX-512 beside AVX2), never here:
# 36 vectors of accumulators
BIG = {"ti": 6, "tj": 6 * LANES}
BIG_FACTS = {**HOST.facts(), "lanes": 2 * LANES, "registers": 2 * REGISTERS,
             "isa": sorted({*HOST.facts()["isa"], "avx512f", "avx512bw"})}


def write(path, records):
    with LogWriter(path) as w:
        for r in records:
            w.write(r)


def test_records_round_trip_and_carry_what_identifies_them(tmp_path):
    path = tmp_path / "t.jsonl"
    rec = make_record(MATMUL, {"ti": 8, "tj": 32}, "ok", 1e-3, 2.0)
    write(path, [rec])
    [back] = read_log(path)
    assert back == json.loads(json.dumps(rec))
    assert back["workload"]["machine"] == machine_fingerprint()
    facts = back["workload"]["target_facts"]       # the target it was measured for
    assert facts == HOST.facts() and (facts["lanes"], facts["registers"]) == (LANES, REGISTERS)
    assert back["tdsl"] == tdsl.__version__
    assert Workload.from_json(back["workload"]) == MATMUL


def test_truncated_last_line_is_skipped_and_cut_before_appending(tmp_path):
    path = tmp_path / "t.jsonl"
    write(path, [make_record(MATMUL, {"ti": 4}, "ok", 2e-3, 1.0)])
    with open(path, "a") as f:
        f.write('{"workload": {"file": "std", "op": "matm')         # killed mid-record
    assert len(read_log(path)) == 1
    write(path, [make_record(MATMUL, {"ti": 8}, "ok", 1e-3, 2.0)])
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)


def test_corrupt_line_in_the_middle_warns_and_keeps_the_rest(tmp_path):
    path = tmp_path / "t.jsonl"
    good = json.dumps(make_record(MATMUL, {"ti": 4}, "ok", 2e-3, 1.0))
    path.write_text(good + "\n" + "not json\n" + good + "\n")
    with pytest.warns(UserWarning, match="skipped 1 malformed"):
        assert len(read_log(path)) == 2


@pytest.mark.parametrize("config", ['"4"', "4", "[1, 2]", '{"ti": [4]}', "null"])
def test_a_record_whose_config_is_not_a_configuration_is_skipped(tmp_path, config):
    path = tmp_path / "t.jsonl"
    good = json.dumps(make_record(MATMUL, {"ti": 4}, "ok", 2e-3, 1.0))
    bad = good.replace('"config": {"ti": 4}', f'"config": {config}')
    path.write_text(bad + "\n" + good + "\n")
    with pytest.warns(UserWarning, match="skipped 1 malformed"):
        assert len(read_log(path)) == 1


def test_a_record_of_a_renamed_knob_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "t.jsonl"
    write(path, [make_record(MATMUL, {"tile_i": 6, "tj": 2 * LANES}, "ok", 1e-4, 3.0),
                 make_record(MATMUL, SLOW, "ok", 3e-3, 1.0)])
    op = tdsl.load("std")["matmul"]
    with pytest.warns(UserWarning, match="skipped 1 record"):
        assert op.tuned_config(path, SIZES) == SLOW


def test_missing_log_reads_as_empty(tmp_path):
    assert read_log(tmp_path / "none.jsonl") == []


def test_best_record_is_the_fastest_ok_one_of_the_workload_and_machine(tmp_path):
    other = Workload.make("std", "matmul", {"M": 8, "N": 8, "K": 8})
    recs = [make_record(MATMUL, {"ti": 4, "tj": 16}, "ok", 3e-3, 1.0),
            make_record(MATMUL, {"ti": 8, "tj": 32}, "ok", 1e-3, 3.0),
            make_record(MATMUL, {"ti": 12, "tj": 64}, "crash", None, None, "SIGSEGV"),
            make_record(other, {"ti": 6, "tj": 48}, "ok", 1e-6, 9.0)]
    elsewhere = make_record(MATMUL, {"ti": 6, "tj": 16}, "ok", 1e-9, 99.0)
    elsewhere["workload"]["machine"] = "another machine"
    recs.append(elsewhere)
    assert best_record(recs, MATMUL)["config"] == {"ti": 8, "tj": 32}
    assert len(records_for(recs, MATMUL)) == 4
    assert best_record(recs, Workload.make("std", "dense", SIZES)) is None


def test_build_applies_the_best_configuration(tmp_path):
    path = tmp_path / "t.jsonl"
    write(path, [make_record(MATMUL, SLOW, "ok", 3e-3, 1.0),
                 make_record(MATMUL, FAST, "ok", 1e-3, 3.0)])
    op = tdsl.load("std")["matmul"]
    assert op.tuned_config(path, SIZES) == FAST
    kernel = op.build(shapes=SIZES, tuning_log=path)
    tuned = op.build(shapes=SIZES, config=FAST)
    assert kernel.source == tuned.source
    a = np.ones((24, 16), np.float32)
    b = np.ones((16, 40), np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b)


def test_build_without_a_matching_record_warns_and_uses_defaults(tmp_path):
    path = tmp_path / "t.jsonl"
    write(path, [make_record(MATMUL, {"ti": 4, "tj": 16}, "ok", 3e-3, 1.0)])
    op = tdsl.load("std")["matmul"]
    with pytest.warns(UserWarning, match="default knobs"):
        kernel = op.build(shapes={"M": 8, "N": 8, "K": 8}, tuning_log=path)
    assert kernel.source == op.build(shapes={"M": 8, "N": 8, "K": 8}).source


def test_cli_build_takes_a_tuning_log(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    write(path, [make_record(MATMUL, FAST, "ok", 1e-3, 3.0)])
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["build", "std", "--op", "matmul", "--shape", "M=24,N=40,K=16",
                     "--tuning-log", str(path), "-o", str(out)]) == 0
    source = (out / "matmul.c").read_text()
    op = tdsl.load("std")["matmul"]
    assert source == op.build(shapes=SIZES, config=FAST).source


SCALE = """op scale(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] * 2.0 }
schedule scale for cpu { knob t in [2, 4, 8] = 4
    io, ii = split(Y.i, t) }
"""


def test_records_are_keyed_by_the_ops_content_not_its_path(tmp_path):
    """A copied project finds its records; an edited op does not find the old ones."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "s.tdsl").write_text(SCALE)
    (tmp_path / "b" / "s.tdsl").write_text(SCALE)
    mine = tdsl.load(tmp_path / "a" / "s.tdsl")["scale"]
    workload = Workload.make(tmp_path / "a" / "s.tdsl", "scale", {"N": 64}, {}, "c", None,
                             mine.content_digest())
    log = tmp_path / "t.jsonl"
    write(log, [make_record(workload, {"t": 8}, "ok", 1e-6, 1.0)])
    copied = tdsl.load(tmp_path / "b" / "s.tdsl")["scale"]
    assert copied.tuned_config(log, {"N": 64}) == {"t": 8}
    (tmp_path / "a" / "s.tdsl").write_text(SCALE.replace("2.0", "3.0"))
    edited = tdsl.load(tmp_path / "a" / "s.tdsl")["scale"]
    with pytest.warns(UserWarning, match="no successful record"):
        assert edited.tuned_config(log, {"N": 64}) is None


# ------------------------------------------------------------- logs shared between machines

def elsewhere(config, seconds, facts=BIG_FACTS, target="c", machine="another machine"):
    """A record of MATMUL measured on another machine, for a target with ``facts``."""
    workload = Workload.make("std", "matmul", SIZES, {}, target)
    rec = make_record(workload, config, "ok", seconds, 1.0, machine=machine, facts=facts)
    if facts is None:                       # a record made before records carried facts
        del rec["workload"]["target_facts"]
    return rec


def tuned_with_warnings(path, **kw):
    op = tdsl.stdlib["matmul"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = op.tuned_config(path, SIZES, **kw)
    return config, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def test_a_shared_log_builds_here_with_the_record_legal_here(tmp_path):
    """The issue's case: a log holding an AVX-512 machine's fastest record, whose tile this
    host's registers cannot hold, and this host's own record. The build takes the legal one
    and warns once, counting what it skipped and why."""
    path = tmp_path / "shared.jsonl"
    write(path, [elsewhere(BIG, 1e-5), make_record(MATMUL, FAST, "ok", 1e-3, 3.0)])
    config, said = tuned_with_warnings(path)
    assert config == FAST
    assert len(said) == 1 and "skipped 1 record(s)" in said[0] and "illegal" in said[0]
    op = tdsl.stdlib["matmul"]
    with pytest.warns(UserWarning, match="skipped 1 record"):
        kernel = op.build(shapes=SIZES, tuning_log=path)
    assert kernel.source == op.build(shapes=SIZES, config=FAST).source
    a = np.ones((24, 16), np.float32)
    b = np.ones((16, 40), np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b)


def test_a_log_from_another_machine_alone_applies_its_legal_record(tmp_path):
    path = tmp_path / "theirs.jsonl"
    write(path, [elsewhere(BIG, 1e-5), elsewhere(FAST, 1e-4), elsewhere(SLOW, 1e-3)])
    config, said = tuned_with_warnings(path)
    assert config == FAST
    assert len(said) == 1
    assert "skipped 1 record(s)" in said[0] and "another machine" in said[0]


def test_records_of_this_target_are_preferred(tmp_path):
    """A faster record measured for another target, legal here too, loses to this target's."""
    path = tmp_path / "t.jsonl"
    write(path, [elsewhere(FAST, 1e-6), make_record(MATMUL, SLOW, "ok", 1e-3, 1.0)])
    config, said = tuned_with_warnings(path)
    assert config == SLOW
    assert len(said) == 1 and "1 measured for another target" in said[0]


def test_records_for_another_target_string_are_skipped(tmp_path):
    """A record for ``c -march=x86-64-v4`` does not configure a build for ``c``, even where
    it would be legal, nor one of another architecture."""
    path = tmp_path / "t.jsonl"
    write(path, [elsewhere(SLOW, 1e-6, target="c -march=x86-64-v4", machine=machine_fingerprint()),
                 elsewhere(SLOW, 1e-6, facts={**HOST.facts(), "arch": "riscv64"})])
    config, said = tuned_with_warnings(path)
    assert config is None
    assert len(said) == 1 and "default knobs" in said[0]
    assert "2 measured for another target" in said[0]


def test_old_records_without_facts_still_apply_when_legal(tmp_path):
    here = elsewhere(FAST, 1e-3, facts=None, machine=machine_fingerprint())
    path = tmp_path / "old.jsonl"
    write(path, [here])
    assert tuned_with_warnings(path) == (FAST, [])           # this machine's: as before
    write(path, [elsewhere(BIG, 1e-6, facts=None), elsewhere(SLOW, 1e-5, facts=None)])
    config, said = tuned_with_warnings(path)
    assert config == FAST                         # this machine's first, then the rest
    assert len(said) == 1 and "illegal" in said[0]
    path.unlink()
    write(path, [elsewhere(BIG, 1e-6, facts=None), elsewhere(SLOW, 1e-5, facts=None)])
    config, said = tuned_with_warnings(path)
    assert config == SLOW and len(said) == 1 and "older record" in said[0]


def test_a_log_with_only_illegal_records_builds_with_the_defaults(tmp_path):
    path = tmp_path / "t.jsonl"
    write(path, [elsewhere(BIG, 1e-6), make_record(MATMUL, BIG, "ok", 1e-6, 9.0)])
    config, said = tuned_with_warnings(path)
    assert config is None
    assert len(said) == 1 and "default knobs" in said[0] and "2 illegal" in said[0]
    op = tdsl.stdlib["matmul"]
    with pytest.warns(UserWarning, match="default knobs"):
        kernel = op.build(shapes=SIZES, tuning_log=path)
    assert kernel.source == op.build(shapes=SIZES).source


def test_cli_build_takes_a_shared_log(tmp_path, capsys):
    path = tmp_path / "shared.jsonl"
    write(path, [elsewhere(BIG, 1e-5), make_record(MATMUL, FAST, "ok", 1e-3, 3.0)])
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="skipped 1 record") as caught:
        assert main(["build", "std", "--op", "matmul", "--shape", "M=24,N=40,K=16",
                     "--tuning-log", str(path), "-o", str(out)]) == 0
    assert len([w for w in caught if issubclass(w.category, UserWarning)]) == 1
    op = tdsl.stdlib["matmul"]
    assert (out / "matmul.c").read_text() == op.build(shapes=SIZES, config=FAST).source


def test_a_tuning_log_that_does_not_exist_is_an_error(tmp_path, capsys):
    missing = tmp_path / "tune.jsonl"
    op = tdsl.stdlib["matmul"]
    with pytest.raises(TuningLogError, match="does not exist"):
        op.build(shapes=SIZES, tuning_log=missing)
    with pytest.raises(tdsl.TdslError, match="does not exist"):
        op.tuned_config(missing, SIZES)
    with pytest.raises(TuningLogError, match="does not exist"):     # rank-generic: at once
        tdsl.stdlib["relu"].build(tuning_log=missing)
    assert main(["build", "std", "--op", "matmul", "--shape", "M=24,N=40,K=16",
                 "--tuning-log", str(missing), "-o", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert f"error: the tuning log {missing} does not exist" in err
    assert "no successful record" not in err and not (tmp_path / "out" / "matmul.c").exists()


def test_tuning_writes_the_facts_of_the_target_it_measured_for(tmp_path):
    from tdsl.tuner.measure import MeasureResult
    from tdsl.tuner.task import Task
    from tdsl.tuner.tune import tune

    class Fake:
        def measure(self, task, indices):
            return [MeasureResult(i, task.space.config(i), "ok", 1e-3) for i in indices]

        def close(self):
            pass

    log = tmp_path / "t.jsonl"
    v3 = "c -march=x86-64-v3" if HOST.arch == "x86_64" else "c"
    task = Task(Workload.make("std", "matmul", SIZES, {}, str(tdsl.Target(v3))))
    tune(task, trials=2, log=log, measurer=Fake(), compare_numpy=False)
    records = read_log(log)
    assert len(records) == 2
    assert all(r["workload"]["target_facts"] == tdsl.Target(v3).facts() for r in records)
