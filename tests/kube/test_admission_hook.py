"""The mutating admission hook (admission_api): what a plugin sees and what it can do."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sandbox.kube.admission_api import AdmissionAttributes, AdmissionError, AdmissionResult
from sandbox.kube.errors import status_body
from tests.kube.conftest import Running, pod
from tests.kube.test_kubectl import Kubectl


class Recorder:
    """Records calls; adds a label, warns, and denies pods named ``deny``."""

    def __init__(self) -> None:
        self.calls: list[AdmissionAttributes] = []

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        self.calls.append(attrs)
        if attrs.name == "deny":
            raise AdmissionError(403, status_body(403, "Forbidden", "denied by test"))
        obj = attrs.object
        if obj is not None and attrs.resource == "pods" and not attrs.subresource:
            obj.setdefault("metadata", {}).setdefault("labels", {})["admitted"] = "yes"
        return AdmissionResult(obj, ["be careful"])


@pytest.fixture
def recorder(kube: Running):
    plugin = Recorder()
    kube.server.mutating_admission.append(plugin)
    yield plugin
    kube.server.mutating_admission.remove(plugin)


def test_create_sees_no_uid_nor_generated_name(
    recorder: Recorder, api: httpx.Client, ns: str
) -> None:
    """Rule: admission runs before uid and generateName: both are empty; PATCH arrives as UPDATE."""
    response = api.post(f"/api/v1/namespaces/{ns}/pods", json=pod(""))
    assert response.status_code == 201
    assert response.json()["metadata"]["labels"] == {"admitted": "yes"}
    assert response.headers.get_list("warning") == ['299 - "be careful"']
    create = recorder.calls[-1]
    assert (create.operation, create.name, create.old_object) == ("CREATE", "", None)
    assert create.object is not None
    assert "uid" not in create.object["metadata"]
    assert create.options is not None
    assert create.options["kind"] == "CreateOptions"
    name = response.json()["metadata"]["name"]
    api.patch(
        f"/api/v1/namespaces/{ns}/pods/{name}",
        json={"metadata": {"labels": {"x": "1"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert recorder.calls[-1].operation == "UPDATE"
    assert recorder.calls[-1].old_object is not None
    api.delete(f"/api/v1/namespaces/{ns}/pods/{name}")
    delete = recorder.calls[-1]
    assert (delete.operation, delete.object) == ("DELETE", None)


def test_subresources_reach_admission(recorder: Recorder, api: httpx.Client, ns: str) -> None:
    """Rule: subresource writes (pods/binding) are admitted too, with their subresource and kind."""
    api.post(f"/api/v1/namespaces/{ns}/pods", json=pod())
    binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
    api.post(f"/api/v1/namespaces/{ns}/pods/p/binding", json=binding)
    last = recorder.calls[-1]
    assert (last.subresource, last.kind, last.operation) == ("binding", "Binding", "CREATE")


def test_admission_error_fails_the_request(recorder: Recorder, api: httpx.Client, ns: str) -> None:
    """An AdmissionError's code and Status reach the client."""
    response = api.post(f"/api/v1/namespaces/{ns}/pods", json=pod("deny"))
    assert response.status_code == 403
    assert response.json()["message"] == "denied by test"


def test_webhook_configurations_are_never_admitted(recorder: Recorder, api: httpx.Client) -> None:
    """Rule: MutatingWebhookConfiguration objects never go through admission."""
    before = len(recorder.calls)
    body = {"metadata": {"name": "x-test"}, "webhooks": []}
    api.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", json=body)
    assert len(recorder.calls) == before


class Quoting:
    """Warns with a text holding quotes and a backslash."""

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        return AdmissionResult(attrs.object, ['field "a" \\ b', "second"])


def test_admission_warnings_become_escaped_warning_headers(
    kube: Running, api: httpx.Client, ns: str
) -> None:
    """Rule: each admission warning becomes one ``Warning: 299 - "<text>"`` header, quotes and
    backslashes escaped (apimachinery ``NewWarningHeader``)."""
    plugin = Quoting()
    kube.server.mutating_admission.append(plugin)
    try:
        response = api.post(f"/api/v1/namespaces/{ns}/pods", json=pod())
    finally:
        kube.server.mutating_admission.remove(plugin)
    assert response.status_code == 201
    assert response.headers.get_list("warning") == [
        '299 - "field \\"a\\" \\\\ b"',
        '299 - "second"',
    ]


