"""The local control plane's pure parts: node shapes, pool syntax, process hygiene."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from hack import dra, processes
from hack.devcli import parse_pool
from hack.localcluster import NodePool, Taint, packing_scheduler_config, stop_from_state
from hack.tables import format_table
from kohort.cli import main


def test_a_gpu_pool_becomes_kwok_nodes_with_gpus_as_an_extended_resource() -> None:
    pool = NodePool("gpu", 2, cpu="64", memory="512Gi", gpus=8, labels={"zone": "a"})

    nodes = pool.node_objects()

    assert [n["metadata"]["name"] for n in nodes] == ["gpu-0", "gpu-1"]
    node = nodes[0]
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["status"]["allocatable"] == {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "110",
        "nvidia.com/gpu": "8",
    }
    assert node["metadata"]["labels"]["zone"] == "a"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-0"


def test_a_cpu_pool_has_no_gpu_resource() -> None:
    [node] = NodePool("cpu", 1).node_objects()
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]


def test_pool_syntax_reads_shape_labels_and_taints() -> None:
    pool = parse_pool("a100:3:gpus=8,cpu=96,memory=1Ti,label.gpu=a100,taint.dedicated=ml:NoExecute")

    assert pool == NodePool(
        "a100",
        3,
        cpu="96",
        memory="1Ti",
        gpus=8,
        labels={"gpu": "a100"},
        taints=(Taint("dedicated", "ml", "NoExecute"),),
    )


def test_a_pool_may_publish_its_gpus_as_dra_devices_instead_of_a_node_resource() -> None:
    pool = parse_pool("dra:2:dra_gpus=4,cpu=16")
    assert pool == NodePool("dra", 2, cpu="16", dra_gpus=4)
    node = pool.node_objects()[0]
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    node["metadata"]["uid"] = "u1"
    published = dra.resource_slice(node, pool.dra_gpus)
    assert published["spec"]["nodeName"] == "dra-0"
    assert published["spec"]["driver"] == dra.DRIVER
    assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert published["metadata"]["ownerReferences"][0]["uid"] == "u1"
    [selector] = dra.device_class()["spec"]["selectors"]
    assert selector["cel"]["expression"] == 'device.driver == "gpu.kohort.dev"'


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("gpu", "expected NAME:COUNT"),
        ("gpu:x", "expected NAME:COUNT"),
        ("gpu:1:gpus", "key=value"),
        ("gpu:1:colour=red", "unknown key 'colour'"),
    ],
)
def test_a_malformed_pool_is_rejected_with_the_reason(text: str, complaint: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=complaint):
        parse_pool(text)


@pytest.mark.parametrize("scheduler", ["volcano", "none"])
def test_kube_schedulers_gangs_with_another_scheduler_are_refused_with_the_flags_that_work(
    scheduler: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["dev", "up", "--work-dir", str(tmp_path), "--gang-backend", "kubernetes"]
    assert main([*argv, "--scheduler", scheduler]) == 2
    err = capsys.readouterr().err
    assert f"runs kube-scheduler alone, not --scheduler {scheduler}" in err
    assert "drop --scheduler (or give --scheduler kube-scheduler)" in err
    assert "use --gang-backend volcano (the default) with --scheduler volcano or both" in err
    assert not (tmp_path / "state.json").exists()  # nothing was started


def test_stopping_a_process_also_stops_its_children(tmp_path: Path) -> None:
    script = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
    proc = processes.start("parent", [sys.executable, "-c", script], tmp_path, tie_to_parent=True)
    deadline = time.monotonic() + 20  # a loaded machine takes a while to start Python
    child_pids: list[str] = []
    while len(child_pids) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
        child_pids = subprocess.run(
            ["pgrep", "-g", str(proc.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
    assert len(child_pids) == 2

    processes.stop(proc.pid, grace_seconds=5)

    assert not proc.alive()
    assert not any(processes.pid_alive(int(pid)) for pid in child_pids)


def test_a_process_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    proc = processes.start("stubborn", [sys.executable, "-c", script], tmp_path, tie_to_parent=True)
    time.sleep(0.5)

    processes.stop(proc.pid, grace_seconds=0.5)

    assert not proc.alive()


def test_down_stops_what_an_earlier_up_recorded(tmp_path: Path) -> None:
    proc = processes.start("etcd", ["sleep", "300"], tmp_path, tie_to_parent=False)
    (tmp_path / "state.json").write_text(f'{{"server": "", "pids": {{"etcd": {proc.pid}}}}}')

    assert stop_from_state(tmp_path) == ["etcd"]
    assert not proc.alive()
    assert stop_from_state(tmp_path) == []


def test_waiting_fails_fast_with_the_log_when_a_watched_process_exits(tmp_path: Path) -> None:
    proc = processes.start(
        "apiserver", ["sh", "-c", "echo 'bad flag --foo'; exit 3"], tmp_path, tie_to_parent=True
    )
    with pytest.raises(RuntimeError, match="bad flag --foo"):
        processes.wait_until("readiness", lambda: False, timeout=10, watched=[proc])


def test_tables_align_columns() -> None:
    text = format_table(["NODE", "GPU"], [["gpu-0", "8"], ["a-long-name", "0"]])
    assert text.splitlines() == ["NODE         GPU", "gpu-0        8", "a-long-name  0"]


def test_the_kube_scheduler_that_places_gangs_packs_gpus_first() -> None:
    config = packing_scheduler_config(Path("/work/kubeconfig"))

    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["clientConnection"] == {"kubeconfig": "/work/kubeconfig"}
    [profile] = config["profiles"]
    args = {entry["name"]: entry["args"] for entry in profile["pluginConfig"]}
    strategy = args["NodeResourcesFit"]["scoringStrategy"]
    assert strategy["type"] == "MostAllocated"
    weights = {r["name"]: r["weight"] for r in strategy["resources"]}
    assert weights["nvidia.com/gpu"] > max(weights["cpu"], weights["memory"])
    assert profile["plugins"]["score"]["disabled"] == [{"name": "NodeResourcesBalancedAllocation"}]
    assert args["PodTopologySpread"] == {"defaultingType": "List", "defaultConstraints": []}


@pytest.mark.parametrize("page", ["gang-backends.md", "installation.md"])
def test_the_docs_give_users_the_packing_profile_the_local_control_plane_runs(page: str) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / page).read_text()
    blocks = [
        yaml.safe_load(textwrap.dedent(block))
        for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
        if "KubeSchedulerConfiguration" in block
    ]
    assert [b["profiles"] for b in blocks] == [packing_scheduler_config(Path("k"))["profiles"]]
