"""The mutating admission hook the server calls on every write (facts §1.2, §1.3).

The server keeps ``mutating_admission: list[MutatingAdmission]`` and, for each CREATE,
UPDATE (PATCH included) and DELETE of any resource and subresource, calls every plugin
in order with ``AdmissionAttributes``. It does so after decoding, defaulting and the
in-tree plugins, and before the uid and a ``generateName`` name are assigned, so
``object.metadata.uid`` and (for generateName creates) ``name`` are empty. The plugin
decides whether its rules match (subresource included). Each plugin returns the
possibly mutated object and warnings (sent as ``Warning: 299 - "<text>"`` headers), or
raises ``AdmissionError`` to fail the request with its Status. The server then
validates the result. A plugin may also have ``async passes_over(attrs) -> bool``, asked
first with attributes that carry no objects (``object``, ``old_object`` and ``options``
are ``None``): True promises that ``admit`` would return the object unchanged, with no
warning and no error, whatever the objects — the server then skips it and the copies
it would have made for it (as the apiserver sends nothing to a webhook whose rules do
not match). MutatingWebhookConfiguration and ValidatingWebhookConfiguration
objects are never sent to admission. A plugin holding connections open may have
``async aclose()``; the server calls it when it stops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class UserInfo:
    """The authenticated caller (``request.userInfo`` of an AdmissionReview)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class AdmissionAttributes:
    """One admission call."""

    operation: str  # "CREATE" | "UPDATE" | "DELETE"
    group: str
    version: str
    kind: str  # of the object (``Binding`` for pods/binding)
    resource: str  # plural, e.g. "pods"
    subresource: str  # "" for the main resource
    namespace: str | None
    name: str  # "" for a generateName create
    object: dict[str, Any] | None  # already defaulted; None for DELETE
    old_object: dict[str, Any] | None  # None for CREATE
    user: UserInfo
    dry_run: bool
    options: dict[str, Any] | None  # Create/Update/DeleteOptions, apiVersion meta.k8s.io/v1


@dataclass
class AdmissionResult:
    """What a plugin decided: the (possibly mutated) object and warnings."""

    object: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)


class AdmissionError(Exception):
    """Fails the request with HTTP ``code`` and the Status ``status``."""

    def __init__(self, code: int, status: dict[str, Any]) -> None:
        super().__init__(str(status.get("message", "")))
        self.code = code
        self.status = status


class MutatingAdmission(Protocol):
    """A mutating admission plugin."""

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult: ...
