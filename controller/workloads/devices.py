"""The devices a gang's pods claim through Dynamic Resource Allocation, as quota resources.

Rule: a DeviceClass is charged as the quota resource the controller's configuration maps it to
(`--device-class gpu.example.com=nvidia.com/gpu`), so a pod that takes 2 GPUs through a claim
costs its queue what a pod asking for `nvidia.com/gpu: 2` does. Each pod gets its own claim
from each ResourceClaimTemplate it names; a request of a claim is counted only when its count
is certain (docs/dra.md):

- `exactly` with allocationMode ExactCount: `count` devices of the class (selectors narrow
  which devices, not how many, so they do not change the charge);
- allocationMode All (every device of the class on the node the pod lands on): the number of
  the class's devices a node has, when every node that has any has the same number (the
  placement check then needs a node with all of them free); when no node has the class, the
  nodes' numbers differ, or the request has selectors (which narrow the devices to an
  unknown subset), it is not counted;
- `firstAvailable` (a prioritized list of alternatives), `adminAccess` (devices already in
  use by others): not counted, so the gang waits and its reason says why;
- a class the configuration does not map: the gang waits, naming the class.

A pod that names a ResourceClaim directly (shared between pods) is refused by the webhook;
one that got past it holds its gang back (the claim is no template of the gang's own).
Pure: templates (and how many devices of each class nodes have) in, requests or a problem out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from controller.api import kube
from controller.quota.snapshot import PodSet
from controller.workloads.base import GangShape
from controller.workloads.requests import Requests

# A DeviceClass name -> the quota resource its devices are charged as.
DeviceClasses = Mapping[str, str]

MILLI = 1000
# Where the placement check counts a DeviceClass's devices: a node resource of this name per
# class, `devices.kohort.dev/<class>` (not the quota resource: a node's extended-resource GPUs
# and its DRA GPUs are not the same capacity).
DEVICE_RESOURCE_PREFIX = "devices.kohort.dev/"


def device_resource(device_class: str) -> str:
    return DEVICE_RESOURCE_PREFIX + device_class


class DeviceError(ValueError):
    """Why a claim's devices cannot be charged: the text a waiting gang's reason carries."""


# DeviceClass -> node -> how many of the class's devices the node's ResourceSlices publish
# (nodes with none left out; classes whose selector kohort cannot evaluate left out).
ClassDevices = Mapping[str, Mapping[str, int]]


def _request_problem(template: str, request: kube.DeviceRequest) -> str | None:
    where = f"ResourceClaimTemplate {template} request {request.name or '?'}"
    exact = request.exactly
    if exact is None:
        if request.first_available:
            return f"{where} uses firstAvailable (a prioritized list), which kohort cannot charge"
        return f"{where} asks for no device class"
    if exact.admin_access:
        return f"{where} asks for adminAccess, which kohort cannot charge"
    if exact.allocation_mode == "All":
        if exact.selectors:
            return (
                f"{where} uses allocationMode All with selectors, which narrow the node's devices"
                " to a number kohort cannot know; ask for an exact count"
            )
        return None
    if exact.allocation_mode != "ExactCount":
        return (
            f"{where} uses allocationMode {exact.allocation_mode}, whose device count kohort"
            " cannot know; ask for an exact count"
        )
    if exact.count < 1:
        return f"{where} asks for {exact.count} devices"
    return None


def every_node_has(template: str, device_class: str, nodes: Mapping[str, int]) -> int:
    """How many devices a claim for all of `device_class`'s devices of a node is charged: the
    number every node that has the class has (`nodes`: node -> its count). Raises DeviceError
    when no node has the class or nodes have different numbers."""
    counts = sorted(set(nodes.values()))
    where = f"ResourceClaimTemplate {template} asks for all devices of DeviceClass {device_class}"
    if not counts:
        raise DeviceError(
            f"{where}, and no node has any that kohort can count (no ResourceSlice publishes"
            " them, or the class's selector is one kohort does not evaluate)"
        )
    if len(counts) > 1:
        shown = ", ".join(
            f"{count} on {min(n for n, c in nodes.items() if c == count)}" for count in counts
        )
        raise DeviceError(
            f"{where}, whose nodes have different numbers of them ({shown}), so its charge"
            " depends on the node; ask for an exact count"
        )
    return counts[0]


def claim_devices(
    template: kube.ResourceClaimTemplate, all_of: Callable[[str], int] | None = None
) -> dict[str, int]:
    """How many devices of each DeviceClass one claim made from `template` asks for;
    `all_of(class)`: how many a request for all of a node's devices of the class is counted
    (it raises DeviceError when that is not known; None: such requests are not counted).
    Raises DeviceError when a request's count is not certain."""
    name = template.metadata.name
    out: dict[str, int] = {}
    for request in template.spec.spec.devices.requests:
        problem = _request_problem(name, request)
        if problem is not None:
            raise DeviceError(problem)
        assert request.exactly is not None
        device_class = request.exactly.device_class_name
        if request.exactly.allocation_mode == "All":
            if all_of is None:
                raise DeviceError(
                    f"ResourceClaimTemplate {name} asks for all devices of DeviceClass"
                    f" {device_class}, and no node's count of them is known"
                )
            count = all_of(device_class)
        else:
            count = request.exactly.count
        out[device_class] = out.get(device_class, 0) + count
    return out


