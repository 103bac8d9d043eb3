"""Child processes of the local control plane: started in their own process group, logged to
files, recorded by PID so that another process (`kohort dev down`) can stop them too."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends SIGTERM when the parent dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _child_env() -> dict[str, str]:
    # Webhook calls from the apiserver honour proxy variables; nothing here may leave loopback.
    return {
        k: v for k, v in os.environ.items() if k.lower() not in {"http_proxy", "https_proxy"}
    } | {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@dataclass
class ManagedProcess:
    name: str
    pid: int
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    # How it was started, so that it can be started again the same way (`restart`).
    argv: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    tie_to_parent: bool = True

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return pid_alive(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0): reap it if it is ours, and count it as gone either way.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def start(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    *,
    tie_to_parent: bool,
    env: dict[str, str] | None = None,
) -> ManagedProcess:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=_child_env() | (env or {}),
            preexec_fn=die_with_parent if tie_to_parent else None,
        )
    return ManagedProcess(
        name, popen.pid, log_path, popen, tuple(argv), env, tie_to_parent=tie_to_parent
    )


def restart(proc: ManagedProcess, log_dir: Path, *, downtime: float = 0.0) -> ManagedProcess:
    """Stop `proc` (SIGTERM, then SIGKILL), wait `downtime` seconds, start it again with the
    same command line; the new process."""
    stop(proc.pid)
    time.sleep(downtime)
    return start(proc.name, proc.argv, log_dir, tie_to_parent=proc.tie_to_parent, env=proc.env)


def stop(pid: int, grace_seconds: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after the grace period.

    Returns once the process and every other live member of its group are gone.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline:
            if not pid_alive(pid) and not group_members(pid):
                return
            time.sleep(0.05)


def group_members(pgid: int) -> list[int]:
    """Processes of process group `pgid` that are still running (zombies count as gone)."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # ended while we looked
        fields = stat.rsplit(")", 1)[-1].split()  # state, ppid, pgrp, ...
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    watched: Sequence[ManagedProcess] = (),
    interval: float = 0.2,
) -> None:
    """Polls `check` until it is true; fails early, with the log, if a watched process exits."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        for proc in watched:
            if not proc.alive():
                raise RuntimeError(
                    f"{proc.name} exited while waiting for {what}; last log lines "
                    f"({proc.log_path}):\n{proc.log_tail()}"
                )
        try:
            if check():
                return
            last_error = None
        except Exception as err:
            last_error = err
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
