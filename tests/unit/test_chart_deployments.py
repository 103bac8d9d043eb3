"""The two Deployments run the real `kohort` commands with flags the real parsers accept.

Each container's command line is parsed by `kohort.cli.build_parser()`, the same argparse
definitions the image runs, so a renamed or removed flag fails here rather than in a
CrashLoopBackOff.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from kohort.cli import build_parser
from tests.chart_support import NAMESPACE, RELEASE, VALUE_SETS, Manifest, render

COMPONENTS = ("controller", "webhook")


def parsed(manifest: Manifest, component: str) -> argparse.Namespace:
    container = manifest.container(component)
    assert container["command"] == ["kohort"]
    args = build_parser().parse_args(container["args"])
    assert getattr(args, "unavailable", None) is None, args.unavailable
    return args


def pod_spec(manifest: Manifest, component: str) -> Any:
    return manifest.deployment(component)["spec"]["template"]["spec"]


@pytest.mark.parametrize("value_set", VALUE_SETS)
@pytest.mark.parametrize("component", COMPONENTS)
def test_container_arguments_parse_with_the_real_command_line(
    value_set: str, component: str
) -> None:
    args = parsed(render(VALUE_SETS[value_set]), component)
    assert args.command == component


def test_the_webhook_runs_the_in_process_rotator_on_the_charts_secret() -> None:
    args = parsed(render(), "webhook")
    assert args.rotate_secret == f"{NAMESPACE}/{RELEASE}-webhook-tls"
    assert (args.service, args.namespace) == (f"{RELEASE}-webhook", NAMESPACE)
    assert args.webhook_configuration == [RELEASE]
    assert args.controller_service_account == [f"{NAMESPACE}:{RELEASE}-controller"]
    assert (args.port, args.metrics_port, args.backend) == (9443, 8080, "volcano")


def test_with_cert_manager_the_webhook_reads_the_mounted_certificate() -> None:
    manifest = render({"certManager": {"enabled": True}})
    args = parsed(manifest, "webhook")
    assert args.rotate_secret is None
    mounts = {m["mountPath"] for m in manifest.container("webhook")["volumeMounts"]}
    assert str(args.cert_dir) in mounts


def test_the_controller_elects_a_leader_in_the_release_namespace() -> None:
    args = parsed(render(), "controller")
    assert args.leader_elect is True
    assert (args.lease_namespace, args.lease_name) == (NAMESPACE, f"{RELEASE}-controller")
    assert (args.health_port, args.metrics_port) == (8081, 8080)


def test_device_classes_reach_the_controller_as_the_quota_resources_they_are_charged_as() -> None:
    classes = {"gpu.example.com": "nvidia.com/gpu", "nic.example.com": "example.com/nic"}
    args = parsed(render({"controller": {"deviceClasses": classes}}), "controller")
    assert dict(args.device_class) == classes
    assert parsed(render(), "controller").device_class == []


def test_settings_shared_by_both_components_reach_both() -> None:
    manifest = render(
        {"gangScheduler": {"backend": "coscheduling", "schedulerName": "gang-scheduler"}}
    )
    for component in COMPONENTS:
        args = parsed(manifest, component)
        assert (args.backend, args.scheduler_name) == ("coscheduling", "gang-scheduler")


def test_extra_args_and_releasers_are_passed_through() -> None:
    manifest = render(
        {
            "controller": {"extraArgs": ["--packing=spread"], "placementCheck": False},
            "webhook": {"releasers": {"groups": ["ops"], "users": ["alice"]}},
        }
    )
    controller = parsed(manifest, "controller")
    assert (controller.packing, controller.no_placement_check) == ("spread", True)
    webhook = parsed(manifest, "webhook")
    assert (webhook.controller_group, webhook.controller_user) == (["ops"], ["alice"])


def test_default_replicas_two_webhooks_one_controller_and_ha_scales_both() -> None:
    defaults, ha = render(), render(VALUE_SETS["ha"])
    assert defaults.deployment("webhook")["spec"]["replicas"] == 2
    assert defaults.deployment("controller")["spec"]["replicas"] == 1
    assert ha.deployment("webhook")["spec"]["replicas"] == 3
    assert ha.deployment("controller")["spec"]["replicas"] == 2
    assert parsed(ha, "controller").leader_elect is True
    assert {p["metadata"]["name"] for p in ha.of_kind("PodDisruptionBudget")} == {
        f"{RELEASE}-webhook",
        f"{RELEASE}-controller",
    }


def test_webhook_rollouts_never_drop_below_the_ready_replicas() -> None:
    strategy = render().deployment("webhook")["spec"]["strategy"]
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0
    pdb = render().one("PodDisruptionBudget", f"{RELEASE}-webhook")
    assert pdb["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize("component", COMPONENTS)
def test_probes_hit_the_health_endpoints_on_declared_ports(component: str) -> None:
    container = render().container(component)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probes = {
        name: container[name]["httpGet"]
        for name in ("readinessProbe", "livenessProbe", "startupProbe")
    }
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == "/healthz"
    for probe in probes.values():
        assert probe["port"] in ports
    args = parsed(render(), component)
    probe_port = ports[probes["readinessProbe"]["port"]]
    served = {args.metrics_port} if component == "webhook" else {args.health_port}
    assert probe_port in served


@pytest.mark.parametrize("component", COMPONENTS)
def test_pods_run_unprivileged_with_a_read_only_root_filesystem(component: str) -> None:
    manifest = render()
    pod = pod_spec(manifest, component)
    container = manifest.container(component)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert tmp and {"name": tmp[0]["name"], "emptyDir": {"sizeLimit": "64Mi"}} in pod["volumes"]


@pytest.mark.parametrize("component", COMPONENTS)
def test_scheduling_and_image_settings_reach_the_pods(component: str) -> None:
    settings = {
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-cluster-critical",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
    }
    manifest = render(
        {
            component: settings,
            "image": {"repository": "registry.example/kohort", "tag": "1.2.3"},
            "imagePullSecrets": [{"name": "regcred"}],
        }
    )
    pod = pod_spec(manifest, component)
    for key in ("nodeSelector", "tolerations", "priorityClassName"):
        assert pod[key] == settings[key]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    container = manifest.container(component)
    assert container["resources"] == settings["resources"]
    assert container["image"] == "registry.example/kohort:1.2.3"


def test_the_image_defaults_to_the_app_version_and_a_digest_wins_over_the_tag() -> None:
    assert render().container("webhook")["image"] == "kohort:0.1.0"
    digest = "sha256:" + "a" * 64
    pinned = render({"image": {"digest": digest, "tag": "ignored"}})
    assert pinned.container("controller")["image"] == f"kohort@{digest}"
