"""The chart's CRDs are exactly what the API models generate, kept on uninstall, and optional.

Regenerate with `.venv/bin/python charts/kohort/generate_crds.py` after changing controller/api.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from tests.chart_support import CHART_DIR, render

KEEP = "helm.sh/resource-policy"


def generator() -> ModuleType:
    if importlib.util.find_spec("controller.api.crds") is None:
        pytest.skip("controller/api/crds.py (the CRD generator) does not exist yet")
    spec = importlib.util.spec_from_file_location("generate_crds", CHART_DIR / "generate_crds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_crds_equal_the_generated_ones() -> None:
    module = generator()
    out_of_date = module.stale(module.expected_files())
    assert not out_of_date, (
        f"run .venv/bin/python charts/kohort/generate_crds.py; out of date: {out_of_date}"
    )


def test_every_kohort_kind_has_a_crd_that_survives_uninstall() -> None:
    generator()
    crds = render().of_kind("CustomResourceDefinition")
    kinds = {crd["spec"]["names"]["kind"] for crd in crds}
    assert kinds >= {"ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor", "Workload"}
    for crd in crds:
        assert crd["spec"]["group"] == "kohort.dev"
        assert crd["metadata"]["annotations"][KEEP] == "keep"


def test_crds_can_be_left_to_another_tool() -> None:
    assert not render({"crds": {"install": False}}).of_kind("CustomResourceDefinition")
