"""Helpers for tests on the local control plane: object builders and polling."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from controller.workloads.base import Backend
from hack.localcluster import LocalCluster, Taint

TEST_NODE_KEY = "kohort.dev/test"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"

T = TypeVar("T")

BENCH_DIR = Path(__file__).resolve().parents[1] / "bench"


@dataclass(frozen=True)
class GangSetup:
    """A gang backend, and for `kubernetes` the scheduling.k8s.io version its control plane
    serves (v1alpha1: the pinned Kubernetes 1.35; v1beta1: K8S_GANG_VERSION)."""

    backend: Backend
    gang_api: str = "v1alpha1"

    def __str__(self) -> str:
        if self.backend is Backend.KUBERNETES:
            return f"{self.backend}-{self.gang_api}"
        return str(self.backend)


# Modules whose scenarios run on every gang backend parametrise the `gang_setup` fixture
# (tests/cluster/conftest.py) with these.
GANG_BACKENDS = (
    GangSetup(Backend.VOLCANO),
    GangSetup(Backend.KUBERNETES, "v1alpha1"),
    GangSetup(Backend.KUBERNETES, "v1beta1"),
)


def min_members(gang_object: dict[str, Any]) -> int:
    """How many pods a backend's gang object needs at once: a PodGroup's minMember, or the gang
    minCount of a scheduling.k8s.io Workload's pod group or PodGroup."""
    spec = gang_object["spec"]
    if "podGroups" in spec:
        return int(spec["podGroups"][0]["policy"]["gang"]["minCount"])
    if "schedulingPolicy" in spec:
        return int(spec["schedulingPolicy"]["gang"]["minCount"])
    return int(spec["minMember"])


def pod_isolation(namespace: str) -> dict[str, Any]:
    """Pod spec fields that place a pod on the `test_nodes` of `namespace` only."""
    return {
        "nodeSelector": {TEST_NODE_KEY: namespace},
        "tolerations": [
            {
                "key": TEST_NODE_KEY,
                "operator": "Equal",
                "value": namespace,
                "effect": "NoSchedule",
            }
        ],
    }


def container(requests: dict[str, str], name: str = "main") -> dict[str, Any]:
    return {
        "name": name,
        "image": PAUSE_IMAGE,
        "resources": {"requests": dict(requests), "limits": dict(requests)},
    }


def pod_spec(namespace: str, requests: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"containers": [container(requests)], **pod_isolation(namespace), **extra}


async def eventually(
    probe: Callable[[], Awaitable[T]],
    accept: Callable[[T], bool],
    within: float = 60.0,
    interval: float = 0.5,
    what: str = "condition",
) -> T:
    """Polls `probe` until `accept` holds for its result; fails with the last result seen."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {within:.0f}s waiting for {what}; last: {value!r}")
        await asyncio.sleep(interval)


async def holds_for(
    probe: Callable[[], Awaitable[T]],
    accept: Callable[[T], bool],
    duration: float,
    interval: float = 0.5,
    what: str = "condition",
) -> T:
    """Checks that `accept` keeps holding for `duration` seconds (for 'nothing happens' claims)."""
    deadline = time.monotonic() + duration
    while True:
        value = await probe()
        if not accept(value):
            raise AssertionError(f"{what} stopped holding: {value!r}")
        if time.monotonic() > deadline:
            return value
        await asyncio.sleep(interval)


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py as a module (bench/ is no package), registered under `name` in
    sys.modules (dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def set_taints(
    cluster: LocalCluster, node: str, *, add: Taint | None = None, remove: str | None = None
) -> None:
    """Add a taint to a node, or remove the one of key `remove`, the others kept."""
    taints: list[dict[str, str]] = cluster.rest.get(f"/api/v1/nodes/{node}")["spec"].get(
        "taints", []
    )
    taints = [t for t in taints if t["key"] != remove]
    if add is not None:
        taints.append(add.to_api())
    cluster.rest.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": taints}})
