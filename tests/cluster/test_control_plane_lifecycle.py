"""Process hygiene: the local control plane stops everything it started, even after a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from hack import processes
from hack.localcluster import ClusterOptions, LocalCluster

MINIMAL = ClusterOptions(node_pools=(), scheduler="none", controller_manager=False)


def test_stopping_the_cluster_ends_every_process_it_started(tmp_path: Path) -> None:
    cluster = LocalCluster(MINIMAL, tmp_path)
    cluster.start()
    pids = [p.pid for p in cluster.procs]
    assert len(pids) == 3  # etcd, kube-apiserver, kwok
    assert cluster.rest.get("/version")["gitVersion"].startswith("v1.35.")

    cluster.stop()

    assert not any(processes.pid_alive(pid) for pid in pids)


def test_a_start_that_fails_half_way_leaves_no_process_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = LocalCluster(MINIMAL, tmp_path)
    running_when_it_failed: dict[str, int] = {}

    def broken_kwok() -> None:
        running_when_it_failed.update({p.name: p.pid for p in cluster.procs if p.alive()})
        raise RuntimeError("kwok could not start")

    monkeypatch.setattr(cluster, "_start_kwok", broken_kwok)
    with pytest.raises(RuntimeError, match="kwok could not start"):
        cluster.start()

    assert set(running_when_it_failed) == {"etcd", "kube-apiserver"}
    assert not any(processes.pid_alive(pid) for pid in running_when_it_failed.values())
    assert cluster.procs == []
