"""kohort as users run it, as separate processes: webhook replicas sharing one port, and
controller replicas electing a leader on a Lease. Faults kill, pause and restart them.
"""

from __future__ import annotations

import compileall
import functools
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from certs.authority import CertificateAuthority
from hack import processes
from hack.demo import (
    CONTROLLER_USER,
    STACK_LABEL,
    install_crds,
    register_webhook,
    unregister_webhook,
)
from hack.localcluster import WORKLOAD_CONTROLLER_USER, LocalCluster, free_port
from webhook.settings import WORKLOAD_CONTROLLERS

KOHORT = str(Path(sys.executable).with_name("kohort"))
# The packages a `kohort` process imports from this checkout: the product's (pyproject.toml
# installs them) and the dev tooling behind `kohort dev`.
KOHORT_PACKAGES = ("kohort", "controller", "webhook", "certs", "hack")
# Gangs here run for seconds: with the default waste budget (measured in hours of work) no
# reclaim would ever be worth its cost, and evictions are among what faults must not break.
IMMEDIATE_RECLAIM = ("--waste-budget=-1",)


@functools.cache
def compile_kohort() -> None:
    """kohort's modules compiled to bytecode, as the image has them (Dockerfile): where
    PYTHONDONTWRITEBYTECODE is set, as on CI machines, every `kohort` process would otherwise
    compile them from source as it starts (0.2 to 0.6 s of CPU each, which benches count)."""
    root = Path(__file__).resolve().parents[2]
    for package in KOHORT_PACKAGES:
        compileall.compile_dir(root / package, quiet=1)


class ChildProcess:
    """One `kohort` command as a child process, logged to a file; may be killed and restarted."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        compile_kohort()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=processes.die_with_parent,  # a killed runner leaves nothing behind
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)  # a paused process cannot handle SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


class ControllerReplica(ChildProcess):
    """`kohort controller` with leader election on a short Lease, its own health port, and its
    identity in its user agent (the API server's audit log names it)."""

    def __init__(
        self,
        kubeconfig: Path,
        stack_ident: str,
        lease_namespace: str,
        name: str,
        log_dir: Path,
        *,
        lease_name: str = "kohort-controller",
        lease_seconds: float = 4,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.lease_seconds = lease_seconds
        super().__init__(
            name,
            [
                KOHORT,
                "controller",
                f"--kubeconfig={kubeconfig}",
                f"--namespace-selector={STACK_LABEL}={stack_ident}",
                f"--leader-election-namespace={lease_namespace}",
                f"--leader-election-id={lease_name}",
                f"--lease-duration={lease_seconds:g}",
                f"--renew-deadline={lease_seconds * 0.75:g}",
                "--retry-period=0.5",
                f"--identity={name}",
                f"--health-port={self.port}",
                "--health-host=127.0.0.1",
                "--resync-period=2",
                *extra_args,
            ],
            log_dir / f"controller-{name}.log",
        )

    @property
    def user_agent(self) -> str:
        return f"kohort-controller/{self.name}"

    def get(self, path: str) -> tuple[int, str]:
        """GET one of its health endpoints: (status, body); status 0 when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except OSError as err:
            return getattr(err, "code", 0) or 0, str(err)


class ProcessStack:
    """`replicas` webhook processes on one port (SO_REUSEPORT) registered by URL with their own
    CA, and `controllers` controller replicas, all acting in namespaces enrolled in `ident`."""

    def __init__(
        self,
        cluster: LocalCluster,
        work_dir: Path,
        *,
        webhooks: int = 2,
        controllers: int = 2,
        lease_namespace: str = "default",
        lease_seconds: float = 4,
        controller_args: tuple[str, ...] = IMMEDIATE_RECLAIM,
    ) -> None:
        self.cluster = cluster
        self.work_dir = work_dir
        self.ident = uuid.uuid4().hex[:8]
        self.webhook_name = f"kohort-{self.ident}"
        self.port = free_port()
        self.lease_namespace = lease_namespace
        self.lease_name = f"kohort-controller-{self.ident}"
        cert_dir = work_dir / "webhook-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        self.ca = CertificateAuthority.create(f"kohort-webhook-{self.ident}")
        self.ca.issue_server(["localhost"], ["127.0.0.1"]).write(
            cert_dir / "tls.crt", cert_dir / "tls.key"
        )
        self.webhooks = [
            ChildProcess(
                f"webhook-{i}",
                [
                    KOHORT,
                    "webhook",
                    f"--cert-dir={cert_dir}",
                    "--host=127.0.0.1",
                    f"--port={self.port}",
                    "--metrics-port=0",
                    "--reuse-port",
                    f"--controller-user={CONTROLLER_USER}",
                    *(
                        f"--workload-controller-user={user}"
                        for user in sorted(WORKLOAD_CONTROLLERS | {WORKLOAD_CONTROLLER_USER})
                    ),
                ],
                work_dir / f"webhook-{i}.log",
            )
            for i in range(webhooks)
        ]
        self.kubeconfig = work_dir / "controller.kubeconfig"
        pair = cluster.issue_user(CONTROLLER_USER, ["system:masters"])
        cluster.write_kubeconfig(self.kubeconfig, CONTROLLER_USER, pair)
        self.controllers = [
            ControllerReplica(
                self.kubeconfig,
                self.ident,
                lease_namespace,
                name,
                work_dir,
                lease_name=self.lease_name,
                lease_seconds=lease_seconds,
                extra_args=controller_args,
            )
            for name in ("alpha", "beta", "gamma")[:controllers]
        ]

    def start(self) -> ProcessStack:
        install_crds(self.cluster.rest, self.cluster)
        self.start_webhooks()
        register_webhook(
            self.cluster.rest,
            self.webhook_name,
            f"https://127.0.0.1:{self.port}",
            self.ca.cert_pem,
            self.ident,
        )
        for replica in self.controllers:
            replica.start()
        return self

    def start_webhooks(self, timeout: float = 30.0) -> None:
        for webhook in self.webhooks:
            if not webhook.running:
                webhook.start()
        deadline = time.monotonic() + timeout
        while not _accepts(self.port):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no webhook replica listening on port {self.port}")
            time.sleep(0.05)

    def kill_webhooks(self) -> None:
        for webhook in self.webhooks:
            webhook.kill()

    def enroll(self, namespace: str) -> None:
        self.cluster.rest.patch(
            f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {STACK_LABEL: self.ident}}}
        )

    def replica(self, name: str) -> ControllerReplica:
        return next(r for r in self.controllers if r.name == name)

    def stop(self) -> None:
        for child in [*self.controllers, *self.webhooks]:
            child.stop()
        unregister_webhook(self.cluster.rest, self.webhook_name)


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
