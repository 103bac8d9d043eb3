"""docs/troubleshooting.md tells how to find the Workload of a job of every kind kohort manages:
the prefixes come from what the adapters declare (the registry), so a new kind left out of the
page fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.api.kinds import Kind
from controller.workloads.registry import REGISTRY

TROUBLESHOOTING = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"


PREFIXES = sorted(REGISTRY.gang_prefixes.items(), key=lambda kind_prefix: kind_prefix[1])


@pytest.mark.parametrize(("kind", "prefix"), PREFIXES, ids=[prefix for _, prefix in PREFIXES])
def test_troubleshooting_names_the_workload_prefix_of_every_registered_kind(
    kind: Kind, prefix: str
) -> None:
    text = " ".join(TROUBLESHOOTING.read_text().split())
    assert f"`{prefix}-` ({kind.kind}" in text
