"""Informers against a scripted API: list, watch from the list's version, relist on 410 Gone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from controller.api import kinds, kube
from controller.api.kinds import Kind
from controller.cluster.clients import ApiError, Decode, WatchEvent, decoder, watch_event
from controller.cluster.informers import Backoff, Informer

JSON = dict[str, Any]
POD = decoder(kube.Pod)


def pod(name: str, version: int) -> JSON:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(version)}}


class ScriptedApi:
    """Each list returns the next snapshot; each watch plays the next script of events."""

    def __init__(self, lists: list[list[JSON]], watches: list[list[Any]]) -> None:
        self.lists = lists
        self.watches = watches
        self.watched_from: list[str] = []
        self.listed = 0

    async def read_all(
        self, decode: Decode[Any], kind: Kind, namespace: str | None = None, **_: Any
    ) -> tuple[list[Any], str]:
        items = self.lists[min(self.listed, len(self.lists) - 1)]
        self.listed += 1
        version = max((int(i["metadata"]["resourceVersion"]) for i in items), default=1)
        return [decode(json.dumps(i).encode()) for i in items], str(version)

    async def follow(self, kind: Kind, version: str, **_: Any) -> AsyncIterator[WatchEvent]:
        self.watched_from.append(version)
        script = self.watches.pop(0) if self.watches else []
        for step in script:
            if isinstance(step, Exception):
                raise step
            event, obj = step
            yield watch_event(event, json.dumps(obj).encode())
        if not self.watches:
            await asyncio.sleep(3600)  # the last watch stays open


async def run_until(informer: Informer[Any], done: Any) -> None:
    informer.start()
    try:
        for _ in range(200):
            if done():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("informer did not get there")
    finally:
        await informer.stop()


async def test_an_informer_lists_then_watches_from_the_lists_version_and_follows_events() -> None:
    api = ScriptedApi(
        lists=[[pod("a", 5)]],
        watches=[[("ADDED", pod("b", 6)), ("MODIFIED", pod("a", 7)), ("DELETED", pod("b", 8))]],
    )
    informer = Informer(api, kinds.PODS, POD)  # type: ignore[arg-type]

    await run_until(informer, lambda: informer.resource_version == "8")

    assert api.watched_from[0] == "5"
    assert sorted(informer.store) == [("ns", "a")]
    found = informer.get("ns", "a")
    assert isinstance(found, kube.Pod) and found.metadata.resource_version == "7"


async def test_a_bookmark_moves_the_watch_version_without_touching_the_store() -> None:
    bookmark = {"metadata": {"resourceVersion": "40"}}
    api = ScriptedApi(lists=[[pod("a", 5)]], watches=[[("BOOKMARK", bookmark)], []])
    informer = Informer(api, kinds.PODS, POD)  # type: ignore[arg-type]

    await run_until(informer, lambda: len(api.watched_from) == 2)

    assert api.watched_from == ["5", "40"]
    assert sorted(informer.store) == [("ns", "a")]


async def test_410_gone_makes_the_informer_relist_and_forget_what_disappeared() -> None:
    gone = ApiError(410, "WATCH", "/api/v1/pods", '{"reason": "Expired"}')
    api = ScriptedApi(
        lists=[[pod("a", 5), pod("b", 5)], [pod("a", 90)]],
        watches=[[gone], []],
    )
    seen: list[tuple[str, str]] = []

    def listener(kind: Kind, old: kube.Pod | None, new: kube.Pod | None) -> None:
        seen.append(("DELETED" if new is None else "CHANGED", (new or old).metadata.name))  # type: ignore[union-attr]

    informer = Informer(api, kinds.PODS, POD, listener=listener)  # type: ignore[arg-type]

    await run_until(informer, lambda: informer.relists == 2)

    assert sorted(informer.store) == [("ns", "a")]
    assert ("DELETED", "b") in seen
    assert api.watched_from == ["5", "90"]


async def test_a_broken_watch_resumes_from_the_last_version_seen_without_listing_again() -> None:
    reset = ConnectionResetError("connection reset by peer")
    api = ScriptedApi(lists=[[pod("a", 5)]], watches=[[("MODIFIED", pod("a", 6)), reset], []])
    informer = Informer(api, kinds.PODS, POD)  # type: ignore[arg-type]
    informer.backoff = Backoff(base=0.01, cap=0.01)

    await run_until(informer, lambda: len(api.watched_from) == 2)

    assert api.watched_from == ["5", "6"]
    assert api.listed == 1 and informer.relists == 1 and informer.expired == 0


async def test_an_unserved_optional_kind_counts_as_synced_and_empty() -> None:
    class Unserved(ScriptedApi):
        async def read_all(self, decode: Decode[Any], kind: Kind, *_: Any, **__: Any) -> Any:
            raise ApiError(404, "GET", kind.plural, "{}")

    informer = Informer(Unserved([], []), kinds.LEADERWORKERSETS, POD, optional=True)  # type: ignore[arg-type]

    await run_until(informer, informer.synced.is_set)

    assert informer.store == {}


async def test_an_object_that_does_not_decode_is_skipped_not_fatal() -> None:
    broken = {"metadata": {"namespace": "ns", "name": "bad", "resourceVersion": "6"}, "spec": []}
    api = ScriptedApi(lists=[[pod("a", 5), broken]], watches=[[]])
    informer = Informer(api, kinds.PODS, POD)  # type: ignore[arg-type]

    await run_until(informer, informer.synced.is_set)

    assert sorted(informer.store) == [("ns", "a")]
    assert informer.undecodable == 1


def test_a_store_never_goes_back_to_an_older_resource_version() -> None:
    informer = Informer(None, kinds.PODS, POD)  # type: ignore[arg-type]
    new = POD(json.dumps(pod("x", 20)).encode())
    old = POD(json.dumps(pod("x", 7)).encode())

    informer.put(new)
    informer.put(old)

    assert informer.get("ns", "x") is new


def test_backoff_grows_with_jitter_up_to_its_cap() -> None:
    backoff = Backoff(base=1.0, cap=8.0)

    delays = [backoff.next_delay() for _ in range(6)]

    assert 0.5 <= delays[0] <= 1.0
    assert 4.0 <= delays[-1] <= 8.0
    backoff.reset()
    assert backoff.next_delay() <= 1.0
