"""Every object in examples/ is valid: Kubernetes kinds against the Kubernetes schemas (strict),
kohort.dev kinds against the API models the CRDs are generated from, and the kinds of other
projects' controllers (LeaderWorkerSet, JobSet, PyTorchJob, RayCluster, RayJob) as kohort's webhook
takes them (their own CRDs check them in tests/cluster/test_examples.py).

tests/cluster/test_examples.py applies the same files to a real cluster.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from controller.api import names
from controller.api.queues import ClusterQueue, LocalQueue, ResourceFlavor
from controller.api.workload import Workload
from tests.chart_support import REPO, kube_version, render
from tests.fakes.reviews import make_review
from webhook.mutation import mutate
from webhook.reviews import patch_of
from webhook.settings import Settings

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
MODELS: dict[str, Any] = {
    m.KIND.kind: m for m in (ClusterQueue, LocalQueue, ResourceFlavor, Workload)
}
# Workload kinds whose schemas come with their own controllers' CRDs.
CONTROLLER_KINDS = ("LeaderWorkerSet", "JobSet", "PyTorchJob", "RayCluster", "RayJob")


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_object_is_valid(path: Path) -> None:
    for doc in documents(path):
        if doc["apiVersion"].startswith("kohort.dev/"):
            MODELS[doc["kind"]].model_validate(doc)
        elif doc["kind"] in CONTROLLER_KINDS:
            response = mutate(make_review(doc), Settings(), default_queue="default")["response"]
            assert response["allowed"], response.get("status")
            added = [op for op in patch_of({"response": response}) if names.GROUP in str(op)]
            assert added, f"the webhook put no gang field on {doc['kind']}"
        else:
            kubernetes_validate.validate(doc, kube_version().lstrip("v"), strict=True)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_kohort_objects_match_the_schemas_of_the_charts_crds(path: Path) -> None:
    crds = render().of_kind("CustomResourceDefinition")
    if not crds:
        pytest.skip("the chart has no CRDs yet")
    schemas = {
        crd["spec"]["names"]["kind"]: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for crd in crds
    }
    for doc in documents(path):
        if doc["apiVersion"].startswith("kohort.dev/"):
            errors = [
                e.message for e in jsonschema.Draft7Validator(schemas[doc["kind"]]).iter_errors(doc)
            ]
            assert not errors, f"{doc['kind']}/{doc['metadata']['name']}: {errors}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_workload_example_names_a_queue_or_lives_in_an_opted_in_namespace(
    path: Path,
) -> None:
    opted_in = {
        d["metadata"]["name"]
        for example in EXAMPLES
        for d in documents(example)
        if d["kind"] == "Namespace"
        and d["metadata"].get("labels", {}).get("kohort.dev/managed") == "true"
    }
    for doc in documents(path):
        if doc["kind"] in ("Job", "StatefulSet", *CONTROLLER_KINDS):
            labelled = "kohort.dev/queue-name" in doc["metadata"].get("labels", {})
            assert labelled or doc["metadata"]["namespace"] in opted_in, doc["metadata"]["name"]


def notes_documents() -> list[dict[str, Any]]:
    """The YAML the chart's NOTES.txt tells users to apply (between <<'YAML' and YAML)."""
    notes = (REPO / "charts" / "kohort" / "templates" / "NOTES.txt").read_text()
    blocks = re.findall(r"<<'YAML'\n(.*?)\n\s*YAML\n", notes, re.DOTALL)
    assert len(blocks) == 3
    return [d for block in blocks for d in yaml.safe_load_all(textwrap.dedent(block)) if d]


def test_the_release_notes_yaml_is_valid() -> None:
    docs = notes_documents()
    assert [d["kind"] for d in docs] == ["ResourceFlavor", "ClusterQueue", "LocalQueue", "Job"]
    for doc in docs:
        if doc["apiVersion"].startswith("kohort.dev/"):
            MODELS[doc["kind"]].model_validate(doc)
        else:
            kubernetes_validate.validate(doc, kube_version().lstrip("v"), strict=True)
