"""What a wheel of kohort installs: the product's packages, without the dev tooling or the tests.

Building a wheel here would need setuptools >= 77 (pyproject.toml's build requirement), which
the dev venv does not hold and an isolated build would download. So these tests ask setuptools'
package discovery, with the `[tool.setuptools.packages.find]` table the build reads (namespace
packages included, its default there), which packages the wheel gets: each with its modules.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("certs", "controller", "dashboard", "kohort", "webhook")
# Test support that the package once shipped, now under tests/fakes and hack/objects.py.
MOVED_OUT = (
    "controller/cluster/memory.py",
    "controller/cluster/testing.py",
    "controller/workloads/testing.py",
    "webhook/testing.py",
)


def wheel_packages() -> list[str]:
    setuptools = pytest.importorskip("setuptools", reason="package discovery is setuptools'")
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    find = config["tool"]["setuptools"]["packages"]["find"]
    assert set(find) <= {"include", "exclude"}, "an option this discovery does not apply"
    found: list[str] = setuptools.find_namespace_packages(
        str(REPO), include=find["include"], exclude=find.get("exclude", ())
    )
    return found


def wheel_modules() -> set[str]:
    return {
        module.relative_to(REPO).as_posix()
        for package in wheel_packages()
        for module in (REPO / package.replace(".", "/")).glob("*.py")
    }


def test_the_wheel_installs_the_product_packages_only() -> None:
    top_level = {package.split(".")[0] for package in wheel_packages()}
    assert sorted(top_level) == list(PRODUCT_PACKAGES)


def test_the_wheel_holds_every_module_of_the_product() -> None:
    product = {
        module.relative_to(REPO).as_posix()
        for package in PRODUCT_PACKAGES
        for module in (REPO / package).rglob("*.py")
    }
    assert wheel_modules() == product


def test_the_wheel_holds_no_test_support() -> None:
    modules = wheel_modules()
    assert not modules & set(MOVED_OUT)
    names = {Path(module).name for module in modules}
    assert not {n for n in names if n in ("testing.py", "conftest.py") or n.startswith("test_")}


def test_the_wheel_carries_the_dashboards_page_script_and_style() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["dashboard"]
    static = [
        p.relative_to(REPO / "dashboard").as_posix() for p in (REPO / "dashboard").rglob("static/*")
    ]
    assert {"static/index.html", "static/dashboard.js", "static/dashboard.css"} <= set(static)
    assert all(any(fnmatch.fnmatch(name, pattern) for pattern in patterns) for name in static)
