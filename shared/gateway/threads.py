"""Watches read on worker threads through the official client's urllib3 pool (the
reconciler's): a thread reads the stream and hands each event to the consumer's loop,
at most ``WATCH_BUFFER`` ahead of it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import urllib3

from shared.errors import KubeError, ServerError
from shared.kubewire import WatchEvent, failure, watch_event, watch_lines, watch_query
from shared.resources import Resource

if TYPE_CHECKING:
    from shared.gateway import Gateway

#: Watch events buffered between the reading thread and the consumer.
WATCH_BUFFER = 4096


async def watch_on_thread(
    gateway: Gateway,
    res: Resource,
    resource_version: str,
    namespace: str | None = None,
    label_selector: str | None = None,
    timeout_s: int = 270,
    known: Callable[[bytes], WatchEvent | None] | None = None,
) -> AsyncIterator[WatchEvent]:
    """Stream watch events from ``resource_version`` until the server closes.

    Bookmarks are requested and yielded (type BOOKMARK) so a caller can resume from
    them. A 410 (as an HTTP status or an ERROR event) raises ``Gone``: relist.
    ``known`` (a line recognised before it is decoded, ``shared.watch.Watched.peek``)
    is honoured by ``LoopGateway`` only: here every line is decoded on the thread.
    """
    query = watch_query(resource_version, label_selector, timeout_s)
    loop = asyncio.get_running_loop()
    # Unbounded on the loop side so a delivery never blocks or fails there; the
    # thread waits on ``room`` instead, which bounds what is buffered.
    queue: asyncio.Queue[WatchEvent | KubeError | None] = asyncio.Queue()
    room = threading.Semaphore(WATCH_BUFFER)
    stop = threading.Event()
    resp_box: list[urllib3.BaseHTTPResponse] = []

    def deliver(item: WatchEvent | KubeError | None) -> bool:
        """Hand ``item`` to the consumer; False once it has gone away."""
        while not room.acquire(timeout=0.5):
            if stop.is_set():
                return False
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the consumer's loop is closed
            return False
        return True

    def pump() -> None:
        try:
            for event in stream(gateway, res.path(namespace), query, timeout_s, resp_box, stop):
                if not deliver(event):
                    return
        except KubeError as exc:
            deliver(exc)
        except Exception as exc:  # any other failure must reach the consumer, not vanish
            deliver(ServerError(0, f"watch {res.plural} failed: {type(exc).__name__}: {exc}"))
        finally:
            deliver(None)

    thread = threading.Thread(target=pump, name="kube-watch", daemon=True)
    thread.start()
    try:
        while True:
            item = await queue.get()
            room.release()
            if item is None:
                return
            if isinstance(item, KubeError):
                raise item
            yield item
    finally:
        stop.set()
        for resp in resp_box:
            # The stream may already have released the connection to the pool.
            with contextlib.suppress(RuntimeError):
                resp.shutdown() if hasattr(resp, "shutdown") else resp.release_conn()


def stream(
    gateway: Gateway,
    path: str,
    query: dict[str, Any],
    timeout_s: int,
    resp_box: list[urllib3.BaseHTTPResponse],
    stop: threading.Event,
) -> Iterator[WatchEvent]:
    url, hdrs = gateway._url_and_headers("GET", path, query, None)
    try:
        resp = gateway._api.rest_client.pool_manager.request(
            "GET",
            url,
            headers=hdrs,
            preload_content=False,
            timeout=urllib3.Timeout(connect=gateway._timeout_s, read=timeout_s + 30),
            retries=False,
        )
    except urllib3.exceptions.HTTPError as exc:
        raise ServerError(0, f"watch {path}: {type(exc).__name__}: {exc}") from exc
    resp_box.append(resp)
    if resp.status >= 300:
        raise failure(resp.status, resp.read(), resp.headers)
    buffer = b""
    try:
        for chunk in resp.stream(64 * 1024, decode_content=True):
            if stop.is_set():
                return
            lines, buffer = watch_lines(buffer, chunk)
            yield from map(watch_event, lines)
    except urllib3.exceptions.HTTPError as exc:
        if not stop.is_set():
            raise ServerError(0, f"watch {path} broke: {type(exc).__name__}") from exc
    finally:
        resp.release_conn()
