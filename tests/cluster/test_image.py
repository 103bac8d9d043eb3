"""kohort's image as users run it: built by `make image` (no Docker, no registry), run by podman
with runc from Debian's packages, read-only and as its non-root user.

The image is the one in .kohort/image, rebuilt here when missing or older than the checkout's
code (about 4 minutes on a loaded 2-core machine). The
webhook and the controller of docs/tour.md run from the image instead of the checkout's venv:
the tour's sh block, with only its two `.venv/bin/kohort` commands swapped for `podman run`
of the image, on the host's network namespace (the API server calls the webhook on
127.0.0.1, the chart's URL mode; the containers reach the API server on 127.0.0.1), with the
control plane's kubeconfig and client certificates mounted read-only.

Skips, saying why, where podman, runc or skopeo are missing or the runtime cannot start a
container. Here crun (podman's default) cannot: "cgroups in hybrid mode not supported"; and
podman's default rlimits are above this sandbox's hard limits, which without CAP_SYS_RESOURCE
cannot be raised, so the containers get lower ones (docs/installation.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.test_tour import ROOT, TourRun, run_tour, tour_block

IMAGE_DIR = ROOT / ".kohort" / "image"
TAG = "0.1.0"
# podman's defaults (nofile 1048576) are above the sandbox's hard limits: setrlimit fails.
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def image() -> str:
    """The image's name in podman's storage, copied from the OCI layout `make image` wrote."""
    missing = [tool for tool in ("podman", "runc", "skopeo") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"no {', '.join(missing)}: apt-get install -y podman runc skopeo")
    if os.geteuid() != 0:
        pytest.skip("podman here runs as root (rootless podman needs subordinate ids)")
    if _stale():
        # Building fetches Debian's packages: `make test` does it before the tests, never a test.
        pytest.skip("no image of the code as it is: `make image` builds it (make test does)")
    digest = (IMAGE_DIR / "digest").read_text().strip()
    name = f"localhost/kohort-test:{digest.removeprefix('sha256:')[:12]}"
    copied = _run("skopeo", "copy", f"oci:{IMAGE_DIR / 'oci'}:{TAG}", f"containers-storage:{name}")
    assert copied.returncode == 0, copied.stderr
    probe = _run(*_podman_run(), "--entrypoint", "true", name)
    if probe.returncode != 0:
        pytest.skip(f"podman with runc cannot start a container here: {probe.stderr.strip()}")
    return name


# What goes into the image: a change to any of them since it was built makes the tests skip.
# (hack/build-image.sh's INPUTS; its revision label is the last commit that changed one).
INPUTS = [
    "pyproject.toml", "constraints.txt", "README.md", "kohort", "controller", "webhook", "certs",
    "dashboard", "hack/build-image.sh", "hack/image-rootfs.sh",
]  # fmt: skip


def _stale() -> bool:
    """True when there is no image, or what goes into it differs in the work tree from the
    commit it was built at (its revision label)."""
    if not (IMAGE_DIR / "digest").exists():
        return True
    try:
        built_at = _config()["config"]["Labels"]["org.opencontainers.image.revision"]
    except (OSError, KeyError, ValueError):
        return True  # a build left half done
    # exit status 1: the work tree differs from that commit there; 128: no such commit here
    return _run("git", "-C", str(ROOT), "diff", "--quiet", built_at, "--", *INPUTS).returncode != 0


def _podman_run(*mounts: str) -> list[str]:
    """`podman run` as the tests run the image: read-only, on the host's network namespace,
    with `mounts` (host paths) mounted read-only at the same paths and owned by the image's
    user (`U`: as a pod's fsGroup makes its Secret volumes readable), so that it can read the
    client keys that `kohort dev up` writes readable by their owner only."""
    volumes = [arg for path in mounts for arg in ("--volume", f"{path}:{path}:ro,U")]
    return [
        "podman",
        "--runtime",
        "runc",
        "run",
        "--rm",
        "--read-only",
        "--network",
        "host",
        *LIMITS,
        *volumes,
    ]


def test_the_image_runs_kohort_as_the_nonroot_user(image: str) -> None:
    who = _run(*_podman_run(), "--entrypoint", "id", image)
    assert who.stdout.strip() == "uid=65532(nonroot) gid=65532(nonroot) groups=65532(nonroot)"
    helped = _run(*_podman_run(), image)
    assert helped.returncode == 0, helped.stderr
    for command in ("webhook", "controller", "certs"):
        assert f"    {command}" in helped.stdout


def test_nothing_can_be_written_outside_tmp(image: str) -> None:
    wrote = _run(*_podman_run(), "--entrypoint", "sh", image, "-c", "touch /opt/kohort/x")
    assert wrote.returncode != 0
    assert "Read-only file system" in wrote.stderr
    tmp = _run(*_podman_run(), "--entrypoint", "sh", image, "-c", "touch /tmp/x && echo ok")
    assert tmp.stdout.strip() == "ok", tmp.stderr


def test_kohort_certs_writes_a_ca_and_a_serving_pair_into_a_mounted_dir(
    image: str, tmp_path: Path
) -> None:
    tmp_path.chmod(0o777)  # the image's user writes there
    out = [
        "podman", "--runtime", "runc", "run", "--rm", "--read-only", "--network", "none",
        *LIMITS, "--volume", f"{tmp_path}:/out",
    ]  # fmt: skip
    made = _run(*out, image, "certs", "generate", "--out", "/out", "--ip", "127.0.0.1")
    assert made.returncode == 0, made.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    checked = _run(
        "openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")
    )
    assert checked.stdout.strip().endswith(": OK"), checked.stderr


@pytest.fixture(scope="module")
def tour_from_image(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TourRun]:
    scratch = tmp_path_factory.mktemp("image-tour")
    work = scratch / "dev"
    names = {
        "webhook": f"kohort-webhook-{scratch.name}",
        "controller": f"kohort-ctl-{scratch.name}",
    }
    run = _podman_run(str(work / "pki"), str(work / "kubeconfig"))
    block = tour_block()
    for command, name in names.items():
        container = " ".join([*run, "--name", name, image, command])
        assert block.count(f".venv/bin/kohort {command} ") == 1
        block = block.replace(f".venv/bin/kohort {command} ", f"{container} ")
    try:
        yield run_tour("kubernetes", scratch, block=block)
    finally:
        for name in names.values():
            _run("podman", "rm", "--force", "--time", "0", name)


def test_the_images_webhook_and_controller_admit_the_tours_gang_and_hold_the_other(
    tour_from_image: TourRun,
) -> None:
    run = tour_from_image
    assert run.returncode == 0, run.output
    admitted = run.lines(r"job-train-resnet\s+team-a\s+(\S+)\s+<none>")
    assert len(admitted) == 1, run.output
    pods = run.lines(r"(train-resnet-\S+)\s+(\S+)\s+(\S+)\s+Running")
    assert len(pods) == 4, run.output
    assert run.lines(r"job-too-big\s+<none>\s+<none>\s+Inadmissible: .*"), run.output
    # Both ran in the image's containers (pid 1 of their own pid namespace), and the webhook's
    # rotator wrote the chart's Secret before it served.
    assert run.lines(r".* INFO kohort\.controller controller started \(pid 1\)"), run.output
    assert run.lines(r".* INFO webhook\.server webhook serving"), run.output
    assert run.lines(r".* INFO certs\.rotator certificates renewed"), run.output
    assert run.survivors == [], "`kill %1 %2` stopped both containers' podman"


def _blob(digest: str) -> Path:
    return IMAGE_DIR / "oci" / "blobs" / "sha256" / digest.removeprefix("sha256:")


def _manifest() -> Any:
    index = json.loads((IMAGE_DIR / "oci" / "index.json").read_text())
    return json.loads(_blob(index["manifests"][0]["digest"]).read_text())


def _config() -> Any:
    return json.loads(_blob(_manifest()["config"]["digest"]).read_text())


def _layer() -> tarfile.TarFile:
    (layer,) = _manifest()["layers"]
    return tarfile.open(_blob(layer["digest"]), "r:gz")


def test_the_layer_holds_nothing_that_would_change_from_one_build_to_the_next(image: str) -> None:
    """What the digest's reproducibility rests on: no file newer than the commit's time, and
    kohort's bytecode checked by hash, not by its source's mtime."""
    created = _config()["created"]
    epoch = int(datetime.fromisoformat(created).timestamp())
    assert epoch > 0, created
    newer, timestamped, writable, compiled = [], [], [], 0
    with _layer() as layer:
        for member in layer:
            name = member.name.removeprefix("./")
            if member.mtime > epoch:
                newer.append(name)
            sticky_or_device = member.mode & 0o1000 or member.ischr() or member.isblk()
            if member.mode & 0o002 and not member.issym() and not sticky_or_device:
                writable.append(name)
            if name.startswith("opt/kohort/") and name.endswith(".pyc"):
                header = layer.extractfile(member)
                assert header is not None
                compiled += 1
                flags = int.from_bytes(header.read(8)[4:8], "little")
                if not flags & 0b1:  # PEP 552: bit 0 set means hash-based
                    timestamped.append(name)
    assert compiled > 1000, "kohort and its dependencies are compiled"
    assert newer == []
    assert timestamped == []
    assert writable == [], "only sticky directories (/tmp) and devices are writable by all"
