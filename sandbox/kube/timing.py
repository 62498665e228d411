"""How long the emulator takes to answer, as it sees it (benchmarks).

``RequestTimes`` records, per HTTP method, the wall time from a request reaching the
emulator's application (its headers parsed) to the last byte of its answer handed to
the connection's transport (encrypted there when the listener is HTTPS). It leaves
out what happens before the application is called (the request's TLS record
decrypted, its head parsed, the task started) and the watch events a write sends
afterwards. Off unless a benchmark asks for it (``KubeServer.time_requests``); a
watch's duration is its stream's whole life, so watches are not recorded.
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from typing import Any

from starlette.types import Scope, Send


class RequestTimes:
    """Durations of the answered requests, in seconds, by method."""

    def __init__(self) -> None:
        self.by_method: dict[str, list[float]] = {}

    def clear(self) -> None:
        """Forget what was recorded (e.g. a benchmark's warm-up)."""
        self.by_method = {}

    def timed(self, scope: Scope, send: Send) -> Send:
        """``send`` recording the time until the answer's last body message."""
        if b"watch=" in scope.get("query_string", b""):
            return send
        start = time.perf_counter()
        method: str = scope["method"]
        record = self.by_method.setdefault(method, [])

        async def timed_send(message: MutableMapping[str, Any]) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                record.append(time.perf_counter() - start)

        return timed_send


def summary(samples: list[float]) -> dict[str, float]:
    """Count, mean, p50 and p99 of ``samples`` (seconds) in milliseconds."""
    if not samples:
        return {"count": 0}
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1e3

    return {
        "count": len(ordered),
        "mean_ms": sum(ordered) / len(ordered) * 1e3,
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
    }
