"""How the controller behaves: one value, read by the state, the reconciler and `main`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controller import defaults, quota


@dataclass(frozen=True)
class Settings:
    # Evict a released gang whose pods are not all running after this long (None: never).
    pods_ready_timeout: float | None = 300.0
    # Evict an admitted gang whose release (its PodGroup, its unsuspend) has kept failing for
    # this long since its first failed attempt, and requeue it with a backoff (None: never).
    # Shorter than the pods-ready timeout, which counts from the admission, so that the
    # eviction says why.
    release_timeout: float | None = 120.0
    # Requeue backoff after a pods-ready timeout or a release that kept failing:
    # base * 2^(n-1) for the gang's n-th of that kind, capped, with up to 10% jitter (a
    # preempted or resized gang is requeued at once).
    requeue_base: float = 10.0
    requeue_cap: float = 3600.0
    # A pending reason whose cause stays the same is rewritten (its numbers) at most this often.
    reason_refresh: float = 30.0
    # How many of the first pending gangs of each ClusterQueue and LocalQueue their status
    # lists, and are told their places in those queues whenever they change (their cohort
    # place at the `position_refresh` rate).
    positions_head: int = 10
    # A gang further back is told its position at most this often (seconds), and at most
    # `position_writes` such gangs are told per pass (the most out of date first).
    position_refresh: float = 60.0
    position_writes: int = 50
    # Positions are computed at most this often (seconds): computing them costs about what
    # an admission cycle over every pending gang does.
    positions_period: float = 5.0
    # The CPU (milliseconds) a pass spends at most on positions being computed, which then
    # spreads over passes (the next computation starts `positions_period` after it ended);
    # None or 0: computed whole in the pass that starts it.
    positions_budget: float | None = defaults.POSITIONS_BUDGET_MS
    # Pending gangs' start forecasts are refreshed at most this often, after a pass's writes,
    # within `forecast_budget` a pass (None: no forecasts; see controller/state/forecasts.py and
    # docs/performance.md).
    forecast_refresh: float | None = defaults.FORECAST_REFRESH_SECONDS
    # The CPU (milliseconds) a pass spends at most on a refresh under way; None: a refresh is
    # made whole in the pass that starts it.
    forecast_budget: float | None = defaults.FORECAST_BUDGET_MS
    # Under that budget, the forecasts a pass writes at most (a pass that writes makes no step).
    forecast_writes: int = defaults.FORECAST_WRITES
    # Forecasts assume the traffic of this many past seconds comes again (0: no arrivals).
    forecast_arrivals: float = defaults.FORECAST_ARRIVALS_SECONDS
    # A pass runs at least this often (it also runs when an event or a timer is due).
    resync_period: float = 5.0
    # After a change into an idle loop, wait this long so that its burst is one pass (changes
    # that come while a pass runs are taken up right after it, without this wait).
    debounce: float = 0.1
    # Writes of different gangs in flight at once for a pass's decisions; as many again for
    # the writes beside them (Finished records, a burst of new Workloads).
    concurrent_writes: int = 32
    core: quota.Config = field(default_factory=quota.Config.measured)
    # DeviceClass -> the quota resource its devices (claimed through DRA) are charged as
    # (docs/dra.md).
    device_classes: Mapping[str, str] = field(default_factory=dict)
