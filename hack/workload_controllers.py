"""The workload controllers whose kinds kohort admits as gangs, run on the local control plane
as their releases build them: LeaderWorkerSet, JobSet, KubeRay and the Kubeflow training
operator (PyTorchJob).

Each runs as its own process with the cluster's admin kubeconfig, as `make`-built binaries
from `hack/build-testenv.sh`. Their CRDs and webhook configurations are read in place from
their Go modules in the module cache; a webhook configuration is pointed at the process on
127.0.0.1 and trusts the cluster's CA, which also signs the process's serving certificate.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from hack import testenv

# Kinds of webhook configuration a kubebuilder `manifests.yaml` holds.
MUTATING = "MutatingWebhookConfiguration"
VALIDATING = "ValidatingWebhookConfiguration"
WEBHOOK_KINDS = {
    MUTATING: "mutatingwebhookconfigurations",
    VALIDATING: "validatingwebhookconfigurations",
}


@dataclass(frozen=True)
class Ports:
    """Where one started controller listens."""

    webhook: int
    health: int
    cert_dir: Path
    work_dir: Path
    kubeconfig: Path


@dataclass(frozen=True)
class WorkloadController:
    """One controller: its binary, its module (for CRDs and webhooks) and how it is started."""

    name: str
    binary: str
    module: str
    version_key: str
    # Module-relative CRD files (globs).
    crds: tuple[str, ...]
    # Module-relative kubebuilder webhook manifests and the kustomize JSON patches applied to
    # them per configuration kind; None: the controller's webhooks are not registered.
    webhooks: str | None
    webhook_patches: tuple[tuple[str, str], ...]
    argv: Callable[[WorkloadController, Ports], list[str]]
    # Objects the controller expects to exist (created if missing): namespaced ones as
    # (api path of the collection, object).
    objects: tuple[tuple[str, dict[str, Any]], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # A Secret the controller expects mounted as files: (namespace, name, directory). Nothing
    # mounts it off-cluster, so the cluster writes its data there once the controller fills it.
    mounted_secret: tuple[str, str, str] | None = None

    @property
    def version(self) -> str:
        return testenv.versions()[self.version_key]

    def module_dir(self) -> Path:
        return testenv.go_module_dir(self.module, self.version)

    def crd_files(self) -> list[Path]:
        root = self.module_dir()
        files = sorted(p for pattern in self.crds for p in root.glob(pattern))
        if not files:
            raise testenv.TestenvMissing(f"no CRDs for {self.name} under {root}")
        return files

    def webhook_configurations(self, url: str, ca_bundle: str) -> list[dict[str, Any]]:
        """The controller's webhook configurations as its release ships them (kustomize patches
        applied), named after the controller, each webhook calling `url` plus its path."""
        if self.webhooks is None:
            return []
        root = self.module_dir()
        docs = [d for d in yaml.safe_load_all((root / self.webhooks).read_text()) if d]
        out = []
        for doc in docs:
            kind = doc["kind"]
            for patch_kind, patch_file in self.webhook_patches:
                if patch_kind == kind:
                    ops = yaml.safe_load((root / patch_file).read_text())
                    doc = jsonpatch.apply_patch(doc, ops)
            doc = copy.deepcopy(doc)
            doc["metadata"] = {"name": f"{self.name}-{doc['metadata']['name']}"}
            for hook in doc.get("webhooks", []):
                path = hook["clientConfig"]["service"].get("path", "/")
                hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": ca_bundle}
            out.append(doc)
        return out


def _controller_runtime_config(api_version: str, ports: Ports) -> Path:
    """A kubebuilder-style Configuration file: its own certificates, no leader election, no
    metrics server, health probes on a free port."""
    path = ports.work_dir / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": api_version,
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "webhook": {
                    "port": ports.webhook,
                    "host": "127.0.0.1",
                    "certDir": str(ports.cert_dir),
                },
                "metrics": {"bindAddress": "0"},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
            }
        )
    )
    return path


def _lws_argv(c: WorkloadController, ports: Ports) -> list[str]:
    config = _controller_runtime_config("config.lws.x-k8s.io/v1alpha1", ports)
    return [str(testenv.binary(c.binary)), f"--config={config}", "--zap-log-level=2"]


def _jobset_argv(c: WorkloadController, ports: Ports) -> list[str]:
    config = _controller_runtime_config("config.jobset.x-k8s.io/v1alpha1", ports)
    return [str(testenv.binary(c.binary)), f"--config={config}", "--zap-log-level=2"]


def _kuberay_argv(c: WorkloadController, ports: Ports) -> list[str]:
    return [
        str(testenv.binary(c.binary)),
        "--metrics-addr=0",
        f"--health-probe-bind-address=127.0.0.1:{ports.health}",
        "--enable-leader-election=false",
        "--log-stdout-encoder=console",
    ]


# Kueue reads its metrics server's certificate from this fixed path whenever its internal
# certificate management is off, even with metrics off (its cmd/kueue/main.go).
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def _kueue_argv(c: WorkloadController, ports: Ports) -> list[str]:
    """Kueue's manager with the release's Configuration (config/components/manager), changed
    only where a process on 127.0.0.1 needs it, and its batch/v1 Job integration alone."""
    config = yaml.safe_load(
        (c.module_dir() / "config/components/manager/controller_manager_config.yaml").read_text()
    )
    config.update(
        {
            "namespace": "kueue-system",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": ports.webhook, "host": "127.0.0.1", "certDir": str(ports.cert_dir)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
            "integrations": {"frameworks": ["batch/job"]},
            # Its visibility API is an aggregated API server that needs an in-cluster Service.
            "featureGates": {"VisibilityOnDemand": False},
        }
    )
    path = ports.work_dir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    KUEUE_METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        (KUEUE_METRICS_CERT_DIR / name).write_bytes((ports.cert_dir / name).read_bytes())
    return [str(testenv.binary(c.binary)), f"--config={path}", "--zap-log-level=2"]


def _training_operator_argv(c: WorkloadController, ports: Ports) -> list[str]:
    # Its webhook server only validates, with certificates its own rotator issues for an
    # in-cluster Service name; it listens on a free port and is not registered here.
    return [
        str(testenv.binary(c.binary)),
        "--enable-scheme=pytorchjob",
        "--metrics-bind-address=0",
        f"--health-probe-bind-address=127.0.0.1:{ports.health}",
        f"--webhook-server-port={ports.webhook}",
        "--leader-elect=false",
    ]


LWS = WorkloadController(
    name="lws-manager",
    binary="lws-manager",
    module="sigs.k8s.io/lws",
    version_key="LWS_VERSION",
    crds=("config/crd/bases/*.yaml",),
    webhooks="config/webhook/manifests.yaml",
    webhook_patches=(
        (MUTATING, "config/webhook/mutating-patch.yaml"),
        (VALIDATING, "config/webhook/validating-patch.yaml"),
    ),
    argv=_lws_argv,
)
JOBSET = WorkloadController(
    name="jobset-manager",
    binary="jobset-manager",
    module="sigs.k8s.io/jobset",
    version_key="JOBSET_VERSION",
    crds=("config/components/crd/bases/*.yaml",),
    webhooks="config/components/webhook/manifests.yaml",
    webhook_patches=(
        (MUTATING, "config/components/webhook/patches/mutating-patch.yaml"),
        (VALIDATING, "config/components/webhook/patches/validating-patch.yaml"),
    ),
    argv=_jobset_argv,
)
KUBERAY = WorkloadController(
    name="kuberay-operator",
    binary="kuberay-operator",
    module="github.com/ray-project/kuberay/ray-operator",
    version_key="KUBERAY_VERSION",
    crds=("config/crd/bases/*.yaml",),
    webhooks=None,
    webhook_patches=(),
    argv=_kuberay_argv,
)
TRAINING_OPERATOR = WorkloadController(
    name="training-operator",
    binary="training-operator",
    module="github.com/kubeflow/training-operator",
    version_key="TRAINING_OPERATOR_VERSION",
    crds=("manifests/base/crds/kubeflow.org_pytorchjobs.yaml",),
    webhooks=None,
    webhook_patches=(),
    argv=_training_operator_argv,
    # Its certificate rotator fills a Secret the release ships empty, and is ready once it has
    # put its CA into the release's ValidatingWebhookConfiguration: registered here with no
    # webhook, as the certificate it issues names only an in-cluster Service.
    objects=(
        (
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubeflow"}},
        ),
        (
            "/api/v1/namespaces/kubeflow/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "training-operator-webhook-cert", "namespace": "kubeflow"},
            },
        ),
        (
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": VALIDATING,
                "metadata": {"name": "validator.training-operator.kubeflow.org"},
                "webhooks": [],
            },
        ),
    ),
    env=(("MY_POD_NAMESPACE", "kubeflow"),),
    # Its rotator waits for the files of its Secret where a pod would mount them.
    mounted_secret=(
        "kubeflow",
        "training-operator-webhook-cert",
        "/tmp/k8s-webhook-server/serving-certs",
    ),
)

# Kueue, for bench/bench_scale.py (`hack/build-testenv.sh kueue` builds it; not by default). Its
# webhooks are registered as its module ships them; those of integrations it does not run
# answer as no-ops, as in its release.
KUEUE = WorkloadController(
    name="kueue-manager",
    binary="kueue-manager",
    module="sigs.k8s.io/kueue",
    version_key="KUEUE_VERSION",
    crds=("config/components/crd/bases/*.yaml",),
    webhooks="config/components/webhook/manifests.yaml",
    webhook_patches=(),
    argv=_kueue_argv,
    objects=(
        (
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}},
        ),
    ),
)

CONTROLLERS: dict[str, WorkloadController] = {
    c.name: c for c in (LWS, JOBSET, KUBERAY, TRAINING_OPERATOR, KUEUE)
}


def named(names: Sequence[str]) -> list[WorkloadController]:
    unknown = [n for n in names if n not in CONTROLLERS]
    if unknown:
        raise KeyError(f"unknown workload controllers {unknown}; known: {sorted(CONTROLLERS)}")
    return [CONTROLLERS[n] for n in names]
