"""What is known of how long a gang runs once admitted: declared by the workload, or learned
from the runtimes of its queue's finished gangs of about its size.

Big gangs run longer than small ones (on Philly, by hours): a queue's recent runtimes taken
together are mostly its many short small jobs, and a forecast that lets the big gangs holding
the nodes end as early as those comes out far too soon (bench/bench_forecast.py). So runtimes
are kept per size class as well (powers of two of the gang's GPUs, or of its pods when it asks
for none), and a gang's come from its class once it has `ENOUGH` of them.

Rule: pure data, no clock: the forecasts (forecast.py) and the starvation guard's backfill
reservations (engine.py) read runtimes from here.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from controller.quota.snapshot import Gang

Basis = Literal["declared", "learned", "default"]

# The runtime assumed for a gang of a queue none of whose gangs has finished yet.
DEFAULT_RUNTIME = 3600.0
# How many of a queue's most recent finished gangs the learned runtimes come from.
HISTORY = 500
# A size class's own runtimes are used once it has this many (else the queue's, all sizes).
ENOUGH = 20

# (queue, size class; None: all sizes) -> what is known there.
Key = tuple[str, int | None]


def size_class(gang: Gang) -> int:
    """The gang's size class: the bit length of its GPUs (any `*/gpu` resource; the negated
    bit length of its pods if it asks for none), so 1, 2-3, 4-7, 8-15, ... each a class."""
    milli = sum(
        ps.count * amount
        for ps in gang.pod_sets
        for resource, amount in ps.requests.items()
        if resource.endswith("/gpu")
    )
    gpus = -(-milli // 1000)  # requests are in milli-units
    if gpus:
        return gpus.bit_length()
    return -sum(ps.count for ps in gang.pod_sets).bit_length()


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
    # The samples' running total weights (empty: each weighs one; see `RuntimeHistory.runtime`
    # for gangs still running).
    cumulative: tuple[float, ...] = ()
    # Whether the last sample is only a lower bound (a gang still running, longer than every
    # finished one): a quantile that falls on it takes the heavy tail from there.
    open_ended: bool = False

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
        cumulative = self.cumulative
        if not cumulative:
            rank = longer + math.ceil(q * (len(samples) - longer)) - 1
            return samples[max(rank, longer)]
        before = cumulative[longer - 1] if longer else 0.0
        target = before + q * (cumulative[-1] - before)
        rank = min(
            bisect.bisect_left(cumulative, target * (1 - 1e-12), lo=longer), len(samples) - 1
        )
        if self.open_ended and rank == len(samples) - 1:
            # At least that long: within the weight it carries, a heavy tail from it (as for a
            # gang that outlived every runtime), never beyond the quantile asked for.
            below = cumulative[rank - 1] if rank else 0.0
            within = min((target - max(below, before)) / (cumulative[rank] - below), q)
            return samples[rank] / (1.0 - within)
        return samples[rank]


@dataclass(slots=True)
class RuntimeHistory:
    """The runtimes of each queue's most recent finished gangs (at most `keep` a queue)."""

    keep: int = HISTORY
    default: float = DEFAULT_RUNTIME
    _recent: dict[Key, deque[float]] = field(default_factory=dict)
    _sorted: dict[Key, tuple[float, ...]] = field(default_factory=dict)

    def add(self, queue: str, seconds: float, size: int | None = None) -> None:
        """A gang of `queue` (of size class `size`, if known) finished after running
        `seconds`."""
        keys: list[Key] = [(queue, None)]
        if size is not None:
            keys.append((queue, size))
        for key in keys:
            recent = self._recent.get(key)
            if recent is None:
                recent = self._recent[key] = deque(maxlen=self.keep)
            recent.append(max(seconds, 0.0))
            self._sorted.pop(key, None)

    def runtime(
        self,
        queue: str,
        declared: float | None = None,
        size: int | None = None,
        running: Mapping[Key, Sequence[float]] | None = None,
    ) -> Runtime:
        """What is known of the runtime of a gang of `queue` (of size class `size`) declaring
        at most `declared`. `running`: how long the gangs still running have run so far, by
        the same keys as the history (see `running_times`): a runtime learned only from the
        gangs that finished leaves out the long ones still running (a history younger than
        them has none), so these count too, as runtimes at least that long (Kaplan-Meier:
        each one's weight goes to the longer runtimes)."""
        if declared is not None:
            return Runtime(declared=declared, default=self.default)
        key: Key = (queue, size)
        samples = self._samples(key) if size is not None else ()
        if len(samples) < ENOUGH:
            key = (queue, None)
            samples = self._samples(key)
        ran = running.get(key, ()) if running is not None else ()
        if not samples or not ran:
            return Runtime(samples=samples, default=self.default)
        values, cumulative, open_ended = _with_censored(samples, ran)
        return Runtime(
            samples=values, default=self.default, cumulative=cumulative, open_ended=open_ended
        )

    def _samples(self, key: Key) -> tuple[float, ...]:
        samples = self._sorted.get(key)
        if samples is None:
            samples = self._sorted[key] = tuple(sorted(self._recent.get(key, ())))
        return samples


def running_times(gangs: Iterable[tuple[Gang, float]]) -> dict[Key, list[float]]:
    """How long each (queue, size class) and each queue's gangs still running have run, from
    (gang, seconds run so far) pairs."""
    out: dict[Key, list[float]] = {}
    for gang, ran in gangs:
        for key in ((gang.queue, None), (gang.queue, size_class(gang))):
            out.setdefault(key, []).append(max(ran, 0.0))
    return out


def _with_censored(
    finished: Sequence[float], running: Sequence[float]
) -> tuple[tuple[float, ...], tuple[float, ...], bool]:
    """The runtimes and their running total weights when `running` gangs are known only to run
    at least that long: each such one's weight is spread evenly over every runtime longer than
    it (redistribution to the right, which is the Kaplan-Meier estimate); the longest, if it is
    longer than every finished runtime, keeps the weight it gathered, as a runtime of at least
    that (the third value says so)."""
    merged = sorted([(v, 0) for v in finished] + [(v, 1) for v in running])
    n = len(merged)
    factor = 1.0
    values: list[float] = []
    cumulative: list[float] = []
    total = 0.0
    for i, (value, censored) in enumerate(merged):
        if censored and i < n - 1:
            factor *= 1.0 + 1.0 / (n - 1 - i)
            continue
        total += factor
        values.append(value)
        cumulative.append(total)
    return tuple(values), tuple(cumulative), merged[-1][1] == 1