def _uniform(template: str, devices: ClassDevices) -> Callable[[str], int]:
    def all_of(device_class: str) -> int:
        return every_node_has(template, device_class, devices.get(device_class, {}))

    return all_of


def claim_requests(
    template: kube.ResourceClaimTemplate,
    classes: DeviceClasses,
    devices: ClassDevices | None = None,
) -> Requests:
    """What one claim made from `template` is charged, in milli-units of quota resources
    (`devices`: what nodes have, for requests of all of a node's devices). Raises DeviceError
    when a request cannot be counted or its class is not mapped."""
    out: Requests = {}
    all_of = _uniform(template.metadata.name, devices or {})
    for device_class, count in claim_devices(template, all_of).items():
        resource = classes.get(device_class)
        if resource is None:
            raise DeviceError(
                f"DeviceClass {device_class} (ResourceClaimTemplate {template.metadata.name})"
                f" is not covered by any quota resource; the controller's --device-class"
                f" {device_class}=RESOURCE maps it"
            )
        out[resource] = out.get(resource, 0) + count * MILLI
    return out


def pod_devices(
    claims: Iterable[kube.PodResourceClaim],
    templates: Mapping[str, kube.ResourceClaimTemplate],
    node_has: Mapping[str, int] | None = None,
) -> Requests:
    """What a pod's claims made from `templates` take of its node's devices, by node device
    resource (`device_resource`), in milli-units (`node_has`: what its node has, by the same
    resource: a claim for all of a class's devices takes them all); claims that cannot be
    counted take none."""
    has = node_has or {}
    out: Requests = {}
    for claim in claims:
        template = templates.get(claim.resource_claim_template_name or "")
        if template is None:
            continue
        try:
            devices = claim_devices(template, lambda c: has.get(device_resource(c), 0) // MILLI)
        except DeviceError:
            continue
        for device_class, count in devices.items():
            key = device_resource(device_class)
            out[key] = out.get(key, 0) + count * MILLI
    return out


# The one form of DeviceClass selector kohort evaluates: all of a driver's devices.
_DRIVER_IS = re.compile(r'\s*device\.driver\s*==\s*"([^"\\]+)"\s*')

Selects = Callable[[str], bool]


def class_selects(device_class: kube.DeviceClass) -> Selects | None:
    """Which drivers' devices a DeviceClass selects, when kohort can tell: a class without
    selectors selects every device, one whose selectors are all `device.driver == "<name>"`
    the devices of that driver (of none, when they name two). None: a selector outside that
    subset (attributes, capacity, other CEL), which the placement check cannot evaluate."""
    drivers: set[str] = set()
    for selector in device_class.spec.selectors:
        found = _DRIVER_IS.fullmatch(selector.cel.expression) if selector.cel else None
        if found is None:
            return None
        drivers.add(found.group(1))
    if not drivers:
        return lambda driver: True
    return lambda driver: drivers == {driver}


def node_devices(
    slices: Iterable[kube.ResourceSlice], classes: Mapping[str, Selects]
) -> dict[str, Requests]:
    """Node -> how many devices of each class its ResourceSlices publish, by node device
    resource, in milli-units (slices of no single node are left out)."""
    out: dict[str, Requests] = {}
    for published in slices:
        node = published.spec.node_name
        if not node:
            continue
        counts = out.setdefault(node, {})
        for device_class, selects in classes.items():
            if selects(published.spec.driver):
                key = device_resource(device_class)
                counts[key] = counts.get(key, 0) + len(published.spec.devices) * MILLI
    return out


def class_devices(nodes: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """DeviceClass -> node -> its devices, from node -> node device resource -> milli-units
    (`node_devices`' form), nodes with none left out."""
    out: dict[str, dict[str, int]] = {}
    for node, resources in nodes.items():
        for resource, amount in resources.items():
            if resource.startswith(DEVICE_RESOURCE_PREFIX) and amount >= MILLI:
                device_class = resource.removeprefix(DEVICE_RESOURCE_PREFIX)
                out.setdefault(device_class, {})[node] = amount // MILLI
    return out


def takes_all(template: kube.ResourceClaimTemplate) -> bool:
    """Whether a claim made from `template` asks for all of a node's devices of a class."""
    return any(
        r.exactly is not None and r.exactly.allocation_mode == "All"
        for r in template.spec.spec.devices.requests
    )


def _charged_pod_set(
    pod_set: PodSet,
    templates: Mapping[str, kube.ResourceClaimTemplate],
    classes: DeviceClasses,
    nodes: ClassDevices,
) -> PodSet:
    if pod_set.shared_claims:
        raise DeviceError(
            f"pod set {pod_set.name} names ResourceClaim {pod_set.shared_claims[0]} directly;"
            " kohort charges only claims made from a ResourceClaimTemplate"
        )
    if not pod_set.claim_templates:
        return pod_set
    requests = dict(pod_set.requests)
    devices: Requests = {}
    claimed: Requests = {}
    for name in pod_set.claim_templates:
        template = templates.get(name)
        if template is None:
            raise DeviceError(f"ResourceClaimTemplate {name} (pod set {pod_set.name}) not found")
        for resource, amount in claim_requests(template, classes, nodes).items():
            requests[resource] = requests.get(resource, 0) + amount
            devices[resource] = devices.get(resource, 0) + amount
        for device_class, count in claim_devices(template, _uniform(name, nodes)).items():
            key = device_resource(device_class)
            claimed[key] = claimed.get(key, 0) + count * MILLI
    return replace(pod_set, requests=requests, devices=devices, claimed=claimed)


def with_devices(
    shape: GangShape,
    templates: Mapping[str, kube.ResourceClaimTemplate],
    classes: DeviceClasses,
    nodes: ClassDevices | None = None,
) -> GangShape:
    """`shape` with each pod's claimed devices added to its requests (`templates`: those of the
    gang's namespace, by name; `nodes`: the devices each node has, for claims of all of a
    node's devices). Raises DeviceError when they cannot all be charged."""
    if not any(ps.claim_templates or ps.shared_claims for ps in shape.pod_sets):
        return shape
    pod_sets = tuple(_charged_pod_set(ps, templates, classes, nodes or {}) for ps in shape.pod_sets)
    return replace(shape, pod_sets=pod_sets)


def claims_templates(shape: GangShape) -> frozenset[str]:
    """The ResourceClaimTemplates the gang's pods name."""
    return frozenset(name for ps in shape.pod_sets for name in ps.claim_templates)
