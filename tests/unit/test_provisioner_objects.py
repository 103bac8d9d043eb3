"""How the stand-in provisioner reads pods and the kwok provider's node-group templates."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from hack.devcli import parse_node_group
from hack.localcluster import Autoscaler, NodeGroup
from hack.localcluster import Taint as LocalTaint
from hack.provisioner import parse_args, pod_shape, read_templates, rest_client
from hack.provisioning import Requirement, Taint, Toleration


def test_a_pod_asks_for_its_containers_sum_or_its_largest_init_container_plus_overhead() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "4"}}},
            {"resources": {"requests": {"cpu": "1"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
        "overhead": {"cpu": "100m"},
    }
    assert pod_shape(spec).requests == {
        "cpu": 2100,
        "memory": 1024**3 * 1000,
        "nvidia.com/gpu": 4000,
    }


def test_a_pod_keeps_its_selector_required_affinity_and_tolerations() -> None:
    spec: dict[str, Any] = {
        "containers": [{}],
        "nodeSelector": {"accelerator": "h100"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
        "tolerations": [{"key": "kwok-provider", "operator": "Exists", "effect": "NoSchedule"}],
    }
    shape = pod_shape(spec)
    assert shape.node_selector == {"accelerator": "h100"}
    assert shape.affinity_terms == ((Requirement("zone", "In", ("a",)),),)
    assert shape.tolerations == (Toleration("kwok-provider", "Exists", "", "NoSchedule"),)


def test_the_local_clusters_node_group_reads_back_as_the_group_it_declares() -> None:
    declared = NodeGroup(
        "gpu", max_count=4, min_count=1, gpus=8, taints=(), labels={"accelerator": "h100"}
    )
    listing = {"apiVersion": "v1", "kind": "List", "items": [declared.template()]}
    [template] = read_templates({"data": {"templates": yaml.safe_dump(listing)}}, "kwok-nodegroup")
    group = template.group
    assert (group.name, group.min_count, group.max_count) == ("gpu", 1, 4)
    assert group.allocatable["nvidia.com/gpu"] == 8000
    assert group.labels["accelerator"] == "h100"
    assert "kubernetes.io/hostname" not in group.labels


def test_templates_without_the_group_label_are_left_out_and_bounds_default_to_0_and_200() -> None:
    items = [
        {"metadata": {"labels": {"other": "x"}}},
        {
            "metadata": {"labels": {"kwok-nodegroup": "cpu"}},
            "spec": {"taints": [{"key": "k", "effect": "NoExecute"}]},
        },
    ]
    listing = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
    [template] = read_templates({"data": {"templates": listing}}, "kwok-nodegroup")
    assert (template.group.name, template.group.min_count, template.group.max_count) == (
        "cpu",
        0,
        200,
    )
    assert template.group.taints == (Taint("k", "", "NoExecute"),)


def test_no_configmap_means_no_node_groups() -> None:
    assert read_templates(None, "kwok-nodegroup") == []
    assert read_templates({"data": {}}, "kwok-nodegroup") == []


def test_the_command_line_follows_the_kwok_provider_and_autoscaler_defaults() -> None:
    _, flags = parse_args(["--kubeconfig", "k"])
    assert flags.namespace == "kube-system"
    assert flags.group_label_key == "kwok-nodegroup"
    assert flags.booking_time.total_seconds() == 600
    assert flags.scale_down_unneeded_time.total_seconds() == 600
    assert flags.skip_taint is False


def test_dev_up_declares_an_autoscaled_group_as_name_max_and_a_pools_shape() -> None:
    group = parse_node_group("spot:4:gpus=8,cpu=64,label.tier=spot,taint.spot=yes:NoSchedule")
    assert (group.name, group.max_count, group.min_count, group.gpus, group.cpu) == (
        "spot",
        4,
        0,
        8,
        "64",
    )
    assert group.labels == {"tier": "spot"}
    assert group.taints == (LocalTaint("spot", "yes", "NoSchedule"),)


def test_the_local_cluster_starts_the_provisioner_with_its_flags_and_without_the_taint() -> None:
    assert Autoscaler(scale_down_unneeded_time=4).flags() == [
        "--scan-interval=0.5",
        "--booking-time=600.0",
        "--scale-down-unneeded-time=4",
        "--skip-taint",
    ]


def test_a_group_whose_max_count_is_not_a_number_is_left_out() -> None:
    items = [
        {
            "metadata": {
                "labels": {"kwok-nodegroup": "gpu"},
                "annotations": {"cluster-autoscaler.kwok.nodegroup/max-count": "lots"},
            }
        },
        {"metadata": {"labels": {"kwok-nodegroup": "cpu"}}},
    ]
    listing = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})
    templates = read_templates({"data": {"templates": listing}}, "kwok-nodegroup")
    assert [t.group.name for t in templates] == ["cpu"]


def test_a_kubeconfig_with_inline_certificates_gives_a_client_of_its_current_context(
    tmp_path: Path,
) -> None:
    data = {
        "current-context": "local",
        "contexts": [{"name": "local", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "certificate-authority-data": base64.b64encode(b"CA").decode(),
                },
            }
        ],
        "users": [
            {
                "name": "u",
                "user": {
                    "client-certificate": str(tmp_path / "u.crt"),
                    "client-key-data": base64.b64encode(b"KEY").decode(),
                },
            }
        ],
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(data))
    client = rest_client(kubeconfig)
    assert client.server == "https://127.0.0.1:6443"
    assert client.ca_file.read_bytes() == b"CA"
    assert client.cert_file == tmp_path / "u.crt"
    assert client.key_file is not None and client.key_file.read_bytes() == b"KEY"
