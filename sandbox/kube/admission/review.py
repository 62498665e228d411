"""AdmissionReview v1: the request the apiserver sends and the checks on the answer.

No side effects. Sources: kubernetes/apiserver
``pkg/admission/plugin/webhook/request/admissionreview.go`` (``CreateV1AdmissionReview``,
``VerifyAdmissionResponse``) and kubernetes/api ``admission/v1/types.go``.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass, field
from typing import Any

from sandbox.kube.admission.hook import AdmissionAttributes

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
_OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


class InvalidResponse(ValueError):
    """The webhook's answer is not an acceptable AdmissionReview (a failed call)."""


@dataclass(frozen=True)
class Verdict:
    """What a valid response says."""

    allowed: bool
    status: dict[str, Any] | None = None
    patch: bytes | None = None
    warnings: list[str] = field(default_factory=list)


def request_fields(attrs: AdmissionAttributes) -> dict[str, Any]:
    """``request`` without uid, object and oldObject: also what CEL sees as ``request``."""
    gvk = {"group": attrs.group, "version": attrs.version, "kind": attrs.kind}
    gvr = {"group": attrs.group, "version": attrs.version, "resource": attrs.resource}
    request: dict[str, Any] = {
        "kind": gvk,
        "resource": gvr,
        "requestKind": dict(gvk),
        "requestResource": dict(gvr),
        "operation": attrs.operation,
        "userInfo": _user(attrs),
        "dryRun": attrs.dry_run,
        "options": _options(attrs),
    }
    if attrs.subresource:
        request["subResource"] = attrs.subresource
        request["requestSubResource"] = attrs.subresource
    if attrs.name:
        request["name"] = attrs.name
    if attrs.namespace:
        request["namespace"] = attrs.namespace
    return request


def build_review(attrs: AdmissionAttributes, obj: dict[str, Any] | None) -> dict[str, Any]:
    """A fresh AdmissionReview (new uid) carrying ``obj`` as the current object."""
    request = {"uid": str(uuid.uuid4()), **request_fields(attrs)}
    request["object"] = obj
    request["oldObject"] = attrs.old_object
    return {"apiVersion": API_VERSION, "kind": KIND, "request": request}


def _user(attrs: AdmissionAttributes) -> dict[str, Any]:
    user: dict[str, Any] = {"username": attrs.user.username}
    if attrs.user.uid:
        user["uid"] = attrs.user.uid
    if attrs.user.groups:
        user["groups"] = list(attrs.user.groups)
    if attrs.user.extra:
        user["extra"] = {k: list(v) for k, v in attrs.user.extra.items()}
    return user


def _options(attrs: AdmissionAttributes) -> dict[str, Any] | None:
    kind = _OPTIONS_KIND.get(attrs.operation)
    if kind is None:
        return None
    return {**(attrs.options or {}), "apiVersion": "meta.k8s.io/v1", "kind": kind}


def verify(body: Any, uid: str) -> Verdict:
    """Check a decoded response body; raises ``InvalidResponse`` like the apiserver."""
    if not isinstance(body, dict):
        raise InvalidResponse("webhook response was not a JSON object")
    response = body.get("response")
    if not isinstance(response, dict):
        raise InvalidResponse("webhook response was absent")
    if response.get("uid") != uid:
        raise InvalidResponse(f'expected response.uid="{uid}", got "{response.get("uid", "")}"')
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        got = f"{body.get('apiVersion', '')}, Kind={body.get('kind', '')}"
        raise InvalidResponse(f"expected webhook response of {API_VERSION}, Kind={KIND}, got {got}")
    patch = _patch(response)
    status = response.get("status") if isinstance(response.get("status"), dict) else None
    warnings = [str(w) for w in response.get("warnings") or []]
    return Verdict(bool(response.get("allowed")), status, patch, warnings)


def _patch(response: dict[str, Any]) -> bytes | None:
    encoded = response.get("patch") or ""
    patch_type = response.get("patchType") or ""
    if encoded and not patch_type:
        raise InvalidResponse("webhook returned response.patch but not response.patchType")
    if patch_type and not encoded:
        raise InvalidResponse("webhook returned response.patchType but not response.patch")
    if patch_type and patch_type != "JSONPatch":
        raise InvalidResponse(f'webhook returned invalid response.patchType of "{patch_type}"')
    if not encoded:
        return None
    try:
        return base64.b64decode(str(encoded), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidResponse("response.patch is not valid base64") from exc
