"""What the webhook is configured with: the gang backend and the controller's identity."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from controller.api import names
from controller.workloads.base import Placement
from webhook.reviews import UserInfo

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
DEFAULT_CONTROLLER_SERVICE_ACCOUNT = "kohort-system:kohort-controller"


@dataclass(frozen=True)
class ControllerIdentity:
    """The users and groups allowed to release a held gang (kohort's controller)."""

    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls,
        *,
        users: Iterable[str] = (),
        groups: Iterable[str] = (),
        service_accounts: Iterable[str] = (),
    ) -> ControllerIdentity:
        """`service_accounts` are `namespace:name` (or `namespace/name`)."""
        accounts = {SERVICE_ACCOUNT_PREFIX + sa.replace("/", ":", 1) for sa in service_accounts}
        return cls(frozenset(users) | accounts, frozenset(groups))

    def matches(self, user: UserInfo) -> bool:
        return user.username in self.users or not self.groups.isdisjoint(user.groups)


# Who creates a Job's pods: the Job controller's own ServiceAccount, or the whole
# kube-controller-manager on clusters that do not give each controller its own credentials.
JOB_CONTROLLERS = frozenset(
    {"system:serviceaccount:kube-system:job-controller", "system:kube-controller-manager"}
)


# Who makes the objects of the workloads kohort holds through their owner (a JobSet's Jobs, a
# LeaderWorkerSet's StatefulSets) and the pods of the operators that make pods themselves
# (PyTorchJob, RayCluster): the controllers' ServiceAccounts as their releases install them,
# and the kube-controller-manager, whose garbage collector edits ownerReferences.
WORKLOAD_CONTROLLERS = frozenset(
    {
        "system:serviceaccount:lws-system:lws-controller-manager",
        "system:serviceaccount:jobset-system:jobset-controller-manager",
        "system:serviceaccount:kubeflow:training-operator",
        "system:serviceaccount:ray-system:kuberay-operator",
        "system:serviceaccount:default:kuberay-operator",
        "system:serviceaccount:kube-system:generic-garbage-collector",
        "system:kube-controller-manager",
    }
)


@dataclass(frozen=True)
class Settings:
    placement: Placement = field(default_factory=Placement)
    # The Volcano queue the controller puts its PodGroups in: nobody else may use it.
    volcano_queue: str | None = names.VOLCANO_QUEUE
    # Who may create a Job's pods without the admission gate.
    job_controllers: frozenset[str] = JOB_CONTROLLERS
    # Who may create and change objects (and operators' pods) that name a managed workload as
    # their controller.
    workload_controllers: frozenset[str] = WORKLOAD_CONTROLLERS
    controller: ControllerIdentity = field(
        default_factory=lambda: ControllerIdentity.of(
            service_accounts=[DEFAULT_CONTROLLER_SERVICE_ACCOUNT]
        )
    )
