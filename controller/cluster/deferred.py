"""Writes a pass does not wait for: pending reasons, Events, ClusterQueue and Cohort status.

Rule: these writes report; no decision waits on them, so the next pass may start while they
go out. Each key (a gang, a queue) has at most one entry queued and one in flight, in that
order: a newer entry for a key replaces the one still queued, and a pass that writes a gang
itself first claims its key (drops what is queued, waits for what is in flight), so a stale
report never lands after a newer record. Events have no key and are never replaced. While a
pass writes (`foreground`), only `while_passes_write` reports are in flight at once, so that the
writes decisions wait on meet a less busy API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass

from controller.cluster.clients import ApiError, Fenced
from controller.cluster.writers import Writers, superseded
from controller.state.steps import RecordEvent, Step

log = logging.getLogger("kohort.deferred")


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class _Entry:
    steps: tuple[Step, ...]
    failed: Callable[[], None]
    # When the entry is dropped unwritten (a pass claimed its key) or has been written.
    dropped: Callable[[], None] = _nothing
    written: Callable[[], None] = _nothing


class DeferredWrites:
    def __init__(
        self,
        writers: Writers,
        *,
        while_passes_write: int = 2,
        fenced: Callable[[], None] = _nothing,
    ) -> None:
        self.writers = writers
        self.while_passes_write = while_passes_write
        # Told when the fence refused a write and everything queued was dropped.
        self.fenced = fenced
        self._foreground = 0
        self._queued: dict[Hashable, _Entry] = {}
        self._events: deque[RecordEvent] = deque()
        self._in_flight: dict[Hashable, asyncio.Future[None]] = {}
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._busy = 0

    def __len__(self) -> int:
        return len(self._queued) + len(self._events) + self._busy  # events in flight too

    def defer(
        self,
        key: Hashable,
        steps: Sequence[Step],
        failed: Callable[[], None],
        *,
        dropped: Callable[[], None] = _nothing,
        written: Callable[[], None] = _nothing,
    ) -> None:
        """Write `steps` (in order) soon; `failed` is called when one of them is refused,
        `dropped` when a pass claims the key before they are written (not when a newer entry
        replaces them), `written` once they all are."""
        entry = _Entry(tuple(steps), failed, dropped, written)
        if not entry.steps or self._queued.get(key) == entry:
            return
        self._queued.pop(key, None)  # the newer one goes to the back of the line
        self._queued[key] = entry
        self._wake()

    def event(self, step: RecordEvent) -> None:
        self._events.append(step)
        self._wake()

    async def claim(self, key: Hashable) -> None:
        """Drop what is queued for `key` and wait for its write in flight: the caller writes
        the key's object itself, with newer content."""
        self._drop(key)
        running = self._in_flight.get(key)
        if running is not None:
            await asyncio.shield(running)
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        entry = self._queued.pop(key, None)
        if entry is not None:
            entry.dropped()
            self._settle_idle()

    @contextlib.contextmanager
    def foreground(self) -> Iterator[None]:
        """While a pass writes: fewer reports in flight."""
        self._foreground += 1
        try:
            yield
        finally:
            self._foreground -= 1
            if not self._foreground and (self._queued or self._events):
                self._ready.set()

    def clear(self) -> None:
        """Drop everything queued (this replica no longer leads, or its view was reset)."""
        self._queued.clear()
        self._events.clear()
        self._settle_idle()

    async def work(self) -> None:
        """One worker: write entries as they come, forever."""
        while True:
            await self._ready.wait()
            try:
                if not await self._take_one(yielding=True):
                    self._ready.clear()
            except Exception:
                log.exception("a deferred write failed unexpectedly")

    async def drain(self, concurrency: int = 8) -> None:
        """Write everything queued now (in this task and `concurrency` - 1 more), and wait until
        nothing is in flight."""

        async def worker() -> None:
            while await self._take_one():
                pass

        async with asyncio.TaskGroup() as group:
            for _ in range(concurrency):
                group.create_task(worker())
        await self._idle.wait()

    def _wake(self) -> None:
        self._idle.clear()
        self._ready.set()

    def _settle_idle(self) -> None:
        if not self._queued and not self._events and not self._busy:
            self._idle.set()

    async def _take_one(self, *, yielding: bool = False) -> bool:
        """Write the next entry; False when there was none (or, `yielding` to a pass that
        writes, when enough are in flight)."""
        if yielding and self._foreground and self._busy >= self.while_passes_write:
            return False
        if self._events:
            step = self._events.popleft()
            self._busy += 1
            try:
                await self._write_event(step)
            finally:
                self._finished_one()
            return True
        key = next((k for k in self._queued if k not in self._in_flight), None)
        if key is None:
            return False
        entry = self._queued.pop(key)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = done
        self._busy += 1
        try:
            await self._write(entry)
        finally:
            del self._in_flight[key]
            done.set_result(None)
            self._finished_one()
        return True

    def _finished_one(self) -> None:
        self._busy -= 1
        if self._queued or self._events:
            self._ready.set()  # e.g. a key's next entry waited for this one, or a worker yielded
        self._settle_idle()

    async def _write(self, entry: _Entry) -> None:
        for step in entry.steps:
            try:
                await self.writers.perform(step)
            except Fenced:
                self._refused()
                return
            except ApiError as err:
                if superseded(step, err):
                    entry.dropped()  # changed by its creator meanwhile: told again if still so
                    return
                log.warning("%s failed: %s", type(step).__name__, err)
                entry.failed()
                return
        entry.written()

    async def _write_event(self, step: RecordEvent) -> None:
        try:
            await self.writers.perform(step)
        except Fenced:
            self._refused()

    def _refused(self) -> None:
        self.clear()
        self.fenced()
