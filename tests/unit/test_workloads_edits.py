"""The editor records every change as a JSON Patch operation that reproduces it."""

from __future__ import annotations

import copy

import jsonpatch

from controller.workloads.edits import Editor, pointer


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
