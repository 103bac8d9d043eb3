"""Properties of the mutation over generated Jobs, StatefulSets, LeaderWorkerSets and Pods."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.api import names
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_job, make_lws, make_pod, make_statefulset
from webhook.mutation import mutate
from webhook.reviews import patch_of
from webhook.settings import Settings

SETTINGS = Settings()
label_keys = st.sampled_from(
    ["app", "team", "example.com/role", "a~b/c", "kohort.dev/pod-group", "tilde~key"]
)
label_values = st.text(alphabet="abcxyz-0123456789", min_size=1, max_size=12)
names_ = st.from_regex(r"[a-z][a-z0-9-]{0,70}[a-z0-9]", fullmatch=True)


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    pod = {
        "cpu": draw(st.sampled_from(["100m", "1", "2.5", None])),
        "memory": draw(st.sampled_from(["1Gi", "512Mi", None])),
        "gpus": draw(st.integers(0, 8)),
        "scheduler_name": draw(st.sampled_from([None, "default-scheduler", "volcano", "mine"])),
        "gates": tuple(
            draw(
                st.lists(
                    st.sampled_from(["x.io/wait", names.ADMISSION_GATE]), max_size=2, unique=True
                )
            )
        ),
    }
    extra = draw(st.dictionaries(label_keys, label_values, max_size=3))
    name = draw(names_)
    if draw(st.booleans()):
        obj = make_job(
            name,
            parallelism=draw(st.none() | st.integers(0, 64)),
            completions=draw(st.none() | st.integers(0, 64)),
            suspend=draw(st.sampled_from([None, True, False])),
            labels=extra,
            **pod,
        )
    else:
        obj = make_statefulset(
            name,
            replicas=draw(st.none() | st.integers(0, 64)),
            policy=draw(st.sampled_from([None, "Parallel", "OrderedReady"])),
            labels=extra,
            **pod,
        )
    template_meta = obj["spec"]["template"].setdefault("metadata", {})
    template_meta["annotations"] = draw(st.dictionaries(label_keys, label_values, max_size=2))
    return obj


def apply(obj: dict[str, Any], uid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    answer = mutate(make_review(obj, uid=uid), SETTINGS)
    return jsonpatch.apply_patch(obj, patch_of(answer)), answer


@st.composite
def other_kinds(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(names_)
    scheduler = draw(st.sampled_from([None, "default-scheduler", "mine"]))
    if draw(st.booleans()):
        return make_lws(
            name,
            replicas=draw(st.integers(0, 4)),
            size=draw(st.integers(1, 8)),
            leader=draw(st.booleans()),
            scheduler_name=scheduler,
        )
    lws_labels = draw(
        st.sampled_from(
            [
                {},
                {names.LWS_NAME_LABEL: name},
                {names.LWS_NAME_LABEL: name, names.LWS_GROUP_INDEX_LABEL: "3"},
            ]
        )
    )
    owner = draw(st.sampled_from([None, "Job", "StatefulSet", "ReplicaSet"]))
    if lws_labels:
        owner = "StatefulSet"  # a LeaderWorkerSet's pods are made by its StatefulSets
    if owner == "Job" or (owner == "StatefulSet" and draw(st.booleans())):
        # Its owner's template, decorated by the webhook, named the gang.
        lws_labels = {**lws_labels, names.POD_GROUP_LABEL: f"job-{name}"}
    return make_pod(name, labels=lws_labels, owner_kind=owner, scheduler_name=scheduler)


@settings(max_examples=200, deadline=None)
@given(obj=workloads() | other_kinds(), default_queue=st.sampled_from([None, "default"]))
def test_applying_the_webhook_twice_changes_nothing_the_second_time(
    obj: dict[str, Any], default_queue: str | None
) -> None:
    before = copy.deepcopy(obj)
    first = mutate(make_review(obj, uid="first"), SETTINGS, default_queue=default_queue)
    assert obj == before, "the webhook changed the object it was given"
    assert first["response"]["allowed"]
    once = jsonpatch.apply_patch(obj, patch_of(first))
    second = mutate(make_review(once, uid="second"), SETTINGS, default_queue=default_queue)
    assert patch_of(second) == []


@settings(max_examples=200, deadline=None)
@given(obj=workloads())
def test_mutation_only_adds_kohort_fields_and_keeps_the_users(obj: dict[str, Any]) -> None:
    mutated, _ = apply(obj, "uid-1")
    template = mutated["spec"]["template"]
    user_labels = obj["metadata"].get("labels", {})
    assert {
        k: v for k, v in mutated["metadata"]["labels"].items() if k in user_labels
    } == user_labels
    for key, value in obj["spec"]["template"]["metadata"]["annotations"].items():
        assert template["metadata"]["annotations"][key] == value
    user_scheduler = obj["spec"]["template"]["spec"].get("schedulerName")
    if user_scheduler not in (None, "default-scheduler"):
        assert template["spec"]["schedulerName"] == user_scheduler
    gates = [g["name"] for g in template["spec"].get("schedulingGates", [])]
    # A Job is held by spec.suspend: its template gets no gate from kohort.
    user_gates = [g["name"] for g in obj["spec"]["template"]["spec"].get("schedulingGates", [])]
    want_gates = user_gates.count(names.ADMISSION_GATE) if obj["kind"] == "Job" else 1
    assert gates.count(names.ADMISSION_GATE) == want_gates
    assert [g for g in gates if g != names.ADMISSION_GATE] == [
        g["name"]
        for g in obj["spec"]["template"]["spec"].get("schedulingGates", [])
        if g["name"] != names.ADMISSION_GATE
    ]
    assert len(template["metadata"]["labels"][names.POD_GROUP_LABEL]) <= 63
