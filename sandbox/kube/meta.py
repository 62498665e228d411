"""Object metadata rules shared by every kind (facts §2.2, §3.1).

Syntax of names, label and annotation keys and values, the 256 KiB annotation cap,
timestamps (``metav1.Time`` and ``MicroTime``), names from ``generateName``, and the
system fields a client may not set.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from typing import Any

from sandbox.kube.errors import FieldError, bad_request, invalid_value, too_long

Obj = dict[str, Any]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_MICRO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")

#: The total size annotations may have (keys plus values, bytes).
ANNOTATIONS_LIMIT = 262144
#: Characters generated names are made of (apimachinery ``rand.String``).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
#: Metadata fields the server owns; a create wipes what the client sent.
SYSTEM_FIELDS = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)
#: Fields of ``metav1.Time`` type and of ``MicroTime`` type, by key name.
TIME_KEYS = frozenset(
    {
        "creationTimestamp",
        "deletionTimestamp",
        "firstTimestamp",
        "lastTimestamp",
        "lastTransitionTime",
        "lastProbeTime",
        "lastHeartbeatTime",
        "startTime",
        "startedAt",
        "finishedAt",
        "timeAdded",
    }
)
MICRO_KEYS = frozenset({"eventTime", "acquireTime", "renewTime", "lastObservedTime"})


def key_problem(key: str) -> str:
    """Why ``key`` is not a valid label/annotation key (``""`` when it is)."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return (
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    if not name or len(name) > 63 or not _NAME_PART.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') "
            "and be at most 63 characters"
        )
    return ""


def label_value_problem(value: str) -> str:
    """Why ``value`` is not a valid label value (``""`` when it is)."""
    if value and (len(value) > 63 or not _NAME_PART.match(value)):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  "
            "or 'my_value',  or '12345', regex used for validation is "
            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )
    return ""


def is_dns_subdomain(name: str) -> bool:
    """RFC 1123 subdomain (most object names)."""
    return 0 < len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))


def is_dns_label(name: str) -> bool:
    """RFC 1123 label (namespace names, service names)."""
    return 0 < len(name) <= 63 and bool(_DNS_LABEL.match(name))


def validate_labels_annotations(meta: Obj) -> list[FieldError]:
    """Syntax of every label and annotation, and the annotations size cap."""
    errors: list[FieldError] = []
    labels = meta.get("labels") or {}
    for key, value in labels.items():
        if problem := key_problem(key):
            errors.append(invalid_value("metadata.labels", key, problem))
        if not isinstance(value, str) or (problem := label_value_problem(value)):
            errors.append(invalid_value("metadata.labels", value, problem or "must be a string"))
    annotations = meta.get("annotations") or {}
    total = 0
    for key, value in annotations.items():
        if problem := key_problem(key.lower()):
            errors.append(invalid_value("metadata.annotations", key, problem))
        total += len(key.encode()) + len(str(value).encode())
    if total > ANNOTATIONS_LIMIT:
        errors.append(
            too_long("metadata.annotations", f"may not be more than {ANNOTATIONS_LIMIT} bytes")
        )
    return errors


def generate_name(base: str) -> str:
    """``base[:58]`` plus five random characters (apiserver ``names.SimpleNameGenerator``)."""
    return base[:58] + "".join(secrets.choice(NAME_ALPHABET) for _ in range(5))


def format_time(instant: datetime) -> str:
    """``metav1.Time``: RFC 3339, UTC, whole seconds."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro(instant: datetime) -> str:
    """``MicroTime``: six fractional digits."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """Parse a ``metav1.Time`` (or MicroTime) string."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def check_times(value: Any, path: str = "") -> None:
    """Reject (400) time fields that a Go decoder could not parse (checklist 31)."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if isinstance(item, str) and key in TIME_KEYS and not _TIME.match(item):
                raise _bad_time(where, item, "2006-01-02T15:04:05Z07:00")
            if isinstance(item, str) and key in MICRO_KEYS and not _MICRO.match(item):
                raise _bad_time(where, item, "2006-01-02T15:04:05.000000Z07:00")
            check_times(item, where)
    elif isinstance(value, list):
        for item in value:
            check_times(item, path)


def _bad_time(where: str, text: str, layout: str) -> Exception:
    return bad_request(
        f'{where}: parsing time "{text}" as "{layout}": cannot parse "{text}" as "{layout}"'
    )
