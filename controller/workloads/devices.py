"""The devices a gang's pods claim through Dynamic Resource Allocation, as quota resources.

Rule: a DeviceClass is charged as the quota resource the controller's configuration maps it to
(`--device-class gpu.example.com=nvidia.com/gpu`), so a pod that takes 2 GPUs through a claim
costs its queue what a pod asking for `nvidia.com/gpu: 2` does. Each pod gets its own claim
from each ResourceClaimTemplate it names; a request of a claim is counted only when its count
is certain (docs/dra.md):

- `exactly` with allocationMode ExactCount: `count` devices of the class (selectors narrow
  which devices, not how many, so they do not change the charge);
- allocationMode All (every matching device of a node), `firstAvailable` (a prioritized list of
  alternatives), `adminAccess` (devices already in use by others): not counted, so the gang
  waits and its reason says why;
- a class the configuration does not map: the gang waits, naming the class.

A pod that names a ResourceClaim directly (shared between pods) is refused by the webhook;
one that got past it holds its gang back (the claim is no template of the gang's own).
Pure: templates in, requests or a problem out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from controller.api import kube
from controller.quota.snapshot import PodSet
from controller.workloads.base import GangShape
from controller.workloads.requests import Requests

# A DeviceClass name -> the quota resource its devices are charged as.
DeviceClasses = Mapping[str, str]

MILLI = 1000


class DeviceError(ValueError):
    """Why a claim's devices cannot be charged: the text a waiting gang's reason carries."""


def _request_problem(template: str, request: kube.DeviceRequest) -> str | None:
    where = f"ResourceClaimTemplate {template} request {request.name or '?'}"
    exact = request.exactly
    if exact is None:
        if request.first_available:
            return f"{where} uses firstAvailable (a prioritized list), which kohort cannot charge"
        return f"{where} asks for no device class"
    if exact.admin_access:
        return f"{where} asks for adminAccess, which kohort cannot charge"
    if exact.allocation_mode != "ExactCount":
        return (
            f"{where} uses allocationMode {exact.allocation_mode}, whose device count kohort"
            " cannot know; ask for an exact count"
        )
    if exact.count < 1:
        return f"{where} asks for {exact.count} devices"
    return None


def claim_requests(template: kube.ResourceClaimTemplate, classes: DeviceClasses) -> Requests:
    """What one claim made from `template` is charged, in milli-units of quota resources.
    Raises DeviceError when a request cannot be counted or its class is not mapped."""
    name = template.metadata.name
    out: Requests = {}
    for request in template.spec.spec.devices.requests:
        problem = _request_problem(name, request)
        if problem is not None:
            raise DeviceError(problem)
        assert request.exactly is not None
        device_class = request.exactly.device_class_name
        resource = classes.get(device_class)
        if resource is None:
            raise DeviceError(
                f"DeviceClass {device_class} (ResourceClaimTemplate {name}) is not covered by"
                f" any quota resource; the controller's --device-class {device_class}=RESOURCE"
                " maps it"
            )
        out[resource] = out.get(resource, 0) + request.exactly.count * MILLI
    return out


def _charged_pod_set(
    pod_set: PodSet, templates: Mapping[str, kube.ResourceClaimTemplate], classes: DeviceClasses
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
    for name in pod_set.claim_templates:
        template = templates.get(name)
        if template is None:
            raise DeviceError(f"ResourceClaimTemplate {name} (pod set {pod_set.name}) not found")
        for resource, amount in claim_requests(template, classes).items():
            requests[resource] = requests.get(resource, 0) + amount
            devices[resource] = devices.get(resource, 0) + amount
    return replace(pod_set, requests=requests, devices=devices)


def with_devices(
    shape: GangShape,
    templates: Mapping[str, kube.ResourceClaimTemplate],
    classes: DeviceClasses,
) -> GangShape:
    """`shape` with each pod's claimed devices added to its requests (`templates`: those of the
    gang's namespace, by name). Raises DeviceError when they cannot all be charged."""
    if not any(ps.claim_templates or ps.shared_claims for ps in shape.pod_sets):
        return shape
    pod_sets = tuple(_charged_pod_set(ps, templates, classes) for ps in shape.pod_sets)
    return replace(shape, pod_sets=pod_sets)


def claims_templates(shape: GangShape) -> frozenset[str]:
    """The ResourceClaimTemplates the gang's pods name."""
    return frozenset(name for ps in shape.pod_sets for name in ps.claim_templates)
