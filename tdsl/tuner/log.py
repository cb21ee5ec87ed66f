"""Tuning logs: JSON lines, one record per measured configuration.

A record says what was measured and on what, so that a log can be resumed, applied at build
time and shared between machines without mixing them up:

    {"workload": {"file": "std", "op": "matmul", "shapes": {"K": 1024, ...}, "attrs": {},
                  "target": "c", "schedule": null, "content": "9b1c...",
                  "machine": "Intel(R) Xeon(R) ... x2 x86_64 3f2a...",
                  "target_facts": {"kind": "c", "arch": "x86_64", "lanes": 16,
                                   "registers": 32, "l1": 49152, "l2": 2097152,
                                   "march": ["-march=native"], "isa": ["avx", "avx2", ...]}},
     "config": {"ti": 8, "tj": 32},
     "status": "ok", "seconds": 0.00129, "gflops": 1664.2, "message": "",
     "time": "2026-11-29T23:50:01Z", "tdsl": "0.1.0"}

``target`` is the target as written (``"c"`` is whichever host measured it); ``target_facts``
(`Target.facts`) what it was on the measuring machine: what a schedule's knobs and
``require``s read, and the ISA. A build picks its record with `select_record`: the fastest
one legal for the build's target, preferring records measured for that same target (records
made before ``target_facts`` count as such when measured on this machine).

Records are appended and flushed one at a time, so a killed tuner loses at most the record
being written; a reader skips a truncated last line, and a writer first cuts such a line off
so that the next record starts on a line of its own. This module is a leaf: `tdsl.api`
imports it to apply a log, and it imports nothing of the pipeline (the unparser only, for
`content_digest`, and `tdsl.target` for the facts of a target).
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
from ..errors import TdslError
from ..frontend import unparse
from ..emit_c.build import machine_identity
from ..target import as_target


class TuningLogError(TdslError):
    """A tuning log named for a build that is not there."""


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
        return isinstance(other, Workload) and self.target == other.target and \
            self.same_but_target(other)

    def same_but_target(self, other: "Workload") -> bool:
        """The same op, sizes, attributes and schedule, whatever the target."""
        if self._key()[:3] + self._key()[4:] != other._key()[:3] + other._key()[4:]:
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


def record_facts(record: dict) -> dict | None:
    """The facts of the target a record was measured for (None in records made before they
    were written)."""
    workload = record.get("workload")
    facts = workload.get("target_facts") if isinstance(workload, dict) else None
    return facts if isinstance(facts, dict) else None


@functools.lru_cache(maxsize=64)
def _facts_json(target: str) -> str | None:
    try:
        return json.dumps(as_target(target).facts())
    except TdslError:                   # e.g. a cross compiler not installed here
        return None


def target_facts(target) -> dict | None:
    """`Target.facts` of ``target`` (a string or a `Target`) as resolved on this machine."""
    if not isinstance(target, str):
        return target.facts()
    text = _facts_json(target)
    return None if text is None else json.loads(text)


# The facts that make two targets one for tuning: what the generated code and a schedule's
# legality depend on. Cache sizes are left out: machines of one ISA differ in them, and a
# record is checked against the build's own target's constants anyway.
SAME_TARGET_FACTS = ("kind", "arch", "lanes", "registers", "isa", "warp", "max_threads",
                     "shared_bytes")


def same_target(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in SAME_TARGET_FACTS)


def make_record(workload: Workload, config: dict, status: str, seconds: float | None,
                gflops: float | None, message: str = "", machine: str | None = None,
                facts: dict | None = None) -> dict:
    """A log record; ``machine`` is the measuring machine's fingerprint and ``facts`` those
    of the target there (`Target.facts`): this machine's when None (a measurement made
    elsewhere, e.g. on a dask worker, names its own)."""
    facts = facts if facts is not None else target_facts(workload.target)
    return {"workload": {**workload.to_json(), "machine": machine or machine_fingerprint(),
                         "target_facts": facts},
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


def require_log(path) -> Path:
    """``path`` as a `Path`, or a `TuningLogError` when no file is there: a build given a
    log that is not there says so, rather than building with the defaults."""
    path = Path(path)
    if not path.is_file():
        what = "is a directory, not a tuning log" if path.is_dir() else "does not exist"
        raise TuningLogError(f"the tuning log {path} {what}",
                             hint="give the file `tdsl tune --log` wrote (tune.jsonl by "
                                  "default)")
    return path


@dataclass
class Selection:
    """What `select_record` chose (``record``, None when nothing applies) and why it passed
    over the others: ``skipped`` maps a reason to [count, an example]; ``foreign`` when the
    record chosen was measured for the build's target as another machine resolved it."""
    record: dict | None
    skipped: dict
    foreign: bool = False
    target: str = "c"

    def warning(self, log, workload: Workload) -> str | None:
        """The one warning a build gives for this choice (None: nothing to say)."""
        parts = []
        if self.skipped:
            n = sum(count for count, _ in self.skipped.values())
            of = f" of {workload}" if self.record is not None else ""
            parts.append(f"skipped {n} record(s){of}: " + "; ".join(
                f"{count} {reason}" + (f" ({example})" if example else "")
                for reason, (count, example) in self.skipped.items()))
        if self.record is None:
            head = f"{log} has no successful record for {workload} that is legal here: " \
                   "building with the schedule's default knobs"
            return head + (f" ({parts[0]})" if parts else "")
        if self.foreign:
            parts.append(f"using one measured for {self.target} on another machine "
                         f"({_describe(record_facts(self.record), None)}); tune on this "
                         "one for its own best")
        return f"{log}: " + "; ".join(parts) if parts else None


