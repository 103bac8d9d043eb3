"""`kohort controller --backend kubernetes` checks at start which scheduling.k8s.io gang API
the cluster serves (v1beta1 PodGroups, v1alpha1 Workloads), and says what to turn on when it
serves neither; the control planes of that backend run no Volcano process. With the default
backend, volcano, it checks that Volcano's API is served, and says what to do when it is not
(issue 33: it started, admitted, and its releases failed for good)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hack.localcluster import LocalCluster

pytestmark = pytest.mark.cluster


def controller_argv(cluster: LocalCluster, backend: str | None = "kubernetes") -> list[str]:
    """`kohort controller --backend <backend>` against `cluster`, as a user starts it (None:
    no --backend flag, the default)."""
    return [
        str(Path(sys.executable).with_name("kohort")),
        "controller",
        f"--kubeconfig={cluster.kubeconfig}",
        *([f"--backend={backend}"] if backend else []),
        "--no-leader-elect",
        "--health-port=0",
    ]


def test_the_kubernetes_backend_refuses_to_start_on_a_cluster_without_gang_scheduling(
    cluster: LocalCluster,
) -> None:
    """The session's control plane runs without the feature gates."""
    done = subprocess.run(
        controller_argv(cluster),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "GenericWorkload=true,GangScheduling=true" in done.stderr
    assert "this cluster serves neither" in done.stderr


@pytest.mark.parametrize("api", ["v1alpha1", "v1beta1"])
def test_the_kubernetes_backend_starts_where_gang_scheduling_is_on(
    api: str, request: pytest.FixtureRequest
) -> None:
    native_cluster: LocalCluster = request.getfixturevalue(f"native_cluster_{api}")
    running = {p.name for p in native_cluster.procs if p.alive()}
    assert "kube-scheduler" in running
    assert not {name for name in running if name.startswith("vc-")}, "no Volcano process"
    proc = subprocess.Popen(
        controller_argv(native_cluster),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=5)  # still running: it found what it needs
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert "serves neither" not in out
    assert f"gangs go to kube-scheduler as scheduling.k8s.io/{api}" in out


def test_a_missing_volcano_is_refused_at_start_with_what_to_do(
    native_cluster_v1alpha1: LocalCluster,
) -> None:
    """The tour's controller command, as written (the default backend), on a control plane
    without Volcano."""
    done = subprocess.run(
        controller_argv(native_cluster_v1alpha1, backend=None),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "--backend volcano (the default) needs Volcano" in done.stderr
    assert "Install Volcano" in done.stderr
    assert "--backend kubernetes" in done.stderr and "--backend none" in done.stderr
    assert (
        "this cluster does not serve podgroups.scheduling.volcano.sh/v1beta1,"
        " queues.scheduling.volcano.sh/v1beta1" in done.stderr
    )
    assert "controller started" not in done.stderr
