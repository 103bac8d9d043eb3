"""What is known of how long a gang runs once admitted: declared by the workload, or learned
from the runtimes of its queue's finished gangs.

Rule: pure data, no clock: the forecasts (forecast.py) and the starvation guard's backfill
reservations (engine.py) read runtimes from here.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

Basis = Literal["declared", "learned", "default"]

# The runtime assumed for a gang of a queue none of whose gangs has finished yet.
DEFAULT_RUNTIME = 3600.0
# How many of a queue's most recent finished gangs the learned runtimes come from.
HISTORY = 500


@dataclass(frozen=True, slots=True)
class Runtime:
    """What is known of how long a gang runs once admitted.

    declared: the most it may run (a maximum runtime it declares, a Job's
        activeDeadlineSeconds): it is stopped then, so both quantiles take it, an upper bound.
    samples: otherwise, the runtimes of finished gangs of its queue, sorted.
    default: with neither, the runtime assumed at both quantiles.
    """

    declared: float | None = None
    samples: tuple[float, ...] = ()
    default: float = DEFAULT_RUNTIME

    @property
    def basis(self) -> Basis:
        if self.declared is not None:
            return "declared"
        return "learned" if self.samples else "default"

    def quantile(self, q: float, ran: float = 0.0) -> float:
        """Its whole runtime at quantile `q` (0 < q < 1), knowing it has already run `ran`
        seconds: learned runtimes shorter than that are ruled out. A gang that has outlived
        every learned runtime (or the default) is taken to have a heavy tail (Pareto, index
        1): at quantile q it runs ran / (1 - q) in all, twice as long as it has at the median."""
        if self.declared is not None:
            return max(self.declared, ran)
        samples = self.samples or (self.default,)
        longer = bisect.bisect_right(samples, ran)
        if longer == len(samples):
            return ran / (1.0 - q) if ran > 0 else samples[-1]
        rank = longer + math.ceil(q * (len(samples) - longer)) - 1
        return samples[max(rank, longer)]


@dataclass(slots=True)
class RuntimeHistory:
    """The runtimes of each queue's most recent finished gangs (at most `keep` a queue)."""

    keep: int = HISTORY
    default: float = DEFAULT_RUNTIME
    _recent: dict[str, deque[float]] = field(default_factory=dict)
    _sorted: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def add(self, queue: str, seconds: float) -> None:
        """A gang of `queue` finished after running `seconds`."""
        recent = self._recent.get(queue)
        if recent is None:
            recent = self._recent[queue] = deque(maxlen=self.keep)
        recent.append(max(seconds, 0.0))
        self._sorted.pop(queue, None)

    def runtime(self, queue: str, declared: float | None = None) -> Runtime:
        """What is known of the runtime of a gang of `queue` declaring at most `declared`."""
        if declared is not None:
            return Runtime(declared=declared, default=self.default)
        samples = self._sorted.get(queue)
        if samples is None:
            samples = tuple(sorted(self._recent.get(queue, ())))
            self._sorted[queue] = samples
        return Runtime(samples=samples, default=self.default)
