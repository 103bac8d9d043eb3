"""When each gang must be looked at again: a requeue backoff ending, a pods-ready deadline, a
pending reason due for a refresh.

Rule: a gang has at most one pending time, its earliest; a later one asked for meanwhile is
dropped (the gang is looked at then anyway, and asks again if it still must wait).
"""

from __future__ import annotations

import heapq
import math

from controller.state.gangs import GangKey


class Timers:
    def __init__(self) -> None:
        self._heap: list[tuple[float, GangKey]] = []
        self._next: dict[GangKey, float] = {}

    def at(self, key: GangKey, when: float) -> None:
        """Look at gang `key` again at `when` (unless it is due earlier already)."""
        if when < self._next.get(key, math.inf):
            self._next[key] = when
            heapq.heappush(self._heap, (when, key))

    def due(self, now: float) -> list[GangKey]:
        """The gangs whose time has come, taken off."""
        due: list[GangKey] = []
        while self._heap and self._heap[0][0] <= now:
            when, key = heapq.heappop(self._heap)
            if self._next.get(key) == when:
                del self._next[key]
            due.append(key)
        return due

    def next(self) -> float | None:
        """The earliest pending time, if any."""
        return self._heap[0][0] if self._heap else None
