"""The editor records every change as a JSON Patch operation that reproduces it."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.workloads.edits import Editor, merge_operations, pointer


def test_label_keys_with_a_slash_are_escaped_in_json_pointers() -> None:
    assert pointer(["metadata", "labels", "kohort.dev/queue-name"]) == (
        "/metadata/labels/kohort.dev~1queue-name"
    )
    assert pointer(["metadata", "annotations", "a~b/c"]) == "/metadata/annotations/a~0b~1c"


def test_recorded_operations_replay_the_edits_on_the_original() -> None:
    original = {"metadata": {"name": "x"}, "spec": {"schedulingGates": [{"name": "other"}]}}
    editor = Editor(copy.deepcopy(original))
    editor.set(["metadata", "labels", "kohort.dev/queue-name"], "research")
    editor.set(["spec", "template", "spec", "schedulerName"], "volcano")
    editor.append(["spec", "schedulingGates"], {"name": "kohort.dev/admission"})
    editor.remove(["spec", "schedulingGates", 0])
    assert jsonpatch.apply_patch(original, editor.operations) == editor.doc
    assert editor.doc["metadata"]["labels"] == {"kohort.dev/queue-name": "research"}


def test_setting_an_equal_value_records_nothing() -> None:
    editor = Editor({"spec": {"suspend": True}})
    editor.set(["spec", "suspend"], True)
    editor.set_default(["spec", "suspend"], False)
    editor.remove(["spec", "missing"])
    assert editor.operations == []


def test_recorded_values_do_not_change_when_the_document_changes_later() -> None:
    editor = Editor({})
    editor.append(["gates"], {"name": "a"})
    editor.append(["gates"], {"name": "b"})
    assert jsonpatch.apply_patch({}, editor.operations) == {"gates": [{"name": "a"}, {"name": "b"}]}


def test_update_adds_a_missing_map_whole_and_later_edits_do_not_change_the_record() -> None:
    original: dict[str, object] = {"spec": {"template": {}}}
    editor = Editor(original)
    editor.update(["spec", "template", "metadata", "labels"], {"a/b": "1"})
    editor.set(["spec", "template", "metadata", "labels", "c"], "2")
    editor.update(["spec", "template", "metadata", "labels"], {"a/b": "1", "d": "3"})
    assert editor.operations[0] == {
        "op": "add",
        "path": "/spec/template/metadata",
        "value": {"labels": {"a/b": "1"}},
    }
    assert jsonpatch.apply_patch(original, editor.operations) == editor.doc
    assert editor.doc["spec"]["template"]["metadata"]["labels"] == {"a/b": "1", "c": "2", "d": "3"}
    assert original == {"spec": {"template": {}}}


def test_merge_adds_missing_objects_whole_and_sets_only_what_differs() -> None:
    original: dict[str, Any] = {
        "metadata": {"labels": {"team": "vision", "kohort.dev/queue-name": "research"}},
        "spec": {"suspend": False, "template": {"spec": {"schedulerName": "default-scheduler"}}},
    }
    editor = Editor(copy.deepcopy(original))
    editor.merge(
        (),
        {
            "metadata": {"labels": {"kohort.dev/queue-name": "research"}},
            "spec": {
                "suspend": True,
                "template": {
                    "metadata": {"labels": {"a": "1"}, "annotations": {"b": "2"}},
                    "spec": {"schedulerName": "volcano"},
                },
            },
        },
    )
    assert editor.operations == [
        {"op": "replace", "path": "/spec/suspend", "value": True},
        {
            "op": "add",
            "path": "/spec/template/metadata",
            "value": {"labels": {"a": "1"}, "annotations": {"b": "2"}},
        },
        {"op": "replace", "path": "/spec/template/spec/schedulerName", "value": "volcano"},
    ]
    assert jsonpatch.apply_patch(original, editor.operations) == editor.doc
    assert editor.doc["metadata"]["labels"]["team"] == "vision"


def test_merge_refuses_to_replace_a_value_that_is_not_an_object() -> None:
    editor = Editor({"metadata": {"labels": "not-a-map"}})
    with pytest.raises(TypeError, match="/metadata/labels is not an object"):
        editor.merge(["metadata"], {"labels": {"a": "b"}})
    assert editor.operations == []


def test_editing_in_place_changes_the_given_document_but_never_the_record() -> None:
    doc: dict[str, Any] = {"spec": {}}
    editor = Editor(doc, in_place=True)
    editor.merge(["spec"], {"template": {"metadata": {"labels": {"a": "1"}}}})
    editor.set(["spec", "template", "metadata", "labels", "b"], "2")
    editor.append(["spec", "gates"], {"name": "x"})
    editor.set(["spec", "gates", 0, "name"], "y")
    assert doc["spec"]["template"]["metadata"]["labels"] == {"a": "1", "b": "2"}
    assert editor.operations[0]["value"] == {"metadata": {"labels": {"a": "1"}}}
    assert editor.operations[2]["value"] == [{"name": "x"}]
    assert jsonpatch.apply_patch({"spec": {}}, editor.operations) == doc


JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from("abc"))
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: st.dictionaries(st.sampled_from(["a", "b/c", "d~e"]), inner, max_size=3),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(st.sampled_from(["a", "b/c", "d~e"]), JSON_VALUES, max_size=3)


@settings(max_examples=300, deadline=None)
@given(original=JSON_OBJECTS, values=JSON_OBJECTS, in_place=st.booleans())
def test_recorded_merge_operations_replay_the_merge_on_the_original(
    original: dict[str, Any], values: dict[str, Any], in_place: bool
) -> None:
    editor = Editor(copy.deepcopy(original), in_place=in_place)
    try:
        editor.merge((), values)
    except TypeError:
        return  # an object cannot be merged into a scalar: refused (see the test above)
    assert jsonpatch.apply_patch(original, editor.operations) == editor.doc
    again = Editor(copy.deepcopy(editor.doc))
    again.merge((), values)
    assert again.operations == []  # merging is idempotent


@settings(max_examples=300, deadline=None)
@given(original=JSON_OBJECTS, values=JSON_OBJECTS)
def test_merge_operations_are_what_the_editor_records_without_editing(
    original: dict[str, Any], values: dict[str, Any]
) -> None:
    before = copy.deepcopy(original)
    editor = Editor(copy.deepcopy(original))
    try:
        editor.merge((), values)
    except TypeError:
        with pytest.raises(TypeError):
            merge_operations(original, values)
        return
    assert merge_operations(original, values) == editor.operations
    assert original == before
