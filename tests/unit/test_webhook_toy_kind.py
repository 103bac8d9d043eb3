"""A new workload kind is one adapter module plus one registry line (tests/unit/toy_kind.py):
the webhook side.

With the toy kind registered, the webhook holds a new TrainingRun, writes its gang's fields
into its pod template and refuses an update that would release it, and treats the pods its
operator makes as members of its gang, through its adapter and the facts it declares alone:
nothing else in the webhook knows the kind.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from controller.api import names
from controller.workloads.registry import REGISTRY
from tests.fakes.reviews import make_review
from tests.unit.toy_kind import TRAINING_RUNS, TrainingRunAdapter, training_run
from webhook.mutation import mutate
from webhook.reviews import patch_of
from webhook.settings import Settings
from webhook.validation import validate

JSON = dict[str, Any]
SETTINGS = Settings()
CONTROLLER = "system:serviceaccount:kohort-system:kohort-controller"
# The one registry line.
WITH_TOY = REGISTRY.with_kinds(TrainingRunAdapter())


def mutated(obj: JSON) -> JSON:
    response = mutate(make_review(obj), SETTINGS, registry=WITH_TOY)
    assert response["response"]["allowed"]
    result: JSON = jsonpatch.apply_patch(obj, patch_of(response))
    return result


def refusal(obj: JSON, *, old: JSON | None = None, user: str = "alice") -> str:
    """Why the validating webhook refuses `obj` ("" when it allows it)."""
    operation = "CREATE" if old is None else "UPDATE"
    review = make_review(obj, operation=operation, old=old, user=user)
    response = validate(review, SETTINGS, registry=WITH_TOY)["response"]
    return "" if response["allowed"] else str(response["status"]["message"])


def operator_pod(run: JSON, name: str) -> JSON:
    """A pod the TrainingRun's operator makes from its template."""
    template = run["spec"]["template"]
    owner = {
        "apiVersion": TRAINING_RUNS.api_version,
        "kind": TRAINING_RUNS.kind,
        "name": run["metadata"]["name"],
        "uid": "0f0e0d0c-0000-4000-8000-000000000002",
        "controller": True,
    }
    metadata = {
        "name": name,
        "namespace": run["metadata"]["namespace"],
        "labels": dict(template["metadata"]["labels"]),
        "ownerReferences": [owner],
    }
    spec = copy.deepcopy(template["spec"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def test_a_new_toy_object_is_held_and_its_template_joins_its_gang() -> None:
    held = mutated(training_run("early", workers=2, paused=False))

    assert held["spec"]["paused"] is True
    template = held["spec"]["template"]
    assert template["metadata"]["labels"][names.POD_GROUP_LABEL] == "run-early"
    assert template["metadata"]["labels"][names.QUEUE_LABEL] == "lq"
    assert template["metadata"]["annotations"][names.VOLCANO_GROUP_ANNOTATION] == "run-early"
    assert {"name": names.ADMISSION_GATE} in template["spec"]["schedulingGates"]
    assert refusal(held) == ""
    # A registry without the kind leaves it alone.
    alone = mutate(make_review(training_run("early", workers=2, paused=False)), SETTINGS)
    assert alone["response"]["allowed"] and patch_of(alone) == []


def test_a_toy_object_that_arrives_unheld_is_refused() -> None:
    assert "must be created paused" in refusal(training_run("early", workers=2, paused=False))


def test_releasing_a_held_toy_object_is_a_bypass_but_for_kohorts_controller() -> None:
    held = mutated(training_run("early", workers=2, paused=False))
    unpaused = {**held, "spec": {**held["spec"], "paused": False}}

    assert "unpaused only by kohort's controller" in refusal(unpaused, old=held)
    assert refusal(unpaused, old=held, user=CONTROLLER) == ""
    relabelled = {**held, "spec": {**held["spec"], "template": {**held["spec"]["template"]}}}
    relabelled["spec"]["template"]["metadata"] = {"labels": {names.QUEUE_LABEL: "lq"}}
    assert "was set by kohort" in refusal(relabelled, old=held)


def test_the_pods_of_a_toy_object_join_its_gang_gated_as_its_facts_say() -> None:
    held = mutated(training_run("early", workers=2, paused=False))
    pod = operator_pod(held, "early-0")
    del pod["spec"]["schedulingGates"]

    gated = mutated(pod)
    assert {"name": names.ADMISSION_GATE} in gated["spec"]["schedulingGates"]
    assert gated["metadata"]["labels"][names.POD_GROUP_LABEL] == "run-early"
    # Without the kind, the pod is of a group that names no size.
    unknown = mutate(make_review(pod), SETTINGS)["response"]
    assert not unknown["allowed"]
    assert names.POD_GROUP_TOTAL_COUNT_LABEL in unknown["status"]["message"]
    # Its gang's name is the kind's: no plain pod group may take it.
    plain = {**pod, "metadata": {**pod["metadata"], "ownerReferences": []}}
    plain["metadata"]["labels"][names.POD_GROUP_TOTAL_COUNT_LABEL] = "1"
    assert "choose another name" in refusal(plain)
