"""The fault runner's invariants, judged on hand-made snapshots: what is a violation at once,
what only when it lasts, and what is someone else's business."""

from __future__ import annotations

from typing import Any

import pytest

from controller.api import names
from hack.chaos.invariants import Check, Checker, Snapshot, problems
from hack.objects import cluster_queue

JSON = dict[str, Any]


def workload(
    name: str,
    queue: str,
    pods: int,
    *,
    admitted: bool,
    done: bool = False,
    owner: str | None = "",
    was_evicted: bool = False,
) -> JSON:
    """A Workload owned by `uid-<name>` (or `owner`; None: no owner, as a plain pod group's)."""
    conditions = [{"type": "QuotaReserved", "status": "True" if admitted else "False"}]
    if done:
        conditions.append({"type": "Finished", "status": "True"})
    if was_evicted:
        conditions.append({"type": "Evicted", "status": "True"})
    status: JSON = {"conditions": conditions}
    if admitted:
        status["admission"] = {"clusterQueue": queue}
    owners = [] if owner is None else [{"uid": owner or f"uid-{name}"}]
    return {
        "metadata": {"name": name, "ownerReferences": owners},
        "spec": {"podSets": [{"name": "main", "count": pods, "requests": {"cpu": "1"}}]},
        "status": status,
    }


def job(name: str, *, suspended: bool, gang_label: bool = True) -> JSON:
    template_labels = {names.POD_GROUP_LABEL: f"job-{name}"} if gang_label else {}
    return {
        "metadata": {"name": name, "uid": f"uid-job-{name}", "labels": {names.QUEUE_LABEL: "q"}},
        "spec": {"suspend": suspended, "template": {"metadata": {"labels": template_labels}}},
    }