def select_record(records, workload: Workload, facts: dict, check=None,
                  machine: str | None = None) -> Selection:
    """The record a build of ``workload`` for a target with ``facts`` (`Target.facts`)
    applies: the fastest successful one whose configuration ``check`` passes, from the
    first of these that has one:

    1. records measured for this target: the same facts (records without facts: the same
       target string, measured on this machine), this machine's first;
    2. records of the same target string measured elsewhere (``c`` on another host), with
       other or unknown facts.

    Records for other targets are skipped, and so are those ``check(config)`` refuses: it
    returns None, or ``(reason, example)`` saying why the configuration cannot apply here
    (a broken ``require``, a renamed knob). A log shared between machines thus never breaks
    a build: at worst the defaults apply."""
    machine = machine_fingerprint() if machine is None else machine
    tiers: tuple[list, list] = ([], [])
    skipped: dict[str, list] = {}

    def skip(reason, example=None):
        skipped.setdefault(reason, [0, example])[0] += 1

    for r in records:
        seconds = r.get("seconds")
        if r.get("status") != "ok" or not isinstance(seconds, (int, float)) or \
                isinstance(seconds, bool):
            continue
        try:
            w = Workload.from_json(r["workload"])
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        if not w.same_but_target(workload):
            continue
        theirs, here = record_facts(r), record_machine(r) == machine
        if theirs is not None and same_target(theirs, facts) or \
                theirs is None and w.target == workload.target and here:
            tier = 0
        elif w.target == workload.target and (theirs is None or all(
                theirs.get(k) == facts.get(k) for k in ("kind", "arch"))):
            tier = 1
        else:
            skip("measured for another target", _describe(theirs, facts, w.target))
            continue
        why = check(r["config"]) if check is not None else None
        if why is not None:
            skip(*why)
            continue
        tiers[tier].append((not here, seconds, len(tiers[tier]), r))
    if tiers[0]:
        for *_, r in tiers[1]:
            skip("measured for another target",
                 _describe(record_facts(r), facts, f"{workload.target} on another machine"))
        return Selection(min(tiers[0])[-1], skipped, False, workload.target)
    if tiers[1]:
        return Selection(min(tiers[1])[-1], skipped, True, workload.target)
    return Selection(None, skipped, False, workload.target)


def _describe(theirs: dict | None, ours: dict | None, name: str | None = None) -> str:
    """``c -march=x86-64-v4: 16 lanes, 32 registers, with avx512f, ... (not here)``"""
    head = f"{name}: " if name else ""
    if theirs is None:
        return f"{head}an older record, without its target's facts"
    text = f"{head}{theirs.get('arch')}, {theirs.get('lanes')} lanes, " \
           f"{theirs.get('registers')} registers"
    extra = sorted(set(theirs.get("isa") or ()) - set((ours or {}).get("isa") or ()))
    if ours is not None and extra:
        text += f", with {', '.join(extra[:4])}{', ...' if len(extra) > 4 else ''} " \
                "(not here)"
    return text


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
