"""A stand-in for cluster-autoscaler's ProvisioningRequest support with its kwok cloud provider,
for the local control plane, speaking only the real API so the real autoscaler can take its place.

    python -m hack.provisioner --kubeconfig K [--namespace kube-system] [--scan-interval 0.5]

Every scan it reads the node groups (ConfigMap `kwok-provider-templates`, key `templates`),
the nodes, the pods and the ProvisioningRequests; then it answers new requests, keeps the
bookings of provisioned ones (BookingExpired, CapacityRevoked) and removes group nodes that have
been empty long enough. The decisions are hack/provisioning.py's; this module reads and writes.
docs/autoscaled-clusters.md says what it does and what it leaves out.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import random
import string
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controller.api.quantity import QuantityError, parse_quantity
from hack import provisioning as p
from hack.rest import ApiError, RestClient

GROUP = "autoscaling.x-k8s.io"
PROVREQS = f"/apis/{GROUP}/v1/provisioningrequests"
CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
ATOMIC_SCALE_UP = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CONSUMER_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
TEMPLATES_CONFIGMAP = "kwok-provider-templates"
GROUP_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/name"
MIN_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/min-count"
MAX_ANNOTATION = "cluster-autoscaler.kwok.nodegroup/max-count"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
DEFAULT_GROUP_LABEL = "kwok-nodegroup"  # the kwok provider's usual nodegroups.fromNodeLabelKey
PROVIDER_TAINT = p.Taint("kwok-provider", "true", "NoSchedule")
# Where a Provisioned best-effort-atomic request lists the nodes made for it (comma-separated).
# The real autoscaler gives no such detail: consumers must not depend on it.
NODES_DETAIL = "nodes"
_NAME_CHARS = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class Flags:
    namespace: str = "kube-system"
    group_label_key: str = DEFAULT_GROUP_LABEL
    scan_interval: float = 1.0
    booking_time: dt.timedelta = dt.timedelta(minutes=10)
    scale_down_unneeded_time: dt.timedelta = dt.timedelta(minutes=10)
    skip_taint: bool = False


def log(message: str) -> None:
    stamp = dt.datetime.now(dt.UTC).strftime("%H:%M:%S")
    print(f"[provisioner {stamp}] {message}", file=sys.stderr, flush=True)


# ---- reading objects ----------------------------------------------------------------------------


def _resources(values: Mapping[str, Any] | None) -> dict[str, int]:
    out = {}
    for key, value in (values or {}).items():
        try:
            out[key] = parse_quantity(value)
        except QuantityError:
            continue
    return out


def _taints(spec: Mapping[str, Any]) -> tuple[p.Taint, ...]:
    return tuple(
        p.Taint(t["key"], t.get("value", ""), t.get("effect", "NoSchedule"))
        for t in spec.get("taints") or []
    )


def pod_shape(spec: Mapping[str, Any], pod_set: str = "") -> p.PodShape:
    """What a pod spec asks of a node: its effective requests (the containers' sum, or the
    largest init container's if bigger, plus overhead), selector, required affinity, tolerations."""
    requests: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for key, value in _resources((container.get("resources") or {}).get("requests")).items():
            requests[key] = requests.get(key, 0) + value
    for container in spec.get("initContainers") or []:
        for key, value in _resources((container.get("resources") or {}).get("requests")).items():
            requests[key] = max(requests.get(key, 0), value)
    for key, value in _resources(spec.get("overhead")).items():
        requests[key] = requests.get(key, 0) + value
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    terms = tuple(
        tuple(
            p.Requirement(e["key"], e["operator"], tuple(e.get("values") or ()))
            for e in term.get("matchExpressions") or []
        )
        for term in required
    )
    tolerations = tuple(
        p.Toleration(
            t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", "")
        )
        for t in spec.get("tolerations") or []
    )
    return p.PodShape(
        {k: v for k, v in requests.items() if v > 0},
        dict(spec.get("nodeSelector") or {}),
        terms,
        tolerations,
        pod_set,
    )


@dataclass(frozen=True)
class Template:
    group: p.NodeGroup
    node: Mapping[str, Any]  # the template Node as written in the ConfigMap


def read_templates(configmap: Mapping[str, Any] | None, label_key: str) -> list[Template]:
    """The node groups of the kwok provider's templates ConfigMap (a v1 List of Nodes, each
    naming its group by the label `label_key`); templates without that label are skipped, as the
    kwok provider leaves them out."""
    text = ((configmap or {}).get("data") or {}).get("templates") or ""
    parsed = yaml.safe_load(text) if text else None
    items = (parsed or {}).get("items") or [] if isinstance(parsed, dict) else []
    templates = []
    for node in items:
        meta = node.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        name = labels.get(label_key)
        if not name:
            continue
        annotations = meta.get("annotations") or {}
        status = node.get("status") or {}
        try:
            bounds = (
                int(annotations.get(MIN_ANNOTATION, 0)),
                int(annotations.get(MAX_ANNOTATION, 200)),
            )
        except ValueError:
            log(f"node group {name} left out: its min-count or max-count is not a whole number")
            continue
        group = p.NodeGroup(
            name=name,
            labels=labels,
            taints=_taints(node.get("spec") or {}),
            allocatable=_resources(status.get("allocatable") or status.get("capacity")),
            min_count=bounds[0],
            max_count=bounds[1],
        )
        templates.append(Template(group, node))
    return templates


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ready and not (node.get("spec") or {}).get("unschedulable", False)


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    c = _condition(obj, kind)
    return c is not None and c.get("status") == "True"


def _key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _arrived(pod: Mapping[str, Any]) -> bool:
    """Whether a bound consumer took its request's capacity: any pod not being deleted."""
    return not (pod.get("metadata") or {}).get("deletionTimestamp")


def _counts(pod: Mapping[str, Any]) -> bool:
    """Whether a pod holds its node: not terminated, and neither a DaemonSet nor a mirror pod."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    if any(o.get("kind") == "DaemonSet" for o in owners):
        return False
    return "kubernetes.io/config.mirror" not in ((pod["metadata"].get("annotations")) or {})


# ---- the provisioner ----------------------------------------------------------------------------


@dataclass
class Scan:
    """One scan's view of the cluster."""

    templates: list[Template]
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    requests: list[dict[str, Any]]

    def replace(self, request: dict[str, Any]) -> None:
        self.requests = [request if _key(r) == _key(request) else r for r in self.requests]

    def group_of(self, node: Mapping[str, Any]) -> str | None:
        name: str | None = (node["metadata"].get("annotations") or {}).get(GROUP_ANNOTATION)
        return name

    def sizes(self) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for node in self.nodes:
            group = self.group_of(node)
            if group:
                sizes[group] = sizes.get(group, 0) + 1
        return sizes

    def rooms(self, *, ready_only: bool) -> list[p.Room]:
        """Each node's allocatable less the requests of the pods bound there."""
        used: dict[str, dict[str, int]] = {}
        for pod in self.pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            mine = used.setdefault(node, {})
            for key, value in pod_shape(pod["spec"]).demand().items():
                mine[key] = mine.get(key, 0) + value
        rooms = []
        for node in self.nodes:
            if node["metadata"].get("deletionTimestamp") or (ready_only and not _ready(node)):
                continue
            free = _resources(node.get("status", {}).get("allocatable"))
            for key, value in used.get(node["metadata"]["name"], {}).items():
                free[key] = free.get(key, 0) - value
            meta = node["metadata"]
            rooms.append(
                p.Room(meta["name"], meta.get("labels") or {}, _taints(node["spec"]), free)
            )
        return rooms


@dataclass
class Provisioner:
    rest: RestClient
    flags: Flags = field(default_factory=Flags)
    # When each group node was first seen empty; the nodes this provisioner deleted itself.
    empty_since: dict[str, dt.datetime] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)

    def read(self) -> Scan:
        try:
            configmap = self.rest.get(
                f"/api/v1/namespaces/{self.flags.namespace}/configmaps/{TEMPLATES_CONFIGMAP}"
            )
        except ApiError as err:
            if err.status != 404:
                raise
            configmap = None
        return Scan(
            read_templates(configmap, self.flags.group_label_key),
            self.rest.get("/api/v1/nodes")["items"],
            self.rest.get("/api/v1/pods")["items"],
            self.rest.get(PROVREQS)["items"],
        )

    def scan_once(self, now: dt.datetime | None = None) -> None:
        now = now or dt.datetime.now(dt.UTC)
        scan = self.read()
        scan.requests.sort(key=lambda r: str(r["metadata"]["creationTimestamp"]))
        # Finished requests hold nothing: their PodTemplates are not read again.
        pods_of = {_key(r): self._pods(r) for r in scan.requests if not self._finished(r)}
        for request in list(scan.requests):
            if _true(request, "Provisioned") and not self._finished(request):
                scan.replace(self._keep_booking(scan, request, now))
        for request in list(scan.requests):
            if _key(request) in pods_of and not _true(request, "Provisioned"):
                self._answer(scan, request, pods_of, now)
        self._scale_down(scan, self._bookings(scan, pods_of), now)

    # -- requests --

    def _pods(self, request: Mapping[str, Any]) -> list[p.PodShape] | str:
        """The request's pods (PodTemplate x count), or why they cannot be read."""
        namespace = request["metadata"]["namespace"]
        shapes: list[p.PodShape] = []
        for pod_set in request["spec"].get("podSets") or []:
            name = pod_set["podTemplateRef"]["name"]
            try:
                template = self.rest.get(f"/api/v1/namespaces/{namespace}/podtemplates/{name}")
            except ApiError as err:
                if err.status == 404:
                    return f"PodTemplate {namespace}/{name} does not exist"
                raise
            spec = (template.get("template") or {}).get("spec") or {}
            shapes += [pod_shape(spec, name)] * int(pod_set.get("count", 1))
        return shapes

    def _finished(self, request: Mapping[str, Any]) -> bool:
        return any(_true(request, c) for c in ("Failed", "BookingExpired", "CapacityRevoked"))

    def _bookings(
        self, scan: Scan, pods_of: Mapping[str, list[p.PodShape] | str]
    ) -> list[p.Booking]:
        """What Provisioned requests whose booking holds still hold: their pods not bound yet."""
        bound: dict[str, int] = {}
        for pod in scan.pods:
            meta = pod["metadata"]
            consumes = (meta.get("annotations") or {}).get(CONSUMER_ANNOTATION)
            # (one that ran and finished arrived too: its capacity is no longer awaited)
            if consumes and (pod.get("spec") or {}).get("nodeName") and _arrived(pod):
                key = f"{meta.get('namespace', '')}/{consumes}"
                bound[key] = bound.get(key, 0) + 1
        bookings = []
        for request in scan.requests:
            shapes = pods_of.get(_key(request))
            if (
                not _true(request, "Provisioned")
                or self._finished(request)
                or not isinstance(shapes, list)
            ):
                continue
            waiting = p.not_arrived(shapes, bound.get(_key(request), 0))
            if waiting:
                bookings.append(p.Booking(_key(request), waiting, tuple(_new_nodes(request))))
        return bookings

    def _keep_booking(
        self, scan: Scan, request: dict[str, Any], now: dt.datetime
    ) -> dict[str, Any]:
        """Expire the booking of a Provisioned request, or revoke it if its nodes went; the
        request as it is now."""
        provisioned = _condition(request, "Provisioned") or {}
        since = _parse_time(str(provisioned.get("lastTransitionTime")))
        if not p.booking_holds(since, now, self.flags.booking_time):
            held_for = _seconds(self.flags.booking_time)
            log(f"request {_key(request)}: booking expired after {held_for}")
            expired = ("BookingExpired", "True", "BookingExpired", f"capacity booked {held_for}")
            return self._set(request, now, expired)
        existing = {n["metadata"]["name"] for n in scan.nodes}
        gone = [n for n in _new_nodes(request) if n not in existing and n not in self.deleted]
        if not gone:
            return request
        message = f"node(s) {', '.join(gone)} made for the request were deleted"
        log(f"request {_key(request)}: capacity revoked: {message}")
        return self._set(request, now, ("CapacityRevoked", "True", "CapacityRevoked", message))

    def _answer(
        self,
        scan: Scan,
        request: dict[str, Any],
        pods_of: Mapping[str, list[p.PodShape] | str],
        now: dt.datetime,
    ) -> None:
        klass = request["spec"].get("provisioningClassName")
        shapes = pods_of[_key(request)]
        if klass not in (CHECK_CAPACITY, ATOMIC_SCALE_UP):
            supported = f"{CHECK_CAPACITY} and {ATOMIC_SCALE_UP}"
            message = f"provisioning class {klass!r} is not supported (only {supported})"
            scan.replace(self._fail(request, now, "UnsupportedClass", message))
            return
        if isinstance(shapes, str):
            scan.replace(self._fail(request, now, "PodTemplateNotFound", shapes))
            return
        if not _true(request, "Accepted"):
            accepted = ("Accepted", "True", "Accepted", "the request is being processed")
            request = self._set(request, now, accepted)
        rooms = scan.rooms(ready_only=True)
        p.book(rooms, self._bookings(scan, pods_of))
        left = p.place_all(p.sized(shapes), rooms)
        if klass == CHECK_CAPACITY:
            scan.replace(self._check_capacity(request, now, shapes, left))
            return
        choice = p.choose_scale_up(left, [t.group for t in scan.templates], scan.sizes())
        if isinstance(choice, p.NoScaleUp):
            scan.replace(self._fail(request, now, choice.reason, choice.message))
            return
        names = self._create_nodes(scan, choice)
        if names:
            message = f"{len(names)} new node(s) of group {choice.group}: {', '.join(names)}"
        else:
            message = "the pods fit on the Ready nodes' free capacity"
        details = {NODES_DETAIL: ",".join(names)}
        provisioned = ("Provisioned", "True", "CapacityIsProvisioned", message)
        log(f"request {_key(request)}: provisioned: {message}")
        scan.replace(self._set(request, now, provisioned, details, guarded=False))

    def _check_capacity(
        self,
        request: dict[str, Any],
        now: dt.datetime,
        shapes: Sequence[p.PodShape],
        left: Sequence[p.PodShape],
    ) -> dict[str, Any]:
        if not left:
            message = f"{len(shapes)} pod(s) fit on the Ready nodes' free capacity"
            log(f"request {_key(request)}: provisioned: {message}")
            return self._set(request, now, ("Provisioned", "True", "CapacityIsFound", message))
        message = p.missing_message(shapes, left)
        if (_condition(request, "Provisioned") or {}).get("message") == message:
            return request
        log(f"request {_key(request)}: not provisioned: {message}")
        return self._set(request, now, ("Provisioned", "False", "CapacityIsNotFound", message))

    def _create_nodes(self, scan: Scan, choice: p.ScaleUp) -> list[str]:
        if not choice.count:
            return []
        template = next(t for t in scan.templates if t.group.name == choice.group)
        names = []
        for _ in range(choice.count):
            node = new_node(template, choice.group, add_taint=not self.flags.skip_taint)
            created = self.rest.create("/api/v1/nodes", node)
            scan.nodes.append(created)
            names.append(node["metadata"]["name"])
            log(f"node {names[-1]} created in group {choice.group}")
        return names

    def _fail(
        self, request: dict[str, Any], now: dt.datetime, reason: str, message: str
    ) -> dict[str, Any]:
        log(f"request {_key(request)}: failed: {message}")
        return self._set(request, now, ("Failed", "True", reason, message))

    def _set(
        self,
        request: dict[str, Any],
        now: dt.datetime,
        condition: tuple[str, str, str, str],
        details: Mapping[str, str] | None = None,
        *,
        guarded: bool = True,
    ) -> dict[str, Any]:
        """Write one condition (and class details) to the request's status; the updated request.

        Guarded writes fail on a request changed since it was read (the next scan decides again);
        the answer after nodes were made is not guarded, or a conflict would make them twice."""
        kind, status, reason, message = condition
        conditions = [
            c
            for c in (request.get("status") or {}).get("conditions") or []
            if c.get("type") != kind
        ]
        old = _condition(request, kind)
        changed = old is None or old.get("status") != status
        conditions.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message[:32768],
                "observedGeneration": request["metadata"].get("generation", 1),
                "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ")
                if changed or old is None
                else old["lastTransitionTime"],
            }
        )
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": request["metadata"]["resourceVersion"]}
            if guarded
            else {},
            "status": {"conditions": conditions},
        }
        if details is not None:
            patch["status"]["provisioningClassDetails"] = dict(details)
        meta = request["metadata"]
        path = f"/apis/{GROUP}/v1/namespaces/{meta['namespace']}/provisioningrequests/"
        path += f"{meta['name']}/status"
        updated: dict[str, Any] = self.rest.patch(path, patch)
        return updated

    # -- scale down --

    def _scale_down(self, scan: Scan, bookings: Sequence[p.Booking], now: dt.datetime) -> None:
        busy = {
            pod["spec"]["nodeName"]
            for pod in scan.pods
            if (pod.get("spec") or {}).get("nodeName") and _counts(pod)
        }
        nodes = []
        for node in scan.nodes:
            group = scan.group_of(node)
            if group and not node["metadata"].get("deletionTimestamp"):
                nodes.append(
                    p.GroupNode(node["metadata"]["name"], group, node["metadata"]["name"] in busy)
                )
        # The nodes holding booked pods stay, and so do the nodes made for a request whose
        # booking holds, even before they are Ready. A node's unneeded time runs only while it
        # is neither busy nor held.
        held = p.book(scan.rooms(ready_only=False), bookings)
        for booking in bookings:
            held.update(booking.nodes)
        self.empty_since = {
            n.name: self.empty_since.get(n.name, now)
            for n in nodes
            if not n.busy and n.name not in held
        }
        groups = [t.group for t in scan.templates]
        unneeded = self.flags.scale_down_unneeded_time
        for name in p.scale_down(nodes, self.empty_since, now, unneeded, held, groups):
            self.rest.delete(f"/api/v1/nodes/{name}")
            self.deleted.add(name)
            log(f"node {name} removed: empty for {_seconds(unneeded)} or more")

    def run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.scan_once()
            except (ApiError, OSError, yaml.YAMLError) as err:
                log(f"scan failed, retrying: {err}")
            time.sleep(max(0.0, self.flags.scan_interval - (time.monotonic() - started)))


