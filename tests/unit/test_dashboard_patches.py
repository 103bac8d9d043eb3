"""What each open page is sent: the whole view once, then only what changed.

`merge` below does what the page's script does with a patch (dashboard/static/dashboard.js,
`merge`): the whole view a page holds after merging every patch it was sent must be the whole
view as it is now, whatever changed and however many versions a page skipped.
"""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from controller.api import kinds
from controller.api.queues import ClusterQueue, Cohort, LocalQueue
from controller.api.workload import Workload
from dashboard.live import Follower, Live, Stores
from hack.objects import cohort
from tests.unit.test_dashboard_view import (
    GPU,
    T0,
    _evicted,
    admitted,
    cq,
    lq,
    node,
    workload,
)

Key = tuple[str, str]


def merge(view: dict[str, Any], patch: dict[str, Any]) -> None:
    """The page's merge of a patch into the view it holds."""
    assert patch["base"] == view["version"], "a patch not made for this page's version"
    for name in ("version", "at", "gpus", "roots", "lone_queues"):
        if name in patch:
            view[name] = patch[name]
    for part, versions in (("cohorts", None), ("queues", "queue_versions")):
        view[part].update(patch[part])
        if versions is not None:
            view[versions].update(patch[versions])
        for name in patch[f"{part}_removed"]:
            del view[part][name]
            if versions is not None:
                del view[versions][name]
    history = view["gpu_history"] + patch["gpu_history_added"]
    view["gpu_history"] = history[max(0, len(history) - patch["gpu_history_kept"]) :]
    view["evictions"] = (patch["evictions_added"] + view["evictions"])[: patch["evictions_kept"]]


def world(queues: int, pending: int) -> tuple[Live, Stores]:
    """`queues` ClusterQueues in cohorts of 10, a LocalQueue each, `pending` gangs over them."""
    stores = Stores(
        cluster_queues={
            ("", f"q{i}"): cq(f"q{i}", {GPU: "8"}, cohort=f"c{i // 10}") for i in range(queues)
        },
        local_queues={(f"ns{i}", "team"): lq(f"ns{i}", "team", f"q{i}") for i in range(queues)},
        workloads={
            (f"ns{g % queues}", f"w{g}"): workload(f"w{g}", namespace=f"ns{g % queues}")
            for g in range(pending)
        },
        nodes={("", "n"): node("n", 64)},
    )
    return Live(stores, clock=lambda: T0), stores


def decode(message: tuple[str, bytes] | None) -> tuple[str, dict[str, Any]]:
    assert message is not None
    event, body = message
    return event, msgspec.json.decode(body)


def put(live: Live, store: dict[Key, Any], key: Key, new: Any) -> None:
    old = store.get(key)
    store[key] = new
    kind = kinds.WORKLOADS if isinstance(new, Workload) else kinds.CLUSTER_QUEUES
    live.changed(kind, old, new)


def test_a_page_is_sent_the_whole_view_first_then_only_the_queue_a_change_touches() -> None:
    live, stores = world(queues=200, pending=1000)
    page = Follower()
    event, first = decode(page.next(live.render()))
    assert event == "snapshot"
    assert len(first["queues"]) == 200

    workloads: dict[Key, Workload] = stores.workloads  # type: ignore[assignment]
    put(live, workloads, ("ns7", "new"), workload("new", namespace="ns7"))
    event, patch = decode(page.next(live.render()))

    assert event == "patch"
    assert (patch["base"], patch["version"]) == (first["version"], live.version)
    assert set(patch["queues"]) == {"q7"}
    assert patch["queues"]["q7"]["pending"] == first["queues"]["q7"]["pending"] + 1
    assert patch["cohorts"] == {} and patch["queues_removed"] == []
    whole = len(live.render().body)
    assert len(page.next(live.render()) or b"") == 0  # up to date: nothing more
    sent = len(msgspec.json.encode(patch))
    assert sent < whole / 50, f"a one-gang change sent {sent} bytes of a {whole}-byte view"


def test_a_page_that_is_up_to_date_is_sent_nothing() -> None:
    live, _ = world(queues=3, pending=3)
    page = Follower()
    page.next(live.render())
    assert page.next(live.render()) is None
    live.touch()  # a version with nothing changed: a patch of the moment's figures only
    _, patch = decode(page.next(live.render()))
    assert patch["queues"] == {} and patch["cohorts"] == {}


@pytest.mark.parametrize("seed", range(4))
def test_the_view_a_page_merges_from_its_patches_is_the_view_as_it_is_now(seed: int) -> None:
    """Random changes (gangs arriving, admitted and evicted, queues added, moved and deleted,
    GPU samples past the history's bound); a page is sent a message after some of them only."""
    rng = random.Random(seed)
    live, stores = world(queues=12, pending=30)
    live.history = type(live.history)(maxlen=5)
    workloads: dict[Key, Workload] = stores.workloads  # type: ignore[assignment]
    queues: dict[Key, ClusterQueue] = stores.cluster_queues  # type: ignore[assignment]
    locals_: dict[Key, LocalQueue] = stores.local_queues  # type: ignore[assignment]
    page = Follower()
    _, held = decode(page.next(live.render()))
    for step in range(60):
        roll = rng.random()
        i = rng.randrange(14)
        if roll < 0.3:
            put(live, workloads, (f"ns{i}", f"x{step}"), workload(f"x{step}", namespace=f"ns{i}"))
        elif roll < 0.45:
            running = admitted(f"r{step}", f"q{i}", 8, at=T0, running=rng.random() < 0.5)
            key = (f"ns{i}", f"r{step}")
            put(live, workloads, key, running)
            put(live, workloads, key, _evicted(running, T0 + 60, "InCohortReclamation"))
        elif roll < 0.55:
            cohort_name = rng.choice(["c0", "c1", "c9", None])
            put(live, queues, ("", f"q{i}"), cq(f"q{i}", {GPU: "8"}, cohort=cohort_name))
            locals_[f"ns{i}", "team"] = lq(f"ns{i}", "team", f"q{i}")
        elif roll < 0.65 and ("", f"q{i}") in queues:
            old = queues.pop(("", f"q{i}"))
            live.changed(kinds.CLUSTER_QUEUES, old, None)
        elif roll < 0.75:
            cohorts: dict[Key, Cohort] = stores.cohorts  # type: ignore[assignment]
            cohorts["", "c1"] = Cohort.model_validate(cohort("c1", parent=rng.choice(["c0", None])))
            live.touch()
        else:
            live.sample()
        if rng.random() < 0.6:
            message = page.next(live.render())
            if message is not None:
                event, patch = decode(message)
                assert event == "patch"
                merge(held, patch)
    message = page.next(live.render())
    if message is not None:
        merge(held, decode(message)[1])
    assert held == msgspec.json.decode(live.render().body)