def pod(name: str, gang: str, *, gated: bool, node: str = "", owner: str | None = None) -> JSON:
    meta: JSON = {"name": name, "uid": f"uid-{name}", "labels": {names.POD_GROUP_LABEL: gang}}
    if owner is not None:
        meta["ownerReferences"] = [{"uid": owner, "controller": True}]
    spec: JSON = {"nodeName": node} if node else {}
    if gated:
        spec["schedulingGates"] = [{"name": names.ADMISSION_GATE}]
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def podgroup(name: str) -> JSON:
    return {"metadata": {"name": name, "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE}}}


QUEUES = [
    cluster_queue("a1", {"cpu": "4"}, cohort="x", borrowing_limits={"cpu": "2"}),
    cluster_queue("a2", {"cpu": "4"}, cohort="x", borrowing_limits={"cpu": "2"}),
]


def checks(snapshot: Snapshot) -> set[Check]:
    return {p.check for p in problems(snapshot)}


def test_a_consistent_cluster_has_no_problem() -> None:
    snapshot = Snapshot(
        QUEUES,
        [
            workload("job-a", "a1", 2, admitted=True),
            workload("job-b", "a1", 2, admitted=False),
        ],
        jobs=[job("a", suspended=False), job("b", suspended=True)],
        pods=[pod("a-0", "job-a", gated=False, node="n1", owner="uid-job-a")],
        podgroups=[podgroup("job-a")],
    )
    assert problems(snapshot) == []


def test_a_queue_admitted_beyond_nominal_plus_borrowing_limit_is_a_violation_at_once() -> None:
    snapshot = Snapshot(
        QUEUES,
        [workload("job-a", "a1", 4, admitted=True), workload("job-b", "a1", 3, admitted=True)],
    )
    checker = Checker(grace=30)

    checker.observe(snapshot, at=0.0)

    assert [v.problem.check for v in checker.violations] == [Check.QUEUE_OVER_LIMIT]
    assert "cpu of flavor default 7 admitted > 4 quota + 2 borrowing limit" in str(
        checker.violations[0]
    )


def test_a_cohort_admitted_beyond_its_queues_nominal_quota_is_a_violation() -> None:
    # each queue within nominal + borrowing limit (6), together above the cohort's 8
    snapshot = Snapshot(
        QUEUES,
        [workload("job-a", "a1", 5, admitted=True), workload("job-b", "a2", 5, admitted=True)],
        jobs=[job("a", suspended=False), job("b", suspended=False)],
        podgroups=[podgroup("job-a"), podgroup("job-b")],
    )
    assert checks(snapshot) == {Check.COHORT_OVER_QUOTA}


def test_a_gang_with_pods_bound_while_others_are_gated_is_partly_placed() -> None:
    snapshot = Snapshot(
        QUEUES,
        [workload("g", "a1", 2, admitted=True)],
        pods=[pod("g-0", "g", gated=False, node="n1"), pod("g-1", "g", gated=True)],
        podgroups=[podgroup("g")],
    )
    found = checks(snapshot)
    assert Check.PARTLY_PLACED in found and Check.PARTLY_PLACED.safety


def test_a_job_in_a_queue_without_the_gang_fields_escaped_the_webhook() -> None:
    snapshot = Snapshot(QUEUES, jobs=[job("a", suspended=False, gang_label=False)])
    assert checks(snapshot) == {Check.ESCAPED}


def test_a_released_gang_without_quota_is_a_violation_only_when_it_lasts_past_the_grace() -> None:
    snapshot = Snapshot(
        QUEUES,
        [workload("job-a", "a1", 2, admitted=False)],
        jobs=[job("a", suspended=False)],
    )
    checker = Checker(grace=30)

    checker.observe(snapshot, at=0.0)
    checker.observe(snapshot, at=20.0)
    assert checker.violations == []

    checker.observe(snapshot, at=31.0)
    assert [v.problem.check for v in checker.violations] == [Check.RELEASED_WITHOUT_QUOTA]


def test_a_problem_that_clears_within_the_grace_starts_its_clock_again() -> None:
    broken = Snapshot(
        QUEUES, [workload("job-a", "a1", 2, admitted=True)], jobs=[job("a", suspended=True)]
    )
    fixed = Snapshot(
        QUEUES,
        [workload("job-a", "a1", 2, admitted=True)],
        jobs=[job("a", suspended=False)],
        podgroups=[podgroup("job-a")],
    )
    checker = Checker(grace=30)

    for at, snapshot in (
        (0.0, broken),
        (25.0, broken),
        (26.0, fixed),
        (27.0, broken),
        (50.0, broken),
    ):
        checker.observe(snapshot, at)

    assert checker.violations == []


def test_an_admitted_gang_held_back_or_missing_its_podgroup_is_reported() -> None:
    snapshot = Snapshot(
        QUEUES, [workload("job-a", "a1", 2, admitted=True)], jobs=[job("a", suspended=True)]
    )
    assert checks(snapshot) == {Check.HELD_WITH_QUOTA, Check.MISSING_PODGROUP}


def test_a_podgroup_left_for_a_gang_that_lost_its_quota_is_reported() -> None:
    snapshot = Snapshot(
        QUEUES,
        [workload("job-a", "a1", 2, admitted=False)],
        jobs=[job("a", suspended=True)],
        podgroups=[podgroup("job-a")],
    )
    assert checks(snapshot) == {Check.PODGROUP_WITHOUT_QUOTA}


def test_a_managed_gang_without_a_workload_is_reported() -> None:
    snapshot = Snapshot(QUEUES, jobs=[job("a", suspended=True)])
    assert checks(snapshot) == {Check.NO_WORKLOAD}


def test_a_finished_gang_is_judged_no_more() -> None:
    snapshot = Snapshot(
        QUEUES,
        [workload("job-a", "a1", 2, admitted=False, done=True)],
        jobs=[job("a", suspended=False)],
        podgroups=[podgroup("job-a")],
    )
    assert problems(snapshot) == []


def with_conditions(obj: JSON, *types: str) -> JSON:
    obj["status"] = {"conditions": [{"type": t, "status": "True"} for t in types]}
    return obj


@pytest.mark.parametrize("done", ["SuccessCriteriaMet", "Complete", "FailureTarget", "Failed"])
def test_a_done_job_charges_nothing_while_its_workloads_finished_record_is_on_its_way(
    done: str,
) -> None:
    # a1 holds 6 of its 4 + 2; job-a's quota is back once its Job says it is done
    def over(job_a: JSON) -> set[Check]:
        return checks(
            Snapshot(
                QUEUES,
                [
                    workload("job-a", "a1", 4, admitted=True),
                    workload("job-b", "a1", 4, admitted=True),
                ],
                jobs=[job_a, job("b", suspended=False)],
                podgroups=[podgroup("job-a"), podgroup("job-b")],
            )
        )

    assert Check.QUEUE_OVER_LIMIT in over(job("a", suspended=False))
    assert Check.QUEUE_OVER_LIMIT in over(with_conditions(job("a", suspended=False), "Suspended"))
    # (its Workload must say Finished within the grace: a consistency check, not a safety one)
    assert over(with_conditions(job("a", suspended=False), done)) == {Check.DONE_WITH_QUOTA}
    assert not Check.DONE_WITH_QUOTA.safety


def test_a_done_job_whose_workload_keeps_its_quota_past_the_grace_is_a_violation() -> None:
    snapshot = Snapshot(
        QUEUES,
        [workload("job-a", "a1", 2, admitted=True)],
        jobs=[with_conditions(job("a", suspended=False), "Complete")],
        podgroups=[podgroup("job-a")],
    )
    checker = Checker(grace=5)

    checker.observe(snapshot, 0.0)
    assert checker.violations == []
    checker.observe(snapshot, 6.0)

    assert [v.problem.check for v in checker.violations] == [Check.DONE_WITH_QUOTA]


def test_a_jobset_is_charged_until_the_jobset_is_done_whatever_its_jobs_say() -> None:
    def child(name: str, *conditions: str) -> JSON:
        obj = with_conditions(job(name, suspended=False), *conditions)
        obj["metadata"]["ownerReferences"] = [{"kind": "JobSet", "uid": "js", "controller": True}]
        obj["spec"]["template"]["metadata"]["labels"][names.POD_GROUP_LABEL] = "jobset-js"
        return obj

    for jobs in ([child("w0", "Complete"), child("w1")], [child("w1"), child("w0", "Complete")]):
        snapshot = Snapshot(
            QUEUES,
            [
                workload("jobset-js", "a1", 4, admitted=True, owner="js"),
                workload("job-b", "a1", 4, admitted=True),
            ],
            jobs=[*jobs, job("b", suspended=False)],
        )
        assert Check.QUEUE_OVER_LIMIT in checks(snapshot)


def test_a_plain_pod_group_charges_nothing_once_its_pods_have_run_and_none_still_runs() -> None:
    def finished(name: str, phase: str) -> JSON:
        done = pod(name, "pg", gated=False, node="n1")
        done["status"]["phase"] = phase
        return done

    def over(pods: list[JSON]) -> bool:
        workloads = [
            workload("pg", "a1", 2, admitted=True, owner=None),
            workload("job-b", "a1", 6, admitted=True),
        ]
        snapshot = Snapshot(QUEUES, workloads, jobs=[job("b", suspended=False)], pods=pods)
        return Check.QUEUE_OVER_LIMIT in checks(snapshot)

    running = pod("pg-1", "pg", gated=False, node="n1")
    assert over([finished("pg-0", "Succeeded"), running])
    assert not over([finished("pg-0", "Succeeded"), finished("pg-1", "Failed")])
    assert not over([finished("pg-0", "Succeeded"), pod("pg-1", "pg", gated=True)])


def test_pods_whose_statefulset_is_gone_are_left_to_the_garbage_collector() -> None:
    snapshot = Snapshot(QUEUES, pods=[pod("s-0", "sts-s", gated=False, node="n1", owner="gone")])
    assert problems(snapshot) == []


def test_a_plain_pod_group_partly_released_for_longer_than_the_grace_is_a_violation() -> None:
    snapshot = Snapshot(
        QUEUES,
        [workload("pg", "a1", 2, admitted=True, owner=None)],
        pods=[pod("pg-0", "pg", gated=False), pod("pg-1", "pg", gated=True)],
        podgroups=[podgroup("pg")],
    )
    checker = Checker(grace=5)

    checker.observe(snapshot, 0.0)
    checker.observe(snapshot, 6.0)

    assert [v.problem.check for v in checker.violations] == [Check.PARTLY_RELEASED]


def test_two_workloads_of_one_object_and_a_podgroup_of_no_workload_are_reported() -> None:
    twin = workload("job-a-twin", "a1", 2, admitted=False, owner="uid-job-a")
    snapshot = Snapshot(
        QUEUES,
        [workload("job-a", "a1", 2, admitted=True), twin],
        jobs=[job("a", suspended=False)],
        podgroups=[podgroup("job-a"), podgroup("job-x")],
    )
    assert checks(snapshot) == {Check.DUPLICATE_WORKLOAD, Check.STRAY_PODGROUP}


def test_bound_pods_of_a_gang_being_evicted_are_not_a_partial_placement() -> None:
    # a StatefulSet's pod 0 made again (gated) while pod 1 still awaits its deletion
    snapshot = Snapshot(
        QUEUES,
        [workload("sts-s", "a1", 2, admitted=False, was_evicted=True, owner="uid-s")],
        pods=[
            pod("s-0", "sts-s", gated=True, owner="uid-s"),
            pod("s-1", "sts-s", gated=False, node="n1", owner="uid-s"),
        ],
        statefulsets=[
            {
                "metadata": {"name": "s", "uid": "uid-s", "labels": {names.QUEUE_LABEL: "q"}},
                "spec": {"template": {"metadata": {"labels": {names.POD_GROUP_LABEL: "sts-s"}}}},
            }
        ],
    )
    found = checks(snapshot)
    assert Check.PARTLY_PLACED not in found
    assert Check.RELEASED_WITHOUT_QUOTA in found and not Check.RELEASED_WITHOUT_QUOTA.safety


def test_an_ownerless_workload_without_pods_is_an_orphan_unless_kept_after_an_eviction() -> None:
    left = workload("pg", "a1", 2, admitted=False, owner=None)
    kept = workload("pg", "a1", 2, admitted=False, owner=None, was_evicted=True)

    assert checks(Snapshot(QUEUES, [left])) == {Check.ORPHAN_WORKLOAD}
    assert checks(Snapshot(QUEUES, [kept])) == set()


def test_a_queue_is_charged_what_the_admission_record_says() -> None:
    charged = workload("job-a", "a1", 1, admitted=True)
    charged["status"]["admission"]["podSetAssignments"] = [
        {"name": "main", "count": 7, "resourceUsage": {"cpu": "7"}}
    ]
    snapshot = Snapshot(
        QUEUES, [charged], jobs=[job("a", suspended=False)], podgroups=[podgroup("job-a")]
    )
    assert checks(snapshot) == {Check.QUEUE_OVER_LIMIT}


def nested_world(cohort_limit: str | None) -> Snapshot:
    """org -> dept (with a borrowing limit, or none) -> a1, a2; b1 directly under org."""
    dept: JSON = {"metadata": {"name": "dept"}, "spec": {"parent": "org"}}
    if cohort_limit is not None:
        dept["spec"]["resourceGroups"] = [
            {
                "coveredResources": ["cpu"],
                "flavors": [
                    {
                        "name": "default",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "0", "borrowingLimit": cohort_limit}
                        ],
                    }
                ],
            }
        ]
    queues = [
        cluster_queue("a1", {"cpu": "2"}, cohort="dept"),
        cluster_queue("a2", {"cpu": "2"}, cohort="dept"),
        cluster_queue("b1", {"cpu": "4"}, cohort="org"),
    ]
    # dept holds 4 of its own and takes 2 of b1's: 6 of the org's 8.
    admitted = [
        workload("job-a", "a1", 3, admitted=True),
        workload("job-b", "a2", 3, admitted=True),
    ]
    return Snapshot(
        queues,
        admitted,
        jobs=[job("a", suspended=False), job("b", suspended=False)],
        podgroups=[podgroup("job-a"), podgroup("job-b")],
        cohorts=[dept, {"metadata": {"name": "org"}, "spec": {}}],
    )


