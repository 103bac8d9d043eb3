"""The chart with `certManager.enabled`, on a real API server, with this test playing cert-manager.

cert-manager is not installed here. The test stands in for it: stand-in CRDs so the API server
accepts the Issuer and Certificate, then what cert-manager would do (write the Certificate's
Secret, and copy its CA into the webhook configurations named by the inject-ca-from
annotation). The webhook then runs with the arguments the chart renders, reading the files of
that Secret, and with no API credentials at all, as the chart runs it in this mode.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hack import processes
from hack.localcluster import ClusterOptions, LocalCluster, free_port
from tests.chart_support import CHART_DIR, NAMESPACE, RELEASE, REPO, render, run_helm
from tests.cluster.test_chart_install import http_ok, labelled_job

VALUES = ["--set", "certManager.enabled=true"]


def stand_in_crd(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(
        ClusterOptions(node_pools=(), scheduler="none"), tmp_path_factory.mktemp("cert-manager")
    )
    local.start()
    try:
        for kind, plural in (("Issuer", "issuers"), ("Certificate", "certificates")):
            local.rest.create(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                stand_in_crd(kind, plural),
            )
            local.wait_crd_established(f"{plural}.cert-manager.io")
        yield local
    finally:
        local.stop()


def play_cert_manager(cluster: LocalCluster, out: Path) -> None:
    """Issue what the chart's Certificate asks for and inject its CA where it says."""
    certificate = cluster.rest.get(
        f"/apis/cert-manager.io/v1/namespaces/{NAMESPACE}/certificates/{RELEASE}-webhook-serving"
    )
    names = [arg for name in certificate["spec"]["dnsNames"] for arg in ("--dns", name)]
    generate = [sys.executable, "-m", "kohort.cli", "certs", "generate", "--out", str(out)]
    subprocess.run(
        [*generate, *names, "--ip", "127.0.0.1"],
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    files = {name: (out / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}
    cluster.rest.create(
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": certificate["spec"]["secretName"]},
            "data": {k: base64.b64encode(v).decode() for k, v in files.items()},
        },
    )
    source = f"{NAMESPACE}/{certificate['metadata']['name']}"
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{RELEASE}"
        config = cluster.rest.get(path)
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == source
        for webhook in config["webhooks"]:
            webhook["clientConfig"]["caBundle"] = base64.b64encode(files["ca.crt"]).decode()
        cluster.rest.request("PUT", path, config)


def test_the_webhook_serves_cert_manager_certificates_without_api_access(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    port, metrics_port = free_port(), free_port()
    install = run_helm(
        "install", RELEASE, str(CHART_DIR), "--namespace", NAMESPACE, "--create-namespace",
        "--kubeconfig", str(cluster.kubeconfig), *VALUES,
        "--set", f"webhook.urlOverride=https://127.0.0.1:{port}",
        check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    play_cert_manager(cluster, tmp_path / "issued")

    # The chart's arguments, reading the certificate from where the Secret would be mounted.
    args: list[str] = render({"certManager": {"enabled": True}}).container("webhook")["args"]
    args = [a for a in args if not a.startswith("--cert-dir=")]
    args += [f"--cert-dir={tmp_path / 'issued'}", "--host=127.0.0.1", f"--port={port}"]
    args += [f"--metrics-port={metrics_port}"]
    assert not [a for a in args if a.startswith(("--rotate-secret", "--kubeconfig"))]
    webhook = processes.start(
        "chart-webhook-cert-manager",
        [sys.executable, "-m", "kohort.cli", *args],
        cluster.log_dir,
        tie_to_parent=True,
        env={"PYTHONPATH": str(REPO), "KUBERNETES_SERVICE_HOST": ""},
    )
    try:
        processes.wait_until(
            "the webhook's /readyz",
            lambda: http_ok(f"http://127.0.0.1:{metrics_port}/readyz"),
            60,
            [webhook],
        )
        cluster.rest.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "held"}},
        )
        created = cluster.rest.create(
            "/apis/batch/v1/namespaces/held/jobs", labelled_job("held", 2)
        )
        assert created["spec"]["suspend"] is True
    finally:
        processes.stop(webhook.pid)
        run_helm(
            "uninstall", RELEASE, "--namespace", NAMESPACE,
            "--kubeconfig", str(cluster.kubeconfig), check=False,
        )  # fmt: skip
