"""A gang whose pods have all succeeded before its owner says it finished (a Job whose controller
has not marked it Complete yet): the controller tells the engine, which never evicts it and
waits for its quota rather than evict another gang for it."""

from __future__ import annotations

import msgspec

from controller import quota
from controller.api import kube
from controller.quota.engine import SETTLE_AT_MOST, SETTLE_FOR
from controller.settings import Settings
from controller.state.cluster import ClusterState
from controller.state.gangs import ManagedGang
from controller.state.mirror import EngineMirror, Member
from controller.state.objects import PodGroupSettings
from controller.workloads.base import GangShape
from tests.fakes.workloads import make_pod

CPU = 1000  # one CPU in milli-units


def pod(name: str, phase: str) -> kube.Pod:
    view = msgspec.convert(make_pod(name, namespace="ns"), kube.Pod)
    view.status = kube.PodStatus(phase=phase)
    return view


def gang_of(*phases: str) -> ManagedGang:
    """A 2-pod gang (both must run at once) with one pod in each of `phases`."""
    pod_set = quota.PodSet(2, {"cpu": CPU})
    gang = ManagedGang(("ns", "job-train"), shape=GangShape("job-train", 2, (pod_set,)))
    gang.pods = {f"p{i}": pod(f"p{i}", phase) for i, phase in enumerate(phases)}
    return gang


def test_a_gang_is_done_once_as_many_pods_as_must_run_have_succeeded_and_none_runs() -> None:
    assert gang_of("Succeeded", "Succeeded").work_done()
    assert not gang_of("Succeeded", "Running").work_done()
    assert not gang_of("Succeeded", "Failed").work_done()
    assert not gang_of("Succeeded").work_done()
    assert not gang_of().work_done()


def mirror_with_two_borrowers(*, b1_done: bool, mirror: EngineMirror | None = None) -> EngineMirror:
    """Queues a and b (1 CPU each) of one cohort, b borrowing a's CPU with b1 (admitted first)
    and b2, a1 of a waiting; no placement check (no work lost either way)."""
    mirror = mirror or EngineMirror(quota.Config(placement=False))
    queues = tuple(
        quota.QueueSpec(name, {"cpu": quota.Quota(CPU)}, cohort="all", reclaim_within_cohort="Any")
        for name in ("a", "b")
    )
    mirror.take_queues(queues, ())
    one_cpu = (quota.PodSet(1, {"cpu": CPU}),)
    for name, at, done in (("b1", 0.0, b1_done), ("b2", 50.0, False)):
        gang = quota.Gang(f"ns/{name}", "b", one_cpu)
        mirror.follow(("ns", name), Member("admitted", "b", gang, at, done=done))
    a1 = quota.Gang("ns/a1", "a", one_cpu, created=100.0)
    mirror.follow(("ns", "a1"), Member("pending", "a", a1))
    return mirror


def test_with_none_done_the_engine_evicts_the_borrower_that_has_run_longest() -> None:
    mirror = mirror_with_two_borrowers(b1_done=False)

    decisions, _ = mirror.decide(100.0)

    assert [e.gang for e in decisions.evictions] == ["ns/b1"]


def test_a_done_gang_is_never_evicted_and_its_room_is_waited_for() -> None:
    mirror = mirror_with_two_borrowers(b1_done=True)

    waiting, _ = mirror.decide(100.0)
    assert waiting.evictions == () and waiting.admissions == ()

    later, _ = mirror.decide(100.0 + SETTLE_AT_MOST)
    assert [e.gang for e in later.evictions] == ["ns/b2"]


def test_the_controller_runs_a_pass_when_the_room_waited_for_stops_counting() -> None:
    state = ClusterState(Settings(core=quota.Config(placement=False)), PodGroupSettings())
    mirror_with_two_borrowers(b1_done=True, mirror=state.mirror)
    assert state.next_timer() is None

    state.mirror.decide(100.0)

    assert state.next_timer() == 100.0 + SETTLE_FOR
