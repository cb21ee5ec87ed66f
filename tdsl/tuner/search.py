"""Which configurations to measure next: model-guided search, and random and grid baselines.

Every tuner proposes batches of distinct valid configurations (indices of the task's
`ConfigSpace`) that have not been measured, and learns from `update`:

- `GridTuner`: the configurations in index order (the first knob varies slowest).
- `RandomTuner`: uniform draws without repetition.
- `ModelTuner` (``gbt``): AutoTVM's model-based tuner. After each batch the `CostModel` is
  refit on everything measured (plus, for transfer learning, on earlier tasks' records);
  the next batch is the model's best unmeasured configurations, found by simulated
  annealing in parallel chains (by scoring every configuration when the space is small),
  thinned for diversity, with an ε share of random picks so that a wrong model cannot
  starve parts of the space. Before the model has anything to learn from, it picks at
  random.

The tuners share one interface so that a comparison of them is like for like.
"""
from __future__ import annotations

import heapq

import numpy as np

from .model import CostModel, config_features, kendall_tau, normalise, top_k_recall
from .space import ConfigSpace

TUNERS = ("gbt", "random", "grid")


class Tuner:
    name = "base"

    def __init__(self, space: ConfigSpace, seed: int = 0):
        self.space = space
        self.rng = np.random.default_rng(seed)
        self.measured: dict[int, float] = {}     # index -> throughput (0 for a failure)

    def next_batch(self, n: int) -> list[int]:
        raise NotImplementedError

    def update(self, results: list[tuple[int, float | None]]) -> None:
        """Learn the throughput (None for a failed candidate) of measured configurations."""
        for index, throughput in results:
            self.measured[index] = 0.0 if throughput is None else float(throughput)

    def remaining(self) -> int:
        return len(self.space) - len(self.measured)


class GridTuner(Tuner):
    name = "grid"

    def __init__(self, space: ConfigSpace, seed: int = 0):
        super().__init__(space, seed)
        self._next = 0

    def next_batch(self, n: int) -> list[int]:
        out = []
        while len(out) < n and self._next < self.space.total:
            i, self._next = self._next, self._next + 1
            if i not in self.measured and self.space.is_valid(i):
                out.append(i)
        return out


class RandomTuner(Tuner):
    name = "random"

    def next_batch(self, n: int) -> list[int]:
        return self.space.sample(self.rng, n, exclude=self.measured)


