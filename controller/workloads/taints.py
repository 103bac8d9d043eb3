"""Taints and tolerations between the API's forms and the decision core's: the one place they
are converted.

Rule: the core decides on its own dataclasses (`quota.Taint`, `quota.Toleration`). The API
holds them in two forms, for two jobs: kohort's CRDs (`controller.api.common`, pydantic:
validated, and the source of the CRDs' schema) and the views of pods and nodes
(`controller.api.kube`, msgspec: read as the apiserver holds them). A pod's own tolerations
reach the core without tolerationSeconds (matching ignores it); a ResourceFlavor's keep it,
since its pods are given them.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from controller import quota
from controller.api import common, kube

# The taint effects that keep pods away (PreferNoSchedule only discourages them).
REPELLING = ("NoSchedule", "NoExecute")


def repelling_taints(taints: Iterable[common.Taint | kube.Taint]) -> tuple[quota.Taint, ...]:
    """The taints (a node's, or those a ResourceFlavor says its nodes have) that keep away
    pods without a toleration."""
    return tuple(quota.Taint(t.key, t.value, t.effect) for t in taints if t.effect in REPELLING)


def core_toleration(toleration: common.Toleration) -> quota.Toleration:
    """A toleration a kohort object holds: a ResourceFlavor's, a Workload pod set's."""
    return quota.Toleration(
        key=toleration.key,
        operator=toleration.operator,
        value=toleration.value,
        effect=toleration.effect,
        seconds=toleration.toleration_seconds,
    )


def pod_toleration(toleration: kube.Toleration) -> quota.Toleration:
    """A pod's own toleration (an unset operator is Equal)."""
    return quota.Toleration(
        key=toleration.key,
        operator="Exists" if toleration.operator == "Exists" else "Equal",
        value=toleration.value,
        effect=toleration.effect,
    )


def _written(toleration: quota.Toleration) -> dict[str, object]:
    """A core toleration by the names both API forms read."""
    return {
        "key": toleration.key,
        "operator": toleration.operator,
        "value": toleration.value,
        "effect": toleration.effect,
        "tolerationSeconds": toleration.seconds,
    }


def workload_toleration(toleration: quota.Toleration) -> common.Toleration:
    """A toleration as a Workload's pod set records it."""
    return common.Toleration.model_validate(_written(toleration))


def view_toleration(toleration: quota.Toleration) -> kube.Toleration:
    """A toleration as a pod is given it (a ResourceFlavor's, when its gang is released)."""
    return msgspec.convert(_written(toleration), kube.Toleration)
