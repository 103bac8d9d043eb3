"""Admitted gangs whose release keeps failing: since when, how many times, and the last error.

Rule: only a refused write of a gang's release (its PodGroup, its adapter's release writes), as
planned in the same pass, counts; a gang's record lasts while it fails and ends when the gang is
released, evicted or gone (`end`). Kept in memory: a restarted controller starts counting again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from controller.state.gangs import GangKey
from controller.state.steps import FailedWrite, Step


@dataclass(frozen=True)
class ReleaseFailure:
    """A gang's release failing since `since` (seconds), `attempts` times, last with `error`
    on `step`."""

    since: float
    attempts: int
    step: Step
    error: str


class ReleaseFailures:
    def __init__(self) -> None:
        # The release steps planned this pass, per gang (a failed write is matched by identity).
        self._planned: dict[GangKey, list[Step]] = {}
        self._failing: dict[GangKey, ReleaseFailure] = {}

    def begin_pass(self) -> None:
        self._planned.clear()

    def planned(self, key: GangKey, steps: Sequence[Step]) -> None:
        """This pass writes `steps` to release the gang (besides any planned before in it)."""
        if steps:
            self._planned.setdefault(key, []).extend(steps)

    def failed(self, key: GangKey, failure: FailedWrite, now: float) -> ReleaseFailure | None:
        """Take in a refused write: the gang's record if it was one of its release writes."""
        if not any(step is failure.step for step in self._planned.get(key, ())):
            return None
        before = self._failing.get(key)
        if before is None:
            found = ReleaseFailure(now, 1, failure.step, failure.error)
        else:
            found = replace(
                before, attempts=before.attempts + 1, step=failure.step, error=failure.error
            )
        self._failing[key] = found
        return found

    def get(self, key: GangKey) -> ReleaseFailure | None:
        return self._failing.get(key)

    def end(self, key: GangKey) -> None:
        """The gang is released, evicted or gone: its failures are over."""
        self._failing.pop(key, None)
