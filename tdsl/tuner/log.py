"""Tuning logs: JSON lines, one record per measured configuration.

A record says what was measured and on what, so that a log can be resumed, applied at build
time and shared between machines without mixing them up:

    {"workload": {"file": "std", "op": "matmul", "shapes": {"K": 1024, ...}, "attrs": {},
                  "target": "c", "schedule": null, "content": "9b1c...",
                  "machine": "Intel(R) Xeon(R) ... x2 x86_64 3f2a..."},
     "config": {"ti": 8, "tj": 32},
     "status": "ok", "seconds": 0.00129, "gflops": 1664.2, "message": "",
     "time": "2026-11-29T23:50:01Z", "tdsl": "0.1.0"}

Records are appended and flushed one at a time, so a killed tuner loses at most the record
being written; a reader skips a truncated last line, and a writer first cuts such a line off
so that the next record starts on a line of its own. This module is a leaf: `tdsl.api`
imports it to apply a log, and it imports nothing of the pipeline (the unparser only, for
`content_digest`).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..frontend import unparse
from ..emit_c.build import machine_identity


@dataclass(frozen=True, eq=False)
class Workload:
    """What is tuned. ``content`` is a digest of the op's source and its schedule blocks
    (`content_digest`): workloads with one are equal by content, not by where the file lies,
    so a copied or moved project finds its records. ``file`` is ``"std"`` or the .tdsl
    file's absolute path, to load the op from (and, for records made before digests, what
    they are matched by). Sizes and attributes are sorted (name, value) pairs."""
    file: str
    op: str
    shapes: tuple[tuple[str, int], ...]
    attrs: tuple[tuple[str, object], ...] = ()
    target: str = "c"
    schedule: str | None = None
    content: str = ""

    @staticmethod
    def make(file, op: str, shapes: dict, attrs: dict | None = None, target: str = "c",
             schedule: str | None = None, content: str | None = None) -> "Workload":
        file = "std" if str(file) == "std" else str(Path(file).resolve())
        return Workload(file, op, tuple(sorted((k, int(v)) for k, v in shapes.items())),
                        tuple(sorted((attrs or {}).items())), target, schedule, content or "")

    def _key(self) -> tuple:
        return self.op, self.shapes, self.attrs, self.target, self.schedule

    def __eq__(self, other) -> bool:
        if not isinstance(other, Workload) or self._key() != other._key():
            return False
        if self.content and other.content:
            return self.content == other.content
        return self.file == other.file

    def __hash__(self) -> int:
        return hash(self._key())

    def to_json(self) -> dict:
        return {"file": self.file, "op": self.op, "shapes": dict(self.shapes),
                "attrs": dict(self.attrs), "target": self.target, "schedule": self.schedule,
                "content": self.content}

    @staticmethod
    def from_json(d: dict) -> "Workload":
        return Workload.make(d["file"], d["op"], d["shapes"], d.get("attrs"),
                             d.get("target", "c"), d.get("schedule"), d.get("content"))

    def __str__(self) -> str:
        sizes = ",".join(f"{k}={v}" for k, v in self.shapes)
        attrs = "".join(f" {k}={v}" for k, v in self.attrs)
        return f"{self.op}[{sizes}]{attrs} for {self.target}"


def content_digest(op_def, blocks) -> str:
    """The digest of an op's source (``op_def``, its AST) and of its schedule blocks."""
    text = "\n".join([unparse.item(op_def), *sorted(unparse.item(b) for b in blocks)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def machine_fingerprint() -> str:
    """The CPU model, core count and ISA flags: timings are only comparable on a match."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model} x{os.cpu_count()} {machine_identity()}"


def record_machine(record: dict) -> str | None:
    """The fingerprint of the machine a record was measured on."""
    workload = record.get("workload")
    return workload.get("machine") if isinstance(workload, dict) else None


def make_record(workload: Workload, config: dict, status: str, seconds: float | None,
                gflops: float | None, message: str = "", machine: str | None = None) -> dict:
    """A log record; ``machine`` is the measuring machine's fingerprint (this one's when
    None: a measurement made elsewhere, e.g. on a dask worker, names its own)."""
    return {"workload": {**workload.to_json(), "machine": machine or machine_fingerprint()},
            "config": config, "status": status, "seconds": seconds, "gflops": gflops,
            "message": message, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "tdsl": __version__}


class LogWriter:
    """Appends records to a log, each one flushed to the OS before the next is written."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _cut_partial_line(self.path)
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_log(path) -> list[dict]:
    """Every well-formed record of ``path`` (none when it does not exist). A malformed last
    line (a killed writer) is skipped quietly; malformed lines elsewhere with a warning."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    records, bad = [], 0
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict) or "workload" not in rec or \
                    not _is_config(rec.get("config")):
                raise ValueError("not a tuning record")
            records.append(rec)
        except ValueError:
            if n < len(lines) - 1:          # the last piece has no newline: being written
                bad += 1
    if bad:
        warnings.warn(f"{path}: skipped {bad} malformed line(s)", stacklevel=2)
    return records


def _is_config(config) -> bool:
    """A knob configuration: knob names to numbers, strings or booleans (``knob rows in
    [false, true]``, as conv2d's and matmul's templates have)."""
    return isinstance(config, dict) and all(
        isinstance(k, str) and isinstance(v, (int, float, str, bool)) for k, v in config.items())


def records_for(records, workload: Workload, machine: str | None = None) -> list[dict]:
    """The records of ``workload`` (measured on ``machine`` when given)."""
    out = []
    for r in records:
        try:
            same = Workload.from_json(r["workload"]) == workload
        except (KeyError, TypeError, ValueError):
            continue
        if same and (machine is None or record_machine(r) == machine):
            out.append(r)
    return out


def best_record(records, workload: Workload, machine: str | None = None) -> dict | None:
    """The fastest successful record of ``workload`` on ``machine`` (this one by default)."""
    machine = machine_fingerprint() if machine is None else machine
    ok = [r for r in records_for(records, workload, machine)
          if r.get("status") == "ok" and isinstance(r.get("seconds"), (int, float))]
    return min(ok, key=lambda r: r["seconds"]) if ok else None


def _cut_partial_line(path: Path) -> None:
    """Drop a last line without its newline (a writer killed mid-record)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        data = f.seek(0) or f.read()
        f.truncate(data.rfind(b"\n") + 1)
