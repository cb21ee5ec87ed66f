"""Tuning logs: append, tolerate a killed writer, pick the best record, apply it to a build."""
import json
import warnings

import numpy as np
import pytest

import tdsl
from tdsl.cli import main
from tdsl.tuner.log import (LogWriter, Workload, best_record, machine_fingerprint,
                            make_record, read_log, records_for)

SIZES = {"M": 24, "N": 40, "K": 16}
MATMUL = Workload.make("std", "matmul", SIZES)


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
    write(path, [make_record(MATMUL, {"tile_i": 6, "tj": 48}, "ok", 1e-4, 3.0),
                 make_record(MATMUL, {"ti": 4, "tj": 16}, "ok", 3e-3, 1.0)])
    op = tdsl.load("std")["matmul"]
    with pytest.warns(UserWarning, match="skipped 1 record"):
        assert op.tuned_config(path, SIZES) == {"ti": 4, "tj": 16}


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
    write(path, [make_record(MATMUL, {"ti": 4, "tj": 16}, "ok", 3e-3, 1.0),
                 make_record(MATMUL, {"ti": 6, "tj": 48}, "ok", 1e-3, 3.0)])
    op = tdsl.load("std")["matmul"]
    assert op.tuned_config(path, SIZES) == {"ti": 6, "tj": 48}
    kernel = op.build(shapes=SIZES, tuning_log=path)
    tuned = op.build(shapes=SIZES, config={"ti": 6, "tj": 48})
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
    write(path, [make_record(MATMUL, {"ti": 6, "tj": 48}, "ok", 1e-3, 3.0)])
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["build", "std", "--op", "matmul", "--shape", "M=24,N=40,K=16",
                     "--tuning-log", str(path), "-o", str(out)]) == 0
    source = (out / "matmul.c").read_text()
    op = tdsl.load("std")["matmul"]
    assert source == op.build(shapes=SIZES, config={"ti": 6, "tj": 48}).source


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
