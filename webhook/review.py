"""AdmissionReview v1 in and out (kubernetes-facts §1.2, §1.4).

``parse`` turns the request body into an ``AdmissionRequest`` or raises ``Malformed``
— the channel for "the apiserver sent something that is not an AdmissionReview",
answered with HTTP 400. ``answer`` builds the response document: the uid copied, the
patch base64-encoded with ``patchType: JSONPatch`` (only when non-empty), warnings cut
to what ``kubectl`` shows, a denial carrying a Status with a code and a message.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from shared import jsontext

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
#: kubectl prints each warning; longer ones may be cut by the apiserver.
MAX_WARNING_CHARS = 120
#: More warnings than this are noise.
MAX_WARNINGS = 4
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


#: ``Malformed.reason`` values (the ``reason`` label of ``reviews_refused_total``, with
#: ``webhook.app``'s ``too_large``).
NOT_JSON = "not_json"
TOO_DEEP = "too_deep"
NOT_A_REVIEW = "not_a_review"


class Malformed(ValueError):
    """The body is not an AdmissionReview v1 request (HTTP 400)."""

    def __init__(self, message: str, reason: str = NOT_A_REVIEW) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, kw_only=True)
class AdmissionRequest:
    """The parts of ``request`` the webhook uses."""

    uid: str
    operation: str
    namespace: str
    name: str
    username: str
    #: Whether this is the core/v1 Pod resource itself (not a subresource).
    is_pod: bool
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    dry_run: bool


def _object(request: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """An object of the request; its ``metadata``, when present, must be an object."""
    value = request.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Malformed(f"request.{key} is not an object")
    if not isinstance(value.get("metadata", {}), dict):
        raise Malformed(f"request.{key}.metadata is not an object")
    return value


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


def _is_pod(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind")
    if not isinstance(kind, Mapping):
        return False
    core_pod = (_text(kind, "group"), _text(kind, "version"), _text(kind, "kind")) == (
        "",
        "v1",
        "Pod",
    )
    return core_pod and not request.get("subResource")


def _envelope(body: bytes) -> Mapping[str, Any]:
    try:
        doc = jsontext.loads(body)
    except jsontext.BadJson as exc:
        if exc.too_deep:
            raise Malformed(f"the body is {exc}", TOO_DEEP) from exc
        raise Malformed("the body is not JSON", NOT_JSON) from exc
    if not isinstance(doc, dict):
        raise Malformed("the body is not a JSON object")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise Malformed(f"expected apiVersion {API_VERSION} and kind {KIND}")
    request = doc.get("request")
    if not isinstance(request, dict):
        raise Malformed("request is missing")
    return request


def parse(body: bytes) -> AdmissionRequest:
    """The request in ``body``; raises ``Malformed``."""
    request = _envelope(body)
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > 128:
        raise Malformed("request.uid is missing")
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        raise Malformed("request.operation is not CREATE, UPDATE, DELETE or CONNECT")
    user = request.get("userInfo")
    return AdmissionRequest(
        uid=uid,
        operation=str(operation),
        namespace=_text(request, "namespace"),
        name=_text(request, "name"),
        username=_text(user, "username") if isinstance(user, Mapping) else "",
        is_pod=_is_pod(request),
        obj=_object(request, "object"),
        old=_object(request, "oldObject"),
        dry_run=request.get("dryRun") is True,
    )


def _warnings(texts: Sequence[str]) -> list[str]:
    cut = [t if len(t) <= MAX_WARNING_CHARS else t[: MAX_WARNING_CHARS - 1] + "…" for t in texts]
    return cut[:MAX_WARNINGS]


#: The patch's JSON as ``json.dumps(patch, separators=(",", ":"))`` renders it (ASCII),
#: with one encoder for the process (``dumps`` with any option builds one per call).
_PATCH_JSON = json.JSONEncoder(separators=(",", ":"))


def answer(
    uid: str,
    *,
    allowed: bool = True,
    patch: Sequence[Mapping[str, Any]] = (),
    warnings: Sequence[str] = (),
    code: int = 403,
    message: str = "",
) -> dict[str, Any]:
    """The AdmissionReview response document."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if allowed and patch:
        encoded = _PATCH_JSON.encode(list(patch)).encode()
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(encoded).decode("ascii")
    if not allowed:
        response["status"] = {"code": code, "message": message, "status": "Failure"}
    if warnings:
        response["warnings"] = _warnings(warnings)
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def answer_json(doc: Mapping[str, Any]) -> bytes:
    """The JSON bytes of an answer (``answer``, or a 400's ``{"error": …}``) as the
    response class renders them (``json.dumps(doc, ensure_ascii=False,
    separators=(",", ":"))`` in UTF-8), made by orjson: an answer holds only strings,
    booleans, integers and lists of strings, which orjson writes byte for byte alike
    (tests/webhook/test_review_encoding.py). A string that UTF-8 cannot carry (a lone
    surrogate, which a request's uid may be) raises, as the encoding of ``json.dumps``'s
    text would. (A float that is not finite would be written as ``null`` where the
    response class refuses it: no answer carries a float.)"""
    return orjson.dumps(doc)
