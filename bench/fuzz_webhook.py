"""Fuzz the running webhook over HTTPS: generated reviews and objects, no 5xx, no crash.

    .venv/bin/python bench/fuzz_webhook.py [--count 10000] [--seed 1] [--concurrency 16]
                                           [--backend volcano] [--strict] [--save-failures DIR]

Starts the real server the way users run it, as its own process: `kohort certs generate`
writes a fresh CA and serving pair to a temporary directory, `kohort webhook --cert-dir` serves
them on 127.0.0.1. Then `--count` POSTs go over HTTPS (the client verifies the server with that
CA) to the four admission paths. The bodies come from a seeded generator (`generate`), so one
seed always gives the same requests: reviews of every kind kohort routes (Job, StatefulSet,
LeaderWorkerSet, Pod, the kohort.dev quota objects) and of a Volcano PodGroup, for CREATE,
UPDATE and DELETE, often mutated (members removed, nulled, retyped, moved; negative and huge
numbers; odd kohort.dev labels; unicode; deep nesting), with broken review envelopes, and
bodies that are not reviews at all (truncated JSON, arrays, empty, invalid UTF-8, over 3 MiB).

Checks (the exit code is 1 when one fails):
- every answer is a 200 carrying an AdmissionReview that echoes the request's uid, or a 400
  with a plain-text reason; never a 5xx, never a request left without an answer;
- every refusal (`allowed: false`) carries a non-empty `status.message`;
- at the end the server process is still running and answers /healthz on both ports.
With `--strict`, also:
- no refusal is the server's catch-all "could not decide" (an exception it caught and logged);
- every patch of an allowed answer applies to the object it was computed for;
- the server logged no ERROR.
Told but never a failure: bodies that are not well-formed JSON reviews yet were answered 200.
The table at the end counts all of these; `--save-failures DIR` writes the bodies behind them,
and `generate(seed, count)[index]` gives any request again.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import itertools
import json
import random
import signal
import socket
import ssl
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.api import kinds, names
from tests.fakes.workloads import make_job, make_lws, make_pod, make_statefulset
from webhook.reviews import API_VERSION, KIND
from webhook.server import (
    MAX_BODY,
    MUTATE_DEFAULT_QUEUE_PATH,
    MUTATE_PATH,
    VALIDATE_DEFAULT_QUEUE_PATH,
    VALIDATE_PATH,
)

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
PATHS = (MUTATE_PATH, MUTATE_DEFAULT_QUEUE_PATH, VALIDATE_PATH, VALIDATE_DEFAULT_QUEUE_PATH)
# The answer of the server's catch-all: an exception in a decision, caught and logged.
UNDECIDED = "could not decide"
CONTROLLER_USER = "system:serviceaccount:kohort-system:kohort-controller"
JSONDict = dict[str, Any]

# --- the generator -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    """One request: where it goes, its body, and the uid a review answer must echo."""

    index: int
    path: str
    body: bytes
    # The request.uid a 200 must echo; None when the body holds no answerable uid.
    uid: str | None
    what: str
    # False: the body is not even JSON of a review (truncated, an array, invalid UTF-8, ...).
    well_formed: bool = True
    content_type: str = "application/json"


QUEUES = (None, None, "research", "default", "team-a", "q-" + "x" * 60)
NAMESPACES = ("team-a", "team-b", "default", "kube-system", "")
STRANGE_TEXTS = (
    "",
    " ",
    "true",
    "TRUE",
    "True",
    "false",
    "yes",
    "0",
    "-1",
    "1e3",
    "99999999999999999999999",
    "NaN",
    "default",
    "../../etc",
    "a" * 63,
    "a" * 64,
    "a" * 5000,
    "队列",
    "\uff51\uff55\uff45\uff55\uff45",  # "queue" in fullwidth letters
    "🚀-gang",
    "\u202egnag",
    "e\u0301",
    "tab\there",
    "new\nline",
    "nul\u0000byte",
    "\ud800",  # a lone surrogate: not UTF-8 (raw), or an escape JSON decoders refuse
    "kohort.dev/admission",
    "job-train",
    "pod-",
)
STRANGE_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    1.5,
    -0.0,
    2**63,
    2**64 + 1,
    10**40,
    1e308,
    [],
    ["research"],
    {},
    {"name": "research"},
    [[[]]],
)
LABEL_KEYS = (
    names.QUEUE_LABEL,
    names.QUEUE_LABEL,
    names.OPT_OUT_LABEL,
    names.POD_GROUP_LABEL,
    "kohort.dev/pod-group-total-count",
    names.MANAGED_LABEL,
    names.NAMESPACE_OPT_IN_LABEL,
    names.LWS_NAME_LABEL,
    names.LWS_GROUP_INDEX_LABEL,
    names.LWS_WORKER_INDEX_LABEL,
    "",
    "kohort.dev/",
    "Kohort.dev/Queue-Name",
    "kohort.dev/queue-name ",
    "队列/名字",
    "a~b/c",
)
COUNT_FIELDS = (
    ("spec", "parallelism"),
    ("spec", "completions"),
    ("spec", "replicas"),
    ("spec", "leaderWorkerTemplate", "size"),
    ("spec", "podSets", 0, "count"),
    ("spec", "minMember"),
    ("spec", "priority"),
    ("spec", "preemption", "minimumRuntimeSeconds"),
    ("metadata", "labels", "kohort.dev/pod-group-total-count"),
)
NEGATIVE = (-1, -2, -(2**31), -(2**63), -(2**64), -1.5, -1e308)
HUGE = (2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30, 10**400, 1e308, 4.0, 2.5, "4", "")
QUANTITIES: tuple[Any, ...] = (
    "lots",
    "-1",
    "1e999",
    "0.0000001",
    "  1",
    "1Ki",
    "",
    "1..5",
    1.5,
    -3,
    None,
    [],
)
GATES: tuple[Any, ...] = (
    [{"name": names.ADMISSION_GATE}],
    [{"name": names.ADMISSION_GATE}, {"name": names.ADMISSION_GATE}],
    [names.ADMISSION_GATE],
    [{"name": None}],
    [{"name": 5}],
    [{}],
    [None],
    {"name": names.ADMISSION_GATE},
    [],
    None,
    "kohort.dev/admission",
)
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _name(rng: random.Random) -> str:
    return rng.choice(("train", "serve", "llm", "worker-0", "x" * 70, "a-b-c", "n"))


def _extra_labels(rng: random.Random) -> dict[str, str]:
    extra: dict[str, str] = {}
    if rng.random() < 0.1:
        extra[names.OPT_OUT_LABEL] = rng.choice(("true", "false", "True", ""))
    if rng.random() < 0.1:
        extra[names.POD_GROUP_LABEL] = rng.choice(("job-train", "pg", "x" * 70))
    if rng.random() < 0.05:
        extra["kohort.dev/pod-group-total-count"] = rng.choice(("4", "0", "-1", "four"))
    return extra


def _pod_fields(rng: random.Random) -> dict[str, Any]:
    return {
        "cpu": rng.choice(("100m", "1", "2.5", None)),
        "memory": rng.choice(("1Gi", "512Mi", None)),
        "gpus": rng.choice((0, 0, 1, 8)),
        "scheduler_name": rng.choice((None, None, "default-scheduler", "volcano", "mine")),
        "gates": rng.choice(((), (), (names.ADMISSION_GATE,), ("x.io/wait", names.ADMISSION_GATE))),
    }


def _job(rng: random.Random) -> JSONDict:
    return make_job(
        _name(rng),
        namespace=rng.choice(NAMESPACES),
        queue=rng.choice(QUEUES),
        parallelism=rng.choice((None, 0, 1, 4, 8, 64)),
        completions=rng.choice((None, 0, 1, 4, 8, 64)),
        suspend=rng.choice((None, True, True, False)),
        labels=_extra_labels(rng),
        **_pod_fields(rng),
    )


def _statefulset(rng: random.Random) -> JSONDict:
    sts = make_statefulset(
        _name(rng),
        namespace=rng.choice(NAMESPACES),
        queue=rng.choice(QUEUES),
        replicas=rng.choice((None, 0, 1, 3, 16)),
        policy=rng.choice((None, "Parallel", "OrderedReady")),
        labels=_extra_labels(rng),
        **_pod_fields(rng),
    )
    if rng.random() < 0.2:
        applied = {"spec": {"podManagementPolicy": rng.choice(("OrderedReady", "Parallel"))}}
        sts["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(applied)}
    return sts


def _lws(rng: random.Random) -> JSONDict:
    return make_lws(
        _name(rng),
        namespace=rng.choice(NAMESPACES),
        queue=rng.choice(QUEUES),
        replicas=rng.choice((0, 1, 2, 4)),
        size=rng.choice((1, 2, 4, 8)),
        leader=rng.random() < 0.7,
        **_pod_fields(rng),
    )


def _pod(rng: random.Random) -> JSONDict:
    extra = _extra_labels(rng)
    if rng.random() < 0.3:
        extra[names.LWS_NAME_LABEL] = "llm"
        if rng.random() < 0.8:
            extra[names.LWS_GROUP_INDEX_LABEL] = rng.choice(("0", "1", "17", "-1", "x"))
    return make_pod(
        _name(rng),
        namespace=rng.choice(NAMESPACES),
        queue=rng.choice(QUEUES),
        labels=extra,
        owner_kind=rng.choice((None, None, "Job", "StatefulSet", "ReplicaSet")),
        **_pod_fields(rng),
    )


def _kohort_object(kind: str, name: str, spec: JSONDict | None, namespace: str = "") -> JSONDict:
    meta: JSONDict = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    obj: JSONDict = {"apiVersion": names.API_VERSION, "kind": kind, "metadata": meta}
    if spec is not None:
        obj["spec"] = spec
    return obj


def _cluster_queue(rng: random.Random) -> JSONDict:
    resources = [
        {"name": "cpu", "nominalQuota": rng.choice(("32", "500m", 64))},
        {"name": "memory", "nominalQuota": "256Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": "8", "borrowingLimit": "8", "lendingLimit": "4"},
    ]
    spec: JSONDict = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [{"name": "default-flavor", "resources": resources}],
            }
        ],
        "preemption": {
            "reclaimWithinCohort": rng.choice(("Never", "LowerPriority", "Any")),
            "withinClusterQueue": rng.choice(("Never", "LowerPriority")),
            "minimumRuntimeSeconds": rng.choice((0, 60)),
        },
        "fairSharing": {"weight": rng.choice(("1", "2", "0.5"))},
        "queueingStrategy": rng.choice(("StrictFIFO", "BestEffortFIFO")),
    }
    if rng.random() < 0.7:
        spec["cohort"] = "research"
    if rng.random() < 0.3:
        spec["namespaceSelector"] = {"team": "a"}
    return _kohort_object("ClusterQueue", rng.choice(("team-a", "team-b")), spec)


def _local_queue(rng: random.Random) -> JSONDict:
    spec = {"clusterQueue": rng.choice(("team-a", "team-b"))}
    return _kohort_object("LocalQueue", "default", spec, rng.choice(NAMESPACES[:3]))


def _resource_flavor(rng: random.Random) -> JSONDict:
    spec: JSONDict = {}
    if rng.random() < 0.6:
        spec["nodeLabels"] = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
        spec["nodeTaints"] = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    return _kohort_object("ResourceFlavor", "gpu-a100", spec or None)


def _workload(rng: random.Random) -> JSONDict:
    pod_sets = [
        {"name": "main", "count": rng.choice((1, 4, 8)), "requests": {"cpu": "1", "memory": "1Gi"}}
    ]
    if rng.random() < 0.3:
        pod_sets.append({"name": "leader", "count": 1, "requests": {"nvidia.com/gpu": "8"}})
    spec = {"queueName": "default", "priority": rng.choice((0, 100, -5)), "podSets": pod_sets}
    return _kohort_object("Workload", "job-train", spec, "team-a")


def _pod_group(rng: random.Random) -> JSONDict:
    return {
        "apiVersion": kinds.VOLCANO_PODGROUPS.api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": "job-train",
            "namespace": "team-a",
            "labels": {names.MANAGED_LABEL: names.MANAGED_VALUE},
        },
        "spec": {
            "minMember": rng.choice((1, 4, 8)),
            "queue": "default",
            "minResources": {"cpu": "4", "nvidia.com/gpu": "8"},
        },
    }


KINDS: dict[str, tuple[kinds.Kind, Callable[[random.Random], JSONDict]]] = {
    "Job": (kinds.JOBS, _job),
    "StatefulSet": (kinds.STATEFULSETS, _statefulset),
    "LeaderWorkerSet": (kinds.LEADERWORKERSETS, _lws),
    "Pod": (kinds.PODS, _pod),
    "ClusterQueue": (kinds.CLUSTER_QUEUES, _cluster_queue),
    "LocalQueue": (kinds.LOCAL_QUEUES, _local_queue),
    "ResourceFlavor": (kinds.RESOURCE_FLAVORS, _resource_flavor),
    "Workload": (kinds.WORKLOADS, _workload),
    "PodGroup": (kinds.VOLCANO_PODGROUPS, _pod_group),
}
# Workloads are what users send all day: they get most of the requests.
KIND_WEIGHTS = (5, 3, 3, 4, 1, 1, 1, 1, 1)


# --- mutations of a JSON tree ----------------------------------------------------------------

JSONPath = tuple[str | int, ...]


def _nodes(tree: Any, at: JSONPath = ()) -> Iterator[JSONPath]:
    """The paths in `tree`, itself first; not inside a large list or object (a `big` one)."""
    yield at
    if not isinstance(tree, dict | list) or len(tree) > 64:
        return
    members = tree.items() if isinstance(tree, dict) else enumerate(tree)
    for key, value in members:
        yield from _nodes(value, (*at, key))


def _parent(tree: Any, path: JSONPath) -> Any:
    for part in path[:-1]:
        tree = tree[part]
    return tree


def _set(tree: JSONDict, path: JSONPath, value: Any) -> None:
    """Sets `path`, putting an object wherever something else (or nothing) stands on the way."""
    node: Any = tree
    for part, following in itertools.pairwise(path):
        if isinstance(node, list):
            if not isinstance(part, int) or not 0 <= part < len(node):
                return
            child = node[part]
        else:
            child = node.get(part)
        if not isinstance(child, dict | list) or (
            isinstance(child, list) and not isinstance(following, int)
        ):
            child = {}
            node[part] = child
        node = child
    last = path[-1]
    if isinstance(node, dict) or (isinstance(last, int) and 0 <= last < len(node)):
        node[last] = value


def _string_leaves(tree: Any) -> list[JSONPath]:
    return [p for p in _nodes(tree) if p and isinstance(_parent(tree, p)[p[-1]], str)]


class Mutator:
    """Random edits of an object; each says what it did (`log`) for the failure report."""

    def __init__(self, rng: random.Random, raws: dict[str, str]) -> None:
        self.rng = rng
        self.raws = raws  # markers -> raw JSON text put in place after encoding
        self.log: list[str] = []

    def _pick(self, obj: JSONDict) -> JSONPath:
        paths = [p for p in _nodes(obj) if p]
        return self.rng.choice(paths) if paths else ("metadata",)

    def _shown(self, value: Any) -> str:
        text = repr(value)
        return text if len(text) < 40 else text[:37] + "..."

    def mutate(self, obj: JSONDict) -> None:
        if not obj:  # every member removed already
            return
        operations = (
            (self.remove, 3),
            (self.null, 3),
            (self.retype, 3),
            (self.negative, 2),
            (self.huge, 2),
            (self.nest, 2),
            (self.label, 4),
            (self.label_container, 1),
            (self.unicode, 2),
            (self.gates, 2),
            (self.quantity, 2),
            (self.scheduler, 1),
            (self.name, 2),
            (self.annotation, 1),
            (self.owners, 1),
            (self.deep, 1),
            (self.big, 0.2),
        )
        operation = self.rng.choices([o for o, _ in operations], [w for _, w in operations])[0]
        operation(obj)

    def remove(self, obj: JSONDict) -> None:
        path = self._pick(obj)
        parent = _parent(obj, path)
        del parent[path[-1]]
        self.log.append(f"removed {_dotted(path)}")

    def null(self, obj: JSONDict) -> None:
        path = self._pick(obj)
        _parent(obj, path)[path[-1]] = None
        self.log.append(f"{_dotted(path)}=null")

    def retype(self, obj: JSONDict) -> None:
        path = self._pick(obj)
        value = self.rng.choice((*STRANGE_VALUES, "text", "", "0"))
        _parent(obj, path)[path[-1]] = copy.deepcopy(value)
        self.log.append(f"{_dotted(path)}={self._shown(value)}")

    def negative(self, obj: JSONDict) -> None:
        self._count(obj, self.rng.choice(NEGATIVE))

    def huge(self, obj: JSONDict) -> None:
        self._count(obj, self.rng.choice(HUGE))

    def _count(self, obj: JSONDict, value: Any) -> None:
        numbers = [p for p in _nodes(obj) if p and type(_parent(obj, p)[p[-1]]) is int]
        if numbers and self.rng.random() < 0.5:
            path = self.rng.choice(numbers)
        else:
            path = self.rng.choice(COUNT_FIELDS)
        if path[-1] == "kohort.dev/pod-group-total-count":
            value = str(value)
        _set(obj, path, value)
        self.log.append(f"{_dotted(path)}={self._shown(value)}")

    def nest(self, obj: JSONDict) -> None:
        path = self._pick(obj)
        parent = _parent(obj, path)
        value = parent[path[-1]]
        how = self.rng.randrange(3)
        if how == 0:
            parent[path[-1]] = [value]
            self.log.append(f"{_dotted(path)} wrapped in a list")
        elif how == 1:
            parent[path[-1]] = {"value": value}
            self.log.append(f"{_dotted(path)} wrapped in an object")
        else:
            target = self._pick(obj)
            if target[: len(path)] == path or isinstance(_parent(obj, target), list):
                parent[path[-1]] = [value]
                self.log.append(f"{_dotted(path)} wrapped in a list")
                return
            del parent[path[-1]]
            _set(obj, target, value)
            self.log.append(f"{_dotted(path)} moved to {_dotted(target)}")

    def _labels_at(self) -> JSONPath:
        return self.rng.choice(
            (
                ("metadata", "labels"),
                ("metadata", "labels"),
                ("spec", "template", "metadata", "labels"),
                ("spec", "leaderWorkerTemplate", "workerTemplate", "metadata", "labels"),
            )
        )

    def label(self, obj: JSONDict) -> None:
        key = self.rng.choice(LABEL_KEYS)
        value = self.rng.choice((*STRANGE_TEXTS, *STRANGE_VALUES))
        path = (*self._labels_at(), key)
        _set(obj, path, copy.deepcopy(value))
        self.log.append(f"{_dotted(path)}={self._shown(value)}")

    def label_container(self, obj: JSONDict) -> None:
        value = self.rng.choice((None, [], "x", 5, {"a": {"b": 1}}, [[names.QUEUE_LABEL, "q"]]))
        path = self._labels_at()
        _set(obj, path, copy.deepcopy(value))
        self.log.append(f"{_dotted(path)}={self._shown(value)}")

    def unicode(self, obj: JSONDict) -> None:
        leaves = _string_leaves(obj)
        if not leaves:
            return self.retype(obj)
        path = self.rng.choice(leaves)
        value = self.rng.choice(STRANGE_TEXTS)
        _parent(obj, path)[path[-1]] = value
        self.log.append(f"{_dotted(path)}={self._shown(value)}")
        return None

    def gates(self, obj: JSONDict) -> None:
        path = self.rng.choice(
            (("spec", "schedulingGates"), ("spec", "template", "spec", "schedulingGates"))
        )
        value = copy.deepcopy(self.rng.choice(GATES))
        _set(obj, path, value)
        self.log.append(f"{_dotted(path)}={self._shown(value)}")

    def quantity(self, obj: JSONDict) -> None:
        quantities = [
            p
            for p in _nodes(obj)
            if (len(p) > 1 and p[-2] in ("requests", "limits", "minResources")) or "Quota" in str(p)
        ]
        path = (
            self.rng.choice(quantities)
            if quantities
            else ("spec", "template", "spec", "containers", 0, "resources", "requests", "cpu")
        )
        value = self.rng.choice(QUANTITIES)
        _set(obj, path, value)
        self.log.append(f"{_dotted(path)}={self._shown(value)}")

    def scheduler(self, obj: JSONDict) -> None:
        path = self.rng.choice(
            (("spec", "schedulerName"), ("spec", "template", "spec", "schedulerName"))
        )
        value = self.rng.choice(("", None, 5, "volcano", "default-scheduler", "s" * 300, "调度器"))
        _set(obj, path, value)
        self.log.append(f"{_dotted(path)}={self._shown(value)}")

    def name(self, obj: JSONDict) -> None:
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            return self.retype(obj)
        if self.rng.random() < 0.4:
            meta.pop("name", None)
            meta["generateName"] = self.rng.choice(("train-", "", "x" * 300, None, 7, "训练-"))
            self.log.append(f"generateName={self._shown(meta['generateName'])}")
        else:
            meta["name"] = self.rng.choice((*STRANGE_TEXTS, None, 7, ["a"]))
            self.log.append(f"metadata.name={self._shown(meta['name'])}")
        return None

    def annotation(self, obj: JSONDict) -> None:
        value: Any = self.rng.choice(
            (
                '{"spec": {"podManagementPolicy": "OrderedReady"}}',
                '{"spec": {"podManagementPolicy": ',
                "[1, 2]",
                '"OrderedReady"',
                "",
                None,
                5,
                {"spec": {}},
                '{"spec": {"podManagementPolicy": null}}',
                '{"spec": ' * 2000 + "1" + "}" * 2000,
            )
        )
        _set(obj, ("metadata", "annotations", LAST_APPLIED), value)
        if self.rng.random() < 0.5:
            entry: JSONDict = {
                "manager": "kubectl",
                "operation": self.rng.choice(("Apply", "Update", None, 5)),
                "fieldsType": "FieldsV1",
                "fieldsV1": self.rng.choice(
                    (
                        {"f:spec": {"f:podManagementPolicy": {}}},
                        {"f:spec": None},
                        "f:spec",
                        None,
                        [],
                    )
                ),
            }
            managed = self.rng.choice(([entry], entry, [None], "x", [entry, 5]))
            _set(obj, ("metadata", "managedFields"), managed)
        self.log.append(f"last-applied={self._shown(value)} (and maybe managedFields)")

    def owners(self, obj: JSONDict) -> None:
        value = self.rng.choice(
            (
                [{"apiVersion": "batch/v1", "kind": "Job", "name": "o", "controller": True}],
                [{"apiVersion": "apps/v1", "kind": "StatefulSet", "controller": "yes"}],
                [{"kind": None, "controller": True}],
                [None],
                {"kind": "Job"},
                "Job",
                [],
                [{"apiVersion": 5, "kind": ["Job"], "controller": 1}],
            )
        )
        _set(obj, ("metadata", "ownerReferences"), copy.deepcopy(value))
        self.log.append(f"metadata.ownerReferences={self._shown(value)}")

    def deep(self, obj: JSONDict) -> None:
        depth = self.rng.choice((64, 500, 1000, 1100, 5000, 50_000))
        marker = f"@@raw{len(self.raws)}@@"
        if self.rng.random() < 0.5:
            self.raws[marker] = "[" * depth + "]" * depth
        else:
            self.raws[marker] = '{"a":' * depth + "1" + "}" * depth
        path = self._pick(obj)
        _parent(obj, path)[path[-1]] = marker
        self.log.append(f"{_dotted(path)}=<nested {depth} deep>")

    def big(self, obj: JSONDict) -> None:
        path = self._pick(obj)
        size = self.rng.choice((1_000, 100_000))
        how = self.rng.randrange(3)
        value: Any = "x" * size if how == 0 else list(range(size // 10))
        if how == 2:
            value = {f"k{i}": i for i in value}
        _parent(obj, path)[path[-1]] = value
        self.log.append(f"{_dotted(path)}=<large {type(value).__name__}>")


def _dotted(path: JSONPath) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


# --- reviews -------------------------------------------------------------------------------


def _user(rng: random.Random) -> Any:
    return rng.choice(
        (
            {"username": "alice", "groups": ["system:authenticated"]},
            {"username": "alice", "groups": ["system:authenticated"]},
            {"username": CONTROLLER_USER, "groups": ["system:serviceaccounts"]},
            {"username": "admin", "groups": ["system:masters"]},
            None,
            "alice",
            {"username": 5},
            {"username": "bob", "groups": "system:masters"},
            {"username": "bob", "groups": [1, None, "x"]},
        )
    )


def _updated(rng: random.Random, old: JSONDict) -> tuple[JSONDict, str]:
    """A new version of `old` (the transitions the anti-bypass rules are about)."""
    new = copy.deepcopy(old)
    spec = new.get("spec")
    transition = rng.choice(("same", "release", "requeue", "unlabel", "opt-out", "scale"))
    meta = new.setdefault("metadata", {})
    if transition == "release" and isinstance(spec, dict):
        spec["suspend"] = False
        for path in (("schedulingGates",), ("template", "spec", "schedulingGates")):
            with contextlib.suppress(KeyError, TypeError):
                del _parent(spec, path)[path[-1]]
    elif transition == "requeue":
        meta.setdefault("labels", {})[names.QUEUE_LABEL] = "elsewhere"
    elif transition == "unlabel":
        meta.get("labels", {}).pop(names.QUEUE_LABEL, None)
    elif transition == "opt-out":
        meta.setdefault("labels", {})[names.OPT_OUT_LABEL] = "true"
    elif transition == "scale" and isinstance(spec, dict):
        spec["replicas"] = spec["parallelism"] = rng.choice((0, 1, 100))
    return new, transition


def _envelope(rng: random.Random, review: JSONDict, log: list[str]) -> None:
    """Breaks the review around the object: its uid, kind, operation, user, apiVersion."""
    request = review["request"]
    choice = rng.randrange(12)
    if choice == 0:
        value = rng.choice((None, "", 5, ["u"], {"u": 1}, "u" * 10_000, "uid-队列", "\ud800"))
        if rng.random() < 0.3:
            del request["uid"]
            log.append("no request.uid")
        else:
            request["uid"] = value
            log.append(f"request.uid={value!r:.40}")
    elif choice == 1:
        review["request"] = rng.choice((None, [], "request", 1, [request]))
        log.append(f"request={review['request']!r:.40}")
    elif choice == 2:
        kind = request["kind"]
        how = rng.randrange(6)
        if how == 0:
            request["kind"] = rng.choice((None, "Job", 5, []))
        elif how == 1:
            kind["kind"] = rng.choice((None, 5, "", "job", "Jobs"))
        elif how == 2:
            kind["group"] = rng.choice(("apps", "batch", "", None, 7, names.GROUP))
        elif how == 3:
            kind["version"] = rng.choice(("v2", "v1beta1", "", None, 1))
        elif how == 4:
            del request["kind"]
        else:
            kind["kind"] = rng.choice(("Thing", "Deployment", "Namespace", "Queue"))
        log.append(f"request.kind={request.get('kind')!r:.60}")
    elif choice == 3:
        value = rng.choice((None, "PATCH", "create", "CONNECT", 5, "", ["CREATE"]))
        request["operation"] = value
        log.append(f"request.operation={value!r}")
    elif choice == 4:
        field_name = rng.choice(("namespace", "name"))
        value = rng.choice((None, 5, ["a"], {"a": 1}, "", "名前", "x" * 500))
        request[field_name] = value
        log.append(f"request.{field_name}={value!r:.40}")
    elif choice == 5:
        value = rng.choice((None, [], "object", 7, True, [request.get("object")]))
        if rng.random() < 0.3:
            request.pop("object", None)
            log.append("no request.object")
        else:
            request["object"] = value
            log.append(f"request.object={value!r:.40}")
    elif choice == 6:
        value = rng.choice((None, [], "old", 7, {}))
        request["oldObject"] = value
        log.append(f"request.oldObject={value!r:.40}")
    elif choice == 7:
        review["apiVersion"] = rng.choice(
            ("admission.k8s.io/v1beta1", "", None, "v1", 1, "ADMISSION.K8S.IO/V1")
        )
        log.append(f"apiVersion={review['apiVersion']!r}")
    elif choice == 8:
        review["kind"] = rng.choice(("AdmissionRequest", "", None, "admissionreview"))
        log.append(f"kind={review['kind']!r}")
    elif choice == 9:
        request["dryRun"] = rng.choice(("yes", 1, None, [], True))
        log.append(f"request.dryRun={request['dryRun']!r}")
    elif choice == 10:
        review["response"] = {"uid": "forged", "allowed": True}
        review["extra"] = {"unknown": [1, 2]}
        log.append("a response and unknown members in the review")
    else:
        request["userInfo"] = rng.choice(({"username": None}, [], 1, {"groups": None}))
        log.append(f"request.userInfo={request['userInfo']!r:.40}")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _review(rng: random.Random, uid: str, log: list[str], raws: dict[str, str]) -> JSONDict:
    kind_name = rng.choices(list(KINDS), weights=KIND_WEIGHTS)[0]
    kind, build = KINDS[kind_name]
    obj: JSONDict | None = build(rng)
    operation = rng.choices(("CREATE", "UPDATE", "DELETE", "CONNECT"), weights=(5, 4, 1, 0.2))[0]
    old: Any = None
    log.append(f"{kind_name} {operation}")
    if operation == "UPDATE":
        old = obj
        obj, transition = _updated(rng, old)
        log.append(f"update={transition}")
    elif operation == "DELETE":
        obj, old = None, obj
    mutator = Mutator(rng, raws)
    for _ in range(rng.choice((0, 0, 1, 1, 1, 2, 2, 3, 5))):
        target = obj if obj is not None and (old is None or rng.random() < 0.75) else old
        if isinstance(target, dict):
            mutator.mutate(target)
    log.extend(mutator.log)
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    request: JSONDict = {
        "uid": uid,
        "kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
        "resource": {"group": kind.group, "version": kind.version, "resource": kind.plural},
        # As the API server fills them in: strings, whatever the object says (the envelope's
        # own breakage is `_envelope`'s business).
        "name": _text(meta.get("name")),
        "namespace": _text(meta.get("namespace")),
        "operation": operation,
        "userInfo": _user(rng),
        "object": obj,
        "oldObject": old,
        "dryRun": rng.random() < 0.05,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }
    return {"apiVersion": API_VERSION, "kind": KIND, "request": request}


def _encode(rng: random.Random, value: Any, raws: dict[str, str]) -> bytes:
    text = json.dumps(value, ensure_ascii=rng.random() < 0.5, allow_nan=True)
    for marker, raw in raws.items():
        text = text.replace(f'"{marker}"', raw)
    return text.encode("utf-8", "surrogatepass")


def _expected_uid(review: Any) -> str | None:
    request = review.get("request") if isinstance(review, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) and uid else None


def _not_a_review(rng: random.Random, valid: bytes) -> tuple[bytes, str, bool]:
    """A body that is no well-formed review, what it is, and whether it still holds the review
    `valid` whole (a lenient decoder could answer it: then it must echo the uid)."""
    choice = rng.randrange(16)
    if choice == 0:
        return b"", "empty body", False
    if choice == 1:
        cut = rng.randrange(1, len(valid))
        return valid[:cut], f"review truncated at byte {cut} of {len(valid)}", False
    if choice == 2:
        return b"[" + valid + b"," + valid + b"]", "an array of two reviews", False
    if choice == 3:
        scalar = rng.choice((b"[]", b"{}", b"null", b"true", b"0", b'"review"', b"-1e999"))
        return scalar, f"JSON {scalar.decode()}", False
    if choice == 4:
        return b"\xef\xbb\xbf" + valid, "a UTF-8 byte order mark before the review", True
    if choice == 5:
        return valid.decode(errors="replace").encode("utf-16"), "the review in UTF-16", False
    if choice == 6:
        at = valid.find(b'"name"')
        return valid[:at] + b'"\xff\xfe\xc3\x28":1,' + valid[at:], "invalid UTF-8 in a key", True
    if choice == 7:
        return valid + b"{}", "trailing data after the review", True
    if choice == 8:
        return b" \n\t " * rng.randrange(1, 100), "only white space", False
    if choice == 9:
        depth = rng.choice((100, 1025, 100_000))
        return b"[" * depth + b"]" * depth, f"an array nested {depth} deep", False
    if choice == 10:
        return (
            valid.replace(b"true", b"NaN", 1).replace(b"false", b"Infinity", 1),
            "NaN literals",
            True,
        )
    if choice == 11:
        return b"apiVersion: admission.k8s.io/v1\nkind: AdmissionReview\n", "YAML, not JSON", False
    if choice == 12:
        body = json.dumps({"apiVersion": API_VERSION, "kind": KIND}).encode()
        return body, "a review without a request", False
    if choice == 13:
        return (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", '
            b'"request": {"uid": "u"',
            "an unclosed review",
            False,
        )
    if choice == 14:
        return b"\x00" * rng.randrange(1, 4096), "NUL bytes", False
    if rng.random() < 0.2:
        return b" " * (MAX_BODY + 1) + b"{}", "a body over the 3 MiB limit", False
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 512))), "random bytes", False


def generate(seed: int, count: int) -> list[Case]:
    """`count` requests; the same seed always gives the same requests."""
    rng = random.Random(seed)
    cases: list[Case] = []
    for index in range(count):
        path = PATHS[index % len(PATHS)]
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        log: list[str] = []
        raws: dict[str, str] = {}
        review = _review(rng, uid, log, raws)
        roll = rng.random()
        if roll < 0.15:
            _envelope(rng, review, log)
        if roll < 0.93:
            body = _encode(rng, review, raws)
            expected = _expected_uid(review)
            well_formed = True
        else:
            body, what, keeps_uid = _not_a_review(rng, _encode(rng, review, {}))
            log = [what]
            expected = _expected_uid(review) if keeps_uid else None
            well_formed = False
        content_type = "application/json" if rng.random() < 0.95 else "text/plain"
        cases.append(Case(index, path, body, expected, "; ".join(log), well_formed, content_type))
    return cases


# --- the server ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _kohort(*argv: str) -> list[str]:
    """`kohort ARGV...` as the console script runs it, with this interpreter."""
    return [sys.executable, "-m", "kohort.cli", *argv]


@dataclass
class WebhookProcess:
    """`kohort webhook` in its own process, with certificates made by `kohort certs generate`."""

    directory: Path
    process: asyncio.subprocess.Process
    port: int
    metrics_port: int
    context: ssl.SSLContext

    @property
    def log_path(self) -> Path:
        return self.directory / "webhook.log"

    def url(self, path: str, *, metrics: bool = False) -> str:
        if metrics:
            return f"http://{HOST}:{self.metrics_port}{path}"
        return f"https://{HOST}:{self.port}{path}"

    def alive(self) -> bool:
        return self.process.returncode is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.asynccontextmanager
async def webhook_process(
    backend: str = "volcano", *, ready_within: float = 30.0
) -> AsyncIterator[WebhookProcess]:
    with tempfile.TemporaryDirectory(prefix="kohort-fuzz-") as tmp:
        directory = Path(tmp)
        certs = directory / "certs"
        generate_certs = await asyncio.create_subprocess_exec(
            *_kohort("certs", "generate", "--out", str(certs), "--ip", HOST, "--dns", "localhost"),
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await generate_certs.communicate()
        if generate_certs.returncode != 0:
            raise RuntimeError(f"kohort certs generate failed:\n{output.decode()}")
        context = ssl.create_default_context(cafile=certs / "ca.crt")
        port, metrics_port = _free_port(), _free_port()
        argv = _kohort(
            *("webhook", "--cert-dir", str(certs), "--host", HOST, "--backend", backend),
            *("--port", str(port), "--metrics-port", str(metrics_port)),
        )
        with (directory / "webhook.log").open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                *argv, cwd=ROOT, stdout=log, stderr=asyncio.subprocess.STDOUT
            )
        server = WebhookProcess(directory, process, port, metrics_port, context)
        try:
            await _wait_ready(server, ready_within)
            yield server
        finally:
            if server.alive():
                process.send_signal(signal.SIGTERM)
                try:
                    async with asyncio.timeout(10):
                        await process.wait()
                except TimeoutError:
                    process.kill()
                    await process.wait()


async def _wait_ready(server: WebhookProcess, within: float) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while True:
            if not server.alive():
                raise RuntimeError(f"kohort webhook exited early:\n{server.log()}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(server.url("/readyz"), ssl=server.context) as response:
                    if response.status == 200:
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(f"kohort webhook not ready after {within:.0f}s:\n{server.log()}")
            await asyncio.sleep(0.05)


# --- the run and its checks ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    case: Case
    problem: str

    def describe(self, excerpt: int = 300) -> str:
        body = self.case.body[:excerpt]
        more = f" (+{len(self.case.body) - excerpt} bytes)" if len(self.case.body) > excerpt else ""
        return (
            f"#{self.case.index} POST {self.case.path} [{self.case.what}]: {self.problem}\n"
            f"    body: {body!r}{more}"
        )


@dataclass
class Report:
    sent: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    allowed: int = 0
    denied: int = 0
    patched: int = 0
    # The required checks: each list must stay empty.
    server_errors: list[Finding] = field(default_factory=list)  # 5xx
    denials_without_message: list[Finding] = field(default_factory=list)
    bad_answers: list[Finding] = field(default_factory=list)  # other status, no uid echo, ...
    transport_errors: list[Finding] = field(default_factory=list)  # no answer at all
    crashes: list[str] = field(default_factory=list)  # the process died or stopped answering
    # Stricter (`--strict`): what a 200 or 400 still hides.
    undecided: list[Finding] = field(default_factory=list)  # the catch-all answered
    patches_that_do_not_apply: list[Finding] = field(default_factory=list)
    logged_errors: list[str] = field(default_factory=list)  # ERROR records in the server's log
    # Told, never a failure: bodies that are not well-formed reviews but were answered as one.
    lenient: list[Finding] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def failures(self) -> list[Finding]:
        """The required checks' findings."""
        return (
            self.server_errors
            + self.denials_without_message
            + self.bad_answers
            + self.transport_errors
        )

    @property
    def strict_failures(self) -> list[Finding]:
        return self.undecided + self.patches_that_do_not_apply

    @property
    def ok(self) -> bool:
        """No 5xx, every refusal says why, every answer is a 200 review or a 400, no crash."""
        return not self.failures and not self.crashes

    @property
    def strictly_ok(self) -> bool:
        return self.ok and not self.strict_failures and not self.logged_errors

    @property
    def requests(self) -> int:
        return sum(self.sent.values())

    @property
    def rate(self) -> float:
        return self.requests / self.elapsed if self.elapsed else 0.0

    def percentile_ms(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def table(self) -> str:
        rows: list[tuple[str, object]] = [(f"sent to {path}", self.sent[path]) for path in PATHS]
        rows.append(("sent in all", self.requests))
        rows += [(f"answered {code}", n) for code, n in sorted(self.statuses.items())]
        rows += [
            ("allowed (200)", self.allowed),
            ("  of which with a patch", self.patched),
            ("denied (200)", self.denied),
            ("denials without message (must be 0)", len(self.denials_without_message)),
            ("5xx (must be 0)", len(self.server_errors)),
            ("crashes (must be 0)", len(self.crashes)),
            ("other bad answers (must be 0)", len(self.bad_answers)),
            ("requests without an answer (must be 0)", len(self.transport_errors)),
            ("'could not decide' denials (strict: 0)", len(self.undecided)),
            ("patches that do not apply (strict: 0)", len(self.patches_that_do_not_apply)),
            ("errors in the server's log (strict: 0)", len(self.logged_errors)),
            ("malformed bodies answered as reviews", len(self.lenient)),
            ("elapsed seconds", f"{self.elapsed:.2f}"),
            ("requests per second", f"{self.rate:.0f}"),
            (
                "latency p50 / p99 ms",
                f"{self.percentile_ms(0.5):.1f} / {self.percentile_ms(0.99):.1f}",
            ),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value!s:>11}" for name, value in rows)


def check_answer(report: Report, case: Case, status: int, body: bytes) -> None:
    """Counts one answer and records what is wrong with it."""
    report.statuses[status] += 1
    if status >= 500:
        report.server_errors.append(Finding(case, f"HTTP {status}: {body[:200]!r}"))
        return
    if status == 400:
        if not body.strip():
            report.bad_answers.append(Finding(case, "a 400 without a reason"))
        return
    if status != 200:
        report.bad_answers.append(Finding(case, f"HTTP {status}: {body[:200]!r}"))
        return
    try:
        answer = json.loads(body)
        response = answer["response"]
        allowed = response["allowed"]
    except (ValueError, KeyError, TypeError) as err:
        report.bad_answers.append(Finding(case, f"a 200 that is no review answer ({err!r})"))
        return
    if answer.get("apiVersion") != API_VERSION or answer.get("kind") != KIND:
        report.bad_answers.append(Finding(case, "a 200 that is no admission.k8s.io/v1 review"))
    if case.uid is None or response.get("uid") != case.uid:
        report.bad_answers.append(
            Finding(case, f"response.uid {response.get('uid')!r}, sent {case.uid!r}")
        )
    if not case.well_formed:
        report.lenient.append(Finding(case, f"answered 200, allowed: {allowed!r}"))
    if allowed is False:
        report.denied += 1
        status_ = response.get("status")
        message = status_.get("message") if isinstance(status_, dict) else None
        if not isinstance(message, str) or not message.strip():
            report.denials_without_message.append(Finding(case, f"denied, status {status_!r}"))
        elif UNDECIDED in message:
            report.undecided.append(Finding(case, message))
    elif allowed is True:
        report.allowed += 1
        if "patch" in response:
            report.patched += 1
            problem = patch_problem(case, response)
            if problem:
                report.patches_that_do_not_apply.append(Finding(case, problem))
    else:
        report.bad_answers.append(Finding(case, f"response.allowed is {allowed!r}"))


def patch_problem(case: Case, response: JSONDict) -> str | None:
    """Why the patch of an allowed answer does not apply to the object sent, or None."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))  # the object may be nested ~1,000 deep
    try:
        if response.get("patchType") != "JSONPatch":
            return f"patchType {response.get('patchType')!r}"
        operations = json.loads(base64.b64decode(response["patch"], validate=True))
        review = json.loads(case.body.decode("utf-8", "surrogateescape"))
        jsonpatch.apply_patch(review["request"]["object"], operations, in_place=True)
    except Exception as err:  # undecodable, or jsonpatch's and jsonpointer's errors
        return f"patch: {err!r}"
    finally:
        sys.setrecursionlimit(limit)
    return None


async def send_all(
    server: WebhookProcess,
    cases: list[Case],
    *,
    concurrency: int = 16,
    request_seconds: float = 60.0,
) -> Report:
    """Sends every case (`concurrency` keep-alive connections) and checks every answer."""
    report = Report()
    pending = iter(cases)
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=server.context)
    client_timeout = aiohttp.ClientTimeout(total=request_seconds)

    async def worker(session: aiohttp.ClientSession) -> None:
        for case in pending:
            report.sent[case.path] += 1
            headers = {"Content-Type": case.content_type}
            start = time.perf_counter()
            try:
                async with session.post(
                    server.url(case.path), data=case.body, headers=headers
                ) as response:
                    body = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError, OSError) as err:
                report.transport_errors.append(Finding(case, f"no answer: {err!r}"))
                continue
            report.latencies.append(time.perf_counter() - start)
            check_answer(report, case, status, body)

    async with aiohttp.ClientSession(connector=connector, timeout=client_timeout) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        report.elapsed = time.perf_counter() - start
    return report


async def check_server(server: WebhookProcess, report: Report) -> None:
    """The process still runs, answers /healthz on both ports, and logged no error."""
    if not server.alive():
        report.crashes.append(f"the server exited with {server.process.returncode}")
        return
    async with aiohttp.ClientSession() as session:
        for url in (server.url("/healthz"), server.url("/healthz", metrics=True)):
            try:
                async with session.get(url, ssl=server.context) as response:
                    if response.status != 200:
                        report.crashes.append(f"GET {url}: HTTP {response.status}")
            except (aiohttp.ClientError, OSError) as err:
                report.crashes.append(f"GET {url}: {err!r}")
    report.logged_errors = [
        line for line in server.log().splitlines() if " ERROR " in line or " CRITICAL " in line
    ]


async def run(
    *,
    seed: int = 1,
    count: int = 10_000,
    concurrency: int = 16,
    backend: str = "volcano",
    cases: list[Case] | None = None,
) -> tuple[Report, str]:
    """Starts the server, sends the generated cases, checks the server; the report and the
    server's log."""
    cases = generate(seed, count) if cases is None else cases
    async with webhook_process(backend) as server:
        report = await send_all(server, cases, concurrency=concurrency)
        await check_server(server, report)
        return report, server.log()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="requests to send")
    parser.add_argument("--seed", type=int, default=1, help="seed of the generator")
    parser.add_argument("--concurrency", type=int, default=16, help="connections at once")
    parser.add_argument("--backend", default="volcano", choices=["volcano", "coscheduling", "none"])
    parser.add_argument(
        "--strict",
        action="store_true",
        help="also fail on 'could not decide' denials, patches that do not apply, logged errors",
    )
    parser.add_argument("--show", type=int, default=10, help="findings to print per kind")
    parser.add_argument("--save-failures", type=Path, metavar="DIR", help="write failing bodies")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    cases = generate(args.seed, args.count)
    generated = time.perf_counter() - started
    report, log = asyncio.run(run(cases=cases, concurrency=args.concurrency, backend=args.backend))
    print(f"seed {args.seed}: {args.count} requests generated in {generated:.2f}s")
    print(report.table())
    sections = (
        ("FAILED CHECK", report.failures),
        ("strict", report.strict_failures),
        ("lenient", report.lenient),
    )
    for label, findings in sections:
        for finding in findings[: args.show]:
            print(f"{label}: {finding.describe()}")
    for crash in report.crashes:
        print(f"crash: {crash}")
    if report.logged_errors:
        print("the server's log (end):\n" + log[-4000:])
    saved = report.failures + report.strict_failures + report.lenient
    if args.save_failures is not None and saved:
        args.save_failures.mkdir(parents=True, exist_ok=True)
        for finding in saved:
            name = f"case-{finding.case.index}{finding.case.path.replace('/', '-')}.json"
            (args.save_failures / name).write_bytes(finding.case.body)
        print(f"wrote {len(saved)} bodies to {args.save_failures}")
    ok = report.strictly_ok if args.strict else report.ok
    print("OK" if ok else "FAILED", "(strict)" if args.strict else "")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
