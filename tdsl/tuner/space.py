"""The configuration space of a schedule template: its knobs and their constraints.

A configuration sets every knob of the template to one of its choices; it is valid when it
satisfies every ``require`` of the template. Configurations are numbered in mixed radix over
the knobs in declaration order (the first knob varies slowest), so an index is a compact,
stable name for one, and two spaces of the same template number configurations alike:

    index == sum(choice_index[k] * prod(len(choices[j]) for j after k))

The space enumerates, samples and walks (one knob changed at a time, the move of the
simulated annealing in `tdsl.tuner.search`).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import ScheduleError
from ..lowering.schedule import KnobDecl, Schedule, knob_value

# Past this many raw combinations the space is not enumerated to count or list its valid
# configurations; sampling and walks still work.
ENUMERATION_LIMIT = 1 << 20


class ConfigSpace:
    def __init__(self, knobs: tuple[KnobDecl, ...], constraints: tuple = ()):
        self.knobs = tuple(knobs)
        self.constraints = tuple(constraints)
        self.names = [k.name for k in self.knobs]
        self.choices = [tuple(k.choices) for k in self.knobs]
        self.radix = [len(c) for c in self.choices]
        self.total = math.prod(self.radix)        # every combination, valid or not
        self._valid_cache: dict[int, bool] = {}

    @staticmethod
    def from_schedule(schedule: Schedule) -> "ConfigSpace":
        return ConfigSpace(schedule.knobs, schedule.constraints)

    # ------------------------------------------------------------- indices and configurations

    def config(self, index: int) -> dict:
        """The configuration numbered ``index``."""
        if not 0 <= index < self.total:
            raise IndexError(f"configuration {index} is outside the space (0..{self.total - 1})")
        out = {}
        for name, choices, r in zip(reversed(self.names), reversed(self.choices),
                                    reversed(self.radix)):
            index, digit = divmod(index, r)
            out[name] = choices[digit]
        return {n: out[n] for n in self.names}

    def index(self, config: dict) -> int:
        """The number of ``config`` (knobs it leaves out take their defaults)."""
        unknown = set(config) - set(self.names)
        if unknown:
            raise ScheduleError(f"the configuration sets {', '.join(sorted(unknown))}, which "
                                f"the schedule does not declare; knobs are: "
                                f"{', '.join(self.names) or '(none)'}")
        index = 0
        for k, choices, r in zip(self.knobs, self.choices, self.radix):
            value = config.get(k.name, k.default)
            if value not in choices:
                raise ScheduleError(f"knob {k.name} has no choice {value!r}; choices: "
                                    f"{list(choices)}")
            index = index * r + choices.index(value)
        return index

    def default_index(self) -> int:
        return self.index({})

    def is_valid(self, index: int) -> bool:
        """Whether configuration ``index`` satisfies every constraint."""
        if not self.constraints:
            return True
        ok = self._valid_cache.get(index)
        if ok is None:
            values = self.config(index)
            ok = all(knob_value(c, values) for c in self.constraints)
            self._valid_cache[index] = ok
        return ok

    # ------------------------------------------------------------------ size and listing

    @functools.cached_property
    def _valid(self) -> tuple[int, ...]:
        if self.total > ENUMERATION_LIMIT:
            raise ScheduleError(f"the space has {self.total} raw configurations: too many to "
                                f"list; sample it instead")
        return tuple(i for i in range(self.total) if self.is_valid(i))

    def valid_indices(self) -> list[int]:
        """Every valid configuration, in index order (enumerates once: small spaces only)."""
        return list(self._valid)

    def __len__(self) -> int:
        """The number of valid configurations (the raw count for a space too big to list)."""
        if not self.constraints or self.total > ENUMERATION_LIMIT:
            return self.total
        return len(self._valid)

    def describe(self) -> str:
        """``ti in [4, 6, 8] x tj in [16, 32]: 6 configurations``"""
        knobs = " x ".join(f"{n} in {list(c)}" for n, c in zip(self.names, self.choices))
        n = len(self)
        return f"{knobs or '(no knobs)'}: {n} configuration{'s' * (n != 1)}"

    # ------------------------------------------------------------------ sampling and walks

    def sample(self, rng: np.random.Generator, n: int, exclude=()) -> list[int]:
        """Up to ``n`` distinct valid configurations not in ``exclude``, uniformly."""
        exclude = set(exclude)
        if self.total <= 4 * (n + len(exclude)) and self.total <= ENUMERATION_LIMIT:
            pool = [i for i in self.valid_indices() if i not in exclude]
            if len(pool) <= n:
                return pool
            return [pool[j] for j in rng.choice(len(pool), size=n, replace=False)]
        picked: list[int] = []
        seen = set(exclude)
        for _ in range(64 * n):           # rejection sampling; a sparse space gives fewer
            i = int(rng.integers(self.total))
            if i not in seen:
                seen.add(i)
                if self.is_valid(i):
                    picked.append(i)
                    if len(picked) == n:
                        break
        return picked

    def neighbour(self, index: int, rng: np.random.Generator, tries: int = 16) -> int:
        """A valid configuration that differs from ``index`` in one knob (``index`` itself
        when none is found in ``tries`` draws, e.g. a space of one configuration)."""
        movable = [k for k, r in enumerate(self.radix) if r > 1]
        if not movable:
            return index
        digits = self.digits(index)
        for _ in range(tries):
            k = movable[int(rng.integers(len(movable)))]
            step = int(rng.integers(1, self.radix[k]))
            moved = list(digits)
            moved[k] = (digits[k] + step) % self.radix[k]
            j = self._from_digits(moved)
            if self.is_valid(j):
                return j
        return index

    def digits(self, index: int) -> list[int]:
        """The choice position of each knob in configuration ``index``."""
        digits = []
        for r in reversed(self.radix):
            index, d = divmod(index, r)
            digits.append(d)
        return digits[::-1]

    def _from_digits(self, digits) -> int:
        index = 0
        for d, r in zip(digits, self.radix):
            index = index * r + d
        return index