def test_a_cohort_taking_more_from_its_parent_than_its_borrowing_limit_is_a_violation() -> None:
    assert checks(nested_world(None)) == set()
    assert checks(nested_world("2")) == set()
    problems_seen = list(problems(nested_world("1")))
    assert [p.check for p in problems_seen] == [Check.COHORT_OVER_QUOTA]
    assert problems_seen[0].subject == "dept"
    assert "cpu of flavor default 6 admitted > 4 quota + 1 borrowing limit" in str(problems_seen[0])


def test_a_queue_is_charged_on_the_flavor_its_record_names() -> None:
    queue = cluster_queue("a1", {"cpu": "4"})
    queue["spec"]["resourceGroups"][0]["flavors"].append(
        {"name": "spot", "resources": [{"name": "cpu", "nominalQuota": "2"}]}
    )
    on_spot = workload("job-a", "a1", 3, admitted=True)
    on_spot["status"]["admission"]["podSetAssignments"] = [
        {"name": "main", "count": 3, "resourceUsage": {"cpu": "3"}, "flavors": {"cpu": "spot"}}
    ]
    snapshot = Snapshot(
        [queue], [on_spot], jobs=[job("a", suspended=False)], podgroups=[podgroup("job-a")]
    )
    # 3 CPUs fit the default flavor's 4, not spot's 2.
    assert [str(p) for p in problems(snapshot)] == [
        "queue over nominal + borrowing limit: a1: cpu of flavor spot 3 admitted > 2 quota"
        " + 0 borrowing limit"
    ]


