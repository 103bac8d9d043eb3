"""Bad input gets a clear 400 or a denial that says why: never a 500, never a crash."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fakes.reviews import make_review
from tests.fakes.workloads import make_job
from webhook.mutation import mutate
from webhook.reviews import BadReview
from webhook.settings import Settings
from webhook.validation import validate

SETTINGS = Settings()


def without_uid() -> dict[str, Any]:
    review = make_review(make_job())
    del review["request"]["uid"]
    return review


def with_api_version(version: str) -> dict[str, Any]:
    review = make_review(make_job())
    review["apiVersion"] = version
    return review


UNANSWERABLE: dict[str, Any] = {
    "not an object": [1, 2, 3],
    "no request": {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
    "no uid": without_uid(),
    "v1beta1 review": with_api_version("admission.k8s.io/v1beta1"),
    "unknown apiVersion": with_api_version("example.com/v9"),
    "unknown operation": make_review(make_job(), operation="PATCH"),
}


@pytest.mark.parametrize("review", UNANSWERABLE.values(), ids=UNANSWERABLE.keys())
@pytest.mark.parametrize("decide", [mutate, validate], ids=["mutate", "validate"])
def test_reviews_that_cannot_be_answered_raise_bad_review(review: Any, decide: Any) -> None:
    with pytest.raises(BadReview):
        decide(review, SETTINGS)


DENIED: dict[str, tuple[Any, Any, str]] = {
    "object is a list": (mutate, make_review([1, 2], kind="Job"), "must be a JSON object"),
    "object is a string": (validate, make_review("job", kind="Job"), "must be a JSON object"),
    "negative parallelism": (mutate, make_review(make_job(parallelism=-1)), "spec.parallelism"),
    "parallelism is text": (mutate, make_review(make_job(parallelism="4")), "spec.parallelism"),  # type: ignore[arg-type]
    # The API server rejects such quantities itself; mutation does not read requests at all.
    "bad quantity": (validate, make_review(make_job(cpu="lots", suspend=True)), "not a quantity"),
    "template is a list": (
        mutate,
        make_review(make_job() | {"spec": {"template": []}}),
        "is not an object",
    ),
}


@pytest.mark.parametrize(("decide", "review", "words"), DENIED.values(), ids=DENIED.keys())
def test_malformed_objects_are_denied_with_a_message_echoing_uid_and_api_version(
    decide: Any, review: Any, words: str
) -> None:
    answer = decide(review, SETTINGS)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["response"]["uid"] == review["request"]["uid"]
    assert answer["response"]["allowed"] is False
    assert words in answer["response"]["status"]["message"]


def test_labels_that_are_not_a_map_leave_the_object_unmanaged() -> None:
    review = make_review(make_job() | {"metadata": {"name": "x", "labels": ["a"]}})
    assert mutate(review, SETTINGS)["response"] == {
        "uid": review["request"]["uid"],
        "allowed": True,
    }


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
kinds = st.sampled_from(["Job", "StatefulSet", "LeaderWorkerSet", "Pod", "ClusterQueue"])


@st.composite
def mangled_jobs(draw: st.DrawFn) -> dict[str, Any]:
    """A managed workload with arbitrary JSON in a few places."""
    obj: dict[str, Any] = make_job()
    obj["spec"] = draw(st.one_of(json_values, st.just(obj["spec"])))
    if isinstance(obj["spec"], dict) and draw(st.booleans()):
        obj["spec"]["template"] = draw(json_values)
    return obj


@settings(max_examples=300, deadline=None)
@given(obj=mangled_jobs(), kind=kinds, operation=st.sampled_from(["CREATE", "UPDATE"]))
def test_arbitrary_json_gets_an_answer_not_an_exception(
    obj: Any, kind: str, operation: str
) -> None:
    review = make_review(obj, kind=kind, operation=operation, old=obj)
    for decide in (mutate, validate):
        answer = decide(review, SETTINGS)
        assert answer["response"]["uid"] == review["request"]["uid"]
        json.dumps(answer)