class ModelTuner(Tuner):
    """Model-guided search. ``featurize(index) -> vector`` gives a configuration's features
    (`model.config_features` of the task in practice); ``history`` is ``(xs, ys)`` of
    earlier tasks, ys normalised per task, to warm the model (transfer learning)."""
    name = "gbt"

    def __init__(self, space: ConfigSpace, featurize, seed: int = 0, history=None,
                 epsilon: float = 0.1, chains: int = 16, steps: int = 60,
                 exhaustive_limit: int = 1024, min_train: int = 4):
        super().__init__(space, seed)
        self._featurize = featurize
        self._features: dict[int, np.ndarray] = {}
        self.model = CostModel(seed)
        self.history = history
        self.epsilon, self.chains, self.steps = epsilon, chains, steps
        self.exhaustive_limit, self.min_train = exhaustive_limit, min_train
        self.quality: list[tuple[float, float]] = []    # (Kendall tau, top-k recall) per batch
        self._refit()

    def features(self, indices) -> np.ndarray:
        rows = []
        for i in indices:
            if i not in self._features:
                self._features[i] = self._featurize(i)
            rows.append(self._features[i])
        return np.array(rows)

    def next_batch(self, n: int) -> list[int]:
        if not self.model.trained:
            return self.space.sample(self.rng, n, exclude=self.measured)
        n_random = max(1, int(round(self.epsilon * n))) if n > 1 else 0
        candidates = self._best_predicted(3 * n)
        batch = _diverse(candidates, n - n_random, self.space)
        batch += self.space.sample(self.rng, n - len(batch),
                                   exclude=set(self.measured) | set(batch))
        return batch

    def update(self, results) -> None:
        fresh = [(i, t) for i, t in results if i not in self.measured]
        if self.model.trained and len(fresh) >= 2:     # held out: the model never saw them
            pred = self.model.predict(self.features([i for i, _ in fresh]))
            true = [0.0 if t is None else t for _, t in fresh]
            self.quality.append((kendall_tau(pred, true),
                                 top_k_recall(pred, true, max(1, len(fresh) // 4))))
        super().update(results)
        self._refit()

    def _refit(self) -> None:
        xs, ys, ws = [], [], []
        if self.history is not None and len(self.history[1]):
            xs.append(np.asarray(self.history[0]))
            ys.append(np.asarray(self.history[1]))
            ws.append(np.ones(len(self.history[1])))
        if len(self.measured) >= self.min_train:
            indices = list(self.measured)
            xs.append(self.features(indices))
            ys.append(normalise([self.measured[i] for i in indices]))
            # the task's own measurements outweigh the history once there are some
            ws.append(np.full(len(indices), 2.0))
        if xs:
            self.model.fit(np.vstack(xs), np.concatenate(ys), np.concatenate(ws))

    def _best_predicted(self, k: int) -> list[int]:
        """About ``k`` unmeasured configurations with the best predictions, best first."""
        if len(self.space) <= self.exhaustive_limit:
            pool = [i for i in self.space.valid_indices() if i not in self.measured]
            if not pool:
                return []
            scores = self.model.predict(self.features(pool))
            order = np.argsort(-scores, kind="stable")[:k]
            return [pool[j] for j in order]
        return self._anneal(k)

    def _anneal(self, k: int) -> list[int]:
        """Simulated annealing on the model's predictions: ``chains`` walkers move one knob at
        a time, accept a worse point with probability exp(Δ/T) as T cools from 1 to 0, and
        the best unmeasured points any of them visits are kept."""
        starts = sorted(self.measured, key=self.measured.get, reverse=True)[:self.chains // 2]
        starts += self.space.sample(self.rng, self.chains - len(starts))
        points = np.array(starts)
        scores = self.model.predict(self.features(points))
        top: list[tuple[float, int]] = []           # min-heap of (score, index), size <= k
        kept: set[int] = set()

        def keep(i, s):
            if i in self.measured or i in kept:
                return
            if len(top) < k:
                heapq.heappush(top, (s, i))
                kept.add(i)
            elif s > top[0][0]:
                _, out = heapq.heapreplace(top, (s, i))
                kept.discard(out)
                kept.add(i)

        for i, s in zip(points, scores):
            keep(int(i), float(s))
        scale = max(float(np.ptp(scores)), 1e-3)
        for step in range(self.steps):
            temperature = 1.0 - step / self.steps
            moved = np.array([self.space.neighbour(int(i), self.rng) for i in points])
            new_scores = self.model.predict(self.features(moved))
            for i, s in zip(moved, new_scores):
                keep(int(i), float(s))
            delta = (new_scores - scores) / scale
            accept = np.exp(np.minimum(delta, 0) / max(temperature, 1e-3)) > \
                self.rng.random(len(points))
            points = np.where(accept, moved, points)
            scores = np.where(accept, new_scores, scores)
        return [i for _, i in sorted(top, reverse=True)]

    def summary_quality(self) -> tuple[float, float] | None:
        """Mean (Kendall tau, top-k recall) of the model on batches before it saw them."""
        if not self.quality:
            return None
        taus, recalls = zip(*self.quality)
        return float(np.mean(taus)), float(np.mean(recalls))


def _diverse(candidates: list[int], n: int, space: ConfigSpace) -> list[int]:
    """The first ``n`` candidates (best first), skipping one that differs in fewer than two
    knobs from a pick while enough others remain: a batch that probes one spot teaches the
    model less than one that spreads."""
    picked, rest = [], []
    digits = {i: space.digits(i) for i in candidates}
    for i in candidates:
        if len(picked) == n:
            break
        close = any(sum(a != b for a, b in zip(digits[i], digits[j])) < 2 for j in picked)
        (rest if close else picked).append(i)
    return (picked + rest)[:n]


def make_tuner(name: str, task, seed: int = 0, history=None) -> Tuner:
    """A tuner by name (``gbt``, ``random`` or ``grid``) for a `Task`."""
    if name == "gbt":
        return ModelTuner(task.space, lambda i: config_features(task, i), seed, history)
    if name == "random":
        return RandomTuner(task.space, seed)
    if name == "grid":
        return GridTuner(task.space, seed)
    raise ValueError(f"unknown tuner {name!r}; tuners: {', '.join(TUNERS)}")
