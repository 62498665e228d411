"""``POST /api/reservations/push``: 503 / 401 / 422 / 200, and what a push writes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from reconciler.base.metrics import Metrics
from reconciler.base.tasks import Tasks
from reconciler.http import HttpState, build_app
from reconciler.mirror.push import apply
from reconciler.mirror.sync import Syncer
from shared.clock import ManualClock, utc
from shared.resources import GPU_RESERVATIONS
from shared.settings import SecretStr
from tests.fakekube import FakeKube
from tests.reconciler.builders import NS, FakeSource, reservation, row

TOKEN = "s3cret-token-value"
URL = "/api/reservations/push"


class Harness:
    def __init__(self, token: str | None = TOKEN) -> None:
        self.kube = FakeKube()
        self.metrics = Metrics()
        clock = ManualClock(utc(2026, 1, 5, 10))
        self.syncer = Syncer(FakeSource(), self.kube, NS, clock, self.metrics, 7)
        secret = SecretStr(token) if token is not None else None
        self.app = build_app(HttpState(Tasks(), self.metrics, self.syncer, secret, lambda: False))

    def post(
        self, body: Any = None, auth: str | None = f"Bearer {TOKEN}", raw: bytes | None = None
    ):
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                headers = {"Authorization": auth} if auth is not None else {}
                if raw is not None:
                    return await client.post(URL, content=raw, headers=headers)
                return await client.post(URL, json=body, headers=headers)

        return asyncio.run(go())

    def names(self) -> set[str]:
        return {o["metadata"]["name"] for o in self.kube.items(GPU_RESERVATIONS, NS)}


def test_unset_token_disables_the_endpoint_before_any_auth_check() -> None:
    answer = Harness(token=None).post({"reservations": []}, auth=None)
    assert answer.status_code == 503
    assert "disabled" in answer.json()["detail"]


@pytest.mark.parametrize(
    "auth",
    [
        pytest.param(None, id="missing-header"),
        pytest.param(f"Bearer {TOKEN[:-1]}x", id="differs-in-the-last-character"),
        pytest.param(f"Basic {TOKEN}", id="wrong-scheme"),
        pytest.param(TOKEN, id="no-scheme"),
        pytest.param("Bearer ", id="empty-token"),
        pytest.param(f"Bearer {TOKEN}extra", id="longer-token"),
    ],
)
def test_bad_credentials_are_401_with_a_bearer_challenge(auth: str | None) -> None:
    h = Harness()
    answer = h.post({"reservations": [row(1)]}, auth=auth)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json() == {"detail": "Invalid or missing bearer token"}
    assert h.names() == set()


def test_scheme_word_is_case_insensitive() -> None:
    assert Harness().post({"reservations": []}, auth=f"bEaReR {TOKEN}").status_code == 200


@pytest.mark.parametrize(
    ("body", "raw", "says"),
    [
        pytest.param(None, b"{not json", "not JSON", id="not-json"),
        pytest.param(None, b"[" * 100_000 + b"]" * 100_000, "nested deeper than", id="100000-deep"),
        pytest.param(
            None,
            b'{"reservations": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            "nested deeper than",
            id="deep-inside-the-list",
        ),
        pytest.param([row(1)], None, "reservations", id="bare-list"),
        pytest.param({"reservations": {"id": 1}}, None, "list", id="not-a-list"),
        pytest.param({"items": []}, None, "reservations", id="wrong-key"),
        pytest.param(
            {"reservations": [row(1), row(2, gpu_count="many"), row(3)]},
            None,
            "reservations[1].gpu_count",
            id="one-malformed-entry-among-good-ones",
        ),
        pytest.param(
            {"reservations": [row(1), {k: v for k, v in row(2).items() if k != "end_utc"}]},
            None,
            "reservations[1].end_utc",
            id="missing-required-field",
        ),
    ],
)
def test_malformed_body_is_422_and_nothing_is_applied(body, raw, says) -> None:
    h = Harness()
    answer = h.post(body, raw=raw)
    assert answer.status_code == 422
    assert says in answer.json()["detail"]
    assert h.names() == set()


def test_push_upserts_by_id_and_counts() -> None:
    h = Harness()
    answer = h.post({"reservations": [row(1), row(2, gpu_count=2)]})
    assert answer.status_code == 200
    assert answer.json() == {"applied": 2, "cancelled": 0, "adopted": 0, "total_active": 2}
    assert h.names() == {"res-1", "res-2"}
    cancel = row(
        1, status="cancelled", cancel_reason="superseded", updated_at="2026-01-05T09:59:00Z"
    )
    answer = h.post({"reservations": [cancel, row(3)]})
    assert answer.json() == {"applied": 1, "cancelled": 1, "adopted": 0, "total_active": 2}
    phases = {
        o["metadata"]["name"]: o["status"]["phase"] for o in h.kube.items(GPU_RESERVATIONS, NS)
    }
    assert phases == {"res-1": "Cancelled", "res-2": "Open", "res-3": "Open"}


def test_repushing_the_same_cancellation_counts_it_once() -> None:
    h = Harness()
    h.post({"reservations": [row(1)]})
    cancel = row(1, status="cancelled", updated_at="2026-01-05T09:59:00Z")
    assert h.post({"reservations": [cancel]}).json()["cancelled"] == 1
    assert h.post({"reservations": [cancel]}).json()["cancelled"] == 0


def test_empty_push_is_valid() -> None:
    answer = Harness().post({"reservations": []})
    assert answer.json() == {"applied": 0, "cancelled": 0, "adopted": 0, "total_active": 0}


def test_cluster_outage_is_503_not_a_crash() -> None:
    h = Harness()
    h.kube.down = True
    assert h.post({"reservations": [row(1)]}).status_code == 503


def test_answers_are_counted_by_code() -> None:
    h = Harness()
    h.post({"reservations": []})
    h.post({"reservations": []}, auth=None)
    text = h.metrics.render().decode()
    assert 'gpu_reservation_push_requests_total{code="200"} 1.0' in text
    assert 'gpu_reservation_push_requests_total{code="401"} 1.0' in text


class SlowSource(FakeSource):
    """An app whose reservation list hangs until released."""

    def __init__(self) -> None:
        super().__init__([reservation(1)])
        self.release = asyncio.Event()

    async def list_reservations(self, date_start, date_end):
        await self.release.wait()
        return await super().list_reservations(date_start, date_end)


def test_a_push_does_not_wait_behind_a_poll_that_waits_on_the_app() -> None:
    async def scenario() -> None:
        h = Harness()
        h.syncer.source = SlowSource()
        poll = asyncio.create_task(h.syncer.sync_once())
        await asyncio.sleep(0)
        got = await asyncio.wait_for(apply(h.syncer, [reservation(2)]), timeout=30)
        assert got.applied == 1
        assert h.names() == {"res-2"}
        h.syncer.source.release.set()
        assert await poll
        assert h.names() == {"res-1", "res-2"}

    asyncio.run(scenario())
