"""The pruned decoding and the new-Job fast path (the Job adapter's `fast_defaults`) answer
exactly like the general path."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.api import names
from controller.workloads.base import Backend, Placement
from controller.workloads.registry import REGISTRY
from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_job, make_pod, make_statefulset
from webhook import pruned_reviews
from webhook.mutation import fast_answer, mutate
from webhook.reviews import BadReview, patch_of
from webhook.server import decode_for_mutation
from webhook.settings import Settings

BACKENDS = [Settings(placement=Placement.for_backend(backend)) for backend in Backend]

# The members mutation reads or writes, where a generated object gets removed, nulled or
# given a value of another type.
TOUCHED = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "labels"),
    ("metadata", "labels", names.QUEUE_LABEL),
    ("metadata", "labels", names.POD_GROUP_LABEL),
    ("metadata", "annotations"),
    ("metadata", "ownerReferences"),
    ("spec",),
    ("spec", "parallelism"),
    ("spec", "completions"),
    ("spec", "suspend"),
    ("spec", "schedulerName"),
    ("spec", "schedulingGates"),
    ("spec", "workloadRef"),
    ("spec", "schedulingGroup"),
    ("spec", "template"),
    ("spec", "template", "metadata"),
    ("spec", "template", "metadata", "labels"),
    ("spec", "template", "metadata", "labels", names.POD_GROUP_LABEL),
    ("spec", "template", "metadata", "annotations"),
    ("spec", "template", "spec"),
    ("spec", "template", "spec", "schedulerName"),
    ("spec", "template", "spec", "workloadRef"),
    ("spec", "template", "spec", "schedulingGroup"),
]
ODD_VALUES = st.sampled_from(
    [None, -1, 0, 3, 2.5, "3", "", "custom", True, [], {}, {"a": 1}, [{"name": "x"}]]
)


@st.composite
def edits(draw: st.DrawFn) -> list[tuple[tuple[str, ...], Any]]:
    """Up to three changes: (path, value), value `...` meaning "remove the member"."""
    return draw(
        st.lists(
            st.tuples(st.sampled_from(TOUCHED), st.just(...) | ODD_VALUES),
            max_size=3,
        )
    )


def edited(obj: dict[str, Any], changes: list[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    for path, value in changes:
        parent: Any = obj
        for part in path[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        if value is ...:
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = copy.deepcopy(value)
    return obj


label_values = st.text(alphabet="abc-019", min_size=1, max_size=8)


@st.composite
def jobs_and_pods(draw: st.DrawFn) -> dict[str, Any]:
    labels = draw(
        st.dictionaries(
            st.sampled_from(["team", names.OPT_OUT_LABEL, names.LWS_NAME_LABEL, "a~b/c"]),
            st.sampled_from(["true", "x", "train"]),
            max_size=2,
        )
    )
    pod = {
        "scheduler_name": draw(st.sampled_from([None, "default-scheduler", "volcano", "mine"])),
        "gates": tuple(draw(st.lists(st.sampled_from(["x.io/wait", names.ADMISSION_GATE]))))[:2],
    }
    queue = draw(st.sampled_from([None, "research", ""]))
    if draw(st.booleans()):
        obj = make_job(
            draw(label_values),
            queue=queue,
            parallelism=draw(st.none() | st.integers(0, 9)),
            completions=draw(st.none() | st.integers(0, 9)),
            suspend=draw(st.sampled_from([None, True, False])),
            labels=labels,
            **pod,
        )
        template_meta = draw(st.sampled_from([None, {}, {"labels": {}}, {"annotations": {}}]))
        if template_meta is not None:
            obj["spec"]["template"]["metadata"] = template_meta
    else:
        obj = make_pod(
            draw(label_values),
            queue=queue,
            labels=labels,
            owner_kind=draw(st.sampled_from([None, "Job", "StatefulSet"])),
            **pod,
        )
    return edited(obj, draw(edits()))


def both_ways(
    obj: Any, settings_: Settings, default_queue: str | None, **review: Any
) -> tuple[Any, Any]:
    """The answers (or the BadReview message) from decoding `obj`'s review whole and pruned."""
    body = orjson.dumps(make_review(obj, uid="uid-1", **review))

    def answer(decode: Any) -> Any:
        try:
            return mutate(decode(body), settings_, default_queue=default_queue)
        except BadReview as err:
            return f"BadReview: {err}"

    return answer(orjson.loads), answer(decode_for_mutation)


