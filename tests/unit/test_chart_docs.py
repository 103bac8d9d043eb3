"""docs/configuration.md names every Helm value and every flag of the commands the chart runs.

The flags come from the real argparse definitions (`kohort.cli.build_parser()`), the values
from the chart's values.yaml, so adding either without documenting it fails here.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kohort.cli import build_parser
from tests.chart_support import CHART_DIR, REPO, render

CONFIGURATION = REPO / "docs" / "configuration.md"
DOCS = REPO / "docs"


def subcommand(name: str) -> argparse.ArgumentParser:
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    parser: argparse.ArgumentParser = sub.choices[name]
    return parser


def long_flags(parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from long_flags(child)
        for flag in action.option_strings:
            if flag.startswith("--") and flag != "--help":
                yield flag


FREE_FORM = {"resources", "podSecurityContext", "containerSecurityContext"}


def leaf_values(values: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of the values a user sets; free-form maps and lists count as one value."""
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in FREE_FORM:
            yield from leaf_values(value, f"{path}.")
        else:
            yield path


def documented(text: str, dotted: str) -> bool:
    """`a.b.c` counts as documented as `a.b.c`, or as `a.b.x`, `.c` in the same table row."""
    if f"`{dotted}`" in text:
        return True
    parent, _, leaf = dotted.rpartition(".")
    return any(f"`{parent}." in row and f"`.{leaf}`" in row for row in text.splitlines() if parent)


@pytest.mark.parametrize("command", ["webhook", "controller", "certs", "dashboard"])
def test_every_flag_is_documented(command: str) -> None:
    text = CONFIGURATION.read_text()
    missing = sorted({f for f in long_flags(subcommand(command)) if f"`{f}" not in text})
    assert not missing, f"docs/configuration.md does not mention {missing} of kohort {command}"


def test_every_helm_value_is_documented() -> None:
    text = CONFIGURATION.read_text()
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    missing = [path for path in leaf_values(values) if not documented(text, path)]
    assert not missing, f"docs/configuration.md does not mention the values {missing}"


def test_links_between_docs_point_at_files_that_exist() -> None:
    for page in [*DOCS.glob("*.md"), REPO / "examples" / "README.md"]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


# Each pending reason troubleshooting.md explains, as the page shows it and as the code
# (controller/) writes it; a reworded reason fails here until the page follows.
PENDING_REASONS = {
    "LocalQueue 'x' does not exist in namespace n": "does not exist in namespace",
    "Queue 'x' does not exist": 'does not exist"',
    "Waiting for quota: needs 8 nvidia.com/gpu, queue can take 6 more": "Waiting for quota: ",
    "Quota ok but no node fits: needs 2 pods x 4 nvidia.com/gpu": "Quota ok but no node fits: ",
    "no node matches its node selector, node affinity and tolerations": (
        "no node matches its node selector, node affinity and tolerations"
    ),
    "lets only 2 fit even on empty nodes": "fit even on empty nodes",
    "lets only 2 fit on free nodes": "fit on free nodes",
    "Inadmissible: ClusterQueue q does not cover memory": "does not cover ",
    "more than ClusterQueue q can ever hold": "more than ClusterQueue ",
    "all nodes that may host them together hold only 2": "together hold only",
    "the largest node that may host them has 8": "the largest node that may host them has",
    "Waiting for its pods: 3 of the 4 pods of group ring exist": "pods of group ",
    "resized after admission": "resized after admission",
    "does not admit workloads from namespace n": "does not admit workloads from namespace",
    "no node offers example.com/fpga": "no node offers ",
    "every matching node is reserved": "every matching node is reserved",
    "StrictFIFO: waiting behind": "StrictFIFO: waiting behind",
    "Requeued after eviction; back in the queue at": "Requeued after eviction; back in the queue",
    "(evicted: ...)": "(evicted: ",
    "Not considered yet: the cycle ended before it": "Not considered yet: the cycle ended",
}


@pytest.mark.parametrize(("shown", "written"), PENDING_REASONS.items(), ids=PENDING_REASONS)
def test_troubleshooting_explains_reasons_the_controller_writes(shown: str, written: str) -> None:
    page = (DOCS / "troubleshooting.md").read_text()
    code = "\n".join(p.read_text() for p in (REPO / "controller").rglob("*.py"))
    assert shown in page
    assert written in code


def metric_names(text: str) -> set[str]:
    return set(re.findall(r"\bkohort_[a-z_]+[a-z]\b", text))


def test_operations_lists_exactly_the_metrics_the_components_export() -> None:
    code = "\n".join(
        (REPO / path).read_text()
        for path in ("webhook/metrics.py", "controller/metrics.py", "dashboard/metrics.py")
    )
    page = (DOCS / "operations.md").read_text()
    exported = metric_names(code)
    documented = {m.removesuffix("_bucket") for m in metric_names(page)}
    assert exported - documented == set(), "exported but not in docs/operations.md"
    assert documented - exported == set(), "in docs/operations.md but not exported"


def spec_fields(schema: dict[str, Any], path: str) -> Iterator[str]:
    """Dotted paths of a CRD's spec fields (Kubernetes' own toleration and taint fields aside)."""
    for name, field in (schema.get("properties") or {}).items():
        child = f"{path}.{name}"
        kind = field.get("type")
        if kind == "array" and "items" in field:
            yield f"{child}[]" if field["items"].get("type") == "object" else child
            if not name.endswith(("tolerations", "nodeTaints")):
                yield from spec_fields(field["items"], f"{child}[]")
        elif kind == "object" and field.get("properties"):
            yield from spec_fields(field, child)
        else:
            yield child


def test_api_reference_names_every_field_of_the_charts_crds() -> None:
    page = (DOCS / "api.md").read_text()
    fields = [
        field
        for crd in render().of_kind("CustomResourceDefinition")
        for field in spec_fields(
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"], "spec"
        )
    ]
    assert len(fields) > 20
    missing = [f for f in fields if f"`{f}`" not in page]
    assert not missing, f"docs/api.md does not describe {missing}"
