"""Lease leader election against an in-memory Lease store with optimistic concurrency."""

from __future__ import annotations

import copy
from typing import Any

from controller.cluster.clients import ApiError, Kind
from controller.cluster.election import LeaderElector


class FakeLeases:
    """get/create/replace of Leases, with resourceVersion checks like the API server's."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any]:
        if name not in self.objects:
            raise ApiError(404, "GET", name, "{}")
        return copy.deepcopy(self.objects[name])

    async def create(
        self, kind: Kind, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in self.objects:
            raise ApiError(409, "POST", name, "{}")
        return self._store(name, obj)

    async def replace(
        self, kind: Kind, name: str, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        if obj["metadata"].get("resourceVersion") != self.objects[name]["metadata"].get(
            "resourceVersion"
        ):
            raise ApiError(409, "PUT", name, "{}")
        return self._store(name, obj)

    def _store(self, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[name] = stored
        return copy.deepcopy(stored)

    def holder(self) -> str:
        return str(self.objects["lease"]["spec"]["holderIdentity"])


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def elector(api: FakeLeases, clock: Clock, identity: str) -> LeaderElector:
    return LeaderElector(
        api,  # type: ignore[arg-type]
        namespace="ns",
        name="lease",
        identity=identity,
        lease_duration=15,
        renew_deadline=10,
        monotonic=clock,
    )


async def test_the_first_replica_takes_the_lease_and_the_second_waits() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")

    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert api.holder() == "a"


async def test_a_standby_takes_over_only_after_the_lease_went_unrenewed_for_its_duration() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()

    clock.now += 14  # a is silent (killed), but the lease has not expired yet
    assert not await b.try_acquire_or_renew()
    clock.now += 2
    assert await b.try_acquire_or_renew()

    assert api.holder() == "b"
    assert api.objects["lease"]["spec"]["leaseTransitions"] == 1


async def test_a_renewing_leader_keeps_the_lease_however_long_it_runs() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    for _ in range(10):
        assert await a.try_acquire_or_renew()
        a._renewed_at = clock.now
        assert not await b.try_acquire_or_renew()
        clock.now += 5

    assert api.holder() == "a"


async def test_leadership_lapses_when_renewals_fail_past_the_renew_deadline() -> None:
    api, clock = FakeLeases(), Clock()
    a = elector(api, clock, "a")
    assert await a.try_acquire_or_renew()
    a._renewed_at = clock.now

    clock.now += 9
    assert a.is_leader()
    clock.now += 2
    assert not a.is_leader()


class PausingLeases(FakeLeases):
    """Runs `after_write` once the next write is stored, before its answer comes back: the
    writer was stopped (SIGSTOP) right after the API server took its request."""

    def __init__(self) -> None:
        super().__init__()
        self.after_write: Any = None

    async def replace(
        self, kind: Kind, name: str, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        stored = await super().replace(kind, name, obj, namespace)
        hook, self.after_write = self.after_write, None
        if hook is not None:
            await hook()
        return stored


async def test_a_leader_stopped_after_its_renewal_was_stored_does_not_lead_when_it_resumes() -> (
    None
):
    api, clock = PausingLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.renew_once()
    assert a.is_leader()

    async def stopped_while_b_takes_over() -> None:
        assert not await b.try_acquire_or_renew()  # b sees a's renewal
        clock.now += 16  # a is stopped past the Lease's duration
        assert await b.try_acquire_or_renew()

    api.after_write = stopped_while_b_takes_over
    clock.now += 2
    await a.renew_once()  # its renewal was stored; its answer arrives once a resumes

    assert api.holder() == "b"
    assert not a.is_leader()  # so its fence refuses every write from now on


class SlowReads(FakeLeases):
    """A Lease GET that takes `delay` seconds (a loaded API server); `seen` records whether the
    elector counted as leader when each GET returned."""

    def __init__(self, clock: Clock, delay: float) -> None:
        super().__init__()
        self.clock, self.delay = clock, delay
        self.elector: LeaderElector | None = None
        self.seen: list[bool] = []

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.clock.now += self.delay
        if self.elector is not None:
            self.seen.append(self.elector.is_leader())
        return await super().get(kind, name, namespace)


async def test_a_leader_whose_reads_of_the_lease_are_slow_keeps_leading() -> None:
    clock = Clock()
    api = SlowReads(clock, delay=0)
    a = elector(api, clock, "a")
    await a.renew_once()
    api.elector = a
    api.delay = 6  # each renewal's GET takes 6 s; its write is quick
    for _ in range(5):
        clock.now += 2  # the retry period
        await a.renew_once()

    assert api.seen == [True] * 5  # it never stopped leading, not even while it read