class Screened(Recorder):
    """A recorder that says it passes over everything but pods (``passes_over``)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[AdmissionAttributes] = []

    async def passes_over(self, attrs: AdmissionAttributes) -> bool:
        self.asked.append(attrs)
        return attrs.resource != "pods"


def test_a_plugin_passing_over_a_request_is_not_called(
    kube: Running, api: httpx.Client, ns: str
) -> None:
    """``passes_over`` is asked first, with no objects; True skips the plugin for that
    request, False calls it as usual (with its own copies)."""
    plugin = Screened()
    kube.server.mutating_admission.append(plugin)
    try:
        cms = f"/api/v1/namespaces/{ns}/configmaps"
        assert api.post(cms, json={"metadata": {"name": "c"}}).status_code == 201
        assert plugin.calls == []
        asked = plugin.asked[-1]
        assert (asked.resource, asked.operation, asked.object, asked.old_object) == (
            "configmaps",
            "CREATE",
            None,
            None,
        )
        response = api.post(f"/api/v1/namespaces/{ns}/pods", json=pod("screened"))
        assert response.json()["metadata"]["labels"] == {"admitted": "yes"}
        assert [c.resource for c in plugin.calls] == ["pods"]
    finally:
        kube.server.mutating_admission.remove(plugin)


class Broken:
    """A plugin failing in an unexpected way."""

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        raise RuntimeError("broken plugin")


def test_an_unexpected_error_is_a_plain_500_and_other_methods_a_405(
    kube: Running, api: httpx.Client, ns: str
) -> None:
    """The emulator's one endpoint answers as Starlette's catch-all route did: an error no
    handler expected is a plain-text 500 (and the server, told of it, closes that
    connection), a method it does not route a plain-text 405 naming the ones it does."""
    plugin = Broken()
    kube.server.mutating_admission.append(plugin)
    try:
        with kube.client() as own:
            broken = own.post(
                f"/api/v1/namespaces/{ns}/configmaps", json={"metadata": {"name": "b"}}
            )
    finally:
        kube.server.mutating_admission.remove(plugin)
    assert (broken.status_code, broken.text) == (500, "Internal Server Error")
    assert api.get(f"/api/v1/namespaces/{ns}/configmaps").status_code == 200
    options = api.options(f"/api/v1/namespaces/{ns}/configmaps")
    assert (options.status_code, options.text) == (405, "Method Not Allowed")
    assert options.headers["allow"] == "DELETE, GET, HEAD, PATCH, POST, PUT"


class Saying:
    """Warns with the texts it is given."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        return AdmissionResult(attrs.object, list(self.texts))


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (["booking full… queued"], ['299 - "booking full… queued"']),
        (["line one\nline two\x00"], ['299 - "line one line two "']),
        (["lone \ud800 surrogate"], ['299 - "lone \ufffd surrogate"']),
        (["same", "", "same"], ['299 - "same"']),
    ],
)
def test_any_warning_text_is_carried_and_the_write_succeeds(
    kube: Running, api: httpx.Client, ns: str, texts: list[str], expected: list[str]
) -> None:
    """Rule: a webhook's warning is a UTF-8 ``Warning`` header whatever it holds (non-ASCII
    as is; a control character as a space, a lone surrogate as U+FFFD; duplicates and empty
    texts dropped, as the apiserver's recorder does), and the write answers 201 with the pod
    stored once — never a 500 after storing."""
    plugin = Saying(texts)
    kube.server.mutating_admission.append(plugin)
    try:
        response = api.post(f"/api/v1/namespaces/{ns}/pods", json=pod("warned"))
    finally:
        kube.server.mutating_admission.remove(plugin)
    assert response.status_code == 201
    raw = [v.decode("utf-8") for k, v in response.headers.raw if k.lower() == b"warning"]
    assert raw == expected
    assert api.get(f"/api/v1/namespaces/{ns}/pods/warned").status_code == 200


@pytest.mark.kubectl
def test_kubectl_prints_a_non_ascii_warning(kube: Running, ns: str, tmp_path: Path) -> None:
    """Rule: kubectl prints a webhook's UTF-8 warning as written (``Warning: …``) and the
    create succeeds."""
    config = tmp_path / "kubeconfig"
    config.write_text(kube.server.kubeconfig(), encoding="utf-8")
    plugin = Saying(["booking full… queued ✓"])
    kube.server.mutating_admission.append(plugin)
    try:
        out = Kubectl(config)("create", "-n", ns, "-f", "-", stdin=json.dumps(pod("printed")))
    finally:
        kube.server.mutating_admission.remove(plugin)
    assert "Warning: booking full… queued ✓" in out
    assert "pod/printed created" in out


class Meddler:
    """While an UPDATE of ``racy`` is admitted, another write changes the object (or a
    delete removes it), as a concurrent request would while a webhook answers."""

    def __init__(self, kube: Running, delete: bool) -> None:
        self.kube, self.delete, self.rounds = kube, delete, 0

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult:
        if attrs.name == "racy" and attrs.operation == "UPDATE":
            self.rounds += 1
            store = self.kube.server.store
            key = ("", "configmaps", attrs.namespace or "", "racy")
            if self.delete:
                store.remove(key)
            elif self.rounds == 1:
                changed = store.get(*key)
                assert changed is not None
                changed["data"] = {**(changed.get("data") or {}), "other": "write"}
                store.put(key, changed)
        return AdmissionResult(attrs.object, [])


@pytest.mark.parametrize("delete", [True, False], ids=["deleted", "changed"])
def test_an_update_decided_while_the_object_changed_is_decided_again(
    kube: Running, api: httpx.Client, ns: str, delete: bool
) -> None:
    """kube-apiserver's GuaranteedUpdate: an update lands only on the state it was
    admitted on. Deleted meanwhile: 404, never re-created (a late guarantee patch
    once brought an evicted pod back). Changed meanwhile: a patch applies again to
    what is stored (both writes kept); a PUT naming the old resourceVersion gets 409."""
    cms = f"/api/v1/namespaces/{ns}/configmaps"
    assert api.post(cms, json={"metadata": {"name": "racy"}, "data": {"a": "1"}}).status_code == 201
    plugin = Meddler(kube, delete)
    kube.server.mutating_admission.append(plugin)
    try:
        merge = {"Content-Type": "application/merge-patch+json"}
        answer = api.patch(f"{cms}/racy", content=json.dumps({"data": {"b": "2"}}), headers=merge)
        if delete:
            assert answer.status_code == 404, answer.text
            assert api.get(f"{cms}/racy").status_code == 404
            return
        assert answer.status_code == 200, answer.text
        assert answer.json()["data"] == {"a": "1", "b": "2", "other": "write"}
        assert plugin.rounds == 2
        stale = {**answer.json(), "data": {"c": "3"}}
        plugin.rounds = 0  # the next UPDATE is changed under it again
        put = api.put(f"{cms}/racy", json=stale)
        assert put.status_code == 409, put.text
    finally:
        kube.server.mutating_admission.remove(plugin)
