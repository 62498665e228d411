"""Fixtures: an emulator on its own event loop thread, and clients for it."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import httpx
import pytest

from sandbox.kube.seed import seed
from sandbox.kube.server import KubeServer
from shared import vocab

RBAC = "/apis/rbac.authorization.k8s.io/v1"
T = TypeVar("T")

SCENARIO: dict[str, Any] = {
    "namespaces": ["alice"],
    "nodes": [{"name": "n1", "allocatable": {"cpu": "8", vocab.GPU_RESOURCE: "4"}}],
}


class Running:
    """A ``KubeServer`` served from a background event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = KubeServer()
        self.run(self._start())

    async def _start(self) -> None:
        await seed(self.server.cluster, SCENARIO)
        await self.server.start()

    def run(self, coro: Any) -> Any:
        """Run a coroutine on the server's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def call(self, fn: Callable[[], T]) -> T:
        """Run a plain function on the server's loop (store access is single-threaded)."""
        future: Future[T] = Future()

        def target() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        self.loop.call_soon_threadsafe(target)
        return future.result(timeout=30)

    def client(self, token: str | None = None) -> httpx.Client:
        """An HTTP client with a bearer token (the admin's by default)."""
        headers = {"Authorization": f"Bearer {token or self.server.admin_token}"}
        return httpx.Client(base_url=self.server.url, headers=headers, timeout=20)

    def close(self) -> None:
        self.run(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def kube() -> Iterator[Running]:
    running = Running()
    yield running
    running.close()


@pytest.fixture
def api(kube: Running) -> Iterator[httpx.Client]:
    with kube.client() as client:
        yield client


@pytest.fixture
def ns(api: httpx.Client) -> str:
    """A fresh namespace for one test."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    response = api.post("/api/v1/namespaces", json={"metadata": {"name": name}})
    assert response.status_code == 201, response.text
    return name


#: Get and create pods, and patch the status of pod ``p`` only.
POD_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"], "resourceNames": ["p"]},
]


def grant(
    api: httpx.Client, ns: str, name: str, rules: list[dict[str, Any]], subject: dict[str, Any]
) -> None:
    """A role of ``rules`` bound to ``subject`` (both named ``name``): a Role and a
    RoleBinding in ``ns``, or with ``ns`` empty a ClusterRole and a ClusterRoleBinding."""
    kind, where = ("Role", f"{RBAC}/namespaces/{ns}") if ns else ("ClusterRole", RBAC)
    plural = kind.lower() + "s"
    role = {"metadata": {"name": name}, "rules": rules}
    assert api.post(f"{where}/{plural}", json=role).status_code == 201
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [subject],
    }
    assert api.post(f"{where}/{kind.lower()}bindings", json=binding).status_code == 201


def pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    """A minimal pod manifest; ``spec`` entries override the defaults."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name} if name else {"generateName": "gen-"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], **spec},
    }
    return body


def crd(printer: bool = True) -> dict[str, Any]:
    """A small namespaced CRD with a status subresource (widgets.example.com)."""
    columns = [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}] if printer else []
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 0},
                    "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            },
            "status": {"type": "object", "properties": {"used": {"type": "integer"}}},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "shortNames": ["wd"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


WIDGETS = "/apis/example.com/v1/namespaces/{ns}/widgets"


def install_crd(kube: Running, definition: dict[str, Any]) -> None:
    """Create a CRD (already there from an earlier test of the module is fine)."""
    with kube.client() as client:
        response = client.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=definition
        )
        assert response.status_code in (201, 409), response.text


@pytest.fixture(scope="module")
def widgets(kube: Running) -> str:
    """Install the Widget CRD once per module; returns the collection path template."""
    install_crd(kube, crd())
    return WIDGETS
