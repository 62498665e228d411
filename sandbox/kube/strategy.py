"""Per-kind behaviour behind the generic handlers (the apiserver's "strategies").

``Strategy`` is the generic behaviour; a kind overrides what differs: decoding
defaults, in-tree mutating admission, preparation before storage, validation, whether
a PUT may omit the resourceVersion or create the object, and how ``/status`` splits
the object. All methods are pure functions over dicts (no store access).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sandbox.kube.clone import clone
from sandbox.kube.errors import FieldError

Obj = dict[str, Any]


@dataclass(frozen=True)
class WriteContext:
    """What a strategy may know about the write: when, which subresource, who."""

    now: datetime
    subresource: str = ""
    namespace: str = ""
    #: ``fieldValidation=Strict``: unknown fields are an error, not a warning.
    strict: bool = False
    #: Texts for ``Warning`` headers the write produces (dropped unknown fields).
    warnings: list[str] = field(default_factory=list)


class Strategy:
    """Generic object behaviour."""

    #: PUT without ``metadata.resourceVersion`` is accepted (last write wins).
    unconditional_update = True
    #: PUT of a missing object creates it.
    create_on_update = False
    #: ``status`` is written only through ``/status``.
    status_subresource = False
    #: ``metadata.generation`` starts at 1 and counts spec changes.
    tracks_generation = False

    def to_storage(self, obj: Obj) -> Obj:
        """The stored form of an object written through this resource."""
        return obj

    def from_storage(self, obj: Obj) -> Obj:
        """How this resource shows a stored object."""
        return obj

    def default(self, obj: Obj) -> None:
        """Decoding defaults, applied to every written object (create and update)."""

    def prune(self, obj: Obj, ctx: WriteContext) -> Obj:
        """Drop fields the type does not know (custom resources; built-ins keep all)."""
        return obj

    def admit_in_tree(self, obj: Obj, operation: str) -> None:
        """In-tree mutating admission that runs before webhooks (on CREATE/UPDATE)."""

    def prepare_create(self, obj: Obj, ctx: WriteContext) -> None:
        """After admission, before validation (the storage strategy's PrepareForCreate)."""
        if self.status_subresource:
            self.reset_status_on_create(obj)

    def reset_status_on_create(self, obj: Obj) -> None:
        """What a create keeps of a client-sent status (default: all of it)."""

    def prepare_update(self, new: Obj, old: Obj, ctx: WriteContext) -> Obj:
        """Combine a write with the stored object; returns the object to validate."""
        if not self.status_subresource:
            return new
        if ctx.subresource == "status":
            return self.status_only(new, old)
        return keep_status(new, old)

    def status_only(self, new: Obj, old: Obj) -> Obj:
        """A ``/status`` write: spec from the stored object, new metadata and status."""
        merged = clone(new)
        if "spec" in old:
            merged["spec"] = clone(old["spec"])
        else:
            merged.pop("spec", None)
        return merged

    def validate_create(self, obj: Obj) -> list[FieldError]:
        """Kind-specific validation of a new object."""
        return []

    def validate_update(self, new: Obj, old: Obj, ctx: WriteContext) -> list[FieldError]:
        """Kind-specific validation of a change (defaults to the create rules)."""
        return self.validate_create(new)


def keep_status(new: Obj, old: Obj) -> Obj:
    """A main-resource write: the stored status wins (facts §2.1, §3.6, §7)."""
    merged = clone(new)
    if "status" in old:
        merged["status"] = clone(old["status"])
    else:
        merged.pop("status", None)
    return merged


class StatusStrategy(Strategy):
    """A kind with a ``/status`` subresource."""

    status_subresource = True


class ConditionalStrategy(Strategy):
    """A kind whose PUT must carry a resourceVersion (webhook configurations, CRDs)."""

    unconditional_update = False
    tracks_generation = True
