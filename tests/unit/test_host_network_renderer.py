"""hack/host_network.py, the helm post-renderer of the real node's install: the chart's
Deployments' pods on the node's network namespace, every other object as helm rendered it."""

from __future__ import annotations

import copy

from hack.host_network import on_host_network
from tests.chart_support import render


def test_both_deployments_pods_go_on_the_host_network_with_cluster_dns() -> None:
    for component in ("controller", "webhook"):
        deployment = copy.deepcopy(render().deployment(component))
        pod = on_host_network(deployment)["spec"]["template"]["spec"]
        assert pod["hostNetwork"] is True
        assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert (
            pod["containers"]
            == render().deployment(component)["spec"]["template"]["spec"]["containers"]
        )


def test_every_other_object_is_left_as_rendered() -> None:
    others = [o for o in render() if o["kind"] != "Deployment"]
    assert others, "the chart renders more than its Deployments"
    for obj in others:
        assert on_host_network(copy.deepcopy(obj)) == obj