@settings(max_examples=400, deadline=None)
@given(
    obj=jobs_and_pods(),
    settings_=st.sampled_from(BACKENDS),
    default_queue=st.sampled_from([None, "default"]),
)
def test_a_new_job_or_pod_gets_the_same_answer_from_its_pruned_review(
    obj: dict[str, Any], settings_: Settings, default_queue: str | None
) -> None:
    general, pruned = both_ways(obj, settings_, default_queue, kind=obj.get("kind"))
    assert pruned == general


@settings(max_examples=200, deadline=None)
@given(
    old=jobs_and_pods(),
    changes=edits(),
    default_queue=st.sampled_from([None, "default"]),
)
def test_an_update_gets_the_same_answer_from_its_pruned_review(
    old: dict[str, Any], changes: list[tuple[tuple[str, ...], Any]], default_queue: str | None
) -> None:
    new = edited(old, changes)
    general, pruned = both_ways(
        new, Settings(), default_queue, kind=old.get("kind"), operation="UPDATE", old=old
    )
    assert pruned == general


@settings(max_examples=300, deadline=None)
@given(obj=jobs_and_pods(), settings_=st.sampled_from(BACKENDS))
def test_the_new_job_fast_path_answers_like_the_job_adapter_or_not_at_all(
    obj: dict[str, Any], settings_: Settings
) -> None:
    body = orjson.dumps(make_review(obj, uid="uid-1", kind="Job"))
    request = pruned_reviews.decode(body)
    if request is None or request.object is None:
        return  # decoded the general way
    fast = fast_answer(request, settings_, "default", REGISTRY)
    if fast is not None:
        assert fast == mutate(orjson.loads(body), settings_, default_queue="default")


@pytest.mark.parametrize(
    "shape",
    [
        "as made",
        "template with labels and annotations",
        "no labels on the job",
        "a PodGroup already named",
        "unnamed (generateName)",
    ],
)
def test_usual_new_jobs_take_the_fast_path(shape: str) -> None:
    job = make_job("train")
    if shape == "template with labels and annotations":
        job["spec"]["template"]["metadata"] = {"labels": {"app": "x"}, "annotations": {"a": "b"}}
    elif shape == "no labels on the job":
        del job["metadata"]["labels"]
    elif shape == "a PodGroup already named":
        job["spec"]["template"]["metadata"] = {"labels": {names.POD_GROUP_LABEL: "mine"}}
    elif shape == "unnamed (generateName)":
        job["metadata"]["generateName"] = job["metadata"].pop("name") + "-"
    body = orjson.dumps(make_review(job, uid="uid-1"))
    request = pruned_reviews.decode(body)
    assert request is not None and request.object is not None
    fast = fast_answer(request, Settings(), "default", REGISTRY)
    assert fast is not None
    assert fast == mutate(orjson.loads(body), Settings(), default_queue="default")
    assert patch_of(fast), "a new managed Job is always patched"


def _without_uid() -> dict[str, Any]:
    review = make_review(make_job())
    review["request"]["uid"] = ""
    return review


def _with_label(value: Any) -> dict[str, Any]:
    job = make_job()
    job["metadata"]["labels"]["team"] = value
    return make_review(job)


@pytest.mark.parametrize(
    ("what", "review"),
    [
        ("a StatefulSet", make_review(make_statefulset())),
        ("a DELETE", make_review(make_job(), operation="DELETE")),
        ("no uid", _without_uid()),
        ("a negative parallelism", make_review(make_job(parallelism=-1))),
        ("a label that is not a string", _with_label(7)),
        ("another apiVersion", {**make_review(make_job()), "apiVersion": "admission.k8s.io/v1b"}),
        ("an object that is a list", make_review([], kind="Job")),
    ],
)
def test_reviews_the_views_do_not_cover_are_decoded_whole(what: str, review: Any) -> None:
    assert pruned_reviews.decode(orjson.dumps(review)) is None, what


def test_a_body_that_is_not_json_is_left_to_the_general_path() -> None:
    assert pruned_reviews.decode(b"{not json") is None
    with pytest.raises(ValueError):
        decode_for_mutation(b"{not json")
