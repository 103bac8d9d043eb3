"""The kohort.dev CRDs' own rules on a real apiserver, with no webhook registered for them.

Nobody escapes the quota: a ClusterQueue with a negative quota or an unknown resource name is
refused by the apiserver itself, naming the field, and a namespaceSelector is a real label
selector that server-side apply stores as written. And whatever the apiserver stores, the
models (which the controller reads with) accept: a table of objects gets the same verdict from
both.
"""

from __future__ import annotations

import copy
import http.client
import json
import ssl
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import ValidationError

from controller import defaults
from controller.api.queues import ClusterQueue
from controller.api.workload import Workload
from hack.demo import install_crds
from hack.localcluster import LocalCluster

pytestmark = pytest.mark.cluster

API = "/apis/kohort.dev/v1alpha1"
QUOTA = "spec.resourceGroups[0].flavors[0].resources[0]"


@dataclass
class Answer:
    status: int
    body: dict[str, Any]

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))


class Server:
    """Server-side apply with the admin identity, answers kept whole (messages are long)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.url = urllib.parse.urlsplit(cluster.server)
        pki = cluster.pki_dir
        self.context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def request(
        self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None
    ) -> Answer:
        if query:
            path = f"{path}?{urllib.parse.urlencode(query)}"
        conn = http.client.HTTPSConnection(
            self.url.hostname or "127.0.0.1", self.url.port, context=self.context, timeout=30
        )
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/apply-patch+yaml"
        try:
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace")
        finally:
            conn.close()
        return Answer(resp.status, json.loads(text) if text else {})

    def apply(self, obj: dict[str, Any], dry_run: bool = True) -> Answer:
        query = {"fieldManager": "test-crd-rules", "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        return self.request("PATCH", path_of(obj), obj, query)


def path_of(obj: dict[str, Any]) -> str:
    name = obj["metadata"]["name"]
    namespace = obj["metadata"].get("namespace")
    if obj["kind"] == "Workload":
        return f"{API}/namespaces/{namespace}/workloads/{name}"
    return f"{API}/clusterqueues/{name}"


@pytest.fixture(scope="module")
def server(cluster: LocalCluster) -> Server:
    # The CRDs alone: no webhook of this test validates kohort.dev objects.
    install_crds(cluster.rest, cluster)
    return Server(cluster)


def cluster_queue(**quota: Any) -> dict[str, Any]:
    resource: dict[str, Any] = {"name": "cpu", "nominalQuota": "8"} | quota
    return {
        "apiVersion": "kohort.dev/v1alpha1",
        "kind": "ClusterQueue",
        "metadata": {"name": f"crd-rules-{uuid.uuid4().hex[:8]}"},
        "spec": {
            "cohort": "crd-rules",
            "resourceGroups": [
                {
                    "coveredResources": [resource["name"]],
                    "flavors": [{"name": "default", "resources": [resource]}],
                }
            ],
        },
    }


def with_spec(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    obj["spec"] |= fields
    return obj


def refused(answer: Answer) -> str:
    """The apiserver's own refusal (no webhook's), as its message."""
    assert answer.status == 422, answer.body
    assert answer.body["reason"] == "Invalid"
    assert "admission webhook" not in answer.message
    return answer.message


SELECTOR = {
    "matchLabels": {"team": "a", "example.com/tier": "gold"},
    "matchExpressions": [
        {"key": "env", "operator": "In", "values": ["dev", "prod"]},
        {"key": "region", "operator": "NotIn", "values": ["eu-west-1"]},
        {"key": "gpu", "operator": "Exists"},
        {"key": "legacy", "operator": "DoesNotExist"},
    ],
}


@pytest.fixture
def stored(server: Server) -> Iterator[dict[str, Any]]:
    obj = with_spec(cluster_queue(), namespaceSelector=copy.deepcopy(SELECTOR))
    yield obj
    server.request("DELETE", path_of(obj))


def test_a_label_selector_is_applied_server_side_and_reads_back_intact(
    server: Server, stored: dict[str, Any]
) -> None:
    applied = server.apply(stored, dry_run=False)
    assert applied.status in (200, 201), applied.body
    again = server.apply(stored, dry_run=False)  # a second apply of the same object: no change
    assert again.status == 200, again.body
    read = server.request("GET", path_of(stored))
    assert read.body["spec"]["namespaceSelector"] == SELECTOR
    queue = ClusterQueue.model_validate(read.body)
    selector = queue.spec.namespace_selector
    assert selector is not None
    ok = {"team": "a", "example.com/tier": "gold", "env": "dev", "gpu": ""}
    assert selector.matches(ok)
    assert not selector.matches(ok | {"legacy": "yes"})
    assert not selector.matches(ok | {"region": "eu-west-1"})
    assert not selector.matches({k: v for k, v in ok.items() if k != "gpu"})


def test_preemption_timers_left_out_are_stored_with_the_measured_defaults(server: Server) -> None:
    obj = with_spec(cluster_queue(), preemption={"reclaimWithinCohort": "Any"})
    answer = server.apply(obj)  # dry run: the answer is what would be stored
    assert answer.status in (200, 201), answer.body
    preemption = answer.body["spec"]["preemption"]
    assert preemption["evictAfterSeconds"] == defaults.EVICT_AFTER_SECONDS
    assert preemption["minimumRuntimeSeconds"] == defaults.MINIMUM_RUNTIME_SECONDS
    message = refused(
        server.apply(with_spec(cluster_queue(), preemption={"evictAfterSeconds": -1}))
    )
    assert "spec.preemption.evictAfterSeconds" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("nominalQuota", "-1"),
        ("nominalQuota", -1),
        ("borrowingLimit", "-500m"),
        ("lendingLimit", -2),
    ],
)
def test_a_negative_quota_is_refused_naming_the_field(
    server: Server, field: str, value: object
) -> None:
    message = refused(server.apply(cluster_queue(**{field: value})))
    assert f"{QUOTA}.{field}: Invalid value: {json.dumps(value)}: must not be negative" in message


def test_a_negative_weight_is_refused_naming_the_field(server: Server) -> None:
    message = refused(server.apply(with_spec(cluster_queue(), fairSharing={"weight": "-1"})))
    assert 'spec.fairSharing.weight: Invalid value: "-1": must not be negative' in message


def test_a_lending_limit_above_nominal_quota_is_refused(server: Server) -> None:
    message = refused(server.apply(cluster_queue(nominalQuota="1", lendingLimit="1500m")))
    assert f"{QUOTA}.lendingLimit" in message
    assert "lendingLimit (1500m) of resource cpu must not exceed its nominalQuota (1)" in message


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("gpus", "; did you mean nvidia.com/gpu?"),
        ("cpus", "; did you mean cpu?"),
        ("CPU", "; did you mean cpu?"),
        ("fpga", ""),
    ],
)
def test_an_unknown_resource_name_is_refused_naming_the_field(
    server: Server, name: str, hint: str
) -> None:
    message = refused(server.apply(cluster_queue(name=name)))
    for field in ("spec.resourceGroups[0].coveredResources[0]", f"{QUOTA}.name"):
        assert (
            f"{field}: Invalid value: {json.dumps(name)}: '{name}' is not a resource name kohort"
            " accepts: use a standard resource (cpu, memory, ephemeral-storage, pods, storage,"
            " hugepages-<size>) or a domain-qualified extended resource such as"
            f" nvidia.com/gpu{hint}"
        ) in message


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (
            {"matchExpressions": [{"key": "env", "operator": "In"}]},
            "spec.namespaceSelector.matchExpressions[0].values: Invalid value:"
            " must be non-empty when operator is In",
        ),
        (
            {"matchExpressions": [{"key": "env", "operator": "DoesNotExist", "values": ["a"]}]},
            "spec.namespaceSelector.matchExpressions[0].values: Invalid value:"
            " must be empty when operator is DoesNotExist",
        ),
        (
            {"matchLabels": {"Team A": "a"}},
            "spec.namespaceSelector.matchLabels: Invalid value: 'Team A' is not a label key",
        ),
        (
            {"matchExpressions": [{"key": "", "operator": "Exists"}]},
            "spec.namespaceSelector.matchExpressions[0].key",
        ),
    ],
    ids=["In without values", "DoesNotExist with values", "bad key", "empty key"],
)
def test_a_malformed_selector_is_refused_naming_the_field(
    server: Server, selector: dict[str, Any], expected: str
) -> None:
    message = refused(server.apply(with_spec(cluster_queue(), namespaceSelector=selector)))
    assert expected in message


@pytest.mark.parametrize("value", ["-1", -1])
def test_a_negative_workload_request_is_refused(
    server: Server, namespace: str, value: object
) -> None:
    workload = {
        "apiVersion": "kohort.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "negative", "namespace": namespace},
        "spec": {"queueName": "q", "podSets": [{"count": 1, "requests": {"cpu": value}}]},
    }
    message = refused(server.apply(workload))
    want = (
        f"spec.podSets[0].requests[cpu]: Invalid value: {json.dumps(value)}: must not be negative"
    )
    assert want in message


def test_a_workload_request_of_an_unknown_resource_is_refused(
    server: Server, namespace: str
) -> None:
    workload = {
        "apiVersion": "kohort.dev/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": "gpus", "namespace": namespace},
        "spec": {"queueName": "q", "podSets": [{"count": 1, "requests": {"gpus": "1"}}]},
    }
    message = refused(server.apply(workload))
    assert "'gpus' is not a resource name kohort accepts" in message
    assert "did you mean nvidia.com/gpu?" in message


# Objects whose verdict the CRDs decide on their own: the apiserver and the models must agree.
NAMES = ["cpu", "memory", "ephemeral-storage", "pods", "storage", "hugepages-2Mi"]
NAMES += ["nvidia.com/gpu", "example.com/Some_Device.v2", "kubernetes.io/batch-cpu"]
NAMES += ["gpu", "mem", "requests.cpu", "Nvidia.com/gpu", "nvidia.com/", "/gpu", "a/b/c", "a b"]
NAMES += ["x" * 244 + "/gpu", "x" * 245 + "/gpu", "hugepages-"]
QUANTITIES: list[object] = ["0", "-0", "+1", ".5", "1.", "1e3", "1E-3", "16Gi", "500m", 0, 7]
QUANTITIES += ["-0.001", "-1e3", "1e1.5", "1Zi", "1" * 64, "1" * 65, "", -3]
SELECTORS: list[dict[str, Any]] = [
    {},
    {"matchLabels": {"example.com/team": ""}},
    {"matchLabels": {"team": "-a"}},
    {"matchLabels": {"a" * 64: "b"}},
    {"matchLabels": {f"label-{i}": "x" for i in range(65)}},
    {"matchExpressions": [{"key": "a", "operator": "Exists", "values": []}]},
    {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": [""]}]},
    {"matchExpressions": [{"key": "a/b/c", "operator": "Exists"}]},
    {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x y"]}]},
]


def variants() -> Iterator[tuple[str, dict[str, Any]]]:
    for name in NAMES:
        yield f"name {name[:24]!r}", cluster_queue(name=name)
    for value in QUANTITIES:
        yield f"quantity {str(value)[:24]!r}", cluster_queue(nominalQuota=value)
    for i, selector in enumerate(SELECTORS):
        yield f"selector {i}", with_spec(cluster_queue(), namespaceSelector=selector)


def test_the_apiserver_stores_exactly_what_the_models_accept(server: Server) -> None:
    disagreements = []
    verdicts = set()
    for what, obj in variants():
        answer = server.apply(obj)
        assert answer.status in (200, 201, 422), (what, answer.body)
        try:
            ClusterQueue.model_validate(obj)
            model_accepts = True
        except ValidationError:
            model_accepts = False
        verdicts.add(model_accepts)
        if (answer.status != 422) is not model_accepts:
            disagreements.append((what, answer.status, answer.message[:300]))
    assert not disagreements
    assert verdicts == {True, False}


def test_the_workload_model_reads_what_the_apiserver_stores(server: Server, namespace: str) -> None:
    for value in ["0", "-0", "+1", "1e3", 2]:
        workload = {
            "apiVersion": "kohort.dev/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": "requests", "namespace": namespace},
            "spec": {"queueName": "q", "podSets": [{"count": 1, "requests": {"cpu": value}}]},
        }
        answer = server.apply(workload)
        if answer.status != 422:
            Workload.model_validate(answer.body)
