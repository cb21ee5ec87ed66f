"""Transfer learning: earlier logs as training data that warms a new task's cost model.

Features of the loop program carry over between tasks — the same op at other sizes, or
other ops — where raw timings do not, so each earlier workload's throughputs are normalised
by its own best (as the model's targets always are) before they join the training set.
Records measured on another machine are left out: what is fast there need not be here.
"""
from __future__ import annotations

import warnings
from collections import defaultdict

import numpy as np

from ..errors import TdslError
from .log import Workload, machine_fingerprint, read_log, record_machine
from .model import config_features, normalise
from .task import Task


def history_from_logs(paths, exclude: Workload | None = None, limit_per_workload: int = 512):
    """``(xs, ys)`` from the records of every workload in ``paths`` but ``exclude`` (the task
    being tuned, whose own records are resumed instead); None when there are none."""
    if isinstance(paths, (str, bytes)) or not hasattr(paths, "__iter__"):
        paths = [paths]
    machine = machine_fingerprint()
    groups: dict[Workload, dict] = defaultdict(dict)
    for path in paths:
        for rec in read_log(path):
            if record_machine(rec) != machine:
                continue
            try:
                w = Workload.from_json(rec["workload"])
            except (KeyError, TypeError, ValueError):
                continue
            if w != exclude:
                key = tuple(sorted(rec["config"].items()))
                ok = rec.get("status") == "ok"
                groups[w].setdefault(key, rec.get("gflops") if ok else None)
    xs, ys = [], []
    for w, configs in groups.items():
        try:
            task = Task(w)
        except (TdslError, OSError) as e:
            warnings.warn(f"transfer: skipping {w}: {e}", stacklevel=2)
            continue
        rows, throughputs = [], []
        for key, gflops in list(configs.items())[:limit_per_workload]:
            try:
                index = task.space.index(dict(key))
                rows.append(config_features(task, index))
            except TdslError:
                continue             # a configuration of another version of the template
            throughputs.append(gflops)
        if rows:
            xs.extend(rows)
            ys.extend(normalise(throughputs))
    if not xs:
        return None
    return np.array(xs), np.array(ys)