def _new_nodes(request: Mapping[str, Any]) -> list[str]:
    text = ((request.get("status") or {}).get("provisioningClassDetails") or {}).get(
        NODES_DETAIL, ""
    )
    return [n for n in str(text).split(",") if n]


def _seconds(delta: dt.timedelta) -> str:
    return f"{delta.total_seconds():g}s"


def new_node(template: Template, group: str, *, add_taint: bool) -> dict[str, Any]:
    """A Node of the template's shape, named `<group>-<5 random characters>`, for kwok to run."""
    name = f"{group}-{''.join(random.choices(_NAME_CHARS, k=5))}"
    meta = template.node.get("metadata") or {}
    status = template.node.get("status") or {}
    taints = [dict(t) for t in (template.node.get("spec") or {}).get("taints") or []]
    if add_taint:
        taints.append(
            {
                "key": PROVIDER_TAINT.key,
                "value": PROVIDER_TAINT.value,
                "effect": PROVIDER_TAINT.effect,
            }
        )
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k not in (MIN_ANNOTATION, MAX_ANNOTATION)
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**(meta.get("labels") or {}), "kubernetes.io/hostname": name},
            "annotations": {**annotations, KWOK_NODE_ANNOTATION: "fake", GROUP_ANNOTATION: group},
        },
        "spec": {"providerID": f"kwok:{name}", "taints": taints},
        "status": {
            "capacity": dict(status.get("capacity") or status.get("allocatable") or {}),
            "allocatable": dict(status.get("allocatable") or status.get("capacity") or {}),
        },
    }


