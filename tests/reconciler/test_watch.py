"""The watched cache: LIST, WATCH resumed by resourceVersion, 410 → relist, resync."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from reconciler.pods import project_pod
from shared import vocab
from shared.clock import SystemClock
from shared.errors import Gone
from shared.gateway import ListResult, WatchEvent
from shared.policy.matching import MatchRules
from shared.resources import PODS
from shared.watch import Watched


def obj(name: str, rv: str, gpus: int = 1, label: bool = True) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "alice",
            "uid": f"u-{name}",
            "resourceVersion": rv,
            "labels": {vocab.GPU_CLASS_LABEL: "a100"} if label else {},
        },
        "spec": {"containers": [{"resources": {"requests": {vocab.GPU_RESOURCE: str(gpus)}}}]},
        "status": {"phase": "Pending"},
    }


class Script:
    """Lists come from ``lists``; each watch call plays the next entry of ``watches``."""

    def __init__(self, lists: list[list[dict[str, Any]]], watches: list[Any]) -> None:
        self.lists, self.watches = lists, watches
        self.watched_from: list[str] = []
        self.done = asyncio.Event()

    async def list_all(self, res, namespace=None, label_selector=None, field_selector=None):
        items = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        return ListResult(items, str(10 * len(self.watched_from) + 10))

    async def watch(
        self, res, resource_version, namespace=None, label_selector=None, timeout_s=270
    ) -> AsyncIterator[WatchEvent]:
        self.watched_from.append(resource_version)
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


def cache(script: Script) -> Watched[Any]:
    return Watched(
        script, PODS, lambda o: project_pod(o, MatchRules()), clock=SystemClock(), resync_s=3600
    )


def test_list_then_watch_resumes_from_the_last_version_and_tells_listeners() -> None:
    async def scenario() -> None:
        script = Script(
            [[obj("a", "1"), obj("plain", "2", gpus=0, label=False)]],
            [
                [
                    WatchEvent("ADDED", obj("b", "11")),
                    WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "15"}}),
                ],
                [WatchEvent("DELETED", obj("a", "16"))],
            ],
        )
        watched = cache(script)
        heard: list[tuple[str, bool, bool]] = []
        watched.listeners.append(lambda k, old, new: heard.append((k, old is None, new is None)))
        task = asyncio.create_task(watched.run())
        await asyncio.wait_for(script.done.wait(), 30)
        assert script.watched_from == ["10", "15", "16"]
        assert list(watched.items) == ["alice/b"]  # a deleted; the non-GPU pod never cached
        assert heard == [
            ("alice/a", True, False),
            ("alice/b", True, False),
            ("alice/a", False, True),
        ]
        task.cancel()

    asyncio.run(scenario())


def test_gone_relists_and_the_diff_reports_deletes_missed_meanwhile() -> None:
    async def scenario() -> None:
        script = Script(
            [[obj("a", "1"), obj("b", "2")], [obj("b", "2"), obj("c", "3")]],
            [[Gone(410, "too old", "Expired")]],
        )
        watched = cache(script)
        heard: list[tuple[str, bool]] = []
        watched.listeners.append(lambda k, old, new: heard.append((k, new is None)))
        task = asyncio.create_task(watched.run())
        await asyncio.wait_for(script.done.wait(), 30)
        assert watched.relists == 2
        assert sorted(watched.items) == ["alice/b", "alice/c"]
        assert ("alice/a", True) in heard
        assert ("alice/c", False) in heard
        task.cancel()

    asyncio.run(scenario())


def test_projections_are_slim() -> None:
    view = project_pod(obj("a", "1", gpus=2), MatchRules())
    assert view is not None
    assert (view.key, view.gpus, view.tolerated, view.admitted) == ("alice/a", 2, False, False)
    assert project_pod(obj("cpu", "1", gpus=0, label=False), MatchRules()) is None


def test_an_event_at_or_below_the_cached_version_is_not_projected_again() -> None:
    """With ``version_of``: the watch's echo of a write already upserted (same version)
    and older events are skipped without projecting; newer ones and deletes apply; an
    upsert can hand its own projection in. Versions that are not integers: only an equal
    one is skipped."""
    projected: list[str] = []

    def project(o: dict[str, Any]) -> tuple[str, str]:
        projected.append(o["metadata"]["resourceVersion"])
        return o["metadata"]["name"], o["metadata"]["resourceVersion"]

    watched: Watched[tuple[str, str]] = Watched(
        Script([[]], []),
        PODS,
        project,
        clock=SystemClock(),
        version_of=lambda view: view[1],
    )
    watched.upsert(obj("a", "7"), ("a", "7"))
    assert projected == []
    assert watched.apply(WatchEvent("MODIFIED", obj("a", "7"))) == "7"
    watched.apply(WatchEvent("MODIFIED", obj("a", "5")))
    assert projected == []
    assert watched.items["alice/a"] == ("a", "7")
    watched.apply(WatchEvent("MODIFIED", obj("a", "9")))
    assert projected == ["9"]
    assert watched.items["alice/a"] == ("a", "9")
    watched.apply(WatchEvent("DELETED", obj("a", "8")))
    assert "alice/a" not in watched.items
    watched.upsert(obj("b", "x1"))
    watched.apply(WatchEvent("MODIFIED", obj("b", "x1")))
    watched.apply(WatchEvent("MODIFIED", obj("b", "x0")))
    assert projected == ["9", "x1", "x0"]
    assert watched.items["alice/b"] == ("b", "x0")
