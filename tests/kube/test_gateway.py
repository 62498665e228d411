"""Our ``shared.gateway.Gateway`` works unmodified against the emulator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import uvloop

from shared import errors
from shared.gateway import AUTH_REUSE_S, THROTTLE_RETRIES, THROTTLE_WAIT_CAP_S, Gateway
from shared.resources import CONFIGMAPS, PODS
from tests.kube.conftest import Running, pod
from tests.kube.scripted import Scripted


def _gateway(kube: Running, tmp_path: Path, **kwargs: Any) -> Gateway:
    """A gateway on the plain-HTTP listener (TLS is exercised by the kubectl tests)."""
    cfg = kubernetes.client.Configuration()
    cfg.host = kube.server.url
    cfg.api_key = {"authorization": f"Bearer {kube.server.admin_token}"}
    cfg.proxy = None
    return Gateway(cfg, **kwargs)


def test_gateway_verbs_and_error_mapping(kube: Running, ns: str, tmp_path: Path) -> None:
    """get/list_all/create/replace/patch/delete and NotFound/Conflict/Invalid mapping."""

    async def scenario() -> None:
        gw = _gateway(kube, tmp_path)
        try:
            created = (
                await gw.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, ns)
            ).body
            for i in range(3):
                await gw.create(CONFIGMAPS, {"metadata": {"name": f"x{i}"}}, ns)
            listed = await gw.list_all(CONFIGMAPS, ns)
            assert len(listed.items) == 4
            assert listed.resource_version
            fetched = await gw.get(CONFIGMAPS, "c", ns)
            fetched["data"]["a"] = "2"
            await gw.replace(CONFIGMAPS, "c", fetched, ns)
            with pytest.raises(errors.Conflict):
                await gw.replace(CONFIGMAPS, "c", created, ns)
            patched = await gw.patch(
                CONFIGMAPS, "c", [{"op": "add", "path": "/data/b", "value": "3"}], ns
            )
            assert patched["data"] == {"a": "2", "b": "3"}
            with pytest.raises(errors.Invalid):
                await gw.patch(
                    CONFIGMAPS, "c", [{"op": "test", "path": "/data/a", "value": "9"}], ns
                )
            await gw.create(PODS, pod(), ns)
            with pytest.raises(errors.Invalid):
                await gw.patch(
                    PODS,
                    "p",
                    {"spec": {"schedulingGates": [{"name": "example.com/g"}]}},
                    ns,
                    "strategic",
                )
            await gw.delete(CONFIGMAPS, "c", ns)
            with pytest.raises(errors.NotFound):
                await gw.get(CONFIGMAPS, "c", ns)
        finally:
            gw.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "new_loop", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"]
)
def test_gateway_watch_and_gone(
    kube: Running, ns: str, tmp_path: Path, new_loop: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    """Gateway.watch streams events from an RV and raises Gone for a compacted one, its
    calls and its watch's reads on worker threads handing back to the loop — uvloop's
    too (the webhook's and the reconciler's, whose calls through an HTTP proxy take this
    path)."""

    async def scenario() -> None:
        gw = _gateway(kube, tmp_path)
        try:
            start = (await gw.list_all(CONFIGMAPS, ns)).resource_version
            await gw.create(CONFIGMAPS, {"metadata": {"name": "w"}}, ns)
            seen = [e async for e in gw.watch(CONFIGMAPS, start, ns, timeout_s=1)]
            assert [(e.type, e.object["metadata"]["name"]) for e in seen] == [("ADDED", "w")]
            kube.call(kube.server.compact_history)
            with pytest.raises(errors.Gone):
                async for _ in gw.watch(CONFIGMAPS, start, ns, timeout_s=1):
                    pass
        finally:
            gw.close()

    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(scenario())


class Naps:
    """The gateway's sleep, recorded instead of waited (no wall-clock time passes)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def _throttle(kube: Running, path: str, retry_after: str | None, count: int | None) -> Any:
    """The emulator's injected 429 on ``path``, with that ``Retry-After`` if any."""
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    return kube.server.faults.add(method="*", path=path, status=429, headers=headers, count=count)


def test_a_throttled_call_is_sent_again_after_its_retry_after(
    kube: Running, ns: str, tmp_path: Path
) -> None:
    """A 429 with ``Retry-After: 1`` twice: the call waits 1 s before each resend and
    succeeds; a throttled create is sent again and creates the object once."""

    async def scenario() -> None:
        naps = Naps()
        gw = _gateway(kube, tmp_path, sleep=naps)
        try:
            await gw.create(CONFIGMAPS, {"metadata": {"name": "c"}}, ns)
            fault = _throttle(kube, f"/api/v1/namespaces/{ns}/configmaps/c", "1", 2)
            got = await gw.get(CONFIGMAPS, "c", ns)
            assert got["metadata"]["name"] == "c"
            assert (fault.fired, naps.waits) == (2, [1.0, 1.0])
            fault = _throttle(kube, f"/api/v1/namespaces/{ns}/configmaps", "0", 1)
            await gw.create(CONFIGMAPS, {"metadata": {"name": "d"}}, ns)
            assert fault.fired == 1
            names = [o["metadata"]["name"] for o in (await gw.list_all(CONFIGMAPS, ns)).items]
            assert sorted(names) == ["c", "d"]
        finally:
            gw.close()

    asyncio.run(scenario())


