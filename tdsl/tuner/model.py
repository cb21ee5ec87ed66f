"""The cost model: gradient-boosted trees that rank configurations before they are measured.

AutoTVM's xgboost model in scikit-learn: ``fit(xs, ys)`` / ``predict(xs)`` over the feature
vectors of `config_features`. What matters is the order of the predictions (the search keeps
the configurations the model ranks highest), so the target is each task's throughput divided
by that task's best (failures count 0): it puts the trees' capacity where the fast
configurations are, and makes tasks of different speeds comparable, which transfer learning
needs. `kendall_tau` and `top_k_recall` say how well the model ranks configurations it has
not seen.

`config_features` is the loop-IR features of `tdsl.tuner.features` followed by the knob
values themselves (numbers as they are, other choices by position), in a fixed number of
slots so that vectors of different templates have one length.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import kendalltau
from sklearn.ensemble import GradientBoostingRegressor

from .features import schedule_features
from .space import ConfigSpace

KNOB_SLOTS = 8           # knob values appended to the loop-IR features (templates have fewer)


def knob_features(space: ConfigSpace, index: int) -> np.ndarray:
    out = np.zeros(KNOB_SLOTS)
    for slot, (name, value) in enumerate(list(space.config(index).items())[:KNOB_SLOTS]):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            value = space.choices[space.names.index(name)].index(value)
        out[slot] = float(value)
    return out


def config_features(task, index: int) -> np.ndarray:
    """The feature vector of configuration ``index`` of ``task`` (a `Task`)."""
    config = task.space.config(index)
    return np.concatenate([schedule_features(task.template, config, task.shapes,
                                             task.target),
                           knob_features(task.space, index)])


def normalise(ys) -> np.ndarray:
    """Throughputs over their best (failures, given as 0 or None, stay 0)."""
    ys = np.array([0.0 if y is None else float(y) for y in ys])
    best = ys.max() if len(ys) else 0.0
    return ys / best if best > 0 else ys


class CostModel:
    """Gradient-boosted regression trees over normalised throughput."""

    def __init__(self, seed: int = 0, n_estimators: int = 150, max_depth: int = 4,
                 learning_rate: float = 0.1):
        self._params = dict(n_estimators=n_estimators, max_depth=max_depth,
                            learning_rate=learning_rate, subsample=0.9, random_state=seed)
        self._trees: GradientBoostingRegressor | None = None

    @property
    def trained(self) -> bool:
        return self._trees is not None

    def fit(self, xs, ys, weights=None) -> "CostModel":
        """Fit on feature rows ``xs`` and targets ``ys`` already normalised per task."""
        xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
        if len(ys) < 2 or np.ptp(ys) == 0:
            return self                     # nothing to learn an order from yet
        trees = GradientBoostingRegressor(**self._params)
        trees.fit(xs, ys, sample_weight=weights)
        self._trees = trees
        return self

    def predict(self, xs) -> np.ndarray:
        xs = np.asarray(xs, dtype=float)
        if self._trees is None:
            return np.zeros(len(xs))
        return self._trees.predict(xs)


def kendall_tau(predicted, measured) -> float:
    """Rank agreement in [-1, 1] (0 where either side is constant)."""
    if len(measured) < 2 or np.ptp(predicted) == 0 or np.ptp(measured) == 0:
        return 0.0
    tau = kendalltau(predicted, measured).statistic
    return 0.0 if np.isnan(tau) else float(tau)


def top_k_recall(predicted, measured, k: int) -> float:
    """Of the ``k`` truly fastest, the share that the model also puts in its top ``k``."""
    k = min(k, len(measured))
    if k == 0:
        return 0.0
    top_true = set(np.argsort(-np.asarray(measured), kind="stable")[:k])
    top_pred = set(np.argsort(-np.asarray(predicted), kind="stable")[:k])
    return len(top_true & top_pred) / k
