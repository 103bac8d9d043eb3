"""Where the local control plane's binaries and third-party manifests come from.

Binaries are built by `hack/build-testenv.sh` into a cache keyed by `hack/versions.env`.
Third-party files (kwok stages, Volcano CRDs) are read in place from the Go module cache.
"""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from pathlib import Path

HACK_DIR = Path(__file__).resolve().parent
BUILD_SCRIPT = HACK_DIR / "build-testenv.sh"
VERSIONS_FILE = HACK_DIR / "versions.env"


class TestenvMissing(RuntimeError):
    """A binary or module the local control plane needs has not been built or downloaded."""


@cache
def versions() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            pins[key.strip()] = value.strip()
    return pins


@cache
def bin_dir() -> Path:
    """The directory holding the binaries for the current pins (built or not)."""
    override = os.environ.get("KOHORT_TESTENV_BIN")
    if override:
        return Path(override)
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-dir"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def binary(name: str) -> Path:
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        raise TestenvMissing(f"{name} is not built in {bin_dir()}; run `make testenv`")
    return path


def go_module_dir(module: str, version: str) -> Path:
    """The module's directory in the Go module cache, downloading it through the proxy if needed."""
    try:
        out = subprocess.run(
            ["go", "mod", "download", "-json", f"{module}@{version}"],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"},
        )
    except (OSError, subprocess.CalledProcessError) as err:
        raise TestenvMissing(f"cannot download Go module {module}@{version}: {err}") from err
    info = json.loads(out.stdout)
    if "Dir" not in info:
        raise TestenvMissing(f"Go module {module}@{version}: {info.get('Error', 'no Dir')}")
    return Path(info["Dir"])


def kwok_stage_files() -> list[Path]:
    """kwok's own stages for fast node start-up, lease heartbeats, and pod ready/delete."""
    stage_dir = go_module_dir("sigs.k8s.io/kwok", versions()["KWOK_VERSION"]) / "kustomize/stage"
    files = [
        stage_dir / "node/fast/node-initialize.yaml",
        stage_dir / "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        stage_dir / "pod/fast/pod-ready.yaml",
        stage_dir / "pod/fast/pod-delete.yaml",
    ]
    # Pods run until deleted unless they ask to complete (see the stage file for the annotation).
    files.append(HACK_DIR / "kwok-stages" / "pod-complete-after-annotation.yaml")
    return files


def volcano_crd_files() -> list[Path]:
    """Every CRD Volcano's scheduler and controller-manager wait for, read from the module cache."""
    chart = (
        go_module_dir("volcano.sh/volcano", versions()["VOLCANO_VERSION"])
        / "installer/helm/chart/volcano"
    )
    files = sorted((chart / "crd/bases").glob("*.yaml"))
    files += sorted((chart / "charts/jobflow/crd/bases").glob("*.yaml"))
    if not files:
        raise TestenvMissing(f"no Volcano CRDs found under {chart}")
    return files


def provisioning_request_crd_files() -> list[Path]:
    """The ProvisioningRequest CRD that hack/provisioner.py answers (written in hack/crds/)."""
    return [HACK_DIR / "crds" / "autoscaling.x-k8s.io_provisioningrequests.yaml"]
