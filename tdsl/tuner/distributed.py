"""Measurement spread over machines with dask.distributed (``pip install 'tdsl[distributed]'``).

An existing engine rather than a home-made RPC: the scheduler places work, ships the
template and the task's data, and recovers from a lost worker. A batch is cut into one
chunk per dask worker; on its machine a chunk is measured exactly as `LocalMeasurer` does
on this one (parallel builds, then isolated timed runs in a subprocess, so a segfault or a
hang never takes the dask worker down), by a measurer each worker process keeps.

Timings are only as good as the machine is quiet: run one dask worker process per machine,
with one thread (``dask worker ADDRESS --nworkers 1 --nthreads 1``), and nothing else
there. Within a worker process, measurements are serialised by a lock whatever its threads.
"""
from __future__ import annotations

import threading
from pathlib import Path

from .measure import LocalMeasurer, MeasureResult, data_key, save_task_data


def _distributed():
    try:
        import distributed
    except ImportError:
        raise ImportError("measuring on a dask cluster needs dask.distributed: "
                          "pip install 'tdsl[distributed]'") from None
    return distributed


class DaskMeasurer:
    """`LocalMeasurer`'s interface over a dask cluster: ``client_or_address`` is a
    `distributed.Client` (left open at `close`) or a scheduler address such as
    ``"tcp://10.0.0.5:8786"`` (a client made here, closed at `close`). The other
    arguments are `LocalMeasurer`'s, used on every worker (``build_workers=None``: each
    machine's own core count)."""

    def __init__(self, client_or_address, timeout: float = 10.0, build_timeout: float = 120.0,
                 min_seconds: float = 0.2, repeats: int = 5, rtol: float = 1e-3,
                 atol: float = 1e-3, seed: int = 0, build_workers: int | None = None):
        distributed = _distributed()
        self._own = not isinstance(client_or_address, distributed.Client)
        self.client = distributed.Client(client_or_address) if self._own else client_or_address
        self.seed = seed
        self.settings = dict(build_workers=build_workers, timeout=timeout,
                             build_timeout=build_timeout, min_seconds=min_seconds,
                             repeats=repeats, rtol=rtol, atol=atol, seed=seed)
        self._data: dict[str, object] = {}    # the current task's data, scattered once

    def __enter__(self) -> "DaskMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def measure(self, task, indices: list[int]) -> list[MeasureResult]:
        configs = list({i: task.space.config(i) for i in indices}.items())
        key = data_key(task, self.seed)
        if key not in self._data:
            inputs = task.inputs(self.seed)
            data = (inputs, task.reference(inputs))
            # a list of one, or scatter would send the tuple's items as separate objects
            self._data = {key: self.client.scatter([data], broadcast=True)[0]}
        n = max(1, len(self.client.nthreads()))      # one chunk per worker
        chunks = [dict(configs[k::n]) for k in range(n) if configs[k::n]]
        futures = [self.client.submit(measure_chunk, task.template, task.shapes, chunk, key,
                                      self._data[key], self.settings, str(task.target),
                                      pure=False)
                   for chunk in chunks]
        try:
            done = {}
            for part in self.client.gather(futures):
                done.update(part)
        except BaseException:
            self.client.cancel(futures)
            raise
        return [done[i] for i in indices]

    def close(self) -> None:
        self._data.clear()
        if self._own:
            self.client.close()


# ------------------------------------------------------------------ on a dask worker

_LOCK = threading.Lock()
_MEASURER: dict[tuple, LocalMeasurer] = {}   # at most one, for the settings last used


def measure_chunk(template, shapes: dict, configs: dict[int, dict], key: str, data,
                  settings: dict, target: str = "c") -> dict[int, MeasureResult]:
    """Measure ``configs`` on this machine (a dask task) for ``target``, a string resolved
    here (``c`` is this worker's own CPU). The measurer and its worker processes stay for
    the next chunk; they are shut down when this process exits."""
    with _LOCK:
        wanted = tuple(sorted(settings.items()))
        if wanted not in _MEASURER:
            for old in _MEASURER.values():
                old.close()
            _MEASURER.clear()
            _MEASURER[wanted] = LocalMeasurer(**settings)
        m = _MEASURER[wanted]
        directory = save_task_data(Path(m.tmp) / key, *data)
        return m.measure_configs(template, shapes, configs, directory, target)
