"""The admission hook shape the API server calls (stand-in until the server's module lands).

Mirrors ``sandbox.kube.admission_api``; replaced by a re-export once it exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class UserInfo:
    """The authenticated caller."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class AdmissionAttributes:
    """One request as mutating admission sees it."""

    operation: str
    group: str
    version: str
    kind: str
    resource: str
    subresource: str
    namespace: str | None
    name: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    user: UserInfo
    dry_run: bool
    options: dict[str, Any] | None


@dataclass
class AdmissionResult:
    """The (possibly mutated) object and warnings for the client."""

    object: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)


class AdmissionError(Exception):
    """Fails the request with this Status."""

    def __init__(self, code: int, status: dict[str, Any]) -> None:
        super().__init__(status.get("message", ""))
        self.code = code
        self.status = status


class MutatingAdmission(Protocol):
    """One mutating admission plugin."""

    async def admit(self, attrs: AdmissionAttributes) -> AdmissionResult: ...
