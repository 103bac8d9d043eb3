"""Per-pod resource requests from a pod spec, in integer milli-units (controller.api.quantity)."""

from __future__ import annotations

from collections.abc import Mapping

from controller.api import kube
from controller.api.quantity import parse_quantity

Requests = dict[str, int]


def _add(total: Requests, more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount


def _max(total: Requests, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        total[name] = max(total.get(name, 0), amount)


def _container_requests(container: kube.Container) -> Requests:
    # Like the scheduler: a limit without a request means the request equals the limit.
    merged = {**container.resources.limits, **container.resources.requests}
    return {name: parse_quantity(amount) for name, amount in merged.items()}


def pod_requests(spec: kube.PodSpec) -> Requests:
    """What one pod asks for, as the scheduler counts it.

    Regular containers and restartable (sidecar) init containers run together, so they add up;
    each plain init container runs alone, so the pod needs the largest of them at most; pod
    overhead comes on top. Raises QuantityError on a quantity that is not one.
    """
    running: Requests = {}
    for container in spec.containers:
        _add(running, _container_requests(container))
    init_peak: Requests = {}
    sidecars: Requests = {}
    for container in spec.init_containers:
        needs = _container_requests(container)
        if container.restart_policy == "Always":
            _add(sidecars, needs)
        else:
            # A plain init container runs next to the sidecars started before it.
            with_sidecars = dict(sidecars)
            _add(with_sidecars, needs)
            _max(init_peak, with_sidecars)
    _add(running, sidecars)
    _max(running, init_peak)
    _add(running, {k: parse_quantity(v) for k, v in spec.overhead.items()})
    return running
