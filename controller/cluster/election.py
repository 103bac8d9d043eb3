"""Leader election on a coordination.k8s.io Lease: only the leader admits.

Rule: expiry is judged by this replica's own clock from when it first saw the current record
(like client-go), never by comparing timestamps written by another machine; writes use the
Lease's resourceVersion, so two replicas can never both win the same term.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable

from controller.api import kinds
from controller.cluster.clients import ApiError, Client, JSONDict

log = logging.getLogger("kohort.election")


def _micro_time() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: Client,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_change: Callable[[bool], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_change = on_change
        self.monotonic = monotonic
        self._renewed_at: float | None = None
        self._observed: tuple[str, str] | None = None  # (holder, renewTime)
        self._observed_at = 0.0
        self._leader = False
        # When the last write of the Lease was about to be sent.
        self._write_sent_at = 0.0

    def is_leader(self) -> bool:
        if self._renewed_at is None:
            return False
        return self.monotonic() - self._renewed_at < self.renew_deadline

    def _set_leader(self, value: bool) -> None:
        if value != self._leader:
            self._leader = value
            log.info(
                "%s %s leadership of %s", self.identity, "took" if value else "lost", self.name
            )
            if self.on_change is not None:
                self.on_change(value)

    async def run(self) -> None:
        while True:
            await self.renew_once()
            await asyncio.sleep(self.retry_period)

    async def renew_once(self) -> None:
        """Acquire or renew the Lease once. A renewal counts from the moment before its write
        was sent: a replica stopped after the API server stored it, and resumed later, must not
        count the time it was stopped as leadership (a standby counts the Lease's duration
        from when it saw that renewal, which is later)."""
        try:
            if await self.try_acquire_or_renew():
                self._renewed_at = self._write_sent_at
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("lease %s/%s: %s", self.namespace, self.name, err)
        self._set_leader(self.is_leader())

    def _spec(self, transitions: int, acquire_time: str | None) -> JSONDict:
        now = _micro_time()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, int(self.lease_duration)),
            "acquireTime": acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        try:
            lease = await self.api.get(kinds.LEASES, self.name, self.namespace)
        except ApiError as err:
            if err.status != 404:
                raise
            body = {
                "apiVersion": kinds.LEASES.api_version,
                "kind": kinds.LEASES.kind,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(0, None),
            }
            try:
                self._write_sent_at = self.monotonic()
                await self.api.create(kinds.LEASES, body, self.namespace)
            except ApiError as create_err:
                if create_err.status == 409:
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed = record
            self._observed_at = self.monotonic()
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = self.monotonic() - self._observed_at >= duration
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new_spec = self._spec(transitions, spec.get("acquireTime"))
        else:
            new_spec = self._spec(transitions + 1, None)
        lease["spec"] = new_spec
        try:
            self._write_sent_at = self.monotonic()
            await self.api.replace(kinds.LEASES, self.name, lease, self.namespace)
        except ApiError as err:
            if err.status == 409:
                return False
            raise
        self._observed = (self.identity, str(new_spec["renewTime"]))
        self._observed_at = self.monotonic()
        return True

    async def release(self) -> None:
        """Give the lease up on a clean shutdown, so another replica need not wait it out."""
        if not self.is_leader():
            return
        try:
            lease = await self.api.get(kinds.LEASES, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.api.replace(kinds.LEASES, self.name, lease, self.namespace)
        except ApiError as err:
            log.warning("lease %s/%s not released: %s", self.namespace, self.name, err)
        self._renewed_at = None
        self._set_leader(False)
