"""One seeded fault run of every kind on a control plane of its own (faults restart its
apiserver and etcd): kohort's webhook and controller replicas run as processes, a burst of Jobs,
StatefulSets, LeaderWorkerSets (run by the real LWS controller) and plain pod groups across two
cohorts under one parent Cohort is in flight when the fault strikes, and `hack.chaos.invariants`
is checked on every sample. `bench/chaos.py` runs the long version.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.chaos.runner import Fault, RunResult, run_many
from hack.chaos.stack import ProcessStack
from hack.demo import CONTROLLER_USER
from hack.localcluster import ClusterOptions, LocalCluster

pytestmark = pytest.mark.volcano

GANGS = 16


@pytest.fixture(scope="module")
def fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    options = ClusterOptions(
        node_pools=(),
        scheduler="volcano",
        audit_users=(CONTROLLER_USER,),
        workload_controllers=("lws-manager",),
    )
    with LocalCluster(options, tmp_path_factory.mktemp("faults")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def fault_stack(
    fault_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProcessStack]:
    stack = ProcessStack(fault_cluster, Path(tmp_path_factory.mktemp("fault-stack"))).start()
    yield stack
    stack.stop()


async def run_once(
    cluster: LocalCluster, stack: ProcessStack, seed: int, fault: Fault
) -> RunResult:
    [result] = await run_many(cluster, stack, [(seed, fault)], gangs=GANGS)
    print(f"\n{fault.value} seed {seed}: {result}")
    assert result.violations == []
    assert result.finished == GANGS, "every gang ran to its end"
    assert result.recovered_after is not None, "the cluster was consistent and admitting again"
    return result


async def test_leader_killed_mid_burst_a_standby_takes_over_and_no_gang_is_lost(
    fault_cluster: LocalCluster, fault_stack: ProcessStack
) -> None:
    result = await run_once(fault_cluster, fault_stack, 11, Fault.LEADER_KILL)
    assert result.lease_takeover is not None and result.lease_takeover < 15


async def test_leader_paused_past_its_lease_writes_nothing_once_resumed(
    fault_cluster: LocalCluster, fault_stack: ProcessStack
) -> None:
    result = await run_once(fault_cluster, fault_stack, 12, Fault.LEADER_PAUSE)
    assert result.lease_takeover is not None
    assert result.writes_before_lease_loss > 0, "the audit log shows the leader's own writes"
    assert result.writes_after_lease_loss == 0


async def test_apiserver_restarted_mid_burst_loses_no_gang(
    fault_cluster: LocalCluster, fault_stack: ProcessStack
) -> None:
    await run_once(fault_cluster, fault_stack, 13, Fault.APISERVER_RESTART)


async def test_etcd_restarted_mid_burst_loses_no_gang(
    fault_cluster: LocalCluster, fault_stack: ProcessStack
) -> None:
    await run_once(fault_cluster, fault_stack, 14, Fault.ETCD_RESTART)


async def test_watches_resumed_after_a_compaction_get_410_relist_and_lose_no_gang(
    fault_cluster: LocalCluster, fault_stack: ProcessStack
) -> None:
    result = await run_once(fault_cluster, fault_stack, 15, Fault.WATCH_EXPIRED)
    assert result.relists > 0, "the controller's watches met 410 Gone and listed again"


async def test_every_webhook_replica_killed_during_creates_refuses_them_and_lets_none_escape(
    fault_cluster: LocalCluster, fault_stack: ProcessStack
) -> None:
    result = await run_once(fault_cluster, fault_stack, 23, Fault.WEBHOOK_KILL)
    assert result.refused_creates > 0, "creates during the outage were refused, then retried"
