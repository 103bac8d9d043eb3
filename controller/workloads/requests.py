"""Per-pod resource requests from a pod spec, in integer milli-units (controller.api.quantity)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controller.api.quantity import parse_quantity

Requests = dict[str, int]


def _add(total: Requests, more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount


def _max(total: Requests, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        total[name] = max(total.get(name, 0), amount)


def _container_requests(container: Any) -> Requests:
    if not isinstance(container, Mapping):
        return {}
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        return {}
    # Like the scheduler: a limit without a request means the request equals the limit.
    merged: dict[str, Any] = {}
    for source in ("limits", "requests"):
        values = resources.get(source) or {}
        if isinstance(values, Mapping):
            merged.update(values)
    return {str(name): parse_quantity(amount) for name, amount in merged.items()}


def _containers(spec: Mapping[str, Any], field: str) -> Iterable[Any]:
    items = spec.get(field) or []
    return items if isinstance(items, list) else []


def pod_requests(pod_spec: Mapping[str, Any]) -> Requests:
    """What one pod asks for, as the scheduler counts it.

    Regular containers and restartable (sidecar) init containers run together, so they add up;
    each plain init container runs alone, so the pod needs the largest of them at most; pod
    overhead comes on top.
    """
    running: Requests = {}
    for container in _containers(pod_spec, "containers"):
        _add(running, _container_requests(container))
    init_peak: Requests = {}
    sidecars: Requests = {}
    for container in _containers(pod_spec, "initContainers"):
        needs = _container_requests(container)
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            _add(sidecars, needs)
        else:
            # A plain init container runs next to the sidecars started before it.
            with_sidecars = dict(sidecars)
            _add(with_sidecars, needs)
            _max(init_peak, with_sidecars)
    _add(running, sidecars)
    _max(running, init_peak)
    overhead = pod_spec.get("overhead") or {}
    if isinstance(overhead, Mapping):
        _add(running, {str(k): parse_quantity(v) for k, v in overhead.items()})
    return running
