"""A DRA driver of the local control plane's own, reduced to what the scheduler reads: for each
kwok node that asks for it, a ResourceSlice of GPU devices, and one DeviceClass that selects
them.

Kubernetes 1.35 serves resource.k8s.io/v1 with Dynamic Resource Allocation on by default:
kube-controller-manager makes each pod's ResourceClaims from its templates and kube-scheduler
allocates them from these slices while it binds the pod. Nothing runs on the nodes (kwok fakes
the kubelet), so no device is ever prepared: the slices only say what exists.
"""

from __future__ import annotations

from typing import Any

# The driver that publishes the slices, and the DeviceClass of its devices (same name).
DRIVER = "gpu.kohort.dev"
DEVICE_CLASS = "gpu.kohort.dev"
RESOURCE_API = "resource.k8s.io/v1"
DEVICE_CLASSES_PATH = f"/apis/{RESOURCE_API}/deviceclasses"
RESOURCE_SLICES_PATH = f"/apis/{RESOURCE_API}/resourceslices"


def device_class() -> dict[str, Any]:
    """The DeviceClass of the driver's GPUs: every device the driver publishes."""
    return {
        "apiVersion": RESOURCE_API,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def resource_slice(node: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The ResourceSlice of `gpus` devices (gpu-0, gpu-1, ...) on the Node object `node`,
    owned by it so that it goes when the node goes."""
    name = node["metadata"]["name"]
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(name),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": name,
                    "uid": node["metadata"]["uid"],
                }
            ],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(gpus)
            ],
        },
    }
