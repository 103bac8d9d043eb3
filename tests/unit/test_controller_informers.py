"""Informers against a scripted API: list, watch from the list's version, relist on 410 Gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from controller.cluster import clients
from controller.cluster.clients import ApiError, Kind
from controller.cluster.informers import Informer

JSON = dict[str, Any]


def pod(name: str, version: int) -> JSON:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(version)}}


class ScriptedApi:
    """Each list returns the next snapshot; each watch plays the next script of events."""

    def __init__(self, lists: list[list[JSON]], watches: list[list[Any]]) -> None:
        self.lists = lists
        self.watches = watches
        self.watched_from: list[str] = []
        self.listed = 0

    async def list(
        self, kind: Kind, namespace: str | None = None, **_: Any
    ) -> tuple[list[JSON], str]:
        items = self.lists[min(self.listed, len(self.lists) - 1)]
        self.listed += 1
        version = max((int(i["metadata"]["resourceVersion"]) for i in items), default=1)
        return items, str(version)

    async def watch(self, kind: Kind, version: str, **_: Any) -> AsyncIterator[tuple[str, JSON]]:
        self.watched_from.append(version)
        script = self.watches.pop(0) if self.watches else []
        for step in script:
            if isinstance(step, Exception):
                raise step
            yield step
        if not self.watches:
            await asyncio.sleep(3600)  # the last watch stays open


async def run_until(informer: Informer, done: Any) -> None:
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
    informer = Informer(api, clients.PODS)  # type: ignore[arg-type]

    await run_until(informer, lambda: informer.resource_version == "8")

    assert api.watched_from[0] == "5"
    assert sorted(informer.store) == [("ns", "a")]
    assert informer.get("ns", "a") == pod("a", 7)


async def test_a_bookmark_moves_the_watch_version_without_touching_the_store() -> None:
    bookmark = {"metadata": {"resourceVersion": "40"}}
    api = ScriptedApi(lists=[[pod("a", 5)]], watches=[[("BOOKMARK", bookmark)], []])
    informer = Informer(api, clients.PODS)  # type: ignore[arg-type]

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
    informer = Informer(
        api,  # type: ignore[arg-type]
        clients.PODS,
        listener=lambda kind, event, obj: seen.append((event, obj["metadata"]["name"])),
    )

    await run_until(informer, lambda: informer.relists == 2)

    assert sorted(informer.store) == [("ns", "a")]
    assert ("DELETED", "b") in seen
    assert api.watched_from == ["5", "90"]


async def test_an_unserved_optional_kind_counts_as_synced_and_empty() -> None:
    class Unserved(ScriptedApi):
        async def list(self, kind: Kind, namespace: str | None = None, **_: Any) -> Any:
            raise ApiError(404, "GET", kind.plural, "{}")

    informer = Informer(Unserved([], []), clients.LEADERWORKERSETS, optional=True)  # type: ignore[arg-type]

    await run_until(informer, informer.synced.is_set)

    assert informer.store == {}