# ---- command line -------------------------------------------------------------------------------


def rest_client(kubeconfig: Path) -> RestClient:
    """A client for the kubeconfig's current context (client certificates, by file or inline)."""
    config = yaml.safe_load(kubeconfig.read_text())
    context_name = config.get("current-context")
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    scratch = Path(tempfile.mkdtemp(prefix="kohort-provisioner-"))

    def file(entry: Mapping[str, Any], key: str) -> Path | None:
        if entry.get(key):
            return Path(entry[key])
        if entry.get(f"{key}-data"):
            path = scratch / key
            path.write_bytes(base64.b64decode(entry[f"{key}-data"]))
            return path
        return None

    ca = file(cluster, "certificate-authority")
    if ca is None:
        raise SystemExit("the kubeconfig's cluster has no certificate-authority")
    return RestClient(
        cluster["server"], ca, file(user, "client-certificate"), file(user, "client-key")
    )


def parse_args(argv: Sequence[str]) -> tuple[Path, Flags]:
    parser = argparse.ArgumentParser(
        prog="python -m hack.provisioner",
        description="A stand-in cluster-autoscaler for ProvisioningRequests (kwok node groups).",
    )
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument(
        "--namespace",
        default="kube-system",
        help="where the templates ConfigMap is (default: %(default)s)",
    )
    parser.add_argument(
        "--group-label-key",
        default=DEFAULT_GROUP_LABEL,
        help="the template label naming a node's group (the kwok provider's"
        " nodegroups.fromNodeLabelKey; default: %(default)s)",
    )
    parser.add_argument(
        "--scan-interval",
        type=float,
        default=1.0,
        help="seconds between scans (default: %(default)s)",
    )
    parser.add_argument(
        "--booking-time",
        type=float,
        default=600.0,
        help="seconds a Provisioned request holds its capacity (default: %(default)s)",
    )
    parser.add_argument(
        "--scale-down-unneeded-time",
        type=float,
        default=600.0,
        help="seconds a group node must be empty before it is removed (default: %(default)s)",
    )
    parser.add_argument(
        "--skip-taint",
        action="store_true",
        help="do not taint new nodes kwok-provider=true:NoSchedule (the kwok provider"
        " taints them unless its nodes.skipTaint is set)",
    )
    args = parser.parse_args(argv)
    return args.kubeconfig, Flags(
        namespace=args.namespace,
        group_label_key=args.group_label_key,
        scan_interval=args.scan_interval,
        booking_time=dt.timedelta(seconds=args.booking_time),
        scale_down_unneeded_time=dt.timedelta(seconds=args.scale_down_unneeded_time),
        skip_taint=args.skip_taint,
    )


def main(argv: Sequence[str] | None = None) -> int:
    kubeconfig, flags = parse_args(sys.argv[1:] if argv is None else argv)
    rest = rest_client(kubeconfig)
    log(
        f"watching {rest.server} every {flags.scan_interval:g}s"
        f" (templates: {flags.namespace}/{TEMPLATES_CONFIGMAP})"
    )
    try:
        Provisioner(rest, flags).run()
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