def test_throttling_that_lasts_gives_up_after_bounded_waits(
    kube: Running, ns: str, tmp_path: Path
) -> None:
    """Throttled on every try: THROTTLE_RETRIES resends, each wait capped, then the
    caller gets TooManyRequests carrying the server's Retry-After."""

    async def scenario() -> None:
        naps = Naps()
        gw = _gateway(kube, tmp_path, sleep=naps)
        try:
            fault = _throttle(kube, f"/api/v1/namespaces/{ns}/configmaps/c", "3600", None)
            with pytest.raises(errors.TooManyRequests) as caught:
                await gw.get(CONFIGMAPS, "c", ns)
            assert caught.value.retry_after_s == 3600.0
            assert fault.fired == THROTTLE_RETRIES + 1
            assert naps.waits == [THROTTLE_WAIT_CAP_S] * THROTTLE_RETRIES
        finally:
            gw.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "retry_after",
    [None, "", "soon", "-1", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT", "\u00b2"],
    ids=["absent", "empty", "word", "negative", "fraction", "http-date", "non-ascii-digit"],
)
def test_a_429_without_a_readable_retry_after_is_not_retried(
    kube: Running, ns: str, tmp_path: Path, retry_after: str | None
) -> None:
    """Nothing to honour: the caller gets TooManyRequests at once, as before."""

    async def scenario() -> None:
        naps = Naps()
        gw = _gateway(kube, tmp_path, sleep=naps)
        try:
            fault = _throttle(kube, f"/api/v1/namespaces/{ns}/configmaps/c", retry_after, None)
            with pytest.raises(errors.TooManyRequests) as caught:
                await gw.get(CONFIGMAPS, "c", ns)
            assert caught.value.retry_after_s is None
            assert (fault.fired, naps.waits) == (1, [])
        finally:
            gw.close()

    asyncio.run(scenario())


def test_credentials_are_reused_for_a_second_then_asked_again(
    kube: Running, ns: str, tmp_path: Path
) -> None:
    """The root URL and the authentication headers are asked of the client configuration
    at most every ``AUTH_REUSE_S``: a token changed in the configuration (rotated) is
    used from the first call after that, not before."""
    now = [100.0]
    gw = _gateway(kube, tmp_path, monotonic=lambda: now[0])

    async def scenario() -> None:
        try:
            await gw.create(CONFIGMAPS, {"metadata": {"name": "c"}}, ns)
            gw._api.configuration.api_key = {"authorization": "Bearer not-a-token"}
            now[0] += AUTH_REUSE_S - 0.01
            assert (await gw.get(CONFIGMAPS, "c", ns))["metadata"]["name"] == "c"
            now[0] += 0.01
            with pytest.raises(errors.Unauthorized):
                await gw.get(CONFIGMAPS, "c", ns)
        finally:
            gw.close()

    asyncio.run(scenario())


#: A pod, as the server answers a read.
POD_ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 38\r\n\r\n"
    b'{"kind":"Pod","metadata":{"name":"p"}}'
)


def test_a_read_on_a_connection_the_server_dropped_is_sent_again_a_write_is_not() -> None:
    # Each connection: one request answered, the next one's connection closed without
    # an answer (a server's idle timeout meeting the request on the wire).
    script: list[bytes | None] = [POD_ANSWER, None, POD_ANSWER, None]

    async def scenario() -> None:
        async with Scripted(script) as server:
            cfg = kubernetes.client.Configuration()
            cfg.host = f"http://127.0.0.1:{server.port}"
            cfg.proxy = None
            gw = Gateway(cfg)
            try:
                assert (await gw.get(PODS, "p", "ns"))["metadata"]["name"] == "p"
                # The kept-alive connection is dropped under the second read: sent again.
                assert (await gw.get(PODS, "p", "ns"))["metadata"]["name"] == "p"
                assert [r[0] for r in server.requests] == ["GET", "GET", "GET"]
                # A write on the connection kept from that read is not sent twice.
                with pytest.raises(errors.ServerError, match="RemoteDisconnected"):
                    await gw.patch(PODS, "p", [{"op": "test", "path": "/x", "value": 1}], "ns")
                assert [r[0] for r in server.requests] == ["GET", "GET", "GET", "PATCH"]
                assert server.script == []
            finally:
                gw.close()

    asyncio.run(scenario())