def leader_worker_set(name: str, groups: int) -> tuple[JSON, list[JSON]]:
    """A LeaderWorkerSet in a queue and the leader StatefulSet its controller made for it (with
    no queue label: the LWS controller does not copy it)."""
    lws = {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {names.QUEUE_LABEL: "q"}},
        "spec": {"replicas": groups},
    }
    leader_set = {
        "metadata": {
            "name": name,
            "uid": f"uid-sts-{name}",
            "ownerReferences": [{"uid": f"uid-{name}", "controller": True}],
        }
    }
    return lws, [leader_set]


def test_each_group_of_a_leader_worker_set_is_a_gang_with_its_own_workload() -> None:
    lws, sets = leader_worker_set("llm", 2)
    snapshot = Snapshot(
        QUEUES,
        [
            workload("lws-llm-0", "a1", 2, admitted=True, owner="uid-llm"),
            workload("lws-llm-1", "a1", 2, admitted=False, owner="uid-llm"),
        ],
        statefulsets=sets,
        pods=[
            pod("llm-0", "lws-llm-0", gated=False, node="n1", owner="uid-sts-llm"),
            pod("llm-0-1", "lws-llm-0", gated=False, node="n1", owner="uid-sts-llm"),
            pod("llm-1", "lws-llm-1", gated=True, owner="uid-sts-llm"),
        ],
        podgroups=[podgroup("lws-llm-0")],
        leader_worker_sets=[lws],
    )
    assert problems(snapshot) == []


def test_a_leader_worker_set_group_bound_in_part_is_a_partial_placement() -> None:
    lws, sets = leader_worker_set("llm", 1)
    snapshot = Snapshot(
        QUEUES,
        [workload("lws-llm-0", "a1", 2, admitted=True, owner="uid-llm")],
        statefulsets=sets,
        pods=[
            pod("llm-0", "lws-llm-0", gated=False, node="n1", owner="uid-sts-llm"),
            pod("llm-0-1", "lws-llm-0", gated=True, owner="uid-sts-llm"),
        ],
        podgroups=[podgroup("lws-llm-0")],
        leader_worker_sets=[lws],
    )
    assert Check.PARTLY_PLACED in checks(snapshot)


def test_a_leader_worker_set_group_without_a_workload_is_reported() -> None:
    lws, sets = leader_worker_set("llm", 2)
    snapshot = Snapshot(
        QUEUES,
        [workload("lws-llm-0", "a1", 1, admitted=False, owner="uid-llm")],
        statefulsets=sets,
        leader_worker_sets=[lws],
    )
    assert checks(snapshot) == {Check.NO_WORKLOAD}
