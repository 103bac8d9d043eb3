"""The Dockerfile builds the image the chart runs: the same command, user and packages.

The image cannot be built on these machines; these checks cover what can go wrong without
building it: a package left out of the build context, a component importing the tests or the
dev tooling, which the image does not ship, or a user or entry point that disagrees with the
chart.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.chart_support import REPO, render
from tests.unit.test_packaging import PRODUCT_PACKAGES

DOCKERFILE = (REPO / "Dockerfile").read_text()
DOCKERIGNORE = (REPO / ".dockerignore").read_text().splitlines()
LEFT_OUT = ["hack", "tests", "bench"]


def test_the_entry_point_is_the_command_the_chart_runs() -> None:
    assert 'ENTRYPOINT ["kohort"]' in DOCKERFILE
    for component in ("webhook", "controller"):
        assert render().container(component)["command"] == ["kohort"]


def test_the_image_runs_as_the_non_root_user_the_chart_expects() -> None:
    [user] = re.findall(r"^USER (\d+):(\d+)$", DOCKERFILE, re.MULTILINE)
    pod = render().deployment("webhook")["spec"]["template"]["spec"]["securityContext"]
    assert (int(user[0]), int(user[1])) == (pod["runAsUser"], pod["runAsGroup"])
    assert pod["runAsUser"] != 0


@pytest.mark.parametrize("package", PRODUCT_PACKAGES)
def test_every_runtime_package_is_in_the_build_context_and_copied(package: str) -> None:
    assert f"!{package}/" in DOCKERIGNORE
    assert f"COPY {package}/ {package}/" in DOCKERFILE


@pytest.mark.parametrize("tree", LEFT_OUT)
def test_the_dev_tooling_tests_and_benches_stay_out_of_the_image(tree: str) -> None:
    assert f"!{tree}/" not in DOCKERIGNORE
    assert f"COPY {tree}/" not in DOCKERFILE


def test_the_components_need_nothing_the_image_leaves_out() -> None:
    """Import the three commands and build the whole command line (`kohort --help`, as the
    Dockerfile runs it) with tests/ and hack/ made unimportable, as in the image."""
    script = (
        "import sys\n"
        "sys.modules['tests'] = None\n"
        "sys.modules['hack'] = None\n"
        "import controller.main, webhook.main, certs.main\n"
        "from kohort.cli import build_parser\n"
        "build_parser().parse_args(['webhook', '--help'])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
