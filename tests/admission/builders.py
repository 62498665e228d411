"""Builders for admission tests: requests, webhook configurations, webhook answers."""

from __future__ import annotations

import base64
import json
from typing import Any

from sandbox.kube.admission.hook import AdmissionAttributes, UserInfo


def pod(
    name: str = "", generate_name: str = "", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "team-a"}
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    if labels is not None:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def attrs(
    obj: dict[str, Any] | None = None,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    subresource: str = "",
    dry_run: bool = False,
    namespace: str | None = "team-a",
) -> AdmissionAttributes:
    current = obj if obj is not None or operation == "DELETE" else pod("p")
    source = current or old or {}
    return AdmissionAttributes(
        operation=operation,
        group="",
        version="v1",
        kind="Pod",
        resource="pods",
        subresource=subresource,
        namespace=namespace,
        name=str((source.get("metadata") or {}).get("name", "")),
        object=current,
        old_object=old,
        user=UserInfo("alice", uid="u-1", groups=("system:authenticated",)),
        dry_run=dry_run,
        options={},
    )


def webhook(
    name: str = "hook.example.com", url: str | None = None, **fields: Any
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": name,
        "clientConfig": {"url": url or f"https://{name}/mutate"},
        "rules": [
            {
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    raw.update(fields)
    return raw


def configuration(name: str, *webhooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": list(webhooks),
    }


def answer(
    review: dict[str, Any],
    patch: list[dict[str, Any]] | None = None,
    allowed: bool = True,
    warnings: list[str] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": allowed}
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        response["warnings"] = warnings
    if status is not None:
        response["status"] = status
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
